//! The Git source against real servers: git daemon, lighttpd + git http-backend over https with
//! basic auth, and sshd with a pinned host key.

use std::{
    collections::HashSet, os::unix::fs::PermissionsExt, path::Path, sync::Arc, time::Duration,
};

use kuvryn_sync_api::FailureReason;
use kuvryn_sync_source::git::{
    BasicAuth, FetchRequest, GitAuth, GitCache, GitError, REMOTE_HEAD, SshAuth,
};
use kuvryn_sync_tests::servers::{BareRepo, GitDaemon, HttpsGit, SshGit};
use secrecy::SecretString;

const CANARY: &str = "canary-pw-7c1e9b3d5a";
const GOOD_PASSWORD: &str = "s3cret-pass-4d9a1f";

fn cache(dir: &Path) -> GitCache {
    kuvryn_sync_runtime::tls::install_crypto_provider();
    GitCache::new(dir.join("cache"), 1 << 30).expect("cache")
}

fn request(url: &str, revision: &str) -> FetchRequest {
    let mut req = FetchRequest::new(url, revision);
    req.timeout = Duration::from_secs(30);
    req
}

struct Daemon {
    dir: tempfile::TempDir,
    repo: BareRepo,
    daemon: GitDaemon,
}

fn daemon_with_repo(name: &str) -> Daemon {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("srv");
    std::fs::create_dir_all(&root).expect("root");
    let repo = BareRepo::create(&root, name).expect("repo");
    let daemon = GitDaemon::start(&root).expect("git daemon");
    Daemon { dir, repo, daemon }
}

#[test]
fn git_daemon_poll_with_nothing_new_lists_refs_once_and_fetches_nothing() {
    let d = daemon_with_repo("app");
    let cache = cache(d.dir.path());
    let req = request(&d.daemon.url(&d.repo.name), "main");

    let first = cache.resolve(&req).expect("first resolve");
    assert_eq!(first.commit, d.repo.head().expect("head"));
    assert!(first.fetched);
    assert_eq!(first.refs_listed, 1);

    let before = cache.stats();
    let poll = cache.resolve(&req).expect("poll");
    let after = cache.stats();
    assert_eq!(poll.commit, first.commit);
    assert!(!poll.fetched, "a poll with nothing new must not fetch");
    assert_eq!(poll.refs_listed, 1);
    assert_eq!(after.ref_listings - before.ref_listings, 1);
    assert_eq!(after.fetches, before.fetches);

    // A new commit is noticed and fetched.
    let second = d.repo.commit(&[("app.yaml", "v: 2\n")], "second").expect("commit");
    let moved = cache.resolve(&req).expect("resolve after push");
    assert_eq!(moved.commit, second);
    assert!(moved.fetched);
    assert_eq!(cache.stats().fetches, before.fetches + 1);
    let tree = cache.tree(&req, &moved.commit).expect("tree");
    assert_eq!(std::fs::read_to_string(tree.path().join("app.yaml")).expect("file"), "v: 2\n");
}

