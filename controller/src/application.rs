//! The Application reconciler: plan, approve, apply, observe and delete one Application's
//! `type: yaml` path (kustomize and Helm arrive with the renderers). Behind a finalizer
//! (deletion: [`crate::deletion`]); a suspended Application only moves `observedGeneration`;
//! `spec.dependsOn` is checked first. Then a fixed list of steps:
//!
//! 1. [`resolve_identity`]: the service account to act as (`spec.serviceAccountName`, else
//!    `--default-service-account`), which must exist;
//! 2. [`read_source`]: the Repository's request and credentials, the commit (the Repository's
//!    observed revision when the Application follows its revision, else resolved here), and the
//!    read-only tree of that commit;
//! 3. [`render_and_validate`]: the YAML files, normalised and validated, scopes from discovery
//!    as the service account;
//! 4. [`plan_desired_state`]: the inventory (one labelled list per kind, as the service account),
//!    a server-side dry run per object, prune selection, the plan, the existing Revision, and
//!    each desired object's health (kstatus);
//! 5. [`decide`](kuvryn_sync_core::application::decide): pure, from the observation to the
//!    writes and the step;
//! 6. [`write`]: the one place that writes — the Revision, the Application status (carrying the
//!    inventory before anything is applied), the Events; then, for a sync, [`sync`] takes one
//!    step of the rollout (the runner, `kuvryn_sync_apply::runner`: a group applied, or a look
//!    at the group it waits for — each group Healthy before the next: hooks and waves) and the
//!    Application is requeued, never waiting inside a reconcile; once every group is applied and
//!    pruned, or the attempt failed, [`settle`](kuvryn_sync_core::application::settle) decides
//!    the final statuses, written the same way (the Application's first). Health, approvals,
//!    retries and Ready are the pure
//!    decision's; a new Revision also cancels superseded ones and trims `spec.history.limit`.
//!
//! Steps 1–4 return `Err(Observation::Failed)` to end observation early with a failure reason;
//! API-server trouble with the controller's own reads and writes is a [`ReconcileError`] and
//! retries with backoff.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kuvryn_sync_api::{
    Application, ApplicationStatus, CONTROLLER_NAME, FailureAction, FailureReason, HealthCheck,
    NotificationSink, Repository, Revision, RevisionPhase, RevisionStatus, SyncState, keys,
};
use kuvryn_sync_apply::engine::{Engine, Shared};
use kuvryn_sync_apply::runner::{Outcome, Rollout, Runner};
use kuvryn_sync_core::application::{
    Decision, Inputs, Observation, Observed, Planned, RevisionUpdate, Step, SyncOutcome,
    announce_prune, announces_planning, cancel_superseded, decide, failing_source, held_back,
    invalid_health_checks, learn_secret_values, previous_healthy, revision_name, run_for, settle,
    unplanned_failure, unplanned_revision_name,
};
use kuvryn_sync_core::desired::{
    DesiredObject, DesiredState, GroupKind, ObjectKey, Target, group_of, normalise,
};
use kuvryn_sync_core::health_rules::InvalidRule;
use kuvryn_sync_core::plan::{Plan, plan};
use kuvryn_sync_core::prune::{PrunePlan, plan_prune};
use kuvryn_sync_core::redact::Redactor;
use kuvryn_sync_core::rollback::{self, Course};
use kuvryn_sync_core::rollout::{self, ObjectHealth};
use kuvryn_sync_core::{dependencies, field_manager, history, inventory};
use kuvryn_sync_runtime::durations::Reconciled;
use kuvryn_sync_source::git::{CheckedOutTree, FetchRequest};

use crate::context::{ApplicationContext, ReconcileError, publish, service_account_of};
use crate::render::OnMiss;
use crate::status::apply_status;
use crate::step::{StepResult, reported};
use crate::{deletion, diagnose, health, notify, render};
use crate::{references, source, triggers};
use kuvryn_sync_core::failure::StepFailure;

/// The finalizer that lets the controller act on `spec.deletionPolicy` before an Application
/// goes.
pub const APPLICATION_FINALIZER: &str = "sync.kuvryn.io/application-cleanup";

/// Run the Application controller until `shutdown` resolves. Triggers: spec and annotation
/// changes, a Repository's new commit, and changes of managed objects seen by the shared
/// per-kind watches.
pub async fn run(
    ctx: Arc<ApplicationContext>,
    (repositories, service_accounts, revisions): (
        Writer<Repository>,
        Writer<PartialObjectMeta<ServiceAccount>>,
        Writer<Revision>,
    ),
    triggers: tokio::sync::mpsc::Receiver<ObjectRef<Application>>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (reader, stream) = triggers::spec_or_annotation_changes(
        Api::<Application>::all(ctx.client.clone()),
        ctx.shard.clone(),
    );
    let (sinks_writer, referenced, _stop_polling) = poll_references(&ctx.client, &reader);
    let requeues = futures::stream::select(receive(triggers), receive(referenced));
    let controller = Controller::for_stream(stream, reader.clone()).with_config(
        kube::runtime::controller::Config::default()
            .concurrency(ctx.concurrency)
            .debounce(Duration::from_millis(500)),
    );
    let controller = with_sources(controller, &ctx, &reader, (repositories, service_accounts))
        .reconcile_on(requeues);
    let reading = (&ctx.client, &ctx.shard, &ctx.revision_writes);
    with_reads(controller, reading, &reader, (revisions, sinks_writer))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move { triggers::log_failure("Application", &result) })
        .await;
}

/// Poll the Secrets and ConfigMaps Applications read by name (see `references`): the writer
/// of the NotificationSink store the polling reads, the Applications whose references
/// changed, and a guard that stops the polling when dropped.
fn poll_references(
    client: &kube::Client,
    applications: &Store<Application>,
) -> (
    Writer<NotificationSink>,
    tokio::sync::mpsc::Receiver<ObjectRef<Application>>,
    tokio_util::sync::DropGuard,
) {
    let (sinks_store, sinks_writer) = kube::runtime::reflector::store();
    let (referenced_tx, referenced_rx) = tokio::sync::mpsc::channel(crate::watches::QUEUE);
    let poll_stop = tokio_util::sync::CancellationToken::new();
    let guard = poll_stop.clone().drop_guard();
    tokio::spawn(references::poll(
        client.clone(),
        applications.clone(),
        sinks_store,
        referenced_tx,
        references::POLL_EVERY,
        poll_stop,
    ));
    (sinks_writer, referenced_rx, guard)
}

/// The watches of what an Application's sync starts from: its Repository (a new observed
/// commit, or Ready changing), its dependencies (their health, revisions or Ready changing
/// re-evaluates their dependents) and its service account (appearing, or created again).
fn with_sources(
    controller: Controller<Application>,
    ctx: &ApplicationContext,
    applications: &Store<Application>,
    (repositories, service_accounts): (
        Writer<Repository>,
        Writer<PartialObjectMeta<ServiceAccount>>,
    ),
) -> Controller<Application> {
    let repositories =
        watcher(Api::<Repository>::all(ctx.client.clone()), ctx.shard.watcher_config())
            .default_backoff()
            .reflect(repositories)
            .applied_objects()
            .predicate_filter(observed_revision, Default::default());
    let dependency_changes =
        watcher(Api::<Application>::all(ctx.client.clone()), ctx.shard.watcher_config())
            .default_backoff()
            .applied_objects()
            .predicate_filter(readiness, Default::default());
    let (store, dependency_store) = (applications.clone(), applications.clone());
    let account_store = applications.clone();
    let default_account = ctx.default_service_account.clone();
    controller
        .watches_stream(repositories, move |repo: Repository| following(&store.state(), &repo))
        .watches_stream(dependency_changes, move |changed: Application| {
            dependents_of(&dependency_store.state(), &changed)
        })
        .watches_stream(
            account_changes(&ctx.client, service_accounts),
            move |account: PartialObjectMeta<ServiceAccount>| {
                acting_as(&account_store.state(), &account, default_account.as_deref())
            },
        )
}

