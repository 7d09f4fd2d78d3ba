//! Rollback: which commit an Application deploys while a rollback is requested or holds a
//! commit, which Revision a failure rolls back to, and how a finished or abandoned rollback
//! changes the Application's annotations (`docs/decisions.md#rollback`). Pure; the controller
//! reads the annotations and Revisions, asks [`course`] which commit to render, and
//! `core::application::decide` runs the rollback through the normal plan/apply/observe path.
//!
//! Rules:
//! - **A request** is the `rollback-revision` annotation (the commit), with
//!   `rollback-target-revision` (the chosen Revision), `rollback-kind` (`manual` when missing)
//!   and the webhook's audit record. While it is pending the Application deploys its commit.
//! - **The held commit** is `rollback-from`: when missing, the commit the spec resolves to is
//!   recorded when the rollback starts; a new request while one is pending keeps it.
//! - **A hold** is `rollback-from` naming the commit the spec resolves to, once a completed
//!   rollback marked that commit's Revisions `RolledBack=True`: the Application keeps running
//!   the rollback's commit. A hold is keyed on the commit: no resync, poll or values change
//!   redeploys it. It ends when the spec resolves to another commit (a new commit: the
//!   annotation goes and the old Revisions keep `RolledBack=True`, ruling 10), or when an
//!   explicit rollback to the held commit lifts it (`RollbackHoldLifted`), which removes
//!   `RolledBack=True` from its Revisions ([`lifted`]). A commit whose Revision still carries
//!   `RolledBack=True` is never deployed by automatic sync: a force-push back to it holds it again
//!   and keeps the commit deployed now running.
//! - **Automatic rollback** (`failurePolicy.action: rollback`): a failed Revision rolls back at
//!   once to the previous healthy Revision of another commit ([`fallback`]); with none, or once
//!   a rollback from it was abandoned, the failure is kept and retried like `pause`.
//! - **Abandon**: the controller removes the request (and `rollback-from` unless an earlier
//!   completed rollback established the hold), so the failed commit is what the spec deploys
//!   again; its Revision is marked [`ABANDONED`] so it does not roll back again.

use std::collections::BTreeMap;

use kuvryn_sync_api::{Application, ConditionType, FailureAction, Revision, RevisionPhase, keys};

use crate::conditions::{self, Status};

/// Annotation on a failed Revision: the Revision a rollback from it was abandoned for. A
/// failure policy does not roll back from it again; its retries follow `maxAttempts`.
pub const ABANDONED: &str = "sync.kuvryn.io/rollback-abandoned";

/// Annotation on a Revision a rollback runs (or ran) to: the identity of that request
/// ([`Request::id`]), so a new request starts a new run instead of resuming an old failure.
pub const RUN: &str = "sync.kuvryn.io/rollback-run";

/// `rollback-kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `ksync rollback` (or a missing `rollback-kind`).
    Manual,
    /// A failure policy.
    Automatic,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Manual => keys::ROLLBACK_KIND_MANUAL,
            Kind::Automatic => keys::ROLLBACK_KIND_AUTOMATIC,
        }
    }
}

/// A pending rollback request, from the Application's annotations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// `rollback-revision`: the commit to return to.
    pub commit: String,
    /// `rollback-target-revision`: the Revision chosen, if any.
    pub target_revision: Option<String>,
    pub kind: Kind,
    /// `rollback-requested-by` and `-at`, as the webhook recorded them.
    pub requested_by: Option<String>,
    pub requested_at: Option<String>,
    /// `rollback-target-hash`, as the webhook recorded it.
    pub target_hash: Option<String>,
}

impl Request {
    /// The pending request of `annotations`, if `rollback-revision` is set.
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Option<Request> {
        let get = |key: &str| annotations.get(key).filter(|v| !v.is_empty()).cloned();
        let commit = get(keys::ROLLBACK_REVISION)?;
        let kind = match annotations.get(keys::ROLLBACK_KIND).map(String::as_str) {
            Some(keys::ROLLBACK_KIND_AUTOMATIC) => Kind::Automatic,
            _ => Kind::Manual,
        };
        Some(Request {
            commit,
            target_revision: get(keys::ROLLBACK_TARGET_REVISION),
            kind,
            requested_by: get(keys::ROLLBACK_REQUESTED_BY),
            requested_at: get(keys::ROLLBACK_REQUESTED_AT),
            target_hash: get(keys::ROLLBACK_TARGET_HASH),
        })
    }

    /// Who asked, for messages: the recorded requester, or the kind's author.
    pub fn requester(&self) -> &str {
        match (&self.requested_by, self.kind) {
            (Some(by), _) => by,
            (None, Kind::Automatic) => "the failure policy",
            (None, Kind::Manual) => "an unrecorded requester",
        }
    }

