//! The next step of a rollout's apply, decided afresh on every reconcile from what the cluster
//! shows: the apply runner (`kuvryn_sync_apply::runner`) performs one step per reconcile and the
//! controller requeues the Application, so no reconcile waits for a group to become Healthy.
//!
//! Progress is derived, not remembered: the rollout's groups ([`crate::order::apply_groups`]:
//! pre-sync hooks, the waves, post-sync hooks) are walked in order, and a group is complete once
//! the plan no longer changes any of its objects, its CustomResourceDefinitions are Established
//! and every object is Healthy (or Suspended). A restarted controller therefore resumes where the
//! cluster is. The rules, in the order [`next`] applies them to the first incomplete group:
//!
//! 1. CRDs the plan creates or updates are applied first, on their own ([`Next::Apply`]).
//! 2. A CRD not Established yet is waited for ([`Next::Wait`]); once
//!    [`Attempt::crd_timeout`] has passed since it was applied (its creation, or the attempt's
//!    start for one that existed), the attempt fails with `ApplyFailure`.
//! 3. The group's other changed objects are applied; for the last group that ends the apply
//!    ([`Next::Apply`] with `finishes`): its health is observed by the reconciles after, as any
//!    rollout's.
//! 4. A Degraded object fails the attempt: `HookFailed` for a hook, `HealthFailure` otherwise.
//! 5. An object still Progressing (or Unknown) is waited for until the attempt's deadline
//!    (`startedAt` plus [`crate::rollout::timeout`]); at the deadline the attempt fails with
//!    `TimeoutFailure`, naming the object and saying later groups were not applied.
//! 6. A hook the plan would create again but that the Revision records as Succeeded ran already
//!    (a Job removed after success, by a TTL say): it counts as Healthy and is not run again.
//! 7. Every group complete, or the last group reached with nothing to apply: [`Next::Done`]
//!    (prune, then the normal health observation).

use crate::failure::StepFailure;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kuvryn_sync_api::{FailureReason, HealthState};

use crate::desired::{GroupKind, ObjectKey, Stage};
use crate::rollout;

/// How long to wait before looking at a group that is not complete again (a watch on the managed
/// kinds usually wakes the Application sooner).
pub const WAIT_EVERY: Duration = Duration::from_secs(1);
/// How long after an apply that leaves groups to go the Application is looked at again.
pub const AFTER_APPLY: Duration = Duration::from_millis(500);

/// One object of a group, as this reconcile observed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub key: ObjectKey,
    /// The plan creates or updates it.
    pub changed: bool,
    pub state: HealthState,
    /// Why, in a few words.
    pub message: String,
    /// For a CustomResourceDefinition: what its live state says.
    pub crd: Option<Crd>,
    /// A hook the Revision records as Succeeded in this attempt.
    pub succeeded: bool,
}

/// A CustomResourceDefinition's live state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Crd {
    pub established: bool,
    /// Since when it is waited for: its creation, or the attempt's start when later.
    pub since: Time,
}

/// One group of the rollout: a stage and wave, in apply order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub stage: Stage,
    pub members: Vec<Member>,
}

/// The attempt's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// `status.startedAt` of the Revision.
    pub started: Time,
    /// The observation deadline after `started` ([`rollout::timeout`]).
    pub timeout: Duration,
    /// How long a CRD may take to become Established.
    pub crd_timeout: Duration,
    pub now: Time,
}

/// What the runner does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Apply `objects` of group `group`; `finishes` when nothing is left to apply or wait for
    /// after them (the last group's objects): the runner then prunes.
    Apply { group: usize, objects: Vec<ObjectKey>, finishes: bool },
    /// Look again after `after`: `on` is not ready yet.
    Wait { group: usize, on: ObjectKey, after: Duration },
    /// The attempt failed.
    Fail(StepFailure),
    /// Everything is applied: prune.
    Done,
}

/// The next step; see the module documentation for the rules.
pub fn next(groups: &[Group], attempt: &Attempt) -> Next {
    let last = groups.len().saturating_sub(1);
    for (n, group) in groups.iter().enumerate() {
        if let Some(step) = crds_first(n, group, attempt) {
            return step;
        }
        let rest = changed(group, |m| m.crd.is_none());
        if !rest.is_empty() {
            return Next::Apply { group: n, objects: rest, finishes: n == last };
        }
        if n == last {
            break;
        }
        if let Some(step) = wait_healthy(n, group, attempt) {
            return step;
        }
    }
    Next::Done
}

/// Rules 1 and 2: the group's changed CRDs, or one not Established yet.
fn crds_first(n: usize, group: &Group, attempt: &Attempt) -> Option<Next> {
    let crds = changed(group, |m| m.crd.is_some());
    if !crds.is_empty() {
        return Some(Next::Apply { group: n, objects: crds, finishes: false });
    }
    let (member, crd) = group
        .members
        .iter()
        .filter_map(|m| Some((m, m.crd.as_ref()?)))
        .find(|(_, crd)| !crd.established)?;
    let left = rollout::remaining(&crd.since, attempt.crd_timeout, &attempt.now);
    if left.is_zero() {
        return Some(Next::Fail(StepFailure {
            reason: FailureReason::ApplyFailure,
            message: format!(
                "CustomResourceDefinition {} did not become Established within {:?}",
                member.key.name, attempt.crd_timeout
            ),
            resource: Some(Box::new(member.key.clone())),
        }));
    }
    Some(Next::Wait { group: n, on: member.key.clone(), after: left.min(WAIT_EVERY) })
}

/// The keys of `group`'s members the plan changes that `which` selects; hooks recorded as
/// Succeeded are not run again (rule 6).
fn changed(group: &Group, which: impl Fn(&Member) -> bool) -> Vec<ObjectKey> {
    group
        .members
        .iter()
        .filter(|m| m.changed && !m.succeeded && which(m))
        .map(|m| m.key.clone())
        .collect()
}

/// Rules 4 and 5: `None` when every member is Healthy or Suspended (or a hook that succeeded).
fn wait_healthy(n: usize, group: &Group, attempt: &Attempt) -> Option<Next> {
    let pending = |m: &&Member| !m.succeeded && !rollout::is_done(m.state);
    if let Some(degraded) =
        group.members.iter().filter(pending).find(|m| m.state == HealthState::Degraded)
    {
        let reason = if group.stage == Stage::Main {
            FailureReason::HealthFailure
        } else {
            FailureReason::HookFailed
        };
        return Some(Next::Fail(StepFailure {
            reason,
            message: format!("{} is Degraded: {}", degraded.key, degraded.message),
            resource: Some(Box::new(degraded.key.clone())),
        }));
    }
    let waiting = group.members.iter().find(pending)?;
    let left = rollout::remaining(&attempt.started, attempt.timeout, &attempt.now);
    if left.is_zero() {
        return Some(Next::Fail(StepFailure {
            reason: FailureReason::TimeoutFailure,
            message: format!(
                "{} is still {} at the attempt's deadline, so later groups were not applied: {}",
                waiting.key,
                waiting.state.as_str(),
                waiting.message
            ),
            resource: Some(Box::new(waiting.key.clone())),
        }));
    }
    Some(Next::Wait { group: n, on: waiting.key.clone(), after: left.min(WAIT_EVERY) })
}

/// Whether `group_kind` is CustomResourceDefinition.
pub fn is_crd(group_kind: &GroupKind) -> bool {
    *group_kind == GroupKind::new("apiextensions.k8s.io", "CustomResourceDefinition")
}

#[cfg(test)]
#[path = "advance_tests.rs"]
mod tests;
