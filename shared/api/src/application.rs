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

/// ApplicationSpec is the desired state of an Application: where its manifests come from and how
/// they are rendered, which namespace they go to, and when and how Kuvryn Sync applies, prunes and
/// rolls them back.
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
    /// Service account, in the Application's namespace, that Kuvryn Sync impersonates to read,
    /// apply and delete this Application's resources. When empty, the controller's
    /// `--default-service-account` is used; with neither, the Application fails with
    /// ServiceAccountRequired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Where the desired state comes from (a Repository, a revision and a path) and how it is
    /// rendered into Kubernetes manifests.
    pub source: ApplicationSource,
    /// Where the rendered resources are deployed.
    pub destination: Destination,
    /// When and how changes are applied: automatically or after approval, whether removed resources
    /// are pruned, whether live drift is corrected, and what happens when another field manager
    /// owns a field.
    #[serde(default)]
    pub sync: SyncPolicy,
    /// How a new revision is rolled out and what happens when the rollout fails.
    #[serde(default)]
    pub strategy: Strategy,
    /// How long a rollout may wait for its resources to become Healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthPolicy>,
    /// How many Revision objects of this Application are kept for audit and rollback.
    #[serde(default)]
    pub history: History,
    /// What happens to managed resources when the Application is deleted: `Orphan` (default) leaves
    /// them running; `DeleteManagedResources` deletes them, except high-risk kinds and objects
    /// annotated `sync.kuvryn.io/prune: disabled`.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// When true, Kuvryn Sync makes no changes to the cluster for this Application (nothing is
    /// applied, pruned or repaired) but keeps updating its status. Defaults to false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// Decrypt SOPS-encrypted files in the desired state before they are rendered and applied. When
    /// unset, files are used as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decryption: Option<Decryption>,
    /// Applications in the same namespace that must be Healthy at their desired revision before
    /// this one is planned and applied; at most 64. A cycle is reported as DependenciesReady=False
    /// with reason DependencyCycle.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub depends_on: Vec<LocalObjectReference>,
    /// Which NotificationSinks to notify, and for which lifecycle events; at most 16 subscriptions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub notifications: Vec<NotificationSubscription>,
}

/// `spec.source`: where the desired state comes from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSource {
    /// The Repository, in the Application's namespace, that holds the desired state.
    pub repository_ref: LocalObjectReference,
    /// Branch, tag or commit to deploy. Defaults to the Repository's `spec.git.revision`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Directory holding the desired state, relative to the repository root. Empty means the root.
    #[serde(default)]
    pub path: String,
    /// How the files at `path` are turned into Kubernetes manifests.
    pub render: Render,
}

/// `spec.source.render`, also recorded on each Revision.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(validation = Rule::new("self.type == 'helm' || !has(self.helm)").message("render.helm may only be set when render.type is helm"))]
#[serde(rename_all = "camelCase")]
pub struct Render {
    /// Renderer: `yaml` applies the YAML files as they are, `kustomize` runs a Kustomize build,
    /// `helm` renders a Helm chart.
    #[serde(rename = "type")]
    pub render_type: RenderType,
    /// Helm options; allowed only when `type` is helm.
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
    /// Release name the chart is rendered with (`.Release.Name` in templates). Defaults to
    /// kuvryn-sync. As in Helm, it must be a lowercase DNS subdomain (lowercase letters, digits,
    /// `-` and `.`, each dot-separated part starting and ending with a letter or digit) of at most
    /// 53 characters.
    // A plain string in Rust, so an Application stored before the schema rule still decodes and
    // can be reported with ValidationFailure.
    #[serde(default = "default_release_name")]
    #[schemars(length(min = 1, max = 53), regex(pattern = RELEASE_NAME_PATTERN))]
    pub release_name: String,
    /// Helm values files, as paths relative to the repository root, passed to Helm in the order
    /// given; at most 32.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub values_files: Vec<String>,
    /// Pull this chart from a Helm repository or OCI registry instead of rendering the chart at
    /// `spec.source.path`. The archive's digest is recorded in the Revision's `status.chartDigest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<HelmChart>,
    /// Helm values read from ConfigMaps or Secrets in the Application's namespace, as the
    /// Application's service account; at most 32. Values from Secrets are masked in plans.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub values_from: Vec<ValuesFrom>,
    /// Inline Helm values, merged last, so they override values files and `valuesFrom`.
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
    /// Where the chart is pulled from: an `https://` Helm repository URL or an `oci://` registry
    /// reference.
    #[x_kube(validation = Rule::new("self.startsWith('https://') || self.startsWith('oci://')").message("chart repository must be an https:// Helm repository or an oci:// registry"))]
    #[schemars(length(min = 1, max = 2048))]
    pub repository: String,
    /// Name of the chart in the repository.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Exact chart version to pull, such as `1.4.2`; not a range.
    #[schemars(length(min = 1, max = 128))]
    pub version: String,
    /// Secret with `username`, `password` and `url` (the repository URL or a prefix of it the
    /// credentials are for; they are sent nowhere else), or a `kubernetes.io/dockerconfigjson`
    /// Secret whose `auths` names the repository's host; it must be labelled
    /// `sync.kuvryn.io/registry-credentials: "true"`. Omit for public charts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
}

