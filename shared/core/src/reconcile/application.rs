//! The Application sync decision: from what one reconcile observed (a failure before any plan
//! existed, or a planned desired state) to the Revision, the Application status, the Events and
//! the one step the controller performs. Pure; the controller gathers the [`Observation`],
//! performs the [`Decision`], and after a sync asks [`settle`] for the final statuses.
//!
//! Rules:
//! - A Revision is one desired state of one Application at one commit; its name derives from
//!   the three ([`revision_name`]), so a restarted controller finds the same Revision.
//! - Failures before a plan exists (spec, service account, source, render, validation, reading
//!   live state) set `Ready=False/<reason>` on the Application and create no Revision; they are
//!   looked at again on every reconcile. Failures of a planned attempt (a conflict under
//!   `conflictPolicy: fail`, apply, prune) end the Revision `Failed` with `status.failure`.
//! - A failed Revision is attempted again only when the Application's spec changed since
//!   (its generation moved) or while a retryable failure has attempts left
//!   (`failurePolicy.maxAttempts`); otherwise it is left as it is and nothing is written.
//! - Manual sync (`sync.automatic: false`) plans and waits: the Revision is `AwaitingApproval`.
//! - An applied Revision (`Observing` or `Healthy`) whose plan is all Unchanged is in sync and
//!   writes nothing. A change found after it was applied is drift: re-applied with
//!   `selfHeal`, otherwise only reported as sync state `Drifted`.
//! - An automatic attempt first records the inventory (`status.managedKinds` grown by every
//!   desired kind) together with sync state `Applying`, then applies, then prunes; `settle`
//!   shrinks the inventory to the kinds that still have live objects.
//! - The sync step takes one step of the rollout per reconcile (`crate::advance`); while it is
//!   under way (the Revision `Applying`, or `RollingBack` for a run, and the Application's sync
//!   state `Applying`) each reconcile goes on with it: no new attempt, Event or deadline, Ready
//!   unchanged, the hooks seen so far recorded on the Revision.
//! - Events go out on transitions only: `PlanCreated` for a new Revision, `DeploymentStarted`,
//!   `ApprovalRequired`, `PruneSkipped` and `PruneInventoryIncomplete` once per attempt, a failure
//!   reason when the Ready condition changes.
//! - Every message passes the reconcile's [`Redactor`] (the credential values it touched and the
//!   desired Secrets' values) and the shape-based masks, and is truncated to [`MAX_MESSAGE`].

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_core::Resource;
use serde_json::Value;

use kuvryn_sync_api::{
    Application, ApplicationStatus, ConditionReason, ConditionType, ConflictPolicy, Diagnosis,
    EventReason, Failure, FailureReason, HealthState, HookStage, HookState, HookStatus,
    LocalObjectReference, MAX_HOOKS, PlanAction, ResourceRef, Revision, RevisionPhase,
    RevisionSource, RevisionSpec, RevisionStatus, SyncState, keys,
};

use crate::conditions::{self, NewCondition, Status};
use crate::dependencies;
use crate::desired::{DesiredState, GroupKind, ObjectKey, Stage, group_of};
use crate::failure::StepFailure;
use crate::health_rules::InvalidRule;
use crate::plan::Plan;
use crate::prune::{ManagedObject, PrunePlan};
use crate::redact::{self, Redactor};
use crate::rollback::{self, Kind};
use crate::rollout::{self, ObjectHealth, Verdict};
use crate::{diagnosis, inventory};

/// Longest condition, failure or Event message we write.
pub const MAX_MESSAGE: usize = 1024;

/// Annotation on a Revision: the Application generation its last attempt was made for, so a
/// failed Revision is retried at once when the Application's spec changes afterwards.
pub const ATTEMPTED_GENERATION: &str = "sync.kuvryn.io/attempted-generation";

/// Annotation on a Revision: the approved digest last reported stale (`ApprovalStale` goes out
/// once per stale approval).
pub const STALE_APPROVAL: &str = "sync.kuvryn.io/stale-approval";

/// Longest Kubernetes object name.
const MAX_NAME: usize = 253;

/// What one Application reconcile observed.
#[derive(Clone, Debug)]
pub enum Observation {
    /// The reconcile stopped before a plan existed.
    Failed {
        failure: StepFailure,
        /// The service account resolved so far.
        service_account: Option<String>,
        /// The commit resolved so far.
        commit: Option<String>,
    },
    /// The desired state was rendered, validated and planned.
    Planned(Box<Planned>),
    /// A commit new to the Application ([`announces_planning`]) whose render would miss the
    /// render cache: nothing was rendered yet. The Application announces sync state `Planning`
    /// for it first; the next reconcile renders and plans.
    Planning { service_account: String, commit: String },
}

/// Whether a render of `commit` that misses the render cache is first announced as sync state
/// `Planning` ([`Observation::Planning`]): for a commit that replaces the Application's
/// `status.desiredRevision`, outside any rollback (a request, a run or a hold: each has its own
/// states). Until the plan is written the Application would otherwise show the old commit as
/// `Synced` while the new one renders. A commit that renders from the cache (one a monorepo
/// commit did not touch) is planned at once; a retry of the same commit is not announced again;
/// nor is a new Application's first commit: it has no sync state to contradict (`Unknown` until
/// its plan is written), and announcing it would cost every Application one more write at
/// install.
pub fn announces_planning(
    app: &Application,
    commit: &str,
    course: &rollback::Course,
    run: Option<&Run>,
) -> bool {
    let desired = app.status.as_ref().and_then(|s| s.desired_revision.as_deref());
    let plain = matches!(course, rollback::Course::Follow { end_hold: None }) && run.is_none();
    plain && desired.is_some_and(|desired| desired != commit)
}

/// A planned desired state.
#[derive(Clone, Debug)]
pub struct Planned {
    pub service_account: String,
    pub commit: String,
    pub desired: DesiredState,
    /// The plan, prune decisions included.
    pub plan: Plan,
    pub prune: PrunePlan,
    /// Managed kinds the service account may not list (`PruneInventoryIncomplete`).
    pub unlisted: Vec<GroupKind>,
    /// The Revision of this desired state, when it exists already.
    pub revision: Option<Revision>,
    /// The health of each desired object, from its live state (objects not found yet are
    /// Progressing).
    pub health: Vec<ObjectHealth>,
    /// `sha256:<hex>` of the Helm chart archive pulled for the render, if any.
    pub chart_digest: Option<String>,
    /// The root causes of the objects that are not Healthy (`core::diagnosis`), computed with
    /// the health.
    pub diagnosis: Vec<Diagnosis>,
    /// The rollback this reconcile runs, or the hold it keeps: `commit` is then the rollback's
    /// commit, not the one the spec resolves to. `None` for a normal rollout.
    pub rollback: Option<Run>,
    /// Where a failure of the existing (Failed) Revision rolls back to under
    /// `failurePolicy.action: rollback` ([`rollback::fallback`]).
    pub fallback: Option<rollback::Fallback>,
    /// The kinds that still have live objects carrying the Application's labels, and those the
    /// service account may not list (which might): a recorded kind in neither has nothing left to
    /// prune or watch. `None` when not known.
    pub live_kinds: Option<std::collections::BTreeSet<GroupKind>>,
}

impl Planned {
    /// The invalid HealthCheck rules for the kinds this desired state declares.
    pub fn invalid_rules(&self, rules: &crate::health_rules::RuleSet) -> Vec<InvalidRule> {
        let kinds = self
            .desired
            .objects
            .iter()
            .map(|o| (o.key.group_kind.group.as_str(), o.key.group_kind.kind.as_str()));
        crate::health::invalid_rules_for(rules, kinds)
    }

    /// The kinds of live objects a completed sync leaves carrying the Application's labels: the
    /// desired ones, those prune kept, and those it could not list.
    pub fn kinds_after_sync(&self) -> Vec<GroupKind> {
        let mut kinds: std::collections::BTreeSet<GroupKind> =
            self.desired.objects.iter().map(|o| o.key.group_kind.clone()).collect();
        kinds.extend(self.prune.keep.iter().map(|(o, _)| o.key.group_kind.clone()));
        kinds.extend(self.unlisted.iter().cloned());
        kinds.into_iter().collect()
    }
}

/// A rollback being run, or a hold being kept, as the decision needs it.
#[derive(Clone, Debug, Default)]
pub struct Run {
    /// The commit held (`rollback-from`): the one the spec resolves to.
    pub held: String,
    /// The pending request; `None` while a completed rollback only holds.
    pub request: Option<rollback::Request>,
    /// The desired state the request approves: the chosen Revision's
    /// `status.deployedDesiredStateHash`.
    pub target_state: Option<String>,
    /// The Revisions of the held commit, marked `RolledBack=True` once the rollback completes.
    pub replaced: Vec<Revision>,
    /// A completed rollback holds `held` already (so abandoning keeps `rollback-from`).
    pub established: bool,
    /// `rollback-from` is missing and is recorded now.
    pub record_from: bool,
}

/// A write to another Revision than the decision's own: its status (server-side apply) and
/// annotation changes (`None` removes).
#[derive(Clone, Debug, PartialEq)]
pub struct RevisionUpdate {
    pub name: String,
    pub status: Option<RevisionStatus>,
    pub annotations: BTreeMap<String, Option<String>>,
}

/// The step the controller performs after writing the decided objects.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Nothing beyond the writes.
    Report,
    /// Apply the desired objects (in `core::order` groups), then delete `prune`.
    Sync { prune: Vec<ManagedObject> },
}

/// Everything one reconcile writes before its step, in order: the Revision (spec, then status),
/// the Application status, the Events.
#[derive(Clone, Debug)]
pub struct Decision {
    /// The Revision to create or update, when there is one.
    pub revision: Option<Revision>,
    /// The new Application status, or `None` when it is unchanged.
    pub status: Option<ApplicationStatus>,
    pub events: Vec<(EventReason, String)>,
    pub step: Step,
    /// Look again after this long even without a trigger (an attempt still Progressing, a retry
    /// waiting for its backoff).
    pub requeue_after: Option<Duration>,
    /// Changes to the Application's annotations (`None` removes): a rollback requested,
    /// recorded, completed, lifted or abandoned. Written after the statuses.
    pub annotations: BTreeMap<String, Option<String>>,
    /// Writes to other Revisions: those a completed rollback replaced.
    pub others: Vec<RevisionUpdate>,
}

impl Decision {
    /// The Application's status once this decision is written: its own, or else the stored one.
    pub fn status_after(&self, app: &Application) -> ApplicationStatus {
        self.status.clone().or_else(|| app.status.clone()).unwrap_or_default()
    }
}

