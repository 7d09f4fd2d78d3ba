//! Every server a test starts is gone once its harness is dropped, pass or fail: the server
//! itself and every process it forked (per-connection children of `git-daemon` and `sshd`).
//!
//! Each test records the server's process tree from `/proc` while a client connection is open,
//! drops the harness, then polls `/proc` with a deadline until none of the recorded processes
//! (same PID and start time) and no process whose command line names the server's private files
//! is left. Zombies count as gone: they have exited.

use std::{
    net::TcpStream,
    path::Path,
    time::{Duration, Instant},
};

use kuvryn_sync_tests::{
    process_tree::{ProcessInfo, all_processes, tree},
    servers::{BareRepo, GitDaemon, HttpsGit, SshGit, git, run},
};

/// How long the processes of a dropped server may take to disappear.
const GONE_DEADLINE: Duration = Duration::from_secs(10);

/// The command line of `pid`, arguments joined by spaces.
fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .unwrap_or_default()
}

/// Poll until the tree under `pid` has at least `count` processes; returns it.
fn tree_of_at_least(pid: u32, count: usize) -> Vec<ProcessInfo> {
    let start = Instant::now();
    loop {
        let members = tree(pid);
        if members.len() >= count {
            return members;
        }
        assert!(
            start.elapsed() < GONE_DEADLINE,
            "the server (pid {pid}) did not fork a child for the open connection: {members:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Living processes whose command line contains `marker`.
fn processes_naming(marker: &str) -> Vec<(ProcessInfo, String)> {
    all_processes()
        .into_iter()
        .filter(|p| p.state != 'Z')
        .map(|p| {
            let line = cmdline(p.pid);
            (p, line)
        })
        .filter(|(_, line)| line.contains(marker))
        .collect()
}

/// Poll `/proc` until none of `recorded` is alive and no living process names `marker`.
fn assert_all_gone(server: &str, recorded: &[ProcessInfo], marker: &str) {
    let start = Instant::now();
    loop {
        let alive: Vec<&ProcessInfo> = recorded.iter().filter(|p| p.is_alive()).collect();
        let named = processes_naming(marker);
        if alive.is_empty() && named.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < GONE_DEADLINE,
            "{server}: processes left {GONE_DEADLINE:?} after the harness was dropped: \
             {alive:#?} {named:#?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn repository_root() -> (tempfile::TempDir, BareRepo) {
    let root = tempfile::Builder::new().prefix("ksync-cleanup-").tempdir().expect("tempdir");
    let repo = BareRepo::create(root.path(), "app").expect("bare repository");
    (root, repo)
}

/// `git ls-remote URL` with a clean environment: proves the server answers before it is dropped.
fn ls_remote(home: &Path, url: &str) -> String {
    let mut cmd = git(home);
    cmd.args(["ls-remote", url]);
    run(cmd).expect("git ls-remote")
}

#[test]
fn git_daemon_and_its_connection_children_are_gone_after_drop() {
    let (root, repo) = repository_root();
    let daemon = GitDaemon::start(root.path()).expect("git-daemon");
    assert!(ls_remote(repo.home(), &daemon.url(&repo.name)).contains("refs/heads/main"));
    // An idle connection keeps a per-connection child waiting for its request.
    let _idle = TcpStream::connect(("127.0.0.1", daemon.port)).expect("connect");
    let recorded = tree_of_at_least(daemon.pid(), 2);
    assert!(cmdline(recorded[0].pid).contains("git-daemon"), "{recorded:?}");
    let marker = format!("--port={}", daemon.port);
    drop(daemon);
    assert_all_gone("git-daemon", &recorded, &marker);
}

#[test]
fn a_failing_test_still_stops_its_server() {
    let (root, _repo) = repository_root();
    // The idle connection outlives the panicking closure, so the per-connection child cannot end
    // on its own when the client side closes: only the harness can stop it.
    let idle = std::sync::Mutex::new(None);
    let recorded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let daemon = GitDaemon::start(root.path()).expect("git-daemon");
        let stream = TcpStream::connect(("127.0.0.1", daemon.port)).expect("connect");
        *idle.lock().expect("lock") = Some(stream);
        let recorded = tree_of_at_least(daemon.pid(), 2);
        // The payload carries what was recorded; unwinding drops `daemon`.
        std::panic::panic_any((recorded, daemon.port));
    }))
    .expect_err("the closure panics");
    let (recorded, port) = *recorded.downcast::<(Vec<ProcessInfo>, u16)>().expect("panic payload");
    assert_all_gone("git-daemon (panicking test)", &recorded, &format!("--port={port}"));
    drop(idle);
}

#[test]
fn lighttpd_is_gone_after_drop() {
    let (root, repo) = repository_root();
    let server = HttpsGit::start(root.path(), "alice", "s3cret").expect("lighttpd");
    let mut cmd = git(repo.home());
    cmd.env("GIT_SSL_CAINFO", &server.ca_file)
        .args(["ls-remote", &server.url(&repo.name).replace("https://", "https://alice:s3cret@")]);
    assert!(run(cmd).expect("git ls-remote over https").contains("refs/heads/main"));
    let _idle = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    let recorded = tree_of_at_least(server.pid(), 1);
    let conf = format!("{}", server.ca_file.with_file_name("lighttpd.conf").display());
    assert!(cmdline(recorded[0].pid).contains(&conf), "{recorded:?}");
    drop(server);
    assert_all_gone("lighttpd", &recorded, &conf);
}

#[test]
fn sshd_and_its_connection_children_are_gone_after_drop() {
    let (root, repo) = repository_root();
    let server = SshGit::start(root.path()).expect("sshd");
    let mut cmd = git(repo.home());
    cmd.env("GIT_SSH_COMMAND", server.git_ssh_command())
        .args(["ls-remote", &server.url(&repo.name)]);
    assert!(run(cmd).expect("git ls-remote over ssh").contains("refs/heads/main"));
    // An unauthenticated connection keeps a per-connection sshd child waiting for the banner.
    let _idle = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    let recorded = tree_of_at_least(server.pid(), 2);
    let conf = format!("{}", server.known_hosts_file.with_file_name("sshd_config").display());
    assert!(cmdline(recorded[0].pid).contains(&conf), "{recorded:?}");
    drop(server);
    assert_all_gone("sshd", &recorded, &conf);
}
