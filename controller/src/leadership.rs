//! Who reconciles: one leader on a Lease (unsharded, or one label shard), or automatic sharding
//! where every replica claims shards through per-shard Leases. Either way the reconcilers run
//! only while this replica holds the right to, and stop before it gives that up.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kube::api::Api;
use kube_lease_manager::LeaseManagerBuilder;
use kuvryn_sync_api::CONTROLLER_NAME;

use crate::args::Args;
use crate::reconcilers::{Parts, Reconcilers};
use crate::shards;

/// Name of the leader-election Lease.
const LEASE_NAME: &str = CONTROLLER_NAME;

/// How this replica is sharded, from the flags.
#[derive(Debug)]
pub(crate) enum Sharding {
    /// One leader among the replicas, on `lease`, reconciles `scope` (unsharded, or a label
    /// shard).
    Leader { lease: String, scope: shards::Scope },
    /// Replicas share `shards` hashed shards through per-shard Leases.
    Automatic { shards: u32 },
}

/// How this replica is sharded, from the flags (a `--shard-lease-duration` under 4 s is refused).
pub(crate) fn sharding(args: &Args) -> anyhow::Result<Sharding> {
    use kuvryn_sync_core::shards::{LabelShard, label_selector, leader_lease_name};
    if let Some(shards) = args.shards {
        if args.shard_lease_duration < Duration::from_secs(4) {
            anyhow::bail!(
                "--shard-lease-duration {:?} is too short: it must be at least 4s (replicas \
                 renew every quarter of it); use the default 15s",
                args.shard_lease_duration
            );
        }
        return Ok(Sharding::Automatic { shards });
    }
    let label = match (&args.shard, args.shard_unlabelled) {
        (Some(name), _) => Some(LabelShard::Named(name.clone())),
        (None, true) => Some(LabelShard::Unlabelled),
        (None, false) => None,
    };
    Ok(match label {
        Some(shard) => Sharding::Leader {
            lease: leader_lease_name(LEASE_NAME, &shard),
            scope: shards::Scope::Label(label_selector(&shard)),
        },
        None => Sharding::Leader { lease: LEASE_NAME.to_owned(), scope: shards::Scope::All },
    })
}

/// Only the holder of the Lease reconciles; the other replicas wait as warm standbys. Ends when
/// `stop` resolves (Ok) or leadership is lost (an error, so the replica restarts as a standby).
pub(crate) async fn run_leader(
    parts: &Parts,
    lease_name: &str,
    scope: shards::Scope,
    identity: &str,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let namespace = &parts.args.leader_election_namespace;
    let mut stop = std::pin::pin!(stop);
    let lease = LeaseManagerBuilder::new(parts.client.clone(), lease_name)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(15)
        .with_grace(5)
        .build()
        .await
        .map_err(|err| leader_election_error(err, namespace))?;
    let (mut leader, lease_task) = lease.watch().await;
    tracing::info!(%identity, lease = lease_name, "waiting to become the leader");
    let elected = tokio::select! {
        changed = leader.wait_for(|is_leader| *is_leader) => changed.is_ok(),
        () = &mut stop => false,
    };
    let mut lost_leadership = false;
    if elected {
        tracing::info!(%identity, "became the leader; reconciling");
        record_version(&parts.client, namespace, lease_name).await;
        let reconcilers = Reconcilers::start(parts, scope)?;
        tokio::select! {
            () = &mut stop => {},
            _ = leader.wait_for(|is_leader| !*is_leader) => lost_leadership = true,
        }
        reconcilers.stop().await?;
    }
    // Closing the channel ends the lease task; release the Lease so a standby takes over at once.
    // Bounded: a slow API server must not keep a terminating Pod alive.
    drop(leader);
    let release = async {
        if let Ok(Ok(manager)) = lease_task.await
            && let Err(err) = manager.release().await
        {
            tracing::warn!(%err, "cannot release the leader Lease");
        }
    };
    if tokio::time::timeout(Duration::from_secs(5), release).await.is_err() {
        tracing::warn!("releasing the leader Lease timed out; it expires on its own");
    }
    if lost_leadership {
        // Another replica holds the Lease now; exit so this one restarts as a standby.
        anyhow::bail!("lost leadership of Lease {lease_name}");
    }
    Ok(())
}

