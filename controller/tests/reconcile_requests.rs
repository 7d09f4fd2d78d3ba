//! The reconcilers in-process against the sandbox, with every request they send recorded by the
//! sandbox's request log and asserted: what a sync costs the API server is part of the contract
//! (no writes when nothing changed, one apply per changed object, a bounded number of status
//! writes), so a change that adds writes fails here.
//!
//! The controller runs as its own user (`kuvryn-sync-controller-under-test`, in
//! `system:masters`), so its requests — its own and those it sends impersonating the
//! Application's service account — are told apart from the test's. Only requests in the test's
//! namespace are counted: the cluster-wide watches and the leader Lease are not an
//! Application's cost.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use ksync_sandbox::{RequestRecord, Sandbox};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kuvryn_sync_api::{Application, Revision, keys};
use kuvryn_sync_tests::application::{DEADLINE, Env, env, ready};
use kuvryn_sync_tests::cluster::wait_for;
use serde_json::json;

/// The controller's user name in the sandbox.
const CONTROLLER_USER: &str = "kuvryn-sync-controller-under-test";

/// How long nothing may happen before the controller counts as settled: longer than the
/// interval at which a rollout in progress is observed again (and the 500 ms trigger
/// debounce), so a reconcile already due has started.
const QUIET: Duration =
    kuvryn_sync_core::rollout::OBSERVE_EVERY.saturating_add(Duration::from_secs(1));

/// At most this many status writes of the Application (and of each Revision) from a new commit
/// to Healthy: today exactly this many — the plan's (the inventory before anything is applied),
/// the sync's result, and the observation that finds the objects Healthy.
const MAX_STATUS_WRITES_PER_SYNC: usize = 3;

/// The one more Application status write of a sync that prunes: sync state `Pruning`,
/// announced before the prune runs (the API reference's sync states).
const PRUNE_ANNOUNCEMENT: usize = 1;

/// The one more Application status write of a sync of a pushed commit: sync state `Planning`
/// with the new commit, written before the render (the API reference's sync states).
const PLANNING_ANNOUNCEMENT: usize = 1;

/// A controller running in this process (the library's `run`), stopped on drop.
struct InProcessController {
    stop: tokio_util::sync::CancellationToken,
    task: Option<tokio::task::JoinHandle<Result<()>>>,
    metrics: SocketAddr,
    _cache: tempfile::TempDir,
}

impl InProcessController {
    /// Start the controller against `sandbox` as [`CONTROLLER_USER`] with extra flags.
    async fn start(sandbox: &Sandbox, flags: &[&str]) -> Result<Self> {
        kuvryn_sync_runtime::logging::init(kuvryn_sync_runtime::logging::LogFormat::Text, None);
        let kubeconfig = sandbox.user_kubeconfig(CONTROLLER_USER, &["system:masters"])?;
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig)?,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        let metrics: SocketAddr =
            format!("127.0.0.1:{}", kuvryn_sync_tests::servers::free_port()?).parse()?;
        let cache = tempfile::tempdir()?;
        let mut argv = vec![
            "kuvryn-sync-controller".to_owned(),
            format!("--metrics-bind-address={metrics}"),
            "--leader-election-namespace=default".to_owned(),
            format!("--cache-dir={}", cache.path().display()),
        ];
        if !flags.iter().any(|flag| flag.starts_with("--default-poll-interval")) {
            // Every new commit in these tests is announced by the Repository's annotation.
            argv.push("--default-poll-interval=1h".to_owned());
        }
        argv.extend(flags.iter().map(|flag| (*flag).to_owned()));
        let args = kuvryn_sync_controller::Args::try_parse_from(argv)?;
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(kuvryn_sync_controller::run(
            args,
            stop.clone().cancelled_owned(),
            async move { Ok(config) },
        ));
        Ok(Self { stop, task: Some(task), metrics, _cache: cache })
    }

    /// The value of the sample `name{kind="KIND"}` on `/metrics` (0 when absent).
    async fn metric(&self, name: &str, kind: &str) -> Result<f64> {
        let url = format!("http://{}/metrics", self.metrics);
        let text = reqwest::get(&url).await?.error_for_status()?.text().await?;
        let prefix = format!("{name}{{kind=\"{kind}\"}} ");
        Ok(text
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .map(|value| value.trim().parse())
            .transpose()?
            .unwrap_or(0.0))
    }

    /// Completed reconciles of `kind` so far.
    async fn reconciles(&self, kind: &str) -> Result<u64> {
        let count = self.metric("kuvryn_sync_reconcile_duration_seconds_count", kind).await?;
        Ok(count as u64)
    }

    /// Stop the controller and wait until it has ended (every reconcile in flight finished).
    async fn stop(mut self) -> Result<()> {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(DEADLINE, task).await.context("controller stop")???;
        }
        Ok(())
    }
}

