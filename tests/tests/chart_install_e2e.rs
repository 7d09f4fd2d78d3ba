//! Installing the chart does not block Applications: the chart's objects, rendered by the real
//! Helm engine, applied to the API server with the real webhook running behind the chart's
//! Service, and then an Application created with kubectl. As a control, the configurations of a
//! chart that registered the unserved admission paths make the same create fail closed.
//!
//! Against a real cluster (`KSYNC_E2E_KUBECONFIG`) the webhook is not reachable from the API
//! server, so the control fails closed there too, and the main case holds as long as the chart
//! registers nothing the webhook does not serve.

use std::path::Path;

use anyhow::Result;
use kuvryn_sync_tests::cluster::TestCluster;
use kuvryn_sync_tests::helm::{ChartRender, chart_dir, render_chart_in};
use kuvryn_sync_tests::install::{apply, kubectl, start_webhook};
use serde_json::{Value, json};

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
    let _webhook = start_webhook(&cluster, &render, &namespace, dir.path(), cluster.kubeconfig())?;

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
