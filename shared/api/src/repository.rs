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

/// RepositorySpec is the desired state of a Repository: which Git remote and revision to read, how
/// often, and which `.ksync.yaml` files declare Applications and what those Applications may switch
/// on.
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
    /// Source adapter. v1alpha1 has only `git`, the default.
    #[serde(default, rename = "type")]
    pub source_type: SourceType,
    /// The Git remote to fetch; required when `type` is git.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,
    /// Paths of the `.ksync.yaml` files that declare Applications, relative to the repository root;
    /// each must be named `.ksync.yaml`, be unique and stay inside the repository; at most 100.
    /// Defaults to the root `.ksync.yaml`.
    #[serde(default = "default_application_config_paths")]
    #[schemars(length(max = 100))]
    pub application_config_paths: Vec<String>,
    /// Service account discovered Applications run as. When empty, they use the controller's
    /// default service account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_service_account_name: Option<String>,
    /// What Applications discovered from `.ksync.yaml` files may switch on. Every allowance
    /// defaults to false, so write access to Git alone cannot skip approval, prune, adopt fields or
    /// delete workloads; an Application asking for more fails discovery.
    #[serde(default)]
    pub application_policy: ApplicationPolicy,
    /// How often the remote is fetched when no push webhook wakes the Repository up. When unset,
    /// the controller's `--default-poll-interval` (60s unless changed) applies. A duration: one or
    /// more number-and-unit pairs with no spaces, the unit ms, s, m or h and the number optionally
    /// with a decimal fraction, such as 500ms, 90s, 1.5m or 1h30m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::DURATION_PATTERN))]
    pub poll_interval: Option<String>,
    /// Secret whose token authenticates GitHub/GitLab push webhooks for this Repository; a valid
    /// push triggers a fetch at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<SecretReference>,
    /// Commit the images that ImagePolicies select back to Git, by rewriting the YAML fields marked
    /// with an image policy marker.
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
    /// Branch, tag or exact commit that Applications without `spec.source.revision` deploy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Secret with credentials for a private remote; it must be labelled
    /// `sync.kuvryn.io/git-credentials: "true"`. An optional `url` key binds them to that URL
    /// prefix (the remote must be within it); without it they go only to this URL's host.
    /// Omit for public remotes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<SecretReference>,
}

/// `spec.applicationPolicy`: what discovered Applications may switch on. All default to false.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationPolicy {
    /// Allow discovered Applications to set `spec.sync.automatic: true`, which applies plans
    /// without approval.
    #[serde(default)]
    pub allow_automatic: bool,
    /// Allow discovered Applications to set `spec.sync.prune: true`, which deletes resources
    /// removed from Git.
    #[serde(default)]
    pub allow_prune: bool,
    /// Allow discovered Applications to set `spec.sync.conflictPolicy: adopt`, which takes over
    /// fields other managers own.
    #[serde(default)]
    pub allow_adopt: bool,
    /// Allow discovered Applications to set `spec.deletionPolicy: DeleteManagedResources`; also
    /// makes an Application removed from the files delete its workloads instead of orphaning them.
    #[serde(default)]
    pub allow_delete_managed_resources: bool,
}

/// `spec.imageUpdate`: commit ImagePolicy selections back to Git.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageUpdate {
    /// Secret with push credentials for the remote; it must be labelled
    /// `sync.kuvryn.io/git-credentials: "true"`.
    pub secret_ref: LocalObjectReference,
    /// Branch the image updates are committed and pushed to.
    pub branch: String,
    /// Folder, relative to the repository root, whose YAML files are searched for image policy
    /// markers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Author name of the image update commits.
    pub author_name: String,
    /// Author email of the image update commits.
    pub author_email: String,
}

/// RepositoryStatus is what Kuvryn Sync last observed about the Repository's source: whether it
/// resolved, to which commit, and when. Written by the controller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryStatus {
    /// Ready when the source resolved, Failed when it could not be fetched or discovery failed (the
    /// Ready condition says why), Unknown before the first attempt.
    #[serde(default)]
    pub state: RepositoryState,
    /// Commit the configured revision resolved to at the last successful fetch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_revision: Option<String>,
    /// When the source was last fetched or inspected successfully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fetched_at: Option<Time>,
    /// The `metadata.generation` this status was computed for; when it is behind
    /// `metadata.generation`, the controller has not processed the latest spec change yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard Kubernetes conditions: Ready (the source resolved and discovery succeeded) and
    /// ImagesUpdated (the result of image write-back).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Conditions,
}
