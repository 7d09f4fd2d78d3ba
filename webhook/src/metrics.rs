//! The webhook's metrics: requests by endpoint and outcome, and how long admission took.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Counter of HTTPS requests (the registry appends `_total`).
pub const REQUESTS: &str = "kuvryn_sync_webhook_requests";
/// Histogram of admission handling time, in seconds.
pub const ADMISSION_DURATION: &str = "kuvryn_sync_webhook_admission_duration_seconds";

/// What became of a request; handlers put it in the response's extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Admitted (possibly with a patch).
    Allowed,
    /// Refused by a rule.
    Denied,
    /// The webhook could not decide (e.g. the API server did not answer).
    Error,
    /// A receiver call acted (202).
    Accepted,
    /// A valid receiver call that needed nothing done.
    Acknowledged,
    /// Bad or missing signature or token.
    Unauthorized,
    /// Malformed body.
    BadRequest,
    /// Body over the size cap.
    TooLarge,
    /// No such route.
    NotFound,
}

impl Outcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::Error => "error",
            Outcome::Accepted => "accepted",
            Outcome::Acknowledged => "acknowledged",
            Outcome::Unauthorized => "unauthorized",
            Outcome::BadRequest => "bad_request",
            Outcome::TooLarge => "too_large",
            Outcome::NotFound => "not_found",
        }
    }

    /// A receiver's outcome.
    fn from_hook(outcome: kuvryn_sync_core::receiver::HookOutcome) -> Self {
        use kuvryn_sync_core::receiver::HookOutcome as H;
        match outcome {
            H::Accepted => Outcome::Accepted,
            H::Acknowledged => Outcome::Acknowledged,
            H::Unauthorized => Outcome::Unauthorized,
            H::BadRequest => Outcome::BadRequest,
            H::TooLarge => Outcome::TooLarge,
            H::Unavailable => Outcome::Error,
            H::Duplicate => Outcome::Acknowledged,
        }
    }

    /// The outcome a handler did not state, from the status code alone.
    fn from_status(status: axum::http::StatusCode) -> Self {
        match status.as_u16() {
            200 => Outcome::Acknowledged,
            202 => Outcome::Accepted,
            400 | 415 | 422 => Outcome::BadRequest,
            401 | 403 => Outcome::Unauthorized,
            404 | 405 => Outcome::NotFound,
            413 => Outcome::TooLarge,
            _ => Outcome::Error,
        }
    }
}

/// Labels of [`REQUESTS`]: the route pattern, never a name from the URL.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub endpoint: String,
    pub outcome: String,
}

/// Labels of [`ADMISSION_DURATION`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: String,
}

/// The webhook's metric families.
#[derive(Clone, Debug)]
pub struct WebhookMetrics {
    requests: Family<RequestLabels, Counter>,
    admission_duration: Family<EndpointLabels, Histogram>,
}

impl Default for WebhookMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            // 0.25 ms to about 4 s.
            admission_duration: Family::new_with_constructor(|| {
                Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                    0.000_25, 2.0, 15,
                ))
            }),
        }
    }
}

impl WebhookMetrics {
    /// Register every family in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            REQUESTS,
            "HTTPS requests to the webhook, by endpoint and outcome",
            metrics.requests.clone(),
        );
        registry.register(
            ADMISSION_DURATION,
            "Time to answer an admission request, in seconds",
            metrics.admission_duration.clone(),
        );
        metrics
    }

    fn record(&self, endpoint: &str, outcome: Outcome, admission_seconds: Option<f64>) {
        let endpoint = endpoint.to_owned();
        self.requests
            .get_or_create(&RequestLabels {
                endpoint: endpoint.clone(),
                outcome: outcome.as_str().to_owned(),
            })
            .inc();
        if let Some(seconds) = admission_seconds {
            self.admission_duration.get_or_create(&EndpointLabels { endpoint }).observe(seconds);
        }
    }
}

/// Middleware: count every request by its route pattern and outcome, and time admission.
pub async fn track(
    State(metrics): State<WebhookMetrics>,
    request: Request,
    next: Next,
) -> Response {
    let endpoint = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let started = Instant::now();
    let response = next.run(request).await;
    let reported = response.extensions().get::<crate::hooks::HookReport>().map(|r| r.outcome);
    let outcome = response
        .extensions()
        .get::<Outcome>()
        .copied()
        .or(reported.map(Outcome::from_hook))
        .unwrap_or_else(|| Outcome::from_status(response.status()));
    let admission = crate::paths::is_admission_path(&endpoint);
    metrics.record(&endpoint, outcome, admission.then(|| started.elapsed().as_secs_f64()));
    response
}
