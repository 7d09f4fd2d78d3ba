//! Types shared by several kinds: references, conditions, resource identities.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A reference to an object by name in the referrer's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LocalObjectReference {
    /// Name of the referenced object, in the namespace of the object that refers to it.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// A reference to a Secret in the referrer's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// The Secret, by name, in the same namespace as this object.
    pub secret_ref: LocalObjectReference,
}

/// Identity of one Kubernetes object, as diagnosis, plans, hooks and failures name it.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    /// `apiVersion` of the object, such as `apps/v1`.
    pub api_version: String,
    /// Kind of the object, such as `Pod`.
    pub kind: String,
    /// Namespace of the object; empty for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name of the object.
    pub name: String,
}

/// `status.conditions`: standard Kubernetes Conditions, one per type.
pub type Conditions = Vec<Condition>;
