//! `Revision`: an auditable deployment attempt.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::application::{Render, ResourceCounts};
use super::common::{Conditions, LocalObjectReference, ResourceRef};
use super::names::{FailureReason, RevisionPhase};

/// Most per-resource entries a plan summary keeps.
pub const MAX_PLAN_CHANGES: usize = 100;
/// Most hook entries `status.hooks` keeps.
pub const MAX_HOOKS: usize = 64;

/// RevisionSpec says what one deployment attempt deploys: its Application, the exact source commit
/// and render settings, and a fingerprint of the rendered manifests. Written by Kuvryn Sync, never
/// edited.
#[derive(CustomResource, JsonSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "sync.kuvryn.io",
    version = "v1alpha1",
    kind = "Revision",
    namespaced,
    status = "RevisionStatus",
    shortname = "ksrev",
    category = "kuvryn",
    printcolumn(name = "Application", type_ = "string", json_path = ".spec.applicationRef.name"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Source", type_ = "string", json_path = ".spec.source.revision"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "Revision records an auditable deployment attempt."
)]
#[serde(rename_all = "camelCase")]
pub struct RevisionSpec {
    /// The Application, in the same namespace, that owns this deployment attempt.
    pub application_ref: LocalObjectReference,
    /// The exact source this attempt rendered.
    pub source: RevisionSource,
    /// Fingerprint of the rendered desired state: the same manifests always give the same hash, so
    /// equal hashes mean equal desired states.
    pub desired_state_hash: String,
}

/// `spec.source` of a Revision.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionSource {
    /// The Repository the source was read from.
    pub repository_ref: LocalObjectReference,
    /// Resolved source revision, usually a full Git commit SHA.
    pub revision: String,
    /// Directory, relative to the repository root, that was rendered.
    #[serde(default)]
    pub path: String,
    /// Render settings this attempt used, copied from the Application.
    pub render: Render,
}

/// RevisionStatus is the progress and outcome of the deployment attempt: its phase, plan, approval,
/// hooks, health and failure. Written by the controller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionStatus {
    /// Where the attempt is: Pending, Planning, AwaitingApproval, Applying or Observing while it
    /// runs; Healthy, Failed, RollingBack, RolledBack or Cancelled once it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RevisionPhase>,
    /// When the attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the attempt completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// How many times this desired state has been attempted; retries stop at the Application's
    /// `spec.strategy.failurePolicy.maxAttempts`.
    #[serde(default)]
    pub attempts: i32,
    /// What the attempt changes, object by object, bounded in size and with secret values removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanSummary>,
    /// How many of the resources this attempt deployed are in each health state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<ResourceCounts>,
    /// Name of the Revision of this Application that was Healthy before this one, when known; the
    /// target of a rollback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_revision: Option<String>,
    /// Who approved this attempt's plan and when, for audit; one approval covers the whole rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// sha256 digest of the Helm chart archive pulled for `spec.source.render.helm.chart`,
    /// identifying the exact chart deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart_digest: Option<String>,
    /// Desired-state hash the last completed, Healthy rollout of this Revision deployed, while
    /// `spec.desiredStateHash` follows every render. A manual rollback approves only this desired
    /// state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_desired_state_hash: Option<String>,
    /// Pre-sync and post-sync hooks run for this Revision and how each went; at most 64.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub hooks: Vec<HookStatus>,
    /// Why the attempt failed: a reason, a message, the failing resource and whether retrying can
    /// help. Absent while the attempt has not failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// The `metadata.generation` this status was computed for; when it is behind
    /// `metadata.generation`, the controller has not processed the latest spec change yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard Kubernetes conditions: RolloutComplete (hooks and waves applied and Healthy) and
    /// RolledBack (a completed rollback replaced this Revision).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Conditions,
}

/// `status.plan`: a bounded, redacted plan summary.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanSummary {
    /// Digest of the desired state and full redacted plan; approvals bind to it.
    pub digest: String,
    /// Number of objects the plan creates.
    #[serde(default)]
    pub create: i64,
    /// Number of objects the plan updates.
    #[serde(default)]
    pub update: i64,
    /// Number of objects the plan deletes by pruning.
    #[serde(default)]
    pub delete: i64,
    /// Number of objects already as desired.
    #[serde(default)]
    pub unchanged: i64,
    /// Per-object changes with secret values removed; at most 100 (see `truncated`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub changes: Vec<PlanChange>,
    /// True when the plan has more changes than `changes` holds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// One resource in a plan.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanChange {
    /// The object this change is about.
    pub resource: ResourceRef,
    /// What the plan does to the object: Create, Update, Delete or Unchanged.
    pub action: PlanAction,
    /// Sync wave the object is applied in, from its `sync.kuvryn.io/sync-wave` annotation; lower
    /// waves go first, default 0.
    #[serde(default)]
    pub wave: i32,
    /// Paths of the fields that change, with secret values removed; at most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub fields: Vec<String>,
    /// Fields taken over from another field manager under `conflictPolicy: adopt`; at most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub adopted: Vec<AdoptedField>,
    /// Why the plan treats the object specially, such as a prune skipped for a high-risk kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// `status.plan.changes[].action`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PlanAction {
    Create,
    Update,
    Delete,
    #[default]
    Unchanged,
}

/// A field adopted from another field manager.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdoptedField {
    /// Path of the adopted field, such as `.spec.replicas`.
    pub field: String,
    /// Field manager that owned the field before it was adopted.
    pub previous_manager: String,
}

/// `status.approval`: audit record of a manual approval.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    /// User who approved, as the admission webhook recorded it from the authenticated request.
    pub approved_by: String,
    /// When the approval was recorded.
    pub approved_at: Time,
    /// Digest of the approved plan; a plan with another digest needs a new approval.
    pub plan_digest: String,
    /// Desired-state hash the approval covers, so one approval covers the whole rollout of that
    /// desired state.
    pub desired_state_hash: String,
    /// Why no new approval was needed, such as an automatic rollback to an approved state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `status.hooks[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookStatus {
    /// The hook object, one annotated `sync.kuvryn.io/hook`.
    pub resource: ResourceRef,
    /// When the hook runs: pre-sync (before the Revision's resources are applied) or post-sync
    /// (after).
    pub stage: HookStage,
    /// Progress of the hook: Pending, Running, Succeeded or Failed.
    pub state: HookState,
    /// Detail about the state, with secret values removed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// `status.hooks[].stage`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum HookStage {
    #[default]
    #[serde(rename = "pre-sync")]
    PreSync,
    #[serde(rename = "post-sync")]
    PostSync,
}

/// `status.hooks[].state`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum HookState {
    #[default]
    Pending,
    Running,
    Succeeded,
    Failed,
}

/// `status.failure`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// Failure reason, such as RenderFailure or HealthFailure; the same cause always gives the same
    /// reason.
    pub reason: FailureReason,
    /// Detail about the state, with secret values removed.
    pub message: String,
    /// The resource that failed, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceRef>,
    /// Whether retrying the same desired state may succeed; false means Git or the cluster's
    /// configuration must change first.
    pub retryable: bool,
}
