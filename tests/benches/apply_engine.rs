//! The apply engine's cost against the API server it drives (an in-process ksync-sandbox over
//! TLS), measured against a baseline in the same run:
//!
//! - **plan + apply** of a 100-object Application through the engine, as its service account:
//!   discovery, normalising, one labelled list per kind, a server-side dry-run per object, the
//!   plan, then the apply —
//!   against a raw kube-rs server-side apply of the same objects as the same service account with
//!   the same concurrency. Median of several rounds, each into fresh namespaces. The goal is a
//!   ratio of at most 1.5; the figure is printed, not enforced (it depends on the API server).
//! - **re-sync with nothing changed**: normalise, observe and plan again; every object is
//!   Unchanged, so nothing is applied. Fails unless it wrote nothing (no object's
//!   resourceVersion moved).
//! - **hardening** (`apply_engine_hardening`): the same first sync through the controller's
//!   client (which retries transient failures behind a buffer, `clients::observed_client`)
//!   against a plain kube-rs client with the same impersonation, before against after in the
//!   same run: pairs interleaved, which goes first alternating, the ratio the median of the
//!   pairs' ratios. The goal (≤ 1.05×) is printed, not enforced.
//!
//! Prints one JSON line per measurement. Run with `cargo bench -p kuvryn-sync-tests --bench
//! apply_engine` (scripts/test runs it with `--profile dev`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use ksync_sandbox::{Sandbox, harness};
use kube::api::{Api, DynamicObject, ListParams};
use kuvryn_sync_api::PlanAction;
use kuvryn_sync_apply::clients::{ImpersonatedClients, service_account_user};
use kuvryn_sync_apply::engine::{CONCURRENCY, Engine};
use kuvryn_sync_apply::kinds::Kinds;
use kuvryn_sync_core::desired::DesiredState;
use kuvryn_sync_core::field_manager;
use kuvryn_sync_core::order::apply_groups;
use kuvryn_sync_core::plan::plan;
use kuvryn_sync_tests::apply::{apply_raw, desired_state, grant_deployer, observe};
use serde_json::{Value, json};

const OBJECTS: usize = 100;
const ROUNDS: usize = 5;
const GOAL_RATIO: f64 = 1.5;
/// The hardening ratio this benchmark aims for (printed, not enforced).
const HARDENING_GOAL: f64 = 1.05;
/// Pairs of first syncs, after and before (each pair well under a second).
const HARDENING_PAIRS: usize = 24;
const REVISION: &str = "bench-0001";

/// 60 ConfigMaps, 20 Secrets and 20 Services.
fn manifests() -> Vec<Value> {
    (0..OBJECTS)
        .map(|n| match n % 5 {
            0 => json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("s{n}")},
                        "stringData": {"token": format!("value-{n}")}}),
            1 => json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": format!("svc{n}")},
                        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}),
            _ => json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{n}")},
                        "data": {"index": n.to_string(), "payload": "x".repeat(256)}}),
        })
        .collect()
}

/// A namespace with service account `deployer` allowed everything on the benchmark's kinds.
async fn namespace_with_deployer(admin: &kube::Client, prefix: &str) -> Result<String> {
    let namespace = harness::create_namespace(admin, prefix).await?;
    grant_deployer(admin, &namespace, &["configmaps", "secrets", "services"]).await?;
    Ok(namespace)
}

async fn desired(client: &kube::Client, kinds: &Kinds, namespace: &str) -> Result<DesiredState> {
    desired_state(client, kinds, "bench", namespace, manifests()).await
}

/// Plan and apply everything through the engine; returns the plan's actions.
async fn engine_sync(client: &kube::Client, namespace: &str) -> Result<Vec<PlanAction>> {
    let kinds = Kinds::default();
    let manager = field_manager::for_application(namespace, "bench");
    let engine = Engine {
        client,
        kinds: &kinds,
        field_manager: &manager,
        adopt: false,
        memo: None,
        shared: None,
    };
    let state = desired(client, &kinds, namespace).await?;
    let observations = observe(&engine, "bench", namespace, &state, REVISION).await?;
    let plan = plan(&state.hash, &observations, &Default::default());
    if !plan.conflicts.is_empty() {
        bail!("unexpected conflicts: {:?}", plan.conflicts);
    }
    let actions: Vec<PlanAction> = plan.changes.iter().map(|c| c.action).collect();
    if actions.iter().any(|a| *a != PlanAction::Unchanged) {
        for group in apply_groups(&state.objects) {
            let objects: Vec<_> =
                state.objects.iter().filter(|o| group.objects.contains(&o.key)).collect();
            engine.apply(&objects, REVISION).await?;
        }
    }
    Ok(actions)
}

