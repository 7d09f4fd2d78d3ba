//! `NotificationSink`: a namespaced destination for Application lifecycle notifications.

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::LocalObjectReference;

/// NotificationSink is a namespaced destination for Application lifecycle notifications. It has
/// no status: a missing sink or invalid Secret is reported on the Application.
#[derive(CustomResource, JsonSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "sync.kuvryn.io",
    version = "v1alpha1",
    kind = "NotificationSink",
    namespaced,
    shortname = "kssink",
    category = "kuvryn",
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "NotificationSink is a namespaced destination for Application lifecycle notifications."
)]
#[serde(rename_all = "camelCase")]
pub struct NotificationSinkSpec {
    /// webhook (a JSON body signed with HMAC-SHA256) or slack (a Slack incoming webhook).
    #[serde(rename = "type")]
    pub sink_type: SinkType,
    /// Secret holding `url` (https) and, for webhook sinks, `hmacKey`.
    pub secret_ref: LocalObjectReference,
}

/// `spec.type`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SinkType {
    #[default]
    Webhook,
    Slack,
}
