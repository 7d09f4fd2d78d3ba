//! The route tables of the two HTTPS listeners. The API server calls the admission paths on the
//! admission listener; Git hosts and registries call the receiver paths on the receivers'
//! listener; `/healthz` and `/readyz` answer on both. A path is listed in [`ROUTES`] exactly
//! when the router of its [`Listener`] serves it, and no router serves another listener's path
//! (a test asks both routers for every route). Keeping them apart means an internet-facing
//! receivers' listener cannot be asked admission questions (which reveal whether a Revision
//! exists), and a flood on it cannot take admission, which fails closed, down with it.
//!
//! The chart may register an admission webhook only for a listed admission path: a
//! `ValidatingWebhookConfiguration` or `MutatingWebhookConfiguration` naming an unserved path
//! fails closed and blocks every write to its kind.
//!
//! Each router carries its listener's request limits ([`RequestLimits`]): a body limit per
//! endpoint (413 above it), a deadline for the whole request, body included (408 past it, after
//! which the server closes the connection, as it does for any request whose body is left
//! unread), and a cap on requests in flight (503 beyond it). These are tower's timeout,
//! global-concurrency-limit and load-shed layers.

use std::time::Duration;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;

use crate::metrics::WebhookMetrics;
use crate::{admission, hooks};

/// What a route is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteKind {
    /// Liveness of the HTTPS listener itself.
    Health,
    /// An AdmissionReview endpoint the API server calls.
    Admission,
    /// A push or image hook receiver.
    Receiver,
}

/// The two HTTPS listeners.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    /// `--listen`: the API server's admission calls.
    Admission,
    /// `--receiver-listen`: Git push and registry hooks, possibly from the internet.
    Receivers,
}

impl RouteKind {
    /// Whether a route of this kind is served on `listener`.
    pub fn served_on(self, listener: Listener) -> bool {
        match self {
            RouteKind::Health => true,
            RouteKind::Admission => listener == Listener::Admission,
            RouteKind::Receiver => listener == Listener::Receivers,
        }
    }
}

/// One served route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The URL path.
    pub path: &'static str,
    /// What it is for.
    pub kind: RouteKind,
}

/// Every route served, on the listeners [`RouteKind::served_on`] says.
pub const ROUTES: &[Route] = &[
    Route { path: HEALTHZ, kind: RouteKind::Health },
    Route { path: READYZ, kind: RouteKind::Health },
    Route { path: VALIDATE_HEALTHCHECKS, kind: RouteKind::Admission },
    Route { path: ADMIT_APPLICATIONS, kind: RouteKind::Admission },
    Route { path: hooks::REPOSITORY_HOOK_PATH, kind: RouteKind::Receiver },
    Route { path: hooks::IMAGE_POLICY_HOOK_PATH, kind: RouteKind::Receiver },
];

const HEALTHZ: &str = "/healthz";
/// Ready once the listener serves (the API client is optional: without it the webhook still
/// validates HealthChecks and says why it cannot check an approval).
const READYZ: &str = "/readyz";
/// HealthCheck validation (ValidatingWebhookConfiguration).
pub const VALIDATE_HEALTHCHECKS: &str = "/validate/healthchecks";
/// Application approval and rollback audit (MutatingWebhookConfiguration).
pub const ADMIT_APPLICATIONS: &str = "/admit/applications";

/// Largest AdmissionReview accepted on the admission listener (413 above it). An Application
/// is at most about 1.5 MiB (etcd's default request limit); an UPDATE's review carries the old
/// and the new object, so a legitimate review can be a little over 3 MiB. 4 MiB leaves room for
/// the envelope and JSON escaping.
pub const MAX_ADMISSION_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Largest body on the receivers' listener (413 above it): the receivers' own limit.
pub const MAX_RECEIVER_BODY_BYTES: usize = kuvryn_sync_core::receiver::MAX_BODY_BYTES;