#[test]
fn branches_tags_and_exact_commits_resolve_to_commits() {
    let d = daemon_with_repo("revs");
    let first = d.repo.head().expect("head");
    let annotated_tag = d.repo.tag("v1.0.0", true).expect("annotated tag");
    assert_ne!(annotated_tag, first, "an annotated tag is its own object");
    let second = d.repo.commit(&[("b.txt", "b\n")], "second").expect("commit");
    d.repo.tag("light", false).expect("lightweight tag");
    d.repo.branch("feature").expect("branch");
    let feature = d.repo.commit(&[("f.txt", "f\n")], "feature").expect("commit");
    d.repo.checkout("main").expect("checkout");
    let third = d.repo.commit(&[("c.txt", "c\n")], "third").expect("commit");

    let cache = cache(d.dir.path());
    let url = d.daemon.url(&d.repo.name);
    let resolve = |rev: &str| cache.resolve(&request(&url, rev));

    assert_eq!(resolve("main").expect("main").commit, third);
    // The remote's default branch, for Repositories without spec.git.revision.
    assert_eq!(resolve(REMOTE_HEAD).expect("remote HEAD").commit, third);
    assert_eq!(resolve("refs/heads/main").expect("full ref").commit, third);
    assert_eq!(resolve("feature").expect("feature").commit, feature);
    assert_eq!(resolve("v1.0.0").expect("annotated tag peeled").commit, first);
    assert_eq!(resolve("light").expect("lightweight tag").commit, second);

    // An exact commit already in the cache needs no network at all.
    let exact = resolve(&third).expect("exact cached commit");
    assert_eq!(
        (exact.commit.as_str(), exact.fetched, exact.refs_listed),
        (third.as_str(), false, 0)
    );

    // An exact commit that is no branch tip, into a fresh cache.
    kuvryn_sync_runtime::tls::install_crypto_provider();
    let fresh = GitCache::new(d.dir.path().join("fresh"), 1 << 30).expect("cache");
    let older = fresh.resolve(&request(&url, &second)).expect("exact older commit");
    assert_eq!(older.commit, second);
    assert!(older.fetched);
    let tree = fresh.tree(&request(&url, &second), &second).expect("tree of older commit");
    assert!(tree.path().join("b.txt").is_file());
    assert!(!tree.path().join("c.txt").exists());

    let missing = resolve("no-such-branch").expect_err("unknown revision");
    assert!(matches!(missing, GitError::RevisionNotFound { .. }), "{missing:?}");
    assert_eq!(missing.reason(), FailureReason::SourceFailure);
    assert!(missing.to_string().contains("no-such-branch"), "{missing}");

    let flag = resolve("--upload-pack=touch /tmp/x").expect_err("flag-like revision");
    assert_eq!(flag.reason(), FailureReason::SourceFailure);
}

fn https_setup(name: &str) -> (tempfile::TempDir, BareRepo, HttpsGit) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("srv");
    std::fs::create_dir_all(&root).expect("root");
    let repo = BareRepo::create(&root, name).expect("repo");
    let server = HttpsGit::start(&root, "bot", GOOD_PASSWORD).expect("https server");
    (dir, repo, server)
}

fn https_request(server: &HttpsGit, repo: &BareRepo, password: &str) -> FetchRequest {
    let mut req = request(&server.url(&repo.name), "main");
    req.credentials = Some(GitAuth::Basic(BasicAuth {
        username: "bot".into(),
        password: SecretString::from(password),
        ca_bundle: None,
    }));
    req.cache_identity = format!("ns/creds/{password}");
    req.ca_certs_pem = Some(server.ca_pem.clone());
    req
}

#[test]
fn https_basic_auth_clones_and_refreshes_and_a_wrong_password_is_an_authentication_failure() {
    let (dir, repo, server) = https_setup("private");
    let cache = cache(dir.path());
    let req = https_request(&server, &repo, GOOD_PASSWORD);

    let first = cache.resolve(&req).expect("https resolve");
    assert_eq!(first.commit, repo.head().expect("head"));
    assert!(first.fetched);
    let poll = cache.resolve(&req).expect("https poll");
    assert!(!poll.fetched);
    assert_eq!(poll.refs_listed, 1);
    let next = repo.commit(&[("x.yaml", "x\n")], "next").expect("commit");
    let moved = cache.resolve(&req).expect("https refresh");
    assert_eq!((moved.commit.as_str(), moved.fetched), (next.as_str(), true));

    let wrong = cache.resolve(&https_request(&server, &repo, CANARY)).expect_err("wrong password");
    assert_eq!(wrong.reason(), FailureReason::AuthenticationFailure, "{wrong}");
    assert!(!wrong.to_string().contains(CANARY), "{wrong}");
    assert!(!format!("{wrong:?}").contains(CANARY), "{wrong:?}");

    let mut anonymous = https_request(&server, &repo, GOOD_PASSWORD);
    anonymous.credentials = None;
    anonymous.cache_identity = "anonymous".into();
    let none = cache.resolve(&anonymous).expect_err("no credentials");
    assert_eq!(none.reason(), FailureReason::AuthenticationFailure, "{none}");

    // Without the test CA the server is not trusted.
    let mut untrusted = https_request(&server, &repo, GOOD_PASSWORD);
    untrusted.ca_certs_pem = None;
    untrusted.cache_identity = "untrusted".into();
    let tls = cache.resolve(&untrusted).expect_err("untrusted certificate");
    assert_eq!(tls.reason(), FailureReason::SourceFailure, "{tls}");
    assert!(!tls.to_string().contains(GOOD_PASSWORD), "{tls}");
}