/// Everything one Application reconcile observed, gathered by the controller before it decides
/// (nothing here is read again while deciding).
#[derive(Clone, Debug)]
pub struct Observed {
    /// `NotificationsReady` as the subscribed sinks read; `None` when the spec subscribes to none.
    pub sinks: Option<NewCondition<'static>>,
    /// The dependency verdict and the root causes of the dependencies not ready; `None` without
    /// `spec.dependsOn`.
    pub dependencies: Option<(dependencies::Verdict, Vec<Diagnosis>)>,
    /// How far source, render and plan got; `None` when nothing was observed beyond the spec (a
    /// suspended Application, or one its dependencies hold back: see [`held_back`]).
    pub observation: Option<Observation>,
    /// The rollback course for the commit the spec resolves to, its run, and the Revisions both
    /// were decided from.
    pub course: rollback::Course,
    pub run: Option<Run>,
    pub revisions: Vec<Revision>,
    /// The Revision that records an [`unplanned_failure`] of the observation's commit, when one
    /// exists.
    pub unplanned: Option<Revision>,
    /// The HealthCheck rules that are invalid for the kinds planned.
    pub invalid_rules: Vec<InvalidRule>,
}

impl Default for Observed {
    fn default() -> Self {
        Self {
            sinks: None,
            dependencies: None,
            observation: None,
            course: rollback::Course::Follow { end_hold: None },
            run: None,
            revisions: Vec::new(),
            unplanned: None,
            invalid_rules: Vec::new(),
        }
    }
}

/// What [`decide`] is fed: the Application, what its reconcile observed, the reconcile's
/// redactor and the time.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    pub app: &'a Application,
    pub observed: &'a Observed,
    pub redactor: &'a Redactor,
    pub now: &'a Time,
}

/// `DependenciesReady` (False) when `app`'s dependencies hold it back: nothing beyond them is
/// observed or planned then. `None` when none does.
pub fn held_back(
    app: &Application,
    dependencies: Option<&(dependencies::Verdict, Vec<Diagnosis>)>,
) -> Option<NewCondition<'static>> {
    let (verdict, _) = dependencies.filter(|(verdict, _)| !verdict.is_ready())?;
    dependencies::condition(app, verdict)
}

/// Every write and the one step of an Application reconcile, from what it observed. The rules,
/// in the order they apply:
/// 1. A suspended Application records only that its generation was seen.
/// 2. Dependencies that hold it back: `DependenciesReady=False`, their root causes as the
///    diagnosis, Ready unchanged, nothing planned ([`wait_for_dependencies`]).
/// 3. A rollback run whose commit could not be planned is abandoned ([`abandon_unplanned`]);
///    otherwise the rollout decides from the observation ([`decide_rollout`]); a new commit not
///    rendered yet is announced as sync state `Planning` ([`announces_planning`]).
/// 4. The rollback course adds its annotations, lifted holds and Events ([`with_course`]).
/// 5. `DependenciesReady` and `NotificationsReady` are set, or removed when the spec has no
///    dependencies or sinks.
/// 6. A reconcile that only reports warns once of each HealthCheck that became invalid for a
///    managed kind ([`newly_invalid_health_checks`]).
/// 7. A commit that could not be rendered, decrypted or validated is recorded on its own
///    Revision ([`with_unplanned_revision`]).
pub fn decide(inputs: &Inputs<'_>) -> Decision {
    let Inputs { app, observed, redactor, now } = *inputs;
    if app.spec.suspend {
        return suspended(app);
    }
    let with_sinks = |decision| {
        let sinks = observed.sinks.clone();
        with_optional_condition(decision, app, ConditionType::NotificationsReady, sinks, now)
    };
    let dependencies = observed.dependencies.as_ref();
    let Some(observation) = observed.observation.as_ref() else {
        let decision = match held_back(app, dependencies) {
            Some(condition) => {
                let causes = dependencies.map(|(_, causes)| causes.clone()).unwrap_or_default();
                wait_for_dependencies(app, condition, causes, now)
            }
            None => unchanged(app),
        };
        return with_sinks(decision);
    };
    let abandoned = match (observation, &observed.run) {
        (Observation::Failed { failure, .. }, Some(run)) => {
            abandon_unplanned(app, run, failure.reason, &failure.message, redactor, now)
        }
        _ => None,
    };
    let decided = abandoned.unwrap_or_else(|| decide_rollout(app, observation, redactor, now));
    let decision = with_course(decided, app, &observed.course, &observed.revisions);
    let condition = dependencies.and_then(|(verdict, _)| dependencies::condition(app, verdict));
    let mut decision = with_sinks(with_dependencies(decision, app, condition, now));
    if let (Step::Report, Observation::Planned(_)) = (&decision.step, observation) {
        decision.events.extend(newly_invalid_health_checks(app, &observed.invalid_rules));
    }
    let unplanned = observed.unplanned.as_ref();
    with_unplanned_revision(decision, app, observation, unplanned, redactor, now)
}

/// A suspended Application: nothing is applied, pruned or repaired; the status records only the
/// generation seen.
fn suspended(app: &Application) -> Decision {
    let current = app.status.clone().unwrap_or_default();
    let mut status = current.clone();
    status.observed_generation = app.metadata.generation;
    finish(current, status, None, Vec::new(), Step::Report)
}

/// A decision that writes nothing.
fn unchanged(app: &Application) -> Decision {
    let current = app.status.clone().unwrap_or_default();
    finish(current.clone(), current, None, Vec::new(), Step::Report)
}

/// One `InvalidHealthCheck` Warning per HealthCheck rule in `invalid` (a sync step warns of
/// those invalid for the kinds it applied, once per attempt).
pub fn invalid_health_checks(invalid: &[InvalidRule]) -> Vec<(EventReason, String)> {
    invalid.iter().map(invalid_health_check_event).collect()
}

/// For a reconcile that does not sync (the Application already runs its commit): one
/// `InvalidHealthCheck` Warning per invalid rule that the Ready condition does not name yet. The
/// condition names the HealthCheck once the object is held Progressing, so a HealthCheck that
/// turns invalid under a synced Application is reported once, not on every reconcile.
fn newly_invalid_health_checks(
    app: &Application,
    invalid: &[InvalidRule],
) -> Vec<(EventReason, String)> {
    let ready =
        app.status.as_ref().and_then(|s| conditions::get(&s.conditions, ConditionType::Ready));
    let named = |rule: &&InvalidRule| ready.is_some_and(|c| c.message.contains(&rule.health_check));
    invalid.iter().filter(|rule| !named(rule)).map(invalid_health_check_event).collect()
}

fn invalid_health_check_event(invalid: &InvalidRule) -> (EventReason, String) {
    let message = format!(
        "HealthCheck {} {}; objects of its kind are Progressing (HealthCheckFailed) until it is \
         fixed",
        invalid.health_check, invalid.denial
    );
    (EventReason::InvalidHealthCheck, message)
}

/// How a sync step went.
#[derive(Clone, Debug, PartialEq)]
pub enum SyncOutcome {
    /// Applied and pruned; `live_kinds` are the kinds of live objects left carrying the
    /// Application's labels (desired ones and those prune kept).
    Done { live_kinds: Vec<GroupKind> },
    /// Failed for a reason, on a resource when one is known.
    Failed(StepFailure),
}

/// The statuses and Events after a sync step.
#[derive(Clone, Debug)]
pub struct Settled {
    pub revision: RevisionStatus,
    pub status: ApplicationStatus,
    pub events: Vec<(EventReason, String)>,
}

/// The name of the Revision of `application`'s desired state `hash` at `commit`: the
/// Application's name, 12 characters of the commit and 10 of the hash, the name shortened when
/// the whole would pass the 253-character limit.
pub fn revision_name(application: &str, commit: &str, hash: &str) -> String {
    let hex = |text: &str, n: usize| -> String {
        let digits: String = text
            .rsplit(':')
            .next()
            .unwrap_or(text)
            .chars()
            .filter(char::is_ascii_hexdigit)
            .map(|c| c.to_ascii_lowercase())
            .take(n)
            .collect();
        if digits.is_empty() { "0".to_owned() } else { digits }
    };
    let tail = format!("-{}-{}", hex(commit, 12), hex(hash, 10));
    let mut head: String = application.chars().take(MAX_NAME - tail.len()).collect();
    while head.ends_with(['-', '.']) {
        head.pop();
    }
    format!("{head}{tail}")
}

/// The rollout's part of [`decide`]: the writes and the step for `app` after `observation`, at
/// `now`.
fn decide_rollout(
    app: &Application,
    observation: &Observation,
    redactor: &Redactor,
    now: &Time,
) -> Decision {
    let current = app.status.clone().unwrap_or_default();
    let mut status = current.clone();
    status.observed_generation = app.metadata.generation;
    let mut decision = match observation {
        Observation::Failed {
            failure: StepFailure { reason, message, .. },
            service_account,
            commit,
        } => {
            if let Some(sa) = service_account {
                status.service_account_name = Some(sa.clone());
            }
            if let Some(commit) = commit {
                status.desired_revision = Some(commit.clone());
            }
            set_sync(&mut status, SyncState::OutOfSync, now);
            let message = clean(redactor, message);
            let events = fail_ready(&mut status, app, *reason, &message, now);
            let mut decision = finish(current, status, None, events, Step::Report);
            decision.requeue_after = failed_observation_requeue(*reason);
            decision
        }
        Observation::Planned(planned) => {
            let mut decision = decide_planned(app, current, status, planned, redactor, now);
            forget_empty_kinds(&mut decision, app, planned);
            decision
        }
        Observation::Planning { service_account, commit } => {
            announce_planning(current, status, service_account, commit, now)
        }
    };
    decision.events = bounded(redactor, decision.events);
    decision
}

/// The announcement of a new commit's render and plan: sync state `Planning` with the commit as
/// `desiredRevision`; Ready keeps its value (a rollout being planned does not change it). Looked
/// at again at once, to render.
fn announce_planning(
    current: ApplicationStatus,
    mut status: ApplicationStatus,
    service_account: &str,
    commit: &str,
    now: &Time,
) -> Decision {
    status.service_account_name = Some(service_account.to_owned());
    status.desired_revision = Some(commit.to_owned());
    set_sync(&mut status, SyncState::Planning, now);
    let mut decision = finish(current, status, None, Vec::new(), Step::Report);
    decision.requeue_after = Some(Duration::ZERO);
    decision
}

/// A reconcile that syncs nothing still drops from `status.managedKinds` the recorded kinds that
/// are neither desired nor have live objects left (a prune whose sync step ended without
/// settling, say, after a failure on the way): there is nothing of them to prune or watch. Kinds
/// are only ever removed here, never added.
fn forget_empty_kinds(decision: &mut Decision, app: &Application, planned: &Planned) {
    let Some(live) = planned.live_kinds.as_ref() else { return };
    if !matches!(decision.step, Step::Report) {
        return;
    }
    let base = decision.status_after(app);
    let desired: std::collections::BTreeSet<GroupKind> =
        planned.desired.objects.iter().map(|o| o.key.group_kind.clone()).collect();
    let kept: Vec<kuvryn_sync_api::ManagedKind> = base
        .managed_kinds
        .iter()
        .filter(|k| {
            let kind = GroupKind::new(group_of(&k.api_version), &k.kind);
            desired.contains(&kind) || live.contains(&kind)
        })
        .cloned()
        .collect();
    if kept.len() != base.managed_kinds.len() {
        let mut status = base;
        status.managed_kinds = kept;
        decision.status = Some(status);
    }
}