/// The per-listener request limits of a router.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    /// Deadline for a whole request, body read included (408 past it).
    pub request_timeout: Duration,
    /// Requests handled at once on the listener (503 beyond it).
    pub max_in_flight: usize,
}

impl Default for RequestLimits {
    /// The binary's defaults: 10 s (the API server's default webhook timeout) and 512.
    fn default() -> Self {
        RequestLimits { request_timeout: Duration::from_secs(10), max_in_flight: 512 }
    }
}

/// The admission paths served, for the chart's webhook configurations.
pub fn admission_paths() -> impl Iterator<Item = &'static str> {
    ROUTES.iter().filter(|route| route.kind == RouteKind::Admission).map(|route| route.path)
}

/// Whether `path` (a route pattern) is an admission path.
pub fn is_admission_path(path: &str) -> bool {
    admission_paths().any(|p| p == path)
}

/// What the handlers share.
#[derive(Clone, Default)]
pub struct AppState {
    /// The webhook's own API client; `None` when it could not be configured (admission that
    /// must read a Revision then says so).
    pub client: Option<kube::Client>,
    /// Request and latency metrics.
    pub metrics: WebhookMetrics,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("has_client", &self.client.is_some())
            .finish_non_exhaustive()
    }
}

/// The admission listener's router: health and admission paths.
pub fn admission_router(state: AppState, limits: RequestLimits) -> Router {
    let metrics = state.metrics.clone();
    let routes = Router::new()
        .route(HEALTHZ, get(|| async { "ok" }))
        .route(READYZ, get(|| async { "ok" }))
        .route(VALIDATE_HEALTHCHECKS, post(admission::validate_health_check))
        .route(ADMIT_APPLICATIONS, post(admission::admit_application))
        .with_state(state);
    with_limits(routes, MAX_ADMISSION_BODY_BYTES, metrics, limits)
}

/// What both listeners' routers wrap their routes in: a body limit, shedding beyond
/// `max_in_flight` (one semaphore for every route of the router), a timeout of the whole
/// request, and the request metrics.
fn with_limits(
    router: Router,
    max_body: usize,
    metrics: WebhookMetrics,
    limits: RequestLimits,
) -> Router {
    router
        .layer(DefaultBodyLimit::max(max_body))
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(refusal))
                .load_shed()
                .layer(GlobalConcurrencyLimitLayer::new(limits.max_in_flight.max(1)))
                .timeout(limits.request_timeout),
        )
        .layer(middleware::from_fn_with_state(metrics, crate::metrics::track))
}

/// The receivers' listener's router: health and receiver paths.
pub fn receiver_router(state: AppState, limits: RequestLimits) -> Router {
    let receivers = match &state.client {
        Some(client) => hooks::router(hooks::HookState::new(client.clone())),
        None => unavailable_receivers(),
    };
    receiver_router_with(receivers, state.metrics, limits)
}

/// The receivers' listener's router around given receivers (for their own replay cache).
pub fn receiver_router_with(
    receivers: Router,
    metrics: WebhookMetrics,
    limits: RequestLimits,
) -> Router {
    let routes = Router::new()
        .route(HEALTHZ, get(|| async { "ok" }))
        .route(READYZ, get(|| async { "ok" }))
        .merge(receivers);
    with_limits(routes, MAX_RECEIVER_BODY_BYTES, metrics, limits)
}

/// The router of `listener`.
pub fn router(listener: Listener, state: AppState, limits: RequestLimits) -> Router {
    match listener {
        Listener::Admission => admission_router(state, limits),
        Listener::Receivers => receiver_router(state, limits),
    }
}

