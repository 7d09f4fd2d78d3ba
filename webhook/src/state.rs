//! What the webhook's handlers share: its API client and its metrics.

use crate::metrics::WebhookMetrics;

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