/// When to look again after a reconcile that stopped before a plan: a retryable failure (the
/// API or the source failing for a while, such as a 500 while listing managed objects) is
/// retried after [`rollout::FIRST_BACKOFF`], as nothing else may wake the Application (its
/// Repository is unchanged, its objects too); one that only a change of the Application or of
/// Git can cure (a render error, a missing service account) waits for that change.
pub fn failed_observation_requeue(reason: FailureReason) -> Option<Duration> {
    reason.retryable().then_some(rollout::FIRST_BACKOFF)
}

/// Every Event message redacted and truncated.
fn bounded(redactor: &Redactor, events: Vec<(EventReason, String)>) -> Vec<(EventReason, String)> {
    events.into_iter().map(|(reason, message)| (reason, clean(redactor, &message))).collect()
}

fn decide_planned(
    app: &Application,
    current: ApplicationStatus,
    mut status: ApplicationStatus,
    planned: &Planned,
    redactor: &Redactor,
    now: &Time,
) -> Decision {
    status.service_account_name = Some(planned.service_account.clone());
    let desired = planned.rollback.as_ref().map_or(&planned.commit, |run| &run.held);
    status.desired_revision = Some(desired.clone());
    if let Some(run) = &planned.rollback {
        let mut decision = decide_run(app, current, status, planned, run, redactor, now);
        // Recorded while the run goes on; an abandon that removes it wins.
        if run.record_from {
            decision
                .annotations
                .entry(keys::ROLLBACK_FROM.to_owned())
                .or_insert_with(|| Some(run.held.clone()));
        }
        return decision;
    }
    let existing = planned.revision.as_ref();
    let existing_status = existing.and_then(|r| r.status.as_ref());
    let phase = existing_status.and_then(|s| s.phase);
    let has_changes = has_changes(planned);
    // Changes found after this Revision was applied are drift only while it is what runs: a
    // Revision that a rollback replaced since is deployed again.
    let deployed_here = current.deployed_revision.as_deref() == Some(planned.commit.as_str());
    if phase == Some(RevisionPhase::Applying) && under_way(app, &current, planned) {
        return continue_attempt(current, status, planned);
    }

    match phase {
        Some(RevisionPhase::Observing) if !has_changes => {
            return observe_rollout(app, current, status, planned, now);
        }
        Some(RevisionPhase::Healthy) if !has_changes => {
            return watch_finished(app, current, status, planned, now);
        }
        Some(phase @ (RevisionPhase::Observing | RevisionPhase::Healthy))
            if !app.spec.sync.self_heal && deployed_here =>
        {
            let finished = phase == RevisionPhase::Healthy;
            return report_drift(app, current, status, planned, finished, now);
        }
        Some(RevisionPhase::Failed) => {
            if let Some(fallback) = &planned.fallback {
                return request_rollback(app, current, status, planned, fallback);
            }
            if let Some(decision) = wait_or_block(app, &current, existing, now) {
                return decision;
            }
        }
        _ => {}
    }
    attempt(app, current, status, planned, Mode::Rollout, redactor, now)
}

/// Drift without selfHeal: reported as sync state `Drifted`, not repaired. While the health of
/// the desired objects is what the status says, health is not observed again (Ready and the
/// diagnosis keep their values); once a finished rollout's health changes, Ready follows it as
/// without drift ([`watch_finished`]), the sync state staying `Drifted`.
fn report_drift(
    app: &Application,
    current: ApplicationStatus,
    mut status: ApplicationStatus,
    planned: &Planned,
    finished: bool,
    now: &Time,
) -> Decision {
    let health = rollout::summarise(&planned.health).state;
    if finished && health != current.health.state {
        let mut decision = watch_finished(app, current.clone(), status, planned, now);
        let mut changed = decision.status.take().unwrap_or_else(|| current.clone());
        set_sync(&mut changed, SyncState::Drifted, now);
        decision.status = (changed != current).then_some(changed);
        return decision;
    }
    set_sync(&mut status, SyncState::Drifted, now);
    let mut decision = finish(current, status, None, Vec::new(), Step::Report);
    if finished && !rollout::is_done(health) {
        decision.requeue_after = Some(rollout::OBSERVE_EVERY);
    }
    decision
}

