//! The controller binary: one leader at a time through the Lease, a standby taking over when the
//! leader stops, and a clean exit on SIGTERM.

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kuvryn_sync_tests::cluster::{ControllerProcess, TestCluster, wait_for, workspace_binary};

const LEASE: &str = "kuvryn-sync-controller";

async fn holder(api: &Api<Lease>) -> Result<Option<String>> {
    Ok(api.get_opt(LEASE).await?.and_then(|l| l.spec?.holder_identity))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_a_standby_takes_over_when_it_stops() -> Result<()> {
    let cluster = TestCluster::start().await?;
    let namespace = cluster.namespace("leader").await?;
    let leases: Api<Lease> = Api::namespaced(cluster.client(), &namespace);
    let args = ["--leader-election-namespace", namespace.as_str()];

    let mut first = ControllerProcess::start_as(&cluster, "replica-a", &args)?;
    wait_for("replica-a to hold the Lease", Duration::from_secs(30), || async {
        let h = holder(&leases).await?;
        Ok(((h.as_deref() == Some("replica-a")).then_some(()), format!("{h:?}")))
    })
    .await?;

    let _second = ControllerProcess::start_as(&cluster, "replica-b", &args)?;
    // While replica-a renews, the Lease stays with it (checked over more than one renewal).
    let until = std::time::Instant::now() + Duration::from_secs(12);
    while std::time::Instant::now() < until {
        assert_eq!(
            holder(&leases).await?.as_deref(),
            Some("replica-a"),
            "the standby took the Lease"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let status = first.terminate(Duration::from_secs(20)).await?;
    assert!(status.success(), "the leader exits 0 on SIGTERM, got {status}");
    wait_for("replica-b to take over", Duration::from_secs(30), || async {
        let h = holder(&leases).await?;
        Ok(((h.as_deref() == Some("replica-b")).then_some(()), format!("{h:?}")))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_lease_namespace_is_named_with_what_to_do() -> Result<()> {
    let cluster = TestCluster::start().await?;
    let cache = tempfile::tempdir()?;
    let run = tokio::process::Command::new(workspace_binary("kuvryn-sync-controller")?)
        .env("KUBECONFIG", cluster.kubeconfig())
        .args(["--metrics-bind-address", "127.0.0.1:0"])
        .args(["--leader-election-namespace", "no-such-namespace"])
        .arg("--cache-dir")
        .arg(cache.path())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), run).await??;
    assert!(!output.status.success(), "the controller cannot run without its Lease namespace");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let error = stderr.lines().find(|l| l.starts_with("Error:")).unwrap_or_default();
    for needle in [
        "namespace \"no-such-namespace\" does not exist",
        "kubectl create namespace",
        "--leader-election-namespace",
    ] {
        assert!(error.contains(needle), "{needle:?} missing from the error line: {stderr}");
    }
    Ok(())
}