impl Drop for InProcessController {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One request, as a reviewer reads it: the verb, the resource (with its subresource) and the
/// object's name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Call {
    verb: &'static str,
    resource: String,
    name: Option<String>,
}

impl Call {
    /// `record` as a call in `namespace`, or `None` when it is about another namespace or
    /// cluster-scoped.
    fn parse(record: &RequestRecord, namespace: &str) -> Option<Self> {
        let marker = format!("/namespaces/{namespace}/");
        let (_, rest) = record.path.split_once(&marker)?;
        let mut parts = rest.split('/');
        let resource = parts.next()?.to_owned();
        let name = parts.next().map(str::to_owned);
        let resource = match parts.next() {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource,
        };
        let query = &record.query;
        let dry_run = query.split('&').any(|pair| pair == "dryRun=All");
        let verb = match (record.method.as_str(), &name) {
            ("GET", _) if query.split('&').any(|p| p == "watch=true" || p == "watch=1") => "watch",
            ("GET", Some(_)) => "get",
            ("GET", None) => "list",
            (_, _) if dry_run => "dry-run",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", Some(_)) => "delete",
            ("DELETE", None) => "deletecollection",
            _ => "other",
        };
        Some(Call { verb, resource, name })
    }

    /// Whether the call changes something (a dry run does not).
    fn is_write(&self) -> bool {
        matches!(self.verb, "create" | "update" | "patch" | "delete" | "deletecollection" | "other")
    }
}

/// The controller's calls in the test namespace among `records`.
fn calls(records: &[RequestRecord], namespace: &str) -> Vec<Call> {
    records
        .iter()
        .filter(|record| record.user == CONTROLLER_USER)
        .filter_map(|record| Call::parse(record, namespace))
        .collect()
}

/// Calls counted per `verb resource`, for assertions and for the report on failure.
fn counts(calls: &[Call]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for call in calls {
        *counts.entry(format!("{} {}", call.verb, call.resource)).or_insert(0) += 1;
    }
    counts
}

fn count(calls: &[Call], verb: &str, resource: &str) -> usize {
    calls.iter().filter(|c| c.verb == verb && c.resource == resource).count()
}

/// The names `verb resource` was sent for, sorted, with repeats.
fn names(calls: &[Call], verb: &str, resource: &str) -> Vec<String> {
    let mut names: Vec<String> = calls
        .iter()
        .filter(|c| c.verb == verb && c.resource == resource)
        .filter_map(|c| c.name.clone())
        .collect();
    names.sort();
    names
}

/// The Revisions written (created or changed, by server-side apply), without repeats.
fn revisions_written(calls: &[Call]) -> Vec<String> {
    let mut written = names(calls, "patch", "revisions");
    written.extend(names(calls, "create", "revisions"));
    written.dedup();
    written
}

/// The Application's status is written at least once and at most
/// [`MAX_STATUS_WRITES_PER_SYNC`] times, and `announcements` more ([`PRUNE_ANNOUNCEMENT`],
/// [`PLANNING_ANNOUNCEMENT`]); each Revision's at most [`MAX_STATUS_WRITES_PER_SYNC`] times.
fn assert_status_writes_bounded(calls: &[Call], announcements: usize) {
    let table = counts(calls);
    let writes = |resource: &str| {
        let mut per_name: BTreeMap<String, usize> = BTreeMap::new();
        for verb in ["patch", "update"] {
            for name in names(calls, verb, resource) {
                *per_name.entry(name).or_insert(0) += 1;
            }
        }
        per_name
    };
    let application = writes("applications/status");
    let total: usize = application.values().sum();
    assert!(
        (1..=MAX_STATUS_WRITES_PER_SYNC + announcements).contains(&total),
        "{total} Application status writes: {table:#?}"
    );
    for (name, count) in writes("revisions/status") {
        assert!(
            count <= MAX_STATUS_WRITES_PER_SYNC,
            "{count} status writes of Revision {name}: {table:#?}"
        );
    }
}