/// The answer to a request the limits ended.
async fn refusal(err: tower::BoxError) -> axum::response::Response {
    if err.is::<tower::timeout::error::Elapsed>() {
        (StatusCode::REQUEST_TIMEOUT, "the request was not received and answered in time")
            .into_response()
    } else if err.is::<tower::load_shed::error::Overloaded>() {
        (StatusCode::SERVICE_UNAVAILABLE, "too many requests in flight; retry").into_response()
    } else {
        (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
    }
}

/// The receiver paths of a webhook without API access: 503, saying why.
fn unavailable_receivers() -> Router {
    let unavailable = || async {
        (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "the Kuvryn Sync webhook has no API server access; see its log",
        )
    };
    hooks::HOOK_PATHS
        .iter()
        .fold(Router::new(), |router, path| router.route(path, post(unavailable)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    async fn status_on(listener: Listener, method: &str, path: &str) -> StatusCode {
        let request = Request::builder().method(method).uri(path).body(Body::empty());
        router(listener, AppState::default(), RequestLimits::default())
            .oneshot(request.expect("request"))
            .await
            .expect("router answers")
            .status()
    }

    fn concrete(path: &str) -> String {
        path.replace("{namespace}", "default").replace("{name}", "x")
    }

    #[tokio::test]
    async fn each_listener_serves_its_routes_and_nothing_else() {
        for listener in [Listener::Admission, Listener::Receivers] {
            for route in ROUTES {
                let method = if route.kind == RouteKind::Health { "GET" } else { "POST" };
                let status = status_on(listener, method, &concrete(route.path)).await;
                if route.kind.served_on(listener) {
                    assert_ne!(status, StatusCode::NOT_FOUND, "{listener:?} {route:?}");
                } else {
                    assert_eq!(status, StatusCode::NOT_FOUND, "{listener:?} {route:?}");
                }
            }
            for unlisted in ["/validate/other", "/admit/other", "/hooks/x"] {
                let status = status_on(listener, "POST", unlisted).await;
                assert_eq!(status, StatusCode::NOT_FOUND, "{listener:?} {unlisted}");
            }
        }
        // Health on both, admission only on one, receivers only on the other.
        let on = |kind: RouteKind| {
            [Listener::Admission, Listener::Receivers].map(|listener| kind.served_on(listener))
        };
        assert_eq!(on(RouteKind::Health), [true, true]);
        assert_eq!(on(RouteKind::Admission), [true, false]);
        assert_eq!(on(RouteKind::Receiver), [false, true]);
    }

    #[tokio::test]
    async fn requests_beyond_the_in_flight_cap_are_503_and_slow_ones_408() {
        let limits =
            RequestLimits { request_timeout: Duration::from_millis(300), max_in_flight: 1 };
        let app = admission_router(AppState::default(), limits);
        // A request whose body never ends holds the only slot until its deadline.
        let (sender, body) =
            tokio::sync::mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(1);
        let stalled = Request::post(VALIDATE_HEALTHCHECKS)
            .header("content-type", "application/json")
            .body(Body::from_stream(tokio_stream_of(body)))
            .expect("request");
        let slow = tokio::spawn(app.clone().oneshot(stalled));
        let started = std::time::Instant::now();
        let overloaded = loop {
            let status = app
                .clone()
                .oneshot(Request::get(HEALTHZ).body(Body::empty()).expect("request"))
                .await
                .expect("router answers")
                .status();
            if status == StatusCode::SERVICE_UNAVAILABLE || slow.is_finished() {
                break status;
            }
            assert!(started.elapsed() < Duration::from_secs(5), "never shed");
            tokio::task::yield_now().await;
        };
        assert_eq!(overloaded, StatusCode::SERVICE_UNAVAILABLE);
        let timed_out = slow.await.expect("join").expect("router answers").status();
        assert_eq!(timed_out, StatusCode::REQUEST_TIMEOUT);
        drop(sender);
        let after = app
            .oneshot(Request::get(HEALTHZ).body(Body::empty()).expect("request"))
            .await
            .expect("router answers");
        assert_eq!(after.status(), StatusCode::OK, "the slot is free again");
    }

    fn tokio_stream_of<T: Send + 'static>(
        mut receiver: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures::Stream<Item = T> + Send + 'static {
        futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
    }
}
