//! `Application`: the main deployment abstraction.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_derive::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Conditions, LocalObjectReference, ResourceRef};
use super::names::{HealthState, NotificationEvent, SyncState};

/// Default of `spec.source.render.helm.releaseName`.
pub const DEFAULT_RELEASE_NAME: &str = "kuvryn-sync";
/// Default of `spec.source.render.helm.valuesFrom[].key`.
pub const DEFAULT_VALUES_KEY: &str = "values.yaml";
/// Default of `spec.strategy.failurePolicy.maxAttempts`.
pub const DEFAULT_MAX_ATTEMPTS: i32 = 1;
/// Default of `spec.history.limit` (the reference names no default; Argo CD keeps 10).
pub const DEFAULT_HISTORY_LIMIT: i32 = 10;
/// Most entries `status.diagnosis` holds.
pub const MAX_DIAGNOSIS: usize = 10;
/// Most resources one diagnosis chain holds.
pub const MAX_CHAIN: usize = 10;
/// Longest diagnosis message, in characters.
pub const MAX_DIAGNOSIS_MESSAGE: usize = 512;
/// Longest Helm release name (Helm's own rule).
pub const MAX_RELEASE_NAME: usize = 53;
/// Helm's release name rule: a lowercase DNS subdomain.
pub const RELEASE_NAME_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Application is the main deployment abstraction.
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "sync.kuvryn.io",
    version = "v1alpha1",
    kind = "Application",
    namespaced,
    status = "ApplicationStatus",
    shortname = "ksapp",
    category = "kuvryn",
    printcolumn(name = "Sync", type_ = "string", json_path = ".status.sync.state"),
    printcolumn(name = "Health", type_ = "string", json_path = ".status.health.state"),
    printcolumn(
        name = "Revision",
        type_ = "string",
        json_path = ".status.deployedRevisionShort",
        description = "Deployed source revision (short SHA)"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "Application is the main deployment abstraction."
)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSpec {
    /// Service account Kuvryn Sync impersonates for this Application.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Where the desired state comes from and how it is rendered.
    pub source: ApplicationSource,
    /// Where namespaced desired resources go.
    pub destination: Destination,
    /// Sync behaviour.
    #[serde(default)]
    pub sync: SyncPolicy,
    /// Deployment strategy.
    #[serde(default)]
    pub strategy: Strategy,
    /// Health observation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthPolicy>,
    /// Revision history.
    #[serde(default)]
    pub history: History,
    /// What happens to managed resources when the Application is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// Stop mutations while retaining status.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// SOPS decryption of desired state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decryption: Option<Decryption>,
    /// Applications in the same namespace that must be Healthy at their desired revision first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub depends_on: Vec<LocalObjectReference>,
    /// Notification subscriptions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub notifications: Vec<NotificationSubscription>,
}

/// `spec.source`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSource {
    /// Repository in the same namespace.
    pub repository_ref: LocalObjectReference,
    /// Branch, tag, or commit. Defaults to the Repository revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Repository-relative desired-state path.
    #[serde(default)]
    pub path: String,
    /// Renderer configuration.
    pub render: Render,
}

/// `spec.source.render`, also recorded on each Revision.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(validation = Rule::new("self.type == 'helm' || !has(self.helm)").message("render.helm may only be set when render.type is helm"))]
#[serde(rename_all = "camelCase")]
pub struct Render {
    /// yaml, kustomize, or helm.
    #[serde(rename = "type")]
    pub render_type: RenderType,
    /// Helm options, for `type: helm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm: Option<HelmRender>,
}

/// `spec.source.render.type`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RenderType {
    /// Plain YAML manifests.
    #[default]
    Yaml,
    /// `kustomize build`.
    Kustomize,
    /// Helm template rendering.
    Helm,
}

fn default_release_name() -> String {
    DEFAULT_RELEASE_NAME.to_owned()
}

