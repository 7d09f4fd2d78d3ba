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
//! - Events go out on transitions only: `PlanCreated` for a new Revision, `DeploymentStarted`,
//!   `ApprovalRequired`, `PruneSkipped` and `PruneInventoryIncomplete` once per attempt, a failure
//!   reason when the Ready condition changes.
//! - Every message passes the reconcile's [`Redactor`] (the credential values it touched and the
//!   desired Secrets' values) and the shape-based masks, and is truncated to [`MAX_MESSAGE`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_core::Resource;
use serde_json::Value;

use kuvryn_sync_api::{
    Application, ApplicationStatus, ConditionReason, ConditionType, ConflictPolicy, EventReason,
    Failure, FailureReason, LocalObjectReference, ResourceRef, Revision, RevisionPhase,
    RevisionSource, RevisionSpec, RevisionStatus, SyncState, keys,
};

use crate::conditions::{self, NewCondition, Status};
use crate::desired::{DesiredState, GroupKind, ObjectKey, group_of};
use crate::inventory;
use crate::plan::Plan;
use crate::prune::{ManagedObject, PrunePlan};
use crate::redact::{self, Redactor};

/// Longest condition, failure or Event message we write.
pub const MAX_MESSAGE: usize = 1024;

/// Longest Kubernetes object name.
const MAX_NAME: usize = 253;

/// What one Application reconcile observed.
#[derive(Clone, Debug)]
pub enum Observation {
    /// The reconcile stopped before a plan existed.
    Failed {
        reason: FailureReason,
        message: String,
        /// The service account resolved so far.
        service_account: Option<String>,
        /// The commit resolved so far.
        commit: Option<String>,
    },
    /// The desired state was rendered, validated and planned.
    Planned(Box<Planned>),
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
}

