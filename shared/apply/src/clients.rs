//! Clients that impersonate a service account, cached per account with a bound (least recently
//! used first out), built from the controller's own configuration. An empty namespace or name is
//! an error, never a fallback to the controller's identity.

use std::sync::{Arc, Mutex};

/// Shown the HTTP method of every request a client sends (the controller counts them).
pub type RequestObserver = Arc<dyn Fn(&http::Method) + Send + Sync>;

/// A client for `config` that shows every request it sends to `observer` first.
///
/// Every client also retries, a few times with a short backoff, an idempotent request (not a
/// `POST`) that failed in transport (a reset connection, a refused connect) or with 500 or 502
/// ([`TransientRetry`]). The Kubernetes client already retries 429, 503 and 504; without this,
/// one reset connection under a server-side apply would fail a whole rollout attempt. A retried
/// request is counted by the observer again: it is another request the API server sees.
pub fn observed_client(
    config: kube::Config,
    observer: Option<&RequestObserver>,
) -> Result<kube::Client, kube::Error> {
    // The retry needs a service it can clone; the buffer makes the client's boxed stack one.
    let retry = tower::ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(TransientRetry::default()))
        .layer(tower::buffer::BufferLayer::new(RETRY_BUFFER))
        .into_inner();
    let builder = kube::client::ClientBuilder::try_from(config)?.with_layer(&retry);
    let Some(observer) = observer.cloned() else {
        return Ok(builder.build());
    };
    let observe =
        tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
            observer(request.method());
            request
        });
    Ok(builder.with_layer(&observe).build())
}

/// Requests waiting for the client's stack at once (beyond it, callers wait their turn).
const RETRY_BUFFER: usize = 1024;

/// Retries of a request that failed in a way a second try may not: a transport error, 500
/// InternalError or 502 Bad Gateway, for methods whose repetition has the effect of one call
/// (server-side apply and every other `PATCH`, `PUT`, `DELETE`, `GET`). A `POST` is never
/// repeated: a create that reached the server before the connection dropped would fail again as
/// AlreadyExists. At most [`TransientRetry::MAX_RETRIES`] retries, 50 ms, 100 ms, 200 ms apart.
///
/// Hand-written: kube's own `RetryPolicy` covers 429, 503 and 504 only, by design of its
/// callers; this is the same `tower::retry::Policy`, with our rule for what is transient.
#[derive(Clone, Debug, Default)]
pub struct TransientRetry {
    retries: u32,
}

impl TransientRetry {
    /// Most retries of one request.
    pub const MAX_RETRIES: u32 = 3;
    const FIRST_DELAY: std::time::Duration = std::time::Duration::from_millis(50);

    /// Whether a request of `method` that ended as `outcome` (a status, or a transport error)
    /// is tried again, after `retries` retries.
    pub fn should_retry(
        method: &http::Method,
        outcome: Option<http::StatusCode>,
        retries: u32,
    ) -> bool {
        let idempotent = method != http::Method::POST && method != http::Method::CONNECT;
        let transient = match outcome {
            None => true,
            Some(status) => {
                status == http::StatusCode::INTERNAL_SERVER_ERROR
                    || status == http::StatusCode::BAD_GATEWAY
            }
        };
        idempotent && transient && retries < Self::MAX_RETRIES
    }
}

impl<Res>
    tower::retry::Policy<http::Request<kube::client::Body>, http::Response<Res>, tower::BoxError>
    for TransientRetry
{
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        request: &mut http::Request<kube::client::Body>,
        result: &mut Result<http::Response<Res>, tower::BoxError>,
    ) -> Option<Self::Future> {
        let outcome = match result {
            Ok(response) => Some(response.status()),
            Err(_) => None,
        };
        if !Self::should_retry(request.method(), outcome, self.retries) {
            return None;
        }
        let delay = Self::FIRST_DELAY * 2u32.pow(self.retries);
        self.retries += 1;
        Some(tokio::time::sleep(delay))
    }

    fn clone_request(
        &mut self,
        request: &http::Request<kube::client::Body>,
    ) -> Option<http::Request<kube::client::Body>> {
        // Only bodies held whole can be sent again; a streamed one is not retried.
        let body = request.body().try_clone()?;
        let mut copy = http::Request::new(body);
        *copy.method_mut() = request.method().clone();
        *copy.uri_mut() = request.uri().clone();
        *copy.version_mut() = request.version();
        *copy.headers_mut() = request.headers().clone();
        *copy.extensions_mut() = request.extensions().clone();
        Some(copy)
    }
}

/// The username Kubernetes gives service account `namespace/name`.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("a service account needs a namespace and a name (got {namespace:?}/{name:?})")]
    EmptyIdentity { namespace: String, name: String },
    #[error("cannot build a client: {0}")]
    Build(#[from] kube::Error),
}

type Key = (String, String);

/// Impersonating clients, one per service account, at most `capacity` kept.
pub struct ImpersonatedClients {
    base: kube::Config,
    capacity: usize,
    observer: Option<RequestObserver>,
    /// Most recently used last.
    cache: Mutex<Vec<(Key, kube::Client)>>,
}

