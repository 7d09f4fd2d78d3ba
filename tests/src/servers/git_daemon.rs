//! `git daemon` serving every repository under a root over git://.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Result;

use super::{START_DEADLINE, ServerProcess, free_port};

/// A running `git daemon`.
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
        let mut cmd = Command::new("git");
        cmd.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", state.path())
            .arg("daemon")
            .arg("--reuseaddr")
            .arg("--listen=127.0.0.1")
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", root.display()))
            .arg("--export-all")
            .arg(format!("--pid-file={}", state.path().join("pid").display()))
            .arg(root);
        let mut process =
            ServerProcess::spawn("git daemon", cmd, &state.path().join("daemon.log"))?;
        process.wait_for_port(SocketAddr::from(([127, 0, 0, 1], port)), START_DEADLINE)?;
        Ok(Self { root: root.to_owned(), port, process, _state: state })
    }

    /// The git:// URL of `name` (such as `app.git`).
    pub fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}", self.port)
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}
