//! Metric names and families Kuvryn Sync exports.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use kuvryn_sync_api::EventReason;

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

/// The metrics the controller exports.
#[derive(Clone, Debug, Default)]
pub struct ControllerMetrics {
    lifecycle_events: Family<LifecycleLabels, Counter>,
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
        metrics
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
}