/// Automatic sharding: claim shards through their Leases and run the reconcilers for exactly
/// the shards held, restarting them whenever that set changes (after stopping the old ones, so
/// a shard given up is never reconciled once its Lease is released).
pub(crate) async fn run_automatic(
    parts: &Parts,
    shards: u32,
    identity: &str,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let mut stop = std::pin::pin!(stop);
    let claims_stop = tokio_util::sync::CancellationToken::new();
    let (config, namespace) = (parts.config.clone(), parts.args.leader_election_namespace.clone());
    let (identity_owned, duration) = (identity.to_owned(), parts.args.shard_lease_duration);
    let make = move || {
        Ok(shards::ShardClaims {
            client: kube::Client::try_from(config)?,
            namespace,
            base: LEASE_NAME.to_owned(),
            identity: identity_owned,
            shards,
            duration,
        })
    };
    tracing::info!(%identity, shards, "claiming shards");
    let shards::Claiming { mut desired, running, done: claim_task } =
        shards::ShardClaims::start(make, claims_stop.clone())
            .context("cannot start the shard Lease thread")?;
    let mut outcome = Ok(());
    loop {
        let held = desired.borrow_and_update().clone();
        let reconcilers = if held.is_empty() {
            None
        } else {
            running.send_replace(held.clone());
            tracing::info!(shards = ?held, of = shards, "reconciling shards");
            let scope = shards::Scope::Hashed { shards, held: Arc::new(held) };
            Some(Reconcilers::start(parts, scope)?)
        };
        let stopping = tokio::select! {
            () = &mut stop => true,
            changed = desired.changed() => changed.is_err(),
        };
        if let Some(reconcilers) = reconcilers {
            outcome = reconcilers.stop().await;
        }
        running.send_replace(BTreeSet::new());
        if stopping || outcome.is_err() {
            break;
        }
    }
    claims_stop.cancel();
    if tokio::time::timeout(Duration::from_secs(5), claim_task).await.is_err() {
        tracing::warn!("releasing the shard Leases timed out; they expire on their own");
    }
    outcome
}

/// Annotate the leader Lease with this build's version (`keys::CONTROLLER_VERSION`), which
/// `ksync version` and `ksync check` read. Best effort: a failure is logged, never fatal.
async fn record_version(client: &kube::Client, namespace: &str, lease: &str) {
    use k8s_openapi::api::coordination::v1::Lease;
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({"metadata": {"annotations": {
        kuvryn_sync_api::keys::CONTROLLER_VERSION: env!("CARGO_PKG_VERSION"),
    }}});
    let params = kube::api::PatchParams::default();
    if let Err(err) = leases.patch(lease, &params, &kube::api::Patch::Merge(&patch)).await {
        tracing::warn!(%err, "cannot record the controller's version on its Lease");
    }
}

/// Say what to do first when the Lease cannot be set up: most often its namespace is missing
/// (a controller started outside the cluster, against a cluster without the chart).
fn leader_election_error(
    err: kube_lease_manager::LeaseManagerError,
    namespace: &str,
) -> anyhow::Error {
    let missing_namespace = matches!(
        &err,
        kube_lease_manager::LeaseManagerError::KubeError(kube::Error::Api(status))
            if status.code == 404
    );
    if missing_namespace {
        anyhow::anyhow!(
            "cannot take the leader-election Lease: namespace {namespace:?} does not exist; \
             create it (kubectl create namespace {namespace}) or pass \
             --leader-election-namespace with an existing namespace ({err})"
        )
    } else {
        anyhow::anyhow!(
            "cannot take the leader-election Lease in namespace {namespace:?}: {err}; check that \
             the controller may get, create and update Leases there"
        )
    }
}
