//! Installing the chart does not block Applications: the chart's objects, rendered by the real
//! Helm engine, applied to the API server with the real webhook running behind the chart's
//! Service, and then an Application created with kubectl. As a control, the configurations of a
//! chart that registered the unserved admission paths make the same create fail closed.
//!
//! Against a real cluster (`KSYNC_E2E_KUBECONFIG`) the webhook is not reachable from the API
//! server, so the control fails closed there too, and the main case holds as long as the chart
//! registers nothing the webhook does not serve.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use kuvryn_sync_tests::cluster::{TestCluster, workspace_binary};
use kuvryn_sync_tests::helm::{ChartRender, chart_dir, render_chart_in};
use kuvryn_sync_tests::servers::{ServerProcess, free_port};
use serde_json::{Value, json};

const WEBHOOK_SERVICE: &str = "kuvryn-sync-webhook";
const WEBHOOK_TLS_SECRET: &str = "kuvryn-sync-webhook-tls";

/// Run kubectl against `cluster`, off the async runtime (the sandbox serves on it).
async fn kubectl(
    cluster: &TestCluster,
    args: &[&str],
    stdin_file: Option<&Path>,
) -> Result<(bool, String)> {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(cluster.kubeconfig()).args(args);
    if let Some(file) = stdin_file {
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

/// Server-side apply `objects` with kubectl.
async fn apply(cluster: &TestCluster, dir: &Path, name: &str, objects: &[&Value]) -> Result<()> {
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

/// Start the real webhook with the chart's serving certificate and point the chart's Service at
/// it (the sandbox resolves Services through this map; a real cluster runs the chart's Pods).
fn start_webhook(
    cluster: &TestCluster,
    render: &ChartRender,
    namespace: &str,
    dir: &Path,
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
        .arg(dir.join("tls.key"));
    let mut webhook =
        ServerProcess::spawn("kuvryn-sync-webhook", command, &dir.join("webhook.log"))?;
    webhook.wait_for_port(addr, Duration::from_secs(20))?;
    sandbox.map_service(namespace, WEBHOOK_SERVICE, addr);
    Ok(Some(webhook))
}

fn application(name: &str) -> Value {
    json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name},
        "spec": {
            "source": {"repositoryRef": {"name": "platform"}, "path": "apps/web",
                       "render": {"type": "yaml"}},
            "destination": {"namespace": "web"},
        },
    })
}

async fn create_application(
    cluster: &TestCluster,
    namespace: &str,
    dir: &Path,
    name: &str,
) -> Result<(bool, String)> {
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, kuvryn_sync_core::yaml::to_string(&application(name))?)?;
    kubectl(cluster, &["create", "-n", namespace], Some(&file)).await
}

fn admission_configurations(render: &ChartRender) -> Vec<&Value> {
    let mut all = render.of_kind("ValidatingWebhookConfiguration");
    all.extend(render.of_kind("MutatingWebhookConfiguration"));
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installing_the_chart_does_not_block_creating_an_application() -> Result<()> {
    let cluster = TestCluster::start().await?;
    let namespace = cluster.namespace("chart").await?;
    let dir = tempfile::tempdir()?;

    let render = render_chart_in(&chart_dir(), &namespace, json!({}))?;
    let objects: Vec<&Value> = render.docs.iter().map(|d| &d.object).collect();
    apply(&cluster, dir.path(), "chart", &objects).await?;
    let _webhook = start_webhook(&cluster, &render, &namespace, dir.path())?;

    let (ok, out) = create_application(&cluster, &namespace, dir.path(), "web").await?;
    assert!(ok, "creating an Application after installing the chart: {out}");

    // Control: the same configurations pointed at a path the webhook does not serve.
    let configurations = admission_configurations(&render);
    assert_eq!(configurations.len(), 2, "the chart registers both configurations");
    let configurations: Vec<Value> = configurations
        .into_iter()
        .map(|cfg| {
            let mut cfg = cfg.clone();
            let name = cfg["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            cfg["metadata"]["name"] = json!(format!("{name}-unserved"));
            for hook in cfg["webhooks"].as_array_mut().into_iter().flatten() {
                hook["clientConfig"]["service"]["path"] = json!("/admit/unserved");
                let hook_name = hook["name"].as_str().unwrap_or_default().to_owned();
                hook["name"] = json!(format!("unserved.{hook_name}"));
            }
            cfg
        })
        .collect();
    apply(&cluster, dir.path(), "unserved", &configurations.iter().collect::<Vec<_>>()).await?;
    let (ok, out) = create_application(&cluster, &namespace, dir.path(), "api").await?;
    assert!(!ok, "an unserved fail-closed webhook must block the create: {out}");
    assert!(
        out.contains("unserved.admit.applications.sync.kuvryn.io"),
        "the denial names the webhook: {out}"
    );
    Ok(())
}
