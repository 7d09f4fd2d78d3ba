//! Which kinds the API server serves, at which resource and scope, asked once per
//! (group, version, kind) and cached.

use std::collections::BTreeMap;
use std::sync::Mutex;

use kube::api::ApiResource;
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope as KubeScope};
use kuvryn_sync_core::desired::{GroupKind, Scope, group_of};

/// A served kind.
#[derive(Clone, Debug)]
pub struct ServedKind {
    pub resource: ApiResource,
    pub scope: Scope,
}

/// Discovery, cached.
#[derive(Debug, Default)]
pub struct Kinds {
    cache: Mutex<BTreeMap<(String, String), Option<ServedKind>>>,
}

impl Kinds {
    /// The kind `kind` of `api_version`, or `None` when the API server does not serve it.
    pub async fn resolve(
        &self,
        client: &kube::Client,
        api_version: &str,
        kind: &str,
    ) -> Result<Option<ServedKind>, kube::Error> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(found) = self.lock().get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = match api_version.rsplit_once('/') {
            Some((group, version)) => (group, version),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let served = match discovery::pinned_kind(client, &gvk).await {
            Ok((resource, caps)) => Some(ServedKind {
                resource,
                scope: match caps.scope {
                    KubeScope::Cluster => Scope::Cluster,
                    KubeScope::Namespaced => Scope::Namespaced,
                },
            }),
            Err(kube::Error::Discovery(_)) => None,
            Err(kube::Error::Api(status)) if status.code == 404 => None,
            Err(err) => return Err(err),
        };
        self.lock().insert(key, served.clone());
        Ok(served)
    }

    /// Forget what was learnt (after CRDs were applied, say).
    pub fn forget(&self) {
        self.lock().clear();
    }

    /// The scopes of every kind `objects` use, for `core::desired::normalise`.
    pub async fn scopes(
        &self,
        client: &kube::Client,
        objects: &[serde_json::Value],
    ) -> Result<BTreeMap<GroupKind, Scope>, kube::Error> {
        let mut scopes = BTreeMap::new();
        for object in objects {
            let (Some(api_version), Some(kind)) =
                (object["apiVersion"].as_str(), object["kind"].as_str())
            else {
                continue;
            };
            if let Some(served) = self.resolve(client, api_version, kind).await? {
                scopes.insert(GroupKind::new(group_of(api_version), kind), served.scope);
            }
        }
        Ok(scopes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), Option<ServedKind>>> {
        self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
