//! The rollout runner: one step of an attempt's apply per call, never a wait. Each call gathers
//! what [`kuvryn_sync_core::advance::next`] decides from (the groups of the desired state, what
//! the plan still changes, each object's health, the CustomResourceDefinitions' Established
//! state, the attempt's deadline), performs the one step it returns with the [`Engine`], and says
//! when to look again ([`Outcome::Requeue`]); the caller (the controller's reconcile) is requeued
//! and calls again with what it observes then. So one Application waiting for a wave holds no
//! worker, and a restarted controller resumes where the cluster is.
//!
//! What is injected: the engine (requests as the Application's service account), the health of
//! each desired object as the caller judged it (the controller's HealthCheck rules and kstatus,
//! on the live state it just read), and the clock.

use kuvryn_sync_core::failure::StepFailure;
use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kuvryn_sync_api::{FailureReason, HealthState, HookState, HookStatus};
use kuvryn_sync_core::advance::{self, Attempt, Crd, Group, Member, Next};
use kuvryn_sync_core::desired::{DesiredObject, ObjectKey, kinds_defined_by};
use kuvryn_sync_core::order::apply_groups;
use kuvryn_sync_core::prune::ManagedObject;
use serde_json::Value;

use crate::engine::{Engine, EngineError};

/// One attempt's rollout, as this reconcile sees it.
#[derive(Clone, Copy, Debug)]
pub struct Rollout<'a> {
    pub objects: &'a [DesiredObject],
    /// The objects the plan creates or updates.
    pub changed: &'a BTreeSet<ObjectKey>,
    /// The Revision's `status.hooks`.
    pub hooks: &'a [HookStatus],
    /// The Revision applied.
    pub revision: &'a str,
    /// What a completed apply prunes.
    pub prune: &'a [ManagedObject],
    /// The Revision's `status.startedAt`.
    pub started: &'a Time,
    /// The attempt's observation timeout.
    pub timeout: Duration,
    /// How long a CustomResourceDefinition may take to become Established.
    pub crd_timeout: Duration,
    /// Every group is applied and the prune was announced (the Application's sync state is
    /// `Pruning`): this step prunes.
    pub pruning: bool,
}

/// How one step went.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The attempt goes on: call again after this long (or sooner, on a change).
    Requeue(Duration),
    /// Every group is applied and the prune ran; the last group's health is observed after.
    Done,
    /// Every group is applied and there is something to prune: announce it (sync state
    /// `Pruning`), then step again with [`Rollout::pruning`] set.
    Prune,
    /// The attempt failed.
    Failed(StepFailure),
}

/// Judges a desired object's health; `None` when it was not observed.
pub type HealthOf<'a> = dyn Fn(&ObjectKey) -> Option<(HealthState, String)> + Send + Sync + 'a;

/// A guard held while one batch of applies runs (a duration metric's timer, say).
pub type ApplyTimer<'a> = dyn Fn() -> Box<dyn Send> + Send + Sync + 'a;

/// The runner for one Application.
pub struct Runner<'a> {
    pub engine: &'a Engine<'a>,
    pub health: &'a HealthOf<'a>,
    pub clock: &'a (dyn Fn() -> Time + Send + Sync + 'a),
    pub timer: &'a ApplyTimer<'a>,
}

impl std::fmt::Debug for Runner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner").field("engine", &self.engine).finish_non_exhaustive()
    }
}