/// `spec.source.render.helm`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct HelmRender {
    /// Helm release name: a lowercase DNS subdomain of at most 53 characters. Kept as a plain
    /// string in Rust so an Application stored before the schema rule still decodes and can be
    /// reported with `ValidationFailure`.
    #[serde(default = "default_release_name")]
    #[schemars(
        length(min = 1, max = 53),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub release_name: String,
    /// Repository-relative Helm values files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub values_files: Vec<String>,
    /// A chart pulled from a Helm repository instead of the repository path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<HelmChart>,
    /// Values read from ConfigMaps or Secrets in the Application namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub values_from: Vec<ValuesFrom>,
    /// Inline values, merged last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub values: Option<serde_json::Value>,
}

impl Default for HelmRender {
    fn default() -> Self {
        HelmRender {
            release_name: default_release_name(),
            values_files: Vec::new(),
            chart: None,
            values_from: Vec::new(),
            values: None,
        }
    }
}

/// Schema of a free-form object: `x-kubernetes-preserve-unknown-fields`.
fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// `spec.source.render.helm.chart`: pull `name` at exact `version` from `repository`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct HelmChart {
    /// An `https://` Helm repository or an `oci://` registry.
    #[x_kube(validation = Rule::new("self.startsWith('https://') || self.startsWith('oci://')").message("chart repository must be an https:// Helm repository or an oci:// registry"))]
    #[schemars(length(min = 1, max = 2048))]
    pub repository: String,
    /// Chart name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Exact chart version.
    #[schemars(length(min = 1, max = 128))]
    pub version: String,
    /// username/password Secret labelled `sync.kuvryn.io/registry-credentials: "true"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
}

/// `spec.source.render.helm.valuesFrom[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValuesFrom {
    /// ConfigMap or Secret.
    pub kind: ValuesSourceKind,
    /// Object name in the Application namespace.
    pub name: String,
    /// Data key holding YAML values.
    #[serde(default = "default_values_key")]
    pub key: String,
}

fn default_values_key() -> String {
    DEFAULT_VALUES_KEY.to_owned()
}

/// `spec.source.render.helm.valuesFrom[].kind`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ValuesSourceKind {
    #[default]
    ConfigMap,
    Secret,
}

/// `spec.destination`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    /// Namespace for namespaced desired resources.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
}

/// `spec.sync`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncPolicy {
    /// Apply approved plans automatically.
    #[serde(default)]
    pub automatic: bool,
    /// Delete previously managed resources removed from desired state.
    #[serde(default)]
    pub prune: bool,
    /// Correct managed live drift.
    #[serde(default)]
    pub self_heal: bool,
    /// What to do on Server-Side Apply ownership conflicts.
    #[serde(default)]
    pub conflict_policy: ConflictPolicy,
}

/// `spec.sync.conflictPolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ConflictPolicy {
    /// Stop on SSA ownership conflicts.
    #[default]
    Fail,
    /// Take over conflicting fields, listing each in the plan.
    Adopt,
}

/// `spec.strategy`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Strategy {
    /// Deployment strategy. v1alpha1 supports rolling semantics.
    #[serde(default, rename = "type")]
    pub strategy_type: StrategyType,
    /// What a failed rollout does.
    #[serde(default)]
    pub failure_policy: FailurePolicy,
}

/// `spec.strategy.type`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StrategyType {
    #[default]
    Rolling,
}

fn default_max_attempts() -> i32 {
    DEFAULT_MAX_ATTEMPTS
}

/// `spec.strategy.failurePolicy`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicy {
    /// pause (default) or rollback.
    #[serde(default)]
    pub action: FailureAction,
    /// Bounds failure/health observation, such as `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub timeout: Option<String>,
    /// Attempts a desired revision gets before retries stop with RetryBlocked.
    #[serde(default = "default_max_attempts")]
    #[schemars(range(min = 1, max = 100))]
    pub max_attempts: i32,
}

impl Default for FailurePolicy {
    fn default() -> Self {
        FailurePolicy {
            action: FailureAction::default(),
            timeout: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }
}

/// `spec.strategy.failurePolicy.action`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FailureAction {
    /// Hold the failed Revision.
    #[default]
    Pause,
    /// Return to the previous healthy Revision.
    Rollback,
}