/// A test namespace with Git, a Repository, the request log on and the controller in-process.
struct Fixture {
    // The controller first: dropped (stopped) before the sandbox it talks to.
    controller: InProcessController,
    env: Env,
}

impl Fixture {
    /// `None` (with the reason printed) against a real cluster: the request log is the sandbox's.
    async fn start(prefix: &str, flags: &[&str]) -> Result<Option<Self>> {
        let env = env(prefix, false).await?;
        let Some(sandbox) = env.cluster.sandbox() else {
            eprintln!(
                "SKIPPED {prefix}: it counts requests in the sandbox's request log, which a real \
                 cluster (KSYNC_E2E_KUBECONFIG) does not offer"
            );
            return Ok(None);
        };
        sandbox.record_requests();
        let controller = InProcessController::start(sandbox, flags).await?;
        Ok(Some(Fixture { controller, env }))
    }

    fn sandbox(&self) -> &Sandbox {
        self.env.cluster.sandbox().expect("a fixture runs on the sandbox")
    }

    /// How many requests the sandbox has recorded: a mark to count from.
    fn mark(&self) -> usize {
        self.sandbox().requests().len()
    }

    /// The controller's calls in the test namespace since `mark`.
    fn calls_since(&self, mark: usize) -> Vec<Call> {
        let records = self.sandbox().requests();
        calls(&records[mark.min(records.len())..], &self.env.namespace)
    }