/// Service accounts appearing or created again (names only: no managed fields, annotations
/// or labels are kept in `store`).
fn account_changes(
    client: &kube::Client,
    store: Writer<PartialObjectMeta<ServiceAccount>>,
) -> impl futures::Stream<Item = Result<PartialObjectMeta<ServiceAccount>, watcher::Error>>
+ Send
+ 'static {
    watcher(Api::<PartialObjectMeta<ServiceAccount>>::all(client.clone()), Default::default())
        .default_backoff()
        .modify(|account| {
            account.metadata.managed_fields = None;
            account.metadata.annotations = None;
            account.metadata.labels = None;
        })
        .reflect(store)
        .applied_objects()
        .predicate_filter(account_identity, Default::default())
}

/// The requests sent to `receiver`, as a stream.
fn receive(
    receiver: tokio::sync::mpsc::Receiver<ObjectRef<Application>>,
) -> impl futures::Stream<Item = ObjectRef<Application>> {
    futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|request| (request, receiver))
    })
}

/// The watches of what Applications read besides their Repository, accounts and dependencies:
/// the Revisions (a store for history, never a trigger: a Revision changes because a reconcile
/// wrote it), and the NotificationSinks and HealthChecks, whose changes (created, changed or
/// deleted; neither has a status) re-check the Applications subscribed to a sink or managing
/// a HealthCheck's kind within seconds instead of at the resync.
fn with_reads(
    controller: Controller<Application>,
    (client, shard, writes): (
        &kube::Client,
        &crate::shards::Scope,
        &Arc<crate::revision_writes::RevisionWrites>,
    ),
    applications: &Store<Application>,
    (revisions, sinks): (Writer<Revision>, Writer<NotificationSink>),
) -> Controller<Application> {
    let revisions = watcher(Api::<Revision>::all(client.clone()), shard.watcher_config())
        .default_backoff()
        .modify(|revision| revision.metadata.managed_fields = None)
        .reflect(revisions)
        .inspect_ok({
            let writes = Arc::clone(writes);
            move |event| writes.apply_event(event)
        })
        .applied_objects();
    let sinks = watcher(Api::<NotificationSink>::all(client.clone()), Default::default())
        .default_backoff()
        .reflect(sinks)
        .touched_objects();
    let checks = watcher(Api::<HealthCheck>::all(client.clone()), Default::default())
        .default_backoff()
        .touched_objects();
    let (subscribers, managers) = (applications.clone(), applications.clone());
    controller
        .watches_stream(revisions, |_: Revision| None::<ObjectRef<Application>>)
        .watches_stream(sinks, move |sink: NotificationSink| {
            subscribed_to(&subscribers.state(), &sink)
        })
        .watches_stream(checks, move |check: HealthCheck| {
            managing(&managers.state(), &check.spec.group, &check.spec.kind)
        })
}

/// A service account's identity: a trigger when one is first seen or created again, not on
/// every update.
fn account_identity(account: &PartialObjectMeta<ServiceAccount>) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    account.metadata.uid.hash(&mut hasher);
    Some(hasher.finish())
}

/// The Applications of `account`'s namespace that act as it (`spec.serviceAccountName`, else
/// the controller's `default`).
fn acting_as(
    applications: &[Arc<Application>],
    account: &PartialObjectMeta<ServiceAccount>,
    default: Option<&str>,
) -> Vec<ObjectRef<Application>> {
    // Called for every service account created, each time over every Application: compare in
    // place, without a copy of each one's namespace.
    let name = account.metadata.name.as_deref();
    applications
        .iter()
        .filter(|app| {
            inventory::service_account(app.spec.service_account_name.as_deref(), default) == name
        })
        .filter(|app| app.metadata.namespace == account.metadata.namespace)
        .map(|app| ObjectRef::from_obj(app.as_ref()))
        .collect()
}

/// The Applications whose inventory (`status.managedKinds`) holds kind `group`/`kind`.
fn managing(
    applications: &[Arc<Application>],
    group: &str,
    kind: &str,
) -> Vec<ObjectRef<Application>> {
    applications
        .iter()
        .filter(|app| {
            app.status.iter().flat_map(|s| &s.managed_kinds).any(|k| {
                k.kind == kind && kuvryn_sync_core::desired::group_of(&k.api_version) == group
            })
        })
        .map(|app| ObjectRef::from_obj(app.as_ref()))
        .collect()
}

/// The Applications of `sink`'s namespace with a subscription to it.
fn subscribed_to(
    applications: &[Arc<Application>],
    sink: &NotificationSink,
) -> Vec<ObjectRef<Application>> {
    let name = sink.name_any();
    applications
        .iter()
        .filter(|app| app.namespace() == sink.namespace())
        .filter(|app| app.spec.notifications.iter().any(|s| s.sink_ref.name == name))
        .map(|app| ObjectRef::from_obj(app.as_ref()))
        .collect()
}

/// Reconcile a Repository's Applications when its observed commit moves or its Ready condition
/// changes (a source failing or recovering), not on every poll.
fn observed_revision(repo: &Repository) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let status = repo.status.as_ref();
    status.and_then(|s| s.observed_revision.as_ref()).hash(&mut hasher);
    for c in status.iter().flat_map(|s| &s.conditions).filter(|c| c.type_ == "Ready") {
        (&c.status, &c.reason).hash(&mut hasher);
    }
    Some(hasher.finish())
}

/// What dependents look at: health, desired and deployed revisions, Ready, a rollback hold.
fn readiness(app: &Application) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    if let Some(status) = &app.status {
        status.health.state.as_str().hash(&mut hasher);
        status.desired_revision.hash(&mut hasher);
        status.deployed_revision.hash(&mut hasher);
        for c in status.conditions.iter().filter(|c| c.type_ == "Ready") {
            (&c.status, &c.reason).hash(&mut hasher);
        }
    }
    app.annotations().get(kuvryn_sync_api::keys::ROLLBACK_FROM).hash(&mut hasher);
    app.metadata.deletion_timestamp.is_some().hash(&mut hasher);
    Some(hasher.finish())
}

/// The Applications of `changed`'s namespace that depend on it.
fn dependents_of(
    applications: &[Arc<Application>],
    changed: &Application,
) -> Vec<ObjectRef<Application>> {
    // Only Applications with dependencies can depend on `changed` (cloning all is quadratic);
    // called for every readiness change, each time over every Application: compare in place.
    let namespace_apps: Vec<Application> = applications
        .iter()
        .filter(|a| !a.spec.depends_on.is_empty())
        .filter(|a| a.metadata.namespace == changed.metadata.namespace)
        .map(|a| a.as_ref().clone())
        .collect();
    dependencies::dependents(changed, &namespace_apps)
        .into_iter()
        .map(|name| {
            let reference = ObjectRef::new(&name);
            match changed.namespace() {
                Some(namespace) => reference.within(&namespace),
                None => reference,
            }
        })
        .collect()
}

