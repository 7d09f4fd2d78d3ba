//! The controller at scale, the shape of Flux's published 1,000-Kustomization benchmark: N
//! Applications from one Repository, each deploying its own folder `apps/app-NNNN/` of one commit
//! — a Deployment (0 replicas), a ServiceAccount, a ClusterIP Service and an Ingress — into one
//! namespace, automatic with prune, as service account `deployer`. On an in-process
//! ksync-sandbox whose workloads run (`--simulate-workloads`, so Deployments get a status), with
//! a real git daemon and the real controller binary:
//!
//! - **time to all Ready**: from the first Application created to every Application
//!   `Ready=True/Healthy` at once (followed with one watch of the Applications: a list of 1,000
//!   Applications every 200 ms would itself load the API server that shares the machine), with
//!   the time until every Application had applied the commit on the way;
//! - **peak controller RSS**: `VmHWM` of the controller process once all are Ready (and that of
//!   the restarted controller after the re-sync);
//! - **API requests**: every request the controller sent until all were Ready
//!   (`kuvryn_sync_api_requests_total` on its `/metrics`), against the floor's one per object:
//!   the API server shares the machine, so the time ratio follows this one;
//! - **the floor**, measured in the same run before the controller starts: a plain kube-rs
//!   server-side apply of the same 4×N objects, as the same service account (in a fresh
//!   namespace, deleted again before the controller starts), with the apply engine's concurrency
//!   (8). Nothing waits for health there, so the ratio is deliberately strict.
//! - **re-sync with nothing changed**, twice: the controller is stopped (SIGTERM) and started
//!   again, which reconciles every Application with cold caches; then every Application is
//!   annotated with `sync.kuvryn.io/reconcile-requested-at`. Once each has been reconciled in
//!   both rounds, no managed object's resourceVersion may have moved since the first controller
//!   stopped, no Revision may have been written, no Application's status may have changed, and
//!   the controller may have sent no write request besides its leader-election Lease and the
//!   Repository's status (the restarted Repository reconciler fetches into an empty cache and
//!   records when; reported, not counted). A reconcile with nothing to do writes nothing and
//!   logs nothing at `info` (its inventory may even come from the watches, with no request), so
//!   the restarted controller runs with its HTTP requests and finished reconciles logged at
//!   debug level (`REQUEST_LOG`, added to `RUST_LOG`; the first controller, the one timed, logs
//!   as it would in production). Each round's time is printed; resourceVersions, statuses and
//!   requests are checked after both.
//!
//! The goals for N = 1,000 on 2 cores are ≤ 60 s to all Ready, ≤ 100 MiB peak RSS and ≤ 1.5× the
//! floor; they are printed, not enforced (they depend on the machine and the API server). The
//! benchmark fails only on correctness: not every Application Ready within 10 minutes, or a write
//! during the re-sync with nothing changed. Warnings and errors in the controller's log are
//! counted and the first few printed.
//!
//! Then, unless `KSYNC_SCALE_PHASES` (a comma-separated list of `push`, `resync`, `steady`; all
//! three by default) leaves them out:
//!
//! - the **re-sync with nothing changed** above;
//! - **push → apply start** through the receiver and **a monorepo commit touching 1 of N**
//!   (`scale/push.rs`), on a controller started afresh once the re-sync is checked:
//!   `KSYNC_SCALE_PUSHES` pushes (3 by default);
//! - **steady-state CPU** (`scale/steady.rs`): a third controller started with
//!   `--application-resync-interval` of `KSYNC_SCALE_RESYNC_S` seconds (10 by default; the
//!   performance suite, `scripts/bench`, uses 60), its CPU over one resync of every Application.
//!
//! With `KSYNC_SCALE_SHARDS=N` (1 by default) above 1, the all-Ready phase runs N controller
//! processes instead of one, in automatic mode (`--shards N`) or, with
//! `KSYNC_SCALE_SHARD_MODE=label`, in label mode (`--shard s0` …, Applications labelled
//! round-robin), and prints the same `scale_apps_ready` line with `"shards": N`, the requests and
//! peak RSS summed over the replicas and per replica, and how the Applications split across them
//! (`scale/shards.rs`); the other phases are not run then.
//!
//! N comes from `KSYNC_SCALE_APPS`: 100 by default (the size scripts/test runs, with
//! `--profile dev`); 1000 is the published target:
//!
//! ```sh
//! cargo build -p kuvryn-sync-controller
//! KSYNC_SCALE_APPS=1000 cargo bench --profile dev -p kuvryn-sync-tests --bench scale
//! ```
//!
//! It starts the controller binary next to the benchmark's own profile directory
//! (`target/debug/` with `--profile dev`, `target/release/` without), so build the controller
//! with the same profile first (`cargo build [--release] -p kuvryn-sync-controller`). Prints one
//! JSON line per measurement.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kuvryn_sync_api::{Application, Repository, Revision, keys};
use kuvryn_sync_apply::clients::ImpersonatedClients;
use kuvryn_sync_apply::engine::CONCURRENCY;
use kuvryn_sync_apply::kinds::Kinds;
use kuvryn_sync_tests::application::{DEADLINE, Env, env_with_workloads, ready};
use kuvryn_sync_tests::apply::{DEPLOYER, apply_raw, grant_deployer};
use kuvryn_sync_tests::cluster::{wait_for, workspace_binary};
use serde_json::{Value, json};

