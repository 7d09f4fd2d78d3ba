//! `NotificationSink`: a namespaced destination for Application lifecycle notifications.

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::LocalObjectReference;

/// NotificationSinkSpec says how notifications are delivered and which Secret holds the address and
/// key. A NotificationSink has no status: a missing sink or invalid Secret is reported on the
/// Application as NotificationsReady=False.
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
    /// How notifications are delivered: `webhook` posts a JSON body signed with HMAC-SHA256;
    /// `slack` posts to a Slack incoming webhook.
    #[serde(rename = "type")]
    pub sink_type: SinkType,
    /// Secret, in the sink's namespace, holding `url` (the https address to post to) and, for
    /// webhook sinks, `hmacKey` (the signing key).
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