/// The Applications whose source is `repo`.
fn following(applications: &[Arc<Application>], repo: &Repository) -> Vec<ObjectRef<Application>> {
    applications
        .iter()
        .filter(|app| {
            app.namespace() == repo.namespace()
                && app.spec.source.repository_ref.name == repo.name_any()
        })
        .map(|app| ObjectRef::from_obj(app.as_ref()))
        .collect()
}

fn error_policy(
    _app: Arc<Application>,
    err: &ReconcileError,
    _ctx: Arc<ApplicationContext>,
) -> Action {
    tracing::warn!(%err, "application reconcile will be retried");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(
    app: Arc<Application>,
    ctx: Arc<ApplicationContext>,
) -> Result<Action, ReconcileError> {
    let _timer = ctx.metrics.durations.reconcile(Reconciled::Application);
    let namespace = app.namespace().ok_or(ReconcileError::NoNamespace)?;
    let api: Api<Application> = Api::namespaced(ctx.client.clone(), &namespace);
    let name = app.name_any();
    let action = finalizer(&api, APPLICATION_FINALIZER, app, |event| async {
        match event {
            FinalizerEvent::Apply(app) => sync_application(app, &namespace, &ctx).await,
            FinalizerEvent::Cleanup(app) => deletion::clean_up(&app, &namespace, &ctx).await,
        }
    })
    .await
    .map_err(|err| ReconcileError::Finalizer(Box::new(err)))?;
    // A reconcile with nothing to do may send no request at all: this line is how a reader
    // (the scale benchmark's re-sync) sees that it ran.
    tracing::debug!(target: RECONCILED, application = %name, %namespace, "reconciled");
    Ok(action)
}

/// The log target of the debug line every finished Application reconcile writes.
pub const RECONCILED: &str = "kuvryn_sync_controller::reconciled";

/// The reconcile of an Application that is not being deleted: observe, decide, write, then run
/// the sync step the decision asks for.
async fn sync_application(
    app: Arc<Application>,
    namespace: &str,
    ctx: &ApplicationContext,
) -> Result<Action, ReconcileError> {
    let mut redactor = Redactor::new();
    let observed = observe(&app, namespace, ctx, &mut redactor).await?;
    let now = now();
    let inputs = Inputs { app: &app, observed: &observed, redactor: &redactor, now: &now };
    let mut decision = decide(&inputs);
    let previous = match &observed.observation {
        Some(Observation::Planned(planned)) => planned.revision.as_ref(),
        _ => observed.unplanned.as_ref(),
    };
    write_with_history(&app, namespace, &mut decision, previous, &redactor, ctx).await?;
    if let Some(Observation::Planning { commit, .. }) = &observed.observation {
        ctx.announcements.record(namespace, &app.name_any(), commit);
    }
    let stepped = match (&decision.step, &observed.observation) {
        (Step::Sync { .. }, Some(Observation::Planned(planned))) => {
            let invalid = &observed.invalid_rules;
            sync_step(&app, namespace, &decision, (planned, invalid), &redactor, ctx).await?
        }
        _ => None,
    };
    if let Some(after) = stepped {
        decision.requeue_after = Some(after);
    }
    watch_managed_kinds(&app, &decision, ctx);
    let next = decision.requeue_after.map_or(ctx.resync, |after| after.min(ctx.resync));
    Ok(Action::requeue(next))
}

/// Everything [`decide`] reads: nothing beyond the spec for a suspended Application; the sinks
/// and the dependencies; then, unless the dependencies hold it back, the source, render and
/// plan ([`observe_commit`]) with the records around them.
async fn observe(
    app: &Application,
    namespace: &str,
    ctx: &ApplicationContext,
    redactor: &mut Redactor,
) -> Result<Observed, ReconcileError> {
    let mut observed = Observed::default();
    if app.spec.suspend {
        tracing::info!(application = %app.name_any(), %namespace,
            "suspended: nothing is applied, pruned or repaired");
        return Ok(observed);
    }
    let identity = (&ctx.clients, service_account_of(app, ctx));
    observed.sinks = notify::sinks_condition(app, namespace, &ctx.client, identity, redactor).await;
    observed.dependencies = check_dependencies(app, namespace, ctx).await?;
    if held_back(app, observed.dependencies.as_ref()).is_some() {
        return Ok(observed);
    }
    let observation = observe_commit(app, namespace, ctx, redactor, &mut observed).await?;
    observed.unplanned = unplanned_revision(app, namespace, &observation, ctx).await?;
    if let Observation::Planned(planned) = &observation {
        observed.invalid_rules = planned.invalid_rules(&ctx.health_rules.current());
    }
    observed.observation = Some(observation);
    Ok(observed)
}

/// The sync step. While the attempt goes on, nothing more is written (the Application stays
/// `Applying`) and the step says when to look again; once it finished or failed, its settled
/// statuses are written: the Application first, then the Revision.
async fn sync_step(
    app: &Application,
    namespace: &str,
    decision: &Decision,
    (planned, invalid): (&Planned, &[InvalidRule]),
    redactor: &Redactor,
    ctx: &ApplicationContext,
) -> Result<Option<Duration>, ReconcileError> {
    let outcome = match sync(app, namespace, decision, planned, ctx).await {
        Stepped::Continue(after) => {
            tracing::debug!(application = %app.name_any(), %namespace, ?after,
                "rollout step taken; looking again");
            return Ok(Some(after));
        }
        Stepped::Prune => {
            write_status(app, namespace, &announce_prune(app, decision, &now()), ctx).await?;
            return Ok(Some(kuvryn_sync_core::advance::AFTER_APPLY));
        }
        Stepped::Finished(outcome) => outcome,
    };
    if let Some(fault) = &ctx.fault {
        fault.reached(crate::fault::AFTER_APPLY);
    }
    let mut settled = settle(app, decision, planned, &outcome, redactor, &now());
    settled.events.extend(invalid_health_checks(invalid));
    if let SyncOutcome::Failed(StepFailure {
        reason: FailureReason::HookFailed,
        resource: Some(hook),
        ..
    }) = &outcome
    {
        let found = diagnose_failed_hook(app, namespace, planned, hook, redactor, ctx).await;
        if !found.is_empty() {
            settled.events.push((
                kuvryn_sync_api::EventReason::Diagnosed,
                kuvryn_sync_core::application::diagnosed_message(&found),
            ));
        }
        settled.status.diagnosis = found;
    }
    let revision = decision.revision.as_ref().or(planned.revision.as_ref());
    let revision = revision.map(|r| r.name_any()).unwrap_or_default();
    // The Application first: a crash between the two leaves the Revision Applying, so the
    // restarted controller syncs again and settles both (the other order would leave an
    // Observing Revision with the inventory of before the prune).
    write_status(app, namespace, &settled.status, ctx).await?;
    write_revision_status(namespace, &revision, &settled.revision, None, ctx).await?;
    publish(app, &settled.events, redactor, ctx).await;
    if let SyncOutcome::Failed(StepFailure { reason, message, .. }) = &outcome {
        tracing::info!(application = %app.name_any(), %namespace, reason = reason.as_str(),
            message = %redactor.redact(message), "sync failed");
    } else {
        tracing::info!(application = %app.name_any(), %namespace, %revision, "synced");
    }
    Ok(None)
}

/// Start the shared watches of the kinds the Application manages, as recorded before and after
/// this reconcile.
fn watch_managed_kinds(app: &Application, decision: &Decision, ctx: &ApplicationContext) {
    let kinds = app.status.as_ref().map(|s| s.managed_kinds.clone()).unwrap_or_default();
    ctx.watches.ensure(&kinds);
    if let Some(status) = &decision.status {
        ctx.watches.ensure(&status.managed_kinds);
    }
}

/// `spec.dependsOn`, checked against the namespace's Applications, with the root causes of the
/// dependencies that hold it back; `None` without dependencies.
async fn check_dependencies(
    app: &Application,
    namespace: &str,
    ctx: &ApplicationContext,
) -> Result<Option<(dependencies::Verdict, Vec<kuvryn_sync_api::Diagnosis>)>, kube::Error> {
    if app.spec.depends_on.is_empty() {
        return Ok(None);
    }
    let apps: Api<Application> = Api::namespaced(ctx.client.clone(), namespace);
    let all = apps.list(&Default::default()).await?.items;
    Ok(Some((dependencies::check(app, &all), dependencies::diagnosis(app, &all))))
}

/// The Application's Revisions.
async fn list_revisions(
    app: &Application,
    namespace: &str,
    ctx: &ApplicationContext,
) -> Result<Vec<Revision>, kube::Error> {
    let revisions: Api<Revision> = Api::namespaced(ctx.client.clone(), namespace);
    let selector = format!("{}={}", kuvryn_sync_api::keys::APPLICATION, app.name_any());
    Ok(revisions.list(&kube::api::ListParams::default().labels(&selector)).await?.items)
}

/// [`write`] the decision, with the history around it: a new Revision records the one Healthy
/// before it (before anything is written), then cancels those it supersedes and trims
/// `spec.history.limit`; otherwise the limit is trimmed whenever the count is over, unless a
/// rollback is changing what is held.
async fn write_with_history(
    app: &Application,
    namespace: &str,
    decision: &mut Decision,
    previous: Option<&Revision>,
    redactor: &Redactor,
    ctx: &ApplicationContext,
) -> Result<(), kube::Error> {
    let history = match decision.revision.as_mut().filter(|_| previous.is_none()) {
        Some(revision) => {
            let others = stored_revisions(app, namespace, ctx).await?;
            let name = revision.name_any();
            revision.status.get_or_insert_with(Default::default).previous_revision =
                previous_healthy(&others, &name);
            Some((name, others))
        }
        None => None,
    };
    let written = write(app, namespace, decision, previous, redactor, ctx).await?;
    match history {
        Some((name, others)) => trim_history(app, namespace, &name, others, written, ctx).await,
        None if !changes_holds(app, decision) && !app.spec.suspend => {
            let own = stored_revisions(app, namespace, ctx).await?;
            delete_revisions(app, namespace, history::decide(app, &own), ctx).await
        }
        None => Ok(()),
    }
}

/// The Application's Revisions, from the watched store (once it has listed them all), each as
/// last written ([`revision_as_written`]): one this controller wrote since the store last heard
/// of it is read from the API server, so a stale copy never decides a cancel or a trim.
async fn stored_revisions(
    app: &Application,
    namespace: &str,
    ctx: &ApplicationContext,
) -> Result<Vec<Revision>, kube::Error> {
    // Only fails once the writer is gone, at shutdown: the store is then as good as it gets.
    let _ = ctx.revisions.wait_until_ready().await;
    let name = app.name_any();
    let mut found = Vec::new();
    for revision in ctx.revision_writes.names(namespace, &name) {
        let current = revision_as_written(namespace, &revision, ctx).await?;
        found.extend(current.filter(|r| r.labels().get(keys::APPLICATION) == Some(&name)));
    }
    Ok(found)
}

/// Whether this reconcile requests, runs or ends a rollback: what is held may be changing, and
/// the store may not show it yet, so `spec.history.limit` waits for a later reconcile.
fn changes_holds(app: &Application, decision: &Decision) -> bool {
    !decision.annotations.is_empty()
        || !decision.others.is_empty()
        || app.annotations().contains_key(keys::ROLLBACK_REVISION)
}

/// Delete the Revisions `spec.history.limit` no longer keeps (one already gone is fine).
async fn delete_revisions(
    app: &Application,
    namespace: &str,
    doomed: Vec<String>,
    ctx: &ApplicationContext,
) -> Result<(), kube::Error> {
    let revisions: Api<Revision> = Api::namespaced(ctx.client.clone(), namespace);
    for name in doomed {
        match revisions.delete(&name, &Default::default()).await {
            Ok(_) => tracing::info!(application = %app.name_any(), revision = %name,
                "Revision deleted by spec.history.limit"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// After new Revision `current` was written (`written`, as the API server answered): cancel the
/// Revisions it supersedes (`all`, the Application's Revisions before it), then delete those
/// `spec.history.limit` no longer keeps.
async fn trim_history(
    app: &Application,
    namespace: &str,
    current: &str,
    mut all: Vec<Revision>,
    written: Option<Revision>,
    ctx: &ApplicationContext,
) -> Result<(), kube::Error> {
    all.retain(|r| r.metadata.name.as_deref() != Some(current));
    all.extend(written);
    for (name, status) in cancel_superseded(&all, current, &now()) {
        write_revision_status(namespace, &name, &status, None, ctx).await?;
        if let Some(revision) = all.iter_mut().find(|r| r.metadata.name.as_deref() == Some(&name)) {
            revision.status = Some(status);
        }
    }
    delete_revisions(app, namespace, history::decide(app, &all), ctx).await
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// The commit's part of [`observe`]: identity, source, the rollback course (recorded in
/// `observed`, also when a later step fails), render and plan ([`plan_commit`]); a step's
/// failure is the observation then, with the service account and commit reached before it.
async fn observe_commit(
    app: &Application,
    namespace: &str,
    ctx: &ApplicationContext,
    redactor: &mut Redactor,
    observed: &mut Observed,
) -> Result<Observation, ReconcileError> {
    let mut reached = Reached::default();
    let planned = plan_commit(app, namespace, ctx, redactor, observed, &mut reached).await;
    reported(planned, |failure| Observation::Failed {
        failure,
        service_account: reached.service_account,
        commit: reached.commit,
    })
}

/// How far [`plan_commit`] got: the service account and the commit, once resolved.
#[derive(Default)]
struct Reached {
    service_account: Option<String>,
    commit: Option<String>,
}

/// Steps 1–4, each composed with `?`: the first failure ends them. A new commit whose render
/// misses the cache ends them before the render, to be announced ([`announces_planning`]).
async fn plan_commit(
    app: &Application,
    namespace: &str,
    ctx: &ApplicationContext,
    redactor: &mut Redactor,
    observed: &mut Observed,
    reached: &mut Reached,
) -> StepResult<Observation, ReconcileError> {
    let service_account = resolve_identity(app, namespace, ctx).await?;
    reached.service_account = Some(service_account.clone());
    let client = ctx
        .clients
        .for_service_account(namespace, &service_account)
        .map_err(|err| StepFailure::new(ACCOUNT_FAILED, err.to_string()))?;
    let (resolved, request) = read_source(app, namespace, ctx, redactor).await?;
    let commit = follow_course(app, namespace, &resolved, ctx, observed).await?;
    reached.commit = Some(commit.clone());
    let tree = checkout(ctx, request, &commit).await?;
    let announced = ctx.announcements.take(namespace, &app.name_any(), &commit);
    let new = announces_planning(app, &commit, &observed.course, observed.run.as_ref());
    let on_miss = if new && !announced { OnMiss::Defer } else { OnMiss::Render };
    let rendering = (&client, &tree, on_miss);
    let Some((desired, chart_digest)) =
        render_and_validate(app, namespace, rendering, ctx, redactor).await?
    else {
        return Ok(Observation::Planning { service_account, commit });
    };
    learn_secret_values(redactor, &desired);
    let acting = Acting::new(app, namespace, &service_account);
    let engine = engine_for(app, &client, &acting, ctx);
    let planning = (&engine, &client);
    let parts =
        plan_desired_state(app, namespace, planning, &commit, &desired, ctx, redactor).await?;
    let fallback =
        fallback_of(app, namespace, parts.existing.as_ref(), &observed.course, ctx).await?;
    Ok(Observation::Planned(Box::new(Planned {
        service_account,
        commit,
        desired,
        plan: parts.plan,
        prune: parts.prune,
        unlisted: parts.unlisted,
        revision: parts.existing,
        health: parts.health,
        chart_digest,
        diagnosis: parts.diagnosis,
        rollback: observed.run.clone(),
        fallback,
        live_kinds: Some(parts.live_kinds),
    })))
}

const ACCOUNT_FAILED: FailureReason = FailureReason::ServiceAccountFailure;

/// The rollback course for the commit the spec resolves to (recorded in `seen`), and the commit
/// it deploys: a rollback deploys its own commit, and a hold keeps the rollback's commit running.
async fn follow_course(
    app: &Application,
    namespace: &str,
    resolved: &str,
    ctx: &ApplicationContext,
    observed: &mut Observed,
) -> Result<String, ReconcileError> {
    // Read from the API while a rollback is annotated (the store may lag its own writes), else
    // from the watched store, for a commit a completed rollback marked.
    let revisions = if rollback_annotated(app) {
        list_revisions(app, namespace, ctx).await?
    } else {
        stored_revisions(app, namespace, ctx).await?
    };
    let course = rollback::course(app, resolved, &revisions);
    let commit = match &course {
        Course::RollBack { request, .. } => request.commit.clone(),
        Course::Hold { deployed, .. } => deployed.clone(),
        _ => resolved.to_owned(),
    };
    observed.run = run_for(app, &course, &revisions);
    observed.course = course;
    observed.revisions = revisions;
    Ok(commit)
}

/// Where a failed rollout under `failurePolicy.action: rollback` returns to: a healthy
/// Revision, when the Revision found is Failed and the Application follows its spec.
async fn fallback_of(
    app: &Application,
    namespace: &str,
    existing: Option<&Revision>,
    course: &Course,
    ctx: &ApplicationContext,
) -> Result<Option<rollback::Fallback>, ReconcileError> {
    let failed_here =
        existing.filter(|r| r.status.as_ref().and_then(|s| s.phase) == Some(RevisionPhase::Failed));
    match (failed_here, course) {
        (Some(failed), Course::Follow { .. })
            if app.spec.strategy.failure_policy.action == FailureAction::Rollback =>
        {
            let all = list_revisions(app, namespace, ctx).await?;
            Ok(rollback::fallback(app, failed, &all))
        }
        _ => Ok(None),
    }
}

/// Whether `app` carries a rollback request or hold, so its Revisions are read for the course.
fn rollback_annotated(app: &Application) -> bool {
    let annotations = app.annotations();
    annotations.contains_key(keys::ROLLBACK_REVISION)
        || annotations.contains_key(keys::ROLLBACK_FROM)
}

/// Who an engine acts as and for: the Application's field manager
/// ([`field_manager::for_application`]), its service account's user name, and the Application.
pub(crate) struct Acting {
    manager: String,
    identity: String,
    application: (String, String),
}

impl Acting {
    pub(crate) fn new(app: &Application, namespace: &str, service_account: &str) -> Self {
        let name = app.name_any();
        Self {
            manager: field_manager::for_application(namespace, &name),
            identity: kuvryn_sync_apply::clients::service_account_user(namespace, service_account),
            application: (namespace.to_owned(), name),
        }
    }
}

/// The engine acting for `app` as `client` ([`Acting`]), with the controller's dry-run memo and
/// shared inventory.
fn engine_for<'a>(
    app: &Application,
    client: &'a kube::Client,
    acting: &'a Acting,
    ctx: &'a ApplicationContext,
) -> Engine<'a> {
    Engine {
        client,
        kinds: &ctx.kinds,
        field_manager: &acting.manager,
        adopt: app.spec.sync.conflict_policy == kuvryn_sync_api::ConflictPolicy::Adopt,
        memo: Some(&ctx.dry_runs),
        shared: Some(Shared {
            inventory: &ctx.inventory,
            identity: &acting.identity,
            application: (&acting.application.0, &acting.application.1),
        }),
    }
}

/// Step 1: `spec.serviceAccountName`, else the controller's default, which must exist.
async fn resolve_identity(
    app: &Application,
    namespace: &str,
    ctx: &ApplicationContext,
) -> StepResult<String, ReconcileError> {
    let Some(name) = inventory::service_account(
        app.spec.service_account_name.as_deref(),
        ctx.default_service_account.as_deref(),
    ) else {
        let message = "no service account to act as: set spec.serviceAccountName, or start the \
                       controller with --default-service-account";
        return Err(StepFailure::new(FailureReason::ServiceAccountRequired, message).into());
    };
    let watched = ObjectRef::<PartialObjectMeta<ServiceAccount>>::new(name).within(namespace);
    if ctx.service_accounts.get(&watched).is_some() {
        return Ok(name.to_owned());
    }
    // Not seen by the watch (yet): ask.
    let accounts: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), namespace);
    match accounts.get_opt(name).await? {
        Some(_) => Ok(name.to_owned()),
        None => Err(StepFailure::new(
            FailureReason::ServiceAccountFailure,
            format!(
                "service account {namespace}/{name} does not exist; create it, or name another \
                 in spec.serviceAccountName"
            ),
        )
        .into()),
    }
}

/// Step 2: the commit the spec resolves to, and the request that fetches from its Repository.
async fn read_source(
    app: &Application,
    namespace: &str,
    ctx: &ApplicationContext,
    redactor: &mut Redactor,
) -> StepResult<(String, FetchRequest), ReconcileError> {
    let repo_name = &app.spec.source.repository_ref.name;
    let Some(repo) = repository(namespace, repo_name, ctx).await? else {
        let message =
            format!("spec.source.repositoryRef: Repository {namespace}/{repo_name} not found");
        return Err(StepFailure::new(FailureReason::SourceFailure, message).into());
    };
    let wanted = app.spec.source.revision.as_deref();
    let timeout = ctx.git_timeout;
    let request =
        source::fetch_request(&ctx.client, &repo, namespace, wanted, timeout, redactor).await?;
    let follows_repository =
        wanted.is_none() || wanted == repo.spec.git.as_ref().and_then(|g| g.revision.as_deref());
    let status = repo.status.clone().unwrap_or_default();
    let failing = failing_source(&format!("{namespace}/{repo_name}"), &status.conditions);
    if let Some(failure) = failing.filter(|_| follows_repository) {
        return Err(failure.into());
    }
    if let Some(commit) = status.observed_revision.filter(|_| follows_repository) {
        return Ok((commit, request));
    }
    let cache = Arc::clone(&ctx.cache);
    let found = tokio::task::spawn_blocking(move || {
        let commit = cache.resolve(&request)?.commit;
        Ok::<_, kuvryn_sync_source::git::GitError>((commit, request))
    })
    .await?;
    Ok(found.map_err(|err| StepFailure::new(err.reason(), err.to_string()))?)
}

/// Repository `namespace/name`: from the watched store, else (not seen yet, or absent) read.
async fn repository(
    namespace: &str,
    name: &str,
    ctx: &ApplicationContext,
) -> Result<Option<Arc<Repository>>, kube::Error> {
    if let Some(repo) = ctx.repositories.get(&ObjectRef::new(name).within(namespace)) {
        return Ok(Some(repo));
    }
    let repositories: Api<Repository> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(repositories.get_opt(name).await?.map(Arc::new))
}

/// The read-only tree of `commit`, fetched with `request`.
async fn checkout(
    ctx: &ApplicationContext,
    request: FetchRequest,
    commit: &str,
) -> StepResult<CheckedOutTree, ReconcileError> {
    let cache = Arc::clone(&ctx.cache);
    let commit = commit.to_owned();
    let tree = tokio::task::spawn_blocking(move || cache.tree(&request, &commit)).await?;
    Ok(tree.map_err(|err| StepFailure::new(err.reason(), err.to_string()))?)
}

/// Step 3: render `spec.source.path` and normalise it for the destination; `None` when the
/// render missed the cache and `on_miss` deferred it.
async fn render_and_validate(
    app: &Application,
    namespace: &str,
    (client, tree, on_miss): (&kube::Client, &CheckedOutTree, OnMiss),
    ctx: &ApplicationContext,
    redactor: &mut Redactor,
) -> StepResult<Option<(DesiredState, Option<String>)>, ReconcileError> {
    let root = tree.path().to_path_buf();
    let engine = (&ctx.renderers, on_miss);
    let Some(output) = render::render(app, namespace, client, root, engine, redactor).await? else {
        return Ok(None);
    };
    let rendered = output.objects;
    let objects: Vec<serde_json::Value> = rendered.iter().map(|r| r.object.clone()).collect();
    let scopes = match ctx.kinds.scopes(client, &objects).await {
        Ok(scopes) => scopes,
        Err(kube::Error::Api(status)) if status.code == 403 => {
            let message = format!(
                "forbidden: the service account may not read API discovery: {}",
                status.message
            );
            return Err(StepFailure::new(FailureReason::Forbidden, message).into());
        }
        Err(err) => {
            let message = format!("discovery failed: {err}");
            return Err(StepFailure::new(FailureReason::PlanFailure, message).into());
        }
    };
    let application = app.name_any();
    let target = Target {
        application: &application,
        application_namespace: namespace,
        destination_namespace: &app.spec.destination.namespace,
    };
    let desired = normalise(&rendered, |gk| scopes.get(gk).copied(), target)
        .map_err(|refusal| StepFailure::new(refusal.reason(), refusal.to_string()))?;
    Ok(Some((desired, output.chart_digest)))
}

/// What step 4 found.
struct PlanParts {
    plan: Plan,
    prune: PrunePlan,
    unlisted: Vec<GroupKind>,
    live_kinds: BTreeSet<GroupKind>,
    existing: Option<Revision>,
    health: Vec<ObjectHealth>,
    diagnosis: Vec<kuvryn_sync_api::Diagnosis>,
}

/// Step 4: live state, dry runs, prune selection, the plan, and the existing Revision.
async fn plan_desired_state(
    app: &Application,
    namespace: &str,
    (engine, client): (&Engine<'_>, &kube::Client),
    commit: &str,
    desired: &DesiredState,
    ctx: &ApplicationContext,
    redactor: &Redactor,
) -> StepResult<PlanParts, ReconcileError> {
    let _timer = ctx.metrics.durations.plan();
    let recorded: Vec<_> = app.status.as_ref().map(|s| s.managed_kinds.clone()).unwrap_or_default();
    let mut kinds: BTreeSet<_> = recorded.iter().cloned().collect();
    kinds.extend(desired.objects.iter().map(inventory::managed_kind));
    let kinds: Vec<_> = kinds.into_iter().collect();
    let name = app.name_any();
    let destination = &app.spec.destination.namespace;
    let found =
        engine.inventory(namespace, &name, destination, &kinds).await.map_err(StepFailure::from)?;
    let revision = revision_name(&name, commit, &desired.hash);
    let mut live = found.live();
    read_unlisted(engine, &desired.objects, &found.unlisted, &mut live).await;
    let observations =
        engine.observe(&desired.objects, &revision, &live).await.map_err(StepFailure::from)?;
    let unlisted: BTreeSet<GroupKind> = found.unlisted.iter().cloned().collect();
    let prune = if app.spec.sync.prune {
        let wanted: BTreeSet<ObjectKey> = desired.objects.iter().map(|o| o.key.clone()).collect();
        let managed_kinds: BTreeSet<GroupKind> = recorded
            .iter()
            .map(|k| GroupKind::new(group_of(&k.api_version), &k.kind))
            .filter(|k| !unlisted.contains(k))
            .collect();
        plan_prune(&wanted, &managed_kinds, &found.managed())
    } else {
        PrunePlan::default()
    };
    let plan = plan(&desired.hash, &observations, &prune);
    let existing = revision_as_written(namespace, &revision, ctx).await?;
    let rules = ctx.health_rules.current();
    let health = health::desired_health(&rules, &desired.objects, &live, &now());
    let diagnosis =
        diagnose::diagnose(client, &ctx.kinds, &desired.objects, &live, &health, redactor).await;
    let mut live_kinds: BTreeSet<GroupKind> =
        found.objects.iter().map(|o| o.managed.key.group_kind.clone()).collect();
    live_kinds.extend(unlisted.iter().cloned());
    Ok(PlanParts {
        plan,
        prune,
        live_kinds,
        unlisted: unlisted.into_iter().collect(),
        existing,
        health,
        diagnosis,
    })
}

/// The Revision recording attempts that failed at a commit before a plan existed
/// ([`unplanned_revision_name`]), when the observation is such a failure and it exists.
async fn unplanned_revision(
    app: &Application,
    namespace: &str,
    observation: &Observation,
    ctx: &ApplicationContext,
) -> Result<Option<Revision>, kube::Error> {
    match unplanned_failure(observation) {
        Some((commit, _, _)) => {
            let name = unplanned_revision_name(&app.name_any(), commit);
            revision_as_written(namespace, &name, ctx).await
        }
        None => Ok(None),
    }
}

/// Revision `name` as last written: from the watched store, unless this controller wrote it
/// since and the store has not caught up; then from the API server. A Revision the store has
/// not got does not exist (a new commit's), unless the store holds only this shard's label (a
/// Revision of another shard's label, say): then the API server is asked.
async fn revision_as_written(
    namespace: &str,
    name: &str,
    ctx: &ApplicationContext,
) -> Result<Option<Revision>, kube::Error> {
    if !ctx.revision_writes.pending(namespace, name) {
        let _ = ctx.revisions.wait_until_ready().await;
        let key = ObjectRef::new(name).within(namespace);
        if let Some(stored) = ctx.revisions.get(&key) {
            return Ok(Some(stored.as_ref().clone()));
        }
        if ctx.shard.stores_everything() {
            return Ok(None);
        }
    }
    let revisions: Api<Revision> = Api::namespaced(ctx.client.clone(), namespace);
    revisions.get_opt(name).await
}

/// The desired objects of the kinds the service account may not list
/// (`PruneInventoryIncomplete`), read one by one into `live`: they are planned against their
/// live state and their health observed like any other, instead of looking absent. An object
/// that cannot be read either stays absent.
async fn read_unlisted(
    engine: &Engine<'_>,
    objects: &[DesiredObject],
    unlisted: &[GroupKind],
    live: &mut std::collections::BTreeMap<ObjectKey, serde_json::Value>,
) {
    for object in objects.iter().filter(|o| unlisted.contains(&o.key.group_kind)) {
        if let Ok(Some(found)) = engine.live(object).await {
            live.insert(object.key.clone(), found);
        }
    }
}

/// What the sync step did: one step of the apply that leaves the attempt going (look again after
/// this long), or the attempt's apply finished or failed.
enum Stepped {
    Continue(Duration),
    /// Every group is applied and something is to be pruned: announce it, then prune.
    Prune,
    Finished(SyncOutcome),
}

/// The sync step: one step of the rollout's apply ([`Runner::step`]: a group's CRDs, or its
/// other changed objects, or a look at whether the group it waits for is ready), then, once
/// every group is applied, the prune. Never waits: a group not ready yet is looked at again by
/// a later reconcile.
async fn sync(
    app: &Application,
    namespace: &str,
    decision: &Decision,
    planned: &Planned,
    ctx: &ApplicationContext,
) -> Stepped {
    let Step::Sync { prune } = &decision.step else {
        return Stepped::Finished(SyncOutcome::Done { live_kinds: Vec::new() });
    };
    let client = match ctx.clients.for_service_account(namespace, &planned.service_account) {
        Ok(client) => client,
        Err(err) => {
            let failure = StepFailure::new(ACCOUNT_FAILED, err.to_string());
            return Stepped::Finished(SyncOutcome::Failed(failure));
        }
    };
    let acting = Acting::new(app, namespace, &planned.service_account);
    let engine = engine_for(app, &client, &acting, ctx);
    let revision = decision.revision.as_ref().or(planned.revision.as_ref());
    let name = revision.map(|r| r.name_any()).unwrap_or_default();
    let status = revision.and_then(|r| r.status.clone()).unwrap_or_default();
    let started = status.started_at.clone().unwrap_or_else(now);
    let changed = planned.plan.changed_keys();
    let rollout = Rollout {
        objects: &planned.desired.objects,
        changed: &changed,
        hooks: &status.hooks,
        revision: &name,
        prune,
        started: &started,
        timeout: rollout::timeout(app),
        crd_timeout: ctx.crd_timeout,
        pruning: app.status.as_ref().is_some_and(|s| s.sync.state == SyncState::Pruning),
    };
    let health = |key: &ObjectKey| {
        planned.health.iter().find(|h| &h.key == key).map(|h| (h.state, h.message.clone()))
    };
    let timer = || Box::new(ctx.metrics.durations.apply()) as Box<dyn Send>;
    let runner = Runner { engine: &engine, health: &health, clock: &now, timer: &timer };
    match runner.step(&rollout).await {
        Outcome::Requeue(after) => Stepped::Continue(after),
        Outcome::Failed(failure) => Stepped::Finished(SyncOutcome::Failed(failure)),
        Outcome::Prune => Stepped::Prune,
        Outcome::Done => {
            Stepped::Finished(SyncOutcome::Done { live_kinds: planned.kinds_after_sync() })
        }
    }
}

/// The diagnosis of a hook that failed the sync step: the step stops before the rollout's
/// health is observed, so the failed hook's live state is read and diagnosed here.
async fn diagnose_failed_hook(
    app: &Application,
    namespace: &str,
    planned: &Planned,
    hook: &ObjectKey,
    redactor: &Redactor,
    ctx: &ApplicationContext,
) -> Vec<kuvryn_sync_api::Diagnosis> {
    let Some(object) = planned.desired.objects.iter().find(|o| &o.key == hook) else {
        return Vec::new();
    };
    let Ok(client) = ctx.clients.for_service_account(namespace, &planned.service_account) else {
        return Vec::new();
    };
    let acting = Acting::new(app, namespace, &planned.service_account);
    let Ok(Some(live)) = engine_for(app, &client, &acting, ctx).live(object).await else {
        return Vec::new();
    };
    let live = std::collections::BTreeMap::from([(hook.clone(), live)]);
    let rules = ctx.health_rules.current();
    let health = health::desired_health(&rules, std::slice::from_ref(object), &live, &now());
    diagnose::diagnose(&client, &ctx.kinds, &planned.desired.objects, &live, &health, redactor)
        .await
}

/// Step 6, the one place that writes: the Revision (spec by server-side apply, then its
/// status), the Application status, then the Events.
async fn write(
    app: &Application,
    namespace: &str,
    decision: &Decision,
    previous: Option<&Revision>,
    redactor: &Redactor,
    ctx: &ApplicationContext,
) -> Result<Option<Revision>, kube::Error> {
    let mut written = None;
    if let Some(revision) = &decision.revision {
        let revisions: Api<Revision> = Api::namespaced(ctx.client.clone(), namespace);
        let name = revision.name_any();
        // Only the fields the controller owns: a Revision read back carries server fields.
        let mut body = Revision::new(&name, revision.spec.clone());
        body.metadata.labels = revision.metadata.labels.clone();
        body.metadata.annotations = revision.metadata.annotations.clone();
        body.metadata.owner_references = revision.metadata.owner_references.clone();
        if !previous.is_some_and(|live| same_revision_body(live, &body)) {
            let apply = PatchParams::apply(CONTROLLER_NAME).force();
            let applied = revisions.patch(&name, &apply, &Patch::Apply(&body)).await?;
            ctx.revision_writes.wrote(&applied);
            written = Some(applied);
        }
        if let Some(status) = &revision.status {
            let before = previous.and_then(|r| r.status.as_ref());
            written = Some(write_revision_status(namespace, &name, status, before, ctx).await?);
        }
    }
    for other in &decision.others {
        write_other_revision(namespace, other, ctx).await?;
    }
    if let Some(status) = &decision.status {
        write_status(app, namespace, status, ctx).await?;
    }
    if !decision.annotations.is_empty() {
        write_annotations(app, namespace, &decision.annotations, ctx).await?;
    }
    publish(app, &decision.events, redactor, ctx).await;
    Ok(written)
}

/// The decision's annotation changes, applied only while the annotations it read are as it read
/// them: a JSON Patch that `test`s each one first. A rollback request made since (say, at once
/// after a completion, before this write) is never removed unseen: the patch is refused and the
/// reconcile its change triggers decides again.
async fn write_annotations(
    app: &Application,
    namespace: &str,
    changes: &std::collections::BTreeMap<String, Option<String>>,
    ctx: &ApplicationContext,
) -> Result<(), kube::Error> {
    let applications: Api<Application> = Api::namespaced(ctx.client.clone(), namespace);
    let patch = annotation_patch(app.metadata.annotations.as_ref(), changes);
    match applications
        .patch(&app.name_any(), &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 422 => {
            tracing::info!(application = %app.name_any(), %namespace,
                "annotations changed since this reconcile read them; deciding again");
            Ok(())
        }
        Err(err) => Err(err),
    }
}

/// `changes` as a JSON Patch over `observed`: a `test` of every annotation it touches (a null
/// value tests that the annotation is absent, as kube-apiserver's JSON Patch allows), then the
/// additions and removals.
fn annotation_patch(
    observed: Option<&std::collections::BTreeMap<String, String>>,
    changes: &std::collections::BTreeMap<String, Option<String>>,
) -> json_patch::Patch {
    use serde_json::{Value, json};
    let pointer =
        |key: &str| format!("/metadata/annotations/{}", key.replace('~', "~0").replace('/', "~1"));
    let mut ops: Vec<Value> = Vec::new();
    let Some(observed) = observed else {
        let added: std::collections::BTreeMap<&String, &String> =
            changes.iter().filter_map(|(k, v)| Some((k, v.as_ref()?))).collect();
        ops.push(json!({"op": "test", "path": "/metadata/annotations", "value": null}));
        if !added.is_empty() {
            ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": added}));
        }
        return serde_json::from_value(Value::Array(ops)).unwrap_or_default();
    };
    for key in changes.keys() {
        ops.push(json!({"op": "test", "path": pointer(key), "value": observed.get(key)}));
    }
    for (key, value) in changes {
        match (value, observed.contains_key(key)) {
            (Some(value), _) => {
                ops.push(json!({"op": "add", "path": pointer(key), "value": value}))
            }
            (None, true) => ops.push(json!({"op": "remove", "path": pointer(key)})),
            (None, false) => {}
        }
    }
    serde_json::from_value(Value::Array(ops)).unwrap_or_default()
}

/// Whether the live Revision already carries everything `body` would apply: then applying it
/// again changes nothing, and the request is not sent (a rollout's later reconciles only move
/// the Revision's status).
fn same_revision_body(live: &Revision, body: &Revision) -> bool {
    live.metadata.name == body.metadata.name
        && live.spec == body.spec
        && live.metadata.labels == body.metadata.labels
        && live.metadata.annotations == body.metadata.annotations
        && live.metadata.owner_references == body.metadata.owner_references
}

/// A write to a Revision besides the decision's own: annotations, then status.
async fn write_other_revision(
    namespace: &str,
    update: &RevisionUpdate,
    ctx: &ApplicationContext,
) -> Result<(), kube::Error> {
    if !update.annotations.is_empty() {
        let revisions: Api<Revision> = Api::namespaced(ctx.client.clone(), namespace);
        let patch = serde_json::json!({"metadata": {"annotations": update.annotations}});
        match revisions.patch(&update.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(written) => ctx.revision_writes.wrote(&written),
            // Deleted meanwhile: nothing left to mark.
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(err) => return Err(err),
        }
    }
    if let Some(status) = &update.status {
        write_revision_status(namespace, &update.name, status, None, ctx).await?;
    }
    Ok(())
}

/// Server-side apply of a Revision's status; the Revision as written. A failure the new status
/// no longer has is first removed with an explicit null: dropping a struct's fields from an
/// apply need not drop the struct, and a `failure` left without its required fields would be
/// refused.
async fn write_revision_status(
    namespace: &str,
    name: &str,
    status: &RevisionStatus,
    before: Option<&RevisionStatus>,
    ctx: &ApplicationContext,
) -> Result<Revision, kube::Error> {
    let revisions: Api<Revision> = Api::namespaced(ctx.client.clone(), namespace);
    if status.failure.is_none() && before.is_some_and(|b| b.failure.is_some()) {
        let clear = serde_json::json!({"status": {"failure": null}});
        let cleared =
            revisions.patch_status(name, &PatchParams::default(), &Patch::Merge(&clear)).await?;
        ctx.revision_writes.wrote(&cleared);
    }
    let written = apply_status::<Revision>(&ctx.client, namespace, name, status).await?;
    ctx.revision_writes.wrote(&written);
    Ok(written)
}

async fn write_status(
    app: &Application,
    namespace: &str,
    status: &ApplicationStatus,
    ctx: &ApplicationContext,
) -> Result<(), kube::Error> {
    apply_status::<Application>(&ctx.client, namespace, &app.name_any(), status).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn annotation_changes_test_what_was_read_before_writing() {
        let observed = BTreeMap::from([
            (keys::ROLLBACK_REVISION.to_owned(), "abc".to_owned()),
            ("team/owner".to_owned(), "ops".to_owned()),
        ]);
        let changes = BTreeMap::from([
            (keys::ROLLBACK_REVISION.to_owned(), None),
            (keys::ROLLBACK_FROM.to_owned(), Some("def".to_owned())),
            ("gone/already".to_owned(), None),
        ]);
        let patch =
            serde_json::to_value(annotation_patch(Some(&observed), &changes)).expect("json");
        let escaped = |key: &str| format!("/metadata/annotations/{}", key.replace('/', "~1"));
        assert_eq!(
            patch,
            serde_json::json!([
                {"op": "test", "path": escaped("gone/already"), "value": null},
                {"op": "test", "path": escaped(keys::ROLLBACK_FROM), "value": null},
                {"op": "test", "path": escaped(keys::ROLLBACK_REVISION), "value": "abc"},
                {"op": "add", "path": escaped(keys::ROLLBACK_FROM), "value": "def"},
                {"op": "remove", "path": escaped(keys::ROLLBACK_REVISION)},
            ])
        );
        // A request changed since it was read fails the test: applying refuses the whole patch.
        let mut live = serde_json::json!({"metadata": {"annotations": {
            keys::ROLLBACK_REVISION: "newer", "team/owner": "ops"}}});
        let parsed: json_patch::Patch = serde_json::from_value(patch).expect("a JSON Patch");
        let mut tested = parsed.clone();
        tested
            .0
            .retain(|op| !matches!(op, json_patch::PatchOperation::Test(t) if t.value.is_null()));
        assert!(json_patch::patch(&mut live, &tested).is_err());
        assert_eq!(live["metadata"]["annotations"][keys::ROLLBACK_REVISION], "newer");
    }

    #[test]
    fn without_annotations_the_patch_creates_the_map_only_while_there_is_none() {
        let changes = BTreeMap::from([
            (keys::ROLLBACK_FROM.to_owned(), Some("def".to_owned())),
            (keys::ROLLBACK_REVISION.to_owned(), None),
        ]);
        let patch = serde_json::to_value(annotation_patch(None, &changes)).expect("json");
        assert_eq!(
            patch,
            serde_json::json!([
                {"op": "test", "path": "/metadata/annotations", "value": null},
                {"op": "add", "path": "/metadata/annotations", "value": {keys::ROLLBACK_FROM: "def"}},
            ])
        );
    }
}