/// The failure of an Application's source when it follows its Repository's revision: the
/// Repository's `Ready=False` with `SourceFailure` or `AuthenticationFailure` (the commit it
/// observed before may be gone, or no longer readable with the credentials). Any other
/// Repository state (a discovery refusal is `ValidationFailure`) leaves the Application on the
/// Repository's observed commit.
pub fn failing_source(
    repository: &str,
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> Option<StepFailure> {
    let ready = conditions::get(conditions, ConditionType::Ready)?;
    let reason = ready.reason.parse::<FailureReason>().ok()?;
    let source =
        matches!(reason, FailureReason::SourceFailure | FailureReason::AuthenticationFailure);
    (ready.status == "False" && source)
        .then(|| StepFailure::new(reason, format!("Repository {repository}: {}", ready.message)))
}

/// Whether the plan changes anything.
fn has_changes(planned: &Planned) -> bool {
    planned.plan.changes.iter().any(|c| c.action != PlanAction::Unchanged)
}

/// For a failed Revision: `None` to attempt it again now, or the decision that waits for the
/// backoff, reports `RetryBlocked`, or does nothing.
fn wait_or_block(
    app: &Application,
    current: &ApplicationStatus,
    existing: Option<&Revision>,
    now: &Time,
) -> Option<Decision> {
    match retry(app, existing, now) {
        Retry::Now => None,
        Retry::After(wait) => {
            let mut decision =
                finish(current.clone(), current.clone(), None, Vec::new(), Step::Report);
            decision.requeue_after = Some(wait);
            Some(decision)
        }
        Retry::Blocked => {
            Some(retry_blocked(app, current.clone(), existing.and_then(|r| r.status.as_ref()), now))
        }
        Retry::Never => {
            Some(finish(current.clone(), current.clone(), None, Vec::new(), Step::Report))
        }
    }
}

/// A failed rollout under `failurePolicy.action: rollback` with a healthy Revision to return
/// to: request the rollback at once (`rollback-kind: automatic`); the next reconcile runs it.
fn request_rollback(
    app: &Application,
    current: ApplicationStatus,
    status: ApplicationStatus,
    planned: &Planned,
    fallback: &rollback::Fallback,
) -> Decision {
    let mut decision = finish(current, status, None, Vec::new(), Step::Report);
    decision.annotations = rollback::automatic_request(app, fallback, &planned.commit);
    decision
}

/// How an attempt is made.
#[derive(Clone, Debug)]
enum Mode {
    /// A normal rollout: `Applying`, `DeploymentStarted`, approvals as `spec.sync` says.
    Rollout,
    /// A rollback run (or a hold kept): `RollingBack`.
    Run {
        /// A new run of this request: attempts start again, its start Event goes out and the
        /// Revision records the request ([`rollback::RUN`]).
        fresh: Option<(Kind, String, String)>,
        /// The approval the run carries (manual sync), decided before.
        approval: Option<kuvryn_sync_api::Approval>,
    },
}

/// A rollback run or a hold: the Revision of the rollback's commit.
fn decide_run(
    app: &Application,
    current: ApplicationStatus,
    status: ApplicationStatus,
    planned: &Planned,
    run: &Run,
    redactor: &Redactor,
    now: &Time,
) -> Decision {
    let existing = planned.revision.as_ref();
    let phase = existing.and_then(|r| r.status.as_ref()).and_then(|s| s.phase);
    let has_changes = has_changes(planned);
    let Some(request) = &run.request else {
        // A completed rollback holds: keep the rollback's commit running.
        match phase {
            Some(RevisionPhase::RollingBack) if under_way(app, &current, planned) => {
                return continue_attempt(current, status, planned);
            }
            Some(RevisionPhase::RollingBack) if !has_changes => {
                return observe_rollout(app, current, status, planned, now);
            }
            Some(RevisionPhase::RolledBack | RevisionPhase::Healthy) if !has_changes => {
                return watch_finished(app, current, status, planned, now);
            }
            Some(phase @ (RevisionPhase::RollingBack | RevisionPhase::RolledBack))
                if !app.spec.sync.self_heal =>
            {
                let finished = phase == RevisionPhase::RolledBack;
                return report_drift(app, current, status, planned, finished, now);
            }
            Some(RevisionPhase::Failed) => {
                if let Some(decision) = wait_or_block(app, &current, existing, now) {
                    return decision;
                }
            }
            _ => {}
        }
        let mode = Mode::Run { fresh: None, approval: None };
        return attempt(app, current, status, planned, mode, redactor, now);
    };
    let id = request.id();
    let this_run = existing
        .and_then(|r| r.metadata.annotations.as_ref())
        .and_then(|a| a.get(rollback::RUN))
        .is_some_and(|recorded| *recorded == id);
    if this_run {
        match phase {
            Some(RevisionPhase::RollingBack) if under_way(app, &current, planned) => {
                return continue_attempt(current, status, planned);
            }
            Some(RevisionPhase::Failed) => {
                return match retry(app, existing, now) {
                    Retry::Now => {
                        start_run(app, current, status, planned, run, request, false, redactor, now)
                    }
                    Retry::After(wait) => {
                        let mut decision =
                            finish(current.clone(), current, None, Vec::new(), Step::Report);
                        decision.requeue_after = Some(wait);
                        decision
                    }
                    Retry::Blocked | Retry::Never => {
                        let failure = existing
                            .and_then(|r| r.status.as_ref())
                            .and_then(|s| s.failure.clone());
                        let (reason, message) = failure.map_or(
                            (FailureReason::HealthFailure, "the target failed".to_owned()),
                            |f| (f.reason, f.message),
                        );
                        abandon(app, current, status, run, request, reason, &message, now)
                    }
                };
            }
            Some(RevisionPhase::RollingBack) if !has_changes => {
                return observe_rollout(app, current, status, planned, now);
            }
            Some(RevisionPhase::RolledBack) if !has_changes => {
                // Completed before its request was removed (a restart in between).
                return complete_run(app, current, status, planned, None, now);
            }
            _ => {}
        }
    }
    start_run(app, current, status, planned, run, request, !this_run, redactor, now)
}

/// Start (or, not `fresh`, attempt again) the rollback `request`: the rendered state must be
/// the one the request approves; under manual sync the run needs its approval.
#[allow(clippy::too_many_arguments)]
fn start_run(
    app: &Application,
    current: ApplicationStatus,
    status: ApplicationStatus,
    planned: &Planned,
    run: &Run,
    request: &rollback::Request,
    fresh: bool,
    redactor: &Redactor,
    now: &Time,
) -> Decision {
    let name = revision_name(
        app.metadata.name.as_deref().unwrap_or_default(),
        &planned.commit,
        &planned.desired.hash,
    );
    let target = request.target_revision.as_deref().unwrap_or(&request.commit).to_owned();
    let changed_state = run.target_state.as_deref().filter(|state| *state != planned.desired.hash);
    let mut events = Vec::new();
    let approval = if app.spec.sync.automatic {
        if let Some(state) = changed_state {
            let message = format!(
                "commit {} now renders desired state {}, not {state}, the one Revision {target}                  deployed; a rollback deploys only the desired state it returns to, so nothing                  was applied",
                short(&request.commit),
                planned.desired.hash
            );
            return abandon(
                app,
                current,
                status,
                run,
                request,
                FailureReason::ValidationFailure,
                &message,
                now,
            );
        }
        None
    } else {
        let fingerprint =
            run.target_state.as_deref().filter(|_| changed_state.is_none()).map(|state| {
                let spec =
                    serde_json::json!({"sync": app.spec.sync, "strategy": app.spec.strategy});
                let (sync, strategy) = crate::admission::canonical_sync_and_strategy(&spec);
                crate::admission::rollback_target_hash(state, &sync, &strategy)
            });
        let digest = planned.plan.digest.clone();
        if fingerprint.is_some() && fingerprint == request.target_hash {
            let note = match request.kind {
                Kind::Manual => format!(
                    "manual rollback to Revision {target} requested by {}: approved under the                      requester, the desired state it deployed and spec.sync and spec.strategy                      are unchanged since the request",
                    request.requester()
                ),
                Kind::Automatic => format!(
                    "automatic rollback to Revision {target}: it re-deploys the desired state                      approved before, with spec.sync and spec.strategy unchanged, so no new                      approval is needed"
                ),
            };
            if fresh && request.kind == Kind::Manual {
                events.push((
                    EventReason::RollbackApproved,
                    format!(
                        "rollback to Revision {target} approved under its requester {} (plan                          digest {digest})",
                        request.requester()
                    ),
                ));
            }
            let approved_at = request
                .requested_at
                .as_deref()
                .and_then(|at| at.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .map_or_else(|| now.clone(), Time);
            Some(kuvryn_sync_api::Approval {
                approved_by: request.requester().to_owned(),
                approved_at,
                plan_digest: digest,
                desired_state_hash: planned.desired.hash.clone(),
                note: Some(note),
            })
        } else {
            // Approved with `ksync sync` after all, or waiting for it.
            match rollout::approval(app, &name, &digest, &planned.desired.hash, None) {
                Verdict::Approved(record) => Some(record),
                _ => {
                    return wait_for_rollback_approval(
                        app, current, status, planned, request, &target, redactor, now,
                    );
                }
            }
        }
    };
    let fresh = fresh.then(|| (request.kind, request.id(), request.requester().to_owned()));
    let mut decision =
        attempt(app, current, status, planned, Mode::Run { fresh, approval }, redactor, now);
    events.append(&mut decision.events);
    decision.events = events;
    decision
}

/// Under manual sync, a rollback whose target is no longer the desired state or spec the
/// requester chose waits for `ksync sync` (`RollbackTargetChanged`, once).
#[allow(clippy::too_many_arguments)]
fn wait_for_rollback_approval(
    app: &Application,
    current: ApplicationStatus,
    mut status: ApplicationStatus,
    planned: &Planned,
    request: &rollback::Request,
    target: &str,
    redactor: &Redactor,
    now: &Time,
) -> Decision {
    let mut revision = revision_for(app, planned, planned.revision.as_ref());
    let name = revision.metadata.name.clone().unwrap_or_default();
    let id = request.id();
    let recorded = revision
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(rollback::RUN.to_owned(), id.clone());
    let revision_status = revision.status.get_or_insert_with(Default::default);
    let waiting_already = recorded.as_deref() == Some(id.as_str())
        && revision_status.phase == Some(RevisionPhase::AwaitingApproval);
    revision_status.phase = Some(RevisionPhase::AwaitingApproval);
    revision_status.plan = Some(planned.plan.summary());
    revision_status.observed_generation = revision.metadata.generation;
    let mut events = Vec::new();
    if planned.revision.is_none() {
        events.push((
            EventReason::PlanCreated,
            format!("Revision {name} planned: {}", counts(&planned.plan)),
        ));
    }
    if !waiting_already {
        let why = if request.target_hash.is_none() {
            "it carries no rollback-target-hash recorded by the webhook".to_owned()
        } else {
            "the desired state it deployed, spec.sync or spec.strategy changed since the request"
                .to_owned()
        };
        events.push((
            EventReason::RollbackTargetChanged,
            format!(
                "the rollback to {target} requested by {} is not approved: {why}; review Revision                  {name} (plan digest {}) and approve it with `ksync sync {}`",
                request.requester(),
                planned.plan.digest,
                app.metadata.name.as_deref().unwrap_or_default()
            ),
        ));
    }
    set_sync(&mut status, SyncState::AwaitingApproval, now);
    finish(current, status, Some(revision), bounded(redactor, events), Step::Report)
}

/// Give up a rollback: remove the request (and `rollback-from` unless an earlier rollback holds
/// it), mark the replaced Revisions so the failure policy does not roll back from them again,
/// and leave the Application failed with `reason`.
#[allow(clippy::too_many_arguments)]
fn abandon(
    app: &Application,
    current: ApplicationStatus,
    mut status: ApplicationStatus,
    run: &Run,
    request: &rollback::Request,
    reason: FailureReason,
    message: &str,
    now: &Time,
) -> Decision {
    let target = request.target_revision.as_deref().unwrap_or(&request.commit);
    let message = redact::truncate(
        &format!("the rollback to {target} was abandoned: {message}"),
        MAX_MESSAGE,
    );
    let mut events = vec![(EventReason::RollbackAbandoned, message.clone())];
    status.desired_revision = Some(run.held.clone());
    events.extend(fail_ready(&mut status, app, reason, &message, now));
    let mut decision = finish(current, status, None, events, Step::Report);
    decision.annotations = rollback::remove_request();
    if !run.established {
        decision.annotations.insert(keys::ROLLBACK_FROM.to_owned(), None);
    }
    decision.others = run
        .replaced
        .iter()
        .filter_map(|r| r.metadata.name.clone())
        .map(|name| RevisionUpdate {
            name,
            status: None,
            annotations: BTreeMap::from([(
                rollback::ABANDONED.to_owned(),
                Some(target.to_owned()),
            )]),
        })
        .collect();
    decision
}

/// A rollback run's Revision is Healthy: it is `RolledBack`, the Application `Ready=False/
/// RolledBack`, the held commit's Revisions `RolledBack=True`, the request removed.
fn complete_run(
    app: &Application,
    current: ApplicationStatus,
    mut status: ApplicationStatus,
    planned: &Planned,
    observed: Option<(Revision, Vec<(EventReason, String)>)>,
    now: &Time,
) -> Decision {
    let Some(run) = &planned.rollback else {
        return finish(current, status, None, Vec::new(), Step::Report);
    };
    let (revision, mut events) = match (observed, &planned.revision) {
        (Some(found), _) => found,
        (None, Some(existing)) => (existing.clone(), Vec::new()),
        (None, None) => return finish(current, status, None, Vec::new(), Step::Report),
    };
    let name = revision.metadata.name.clone().unwrap_or_default();
    set_held(&mut status, app, run, &name, &planned.commit, now);
    let mut decision;
    if let Some(request) = &run.request {
        let target = request.target_revision.as_deref().unwrap_or(&name);
        let (reason, how) = match request.kind {
            Kind::Manual => (ConditionReason::ManualRollback, "ksync rollback"),
            Kind::Automatic => (ConditionReason::RollbackCompleted, "the failure policy"),
        };
        let when = request.requested_at.as_deref().unwrap_or("an unrecorded time");
        let replaced_message = format!(
            "rolled back to Revision {target} by {} at {when} ({how}); commit {} is not deployed              again until a new commit arrives or a rollback to it lifts the hold",
            request.requester(),
            short(&run.held)
        );
        events.push((
            EventReason::RollbackCompleted,
            format!(
                "{} rollback to Revision {name} (commit {}) requested by {} completed; commit {} is held",
                request.kind.as_str(),
                short(&planned.commit),
                request.requester(),
                short(&run.held)
            ),
        ));
        decision = finish(current, status, None, events, Step::Report);
        decision.annotations = rollback::remove_request();
        decision.others = run
            .replaced
            .iter()
            .filter(|r| r.metadata.name.as_deref() != Some(name.as_str()))
            .filter_map(|r| {
                let mut replaced = r.status.clone().unwrap_or_default();
                if replaced.phase.is_none_or(|p| !p.is_terminal()) {
                    replaced.phase = Some(RevisionPhase::Cancelled);
                    replaced.completed_at = Some(now.clone());
                }
                conditions::set(
                    &mut replaced.conditions,
                    NewCondition {
                        type_: ConditionType::RolledBack,
                        status: Status::True,
                        reason: reason.as_str(),
                        message: replaced_message.clone(),
                        observed_generation: r.metadata.generation,
                    },
                    now,
                );
                (r.status.as_ref() != Some(&replaced)).then(|| RevisionUpdate {
                    name: r.metadata.name.clone().unwrap_or_default(),
                    status: Some(replaced),
                    annotations: BTreeMap::from([(
                        keys::ROLLBACK_REQUESTED_BY.to_owned(),
                        Some(request.requester().to_owned()),
                    )]),
                })
            })
            .collect();
    } else {
        decision = finish(current, status, None, events, Step::Report);
    }
    let changed =
        planned.revision.as_ref().and_then(|r| r.status.as_ref()) != revision.status.as_ref();
    decision.revision = changed.then_some(revision);
    decision
}

/// `Ready=False/RolledBack`: the rollback's Revision runs and `run.held` is held. The words
/// stay the same while the hold lasts, so keeping it writes nothing.
fn set_held(
    status: &mut ApplicationStatus,
    app: &Application,
    run: &Run,
    revision: &str,
    commit: &str,
    now: &Time,
) {
    let name = app.metadata.name.as_deref().unwrap_or_default();
    conditions::set(
        &mut status.conditions,
        NewCondition {
            type_: ConditionType::Ready,
            status: Status::False,
            reason: FailureReason::RolledBack.as_str(),
            message: format!(
                "rolled back to Revision {revision} (commit {}); commit {} is held: it is not                  deployed again until a new commit arrives or `ksync rollback {name} --to                  <a Revision of it>` lifts the hold",
                short(commit),
                short(&run.held)
            ),
            observed_generation: app.metadata.generation,
        },
        now,
    );
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// An attempt at `planned`'s Revision: record it, check conflicts and approval, then apply.
fn attempt(
    app: &Application,
    current: ApplicationStatus,
    mut status: ApplicationStatus,
    planned: &Planned,
    mode: Mode,
    redactor: &Redactor,
    now: &Time,
) -> Decision {
    let existing = planned.revision.as_ref();
    let existing_status = existing.and_then(|r| r.status.as_ref());
    let phase = existing_status.and_then(|s| s.phase);
    let mut events = Vec::new();
    let mut revision = revision_for(app, planned, existing);
    let name = revision.metadata.name.clone().unwrap_or_default();
    let revision_status = revision.status.get_or_insert_with(Default::default);
    revision_status.plan = Some(planned.plan.summary());
    revision_status.observed_generation = revision.metadata.generation;
    revision_status.failure = None;
    revision_status.completed_at = None;
    if matches!(mode, Mode::Rollout) {
        // Automatic sync never starts a held commit, so a rollout of one is the explicit
        // rollback that lifted its hold: it is an ordinary Revision again.
        conditions::remove(&mut revision_status.conditions, ConditionType::RolledBack);
    }
    if existing.is_none() {
        events.push((
            EventReason::PlanCreated,
            format!("Revision {name} planned: {}", counts(&planned.plan)),
        ));
    }
    let (applying, started) = match &mode {
        Mode::Rollout => (RevisionPhase::Applying, None),
        Mode::Run { fresh, approval } => {
            let revision_status = revision.status.get_or_insert_with(Default::default);
            if let Some((_, id, requester)) = fresh {
                revision_status.attempts = 0;
                let annotations =
                    revision.metadata.annotations.get_or_insert_with(Default::default);
                annotations.insert(rollback::RUN.to_owned(), id.clone());
                annotations.insert(keys::ROLLBACK_REQUESTED_BY.to_owned(), requester.clone());
            }
            if let Some(record) = approval {
                revision.status.get_or_insert_with(Default::default).approval =
                    Some(record.clone());
            }
            (RevisionPhase::RollingBack, fresh.as_ref().map(|(kind, _, _)| *kind))
        }
    };

    if !planned.plan.conflicts.is_empty() && app.spec.sync.conflict_policy != ConflictPolicy::Adopt
    {
        let message = clean(redactor, &conflict_message(planned));
        let resource = planned.plan.conflicts.first().map(|(key, _)| key.clone());
        mark_attempt(&mut revision, app);
        let revision_status = revision.status.get_or_insert_with(Default::default);
        revision_status.attempts += 1;
        fail_revision(
            revision_status,
            FailureReason::ConflictFailure,
            &message,
            resource,
            &planned.plan,
            now,
        );
        set_sync(&mut status, SyncState::OutOfSync, now);
        events.extend(fail_attempt(
            &mut status,
            app,
            FailureReason::ConflictFailure,
            &message,
            now,
        ));
        let mut decision = finish(current, status, Some(revision), events, Step::Report);
        decision.requeue_after = Some(failure_requeue(app, planned, 1));
        return decision;
    }

    let approved_by_run = matches!(&mode, Mode::Run { approval: Some(_), .. });
    if !app.spec.sync.automatic && !approved_by_run {
        let recorded = existing_status.and_then(|s| s.approval.as_ref());
        let digest = planned.plan.digest.as_str();
        match rollout::approval(app, &name, digest, &planned.desired.hash, recorded) {
            Verdict::Approved(record) => {
                revision.status.get_or_insert_with(Default::default).approval = Some(record);
            }
            verdict => {
                let revision_status = revision.status.get_or_insert_with(Default::default);
                revision_status.phase = Some(RevisionPhase::AwaitingApproval);
                let reported = revision
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(STALE_APPROVAL))
                    .cloned();
                if let Verdict::Stale { approved, current: digest } = verdict
                    && reported.as_deref() != Some(approved.as_str())
                {
                    revision
                        .metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .insert(STALE_APPROVAL.to_owned(), approved.clone());
                    events.push((
                        EventReason::ApprovalStale,
                        format!(
                            "Revision {name} was approved with plan digest {approved}, but its plan is now {digest}; review it and approve again"
                        ),
                    ));
                } else if phase != Some(RevisionPhase::AwaitingApproval) {
                    events.push((
                        EventReason::ApprovalRequired,
                        format!(
                            "Revision {name} waits for approval (plan digest {digest}): {}",
                            counts(&planned.plan)
                        ),
                    ));
                }
                set_sync(&mut status, SyncState::AwaitingApproval, now);
                return finish(current, status, Some(revision), events, Step::Report);
            }
        }
    }

    mark_attempt(&mut revision, app);
    let revision_status = revision.status.get_or_insert_with(Default::default);
    revision_status.phase = Some(applying);
    revision_status.attempts += 1;
    revision_status.started_at = Some(now.clone());
    set_rollout_condition(revision_status, revision.metadata.generation, false, now);
    // `RollbackStarted` is the Event of a rollback a failure triggered; a manual one starts
    // like any deployment (the API reference's Events table), saying it is a rollback.
    match started {
        Some(kind) => events.push((
            match kind {
                Kind::Automatic => EventReason::RollbackStarted { automatic: true },
                Kind::Manual => EventReason::DeploymentStarted,
            },
            format!(
                "{} rollback: applying Revision {name} (commit {}): {}",
                kind.as_str(),
                planned.commit,
                counts(&planned.plan)
            ),
        )),
        None => events.push((
            EventReason::DeploymentStarted,
            format!(
                "applying Revision {name} (commit {}): {}",
                planned.commit,
                counts(&planned.plan)
            ),
        )),
    }
    if let Some(message) = planned.prune.skipped_message() {
        events.push((EventReason::PruneSkipped, clean(redactor, &message)));
    }
    if !planned.unlisted.is_empty() {
        let kinds: Vec<String> = planned.unlisted.iter().map(ToString::to_string).collect();
        events.push((
            EventReason::PruneInventoryIncomplete,
            format!(
                "service account {} may not list {}; objects of these kinds are not pruned",
                planned.service_account,
                kinds.join(", ")
            ),
        ));
    }
    if let Some(kinds) =
        inventory::kinds_before_apply(&status.managed_kinds, &planned.desired.objects)
    {
        status.managed_kinds = kinds;
    }
    set_sync(&mut status, SyncState::Applying, now);
    let step = Step::Sync { prune: planned.prune.delete.clone() };
    // The status always goes out before a sync: it carries the inventory.
    Decision {
        revision: Some(revision),
        status: Some(status),
        events,
        step,
        requeue_after: Some(rollout::OBSERVE_EVERY),
        annotations: BTreeMap::new(),
        others: Vec::new(),
    }
}

/// When to look again after a failed attempt: at once under `failurePolicy.action: rollback`
/// (the failure rolls back without waiting), else after the retry backoff.
fn failure_requeue(app: &Application, planned: &Planned, attempts: i32) -> Duration {
    if app.spec.strategy.failure_policy.action == kuvryn_sync_api::FailureAction::Rollback
        && planned.rollback.is_none()
    {
        Duration::from_secs(1)
    } else {
        rollout::backoff(attempts)
    }
}

/// The statuses of the Revisions a new desired state supersedes: every other Revision of the
/// Application still in progress ends `Cancelled` (ruling 7; a rollout a newer desired state
/// interrupts ends the same way, so it is no longer protected as in progress).
pub fn cancel_superseded(
    revisions: &[Revision],
    current: &str,
    now: &Time,
) -> Vec<(String, RevisionStatus)> {
    revisions
        .iter()
        .filter(|r| r.metadata.name.as_deref() != Some(current))
        .filter_map(|r| {
            let status = r.status.clone().unwrap_or_default();
            if status.phase.is_some_and(RevisionPhase::is_terminal) {
                return None;
            }
            let mut cancelled = status;
            cancelled.phase = Some(RevisionPhase::Cancelled);
            cancelled.completed_at = Some(now.clone());
            Some((r.metadata.name.clone()?, cancelled))
        })
        .collect()
}

/// The Revision that was Healthy before `current` (the newest other Healthy one), recorded as
/// `current`'s `status.previousRevision`: the target of a rollback.
pub fn previous_healthy(revisions: &[Revision], current: &str) -> Option<String> {
    revisions
        .iter()
        .filter(|r| r.metadata.name.as_deref() != Some(current))
        .filter(|r| rollback::completed_healthy(r))
        .max_by(|a, b| {
            let key = |r: &Revision| {
                (r.metadata.creation_timestamp.clone().map(|t| t.0), r.metadata.name.clone())
            };
            key(a).cmp(&key(b))
        })
        .and_then(|r| r.metadata.name.clone())
}

/// The Application waits for its dependencies (`spec.dependsOn`): `DependenciesReady` is
/// `condition` (False), nothing is planned, and Ready keeps its value.
fn wait_for_dependencies(
    app: &Application,
    condition: NewCondition<'_>,
    causes: Vec<Diagnosis>,
    now: &Time,
) -> Decision {
    let current = app.status.clone().unwrap_or_default();
    let mut status = current.clone();
    status.observed_generation = app.metadata.generation;
    conditions::set(&mut status.conditions, condition, now);
    // What holds it back explains why it is not Healthy: the dependencies' own root causes.
    let mut events = Vec::new();
    if diagnosis::diagnosis_changed(&status.diagnosis, &causes) {
        status.diagnosis = causes;
        if !status.diagnosis.is_empty() {
            events.push((EventReason::Diagnosed, diagnosed_message(&status.diagnosis)));
        }
    }
    let mut decision = finish(current, status, None, events, Step::Report);
    decision.requeue_after = Some(rollout::OBSERVE_EVERY.saturating_mul(6));
    decision
}

/// `decision` with `DependenciesReady` set to `condition`, or removed when `None` (an
/// Application without `spec.dependsOn` has no such condition).
fn with_dependencies(
    decision: Decision,
    app: &Application,
    condition: Option<NewCondition<'_>>,
    now: &Time,
) -> Decision {
    with_optional_condition(decision, app, ConditionType::DependenciesReady, condition, now)
}

/// `decision` with the condition `type_` set to `condition`, or removed when `None`: for the
/// conditions present only when the spec asks for them (`DependenciesReady`,
/// `NotificationsReady`). The status is written only when this or the decision changed it.
fn with_optional_condition(
    mut decision: Decision,
    app: &Application,
    type_: ConditionType,
    condition: Option<NewCondition<'_>>,
    now: &Time,
) -> Decision {
    let current = app.status.clone().unwrap_or_default();
    let mut status = decision.status.clone().unwrap_or_else(|| current.clone());
    match condition {
        Some(condition) => {
            conditions::set(&mut status.conditions, condition, now);
        }
        None => {
            conditions::remove(&mut status.conditions, type_);
        }
    }
    if decision.status.is_some() || status != current {
        decision.status = Some(status);
    }
    decision
}

/// The [`Run`] of a rollback `course`, from `app`'s Revisions: `None` unless the course rolls
/// back or holds.
pub fn run_for(
    app: &Application,
    course: &rollback::Course,
    revisions: &[Revision],
) -> Option<Run> {
    let (held, request) = match course {
        rollback::Course::RollBack { request, from } => (from.clone(), Some(request.clone())),
        rollback::Course::Hold { held, .. } => (held.clone(), None),
        _ => return None,
    };
    let own =
        |r: &&Revision| Some(r.spec.application_ref.name.as_str()) == app.metadata.name.as_deref();
    let target_state = request.as_ref().and_then(|request| {
        let name = request.target_revision.as_deref()?;
        revisions
            .iter()
            .filter(own)
            .find(|r| {
                r.metadata.name.as_deref() == Some(name) && r.spec.source.revision == request.commit
            })
            .and_then(|r| r.status.as_ref())
            .and_then(|s| s.deployed_desired_state_hash.clone())
    });
    let replaced =
        revisions.iter().filter(own).filter(|r| r.spec.source.revision == held).cloned().collect();
    let record_from = app
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::ROLLBACK_FROM))
        .is_none_or(String::is_empty);
    Some(Run {
        established: rollback::holds(revisions, &held),
        held,
        request,
        target_state,
        replaced,
        record_from,
    })
}