    /// What identifies this request: its kind, target, requester and time. A Revision run for
    /// another request is run afresh.
    pub fn id(&self) -> String {
        format!(
            "{} rollback to {} requested by {} at {}",
            self.kind.as_str(),
            self.target_revision.as_deref().unwrap_or(&self.commit),
            self.requester(),
            self.requested_at.as_deref().unwrap_or("an unrecorded time")
        )
    }
}

/// Which commit the Application deploys now, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Course {
    /// Deploy the commit the spec resolves to. `end_hold` names a `rollback-from` to remove: a
    /// new commit ended its hold, or nothing holds it (no completed rollback marked it).
    Follow { end_hold: Option<String> },
    /// A pending request: deploy its commit, holding `from` once it completes.
    RollBack { request: Request, from: String },
    /// A request to roll back to the held commit itself: lift the hold, remove the request and
    /// deploy the commit the spec resolves to (`RollbackHoldLifted`).
    LiftHold { request: Request, held: String },
    /// A request to the commit that is already desired, with nothing held: there is nothing to
    /// roll back from; the request is removed (`RollbackAbandoned`).
    Pointless { request: Request },
    /// A completed rollback holds `held` (the commit the spec resolves to): keep deploying
    /// `deployed`, the rollback's commit.
    Hold { held: String, deployed: String },
}

/// The course of `app`, whose spec resolves to `resolved`, given its Revisions.
pub fn course(app: &Application, resolved: &str, revisions: &[Revision]) -> Course {
    let annotations = app.metadata.annotations.clone().unwrap_or_default();
    let from = annotations.get(keys::ROLLBACK_FROM).filter(|f| !f.is_empty()).cloned();
    let established = from.as_deref().is_some_and(|f| holds(revisions, f));
    match Request::from_annotations(&annotations) {
        Some(request) => match from {
            Some(held) if established && request.commit == held => {
                Course::LiftHold { request, held }
            }
            Some(from) => Course::RollBack { request, from },
            None if request.commit == resolved => Course::Pointless { request },
            None => Course::RollBack { request, from: resolved.to_owned() },
        },
        None => match from {
            Some(held) if held == resolved && established => {
                match deployed_by_rollback(app, revisions, &held) {
                    Some(deployed) => Course::Hold { held, deployed },
                    // Nothing else ran: the hold has nothing to keep running.
                    None => Course::Follow { end_hold: Some(held) },
                }
            }
            // A commit a completed rollback replaced stays out of automatic sync, also when the
            // branch is force-pushed back to it after a newer commit ended the hold.
            _ if holds(revisions, resolved) => match deployed_instead(app, resolved) {
                Some(deployed) => Course::Hold { held: resolved.to_owned(), deployed },
                None => Course::Follow { end_hold: from },
            },
            Some(from) => Course::Follow { end_hold: Some(from) },
            None => Course::Follow { end_hold: None },
        },
    }
}

/// What keeps running while `held` comes back as the desired commit: the commit deployed now.
fn deployed_instead(app: &Application, held: &str) -> Option<String> {
    app.status.as_ref()?.deployed_revision.clone().filter(|deployed| deployed != held)
}

/// The Revisions of `held` whose `RolledBack=True` an explicit rollback to it removes, each with
/// its status without that condition: lifting the hold makes the commit deployable again.
pub fn lifted(
    revisions: &[Revision],
    held: &str,
) -> Vec<(String, kuvryn_sync_api::RevisionStatus)> {
    revisions
        .iter()
        .filter(|r| r.spec.source.revision == held && rolled_back(r))
        .filter_map(|r| {
            let mut status = r.status.clone()?;
            conditions::remove(&mut status.conditions, ConditionType::RolledBack);
            Some((r.metadata.name.clone()?, status))
        })
        .collect()
}

/// Whether a completed rollback marked a Revision of `commit` `RolledBack=True`.
pub fn holds(revisions: &[Revision], commit: &str) -> bool {
    revisions.iter().any(|r| r.spec.source.revision == commit && rolled_back(r))
}

/// Whether `revision` carries `RolledBack=True`.
pub fn rolled_back(revision: &Revision) -> bool {
    revision.status.as_ref().is_some_and(|s| {
        conditions::get(&s.conditions, ConditionType::RolledBack)
            .is_some_and(|c| c.status == Status::True.as_str())
    })
}