/// How a sync step went.
#[derive(Clone, Debug, PartialEq)]
pub enum SyncOutcome {
    /// Applied and pruned; `live_kinds` are the kinds of live objects left carrying the
    /// Application's labels (desired ones and those prune kept).
    Done { live_kinds: Vec<GroupKind> },
    /// Failed for `reason`, on `resource` when one is known.
    Failed { reason: FailureReason, message: String, resource: Option<ObjectKey> },
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

/// Decide the writes and the step for `app` after `observation`, at `now`.
pub fn decide(
    app: &Application,
    observation: &Observation,
    redactor: &Redactor,
    now: &Time,
) -> Decision {
    let current = app.status.clone().unwrap_or_default();
    let mut status = current.clone();
    status.observed_generation = app.metadata.generation;
    let mut decision = match observation {
        Observation::Failed { reason, message, service_account, commit } => {
            if let Some(sa) = service_account {
                status.service_account_name = Some(sa.clone());
            }
            if let Some(commit) = commit {
                status.desired_revision = Some(commit.clone());
            }
            set_sync(&mut status, SyncState::OutOfSync, now);
            let message = clean(redactor, message);
            let events = fail_ready(&mut status, app, *reason, &message, now);
            finish(current, status, None, events, Step::Report)
        }
        Observation::Planned(planned) => {
            decide_planned(app, current, status, planned, redactor, now)
        }
    };
    decision.events = bounded(redactor, decision.events);
    decision
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
    status.desired_revision = Some(planned.commit.clone());
    let existing = planned.revision.as_ref();
    let phase = existing.and_then(|r| r.status.as_ref()).and_then(|s| s.phase);
    let has_changes =
        planned.plan.changes.iter().any(|c| c.action != kuvryn_sync_api::PlanAction::Unchanged);
    let applied = matches!(phase, Some(RevisionPhase::Observing | RevisionPhase::Healthy));
    let mut events = Vec::new();

    if applied && !has_changes {
        set_sync(&mut status, SyncState::Synced, now);
        set_deployed(&mut status, &planned.commit);
        return finish(current, status, None, events, Step::Report);
    }
    if applied && !app.spec.sync.self_heal {
        set_sync(&mut status, SyncState::Drifted, now);
        return finish(current, status, None, events, Step::Report);
    }
    if phase == Some(RevisionPhase::Failed) && !may_retry(app, existing) {
        return finish(current.clone(), current, None, events, Step::Report);
    }

    let mut revision = revision_for(app, planned, existing);
    let revision_status = revision.status.get_or_insert_with(Default::default);
    revision_status.plan = Some(planned.plan.summary());
    revision_status.observed_generation = revision.metadata.generation;
    revision_status.failure = None;
    revision_status.completed_at = None;
    if existing.is_none() {
        events.push((
            EventReason::PlanCreated,
            format!(
                "Revision {} planned: {}",
                revision.metadata.name.clone().unwrap_or_default(),
                counts(&planned.plan)
            ),
        ));
    }

    if !planned.plan.conflicts.is_empty() && app.spec.sync.conflict_policy != ConflictPolicy::Adopt
    {
        let message = clean(redactor, &conflict_message(planned));
        let resource = planned.plan.conflicts.first().map(|(key, _)| key.clone());
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
        events.extend(fail_ready(&mut status, app, FailureReason::ConflictFailure, &message, now));
        return finish(current, status, Some(revision), events, Step::Report);
    }

    if !app.spec.sync.automatic {
        let revision_status = revision.status.get_or_insert_with(Default::default);
        revision_status.phase = Some(RevisionPhase::AwaitingApproval);
        if phase != Some(RevisionPhase::AwaitingApproval) {
            events.push((
                EventReason::ApprovalRequired,
                format!(
                    "Revision {} waits for approval: {}",
                    revision.metadata.name.clone().unwrap_or_default(),
                    counts(&planned.plan)
                ),
            ));
        }
        set_sync(&mut status, SyncState::AwaitingApproval, now);
        return finish(current, status, Some(revision), events, Step::Report);
    }

    let revision_status = revision.status.get_or_insert_with(Default::default);
    revision_status.phase = Some(RevisionPhase::Applying);
    revision_status.attempts += 1;
    revision_status.started_at = Some(now.clone());
    events.push((
        EventReason::DeploymentStarted,
        format!(
            "applying Revision {} (commit {}): {}",
            revision.metadata.name.clone().unwrap_or_default(),
            planned.commit,
            counts(&planned.plan)
        ),
    ));
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
    Decision { revision: Some(revision), status: Some(status), events, step }
}

/// The statuses after the sync step `decision` ran with `outcome`.
pub fn settle(
    app: &Application,
    decision: &Decision,
    planned: &Planned,
    outcome: &SyncOutcome,
    redactor: &Redactor,
    now: &Time,
) -> Settled {
    let mut status = decision.status.clone().unwrap_or_default();
    let mut revision =
        decision.revision.as_ref().and_then(|r| r.status.clone()).unwrap_or_default();
    let mut events = Vec::new();
    match outcome {
        SyncOutcome::Done { live_kinds } => {
            revision.phase = Some(RevisionPhase::Observing);
            set_sync(&mut status, SyncState::Synced, now);
            set_deployed(&mut status, &planned.commit);
            let live: std::collections::BTreeSet<GroupKind> = live_kinds.iter().cloned().collect();
            status.managed_kinds =
                inventory::kinds_after_sync(&status.managed_kinds, &planned.desired.objects, &live);
            progressing_ready(&mut status, app, &planned.commit, now);
        }
        SyncOutcome::Failed { reason, message, resource } => {
            let message = clean(redactor, message);
            fail_revision(&mut revision, *reason, &message, resource.clone(), &planned.plan, now);
            set_sync(&mut status, SyncState::OutOfSync, now);
            events.extend(fail_ready(&mut status, app, *reason, &message, now));
        }
    }
    Settled { revision, status, events: bounded(redactor, events) }
}

/// Whether a failed Revision gets another attempt: its failure is retryable and attempts are
/// left, or the Application changed since it failed — Ready no longer reports that failure for
/// the current generation (a later failure before the plan, such as a brief source outage, says
/// nothing about the Revision, so it does not block a retry).
fn may_retry(app: &Application, revision: Option<&Revision>) -> bool {
    let Some(status) = revision.and_then(|r| r.status.as_ref()) else { return true };
    let Some(failure) = status.failure.as_ref() else { return true };
    if failure.retryable && status.attempts < app.spec.strategy.failure_policy.max_attempts {
        return true;
    }
    let ready =
        app.status.as_ref().and_then(|s| conditions::get(&s.conditions, ConditionType::Ready));
    let reports_this_failure = ready.is_some_and(|c| {
        c.observed_generation == app.metadata.generation && c.reason == failure.reason.as_str()
    });
    !reports_this_failure
}

/// The Revision of `planned`: the existing one, or a new one owned by `app`.
fn revision_for(app: &Application, planned: &Planned, existing: Option<&Revision>) -> Revision {
    if let Some(existing) = existing {
        return existing.clone();
    }
    let name = app.metadata.name.clone().unwrap_or_default();
    let spec = RevisionSpec {
        application_ref: LocalObjectReference { name: name.clone() },
        source: RevisionSource {
            repository_ref: app.spec.source.repository_ref.clone(),
            revision: planned.commit.clone(),
            path: app.spec.source.path.clone(),
            render: app.spec.source.render.clone(),
        },
        desired_state_hash: planned.desired.hash.clone(),
    };
    let mut revision =
        Revision::new(&revision_name(&name, &planned.commit, &planned.desired.hash), spec);
    revision.metadata.namespace = app.metadata.namespace.clone();
    revision.metadata.labels = Some([(keys::APPLICATION.to_owned(), name)].into());
    revision.metadata.owner_references = app.controller_owner_ref(&()).map(|o| vec![o]);
    revision.status = Some(RevisionStatus::default());
    revision
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
    // Health was not observed: nothing to explain.
    status.diagnosis.clear();
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

/// After a successful apply, before health is known: Ready stays True when it was, and is
/// otherwise `Progressing` (False after a failure, Unknown when there was none yet).
fn progressing_ready(status: &mut ApplicationStatus, app: &Application, commit: &str, now: &Time) {
    let ready = conditions::get(&status.conditions, ConditionType::Ready);
    let condition_status = match ready.map(|c| c.status.as_str()) {
        Some("True") => return,
        Some("False") => Status::False,
        _ => Status::Unknown,
    };
    conditions::set(
        &mut status.conditions,
        NewCondition {
            type_: ConditionType::Ready,
            status: condition_status,
            reason: ConditionReason::Progressing.as_str(),
            message: format!(
                "commit {commit} applied; waiting for its resources to become Healthy"
            ),
            observed_generation: app.metadata.generation,
        },
        now,
    );
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
    Decision { revision, status: (status != current).then_some(status), events, step }
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