/// The raw baseline: every object applied once, as the same service account, same concurrency.
async fn raw_apply(client: &kube::Client, namespace: &str) -> Result<()> {
    let kinds = Kinds::default();
    let objects = manifests();
    stream::iter(&objects)
        .map(|object| apply_raw(client, &kinds, namespace, object, "raw"))
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Every object's resourceVersion in `namespace` (the benchmark's kinds).
async fn versions(admin: &kube::Client, namespace: &str) -> Result<BTreeMap<String, String>> {
    let kinds = Kinds::default();
    let mut all = BTreeMap::new();
    for kind in ["ConfigMap", "Secret", "Service"] {
        let served = kinds.resolve(admin, "v1", kind).await?.context("served")?;
        let api: Api<DynamicObject> =
            Api::namespaced_with(admin.clone(), namespace, &served.resource);
        for item in api.list(&ListParams::default()).await?.items {
            let name = format!("{kind}/{}", item.metadata.name.unwrap_or_default());
            all.insert(name, item.metadata.resource_version.unwrap_or_default());
        }
    }
    Ok(all)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[tokio::main]
async fn main() -> Result<()> {
    let sandbox = Sandbox::start(Default::default()).await?;
    let admin = sandbox.client().await?;
    let kubeconfig = kube::config::Kubeconfig::read_from(sandbox.kubeconfig_path())?;
    let base = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let clients = ImpersonatedClients::new(base.clone(), 64);

    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    let mut last_engine_namespace = String::new();
    for _ in 0..ROUNDS {
        let raw_ns = namespace_with_deployer(&admin, "bench-raw").await?;
        let raw_client = clients.for_service_account(&raw_ns, "deployer")?;
        let start = Instant::now();
        raw_apply(&raw_client, &raw_ns).await?;
        raw.push(start.elapsed());

        let ns = namespace_with_deployer(&admin, "bench-engine").await?;
        let client = clients.for_service_account(&ns, "deployer")?;
        let start = Instant::now();
        let actions = engine_sync(&client, &ns).await?;
        ours.push(start.elapsed());
        if actions.iter().any(|a| *a != PlanAction::Create) || actions.len() != OBJECTS {
            bail!("a first sync must create all {OBJECTS} objects, planned {actions:?}");
        }
        last_engine_namespace = ns;
    }
    let (ours, raw) = (median(ours), median(raw));
    let ratio = ours.as_secs_f64() / raw.as_secs_f64();
    println!(
        "{}",
        json!({"bench": "apply_engine_plan_and_apply", "objects": OBJECTS, "rounds": ROUNDS,
               "concurrency": CONCURRENCY, "engine_ms": ms(ours), "raw_apply_ms": ms(raw),
               "ratio": (ratio * 1000.0).round() / 1000.0, "goal_ratio": GOAL_RATIO})
    );

    // Re-sync with nothing changed: a full plan, no write.
    let ns = last_engine_namespace;
    let client = clients.for_service_account(&ns, "deployer")?;
    let before = versions(&admin, &ns).await?;
    let start = Instant::now();
    let actions = engine_sync(&client, &ns).await?;
    let elapsed = start.elapsed();
    let after = versions(&admin, &ns).await?;
    let writes = before.iter().filter(|(name, version)| after.get(*name) != Some(version)).count();
    let unchanged = actions.iter().filter(|a| **a == PlanAction::Unchanged).count();
    println!(
        "{}",
        json!({"bench": "apply_engine_resync_unchanged", "objects": OBJECTS, "ms": ms(elapsed),
               "planned_unchanged": unchanged, "writes": writes})
    );
    if writes > 0 || unchanged != OBJECTS {
        bail!(
            "a re-sync with nothing changed wrote {writes} object(s), planned {unchanged} Unchanged"
        );
    }
    hardening(&admin, &clients, &base).await
}

/// A plain kube-rs client impersonating `namespace`'s deployer: what the engine used before its
/// clients retried transient failures.
fn plain_client(base: &kube::Config, namespace: &str) -> Result<kube::Client> {
    let mut config = base.clone();
    config.auth_info.impersonate = Some(service_account_user(namespace, "deployer"));
    Ok(kube::Client::try_from(config)?)
}

/// One first sync into a fresh namespace, through the client `client_for` makes; timed.
async fn timed_first_sync(
    admin: &kube::Client,
    client_for: impl Fn(&str) -> Result<kube::Client>,
) -> Result<Duration> {
    let ns = namespace_with_deployer(admin, "bench-hardening").await?;
    let client = client_for(&ns)?;
    let start = Instant::now();
    let actions = engine_sync(&client, &ns).await?;
    let elapsed = start.elapsed();
    if actions.iter().any(|a| *a != PlanAction::Create) || actions.len() != OBJECTS {
        bail!("a first sync must create all {OBJECTS} objects, planned {actions:?}");
    }
    Ok(elapsed)
}

/// The controller's clients (after) against plain ones (before), pair by pair.
async fn hardening(
    admin: &kube::Client,
    clients: &ImpersonatedClients,
    base: &kube::Config,
) -> Result<()> {
    let hardened = |ns: &str| Ok(clients.for_service_account(ns, "deployer")?);
    let plain = |ns: &str| plain_client(base, ns);
    let (mut after, mut before, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for pair in 0..HARDENING_PAIRS {
        let (a, b) = if pair % 2 == 0 {
            let a = timed_first_sync(admin, hardened).await?;
            (a, timed_first_sync(admin, plain).await?)
        } else {
            let b = timed_first_sync(admin, plain).await?;
            (timed_first_sync(admin, hardened).await?, b)
        };
        after.push(a);
        before.push(b);
        ratios.push(a.as_secs_f64() / b.as_secs_f64());
    }
    ratios.sort_by(f64::total_cmp);
    let ratio = ratios[ratios.len() / 2];
    println!(
        "{}",
        json!({"bench": "apply_engine_hardening", "objects": OBJECTS, "pairs": HARDENING_PAIRS,
               "after_ms": ms(median(after)), "before_ms": ms(median(before)),
               "hardening_ratio": (ratio * 1000.0).round() / 1000.0, "goal_ratio": HARDENING_GOAL})
    );
    Ok(())
}

fn ms(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 100_000.0).round() / 100.0
}
