//! Installing this repository's chart into a test cluster the way `helm install` would: the
//! objects the real Helm engine renders, server-side applied with kubectl (field manager
//! `helm`), and — on the sandbox, which runs no Pods — the real webhook binary started with the
//! chart's serving certificate behind the chart's Service.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;

use crate::cluster::{TestCluster, workspace_binary};
use crate::helm::ChartRender;
use crate::servers::{ServerProcess, free_port};

/// The chart's admission Service (release `kuvryn-sync`).
pub const WEBHOOK_SERVICE: &str = "kuvryn-sync-webhook";
/// The chart's generated serving certificate Secret.
pub const WEBHOOK_TLS_SECRET: &str = "kuvryn-sync-webhook-tls";

/// Run kubectl against `cluster` (with `-f FILE` when given), off the async runtime (the
/// sandbox serves on it); (success, stdout + stderr).
pub async fn kubectl(
    cluster: &TestCluster,
    args: &[&str],
    file: Option<&Path>,
) -> Result<(bool, String)> {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(cluster.kubeconfig()).args(args);
    if let Some(file) = file {
        cmd.arg("-f").arg(file);
    }
    let output = tokio::task::spawn_blocking(move || cmd.output()).await??;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok((output.status.success(), text))
}

/// Server-side apply `objects` with kubectl as field manager `helm`.
pub async fn apply(
    cluster: &TestCluster,
    dir: &Path,
    name: &str,
    objects: &[&Value],
) -> Result<()> {
    let file = dir.join(format!("{name}.yaml"));
    let mut yaml = String::new();
    for object in objects {
        yaml.push_str("---\n");
        yaml.push_str(&kuvryn_sync_core::yaml::to_string(object)?);
    }
    std::fs::write(&file, yaml)?;
    let (ok, out) =
        kubectl(cluster, &["apply", "--server-side", "--field-manager", "helm"], Some(&file))
            .await?;
    if !ok {
        bail!("kubectl apply of {name} failed: {out}");
    }
    Ok(())
}

/// Start the real webhook with the chart's serving certificate and `kubeconfig` (the admin's, or
/// the chart's webhook ServiceAccount's), and point the chart's Service at it (the sandbox
/// resolves Services through this map; a real cluster runs the chart's Pods, and `None` is
/// returned).
pub fn start_webhook(
    cluster: &TestCluster,
    render: &ChartRender,
    namespace: &str,
    dir: &Path,
    kubeconfig: &Path,
) -> Result<Option<ServerProcess>> {
    let Some(sandbox) = cluster.sandbox() else { return Ok(None) };
    let secret = render.get("Secret", WEBHOOK_TLS_SECRET);
    for key in ["tls.crt", "tls.key"] {
        let pem = B64.decode(secret["data"][key].as_str().context(key)?)?;
        std::fs::write(dir.join(key), pem)?;
    }
    let port = free_port()?;
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let mut command = Command::new(workspace_binary("kuvryn-sync-webhook")?);
    command
        .args(["--listen", &addr.to_string(), "--receiver-listen", "127.0.0.1:0"])
        .args(["--metrics-bind-address", "127.0.0.1:0"])
        .arg("--tls-cert-file")
        .arg(dir.join("tls.crt"))
        .arg("--tls-key-file")
        .arg(dir.join("tls.key"))
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST");
    let mut webhook =
        ServerProcess::spawn("kuvryn-sync-webhook", command, &dir.join("webhook.log"))?;
    webhook.wait_for_port(addr, Duration::from_secs(20))?;
    sandbox.map_service(namespace, WEBHOOK_SERVICE, addr);
    Ok(Some(webhook))
}