fn ssh_setup(name: &str) -> (tempfile::TempDir, BareRepo, SshGit) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("srv");
    std::fs::create_dir_all(&root).expect("root");
    let repo = BareRepo::create(&root, name).expect("repo");
    let server = SshGit::start(&root).expect("sshd");
    (dir, repo, server)
}

fn ssh_request(server: &SshGit, repo: &BareRepo, key: &str, known_hosts: &str) -> FetchRequest {
    let mut req = request(&server.url(&repo.name), "main");
    req.credentials = Some(GitAuth::Ssh(SshAuth {
        private_key: SecretString::from(key),
        known_hosts: known_hosts.to_owned(),
    }));
    req.cache_identity = format!("ssh/{}", known_hosts.len());
    req
}

#[test]
fn ssh_with_a_pinned_host_key_clones_and_refreshes_and_a_wrong_host_key_is_refused() {
    let (dir, repo, server) = ssh_setup("viassh");
    let cache = cache(dir.path());
    let req = ssh_request(&server, &repo, &server.client_key, &server.known_hosts);

    let first = cache.resolve(&req).expect("ssh resolve");
    assert_eq!(first.commit, repo.head().expect("head"));
    assert!(first.fetched);
    let poll = cache.resolve(&req).expect("ssh poll");
    assert!(!poll.fetched);
    let next = repo.commit(&[("s.yaml", "s\n")], "next").expect("commit");
    assert_eq!(cache.resolve(&req).expect("ssh refresh").commit, next);

    let wrong_host = ssh_request(
        &server,
        &repo,
        &server.client_key,
        &server.wrong_known_hosts().expect("other key"),
    );
    let err = cache.resolve(&wrong_host).expect_err("wrong host key");
    assert_eq!(err.reason(), FailureReason::AuthenticationFailure, "{err}");
    let key_line = server.client_key.lines().nth(1).expect("key body");
    assert!(!err.to_string().contains(key_line), "{err}");

    let other_dir = tempfile::tempdir().expect("tempdir");
    let (other_key, _) =
        kuvryn_sync_tests::servers::ssh::keygen(other_dir.path(), "k").expect("keygen");
    let mut wrong_key = ssh_request(&server, &repo, &other_key, &server.known_hosts);
    wrong_key.cache_identity = "other-key".into();
    let err = cache.resolve(&wrong_key).expect_err("unauthorized key");
    assert_eq!(err.reason(), FailureReason::AuthenticationFailure, "{err}");
    assert!(!err.to_string().contains(other_key.lines().nth(1).expect("body")), "{err}");
}

#[test]
fn two_cache_identities_never_share_fetched_data() {
    let d = daemon_with_repo("shared");
    let cache = cache(d.dir.path());
    let mut a = request(&d.daemon.url(&d.repo.name), "main");
    a.cache_identity = "team-a/secret".into();
    let mut b = a.clone();
    b.cache_identity = "team-b/secret".into();
    assert_ne!(cache.entry_dir(&a), cache.entry_dir(&b));
    assert!(cache.resolve(&a).expect("a").fetched);
    let rb = cache.resolve(&b).expect("b");
    assert!(rb.fetched, "identity b must fetch on its own, not reuse a's objects");
    assert!(cache.entry_dir(&a).join("repo").is_dir());
    assert!(cache.entry_dir(&b).join("repo").is_dir());
}

