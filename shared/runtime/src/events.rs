//! Recording Kubernetes Events for our objects. Every note goes through the reconcile's
//! [`Redactor`] before it leaves the process; a failure to record is logged, never fatal (Events
//! are best effort in Kubernetes too).
//!
//! One [`EventRecorder`] serves the whole controller: the same Event again on the same object
//! (same type, reason and note) within [`SERIES_WINDOW`] of the last one becomes a series, as
//! client-go's `events/v1` recorder aggregates: one Event object whose `series.count` grows,
//! patched, instead of a new object per repetition. Hand-written rather than kube-runtime's
//! `Recorder`: that one keys its series on the reason alone, so a second Event with another note
//! would only bump the first one's count and its note (a newly selected image, another failure
//! message) would be lost.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kuvryn_sync_api::{CONTROLLER_NAME, EventReason, EventType};
use kuvryn_sync_core::redact::Redactor;

/// How long after an Event the same one again joins its series (client-go's is 6 minutes).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);
/// Series remembered at most; when full, those past the window are forgotten first.
const REMEMBERED: usize = 16_384;

/// The controller's Events, with series.
pub struct EventRecorder {
    client: kube::Client,
    /// This replica: the Pod name when known.
    instance: String,
    series: Mutex<HashMap<SeriesKey, Series>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    /// The regarded object: namespace, name, uid.
    regarding: (Option<String>, Option<String>, Option<String>),
    warning: bool,
    reason: &'static str,
    note: String,
}

#[derive(Debug)]
struct Series {
    /// The Event object's name.
    name: String,
    count: i32,
    last: Instant,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder").field("instance", &self.instance).finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// A recorder for the controller, reporting as `kuvryn-sync-controller` from this Pod.
    pub fn controller(client: &kube::Client) -> Self {
        let instance = std::env::var("POD_NAME").unwrap_or_else(|_| CONTROLLER_NAME.to_owned());
        Self { client: client.clone(), instance, series: Mutex::default() }
    }

    /// Record `events` (reason, message) on the object `reference`, redacting each message.
    pub async fn publish(
        &self,
        reference: &ObjectReference,
        events: &[(EventReason, String)],
        redactor: &Redactor,
    ) {
        for (reason, message) in events {
            if let Err(err) = self.record(reference, *reason, redactor.redact(message)).await {
                tracing::warn!(%err, reason = reason.as_str(), "cannot record Event");
            }
        }
    }

    async fn record(
        &self,
        reference: &ObjectReference,
        reason: EventReason,
        note: String,
    ) -> Result<(), kube::Error> {
        let namespace = reference.namespace.clone().unwrap_or_else(|| "default".to_owned());
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let key = SeriesKey {
            regarding: (reference.namespace.clone(), reference.name.clone(), reference.uid.clone()),
            warning: reason.event_type() == EventType::Warning,
            reason: reason.as_str(),
            note,
        };
        let now = k8s_openapi::jiff::Timestamp::now();
        if let Some((name, count)) = self.repeat(&key) {
            let series = EventSeries { count, last_observed_time: MicroTime(now) };
            let patch = Event { series: Some(series), ..Default::default() };
            match events.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => return Ok(()),
                // Deleted meanwhile (Events expire): record it anew.
                Err(kube::Error::Api(status)) if status.code == 404 => self.forget(&key),
                Err(err) => return Err(err),
            }
        }
        let name = format!(
            "{}.{:x}",
            reference.name.as_deref().unwrap_or(CONTROLLER_NAME),
            now.as_nanosecond()
        );
        let event = Event {
            action: Some("Reconcile".to_owned()),
            reason: Some(key.reason.to_owned()),
            note: Some(key.note.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(reference.clone()),
            reporting_controller: Some(CONTROLLER_NAME.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(if key.warning { "Warning" } else { "Normal" }.to_owned()),
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace),
                ..Default::default()
            },
            ..Default::default()
        };
        events.create(&PostParams::default(), &event).await?;
        self.remember(key, name);
        Ok(())
    }

    /// When `key` was recorded within the window: its Event's name and the new count.
    fn repeat(&self, key: &SeriesKey) -> Option<(String, i32)> {
        let mut series = self.series.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let found = series.get_mut(key).filter(|s| s.last.elapsed() < SERIES_WINDOW)?;
        found.count += 1;
        found.last = Instant::now();
        Some((found.name.clone(), found.count))
    }

    fn remember(&self, key: SeriesKey, name: String) {
        let mut series = self.series.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if series.len() >= REMEMBERED {
            series.retain(|_, s| s.last.elapsed() < SERIES_WINDOW);
            if series.len() >= REMEMBERED {
                series.clear();
            }
        }
        series.insert(key, Series { name, count: 1, last: Instant::now() });
    }

    fn forget(&self, key: &SeriesKey) {
        self.series.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(key);
    }
}
