//! `kubectl explain` against the installed CRDs: every kind and field explains itself, with the
//! descriptions the Rust doc comments give (the same text `docs/api.md` shows).

use anyhow::{Context, Result, ensure};
use kuvryn_sync_tests::cluster::TestCluster;
use serde_json::Value;

/// The `kubectl explain` paths checked, each with the kind and the field path inside it whose
/// description the output must show (empty for the kind itself).
const PATHS: &[(&str, &str, &str)] = &[
    ("application", "Application", ""),
    ("application.spec.sync", "Application", "spec.sync"),
    ("application.spec.sync.automatic", "Application", "spec.sync.automatic"),
    ("repository.spec.pollInterval", "Repository", "spec.pollInterval"),
    ("revision.status", "Revision", "status"),
    ("imagepolicy.spec.policy", "ImagePolicy", "spec.policy"),
    ("healthcheck.spec", "HealthCheck", "spec"),
    ("notificationsink.spec", "NotificationSink", "spec"),
];

/// The schema of `kind` in the CRDs we install.
fn schema_of(kind: &str) -> Value {
    let crd = kuvryn_sync_api::crds()
        .into_iter()
        .find(|crd| crd.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    let schema = crd.spec.versions[0].schema.clone().and_then(|s| s.open_api_v3_schema);
    serde_json::to_value(schema.expect("schema")).expect("json")
}

/// The description of the property at dotted `path` (the kind's own when empty).
fn description(schema: &Value, path: &str) -> String {
    let node = path.split('.').filter(|p| !p.is_empty()).fold(schema, |node, part| {
        let node = if node["type"] == "array" { &node["items"] } else { node };
        &node["properties"][part]
    });
    node["description"].as_str().unwrap_or_else(|| panic!("{path} has no description")).to_owned()
}

/// Words separated by single spaces, so kubectl's line wrapping does not matter.
fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

async fn explain(cluster: &TestCluster, path: &str) -> Result<String> {
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .args(["explain", path])
        .kill_on_drop(true)
        .output()
        .await
        .context("run kubectl")?;
    ensure!(
        out.status.success(),
        "kubectl explain {path} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_describes_every_kind_and_field() -> Result<()> {
    let cluster = TestCluster::start().await?;
    for (path, kind, field) in PATHS {
        let output = explain(&cluster, path).await?;
        assert!(!output.contains("<no description>"), "kubectl explain {path}:\n{output}");
        let expected = description(&schema_of(kind), field);
        assert!(
            words(&output).contains(&words(&expected)),
            "kubectl explain {path} does not show {expected:?}:\n{output}"
        );
    }

    // The kind's own page lists its top-level fields, each with what it holds.
    let application = words(&explain(&cluster, "application").await?);
    let schema = schema_of("Application");
    for field in ["apiVersion", "kind", "spec", "status"] {
        let text = words(&description(&schema, field));
        assert!(application.contains(&text), "kubectl explain application lacks {field}: {text}");
    }
    // A duration field states its grammar.
    let poll = words(&explain(&cluster, "repository.spec.pollInterval").await?);
    assert!(poll.contains("ms, s, m or h") && poll.contains("1h30m"), "{poll}");
    Ok(())
}