impl std::fmt::Debug for ImpersonatedClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImpersonatedClients").field("capacity", &self.capacity).finish()
    }
}

impl ImpersonatedClients {
    /// Clients derived from `base` (the controller's configuration), keeping at most `capacity`.
    pub fn new(base: kube::Config, capacity: usize) -> Self {
        Self { base, capacity: capacity.max(1), observer: None, cache: Mutex::new(Vec::new()) }
    }

    /// These clients, each showing its requests to `observer` ([`observed_client`]).
    pub fn observed(self, observer: RequestObserver) -> Self {
        Self { observer: Some(observer), ..self }
    }

    /// A client acting as service account `namespace/name`.
    pub fn for_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<kube::Client, ClientError> {
        if namespace.is_empty() || name.is_empty() {
            return Err(ClientError::EmptyIdentity {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            });
        }
        let key = (namespace.to_owned(), name.to_owned());
        let mut cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(at) = cache.iter().position(|(k, _)| *k == key) {
            let entry = cache.remove(at);
            let client = entry.1.clone();
            cache.push(entry);
            return Ok(client);
        }
        let mut config = self.base.clone();
        // The user only: for a service account user the API server adds its groups itself
        // (system:serviceaccounts, system:serviceaccounts:NS, system:authenticated). Naming them
        // would need `impersonate` on each group, which the chart's RBAC does not grant.
        config.auth_info.impersonate = Some(service_account_user(namespace, name));
        let client = observed_client(config, self.observer.as_ref())?;
        if cache.len() >= self.capacity {
            cache.remove(0);
        }
        cache.push((key, client.clone()));
        Ok(client)
    }

    /// How many clients are cached.
    pub fn cached(&self) -> usize {
        self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, StatusCode};
    use std::sync::atomic::{AtomicU32, Ordering};
    use tower::{Service, ServiceExt as _};

    #[test]
    fn transient_failures_of_idempotent_requests_are_retried_a_few_times() {
        let rows: [(Method, Option<StatusCode>, u32, bool); 12] = [
            (Method::PATCH, None, 0, true),
            (Method::PATCH, Some(StatusCode::INTERNAL_SERVER_ERROR), 0, true),
            (Method::PUT, Some(StatusCode::BAD_GATEWAY), 1, true),
            (Method::DELETE, None, 2, true),
            (Method::GET, Some(StatusCode::INTERNAL_SERVER_ERROR), 0, true),
            (Method::PATCH, None, TransientRetry::MAX_RETRIES, false),
            // A create is never repeated.
            (Method::POST, None, 0, false),
            (Method::POST, Some(StatusCode::INTERNAL_SERVER_ERROR), 0, false),
            // Answers that a second try would not change, or that kube retries itself.
            (Method::PATCH, Some(StatusCode::CONFLICT), 0, false),
            (Method::PATCH, Some(StatusCode::FORBIDDEN), 0, false),
            (Method::GET, Some(StatusCode::SERVICE_UNAVAILABLE), 0, false),
            (Method::GET, Some(StatusCode::OK), 0, false),
        ];
        for (method, outcome, retries, expected) in rows {
            assert_eq!(
                TransientRetry::should_retry(&method, outcome, retries),
                expected,
                "{method} {outcome:?} after {retries}"
            );
        }
    }

    /// A service that fails in transport `failures` times, then answers 200; counts calls.
    fn flaky(
        failures: u32,
        calls: Arc<AtomicU32>,
    ) -> impl Service<
        http::Request<kube::client::Body>,
        Response = http::Response<()>,
        Error = tower::BoxError,
        Future = std::future::Ready<Result<http::Response<()>, tower::BoxError>>,
    > + Clone {
        tower::service_fn(move |_request: http::Request<kube::client::Body>| {
            let call = calls.fetch_add(1, Ordering::SeqCst);
            std::future::ready(if call < failures {
                Err(tower::BoxError::from("connection reset by peer"))
            } else {
                Ok(http::Response::new(()))
            })
        })
    }

    fn request(method: Method) -> http::Request<kube::client::Body> {
        let mut request = http::Request::new(kube::client::Body::from(b"{\"a\":1}".to_vec()));
        *request.method_mut() = method;
        request
    }

    #[tokio::test]
    async fn a_reset_apply_is_sent_again_and_a_reset_create_is_not() {
        let layer = tower::retry::RetryLayer::new(TransientRetry::default());
        let calls = Arc::new(AtomicU32::new(0));
        let mut service = tower::Layer::layer(&layer, flaky(2, calls.clone()));
        let answer = service.ready().await.expect("ready").call(request(Method::PATCH)).await;
        assert!(answer.is_ok(), "{answer:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 3);

        let calls = Arc::new(AtomicU32::new(0));
        let mut service = tower::Layer::layer(&layer, flaky(10, calls.clone()));
        let answer = service.ready().await.expect("ready").call(request(Method::PATCH)).await;
        assert!(answer.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1 + TransientRetry::MAX_RETRIES);

        let calls = Arc::new(AtomicU32::new(0));
        let mut service = tower::Layer::layer(&layer, flaky(1, calls.clone()));
        let answer = service.ready().await.expect("ready").call(request(Method::POST)).await;
        assert!(answer.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
