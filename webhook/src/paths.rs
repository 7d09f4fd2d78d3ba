//! The paths the webhook serves and on which listener ([`ROUTES`]): the table the routers
//! ([`crate::routes`]), the request metrics ([`crate::metrics`]) and the chart's tests read.

use crate::hooks;

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

pub const HEALTHZ: &str = "/healthz";
/// Ready once the listener serves (the API client is optional: without it the webhook still
/// validates HealthChecks and says why it cannot check an approval).
pub const READYZ: &str = "/readyz";
/// HealthCheck validation (ValidatingWebhookConfiguration).
pub const VALIDATE_HEALTHCHECKS: &str = "/validate/healthchecks";
/// Application approval and rollback audit (MutatingWebhookConfiguration).
pub const ADMIT_APPLICATIONS: &str = "/admit/applications";

/// The admission paths served, for the chart's webhook configurations.
pub fn admission_paths() -> impl Iterator<Item = &'static str> {
    ROUTES.iter().filter(|route| route.kind == RouteKind::Admission).map(|route| route.path)
}

/// Whether `path` (a route pattern) is an admission path.
pub fn is_admission_path(path: &str) -> bool {
    admission_paths().any(|p| p == path)
}
