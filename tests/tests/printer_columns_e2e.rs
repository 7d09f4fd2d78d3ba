//! `kubectl get applications`, the demo tour's first command, prints the Application CRD's
//! printer columns from the server's Table: READY is the `status` of the condition of type
//! `Ready`, a column whose JSONPath filters the conditions list by type. Nothing runs the
//! controller here: the status is written as a controller would, through `/status`.

use anyhow::{Context, Result, ensure};
use kuvryn_sync_tests::cluster::TestCluster;
use kuvryn_sync_tests::install::kubectl;
use serde_json::json;

/// The cell of `column` in `name`'s row of a `kubectl get` table (kubectl aligns each cell
/// under its header; an empty cell is blank).
fn cell(table: &str, name: &str, column: &str) -> Result<String> {
    let mut lines = table.lines();
    let header = lines.next().context("a header line")?;
    let starts: Vec<usize> = header
        .char_indices()
        .filter(|&(i, c)| c != ' ' && (i == 0 || header.as_bytes()[i - 1] == b' '))
        .map(|(i, _)| i)
        .collect();
    let names: Vec<&str> = header.split_whitespace().collect();
    let at = names
        .iter()
        .position(|h| *h == column)
        .with_context(|| format!("{column} in {names:?}"))?;
    let row = lines
        .find(|l| l.split_whitespace().next() == Some(name))
        .with_context(|| format!("a row for {name} in:\n{table}"))?;
    let end = starts.get(at + 1).copied().unwrap_or(row.len()).min(row.len());
    Ok(row.get(starts[at].min(end)..end).unwrap_or_default().trim().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_applications_shows_the_ready_condition() -> Result<()> {
    let cluster = TestCluster::start().await?;
    let ns = cluster.namespace("printer").await?;
    let app = json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "source": {"repositoryRef": {"name": "apps"}, "path": "web", "render": {"type": "yaml"}},
            "destination": {"namespace": ns},
        },
    });
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("app.json");
    std::fs::write(&file, app.to_string())?;
    let (ok, out) = kubectl(&cluster, &["create"], Some(&file)).await?;
    ensure!(ok, "kubectl create: {out}");

    // Before any status the path selects nothing: kube-apiserver sends no value, kubectl
    // prints a blank cell.
    let get = ["get", "applications", "-n", &ns];
    let (ok, table) = kubectl(&cluster, &get, None).await?;
    ensure!(ok, "kubectl get applications: {table}");
    assert_eq!(cell(&table, "web", "READY")?, "", "{table}");

    let status = json!({"status": {
        "sync": {"state": "Synced"},
        "health": {"state": "Healthy"},
        "conditions": [
            {"type": "Reconciling", "status": "False", "reason": "Succeeded", "message": "done",
                "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Ready", "status": "True", "reason": "Succeeded", "message": "deployed",
                "lastTransitionTime": "2026-01-01T00:00:00Z"},
        ],
    }});
    let patch = status.to_string();
    let args = [
        "patch",
        "application",
        "web",
        "-n",
        &ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch,
    ];
    let (ok, out) = kubectl(&cluster, &args, None).await?;
    ensure!(ok, "kubectl patch --subresource=status: {out}");

    let (ok, table) = kubectl(&cluster, &get, None).await?;
    ensure!(ok, "kubectl get applications: {table}");
    assert_eq!(cell(&table, "web", "READY")?, "True", "{table}");
    assert_eq!(cell(&table, "web", "SYNC")?, "Synced", "{table}");
    assert_eq!(cell(&table, "web", "HEALTH")?, "Healthy", "{table}");
    Ok(())
}
