//! The one way the controller writes a status: server-side apply of the whole `status` to the
//! `/status` subresource, as the controller's field manager, forced (the controller owns every
//! status field of the kinds it reconciles).

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use kuvryn_sync_api::CONTROLLER_NAME;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Apply `status` to the `K` named `name` in `namespace`; the object as the API server wrote it.
pub(crate) async fn apply_status<K>(
    client: &Client,
    namespace: &str,
    name: &str,
    status: &impl Serialize,
) -> Result<K, kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let body = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name},
        "status": status,
    });
    let apply = PatchParams::apply(CONTROLLER_NAME).force();
    api.patch_status(name, &apply, &Patch::Apply(&body)).await
}
