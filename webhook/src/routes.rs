//! The route table of the HTTPS listener. The API server calls the admission paths; Git hosts and
//! registries call the receiver paths. A path is listed in [`ROUTES`] exactly when [`router`]
//! serves it (a test asks the router for each), and the chart may register an admission webhook
//! only for a listed admission path: a `ValidatingWebhookConfiguration` or
//! `MutatingWebhookConfiguration` naming an unserved path fails closed and blocks every write to
//! its kind.

use axum::Router;
use axum::routing::get;

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

/// Every route [`router`] serves. Admission and receiver routes join when their handlers exist.
pub const ROUTES: &[Route] = &[Route { path: HEALTHZ, kind: RouteKind::Health }];

const HEALTHZ: &str = "/healthz";

/// The admission paths served, for the chart's webhook configurations.
pub fn admission_paths() -> impl Iterator<Item = &'static str> {
    ROUTES.iter().filter(|route| route.kind == RouteKind::Admission).map(|route| route.path)
}

/// The HTTPS router.
pub fn router() -> Router {
    Router::new().route(HEALTHZ, get(|| async { "ok" }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    async fn status_of(path: &str) -> StatusCode {
        let request = Request::get(path).body(Body::empty()).expect("request");
        router().oneshot(request).await.expect("router answers").status()
    }

    #[tokio::test]
    async fn the_router_serves_every_listed_route_and_nothing_else() {
        for route in ROUTES {
            assert_ne!(status_of(route.path).await, StatusCode::NOT_FOUND, "{route:?}");
        }
        for unlisted in ["/validate/healthchecks", "/admit/applications", "/hooks/x"] {
            assert_eq!(status_of(unlisted).await, StatusCode::NOT_FOUND, "{unlisted}");
        }
    }
}