/// `spec.source.render.helm.valuesFrom[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValuesFrom {
    /// Kind of the object holding the values: ConfigMap or Secret.
    pub kind: ValuesSourceKind,
    /// Name of the ConfigMap or Secret, in the Application's namespace.
    pub name: String,
    /// Key of the object's data whose value is a YAML document of Helm values. Defaults to
    /// values.yaml.
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
    /// Namespace for namespaced desired resources: those without a namespace are placed here, and
    /// those naming another namespace are rejected. Cluster-scoped resources keep no namespace.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
}

/// `spec.sync`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncPolicy {
    /// When true, each new plan is applied as soon as it is built. When false (default), a plan
    /// waits in AwaitingApproval until someone approves it.
    #[serde(default)]
    pub automatic: bool,
    /// When true, resources this Application applied before but no longer declares are deleted.
    /// High-risk kinds (Namespaces, CustomResourceDefinitions, PersistentVolumes,
    /// PersistentVolumeClaims, Secrets) and objects annotated `sync.kuvryn.io/prune: disabled` are
    /// never pruned. Defaults to false.
    #[serde(default)]
    pub prune: bool,
    /// When true, changes made in the cluster to managed fields are reverted to the desired state.
    /// When false (default), such drift is only reported, as sync state Drifted.
    #[serde(default)]
    pub self_heal: bool,
    /// What to do when Server-Side Apply reports a field owned by another field manager: `fail`
    /// (default) stops with ConflictFailure; `adopt` takes the field over and lists it, with its
    /// previous manager, in the plan.
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
    /// Rollout strategy. v1alpha1 has only `rolling` (the default): resources are applied wave by
    /// wave, with hooks before and after.
    #[serde(default, rename = "type")]
    pub strategy_type: StrategyType,
    /// What happens when a rollout fails, how long an attempt may take, and how many attempts a
    /// desired revision gets.
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
    /// What a failed rollout does: `pause` (default) stops at the failed Revision; `rollback`
    /// returns to the previous healthy Revision and holds the failed one, or, when there is none,
    /// behaves like pause.
    #[serde(default)]
    pub action: FailureAction,
    /// Upper bound on how long a rollout attempt is observed for failure or health before the
    /// failure policy applies. A duration: one or more number-and-unit pairs with no spaces, the
    /// unit ms, s, m or h and the number optionally with a decimal fraction, such as 500ms, 90s,
    /// 1.5m or 1h30m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::DURATION_PATTERN))]
    pub timeout: Option<String>,
    /// How many attempts a desired revision gets before retries stop with RetryBlocked; 1 to 100,
    /// default 1. Under `action: rollback` a failure rolls back at once, so this matters only when
    /// there is no healthy Revision to return to or the rollback is abandoned.
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
    /// How long the resources may take to become Healthy before the attempt fails with
    /// TimeoutFailure, counted from the start of each rollout attempt: a retry, a redeployed
    /// Revision and a self-heal repair each get the full time. A duration: one or more
    /// number-and-unit pairs with no spaces, the unit ms, s, m or h and the number optionally with
    /// a decimal fraction, such as 500ms, 90s, 1.5m or 1h30m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::DURATION_PATTERN))]
    pub timeout: Option<String>,
}

fn default_history_limit() -> i32 {
    DEFAULT_HISTORY_LIMIT
}