#[path = "scale/push.rs"]
mod push;
#[path = "scale/shards.rs"]
mod shards;
#[path = "scale/steady.rs"]
mod steady;

const APPS_ENV: &str = "KSYNC_SCALE_APPS";
const DEFAULT_APPS: usize = 100;
const READY_DEADLINE: Duration = Duration::from_secs(600);
const RESYNC_DEADLINE: Duration = Duration::from_secs(300);
const POLL: Duration = Duration::from_millis(200);
const GOAL_READY_S: f64 = 60.0;
const GOAL_RSS_MIB: f64 = 100.0;
const GOAL_RATIO: f64 = 1.5;
/// Logs every HTTP request the controller sends (method and URL), and every Application
/// reconcile that finished, at debug level.
const REQUEST_LOG: &str =
    "kube_client::client::builder=debug,kuvryn_sync_controller::reconciled=debug";
const CONTROLLER: &str = "kuvryn-sync-controller";
/// The managed kinds: API version and kind.
const KINDS: [(&str, &str); 4] = [
    ("apps/v1", "Deployment"),
    ("v1", "ServiceAccount"),
    ("v1", "Service"),
    ("networking.k8s.io/v1", "Ingress"),
];

/// The four objects of one Application, each with its file name.
fn manifests(name: &str) -> [(&'static str, Value); 4] {
    let labels = json!({"app": name});
    [
        (
            "deployment.yaml",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                   "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                            "template": {"metadata": {"labels": labels},
                                         "spec": {"serviceAccountName": name, "containers": [
                                             {"name": "app", "image": "registry.example/app:1",
                                              "ports": [{"containerPort": 8080}]}]}}}}),
        ),
        (
            "serviceaccount.yaml",
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
        ),
        (
            "service.yaml",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                   "spec": {"type": "ClusterIP", "selector": labels,
                            "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
        ),
        (
            "ingress.yaml",
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                   "metadata": {"name": name},
                   "spec": {"rules": [{"host": format!("{name}.example.com"), "http": {"paths": [
                       {"path": "/", "pathType": "Prefix",
                        "backend": {"service": {"name": name, "port": {"number": 80}}}}]}}]}}),
        ),
    ]
}

/// The optional phases to run, from `KSYNC_SCALE_PHASES`.
struct Phases {
    push: bool,
    resync: bool,
    steady: bool,
}

fn phases_from_env() -> Result<Phases> {
    let value = std::env::var("KSYNC_SCALE_PHASES").unwrap_or_else(|_| "push,resync,steady".into());
    let listed: BTreeSet<&str> =
        value.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
    if let Some(unknown) = listed.iter().find(|p| !["push", "resync", "steady"].contains(p)) {
        bail!("KSYNC_SCALE_PHASES={value:?}: unknown phase {unknown:?}; use push, resync, steady");
    }
    Ok(Phases {
        push: listed.contains("push"),
        resync: listed.contains("resync"),
        steady: listed.contains("steady"),
    })
}