/// `spec.health`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthPolicy {
    /// Health observation timeout, counted from the start of each rollout attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub timeout: Option<String>,
}

fn default_history_limit() -> i32 {
    DEFAULT_HISTORY_LIMIT
}

/// `spec.history`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct History {
    /// Maximum retained Revisions; held Revisions are never deleted and do not count.
    #[serde(default = "default_history_limit")]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: i32,
}

impl Default for History {
    fn default() -> Self {
        History { limit: DEFAULT_HISTORY_LIMIT }
    }
}

/// `spec.deletionPolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeletionPolicy {
    /// Leave managed resources in place.
    #[default]
    Orphan,
    /// Delete managed resources (except high-risk kinds and `prune: disabled` objects).
    DeleteManagedResources,
}

/// `spec.decryption`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decryption {
    /// Decryption provider.
    pub provider: DecryptionProvider,
    /// Secret labelled `sync.kuvryn.io/decryption-key: "true"` whose `.agekey` entries hold age
    /// private keys.
    pub secret_ref: LocalObjectReference,
}

/// `spec.decryption.provider`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DecryptionProvider {
    #[default]
    Sops,
}

/// `spec.notifications[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationSubscription {
    /// NotificationSink in the Application's namespace.
    pub sink_ref: LocalObjectReference,
    /// Events to send.
    #[schemars(length(min = 1, max = 4))]
    pub events: Vec<NotificationEvent>,
}

/// Application status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationStatus {
    /// High-level health state.
    #[serde(default)]
    pub state: HealthState,
    /// Source revision Git asks Kuvryn Sync to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_revision: Option<String>,
    /// Source revision currently deployed after rollback handling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_revision: Option<String>,
    /// The first 12 characters of `deployedRevision`, for kubectl's printer column (JSONPath
    /// cannot shorten a string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_revision_short: Option<String>,
    /// Service account Kuvryn Sync last impersonated for this Application.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Sync state.
    #[serde(default)]
    pub sync: SyncStatus,
    /// Health state.
    #[serde(default)]
    pub health: HealthStatus,
    /// Kinds Kuvryn Sync last applied; used to prune and watch managed objects of any kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_kinds: Vec<ManagedKind>,
    /// Bounded counts of resources by health.
    #[serde(default)]
    pub resources: ResourceCounts,
    /// Up to 10 root causes of unhealthy managed resources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub diagnosis: Vec<Diagnosis>,
    /// Latest metadata.generation processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Kubernetes Conditions for reconciliation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Conditions,
}

/// `status.sync`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatus {
    /// Unknown, Synced, OutOfSync, Drifted, Planning, AwaitingApproval, Applying, or Pruning.
    #[serde(default)]
    pub state: SyncState,
    /// When the sync state last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// `status.health`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthStatus {
    /// Unknown, Progressing, Healthy, Degraded, or Suspended.
    #[serde(default)]
    pub state: HealthState,
    /// When the health state last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// One kind in `status.managedKinds`.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedKind {
    /// `apiVersion`, such as `apps/v1`.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Whether the kind is namespaced.
    #[serde(default)]
    pub namespaced: bool,
}

/// `status.resources` (and Revision `status.health`): counts by health.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceCounts {
    /// Healthy resources.
    #[serde(default)]
    pub healthy: i64,
    /// Progressing resources.
    #[serde(default)]
    pub progressing: i64,
    /// Degraded resources.
    #[serde(default)]
    pub degraded: i64,
    /// Resources of unknown health.
    #[serde(default)]
    pub unknown: i64,
}

/// One root cause in `status.diagnosis`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Diagnosis {
    /// The resource at the root of the failure.
    pub resource: ResourceRef,
    /// A CamelCase word naming the failure, such as MissingSecret.
    pub reason: String,
    /// Redacted evidence, at most 512 characters.
    #[schemars(length(max = 512))]
    pub message: String,
    /// Up to 10 resources, from the unhealthy managed resource down to `resource`.
    #[serde(default)]
    #[schemars(length(max = 10))]
    pub chain: Vec<ResourceRef>,
}