#[test]
fn the_size_bound_evicts_least_recently_used_data_but_not_trees_in_use() {
    let d = daemon_with_repo("big");
    let other = BareRepo::create(&d.daemon.root, "other").expect("repo");
    // Tiny bound: everything but what is in use or current must go.
    kuvryn_sync_runtime::tls::install_crypto_provider();
    let cache = GitCache::new(d.dir.path().join("cache"), 1).expect("cache");
    let req_other = request(&d.daemon.url(&other.name), "main");
    let req = request(&d.daemon.url(&d.repo.name), "main");

    cache.resolve(&req_other).expect("other");
    assert!(cache.entry_dir(&req_other).is_dir());
    let first = cache.resolve(&req).expect("big");
    assert!(!cache.entry_dir(&req_other).exists(), "the least recently used repository is evicted");
    assert!(cache.entry_dir(&req).join("repo").is_dir(), "the current repository stays");

    let held = cache.tree(&req, &first.commit).expect("tree");
    let second = d.repo.commit(&[("more.txt", "more\n")], "more").expect("commit");
    let r2 = cache.resolve(&req).expect("resolve second");
    assert_eq!(r2.commit, second);
    let newer = cache.tree(&req, &second).expect("second tree");
    assert!(held.path().join("README.md").is_file(), "a tree in use is never evicted");
    drop(held);
    let third = d.repo.commit(&[("third.txt", "3\n")], "third").expect("commit");
    let r3 = cache.resolve(&req).expect("resolve third");
    let _latest = cache.tree(&req, &r3.commit).expect("third tree");
    assert_eq!(r3.commit, third);
    let first_tree = cache.entry_dir(&req).join("trees").join(&first.commit);
    assert!(!first_tree.exists(), "an unused old tree is evicted");
    drop(newer);
    assert!(cache.stats().evictions >= 2, "{:?}", cache.stats());
}

#[test]
fn concurrent_resolves_of_the_same_key_fetch_once_and_agree() {
    let d = daemon_with_repo("busy");
    let cache = Arc::new(cache(d.dir.path()));
    let req = request(&d.daemon.url(&d.repo.name), "main");
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let cache = cache.clone();
            let req = req.clone();
            std::thread::spawn(move || {
                let resolved = cache.resolve(&req).expect("resolve");
                let tree = cache.tree(&req, &resolved.commit).expect("tree");
                (resolved, std::fs::read_to_string(tree.path().join("README.md")).expect("readme"))
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().expect("thread")).collect();
    let commits: HashSet<_> = results.iter().map(|(r, _)| r.commit.clone()).collect();
    assert_eq!(commits.len(), 1);
    assert_eq!(results.iter().filter(|(r, _)| r.fetched).count(), 1, "exactly one fetch");
    assert!(results.iter().all(|(_, readme)| readme == "hello\n"));
    assert_eq!(cache.stats().fetches, 1);
    assert_eq!(cache.stats().trees_written, 1);
}

#[test]
fn checked_out_tree_matches_the_commit_and_is_read_only() {
    let d = daemon_with_repo("content");
    d.repo
        .commit(
            &[
                ("apps/web/deploy.yaml", "kind: Deployment\n"),
                ("apps/web/values.yaml", "replicas: 2\n"),
            ],
            "apps",
        )
        .expect("commit");
    let commit = d.repo.commit_symlink("link", "apps/web", "symlink").expect("symlink commit");
    let cache = cache(d.dir.path());
    let req = request(&d.daemon.url(&d.repo.name), "main");
    let resolved = cache.resolve(&req).expect("resolve");
    assert_eq!(resolved.commit, commit);
    let tree = cache.tree(&req, &commit).expect("tree");
    assert_eq!(tree.commit(), commit);
    let root = tree.path();
    assert_eq!(
        std::fs::read_to_string(root.join("apps/web/deploy.yaml")).expect("deploy"),
        "kind: Deployment\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("apps/web/values.yaml")).expect("values"),
        "replicas: 2\n"
    );
    assert_eq!(std::fs::read_to_string(root.join("README.md")).expect("readme"), "hello\n");
    let link = root.join("link");
    assert!(link.symlink_metadata().expect("link").file_type().is_symlink());
    assert_eq!(std::fs::read_link(&link).expect("target"), Path::new("apps/web"));
    // Exactly the committed files, nothing else (no .git).
    let listed: HashSet<String> = std::fs::read_dir(root)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        listed,
        HashSet::from(["README.md".to_owned(), "apps".to_owned(), "link".to_owned()])
    );
    for path in [
        root.to_owned(),
        root.join("apps"),
        root.join("apps/web"),
        root.join("apps/web/deploy.yaml"),
    ] {
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o222, 0, "{} is writable ({mode:o})", path.display());
    }
    // Written once per commit.
    let again = cache.tree(&req, &commit).expect("tree again");
    assert_eq!(again.path(), root);
    assert_eq!(cache.stats().trees_written, 1);
}

