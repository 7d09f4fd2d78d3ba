//! `ImagePolicy`: scans an image repository and selects the image to run.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_derive::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Conditions, LocalObjectReference, SecretReference};

/// Default of `spec.interval`.
pub const DEFAULT_SCAN_INTERVAL: &str = "5m";

fn default_interval() -> String {
    DEFAULT_SCAN_INTERVAL.to_owned()
}

/// ImagePolicy scans an image repository and selects the image to run.
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "sync.kuvryn.io",
    version = "v1alpha1",
    kind = "ImagePolicy",
    namespaced,
    status = "ImagePolicyStatus",
    shortname = "ksimg",
    category = "kuvryn",
    printcolumn(name = "Image", type_ = "string", json_path = ".status.latestImage"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "ImagePolicy scans an image repository and selects the image to run."
)]
#[serde(rename_all = "camelCase")]
pub struct ImagePolicySpec {
    /// Image repository to scan, such as ghcr.io/acme/api.
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// Optional `kubernetes.io/dockerconfigjson` Secret labelled
    /// `sync.kuvryn.io/registry-credentials: "true"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// How often the registry is scanned.
    #[serde(default = "default_interval")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub interval: String,
    /// How the tag is selected.
    pub policy: TagPolicy,
    /// Optional Secret whose token authenticates `/hooks/imagepolicies/<namespace>/<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<SecretReference>,
}

/// `spec.policy`: exactly one of semver, tagPattern or digest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(validation = Rule::new("[has(self.semver), has(self.tagPattern), has(self.digest)].filter(x, x).size() == 1").message("set exactly one of spec.policy.semver, spec.policy.tagPattern or spec.policy.digest"))]
#[serde(rename_all = "camelCase")]
pub struct TagPolicy {
    /// Select the highest tag within a semver constraint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<SemverPolicy>,
    /// Select the last tag matching a regular expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag_pattern: Option<TagPatternPolicy>,
    /// Follow the current digest of one fixed tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<DigestPolicy>,
}

/// `spec.policy.semver`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SemverPolicy {
    /// A semver constraint, such as `>=1.2.0 <2.0.0`.
    #[schemars(length(min = 1, max = 256))]
    pub range: String,
}

/// `spec.policy.tagPattern`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TagPatternPolicy {
    /// Regular expression tags must match.
    #[schemars(length(min = 1, max = 512))]
    pub regex: String,
    /// alphabetical (default) or numerical, by the first capture group or the whole tag.
    #[serde(default)]
    pub order: TagOrder,
}

/// `spec.policy.tagPattern.order`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TagOrder {
    #[default]
    Alphabetical,
    Numerical,
}

/// `spec.policy.digest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DigestPolicy {
    /// The tag to follow, such as `main`.
    #[schemars(length(min = 1, max = 128))]
    pub tag: String,
}

/// ImagePolicy status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePolicyStatus {
    /// Selected tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_tag: Option<String>,
    /// Manifest digest of the selected tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_digest: Option<String>,
    /// Immutable reference, image:tag@digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_image: Option<String>,
    /// When the registry was last read successfully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scanned_at: Option<Time>,
    /// Latest metadata.generation processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready reports the selection.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Conditions,
}
