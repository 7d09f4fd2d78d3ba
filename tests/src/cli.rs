//! The real `ksync` binary run as a process against a test [`Env`], with its exit code and
//! output.

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::application::Env;
use crate::cluster::workspace_binary;

/// `ksync` pointed at an [`Env`]'s cluster and namespace.
#[derive(Debug, Clone)]
pub struct Ksync {
    binary: PathBuf,
    kubeconfig: PathBuf,
    namespace: String,
}

/// How one run ended.
#[derive(Debug, Clone)]
pub struct Run {
    /// The exit code (-1 when killed by a signal).
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ksync {
    /// `ksync --kubeconfig <env's> -n <env's namespace>`.
    pub fn new(env: &Env) -> Result<Self> {
        Ok(Self {
            binary: workspace_binary("ksync")?,
            kubeconfig: env.cluster.kubeconfig().to_owned(),
            namespace: env.namespace.clone(),
        })
    }

    /// `ksync ARGS` against this cluster and namespace, with standard input closed (not a
    /// terminal) and neither `NO_COLOR` nor `KUBECONFIG` inherited.
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.binary);
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["-n", &self.namespace])
            .args(args)
            .env_remove("NO_COLOR")
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null());
        command
    }

    /// Run `ksync ARGS` with standard input closed (not a terminal) and `NO_COLOR` unset.
    pub async fn run(&self, args: &[&str]) -> Result<Run> {
        let output = self.command(args).output().await.context("run ksync")?;
        Ok(Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    /// Start `ksync ARGS` (a watch) with its standard output piped; killed when dropped.
    pub fn spawn(&self, args: &[&str]) -> Result<tokio::process::Child> {
        self.command(args).stdout(Stdio::piped()).kill_on_drop(true).spawn().context("start ksync")
    }

    /// Run `ksync ARGS` and require exit code 0.
    pub async fn ok(&self, args: &[&str]) -> Result<String> {
        let run = self.run(args).await?;
        anyhow::ensure!(
            run.code == 0,
            "ksync {args:?} exited {}: {}{}",
            run.code,
            run.stdout,
            run.stderr
        );
        Ok(run.stdout)
    }

    /// Run `ksync ARGS -o json` and parse its output.
    pub async fn json(&self, args: &[&str]) -> Result<Value> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let stdout = self.ok(&all).await?;
        serde_json::from_str(&stdout).with_context(|| format!("ksync {all:?}: not JSON: {stdout}"))
    }
}