#[test]
fn secret_values_never_appear_in_error_messages() {
    // An unreachable https remote and a broken ssh key both carrying the canary.
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = cache(dir.path());
    let port = kuvryn_sync_tests::servers::free_port().expect("port");
    let mut req = request(&format!("https://127.0.0.1:{port}/git/x.git"), "main");
    req.credentials = Some(GitAuth::Basic(BasicAuth {
        username: "bot".into(),
        password: SecretString::from(CANARY),
        ca_bundle: None,
    }));
    let err = cache.resolve(&req).expect_err("nothing listens there");
    assert_eq!(err.reason(), FailureReason::SourceFailure, "{err}");
    assert!(!err.to_string().contains(CANARY), "{err}");

    let mut ssh = request(&format!("ssh://git@127.0.0.1:{port}/x.git"), "main");
    ssh.credentials = Some(GitAuth::Ssh(SshAuth {
        private_key: SecretString::from(format!(
            "-----BEGIN OPENSSH PRIVATE KEY-----\n{CANARY}\n-----END OPENSSH PRIVATE KEY-----"
        )),
        known_hosts: String::new(),
    }));
    let err = cache.resolve(&ssh).expect_err("nothing listens there");
    assert!(!err.to_string().contains(CANARY), "{err}");
    assert!(!format!("{err:?}").contains(CANARY), "{err:?}");
}

#[test]
fn redirects_to_another_host_are_not_followed_so_credentials_stay_home() {
    use std::{
        io::{Read, Write},
        net::TcpListener,
        sync::atomic::{AtomicUsize, Ordering},
    };
    let elsewhere = TcpListener::bind("127.0.0.1:0").expect("bind");
    let elsewhere_port = elsewhere.local_addr().expect("addr").port();
    elsewhere.set_nonblocking(true).expect("nonblocking");
    let redirector = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = redirector.local_addr().expect("addr").port();
    let served = Arc::new(AtomicUsize::new(0));
    let served_in_thread = served.clone();
    std::thread::spawn(move || {
        for stream in redirector.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            served_in_thread.fetch_add(1, Ordering::SeqCst);
            let reply = format!(
                "HTTP/1.1 302 Found\r\nLocation: http://localhost:{elsewhere_port}/git/x.git/info/refs?service=git-upload-pack\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = cache(dir.path());
    let mut req = request(&format!("http://127.0.0.1:{port}/git/x.git"), "main");
    req.credentials = Some(GitAuth::Basic(BasicAuth {
        username: "bot".into(),
        password: SecretString::from(CANARY),
        ca_bundle: None,
    }));
    let err = cache.resolve(&req).expect_err("a redirect is not followed");
    assert!(served.load(Ordering::SeqCst) >= 1, "the redirector was asked");
    assert!(
        elsewhere.accept().is_err(),
        "the other host must never be contacted (with or without credentials)"
    );
    assert!(!err.to_string().contains(CANARY), "{err}");
}
