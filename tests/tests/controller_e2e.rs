//! The controller binary: one leader at a time through the Lease, a standby taking over when the
//! leader stops, and a clean exit on SIGTERM.

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kuvryn_sync_tests::cluster::{ControllerProcess, TestCluster, wait_for};

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
