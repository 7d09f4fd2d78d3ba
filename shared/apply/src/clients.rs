//! Clients that impersonate a service account, cached per account with a bound (least recently
//! used first out), built from the controller's own configuration. An empty namespace or name is
//! an error, never a fallback to the controller's identity.

use std::sync::{Arc, Mutex};

/// Shown the HTTP method of every request a client sends (the controller counts them).
pub type RequestObserver = Arc<dyn Fn(&http::Method) + Send + Sync>;

/// A client for `config` that shows every request it sends to `observer` first.
pub fn observed_client(
    config: kube::Config,
    observer: Option<&RequestObserver>,
) -> Result<kube::Client, kube::Error> {
    let builder = kube::client::ClientBuilder::try_from(config)?;
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

/// The username Kubernetes gives service account `namespace/name`.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The groups Kubernetes gives every service account of `namespace`.
pub fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![
        "system:serviceaccounts".to_owned(),
        format!("system:serviceaccounts:{namespace}"),
        "system:authenticated".to_owned(),
    ]
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
        config.auth_info.impersonate = Some(service_account_user(namespace, name));
        config.auth_info.impersonate_groups = Some(service_account_groups(namespace));
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
