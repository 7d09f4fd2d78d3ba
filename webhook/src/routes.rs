//! The routers of the two HTTPS listeners, from the route table in [`crate::paths`]. The API server calls the admission paths on the
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
use crate::paths::{HEALTHZ, READYZ};
use crate::{admission, hooks};

// The route table and the handlers' state, where the webhook's users have always found them.
pub use crate::paths::{
    ADMIT_APPLICATIONS, Listener, ROUTES, Route, RouteKind, VALIDATE_HEALTHCHECKS, admission_paths,
    is_admission_path,
};
pub use crate::state::AppState;

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
