//! `HealthCheck`: cluster-scoped CEL rules deciding the health of one kind.

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::Conditions;

/// HealthCheckSpec names a kind and the CEL rules that decide the health of its objects, for kinds
/// whose status the standard conventions cannot describe.
#[derive(CustomResource, JsonSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "sync.kuvryn.io",
    version = "v1alpha1",
    kind = "HealthCheck",
    status = "HealthCheckStatus",
    shortname = "kshc",
    category = "kuvryn",
    printcolumn(name = "Group", type_ = "string", json_path = ".spec.group"),
    printcolumn(name = "Kind", type_ = "string", json_path = ".spec.kind"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "HealthCheck is a cluster-scoped set of CEL rules that decides the health of one kind."
)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckSpec {
    /// API group of the kind, such as `argoproj.io`; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// Kind the rules apply to, such as `Rollout`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Rules evaluated in order, and across HealthChecks for the same kind in name order; the first
    /// whose expression is true decides. When none matches, the standard status conventions apply.
    /// 1 to 32 rules.
    #[schemars(length(min = 1, max = 32))]
    pub rules: Vec<HealthRule>,
}

/// `spec.rules[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthRule {
    /// CEL expression over the live object, available as `object`, that returns a bool; guard
    /// optional fields with `has()`. A rule that errors or exceeds its cost limit reports the
    /// object as Progressing.
    #[schemars(length(min = 1, max = 4096))]
    pub expression: String,
    /// Health reported when the expression is true: Healthy, Progressing or Degraded.
    pub state: HealthRuleState,
    /// Message reported with the state; at most 1024 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
}

/// `spec.rules[].state`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum HealthRuleState {
    Healthy,
    #[default]
    Progressing,
    Degraded,
}

/// HealthCheckStatus says whether the rules are valid. Written by the controller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckStatus {
    /// The `metadata.generation` this status was computed for; when it is behind
    /// `metadata.generation`, the controller has not processed the latest spec change yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard Kubernetes conditions: Ready says whether every rule compiles and returns a bool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Conditions,
}
