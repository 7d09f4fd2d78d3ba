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

/// Revision records an auditable deployment attempt.
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
    /// Application that owns this deployment attempt.
    pub application_ref: LocalObjectReference,
    /// The source of this attempt.
    pub source: RevisionSource,
    /// Deterministic rendered-state fingerprint.
    pub desired_state_hash: String,
}

/// `spec.source` of a Revision.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionSource {
    /// Repository used for this attempt.
    pub repository_ref: LocalObjectReference,
    /// Resolved source revision, usually a full Git commit SHA.
    pub revision: String,
    /// Rendered repository path.
    #[serde(default)]
    pub path: String,
    /// Renderer configuration used for this attempt.
    pub render: Render,
}

/// Revision status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionStatus {
    /// Pending, Planning, AwaitingApproval, Applying, Observing, Healthy, Failed, RollingBack,
    /// RolledBack, or Cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RevisionPhase>,
    /// When the attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the attempt completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// Retry-loop protection counter.
    #[serde(default)]
    pub attempts: i32,
    /// Bounded, redacted plan summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanSummary>,
    /// Bounded resource health summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<ResourceCounts>,
    /// Prior healthy Revision when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_revision: Option<String>,
    /// Audit record of a manual approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// sha256 digest of the Helm chart archive pulled for `render.helm.chart`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart_digest: Option<String>,
    /// Desired-state hash the last completed, Healthy rollout deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_desired_state_hash: Option<String>,
    /// Up to 64 pre-sync and post-sync hooks run for this Revision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub hooks: Vec<HookStatus>,
    /// Deterministic failure reason, message, resource, and retryability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// Latest metadata.generation processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Kubernetes Conditions for the attempt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Conditions,
}

/// `status.plan`: a bounded, redacted plan summary.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanSummary {
    /// Digest of the desired state and full redacted plan; approvals bind to it.
    pub digest: String,
    /// Objects the plan creates.
    #[serde(default)]
    pub create: i64,
    /// Objects the plan changes.
    #[serde(default)]
    pub update: i64,
    /// Objects the plan deletes (prune).
    #[serde(default)]
    pub delete: i64,
    /// Objects already as desired.
    #[serde(default)]
    pub unchanged: i64,
    /// Per-resource changes, at most 100, redacted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub changes: Vec<PlanChange>,
    /// Whether `changes` was cut to its bound.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// One resource in a plan.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanChange {
    /// The resource.
    pub resource: ResourceRef,
    /// What the plan does to it.
    pub action: PlanAction,
    /// Sync wave.
    #[serde(default)]
    pub wave: i32,
    /// Changed field paths (redacted), at most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub fields: Vec<String>,
    /// Fields taken over from another manager under `conflictPolicy: adopt`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub adopted: Vec<AdoptedField>,
    /// Why the plan treats it specially, such as a prune skipped for a high-risk kind.
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
    /// Field path, such as `.spec.replicas`.
    pub field: String,
    /// The manager that held it.
    pub previous_manager: String,
}

/// `status.approval`: audit record of a manual approval.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    /// Who approved.
    pub approved_by: String,
    /// When the approval was recorded.
    pub approved_at: Time,
    /// Plan digest the approval covers.
    pub plan_digest: String,
    /// Desired state the approval covers (one approval covers the whole rollout).
    pub desired_state_hash: String,
    /// Why no new approval was needed, such as an automatic rollback to an approved state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `status.hooks[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookStatus {
    /// The hook object.
    pub resource: ResourceRef,
    /// pre-sync or post-sync.
    pub stage: HookStage,
    /// Health of the hook run.
    pub state: HookState,
    /// Redacted message.
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
    /// Deterministic failure reason.
    pub reason: FailureReason,
    /// Redacted message.
    pub message: String,
    /// The resource that failed, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceRef>,
    /// Whether retrying the same desired state may succeed.
    pub retryable: bool,
}