/// A rollback run whose target failed before a plan existed (its render, validation or dry
/// run): nothing was applied, and it is abandoned with that failure's reason.
fn abandon_unplanned(
    app: &Application,
    run: &Run,
    reason: FailureReason,
    message: &str,
    redactor: &Redactor,
    now: &Time,
) -> Option<Decision> {
    let request = run.request.as_ref()?;
    let current = app.status.clone().unwrap_or_default();
    let mut status = current.clone();
    status.observed_generation = app.metadata.generation;
    let message = format!(
        "its commit cannot be planned, so nothing was applied: {}",
        clean(redactor, message)
    );
    let mut decision = abandon(app, current, status, run, request, reason, &message, now);
    decision.events = bounded(redactor, decision.events);
    Some(decision)
}

/// `decision` with what the rollback `course` changes besides the rollout: `rollback-from`
/// removed when a new commit ended its hold (ruling 10), a hold lifted by a rollback to the
/// held commit (`RollbackHoldLifted`, its Revisions of `revisions` lose `RolledBack=True`), a request with nothing to roll back from removed
/// (`RollbackAbandoned`). The decision's own annotation changes win.
fn with_course(
    mut decision: Decision,
    app: &Application,
    course: &rollback::Course,
    revisions: &[Revision],
) -> Decision {
    let (mut patch, event) = match course {
        rollback::Course::Follow { end_hold: Some(_) } => {
            (BTreeMap::from([(keys::ROLLBACK_FROM.to_owned(), None)]), None)
        }
        rollback::Course::LiftHold { request, held } => {
            let mut patch = rollback::remove_request();
            patch.insert(keys::ROLLBACK_FROM.to_owned(), None);
            let message = format!(
                "the rollback to commit {} requested by {} lifts its hold: it is the desired \
                 revision again and is deployed",
                short(held),
                request.requester()
            );
            // The Revision this reconcile deploys may be one of them: its own status drops the
            // condition, or the sync's status write would put it back.
            let deploying = decision.revision.as_mut().filter(|r| r.spec.source.revision == *held);
            let deploying = deploying.and_then(|revision| {
                if let Some(status) = revision.status.as_mut() {
                    conditions::remove(&mut status.conditions, ConditionType::RolledBack);
                }
                revision.metadata.name.clone()
            });
            let others = rollback::lifted(revisions, held).into_iter();
            decision.others.extend(
                others.filter(|(name, _)| Some(name) != deploying.as_ref()).map(
                    |(name, status)| RevisionUpdate {
                        name,
                        status: Some(status),
                        annotations: BTreeMap::new(),
                    },
                ),
            );
            (patch, Some((EventReason::RollbackHoldLifted, message)))
        }
        rollback::Course::Pointless { request } => {
            let message = format!(
                "the rollback to commit {} requested by {} was removed: it is already the \
                 commit the spec resolves to and no rollback holds another",
                short(&request.commit),
                request.requester()
            );
            (rollback::remove_request(), Some((EventReason::RollbackAbandoned, message)))
        }
        _ => return decision,
    };
    if !rollback::changes(app, &patch) {
        return decision;
    }
    patch.extend(std::mem::take(&mut decision.annotations));
    decision.annotations = patch;
    if let Some(event) = event {
        decision.events.insert(0, event);
    }
    decision
}