/// A positive number from environment variable `name`, or `default`.
fn number_from_env(name: &str, default: u64) -> Result<u64> {
    match std::env::var(name) {
        Ok(value) => match value.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => bail!("{name}={value:?}: expected a positive whole number"),
        },
        Err(_) => Ok(default),
    }
}

/// The sum of a counter's samples.
fn sum(samples: &[(Vec<String>, u64)]) -> u64 {
    samples.iter().map(|(_, count)| count).sum()
}

fn apps_from_env() -> Result<usize> {
    match std::env::var(APPS_ENV) {
        Ok(value) => match value.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => bail!("{APPS_ENV}={value:?}: expected a positive number of Applications"),
        },
        Err(_) => Ok(DEFAULT_APPS),
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let apps = apps_from_env()?;
    let phases = phases_from_env()?;
    let pushes = number_from_env("KSYNC_SCALE_PUSHES", 3)? as usize;
    let resync = Duration::from_secs(number_from_env("KSYNC_SCALE_RESYNC_S", 10)?);
    let shard_count = number_from_env("KSYNC_SCALE_SHARDS", 1)? as usize;
    let shard_mode = shards::mode_from_env()?;
    // Names of equal width, so that no name is a prefix of another.
    let width = apps.to_string().len().max(4);
    let names: Vec<String> = (1..=apps).map(|n| format!("app-{n:0width$}")).collect();

    let mut env = env_with_workloads("scale", false).await?;
    env.grant("apps", &["deployments"]).await?;
    env.grant("networking.k8s.io", &["ingresses"]).await?;
    let files: Vec<(String, String)> = names
        .iter()
        .flat_map(|name| {
            manifests(name).map(|(file, object)| {
                (format!("apps/{name}/{file}"), serde_json::to_string(&object).expect("json"))
            })
        })
        .collect();
    let files: Vec<(&str, String)> = files.iter().map(|(p, c)| (p.as_str(), c.clone())).collect();
    let commit = env.push(&files, &format!("{apps} applications")).await?;

    let floor = floor(&env, &names).await?;
    if shard_count > 1 {
        return shards::run(&env, &names, &commit, floor, shard_count, shard_mode).await;
    }

    env.start_controller(&[("NO_COLOR", "1")])?;
    let pid = controller_pid()?;
    wait_for("the controller to lead", DEADLINE, || async {
        let led = env.log_count("became the leader") > 0;
        Ok((led.then_some(()), env.log_tail(5)))
    })
    .await?;
    env.announce().await?;
    let repositories = env.api::<Repository>();
    wait_for(&format!("Repository apps at {commit}"), DEADLINE, || async {
        let repo = repositories.get("apps").await?;
        let observed = repo.status.and_then(|s| s.observed_revision);
        Ok(((observed.as_deref() == Some(commit.as_str())).then_some(()), format!("{observed:?}")))
    })
    .await?;

    // All Ready.
    let applications = env.api::<Application>();
    if let Some(sandbox) = env.cluster.sandbox() {
        sandbox.record_requests();
    }
    let start = Instant::now();
    let env_ref = &env;
    stream::iter(&names)
        .map(|name| async move {
            env_ref.create_app(name, &format!("apps/{name}"), json!({})).await
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    let created = start.elapsed();
    let progress = all_ready(&applications, &names, &commit, start)
        .await
        .with_context(|| format!("controller log, last lines:\n{}", env.log_tail(40)))?;
    let ready_memory = memory(pid)?;
    // Every request the controller sent since it started (reads, dry runs, applies, status,
    // Events, watches), against the floor's one apply per object.
    let by_method = env.controller_counter("kuvryn_sync_api_requests_total").await?;
    let sent: u64 = by_method.iter().map(|(_, count)| count).sum();
    let by_method: BTreeMap<String, u64> =
        by_method.into_iter().map(|(labels, count)| (labels.join(","), count)).collect();
    let by_resource =
        env.cluster.sandbox().map(|sandbox| requests_by_resource(&sandbox.requests()));
    let warnings = env.controller_log();
    let warnings = problems(&warnings);
    let ratio = progress.ready.as_secs_f64() / floor.as_secs_f64();
    println!(
        "{}",
        json!({"bench": "scale_apps_ready", "apps": apps, "objects": 4 * apps, "shards": 1,
               "created_s": secs(created), "applied_s": secs(progress.applied),
               "ready_s": secs(progress.ready), "floor_s": secs(floor),
               "ratio": (ratio * 100.0).round() / 100.0,
               "api_requests": sent, "api_requests_by_method": by_method,
               "api_requests_by_resource": by_resource,
               "floor_requests": 4 * apps,
               "request_ratio": ((sent as f64 / (4 * apps) as f64) * 100.0).round() / 100.0,
               "peak_rss_mib": ready_memory.peak_mib, "rss_mib": ready_memory.rss_mib,
               "log_warnings": warnings.len(),
               "goal_ready_s": GOAL_READY_S, "goal_rss_mib": GOAL_RSS_MIB,
               "goal_ratio": GOAL_RATIO})
    );
    report_problems("while syncing", &warnings);
    stop_controller(&mut env).await?;
    if phases.resync {
        resync_unchanged(&mut env, &names).await?;
        stop_controller(&mut env).await?;
    }
    if phases.push {
        // A controller of its own, started after the re-sync's checks, as production runs it.
        env.start_controller(&[("NO_COLOR", "1")])?;
        steady::wait_renders(&env, (0, 0), apps, "the start-up pass").await?;
        push::run(&env, &names, pushes).await?;
        stop_controller(&mut env).await?;
    }
    if phases.steady {
        steady::run(&mut env, apps, resync).await?;
    }
    Ok(())
}

/// The requests the sandbox saw from the moment the Applications were created, per verb and
/// resource (`PATCH deployments dry-run`, `GET revisions`, `PUT applications/status`, ...): where
/// a first sync's requests go. Counted by the server, so the benchmark's own requests (creating
/// the Applications, its watch of them) are among them.
fn requests_by_resource(records: &[ksync_sandbox::RequestRecord]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for record in records {
        *counts.entry(request_class(record)).or_insert(0) += 1;
    }
    counts
}

fn request_class(record: &ksync_sandbox::RequestRecord) -> String {
    let segments: Vec<&str> = record.path.split('/').filter(|s| !s.is_empty()).collect();
    // /api/v1/... or /apis/GROUP/VERSION/...
    let rest = match segments.first() {
        Some(&"api") => segments.get(2..),
        Some(&"apis") => segments.get(3..),
        _ => None,
    }
    .unwrap_or(&[]);
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let resource = match rest {
        [] => record.path.clone(),
        [resource] => format!("{resource} (collection)"),
        [resource, _name] => (*resource).to_string(),
        [resource, _name, sub, ..] => format!("{resource}/{sub}"),
    };
    let mut class = format!("{} {resource}", record.method);
    if record.query.contains("watch=true") || record.query.contains("watch=1") {
        class.push_str(" watch");
    }
    if record.query.contains("dryRun=") {
        class.push_str(" dry-run");
    }
    class
}

async fn stop_controller(env: &mut Env) -> Result<()> {
    let status = env.controller.take().context("the controller")?.terminate(DEADLINE).await?;
    if !status.success() {
        eprintln!("the controller exited with {status} on SIGTERM");
    }
    Ok(())
}

/// Re-sync with nothing changed: a restarted controller, then a reconcile requested of every
/// Application; fails on any write.
async fn resync_unchanged(env: &mut Env, names: &[String]) -> Result<()> {
    let apps = names.len();
    let applications = env.api::<Application>();
    let admin = env.cluster.client();
    let before = Snapshot::take(&admin, &env.namespace).await?;
    if before.objects.len() != 4 * apps {
        bail!("expected {} managed objects, found {}", 4 * apps, before.objects.len());
    }
    let mut requests = RequestLog::at_end(env.log_path())?;
    let rust_log = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    let start = Instant::now();
    env.start_controller(&[("RUST_LOG", &format!("{rust_log},{REQUEST_LOG}")), ("NO_COLOR", "1")])?;
    let pid = controller_pid()?;
    requests.wait_reconciled(env, names, "after a restart").await?;
    let restart = start.elapsed();
    let start = Instant::now();
    let now = format!("{:?}", std::time::SystemTime::now());
    let annotate = json!({"metadata": {"annotations": {keys::RECONCILE_REQUESTED_AT: now}}});
    stream::iter(names)
        .map(|name| async {
            let params = PatchParams::default();
            applications.patch(name, &params, &Patch::Merge(&annotate)).await
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    requests.wait_reconciled(env, names, "on request").await?;
    let requested = start.elapsed();
    let after = Snapshot::take(&admin, &env.namespace).await?;
    requests.read_new()?;
    let moved = |a: &BTreeMap<String, String>, b: &BTreeMap<String, String>| {
        a.iter().filter(|(name, value)| b.get(*name) != Some(value)).count()
            + b.keys().filter(|name| !a.contains_key(*name)).count()
    };
    let object_writes = moved(&before.objects, &after.objects);
    let revision_writes = moved(&before.revisions, &after.revisions);
    let status_changes = moved(&before.statuses, &after.statuses);
    // The Repository reconciler, restarted with an empty cache, fetches again and records when
    // in the Repository's status: reported, not counted.
    let (mut write_requests, mut repository_writes) = (BTreeMap::<String, usize>::new(), 0);
    for request in &requests.seen {
        match request.write_target() {
            Some((_, "repositories")) => repository_writes += 1,
            Some((method, resource)) => {
                *write_requests.entry(format!("{method} {resource}")).or_default() += 1;
            }
            None => {}
        }
    }
    let sent: usize = write_requests.values().sum();
    let writes = object_writes + revision_writes + status_changes + sent;
    let memory = memory(pid)?;
    let log = env.controller_log();
    let warnings = problems(log.get(requests.start as usize..).unwrap_or_default());
    println!(
        "{}",
        json!({"bench": "scale_resync_unchanged", "apps": apps, "objects": 4 * apps,
               "restart_s": secs(restart), "requested_s": secs(requested),
               "api_requests": requests.seen.len(), "writes": writes,
               "object_writes": object_writes, "revision_writes": revision_writes,
               "status_changes": status_changes, "write_requests": write_requests,
               "repository_writes": repository_writes,
               "peak_rss_mib": memory.peak_mib, "log_warnings": warnings.len()})
    );
    report_problems("while re-syncing", &warnings);
    if writes > 0 {
        bail!(
            "a re-sync with nothing changed wrote: {object_writes} managed object(s), \
             {revision_writes} Revision(s), {status_changes} Application status(es); write \
             requests sent: {write_requests:?}"
        );
    }
    Ok(())
}

/// The floor: the same objects applied once by plain kube-rs server-side applies, as
/// `deployer` of a fresh namespace, [`CONCURRENCY`] at a time. Discovery is done first, as a
/// program that knows its kinds would not do it at all.
async fn floor(env: &Env, names: &[String]) -> Result<Duration> {
    let admin = env.cluster.client();
    let namespace = env.cluster.namespace("scale-floor").await?;
    grant_deployer(&admin, &namespace, &["serviceaccounts", "services"]).await?;
    let kinds = Kinds::default();
    for (group, resource) in [("apps", "deployments"), ("networking.k8s.io", "ingresses")] {
        let role = format!("{DEPLOYER}-{group}");
        for object in [
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": role},
                   "rules": [{"apiGroups": [group], "resources": [resource], "verbs": ["*"]}]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": role},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                               "name": role},
                   "subjects": [{"kind": "ServiceAccount", "name": DEPLOYER,
                                 "namespace": namespace}]}),
        ] {
            apply_raw(&admin, &kinds, &namespace, &object, "test-setup").await?;
        }
    }
    let kubeconfig = kube::config::Kubeconfig::read_from(env.cluster.kubeconfig())?;
    let base = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let client = ImpersonatedClients::new(base, 4).for_service_account(&namespace, DEPLOYER)?;
    for (api_version, kind) in KINDS {
        kinds.resolve(&client, api_version, kind).await?.context("served kind")?;
    }
    let objects: Vec<Value> =
        names.iter().flat_map(|name| manifests(name).map(|(_, object)| object)).collect();
    let start = Instant::now();
    stream::iter(&objects)
        .map(|object| apply_raw(&client, &kinds, &namespace, object, "scale-floor"))
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    let floor = start.elapsed();
    // Gone before the controller starts: the simulated workload controllers would otherwise keep
    // working on these Deployments and Services while the controller is timed.
    let namespaces: Api<Namespace> = Api::all(admin);
    namespaces.delete(&namespace, &Default::default()).await?;
    wait_for(&format!("namespace {namespace} to be deleted"), DEADLINE, || async {
        let gone = namespaces.get_opt(&namespace).await?.is_none();
        Ok((gone.then_some(()), "still there".to_owned()))
    })
    .await?;
    Ok(floor)
}

/// When every Application had applied the commit, and when all were Ready at once.
struct Progress {
    applied: Duration,
    ready: Duration,
}

/// Follow the Applications with a watch until every one is `Ready=True/Healthy`.
async fn all_ready(
    api: &Api<Application>,
    names: &[String],
    commit: &str,
    start: Instant,
) -> Result<Progress> {
    let wanted: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    let mut ready_now: BTreeMap<String, String> = BTreeMap::new();
    let mut applied: BTreeSet<String> = BTreeSet::new();
    let mut applied_at = None;
    let mut events =
        std::pin::pin!(watcher(api.clone(), watcher::Config::default()).default_backoff());
    let end = tokio::time::Instant::from_std(start + READY_DEADLINE);
    loop {
        let event = match tokio::time::timeout_at(end, events.next()).await {
            Ok(Some(event)) => event,
            Ok(None) => bail!("the watch of Applications ended"),
            Err(_) => {
                let ready = ready_now.values().filter(|r| *r == "True/Healthy").count();
                let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
                for reason in ready_now.values() {
                    *reasons.entry(reason.as_str()).or_default() += 1;
                }
                bail!(
                    "after {READY_DEADLINE:?}, {ready} of {} Applications were Ready=True/Healthy \
                     and {} had applied {commit}; Ready by status/reason: {reasons:?}",
                    names.len(),
                    applied.len()
                );
            }
        };
        let app = match event {
            Ok(watcher::Event::Apply(app) | watcher::Event::InitApply(app)) => app,
            _ => continue,
        };
        let name = app.metadata.name.clone().unwrap_or_default();
        if !wanted.contains(name.as_str()) {
            continue;
        }
        if app.status.as_ref().and_then(|s| s.deployed_revision.as_deref()) == Some(commit)
            && applied.insert(name.clone())
            && applied.len() == names.len()
        {
            applied_at = Some(start.elapsed());
        }
        let state =
            ready(&app).map_or("no Ready condition".to_owned(), |(s, r, _)| format!("{s}/{r}"));
        ready_now.insert(name, state);
        if ready_now.len() == names.len() && ready_now.values().all(|r| r == "True/Healthy") {
            let ready = start.elapsed();
            return Ok(Progress { applied: applied_at.unwrap_or(ready), ready });
        }
    }
}

/// resourceVersions of the managed objects and Revisions, and the Applications' statuses.
struct Snapshot {
    objects: BTreeMap<String, String>,
    revisions: BTreeMap<String, String>,
    statuses: BTreeMap<String, String>,
}

impl Snapshot {
    async fn take(admin: &kube::Client, namespace: &str) -> Result<Self> {
        let kinds = Kinds::default();
        let managed = ListParams::default().labels(keys::APPLICATION);
        let mut objects = BTreeMap::new();
        for (api_version, kind) in KINDS {
            let served = kinds.resolve(admin, api_version, kind).await?.context("served kind")?;
            let api: Api<DynamicObject> =
                Api::namespaced_with(admin.clone(), namespace, &served.resource);
            for item in api.list(&managed).await?.items {
                let name = format!("{kind}/{}", item.metadata.name.unwrap_or_default());
                objects.insert(name, item.metadata.resource_version.unwrap_or_default());
            }
        }
        let revisions: Api<Revision> = Api::namespaced(admin.clone(), namespace);
        let revisions = revisions
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|r| {
                (
                    r.metadata.name.unwrap_or_default(),
                    r.metadata.resource_version.unwrap_or_default(),
                )
            })
            .collect();
        let applications: Api<Application> = Api::namespaced(admin.clone(), namespace);
        let mut statuses = BTreeMap::new();
        for app in applications.list(&ListParams::default()).await?.items {
            statuses
                .insert(app.metadata.name.unwrap_or_default(), serde_json::to_string(&app.status)?);
        }
        Ok(Snapshot { objects, revisions, statuses })
    }
}

/// One request the controller sent, from its log.
struct Request {
    method: String,
    url: String,
}

/// A controller log line of [`REQUEST_LOG`], `... HTTP{http.method=GET http.url=https://...
/// otel.name=...}: kube_client::client::builder: requesting` (one line).
fn parse_request(line: &str) -> Option<Request> {
    if !line.ends_with("requesting") {
        return None;
    }
    let field = |name: &str| {
        let rest = &line[line.find(name)? + name.len()..];
        Some(rest[..rest.find([' ', '}']).unwrap_or(rest.len())].to_owned())
    };
    Some(Request { method: field("http.method=")?, url: field("http.url=")? })
}

impl Request {
    fn path(&self) -> &str {
        let after_scheme = self.url.split_once("://").map_or(self.url.as_str(), |(_, rest)| rest);
        let path = &after_scheme[after_scheme.find('/').unwrap_or(after_scheme.len())..];
        path.split('?').next().unwrap_or_default()
    }

    fn query(&self) -> String {
        let query = self.url.split_once('?').map(|(_, q)| q).unwrap_or_default();
        query.replace("%2F", "/").replace("%3D", "=").replace("%2C", ",")
    }

    /// The method and resource of a write request (not a dry run); `None` for reads, dry runs
    /// and the leader-election Lease.
    fn write_target(&self) -> Option<(&str, &str)> {
        if !matches!(self.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
            || self.query().contains("dryRun=All")
        {
            return None;
        }
        let segments: Vec<&str> = self.path().split('/').collect();
        let resource = match segments.iter().position(|s| *s == "namespaces") {
            Some(at) => segments.get(at + 2).copied(),
            None => segments.last().copied(),
        };
        match resource.unwrap_or("?") {
            "leases" => None,
            resource => Some((self.method.as_str(), resource)),
        }
    }
}

/// The requests logged in the controller's log from a position on, and the Applications whose
/// reconciles finished.
struct RequestLog {
    path: PathBuf,
    start: u64,
    position: u64,
    seen: Vec<Request>,
    reconciled: Vec<String>,
}

/// The Application of a controller log line saying a reconcile finished (`... DEBUG
/// kuvryn_sync_controller::reconciled: reconciled application=NAME namespace=NS`).
fn parse_reconciled(line: &str, namespace: &str) -> Option<String> {
    if !line.contains(" kuvryn_sync_controller::reconciled:")
        || !line.contains(&format!("namespace={namespace}"))
    {
        return None;
    }
    let rest = &line[line.find("application=")? + "application=".len()..];
    Some(rest[..rest.find(' ').unwrap_or(rest.len())].to_owned())
}

impl RequestLog {
    fn at_end(path: PathBuf) -> Result<Self> {
        let position = std::fs::metadata(&path)?.len();
        Ok(RequestLog { path, start: position, position, seen: Vec::new(), reconciled: Vec::new() })
    }

    /// Add the requests of the complete lines written since the last call to `seen`; returns
    /// where the new ones start.
    fn read_new(&mut self) -> Result<usize> {
        let mut file = std::fs::File::open(&self.path)?;
        file.seek(SeekFrom::Start(self.position))?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        let complete = text.rfind('\n').map_or(0, |at| at + 1);
        self.position += complete as u64;
        let first = self.seen.len();
        self.seen.extend(text[..complete].lines().filter_map(parse_request));
        self.reconciled.extend(text[..complete].lines().map(str::to_owned));
        Ok(first)
    }

    /// Wait until each of `names` has finished a reconcile logged after the lines read so far.
    async fn wait_reconciled(&mut self, env: &Env, names: &[String], when: &str) -> Result<()> {
        let start = Instant::now();
        let mut reconciled = BTreeSet::new();
        self.reconciled.clear();
        while reconciled.len() < names.len() {
            if start.elapsed() > RESYNC_DEADLINE {
                let missing: Vec<&String> =
                    names.iter().filter(|n| !reconciled.contains(*n)).take(20).collect();
                let kept = keep_log(&self.path);
                bail!(
                    "after {RESYNC_DEADLINE:?}, {} of {} Applications were reconciled {when}; \
                     not reconciled (first 20): {missing:?}; the controller log is kept at \
                     {kept}; its last lines:\n{}",
                    reconciled.len(),
                    names.len(),
                    env.log_tail(40)
                );
            }
            tokio::time::sleep(POLL).await;
            self.read_new()?;
            for line in self.reconciled.drain(..) {
                if let Some(app) = parse_reconciled(&line, &env.namespace) {
                    reconciled.insert(app);
                }
            }
        }
        Ok(())
    }
}

/// A copy of the controller log at `path` where it outlives the benchmark's temporary folders
/// (Cargo's target tmp folder), for a failure to be looked into; where it went, or why not.
fn keep_log(path: &Path) -> String {
    let kept = Path::new(env!("CARGO_TARGET_TMPDIR")).join("scale-controller-failure.log");
    match std::fs::copy(path, &kept) {
        Ok(_) => kept.display().to_string(),
        Err(err) => format!("nowhere ({err})"),
    }
}

/// Warning and error lines of a controller log.
fn problems(log: &str) -> Vec<&str> {
    log.lines().filter(|line| line.contains(" WARN ") || line.contains(" ERROR ")).collect()
}

fn report_problems(when: &str, problems: &[&str]) {
    if problems.is_empty() {
        return;
    }
    eprintln!("controller warnings and errors {when}: {} line(s); the first ones:", problems.len());
    for line in problems.iter().take(10) {
        eprintln!("  {line}");
    }
}

/// The controller this benchmark started: its child process running the controller binary.
fn controller_pid() -> Result<u32> {
    let binary = workspace_binary(CONTROLLER)?;
    let binary = binary.canonicalize().unwrap_or(binary);
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Some(pid) = entry?.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
        let after_comm = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
        let parent = after_comm.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok());
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        if parent == Some(me) && same_binary(&exe, &binary) {
            found.push(pid);
        }
    }
    match found.as_slice() {
        [pid] => Ok(*pid),
        _ => bail!("expected one {} child process, found {found:?}", binary.display()),
    }
}

fn same_binary(exe: &Path, binary: &Path) -> bool {
    // A binary rebuilt while it runs shows as `<path> (deleted)`.
    let exe = exe.to_string_lossy();
    exe == binary.to_string_lossy() || exe.strip_suffix(" (deleted)") == binary.to_str()
}

struct Memory {
    peak_mib: f64,
    rss_mib: f64,
}

/// The controller's peak (`VmHWM`) and current (`VmRSS`) resident set size.
fn memory(pid: u32) -> Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("the controller (pid {pid}) is gone"))?;
    let field = |name: &str| -> Result<f64> {
        let line = status.lines().find(|l| l.starts_with(name)).context(name.to_owned())?;
        let kib: f64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse()?;
        Ok((kib / 1024.0 * 10.0).round() / 10.0)
    };
    Ok(Memory { peak_mib: field("VmHWM:")?, rss_mib: field("VmRSS:")? })
}

fn secs(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1000.0).round() / 1000.0
}
