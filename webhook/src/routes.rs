//! The route table of the HTTPS listener. The API server calls the admission paths; Git hosts and
//! registries call the receiver paths. A path is listed in [`ROUTES`] exactly when [`router`]
//! serves it (a test asks the router for each), and the chart may register an admission webhook
//! only for a listed admission path: a `ValidatingWebhookConfiguration` or
//! `MutatingWebhookConfiguration` naming an unserved path fails closed and blocks every write to
//! its kind.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};

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

/// One served route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The URL path.
    pub path: &'static str,
    /// What it is for.
    pub kind: RouteKind,
}

/// Every route [`router`] serves.
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

/// Largest request body accepted (413 above it).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

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

/// The HTTPS router.
pub fn router(state: AppState) -> Router {
    let metrics = state.metrics.clone();
    let receivers = match &state.client {
        Some(client) => hooks::router(hooks::HookState::new(client.clone())),
        None => unavailable_receivers(),
    };
    Router::new()
        .route(HEALTHZ, get(|| async { "ok" }))
        .route(READYZ, get(|| async { "ok" }))
        .route(VALIDATE_HEALTHCHECKS, post(admission::validate_health_check))
        .route(ADMIT_APPLICATIONS, post(admission::admit_application))
        .with_state(state)
        .merge(receivers)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(metrics, crate::metrics::track))
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

    async fn status_of(path: &str) -> StatusCode {
        let request = Request::get(path).body(Body::empty()).expect("request");
        router(AppState::default()).oneshot(request).await.expect("router answers").status()
    }

    #[tokio::test]
    async fn the_router_serves_every_listed_route_and_nothing_else() {
        for route in ROUTES {
            assert_ne!(status_of(route.path).await, StatusCode::NOT_FOUND, "{route:?}");
        }
        for unlisted in ["/validate/other", "/admit/other", "/hooks/x"] {
            assert_eq!(status_of(unlisted).await, StatusCode::NOT_FOUND, "{unlisted}");
        }
    }
}
