//! Metric names and families Kuvryn Sync exports.

pub use crate::labels::{render_type_label, sink_type_label};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use kuvryn_sync_api::{EventReason, RenderType, SinkType};

/// Name of the counter of Application lifecycle Events (the registry appends `_total`).
pub const LIFECYCLE_EVENTS: &str = "kuvryn_sync_lifecycle_events";

/// Labels of [`LIFECYCLE_EVENTS`]: never a name, revision or message, only closed sets.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LifecycleLabels {
    /// The Event reason.
    pub reason: String,
    /// Normal or Warning.
    pub r#type: String,
}

/// Name of the counter of Application renders (the registry appends `_total`).
pub const RENDERS: &str = "kuvryn_sync_renders";

/// How a render's output was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RenderOutcome {
    /// The engine ran.
    Rendered,
    /// The output came from the render cache: nothing that shapes it had changed.
    CacheHit,
}

impl RenderOutcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RenderOutcome::Rendered => "rendered",
            RenderOutcome::CacheHit => "cache_hit",
        }
    }
}

/// Labels of [`RENDERS`]: the render type (`yaml`, `kustomize`, `helm`) and the outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RenderLabels {
    /// `spec.source.render.type`.
    pub r#type: String,
    /// `rendered` or `cache_hit`.
    pub outcome: String,
}

/// Name of the counter of notifications by sink type and outcome (the registry appends `_total`).
pub const NOTIFICATIONS: &str = "kuvryn_sync_notifications";

/// How a notification ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotificationOutcome {
    /// The sink took it.
    Sent,
    /// Retries ran out, or the sink refused it.
    Failed,
    /// The queue was full.
    Dropped,
}

impl NotificationOutcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            NotificationOutcome::Sent => "sent",
            NotificationOutcome::Failed => "failed",
            NotificationOutcome::Dropped => "dropped",
        }
    }
}

/// Labels of [`NOTIFICATIONS`]: the sink type and the outcome, never a sink name or url.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotificationLabels {
    /// `webhook` or `slack`.
    pub sink_type: String,
    /// `sent`, `failed` or `dropped`.
    pub outcome: String,
}

/// Name of the counter of requests the controller sent to the Kubernetes API, as itself or as an
/// Application's service account, by HTTP method (the registry appends `_total`).
pub const API_REQUESTS: &str = "kuvryn_sync_api_requests";

/// The methods [`API_REQUESTS`] names; any other is counted as `OTHER`.
const API_METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];

/// Labels of [`API_REQUESTS`]: the HTTP method only (watches are GETs).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiRequestLabels {
    pub method: String,
}

/// The metrics the controller exports.
#[derive(Clone, Debug, Default)]
pub struct ControllerMetrics {
    lifecycle_events: Family<LifecycleLabels, Counter>,
    renders: Family<RenderLabels, Counter>,
    notifications: Family<NotificationLabels, Counter>,
    api_requests: Family<ApiRequestLabels, Counter>,
    /// The duration histograms and the reconciles in flight.
    pub durations: crate::durations::Durations,
}