/// The commit a completed rollback runs while `held` is held: the newest Revision of another
/// commit a rollback ran (RollingBack, RolledBack, or Failed in a run), else
/// `status.deployedRevision` when it is another commit.
fn deployed_by_rollback(app: &Application, revisions: &[Revision], held: &str) -> Option<String> {
    let ran = revisions
        .iter()
        .filter(|r| r.spec.source.revision != held)
        .filter(|r| {
            matches!(phase(r), Some(RevisionPhase::RollingBack | RevisionPhase::RolledBack))
        })
        .max_by_key(|r| {
            (r.metadata.creation_timestamp.clone().map(|t| t.0), r.metadata.name.clone())
        });
    if let Some(revision) = ran {
        return Some(revision.spec.source.revision.clone());
    }
    app.status
        .as_ref()
        .and_then(|s| s.deployed_revision.clone())
        .filter(|deployed| deployed != held)
}

/// The Revision a failure policy rolls back to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fallback {
    pub revision: String,
    pub commit: String,
}

/// Under `failurePolicy.action: rollback`, where the failed Revision `failed` rolls back to: its
/// `status.previousRevision` when that completed a healthy rollout of another commit, else the
/// newest such Revision. `None` without the action, with no such Revision, or once a rollback
/// from `failed` was abandoned ([`ABANDONED`]).
pub fn fallback(app: &Application, failed: &Revision, revisions: &[Revision]) -> Option<Fallback> {
    if app.spec.strategy.failure_policy.action != FailureAction::Rollback {
        return None;
    }
    if failed.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(ABANDONED)) {
        return None;
    }
    let commit = &failed.spec.source.revision;
    let usable = |r: &&Revision| {
        r.spec.source.revision != *commit
            && r.spec.application_ref.name == failed.spec.application_ref.name
            && completed_healthy(r)
    };
    let previous = failed.status.as_ref().and_then(|s| s.previous_revision.as_deref());
    let chosen =
        revisions.iter().filter(usable).find(|r| r.metadata.name.as_deref() == previous).or_else(
            || {
                revisions.iter().filter(usable).max_by_key(|r| {
                    (r.metadata.creation_timestamp.clone().map(|t| t.0), r.metadata.name.clone())
                })
            },
        )?;
    Some(Fallback {
        revision: chosen.metadata.name.clone()?,
        commit: chosen.spec.source.revision.clone(),
    })
}

/// Whether `revision` completed a healthy rollout and still stands (Healthy, or RolledBack: a
/// rollback to it completed): a rollback can return to it.
pub fn completed_healthy(revision: &Revision) -> bool {
    let deployed = revision
        .status
        .as_ref()
        .and_then(|s| s.deployed_desired_state_hash.as_deref())
        .is_some_and(|h| !h.is_empty());
    deployed && matches!(phase(revision), Some(RevisionPhase::Healthy | RevisionPhase::RolledBack))
}

/// The annotation changes that request an automatic rollback of a commit (held as `from`,
/// unless a hold is recorded already) to `fallback`.
pub fn automatic_request(
    app: &Application,
    fallback: &Fallback,
    from: &str,
) -> BTreeMap<String, Option<String>> {
    let mut patch = BTreeMap::from([
        (keys::ROLLBACK_REVISION.to_owned(), Some(fallback.commit.clone())),
        (keys::ROLLBACK_TARGET_REVISION.to_owned(), Some(fallback.revision.clone())),
        (keys::ROLLBACK_KIND.to_owned(), Some(keys::ROLLBACK_KIND_AUTOMATIC.to_owned())),
    ]);
    if annotation(app, keys::ROLLBACK_FROM).is_none() {
        patch.insert(keys::ROLLBACK_FROM.to_owned(), Some(from.to_owned()));
    }
    patch
}

/// The annotation changes that remove a request (completed, lifted or abandoned): the request
/// and the fingerprint that approved it go; who asked and when stay as the record of the last
/// request (a new request records its own), and `rollback-from` stays (a completed rollback
/// holds it).
pub fn remove_request() -> BTreeMap<String, Option<String>> {
    [
        keys::ROLLBACK_REVISION,
        keys::ROLLBACK_TARGET_REVISION,
        keys::ROLLBACK_KIND,
        keys::ROLLBACK_TARGET_HASH,
    ]
    .into_iter()
    .map(|key| (key.to_owned(), None))
    .collect()
}

/// `patch` applied to `app`'s annotations would change them.
pub fn changes(app: &Application, patch: &BTreeMap<String, Option<String>>) -> bool {
    patch.iter().any(|(key, value)| annotation(app, key) != value.as_deref())
}

fn annotation<'a>(app: &'a Application, key: &str) -> Option<&'a str> {
    app.metadata.annotations.as_ref().and_then(|a| a.get(key)).map(String::as_str)
}

fn phase(revision: &Revision) -> Option<RevisionPhase> {
    revision.status.as_ref().and_then(|s| s.phase)
}

#[cfg(test)]
#[path = "rollback_tests.rs"]
mod tests;
