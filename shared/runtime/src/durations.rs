//! Duration histograms of the controller's work, and the reconciles in flight.
//!
//! Every label is a closed set ([`Reconciled`], [`RenderType`], [`SinkType`], the outcomes):
//! never an object's name, namespace, URL or message. A [`Timer`] records when it is dropped, so
//! one line at the top of a function times all of it, early returns included.

use std::time::Instant;

use kuvryn_sync_api::{RenderType, SinkType};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// `kuvryn_sync_reconcile_duration_seconds{kind}`.
pub const RECONCILE_DURATION: &str = "kuvryn_sync_reconcile_duration_seconds";
/// `kuvryn_sync_reconciles_in_flight{kind}`.
pub const RECONCILES_IN_FLIGHT: &str = "kuvryn_sync_reconciles_in_flight";
/// `kuvryn_sync_render_duration_seconds{type}`.
pub const RENDER_DURATION: &str = "kuvryn_sync_render_duration_seconds";
/// `kuvryn_sync_plan_duration_seconds`.
pub const PLAN_DURATION: &str = "kuvryn_sync_plan_duration_seconds";
/// `kuvryn_sync_apply_duration_seconds`.
pub const APPLY_DURATION: &str = "kuvryn_sync_apply_duration_seconds";
/// `kuvryn_sync_git_fetch_duration_seconds{operation}`.
pub const GIT_FETCH_DURATION: &str = "kuvryn_sync_git_fetch_duration_seconds";
/// `kuvryn_sync_notification_delivery_duration_seconds{sink_type}`.
pub const NOTIFICATION_DURATION: &str = "kuvryn_sync_notification_delivery_duration_seconds";

/// The kinds the controller reconciles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reconciled {
    Application,
    Repository,
    ImagePolicy,
}

impl Reconciled {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reconciled::Application => "Application",
            Reconciled::Repository => "Repository",
            Reconciled::ImagePolicy => "ImagePolicy",
        }
    }
}

/// What a Git timing covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GitOperation {
    /// Resolving the configured revision to a commit (listing refs, fetching).
    Resolve,
    /// Reading a commit's tree into a checkout (fetching it when missing).
    Checkout,
}

impl GitOperation {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            GitOperation::Resolve => "resolve",
            GitOperation::Checkout => "checkout",
        }
    }
}

/// A label set of one closed-set value named `kind`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

/// `type` (render type).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabels {
    pub r#type: String,
}

/// `operation` (Git).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: String,
}

/// `sink_type`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    pub sink_type: String,
}

