//! Real servers for end-to-end tests, started in the foreground on free loopback ports, waited for
//! with a deadline and stopped on drop together with every process they started
//! ([`crate::process_tree`]): `git-daemon`, lighttpd + `git http-backend` over https with basic
//! auth, and OpenSSH `sshd`. Plus bare repositories built with the real `git`.
//!
//! The tools come from Debian packages (`lighttpd lighttpd-mod-openssl openssh-server
//! apache2-utils`), installed by `scripts/test`; a missing tool fails with a message saying so.

pub mod git_daemon;
pub mod https;
pub mod registry;
pub mod repo;
pub mod ssh;

use std::{
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::process_tree::{ProcessInfo, STOP_DEADLINE, kill_tree};

pub use git_daemon::GitDaemon;
pub use https::HttpsGit;
pub use repo::BareRepo;
pub use ssh::SshGit;

/// How long a server may take to accept connections.
pub const START_DEADLINE: Duration = Duration::from_secs(15);

/// A free TCP port on 127.0.0.1 (bound and released; servers bind it right after).
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Fail with an install hint when `program` is not there.
pub fn require_program(program: &str, package: &str) -> Result<PathBuf> {
    let path = Path::new(program);
    if path.is_absolute() {
        if path.is_file() {
            return Ok(path.to_owned());
        }
    } else if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join(program);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    bail!("{program} is missing: install the Debian package {package} (scripts/test does)")
}

/// A server process; on drop it and all its descendants are killed and waited for, whether the
/// test passed or failed (a panic unwinds through this destructor).
#[derive(Debug)]
pub struct ServerProcess {
    name: String,
    child: Child,
    log: PathBuf,
}

impl ServerProcess {
    /// Start `command` with stdout and stderr going to `log`.
    pub fn spawn(name: &str, mut command: Command, log: &Path) -> Result<Self> {
        let out =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        command.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = command.spawn().with_context(|| format!("starting {name}"))?;
        Ok(Self { name: name.to_owned(), child, log: log.to_owned() })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kill the server and everything it started now; returns the processes still alive at the
    /// deadline (empty on success).
    pub fn stop(&mut self) -> Vec<ProcessInfo> {
        kill_tree(&mut self.child, STOP_DEADLINE)
    }

    /// Wait until `addr` accepts TCP connections, failing early when the process exits and at
    /// the deadline otherwise; the server's log is part of the error.
    pub fn wait_for_port(&mut self, addr: SocketAddr, deadline: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "{} exited with {status} before accepting connections:\n{}",
                    self.name,
                    self.log_text()
                );
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if start.elapsed() > deadline {
                bail!(
                    "{} did not accept connections on {addr} within {deadline:?}:\n{}",
                    self.name,
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the server wrote so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// A `git` command with a clean environment: no system or user configuration, a given HOME, a
/// fixed author, and none of the machine-wide TLS variables.
pub fn git(home: &Path) -> Command {
    let mut cmd = Command::new("git");
    for var in [
        "GIT_SSL_CAINFO",
        "SSL_CERT_FILE",
        "CURL_CA_BUNDLE",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_SSH_COMMAND",
        "GIT_SSH",
        "SSH_AUTH_SOCK",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_PARAMETERS",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("GIT_AUTHOR_NAME", "Kuvryn Test")
        .env("GIT_AUTHOR_EMAIL", "test@kuvryn.invalid")
        .env("GIT_COMMITTER_NAME", "Kuvryn Test")
        .env("GIT_COMMITTER_EMAIL", "test@kuvryn.invalid")
        .env("GIT_TERMINAL_PROMPT", "0");
    cmd
}

/// Run a command to completion, failing with its output when it fails; returns stdout.
pub fn run(mut cmd: Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed with {}:\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