/// Whether the attempt of `planned`'s Revision (`Applying`, or `RollingBack` for a run) is under
/// way: the Application's sync state is `Applying`, which the sync step leaves only once every
/// group is applied, and no conflict has appeared that `conflictPolicy: fail` refuses (that is a
/// new attempt's `ConflictFailure`, as before the first group).
fn under_way(app: &Application, current: &ApplicationStatus, planned: &Planned) -> bool {
    matches!(current.sync.state, SyncState::Applying | SyncState::Pruning)
        && (planned.plan.conflicts.is_empty()
            || app.spec.sync.conflict_policy == ConflictPolicy::Adopt)
}

/// An attempt whose sync step is [`under_way`]: the step goes on from where the cluster is
/// ([`crate::advance`]), under the attempt's own deadline; nothing new is recorded (no attempt
/// counted, no Event, Ready unchanged), only the hooks seen so far on the Revision.
fn continue_attempt(
    current: ApplicationStatus,
    status: ApplicationStatus,
    planned: &Planned,
) -> Decision {
    let mut revision = planned.revision.clone();
    if let Some(status) = revision.as_mut().and_then(|r| r.status.as_mut()) {
        status.hooks = hooks_in_progress(planned, &status.hooks);
    }
    let existing = planned.revision.as_ref().and_then(|r| r.status.as_ref());
    let changed = revision.as_ref().and_then(|r| r.status.as_ref()) != existing;
    let step = Step::Sync { prune: planned.prune.delete.clone() };
    let mut decision = finish(current, status, revision.filter(|_| changed), Vec::new(), step);
    decision.requeue_after = Some(rollout::OBSERVE_EVERY);
    decision
}

/// The Application status that announces the prune of an attempt whose groups are all applied:
/// sync state `Pruning` (from the status `decision` writes, or the stored one). The next step
/// prunes; the attempt stays under way until it settles.
pub fn announce_prune(app: &Application, decision: &Decision, now: &Time) -> ApplicationStatus {
    let mut status = decision.status_after(app);
    set_sync(&mut status, SyncState::Pruning, now);
    status
}

/// `status.hooks` during the sync step: each hook that exists, by its health; a hook the plan
/// would create again keeps a `Succeeded` record (it ran, and was removed after success), and is
/// otherwise not recorded yet.
fn hooks_in_progress(planned: &Planned, recorded: &[HookStatus]) -> Vec<HookStatus> {
    let creates = |hook: &HookStatus| {
        planned
            .plan
            .changes
            .iter()
            .any(|c| c.action == PlanAction::Create && c.resource == hook.resource)
    };
    hook_records(planned)
        .into_iter()
        .filter_map(|hook| {
            if !creates(&hook) {
                return Some(hook);
            }
            recorded
                .iter()
                .find(|r| r.resource == hook.resource && r.state == HookState::Succeeded)
                .cloned()
        })
        .collect()
}

/// The statuses after the sync step `decision` ran with `outcome`. A step that continued an
/// attempt (`continue_attempt`) may have left the statuses as they were: those stored are the
/// base then.
pub fn settle(
    app: &Application,
    decision: &Decision,
    planned: &Planned,
    outcome: &SyncOutcome,
    redactor: &Redactor,
    now: &Time,
) -> Settled {
    let mut status = decision.status_after(app);
    let mut revision = decision
        .revision
        .as_ref()
        .or(planned.revision.as_ref())
        .and_then(|r| r.status.clone())
        .unwrap_or_default();
    let mut events = Vec::new();
    match outcome {
        SyncOutcome::Done { live_kinds } => {
            revision.phase = Some(if planned.rollback.is_some() {
                RevisionPhase::RollingBack
            } else {
                RevisionPhase::Observing
            });
            set_sync(&mut status, SyncState::Synced, now);
            set_deployed(&mut status, &planned.commit);
            let live: std::collections::BTreeSet<GroupKind> = live_kinds.iter().cloned().collect();
            status.managed_kinds =
                inventory::kinds_after_sync(&status.managed_kinds, &planned.desired.objects, &live);
            // Ready keeps its value while the rollout progresses; health decides it next.
        }
        SyncOutcome::Failed(StepFailure { reason, message, resource }) => {
            let message = clean(redactor, message);
            let on = resource.as_deref().cloned();
            fail_revision(&mut revision, *reason, &message, on, &planned.plan, now);
            if let Some(hook) = resource.as_ref().filter(|key| is_hook(planned, key)) {
                record_failed_hook(&mut revision, planned, hook, &message);
            }
            set_sync(&mut status, SyncState::OutOfSync, now);
            events.extend(fail_attempt(&mut status, app, *reason, &message, now));
        }
    }
    Settled { revision, status, events: bounded(redactor, events) }
}

/// An applied attempt (`Observing`) with nothing left to apply: wait for its objects' health,
/// then complete it (Healthy), or fail it (Degraded at once, still Progressing at the deadline).
fn observe_rollout(
    app: &Application,
    current: ApplicationStatus,
    mut status: ApplicationStatus,
    planned: &Planned,
    now: &Time,
) -> Decision {
    let Some(existing) = planned.revision.as_ref() else {
        return finish(current, status, None, Vec::new(), Step::Report);
    };
    let mut revision = existing.clone();
    let name = revision.metadata.name.clone().unwrap_or_default();
    let generation = revision.metadata.generation;
    let summary = rollout::summarise(&planned.health);
    set_sync(&mut status, SyncState::Synced, now);
    set_deployed(&mut status, &planned.commit);
    let mut events = set_health(&mut status, &summary, planned, now);
    let revision_status = revision.status.get_or_insert_with(Default::default);
    revision_status.health = Some(summary.counts.clone());
    revision_status.hooks = hook_records(planned);
    let mut requeue_after = None;
    if rollout::is_done(summary.state) && planned.rollback.is_some() {
        revision_status.phase = Some(RevisionPhase::RolledBack);
        revision_status.completed_at = Some(now.clone());
        revision_status.deployed_desired_state_hash = Some(planned.desired.hash.clone());
        set_rollout_condition(revision_status, generation, true, now);
        status.diagnosis.clear();
        events.push((
            EventReason::DeploymentHealthy,
            format!("Revision {name}: every managed resource is Healthy"),
        ));
        return complete_run(app, current, status, planned, Some((revision, events)), now);
    } else if rollout::is_done(summary.state) {
        revision_status.phase = Some(RevisionPhase::Healthy);
        revision_status.completed_at = Some(now.clone());
        revision_status.deployed_desired_state_hash = Some(planned.desired.hash.clone());
        set_rollout_condition(revision_status, generation, true, now);
        status.diagnosis.clear();
        conditions::set(
            &mut status.conditions,
            NewCondition {
                type_: ConditionType::Ready,
                status: Status::True,
                reason: ConditionReason::Healthy.as_str(),
                message: format!("Revision {name} (commit {}) is Healthy", planned.commit),
                observed_generation: app.metadata.generation,
            },
            now,
        );
        events.push((
            EventReason::DeploymentHealthy,
            format!("Revision {name}: every managed resource is Healthy"),
        ));
    } else if summary.state == HealthState::Degraded {
        let message = unhealthy_message(&summary, "is Degraded");
        let resource = summary.worst.as_ref().map(|w| w.key.clone());
        let reason = if resource.as_ref().is_some_and(|key| is_hook(planned, key)) {
            FailureReason::HookFailed
        } else {
            FailureReason::HealthFailure
        };
        fail_revision(revision_status, reason, &message, resource, &planned.plan, now);
        events.extend(fail_attempt(&mut status, app, reason, &message, now));
        requeue_after = Some(failure_requeue(app, planned, revision_status.attempts));
    } else {
        let timeout = rollout::timeout(app);
        let started = revision_status.started_at.clone().unwrap_or_else(|| now.clone());
        let left = rollout::remaining(&started, timeout, now);
        if left.is_zero() {
            let message = unhealthy_message(
                &summary,
                &format!("is still {} after {timeout:?}", summary.state.as_str()),
            );
            let resource = summary.worst.as_ref().map(|w| w.key.clone());
            fail_revision(
                revision_status,
                FailureReason::TimeoutFailure,
                &message,
                resource,
                &planned.plan,
                now,
            );
            events.extend(fail_attempt(
                &mut status,
                app,
                FailureReason::TimeoutFailure,
                &message,
                now,
            ));
            requeue_after = Some(failure_requeue(app, planned, revision_status.attempts));
        } else {
            requeue_after = Some(left.min(rollout::OBSERVE_EVERY));
        }
    }
    let changed =
        planned.revision.as_ref().and_then(|r| r.status.as_ref()) != revision.status.as_ref();
    let revision = changed.then_some(revision);
    let mut decision = finish(current, status, revision, events, Step::Report);
    decision.requeue_after = requeue_after;
    decision
}