impl Runner<'_> {
    /// Decide the next step of `rollout` and perform it.
    pub async fn step(&self, rollout: &Rollout<'_>) -> Outcome {
        if rollout.pruning {
            return self.prune(rollout).await;
        }
        let groups = self.observe(rollout).await;
        let attempt = Attempt {
            started: rollout.started.clone(),
            timeout: rollout.timeout,
            crd_timeout: rollout.crd_timeout,
            now: (self.clock)(),
        };
        match advance::next(&groups, &attempt) {
            Next::Apply { objects, finishes, .. } => {
                if let Err(err) = self.apply(rollout, &objects).await {
                    return failure(err.reason(), err);
                }
                if finishes { applied(rollout) } else { Outcome::Requeue(advance::AFTER_APPLY) }
            }
            Next::Wait { after, .. } => Outcome::Requeue(after),
            Next::Fail(failure) => Outcome::Failed(failure),
            Next::Done => applied(rollout),
        }
    }

    /// The rollout's groups with what this reconcile knows of each member.
    async fn observe(&self, rollout: &Rollout<'_>) -> Vec<Group> {
        let mut groups = Vec::new();
        for group in apply_groups(rollout.objects) {
            let mut members = Vec::new();
            for key in &group.objects {
                let Some(object) = rollout.objects.iter().find(|o| &o.key == key) else { continue };
                members.push(self.member(rollout, object).await);
            }
            groups.push(Group { stage: group.stage, members });
        }
        groups
    }

    async fn member(&self, rollout: &Rollout<'_>, object: &DesiredObject) -> Member {
        let changed = rollout.changed.contains(&object.key);
        let (state, message) = (self.health)(&object.key)
            .unwrap_or((HealthState::Progressing, "not observed yet".to_owned()));
        // A CRD the plan changes is applied first anyway; only the others are read.
        let crd = match advance::is_crd(&object.key.group_kind) && !changed {
            true => Some(self.crd(object, rollout.started).await),
            false => None,
        };
        let succeeded = rollout.hooks.iter().any(|hook| {
            hook.state == HookState::Succeeded
                && hook.resource.kind == object.key.group_kind.kind
                && hook.resource.name == object.key.name
                && Some(hook.resource.namespace.as_str()).filter(|n| !n.is_empty())
                    == object.key.namespace.as_deref()
        });
        Member { key: object.key.clone(), changed, state, message, crd, succeeded }
    }

    /// A CRD's live state: Established or not, and since when it is waited for (its creation,
    /// or `started` when later). One that cannot be read is not Established.
    async fn crd(&self, object: &DesiredObject, started: &Time) -> Crd {
        let live = self.engine.live(object).await.ok().flatten().unwrap_or(Value::Null);
        let established = live["status"]["conditions"].as_array().is_some_and(|all| {
            all.iter().any(|c| c["type"] == "Established" && c["status"] == "True")
        });
        let created =
            serde_json::from_value::<Time>(live["metadata"]["creationTimestamp"].clone()).ok();
        let since = created.filter(|c| c.0 > started.0).unwrap_or_else(|| started.clone());
        Crd { established, since }
    }

    /// Apply `keys` (one group's CRDs, or its other changed objects), in order. Discovery is
    /// forgotten around CRDs: before, so custom resources of a CRD Established since are found,
    /// and after, so they are not remembered as unserved.
    async fn apply(&self, rollout: &Rollout<'_>, keys: &[ObjectKey]) -> Result<(), EngineError> {
        let objects: Vec<&DesiredObject> =
            rollout.objects.iter().filter(|o| keys.contains(&o.key)).collect();
        let defined_here = kinds_defined_by(rollout.objects);
        if objects.iter().any(|o| defined_here.contains(&o.key.group_kind)) {
            self.engine.kinds.forget();
        }
        let timer = (self.timer)();
        self.engine.apply(&objects, rollout.revision).await?;
        drop(timer);
        if objects.iter().any(|o| advance::is_crd(&o.key.group_kind)) {
            self.engine.kinds.forget();
        }
        Ok(())
    }

    async fn prune(&self, rollout: &Rollout<'_>) -> Outcome {
        match self.engine.delete(rollout.prune).await {
            Ok(()) => Outcome::Done,
            // Whatever stopped it (a delete RBAC refuses included), the prune failed.
            Err(err) => failure(FailureReason::PruneFailure, err),
        }
    }
}

/// Every group is applied: done, or the prune comes next.
fn applied(rollout: &Rollout<'_>) -> Outcome {
    if rollout.prune.is_empty() { Outcome::Done } else { Outcome::Prune }
}

/// `err` as a failed step with `reason`, on the object it names.
pub fn failure(reason: FailureReason, err: EngineError) -> Outcome {
    Outcome::Failed(StepFailure { reason, ..StepFailure::from(err) })
}