/// `spec.history`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct History {
    /// How many Revisions of this Application are kept; older ones are deleted. 1 to 1000, default
    /// 10. Revisions a rollback holds are never deleted and do not count.
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
    /// Decryption tool. Only `sops` exists, with age keys.
    pub provider: DecryptionProvider,
    /// Secret whose `.agekey` entries hold the age private keys; it must be labelled
    /// `sync.kuvryn.io/decryption-key: "true"`.
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
    /// The NotificationSink, in the Application's namespace, to send to.
    pub sink_ref: LocalObjectReference,
    /// Lifecycle events to send: any of AwaitingApproval, Healthy, Failed and RolledBack; 1 to 4.
    #[schemars(length(min = 1, max = 4))]
    pub events: Vec<NotificationEvent>,
}

/// ApplicationStatus is what Kuvryn Sync last observed and did for the Application: its sync and
/// health states, the revisions it wants and runs, what it manages, why it is unhealthy, and its
/// conditions. Written by the controller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationStatus {
    /// Overall health of the Application in one word: Unknown, Progressing, Healthy, Degraded or
    /// Suspended.
    #[serde(default)]
    pub state: HealthState,
    /// Source revision (commit) the Application's spec resolves to now: what Kuvryn Sync is working
    /// to deploy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_revision: Option<String>,
    /// Source revision (commit) running in the cluster; after a rollback, the rollback target
    /// rather than the desired revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_revision: Option<String>,
    /// First 12 characters of `deployedRevision`, shown in the Revision column of `kubectl get`
    /// (JSONPath cannot shorten a string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_revision_short: Option<String>,
    /// Service account Kuvryn Sync last impersonated for this Application, as resolved from the
    /// spec or the controller's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Whether the cluster matches the desired state, and what Kuvryn Sync is doing about it.
    #[serde(default)]
    pub sync: SyncStatus,
    /// Aggregated health of the managed resources; separate from the sync state.
    #[serde(default)]
    pub health: HealthStatus,
    /// Kinds Kuvryn Sync last applied for this Application; used to find, prune and watch managed
    /// objects of any kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_kinds: Vec<ManagedKind>,
    /// How many managed resources are in each health state.
    #[serde(default)]
    pub resources: ResourceCounts,
    /// Up to 10 root causes of unhealthy managed resources, Degraded ones first; empty when the
    /// Application is Healthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub diagnosis: Vec<Diagnosis>,
    /// The `metadata.generation` this status was computed for; when it is behind
    /// `metadata.generation`, the controller has not processed the latest spec change yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard Kubernetes conditions: Ready, DependenciesReady (with `spec.dependsOn`) and
    /// NotificationsReady (with `spec.notifications`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Conditions,
}

/// `status.sync`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatus {
    /// Sync state: Synced (the cluster matches), OutOfSync (the desired state changed), Drifted
    /// (the cluster changed), Planning, AwaitingApproval, Applying, Pruning, or Unknown.
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
    /// Aggregated health: Healthy, Progressing, Degraded, Suspended, or Unknown.
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
    /// API group and version of the kind, such as `apps/v1`.
    pub api_version: String,
    /// Kind name, such as `Deployment`.
    pub kind: String,
    /// Whether objects of the kind live in a namespace; false for cluster-scoped kinds.
    #[serde(default)]
    pub namespaced: bool,
}

/// `status.resources` (and Revision `status.health`): counts by health.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceCounts {
    /// Number of resources that are Healthy.
    #[serde(default)]
    pub healthy: i64,
    /// Number of resources that are Progressing.
    #[serde(default)]
    pub progressing: i64,
    /// Number of resources that are Degraded.
    #[serde(default)]
    pub degraded: i64,
    /// Number of resources whose health is Unknown.
    #[serde(default)]
    pub unknown: i64,
}

/// One root cause in `status.diagnosis`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Diagnosis {
    /// The resource at the root of the failure, such as a missing Secret or a crashing Pod.
    pub resource: ResourceRef,
    /// A CamelCase word naming the failure, such as MissingSecret, ImagePullBackOff,
    /// CrashLoopBackOff or Unschedulable.
    pub reason: String,
    /// Evidence for the failure with secret values removed; at most 512 characters.
    #[schemars(length(max = 512))]
    pub message: String,
    /// The path from the unhealthy managed resource down to `resource`, both included; at most 10
    /// resources.
    #[serde(default)]
    #[schemars(length(max = 10))]
    pub chain: Vec<ResourceRef>,
}
