//! Recording Kubernetes Events for our objects. Every note goes through the reconcile's
//! [`Redactor`] before it leaves the process; a failure to record is logged, never fatal (Events
//! are best effort in Kubernetes too).
//!
//! One [`Recorder`] serves the whole controller ([`controller_recorder`]): kube-runtime's
//! recorder remembers the Events it sent, so the same Event again on the same object (same
//! type, reason, note and reporter) within its cache's lifetime becomes a series, as
//! Kubernetes' own event recorders aggregate: one Event whose `series.count` grows, patched,
//! instead of a new object per repetition.

use kube::runtime::events::{Event, EventType as KubeEventType, Recorder, Reporter};
use kuvryn_sync_api::{CONTROLLER_NAME, EventReason, EventType};
use kuvryn_sync_core::redact::Redactor;

/// The controller's Event reporter; `instance` is the Pod name when known.
pub fn controller_reporter() -> Reporter {
    Reporter { controller: CONTROLLER_NAME.into(), instance: std::env::var("POD_NAME").ok() }
}

/// The controller's Event recorder, shared by every reconciler so repeated Events become
/// series.
pub fn controller_recorder(client: &kube::Client) -> Recorder {
    Recorder::new(client.clone(), controller_reporter())
}

/// Record `events` (reason, message) on the object `reference`, redacting each message.
pub async fn publish(
    recorder: &Recorder,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    events: &[(EventReason, String)],
    redactor: &Redactor,
) {
    for (reason, message) in events {
        let event = Event {
            type_: match reason.event_type() {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: reason.as_str().to_owned(),
            note: Some(redactor.redact(message)),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        if let Err(err) = recorder.publish(&event, reference).await {
            tracing::warn!(%err, reason = reason.as_str(), "cannot record Event");
        }
    }
}