/// Whether `key` is a pre-sync or post-sync hook of `planned`'s desired state.
fn is_hook(planned: &Planned, key: &ObjectKey) -> bool {
    planned.desired.objects.iter().any(|o| o.key == *key && o.stage != Stage::Main)
}

/// A hook that failed during the sync step (before the rollout's health is observed), recorded
/// in `status.hooks` as `Failed` in place of what was recorded of it before.
fn record_failed_hook(
    revision: &mut RevisionStatus,
    planned: &Planned,
    hook: &ObjectKey,
    message: &str,
) {
    let Some(object) = planned.desired.objects.iter().find(|o| &o.key == hook) else { return };
    let stage = match object.stage {
        Stage::PreSync => HookStage::PreSync,
        Stage::PostSync => HookStage::PostSync,
        Stage::Main => return,
    };
    let resource = resource_ref(hook, &planned.plan);
    revision.hooks.retain(|h| h.resource != resource);
    revision.hooks.truncate(MAX_HOOKS - 1);
    revision.hooks.push(HookStatus {
        resource,
        stage,
        state: HookState::Failed,
        message: redact::truncate(message, MAX_MESSAGE),
    });
}

/// `status.hooks`: each hook of the desired state and how it went, from its health (at most
/// [`MAX_HOOKS`]).
fn hook_records(planned: &Planned) -> Vec<HookStatus> {
    planned
        .health
        .iter()
        .filter_map(|health| {
            let object = planned.desired.objects.iter().find(|o| o.key == health.key)?;
            let stage = match object.stage {
                Stage::PreSync => HookStage::PreSync,
                Stage::PostSync => HookStage::PostSync,
                Stage::Main => return None,
            };
            let state = match health.state {
                HealthState::Healthy | HealthState::Suspended => HookState::Succeeded,
                HealthState::Degraded => HookState::Failed,
                HealthState::Progressing | HealthState::Unknown => HookState::Running,
            };
            Some(HookStatus {
                resource: ResourceRef {
                    api_version: health.api_version.clone(),
                    kind: health.key.group_kind.kind.clone(),
                    namespace: health.key.namespace.clone().unwrap_or_default(),
                    name: health.key.name.clone(),
                },
                stage,
                state,
                message: redact::truncate(&health.message, MAX_MESSAGE),
            })
        })
        .take(MAX_HOOKS)
        .collect()
}

/// A finished (Healthy) rollout with nothing to apply: Ready follows its resources' health —
/// Degraded or Progressing while they are not Healthy (`HealthDegraded` on the change), True
/// again once they are.
fn watch_finished(
    app: &Application,
    current: ApplicationStatus,
    mut status: ApplicationStatus,
    planned: &Planned,
    now: &Time,
) -> Decision {
    let summary = rollout::summarise(&planned.health);
    set_sync(&mut status, SyncState::Synced, now);
    set_deployed(&mut status, &planned.commit);
    let mut events = set_health(&mut status, &summary, planned, now);
    if let Some(run) = &planned.rollback {
        // A held RolledBack stays RolledBack, whatever the health.
        let name =
            planned.revision.as_ref().and_then(|r| r.metadata.name.clone()).unwrap_or_default();
        set_held(&mut status, app, run, &name, &planned.commit, now);
        let mut decision = finish(current, status, None, events, Step::Report);
        if !rollout::is_done(summary.state) {
            decision.requeue_after = Some(rollout::OBSERVE_EVERY);
        }
        return decision;
    }
    let (condition_status, reason, message) = if rollout::is_done(summary.state) {
        let name =
            planned.revision.as_ref().and_then(|r| r.metadata.name.clone()).unwrap_or_default();
        // The same words as when the rollout completed: an unchanged resync writes nothing.
        (
            Status::True,
            ConditionReason::Healthy,
            format!("Revision {name} (commit {}) is Healthy", planned.commit),
        )
    } else if summary.state == HealthState::Degraded {
        (Status::False, ConditionReason::Degraded, unhealthy_message(&summary, "is Degraded"))
    } else {
        let state = summary.state.as_str();
        (
            Status::False,
            ConditionReason::Progressing,
            unhealthy_message(&summary, &format!("is {state}")),
        )
    };
    let was_true = conditions::get(&status.conditions, ConditionType::Ready)
        .is_some_and(|c| c.status == "True");
    conditions::set(
        &mut status.conditions,
        NewCondition {
            type_: ConditionType::Ready,
            status: condition_status,
            reason: reason.as_str(),
            message: message.clone(),
            observed_generation: app.metadata.generation,
        },
        now,
    );
    if was_true && condition_status == Status::False {
        events.push((EventReason::HealthDegraded, message));
    }
    let mut decision = finish(current, status, None, events, Step::Report);
    if !rollout::is_done(summary.state) {
        decision.requeue_after = Some(rollout::OBSERVE_EVERY);
    }
    decision
}

/// What a failed Revision's next step is.
enum Retry {
    Now,
    After(Duration),
    /// Retries are used up: report `RetryBlocked`.
    Blocked,
    /// Nothing to do until something changes.
    Never,
}

/// Retries: while a retryable failure has attempts left, after a backoff; once the Application's
/// spec changed since the attempt ([`ATTEMPTED_GENERATION`]), at once.
fn retry(app: &Application, revision: Option<&Revision>, now: &Time) -> Retry {
    let Some(revision) = revision else { return Retry::Now };
    let Some(status) = revision.status.as_ref() else { return Retry::Now };
    let Some(failure) = status.failure.as_ref() else { return Retry::Now };
    let attempted = revision
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ATTEMPTED_GENERATION))
        .and_then(|g| g.parse::<i64>().ok());
    if attempted != app.metadata.generation {
        return Retry::Now;
    }
    if !failure.retryable {
        return Retry::Never;
    }
    let completed = status.completed_at.clone().unwrap_or_else(|| now.clone());
    let wait = rollout::remaining(&completed, rollout::backoff(status.attempts), now);
    // A Revision whose rollback was abandoned is no exception: its retries end in RetryBlocked.
    if status.attempts >= app.spec.strategy.failure_policy.max_attempts {
        let ready =
            app.status.as_ref().and_then(|s| conditions::get(&s.conditions, ConditionType::Ready));
        let blocked = ready.is_some_and(|c| {
            c.reason == FailureReason::RetryBlocked.as_str()
                && c.observed_generation == app.metadata.generation
        });
        return match (blocked, wait.is_zero()) {
            (true, _) => Retry::Never,
            (false, true) => Retry::Blocked,
            (false, false) => Retry::After(wait),
        };
    }
    if wait.is_zero() { Retry::Now } else { Retry::After(wait) }
}

/// Record on `revision` that `app`'s current generation makes this attempt.
fn mark_attempt(revision: &mut Revision, app: &Application) {
    let generation = app.metadata.generation.unwrap_or_default().to_string();
    revision
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ATTEMPTED_GENERATION.to_owned(), generation);
}

/// `Ready=False/RetryBlocked`, keeping the last failure's message.
fn retry_blocked(
    app: &Application,
    current: ApplicationStatus,
    revision: Option<&RevisionStatus>,
    now: &Time,
) -> Decision {
    let mut status = current.clone();
    status.observed_generation = app.metadata.generation;
    let attempts = revision.map_or(0, |r| r.attempts);
    let last = revision
        .and_then(|r| r.failure.as_ref())
        .map(|f| format!("{}: {}", f.reason.as_str(), f.message))
        .unwrap_or_default();
    let message = redact::truncate(
        &format!(
            "retries stopped after {attempts} attempt(s) (spec.strategy.failurePolicy.maxAttempts); last failure: {last}"
        ),
        MAX_MESSAGE,
    );
    let diagnosis = status.diagnosis.clone();
    let events = fail_ready(&mut status, app, FailureReason::RetryBlocked, &message, now);
    if revision.and_then(|r| r.failure.as_ref()).is_some_and(|f| explained_by_health(f.reason)) {
        status.diagnosis = diagnosis;
    }
    finish(current, status, None, events, Step::Report)
}

/// A message naming the worst object and what is wrong with it.
fn unhealthy_message(summary: &rollout::HealthSummary, what: &str) -> String {
    let counts = &summary.counts;
    let tally = format!(
        "{} healthy, {} progressing, {} degraded, {} unknown",
        counts.healthy, counts.progressing, counts.degraded, counts.unknown
    );
    match &summary.worst {
        Some(worst) => format!("{} {what}: {} ({tally})", worst.key, worst.message),
        None => tally,
    }
}

/// Health observed: the counts, the state, and the diagnosis that explains it (empty once every
/// resource is Healthy). `Diagnosed` when the root causes change or the Application becomes
/// Degraded with causes to name.
fn set_health(
    status: &mut ApplicationStatus,
    summary: &rollout::HealthSummary,
    planned: &Planned,
    now: &Time,
) -> Vec<(EventReason, String)> {
    let became_degraded =
        summary.state == HealthState::Degraded && status.health.state != HealthState::Degraded;
    status.resources = summary.counts.clone();
    status.state = summary.state;
    if status.health.state != summary.state {
        status.health.state = summary.state;
        status.health.last_transition_time = Some(now.clone());
    }
    let diagnosis =
        if rollout::is_done(summary.state) { Vec::new() } else { planned.diagnosis.clone() };
    let changed = diagnosis::diagnosis_changed(&status.diagnosis, &diagnosis);
    // Messages carry counts and ages that move every poll: keep the stored words while the
    // root causes are the same, so an unchanged diagnosis writes nothing.
    if changed {
        status.diagnosis = diagnosis;
    }
    if (changed || became_degraded) && !status.diagnosis.is_empty() {
        vec![(EventReason::Diagnosed, diagnosed_message(&status.diagnosis))]
    } else {
        Vec::new()
    }
}