fn buckets() -> Histogram {
    // 5 ms to about 82 s, doubling.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// The histograms and the in-flight gauge.
#[derive(Clone, Debug)]
pub struct Durations {
    reconcile: HistogramFamily<KindLabels>,
    in_flight: Family<KindLabels, Gauge>,
    render: HistogramFamily<TypeLabels>,
    plan: Histogram,
    apply: Histogram,
    git: HistogramFamily<OperationLabels>,
    notification: HistogramFamily<SinkLabels>,
}

impl Default for Durations {
    fn default() -> Self {
        Self {
            reconcile: Family::new_with_constructor(buckets),
            in_flight: Family::default(),
            render: Family::new_with_constructor(buckets),
            plan: buckets(),
            apply: buckets(),
            git: Family::new_with_constructor(buckets),
            notification: Family::new_with_constructor(buckets),
        }
    }
}

/// Records the time from its creation to its drop into a histogram (and, for reconciles, keeps
/// the in-flight gauge up while it lives).
#[derive(Debug)]
#[must_use = "a Timer records when dropped: bind it with `let _timer = …`"]
pub struct Timer {
    histogram: Histogram,
    in_flight: Option<Gauge>,
    started: Instant,
}

impl Timer {
    fn start(histogram: Histogram, in_flight: Option<Gauge>) -> Self {
        if let Some(gauge) = &in_flight {
            gauge.inc();
        }
        Self { histogram, in_flight, started: Instant::now() }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.histogram.observe(self.started.elapsed().as_secs_f64());
        if let Some(gauge) = &self.in_flight {
            gauge.dec();
        }
    }
}

impl Durations {
    /// Register every histogram and the gauge in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            RECONCILE_DURATION,
            "Time one reconcile took, by kind (Application, Repository, ImagePolicy)",
            self.reconcile.clone(),
        );
        registry.register(
            RECONCILES_IN_FLIGHT,
            "Reconciles running now, by kind; at the concurrency limit, work is queued",
            self.in_flight.clone(),
        );
        registry.register(
            RENDER_DURATION,
            "Time one Application render took (engine run or cache hit), by render type",
            self.render.clone(),
        );
        registry.register(
            PLAN_DURATION,
            "Time one plan took: the live inventory, a server-side dry run per object, prune \
             selection and the diff",
            self.plan.clone(),
        );
        registry.register(
            APPLY_DURATION,
            "Time one batch of server-side applies took (CRDs, then the rest of a wave)",
            self.apply.clone(),
        );
        registry.register(
            GIT_FETCH_DURATION,
            "Time one Git remote interaction took, by operation (resolve, checkout)",
            self.git.clone(),
        );
        registry.register(
            NOTIFICATION_DURATION,
            "Time one notification delivery took, every attempt and retry wait included, by sink \
             type",
            self.notification.clone(),
        );
    }

    /// Time one reconcile of `kind`.
    pub fn reconcile(&self, kind: Reconciled) -> Timer {
        let labels = KindLabels { kind: kind.as_str().to_owned() };
        Timer::start(
            self.reconcile.get_or_create(&labels).clone(),
            Some(self.in_flight.get_or_create(&labels).clone()),
        )
    }

    /// Time one render of `render_type`.
    pub fn render(&self, render_type: RenderType) -> Timer {
        let r#type = crate::labels::render_type_label(render_type).to_owned();
        Timer::start(self.render.get_or_create(&TypeLabels { r#type }).clone(), None)
    }

    /// Time one plan.
    pub fn plan(&self) -> Timer {
        Timer::start(self.plan.clone(), None)
    }

    /// Time one apply batch.
    pub fn apply(&self) -> Timer {
        Timer::start(self.apply.clone(), None)
    }

    /// Time one Git `operation`.
    pub fn git(&self, operation: GitOperation) -> Timer {
        let labels = OperationLabels { operation: operation.as_str().to_owned() };
        Timer::start(self.git.get_or_create(&labels).clone(), None)
    }

    /// Time one notification delivery to a sink of `sink_type`.
    pub fn notification(&self, sink_type: SinkType) -> Timer {
        let sink_type = crate::labels::sink_type_label(sink_type).to_owned();
        Timer::start(self.notification.get_or_create(&SinkLabels { sink_type }).clone(), None)
    }

    /// Create every series of the closed label sets at zero, so dashboards and alert rules find
    /// each metric from the first scrape on, before the work it times has happened.
    pub fn touch_all(&self) {
        for kind in [Reconciled::Application, Reconciled::Repository, Reconciled::ImagePolicy] {
            let labels = KindLabels { kind: kind.as_str().to_owned() };
            let _ = self.reconcile.get_or_create(&labels);
            let _ = self.in_flight.get_or_create(&labels);
        }
        for render_type in [RenderType::Yaml, RenderType::Kustomize, RenderType::Helm] {
            let r#type = crate::labels::render_type_label(render_type).to_owned();
            let _ = self.render.get_or_create(&TypeLabels { r#type });
        }
        for operation in [GitOperation::Resolve, GitOperation::Checkout] {
            let _ = self
                .git
                .get_or_create(&OperationLabels { operation: operation.as_str().to_owned() });
        }
        for sink_type in [SinkType::Webhook, SinkType::Slack] {
            let sink_type = crate::labels::sink_type_label(sink_type).to_owned();
            let _ = self.notification.get_or_create(&SinkLabels { sink_type });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_records_once_when_dropped_and_the_in_flight_gauge_follows_it() {
        let mut registry = Registry::default();
        let durations = Durations::default();
        durations.register(&mut registry);
        durations.touch_all();
        let encode = |registry: &Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).expect("encode");
            text
        };
        let timer = durations.reconcile(Reconciled::Application);
        let during = encode(&registry);
        assert!(
            during.contains(r#"kuvryn_sync_reconciles_in_flight{kind="Application"} 1"#),
            "{during}"
        );
        drop(timer);
        let _plan = durations.plan();
        let after = encode(&registry);
        assert!(
            after.contains(r#"kuvryn_sync_reconciles_in_flight{kind="Application"} 0"#),
            "{after}"
        );
        assert!(
            after.contains(r#"kuvryn_sync_reconcile_duration_seconds_count{kind="Application"} 1"#),
            "{after}"
        );
        assert!(
            after.contains(r#"kuvryn_sync_reconcile_duration_seconds_count{kind="Repository"} 0"#),
            "{after}"
        );
        assert!(
            after.contains(
                r#"kuvryn_sync_git_fetch_duration_seconds_count{operation="checkout"} 0"#
            ),
            "{after}"
        );
        assert!(
            after.contains(
                r#"kuvryn_sync_notification_delivery_duration_seconds_count{sink_type="slack"} 0"#
            ),
            "{after}"
        );
        assert!(
            after.contains("kuvryn_sync_plan_duration_seconds_count 0"),
            "still running: {after}"
        );
    }
}
