//! The chart's CRD upgrade step (charts/kuvryn-sync/README.md#crds, docs/getting-started.md):
//! Helm installs `crds/` once and never upgrades it, so before `helm upgrade` the user runs
//! `kubectl apply --server-side --force-conflicts -f charts/kuvryn-sync/crds/`. Here an older copy
//! of the CRDs (the Application CRD without its printer columns) is written the way Helm's first
//! install writes them (a plain update by manager `helm`), the step runs, and the API server
//! serves the current definition again.

use anyhow::{Context, Result, ensure};
use kuvryn_sync_tests::cluster::TestCluster;
use kuvryn_sync_tests::helm::chart_dir;
use kuvryn_sync_tests::install::kubectl;
use serde_json::Value;

const APPLICATIONS: &str = "applications.sync.kuvryn.io";

async fn printer_columns(cluster: &TestCluster) -> Result<Value> {
    let (ok, out) = kubectl(cluster, &["get", "crd", APPLICATIONS, "-o", "json"], None).await?;
    ensure!(ok, "kubectl get crd: {out}");
    let crd: Value = serde_json::from_str(&out)?;
    Ok(crd["spec"]["versions"][0]["additionalPrinterColumns"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_crd_upgrade_step_brings_the_current_definitions() -> Result<()> {
    let cluster = TestCluster::start().await?;
    let crds = chart_dir().join("crds");
    let file = crds.join("kuvryn-sync-crds.yaml");
    let docs = kuvryn_sync_core::yaml::documents(&std::fs::read_to_string(&file)?)?;
    let current = docs
        .iter()
        .find(|d| d["metadata"]["name"] == APPLICATIONS)
        .context("the Application CRD")?;
    let wanted = current["spec"]["versions"][0]["additionalPrinterColumns"].clone();
    ensure!(wanted.as_array().is_some_and(|c| !c.is_empty()), "the CRD has printer columns");

    // The previous release's definition, written as Helm writes crds/ (an update, not an apply).
    let mut older = current.clone();
    older["spec"]["versions"][0]
        .as_object_mut()
        .context("version")?
        .remove("additionalPrinterColumns");
    let dir = tempfile::tempdir()?;
    let older_file = dir.path().join("older.json");
    std::fs::write(&older_file, serde_json::to_string(&older)?)?;
    let (ok, out) =
        kubectl(&cluster, &["replace", "--field-manager", "helm"], Some(&older_file)).await?;
    ensure!(ok, "writing the older CRD: {out}");
    ensure!(printer_columns(&cluster).await?.is_null(), "the older CRD is served");

    // The documented step.
    let step = ["apply", "--server-side", "--force-conflicts"];
    let (ok, out) = kubectl(&cluster, &step, Some(&crds)).await?;
    ensure!(ok, "kubectl apply --server-side --force-conflicts -f crds/: {out}");
    assert_eq!(
        printer_columns(&cluster).await?,
        wanted,
        "the current CRD is served after the step"
    );
    Ok(())
}
