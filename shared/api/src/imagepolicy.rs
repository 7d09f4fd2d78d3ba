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

/// ImagePolicySpec names the image repository to scan, how often, and the rule that selects a tag.
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
    /// `kubernetes.io/dockerconfigjson` Secret with registry credentials; it must be labelled
    /// `sync.kuvryn.io/registry-credentials: "true"`. Omit for public images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// How often the registry is scanned for new tags. Defaults to 5m. A duration: one or more
    /// number-and-unit pairs with no spaces, the unit ms, s, m or h and the number optionally with
    /// a decimal fraction, such as 500ms, 90s, 1.5m or 1h30m.
    #[serde(default = "default_interval")]
    #[schemars(regex(pattern = crate::DURATION_PATTERN))]
    pub interval: String,
    /// How the tag is selected: set exactly one of `semver`, `tagPattern` or `digest`.
    pub policy: TagPolicy,
    /// Secret whose token authenticates requests to `/hooks/imagepolicies/<namespace>/<name>`,
    /// which trigger a scan at once. Optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<SecretReference>,
}

/// `spec.policy`: exactly one of semver, tagPattern or digest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(validation = Rule::new("[has(self.semver), has(self.tagPattern), has(self.digest)].filter(x, x).size() == 1").message("set exactly one of spec.policy.semver, spec.policy.tagPattern or spec.policy.digest"))]
#[serde(rename_all = "camelCase")]
pub struct TagPolicy {
    /// Select the highest tag that is a semantic version within a range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<SemverPolicy>,
    /// Select, among the tags matching a regular expression, the last one in `order`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag_pattern: Option<TagPatternPolicy>,
    /// Follow one fixed tag and select the digest it currently points to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<DigestPolicy>,
}

/// `spec.policy.semver`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SemverPolicy {
    /// Semver range the tag must satisfy, such as `>=1.2.0 <2.0.0`.
    #[schemars(length(min = 1, max = 256))]
    pub range: String,
}

/// `spec.policy.tagPattern`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TagPatternPolicy {
    /// Regular expression the tags must match; its first capture group, if any, is what `order`
    /// sorts by.
    #[schemars(length(min = 1, max = 512))]
    pub regex: String,
    /// How matching tags are sorted before the last one is selected: `alphabetical` (default) or
    /// `numerical`, by the first capture group or, without one, the whole tag.
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

/// ImagePolicyStatus is the image last selected and when the registry was last read. Written by the
/// controller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePolicyStatus {
    /// Tag the policy selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_tag: Option<String>,
    /// Manifest digest of the selected tag when it was selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_digest: Option<String>,
    /// The selected image as an immutable reference, `image:tag@digest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_image: Option<String>,
    /// When the registry was last read successfully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scanned_at: Option<Time>,
    /// The `metadata.generation` this status was computed for; when it is behind
    /// `metadata.generation`, the controller has not processed the latest spec change yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard Kubernetes conditions: Ready is True with Selected and the selected image, or False
    /// with ScanFailed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Conditions,
}
