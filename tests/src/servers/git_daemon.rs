//! `git-daemon` serving every repository under a root over git://.
//!
//! It runs `$(git --exec-path)/git-daemon` itself rather than `git daemon`: the `git` wrapper
//! would only fork that program and wait, and killing the wrapper left the daemon running.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Result;

use super::{START_DEADLINE, ServerProcess, free_port, run};

/// A running `git-daemon`.
#[derive(Debug)]
pub struct GitDaemon {
    /// The served root.
    pub root: PathBuf,
    /// The port on 127.0.0.1.
    pub port: u16,
    process: ServerProcess,
    _state: tempfile::TempDir,
}

impl GitDaemon {
    /// Serve `root` (all repositories exported) on a free port.
    pub fn start(root: &Path) -> Result<Self> {
        let state = tempfile::Builder::new().prefix("ksync-git-daemon-").tempdir()?;
        let port = free_port()?;
        let exec_path = run({
            let mut c = Command::new("git");
            c.arg("--exec-path");
            c
        })?;
        let mut cmd = Command::new(Path::new(exec_path.trim()).join("git-daemon"));
        cmd.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", state.path())
            .arg("--reuseaddr")
            .arg("--listen=127.0.0.1")
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", root.display()))
            .arg("--export-all")
            .arg(format!("--pid-file={}", state.path().join("pid").display()))
            .arg(root);
        let mut process =
            ServerProcess::spawn("git-daemon", cmd, &state.path().join("daemon.log"))?;
        process.wait_for_port(SocketAddr::from(([127, 0, 0, 1], port)), START_DEADLINE)?;
        Ok(Self { root: root.to_owned(), port, process, _state: state })
    }

    /// The git:// URL of `name` (such as `app.git`).
    pub fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}", self.port)
    }

    /// The daemon's process id (the listening `git-daemon` itself).
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}