/// The `Diagnosed` Event's message: each root cause in a few words.
pub fn diagnosed_message(diagnosis: &[Diagnosis]) -> String {
    let causes: Vec<String> = diagnosis
        .iter()
        .map(|d| {
            let r = &d.resource;
            let at = if r.namespace.is_empty() {
                r.name.clone()
            } else {
                format!("{}/{}", r.namespace, r.name)
            };
            format!("{} ({} {at})", d.reason, r.kind)
        })
        .collect();
    redact::truncate(&format!("{} root cause(s): {}", causes.len(), causes.join("; ")), MAX_MESSAGE)
}

/// The Revision's `RolloutComplete` condition: False/RollingOut while applying, True once
/// every group is Healthy.
fn set_rollout_condition(
    revision: &mut RevisionStatus,
    generation: Option<i64>,
    complete: bool,
    now: &Time,
) {
    let (status, reason, message) = if complete {
        (Status::True, ConditionReason::RolloutSucceeded, "every group is applied and Healthy")
    } else {
        (Status::False, ConditionReason::RollingOut, "applying the Revision's groups")
    };
    conditions::set(
        &mut revision.conditions,
        NewCondition {
            type_: ConditionType::RolloutComplete,
            status,
            reason: reason.as_str(),
            message: message.to_owned(),
            observed_generation: generation,
        },
        now,
    );
}

/// The Revision of `planned`: the existing one, or a new one owned by `app`.
fn revision_for(app: &Application, planned: &Planned, existing: Option<&Revision>) -> Revision {
    if let Some(existing) = existing {
        return existing.clone();
    }
    let mut revision = new_revision(app, &planned.commit, &planned.desired.hash);
    revision.status =
        Some(RevisionStatus { chart_digest: planned.chart_digest.clone(), ..Default::default() });
    revision
}

/// A new Revision of `app` for desired state `hash` at `commit`, without a status.
fn new_revision(app: &Application, commit: &str, hash: &str) -> Revision {
    let name = app.metadata.name.clone().unwrap_or_default();
    let spec = RevisionSpec {
        application_ref: LocalObjectReference { name: name.clone() },
        source: RevisionSource {
            repository_ref: app.spec.source.repository_ref.clone(),
            revision: commit.to_owned(),
            path: app.spec.source.path.clone(),
            render: app.spec.source.render.clone(),
        },
        desired_state_hash: hash.to_owned(),
    };
    let mut revision = Revision::new(&revision_name(&name, commit, hash), spec);
    revision.metadata.namespace = app.metadata.namespace.clone();
    let mut labels = std::collections::BTreeMap::from([(keys::APPLICATION.to_owned(), name)]);
    // A sharded controller watches only its shard's Revisions (docs/sharding.md).
    if let Some(shard) = app.metadata.labels.as_ref().and_then(|l| l.get(keys::SHARD)) {
        labels.insert(keys::SHARD.to_owned(), shard.clone());
    }
    revision.metadata.labels = Some(labels);
    revision.metadata.owner_references = app.controller_owner_ref(&()).map(|o| vec![o]);
    revision
}

/// The name of the Revision that records attempts at `commit` which failed before a desired
/// state existed: the commit with an empty desired-state hash.
pub fn unplanned_revision_name(application: &str, commit: &str) -> String {
    revision_name(application, commit, "")
}

/// The commit and failure of an observation that stopped at a known commit because no desired
/// state could be made of it (`RenderFailure`, `DecryptionFailure`, `ValidationFailure`): what
/// [`with_unplanned_revision`] records. Failures of the source or the API on the way (a fetch,
/// a read while planning) are the Application's, retried without a record: they say nothing
/// about the commit, and a Revision per hiccup would bury the history.
pub fn unplanned_failure(observation: &Observation) -> Option<(&str, FailureReason, &str)> {
    match observation {
        Observation::Failed {
            failure: StepFailure { reason, message, .. },
            commit: Some(commit),
            ..
        } if matches!(
            reason,
            FailureReason::RenderFailure
                | FailureReason::DecryptionFailure
                | FailureReason::ValidationFailure
        ) =>
        {
            Some((commit.as_str(), *reason, message.as_str()))
        }
        _ => None,
    }
}

/// A Revision exists from the first attempt on, also one that fails before it has a desired
/// state: `decision` for an [`unplanned_failure`] also writes the Revision
/// ([`unplanned_revision_name`]) `Failed` with the failure (the API reference's
/// `RenderFailure`, `DecryptionFailure`... on a Revision), counting an attempt each time the
/// failure changes. Nothing is written when `existing` already records this failure, so a
/// failure that repeats does not rewrite it.
fn with_unplanned_revision(
    mut decision: Decision,
    app: &Application,
    observation: &Observation,
    existing: Option<&Revision>,
    redactor: &Redactor,
    now: &Time,
) -> Decision {
    let Some((commit, reason, message)) = unplanned_failure(observation) else {
        return decision;
    };
    if decision.revision.is_some() {
        return decision;
    }
    let message = clean(redactor, message);
    let recorded = existing.and_then(|r| r.status.as_ref()).and_then(|s| s.failure.as_ref());
    if recorded.is_some_and(|f| f.reason == reason && f.message == message) {
        return decision;
    }
    let mut revision = existing.cloned().unwrap_or_else(|| new_revision(app, commit, ""));
    let status = revision.status.get_or_insert_with(Default::default);
    status.attempts += 1;
    status.started_at = Some(now.clone());
    status.phase = Some(RevisionPhase::Failed);
    status.completed_at = Some(now.clone());
    status.failure =
        Some(Failure { reason, message, resource: None, retryable: reason.retryable() });
    decision.revision = Some(revision);
    decision
}

fn fail_revision(
    revision: &mut RevisionStatus,
    reason: FailureReason,
    message: &str,
    resource: Option<ObjectKey>,
    plan: &Plan,
    now: &Time,
) {
    revision.phase = Some(RevisionPhase::Failed);
    revision.completed_at = Some(now.clone());
    revision.failure = Some(Failure {
        reason,
        message: message.to_owned(),
        resource: resource.map(|key| resource_ref(&key, plan)),
        retryable: reason.retryable(),
    });
}

/// The resource reference of `key`, with the `apiVersion` the plan lists for it.
fn resource_ref(key: &ObjectKey, plan: &Plan) -> ResourceRef {
    let api_version = plan
        .changes
        .iter()
        .find(|c| {
            group_of(&c.resource.api_version) == key.group_kind.group
                && c.resource.kind == key.group_kind.kind
                && c.resource.name == key.name
                && c.resource.namespace == key.namespace.clone().unwrap_or_default()
        })
        .map(|c| c.resource.api_version.clone())
        .unwrap_or_default();
    ResourceRef {
        api_version,
        kind: key.group_kind.kind.clone(),
        namespace: key.namespace.clone().unwrap_or_default(),
        name: key.name.clone(),
    }
}

/// `Ready=False/<reason>`, and the failure Event when the condition changed.
fn fail_ready(
    status: &mut ApplicationStatus,
    app: &Application,
    reason: FailureReason,
    message: &str,
    now: &Time,
) -> Vec<(EventReason, String)> {
    // A failure found by observing health keeps what explains it; any other failure comes
    // before health is observed, so there is nothing to explain.
    if !explained_by_health(reason) {
        status.diagnosis.clear();
    }
    let changed = conditions::set(
        &mut status.conditions,
        NewCondition {
            type_: ConditionType::Ready,
            status: Status::False,
            reason: reason.as_str(),
            message: message.to_owned(),
            observed_generation: app.metadata.generation,
        },
        now,
    );
    if changed { vec![(EventReason::Failure(reason), message.to_owned())] } else { Vec::new() }
}

/// A failed Revision attempt: Ready as [`fail_ready`] sets it, and the failure Event every
/// time, whether or not Ready changes (the API reference: a failure reason Event for every
/// Revision that failed, so a retry failing the same way is an Event too).
fn fail_attempt(
    status: &mut ApplicationStatus,
    app: &Application,
    reason: FailureReason,
    message: &str,
    now: &Time,
) -> Vec<(EventReason, String)> {
    fail_ready(status, app, reason, message, now);
    vec![(EventReason::Failure(reason), message.to_owned())]
}

/// Failures `status.diagnosis` explains: it is kept with them (and while retries are blocked
/// after them).
fn explained_by_health(reason: FailureReason) -> bool {
    matches!(
        reason,
        FailureReason::HealthFailure | FailureReason::HookFailed | FailureReason::TimeoutFailure
    )
}

fn set_sync(status: &mut ApplicationStatus, state: SyncState, now: &Time) {
    if status.sync.state != state {
        status.sync.state = state;
        status.sync.last_transition_time = Some(now.clone());
    }
}

fn set_deployed(status: &mut ApplicationStatus, commit: &str) {
    status.deployed_revision = Some(commit.to_owned());
    status.deployed_revision_short = Some(commit.chars().take(12).collect());
}

fn finish(
    current: ApplicationStatus,
    status: ApplicationStatus,
    revision: Option<Revision>,
    events: Vec<(EventReason, String)>,
    step: Step,
) -> Decision {
    Decision {
        revision,
        status: (status != current).then_some(status),
        events,
        step,
        requeue_after: None,
        annotations: BTreeMap::new(),
        others: Vec::new(),
    }
}

fn counts(plan: &Plan) -> String {
    let s = plan.summary();
    format!(
        "{} to create, {} to update, {} to delete, {} unchanged",
        s.create, s.update, s.delete, s.unchanged
    )
}

/// Each conflicting field and its manager, per object.
fn conflict_message(planned: &Planned) -> String {
    let objects: Vec<String> = planned
        .plan
        .conflicts
        .iter()
        .map(|(key, fields)| {
            let fields: Vec<String> =
                fields.iter().map(|c| format!("{} (held by {:?})", c.field, c.manager)).collect();
            format!("{key}: {}", fields.join(", "))
        })
        .collect();
    format!(
        "server-side apply conflicts with other field managers under conflictPolicy: fail: {}; \
         remove the fields from the other manager, or set spec.sync.conflictPolicy: adopt to take them over",
        objects.join("; ")
    )
}

fn clean(redactor: &Redactor, message: &str) -> String {
    redact::truncate(&redactor.redact(message), MAX_MESSAGE)
}

/// Teach `redactor` every value of the desired Secrets (`data`, decoded and as written, and
/// `stringData`), so no apply error or message can echo one.
pub fn learn_secret_values(redactor: &mut Redactor, desired: &DesiredState) {
    use base64::Engine as _;
    for object in
        desired.objects.iter().filter(|o| o.key.group_kind == GroupKind::new("", "Secret"))
    {
        for field in ["data", "stringData"] {
            let Some(values) = object.object[field].as_object() else { continue };
            for value in values.values().filter_map(Value::as_str) {
                redactor.add_secret(value);
                if field == "data"
                    && let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(value)
                    && let Ok(text) = String::from_utf8(decoded)
                {
                    redactor.add_secret(&text);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "application_tests.rs"]
mod tests;
