//! `Repository`: a desired-state source.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_derive::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::{Conditions, LocalObjectReference, SecretReference};
use super::names::RepositoryState;

/// Default of `spec.applicationConfigPaths`.
pub const DEFAULT_APPLICATION_CONFIG_PATH: &str = ".ksync.yaml";

fn default_application_config_paths() -> Vec<String> {
    vec![DEFAULT_APPLICATION_CONFIG_PATH.to_owned()]
}

/// Repository describes a desired-state source.
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "sync.kuvryn.io",
    version = "v1alpha1",
    kind = "Repository",
    namespaced,
    status = "RepositoryStatus",
    shortname = "ksrepo",
    category = "kuvryn",
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(name = "Revision", type_ = "string", json_path = ".status.observedRevision"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "Repository describes a desired-state source."
)]
#[x_kube(validation = Rule::new("self.type != 'git' || has(self.git)").message("spec.git is required when spec.type is git"))]
#[serde(rename_all = "camelCase")]
pub struct RepositorySpec {
    /// Source adapter. v1alpha1 supports git.
    #[serde(default, rename = "type")]
    pub source_type: SourceType,
    /// The Git source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,
    /// Repository-relative `.ksync.yaml` paths; defaults to the root `.ksync.yaml`.
    #[serde(default = "default_application_config_paths")]
    #[schemars(length(max = 100))]
    pub application_config_paths: Vec<String>,
    /// Service account discovered Applications run as. When empty, they use the controller's
    /// default service account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_service_account_name: Option<String>,
    /// What discovered Applications may switch on.
    #[serde(default)]
    pub application_policy: ApplicationPolicy,
    /// Polling interval when no external wake-up signal exists, such as `60s` or `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub poll_interval: Option<String>,
    /// Secret whose token authenticates GitHub/GitLab push webhooks for this Repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<SecretReference>,
    /// Commit ImagePolicy selections back to Git.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_update: Option<ImageUpdate>,
}

/// `spec.type`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum SourceType {
    /// A Git remote.
    #[default]
    #[serde(rename = "git")]
    Git,
}

/// `spec.git`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct GitSource {
    /// Git remote URL using https, http, ssh (including git@host:path), or git. Filesystem paths
    /// are rejected.
    #[x_kube(validation = Rule::new("self.matches('^(https?://|ssh://|git://|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:)')").message("spec.git.url must use https, http, ssh (ssh:// or user@host:path) or git; filesystem paths and file:// are not allowed"))]
    #[schemars(length(min = 1, max = 2048))]
    pub url: String,
    /// Default branch, tag, or exact commit for Applications that omit a revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Credentials for private remotes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<SecretReference>,
}

/// `spec.applicationPolicy`: what discovered Applications may switch on. All default to false.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationPolicy {
    /// Allow `spec.sync.automatic: true`.
    #[serde(default)]
    pub allow_automatic: bool,
    /// Allow `spec.sync.prune: true`.
    #[serde(default)]
    pub allow_prune: bool,
    /// Allow `spec.sync.conflictPolicy: adopt`.
    #[serde(default)]
    pub allow_adopt: bool,
    /// Allow `spec.deletionPolicy: DeleteManagedResources`.
    #[serde(default)]
    pub allow_delete_managed_resources: bool,
}

/// `spec.imageUpdate`: commit ImagePolicy selections back to Git.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageUpdate {
    /// Push credentials, labelled `sync.kuvryn.io/git-credentials: "true"`.
    pub secret_ref: LocalObjectReference,
    /// Branch to commit to.
    pub branch: String,
    /// Repository-relative folder whose YAML files carry image policy markers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Commit author name.
    pub author_name: String,
    /// Commit author email.
    pub author_email: String,
}

/// Repository status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryStatus {
    /// Unknown, Ready, or Failed.
    #[serde(default)]
    pub state: RepositoryState,
    /// Latest resolved source revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_revision: Option<String>,
    /// Time of last successful source fetch/inspection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fetched_at: Option<Time>,
    /// Latest metadata.generation processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Kubernetes Conditions for source readiness.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Conditions,
}