    /// Wait until the controller is idle: no Application reconcile in flight, and neither
    /// reconciles nor requests in the namespace for [`QUIET`] (polled, within [`DEADLINE`]).
    async fn settle(&self) -> Result<()> {
        let start = Instant::now();
        let (mut last, mut since) = ((usize::MAX, u64::MAX), Instant::now());
        loop {
            let in_flight =
                self.controller.metric("kuvryn_sync_reconciles_in_flight", "Application").await?;
            let seen =
                (self.calls_since(0).len(), self.controller.reconciles("Application").await?);
            if seen != last {
                (last, since) = (seen, Instant::now());
            } else if in_flight == 0.0 && since.elapsed() >= QUIET {
                return Ok(());
            }
            if start.elapsed() > DEADLINE {
                anyhow::bail!(
                    "the controller did not settle within {DEADLINE:?}: {in_flight} in flight"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Commit `files` and have the Repository fetch it.
    async fn push(&self, files: &[(&str, String)], message: &str) -> Result<String> {
        self.env.push(files, message).await
    }
}

/// A ConfigMap named `name` with `value`.
fn config_map(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

/// The three ConfigMaps `one`, `two`, `three` of `app/`, with `value` in `two`.
fn three_config_maps(value: &str) -> Vec<(&'static str, String)> {
    vec![
        ("app/one.yaml", config_map("one", "1")),
        ("app/two.yaml", config_map("two", value)),
        ("app/three.yaml", config_map("three", "3")),
    ]
}

/// Push the three ConfigMaps, create Application `web` for them and wait until it is synced,
/// observed Healthy (the reconcile after the sync's) and the controller settled. The commit.
async fn first_sync(fixture: &Fixture) -> Result<String> {
    let commit = fixture.push(&three_config_maps("2"), "three config maps").await?;
    fixture.env.create_app("web", "app", json!({})).await?;
    synced_and_healthy(fixture, &commit).await?;
    Ok(commit)
}

/// Wait until `web` is synced at `commit`, Ready=True/Healthy for that commit, and the
/// controller settled.
async fn synced_and_healthy(fixture: &Fixture, commit: &str) -> Result<()> {
    healthy_at(fixture, commit).await?;
    fixture.settle().await
}

/// Wait until `web` is synced at `commit` and Ready=True/Healthy for that commit.
async fn healthy_at(fixture: &Fixture, commit: &str) -> Result<()> {
    fixture.env.wait_synced("web", commit).await?;
    fixture
        .env
        .wait_app("web", &format!("Ready=True/Healthy at {commit}"), |app| {
            ready(app).is_some_and(|(status, reason, message)| {
                status == "True" && reason == "Healthy" && message.contains(commit)
            })
        })
        .await?;
    Ok(())
}

/// [`first_sync`] for a controller that never goes quiet (a resync or poll interval shorter
/// than [`QUIET`]): once `web` is Healthy, the reconcile that observed it has ended when none
/// is in flight; every later one finds nothing changed.
async fn healthy_without_settling(fixture: &Fixture) -> Result<()> {
    let commit = fixture.push(&three_config_maps("2"), "three config maps").await?;
    fixture.env.create_app("web", "app", json!({})).await?;
    healthy_at(fixture, &commit).await?;
    wait_for("no Application reconcile in flight", DEADLINE, || async {
        let in_flight =
            fixture.controller.metric("kuvryn_sync_reconciles_in_flight", "Application").await?;
        Ok(((in_flight == 0.0).then_some(()), format!("{in_flight} in flight")))
    })
    .await
}

/// The first sync of an Application with three objects: each is applied exactly once (after a
/// server-side dry run), nothing is deleted, one Revision is created, and the Application's
/// status is written a bounded number of times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_sync_applies_each_object_once() -> Result<()> {
    let Some(fixture) = Fixture::start("requests-first", &[]).await? else {
        return Ok(());
    };
    let mark = fixture.mark();
    first_sync(&fixture).await?;
    let calls = fixture.calls_since(mark);
    let table = counts(&calls);
    eprintln!("first sync of 3 ConfigMaps, requests in the namespace: {table:#?}");
    assert_eq!(
        names(&calls, "patch", "configmaps"),
        ["one", "three", "two"],
        "one apply per object: {table:#?}"
    );
    assert_eq!(
        names(&calls, "dry-run", "configmaps"),
        ["one", "three", "two"],
        "one server-side dry run per object: {table:#?}"
    );
    assert_eq!(count(&calls, "delete", "configmaps"), 0, "nothing is pruned: {table:#?}");
    assert_eq!(revisions_written(&calls).len(), 1, "one Revision: {table:#?}");
    assert!(count(&calls, "patch", "applications") <= 1, "the finalizer only: {table:#?}");
    assert_status_writes_bounded(&calls, 0);
    assert_eq!(
        count(&calls, "patch", "repositories/status"),
        1,
        "the Repository records the new commit once: {table:#?}"
    );
    let unexpected: Vec<&Call> = calls
        .iter()
        .filter(|c| c.is_write())
        .filter(|c| {
            !matches!(
                c.resource.as_str(),
                "configmaps"
                    | "repositories/status"
                    | "applications"
                    | "applications/status"
                    | "revisions"
                    | "revisions/status"
                    | "events"
            )
        })
        .collect();
    assert!(unexpected.is_empty(), "writes to nothing else: {unexpected:#?}");
    fixture.controller.stop().await
}

/// Reconciles of an Application whose source, spec and managed objects have not changed (the
/// periodic resync, here every 2 s) send no write request at all: no apply, no status,
/// no Revision, no Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resync_with_nothing_changed_writes_nothing() -> Result<()> {
    let flags = ["--application-resync-interval=2s"];
    let Some(fixture) = Fixture::start("requests-resync", &flags).await? else {
        return Ok(());
    };
    healthy_without_settling(&fixture).await?;
    let (mark, before) = (fixture.mark(), fixture.controller.reconciles("Application").await?);
    let after = wait_for("two more Application reconciles", DEADLINE, || async {
        let now = fixture.controller.reconciles("Application").await?;
        Ok(((now >= before + 2).then_some(now), format!("{} since the mark", now - before)))
    })
    .await?;
    let calls = fixture.calls_since(mark);
    let table = counts(&calls);
    eprintln!("{} no-op reconciles, requests in the namespace: {table:#?}", after - before);
    let writes: Vec<&Call> = calls.iter().filter(|c| c.is_write()).collect();
    assert!(writes.is_empty(), "a no-op resync writes nothing: {writes:#?}\n{table:#?}");
    fixture.controller.stop().await
}

/// A new commit that changes one of three objects and removes another: the changed one is
/// applied once, the removed one deleted once, the unchanged one neither; one new Revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_applies_only_the_changed_object() -> Result<()> {
    let Some(fixture) = Fixture::start("requests-change", &[]).await? else {
        return Ok(());
    };
    first_sync(&fixture).await?;
    let mark = fixture.mark();
    let changed = config_map("two", "changed");
    fixture.env.repo.commit(&[("app/two.yaml", changed.as_str())], "change two")?;
    let commit = fixture.env.push_removal(&["app/three.yaml"], "remove three").await?;
    synced_and_healthy(&fixture, &commit).await?;
    let calls = fixture.calls_since(mark);
    let table = counts(&calls);
    eprintln!("one object changed, one removed: {table:#?}");
    assert_eq!(names(&calls, "patch", "configmaps"), ["two"], "only the change: {table:#?}");
    assert_eq!(names(&calls, "delete", "configmaps"), ["three"], "the removal: {table:#?}");
    let dry_runs = names(&calls, "dry-run", "configmaps");
    assert!(!dry_runs.contains(&"one".to_owned()), "the unchanged object: {table:#?}");
    assert_eq!(revisions_written(&calls).len(), 1, "one new Revision: {table:#?}");
    assert_status_writes_bounded(&calls, PRUNE_ANNOUNCEMENT + PLANNING_ANNOUNCEMENT);
    fixture.controller.stop().await
}

/// A rollback to the first commit re-applies only the object that differs from it and creates
/// no Revision (the target's exists); the request is removed from the Application.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_reapplies_only_what_differs() -> Result<()> {
    let Some(fixture) = Fixture::start("requests-rollback", &[]).await? else {
        return Ok(());
    };
    let first = first_sync(&fixture).await?;
    let second = fixture.push(&three_config_maps("changed"), "change two").await?;
    synced_and_healthy(&fixture, &second).await?;
    let existing: Vec<String> = fixture
        .env
        .api::<Revision>()
        .list(&Default::default())
        .await?
        .items
        .iter()
        .map(|revision| revision.name_any())
        .collect();
    let mark = fixture.mark();
    let request = json!({"metadata": {"annotations": {keys::ROLLBACK_REVISION: first}}});
    fixture
        .env
        .api::<Application>()
        .patch("web", &PatchParams::default(), &Patch::Merge(&request))
        .await?;
    fixture
        .env
        .wait_app("web", "rolled back to the first commit", |app| {
            !app.annotations().contains_key(keys::ROLLBACK_REVISION)
                && app.status.as_ref().is_some_and(|s| s.deployed_revision.as_ref() == Some(&first))
                && ready(app)
                    .is_some_and(|(status, reason, _)| status == "False" && reason == "RolledBack")
        })
        .await?;
    fixture.settle().await?;
    let calls = fixture.calls_since(mark);
    let table = counts(&calls);
    eprintln!("rollback to the first commit: {table:#?}");
    assert_eq!(names(&calls, "patch", "configmaps"), ["two"], "only what differs: {table:#?}");
    assert_eq!(count(&calls, "delete", "configmaps"), 0, "nothing pruned: {table:#?}");
    let written = revisions_written(&calls);
    eprintln!("Revisions written: {written:?}, existing before: {existing:?}");
    assert!(written.iter().all(|name| existing.contains(name)), "no new Revision: {table:#?}");
    assert_status_writes_bounded(&calls, 0);
    fixture.controller.stop().await
}

/// The Repository reconciler polling a remote whose branch has not moved (every second): no
/// Application, Revision, managed object or Event is written, and the Repository's status at
/// most once per poll (its `lastFetchedAt`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polls_that_find_no_new_commit_write_nothing_else() -> Result<()> {
    let flags = ["--default-poll-interval=1s"];
    let Some(fixture) = Fixture::start("requests-poll", &flags).await? else {
        return Ok(());
    };
    healthy_without_settling(&fixture).await?;
    let (mark, before) = (fixture.mark(), fixture.controller.reconciles("Repository").await?);
    let after = wait_for("three more Repository polls", DEADLINE, || async {
        let now = fixture.controller.reconciles("Repository").await?;
        Ok(((now >= before + 3).then_some(now), format!("{} since the mark", now - before)))
    })
    .await?;
    let calls = fixture.calls_since(mark);
    let table = counts(&calls);
    eprintln!(
        "{} polls without a new commit, requests in the namespace: {table:#?}",
        after - before
    );
    let others: Vec<&Call> =
        calls.iter().filter(|c| c.is_write() && c.resource != "repositories/status").collect();
    assert!(others.is_empty(), "no other write: {others:#?}\n{table:#?}");
    // Read after the calls: polls that ended since, and at most one in flight.
    let polls = fixture.controller.reconciles("Repository").await? - before + 1;
    let status_writes = count(&calls, "patch", "repositories/status");
    assert!(status_writes as u64 <= polls, "{status_writes} status writes in {polls} polls");
    fixture.controller.stop().await
}
