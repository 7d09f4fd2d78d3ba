//! `HealthCheck`: cluster-scoped CEL rules deciding the health of one kind.

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::Conditions;

/// HealthCheck is a cluster-scoped set of CEL rules that decides the health of one kind.
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
    /// API group of the kind; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// Kind the rules apply to.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Rules evaluated in order; the first true expression decides.
    #[schemars(length(min = 1, max = 32))]
    pub rules: Vec<HealthRule>,
}

/// `spec.rules[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthRule {
    /// CEL over the live object, `object`, returning a bool.
    #[schemars(length(min = 1, max = 4096))]
    pub expression: String,
    /// State reported when the expression is true.
    pub state: HealthRuleState,
    /// Message reported with the state.
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

/// HealthCheck status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckStatus {
    /// Latest metadata.generation processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready reports whether every rule compiles and returns a bool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Conditions,
}