impl ControllerMetrics {
    /// Register every metric in `registry` under the `kuvryn_sync` names.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            LIFECYCLE_EVENTS,
            "Application lifecycle Events recorded, by reason and type",
            metrics.lifecycle_events.clone(),
        );
        registry.register(
            RENDERS,
            "Application renders, by render type and outcome (rendered by the engine, or a \
             cache hit)",
            metrics.renders.clone(),
        );
        registry.register(
            NOTIFICATIONS,
            "Notifications sent, failed and dropped, by sink type",
            metrics.notifications.clone(),
        );
        registry.register(
            API_REQUESTS,
            "Requests sent to the Kubernetes API (as the controller or as an Application's \
             service account), by HTTP method",
            metrics.api_requests.clone(),
        );
        metrics.durations.register(registry);
        metrics.durations.touch_all();
        // Every notification series at zero from the start, so a rate() over it (the alert
        // rule's) is defined before the first notification.
        for sink_type in [SinkType::Webhook, SinkType::Slack] {
            for outcome in [
                NotificationOutcome::Sent,
                NotificationOutcome::Failed,
                NotificationOutcome::Dropped,
            ] {
                let _ = metrics.notifications.get_or_create(&NotificationLabels {
                    sink_type: sink_type_label(sink_type).to_owned(),
                    outcome: outcome.as_str().to_owned(),
                });
            }
        }
        metrics
    }

    /// Count one request sent to the Kubernetes API with HTTP `method`.
    pub fn count_api_request(&self, method: &str) {
        let method = API_METHODS.iter().find(|m| **m == method).copied().unwrap_or("OTHER");
        self.api_requests.get_or_create(&ApiRequestLabels { method: method.to_owned() }).inc();
    }

    /// Count one render of `render_type`.
    pub fn count_render(&self, render_type: RenderType, outcome: RenderOutcome) {
        let render_type = render_type_label(render_type);
        self.renders
            .get_or_create(&RenderLabels {
                r#type: render_type.to_owned(),
                outcome: outcome.as_str().to_owned(),
            })
            .inc();
    }

    /// Count one notification to a sink of `sink_type` that ended with `outcome`.
    pub fn count_notification(&self, sink_type: SinkType, outcome: NotificationOutcome) {
        let sink_type = sink_type_label(sink_type);
        self.notifications
            .get_or_create(&NotificationLabels {
                sink_type: sink_type.to_owned(),
                outcome: outcome.as_str().to_owned(),
            })
            .inc();
    }

    /// Count one Application Event.
    pub fn count_event(&self, reason: EventReason) {
        self.lifecycle_events
            .get_or_create(&LifecycleLabels {
                reason: reason.as_str().to_owned(),
                r#type: reason.event_type().as_str().to_owned(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle_events_are_exported_as_the_spec_names_them() {
        let mut registry = Registry::default();
        let metrics = ControllerMetrics::register(&mut registry);
        metrics.count_event(EventReason::PlanCreated);
        metrics.count_event(EventReason::PlanCreated);
        metrics.count_event(EventReason::RollbackStarted { automatic: true });
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains(
                r#"kuvryn_sync_lifecycle_events_total{reason="PlanCreated",type="Normal"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"kuvryn_sync_lifecycle_events_total{reason="RollbackStarted",type="Warning"} 1"#
            ),
            "{text}"
        );
    }

    #[test]
    fn api_requests_are_counted_by_a_closed_set_of_methods() {
        let mut registry = Registry::default();
        let metrics = ControllerMetrics::register(&mut registry);
        for method in ["PATCH", "PATCH", "GET", "TRACE", "BREW"] {
            metrics.count_api_request(method);
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        for line in [
            r#"kuvryn_sync_api_requests_total{method="PATCH"} 2"#,
            r#"kuvryn_sync_api_requests_total{method="GET"} 1"#,
            r#"kuvryn_sync_api_requests_total{method="OTHER"} 2"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[test]
    fn renders_are_counted_by_type_and_outcome() {
        let mut registry = Registry::default();
        let metrics = ControllerMetrics::register(&mut registry);
        metrics.count_render(RenderType::Kustomize, RenderOutcome::Rendered);
        metrics.count_render(RenderType::Kustomize, RenderOutcome::CacheHit);
        metrics.count_render(RenderType::Kustomize, RenderOutcome::CacheHit);
        metrics.count_render(RenderType::Yaml, RenderOutcome::Rendered);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        for line in [
            r#"kuvryn_sync_renders_total{type="kustomize",outcome="rendered"} 1"#,
            r#"kuvryn_sync_renders_total{type="kustomize",outcome="cache_hit"} 2"#,
            r#"kuvryn_sync_renders_total{type="yaml",outcome="rendered"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[test]
    fn notifications_are_counted_by_sink_type_and_outcome() {
        let mut registry = Registry::default();
        let metrics = ControllerMetrics::register(&mut registry);
        metrics.count_notification(SinkType::Webhook, NotificationOutcome::Sent);
        metrics.count_notification(SinkType::Webhook, NotificationOutcome::Sent);
        metrics.count_notification(SinkType::Slack, NotificationOutcome::Failed);
        metrics.count_notification(SinkType::Webhook, NotificationOutcome::Dropped);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        for line in [
            r#"kuvryn_sync_notifications_total{sink_type="webhook",outcome="sent"} 2"#,
            r#"kuvryn_sync_notifications_total{sink_type="slack",outcome="failed"} 1"#,
            r#"kuvryn_sync_notifications_total{sink_type="webhook",outcome="dropped"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
