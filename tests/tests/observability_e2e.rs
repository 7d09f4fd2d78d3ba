//! The dashboard and the alert rules the chart ships use only metrics that exist: a real
//! controller and webhook run against the sandbox, an Application is rolled out (so every kind of
//! work has happened once), both `/metrics` are scraped, and every `kuvryn_sync_*` name in the
//! PrometheusRule's and the dashboard's expressions (rendered by the real Helm engine) must be a
//! sample name in that output. The output never carries an object's name.

use std::collections::BTreeSet;

use anyhow::{Context, Result, ensure};
use kuvryn_sync_tests::application::{config_map, env};
use kuvryn_sync_tests::helm::render_chart;
use kuvryn_sync_tests::webhook::WebhookProcess;
use serde_json::{Value, json};

/// The metric names of the sample lines of an OpenMetrics/Prometheus text.
fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| l.starts_with("kuvryn_sync_"))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// Every `kuvryn_sync_*` name in `expr`.
fn names_in(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("kuvryn_sync_") {
        let tail = &rest[at..];
        let end =
            tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// The expressions of the chart's PrometheusRule and dashboard, rendered with both enabled.
fn chart_expressions() -> Result<Vec<String>> {
    let values =
        json!({"metrics": {"prometheusRule": {"enabled": true}, "dashboard": {"enabled": true}}});
    let render = render_chart(values).map_err(|e| anyhow::anyhow!("chart render: {e}"))?;
    let rule = render.get("PrometheusRule", "kuvryn-sync");
    let mut exprs: Vec<String> = rule["spec"]["groups"]
        .as_array()
        .context("groups")?
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["expr"].as_str().map(str::to_owned))
        .collect();
    let dashboard = render.get("ConfigMap", "kuvryn-sync-dashboard");
    let json: Value =
        serde_json::from_str(dashboard["data"]["kuvryn-sync.json"].as_str().context("json")?)?;
    for panel in json["panels"].as_array().context("panels")? {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().context("expr")?.to_owned());
        }
    }
    ensure!(exprs.len() > 20, "too few expressions found: {exprs:?}");
    Ok(exprs)
}

/// `docs/observability.md` names every exported metric (histograms by their base name) and no
/// metric that is not exported.
fn assert_documented(exported: &BTreeSet<String>) -> Result<()> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/observability.md");
    let doc = std::fs::read_to_string(&path)?;
    let families: BTreeSet<String> = exported
        .iter()
        .map(|name| {
            let base = ["_bucket", "_count", "_sum"].iter().find_map(|s| name.strip_suffix(s));
            match base {
                Some(base) if exported.contains(&format!("{base}_bucket")) => base.to_owned(),
                _ => name.clone(),
            }
        })
        .collect();
    let documented: BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `kuvryn_sync_"))
        .filter_map(|l| l.split('`').next())
        .map(|rest| format!("kuvryn_sync_{rest}"))
        .collect();
    let undocumented: Vec<_> = families.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&families).collect();
    ensure!(undocumented.is_empty(), "not in docs/observability.md: {undocumented:?}");
    ensure!(stale.is_empty(), "in docs/observability.md but not exported: {stale:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_the_alert_rules_use_is_exported() -> Result<()> {
    let env = env("observed", true).await?;
    let webhook = WebhookProcess::start(&env.cluster)?;
    webhook.register(&env.cluster, &env.namespace).await?;
    let commit = env
        .push(&[("apps/web/cm.yaml", config_map("observed-settings", "1", json!({})))], "web")
        .await?;
    env.create_app("observed-web", "apps/web", json!({})).await?;
    env.wait_synced("observed-web", &commit).await?;
    env.wait_ready("observed-web", "True", "Healthy").await?;

    let controller = env.controller_metrics_text().await?;
    let webhook_text = webhook.metrics_text().await?;
    let exported: BTreeSet<String> =
        sample_names(&controller).into_iter().chain(sample_names(&webhook_text)).collect();
    let mut missing = BTreeSet::new();
    for expr in chart_expressions()? {
        for name in names_in(&expr) {
            if !exported.contains(&name) {
                missing.insert(name);
            }
        }
    }
    ensure!(
        missing.is_empty(),
        "used by the chart but not exported: {missing:?}\nexported: {exported:?}"
    );

    // The state gauges saw the Application and the Repository, under closed labels only.
    for line in [
        r#"kuvryn_sync_applications_by_sync_state{state="Synced"} 1"#,
        r#"kuvryn_sync_applications_by_ready{status="True",reason="Healthy"} 1"#,
        r#"kuvryn_sync_repositories_by_ready{status="True",reason="FetchSucceeded"} 1"#,
        r#"kuvryn_sync_reconcile_duration_seconds_count{kind="Application"}"#,
    ] {
        ensure!(controller.contains(line), "{line} missing from\n{controller}");
    }
    assert_documented(&exported)?;
    for name in ["observed-web", "observed-settings", env.namespace.as_str()] {
        ensure!(
            !controller.contains(name) && !webhook_text.contains(name),
            "{name} appears in a label"
        );
    }
    Ok(())
}
