//! Helpers for tests and benchmarks of the apply engine: a service account with rights in a
//! namespace, raw server-side applies, and desired state from plain objects.

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kuvryn_sync_api::ManagedKind;
use kuvryn_sync_apply::engine::{Engine, EngineError};
use kuvryn_sync_apply::kinds::Kinds;
use kuvryn_sync_core::desired::{DesiredState, Rendered, Target, normalise};
use kuvryn_sync_core::inventory;
use kuvryn_sync_core::plan::Observation;
use serde_json::{Value, json};

/// The service account [`grant_deployer`] makes.
pub const DEPLOYER: &str = "deployer";

/// One server-side apply of `object` into `namespace` under `manager`.
pub async fn apply_raw(
    client: &kube::Client,
    kinds: &Kinds,
    namespace: &str,
    object: &Value,
    manager: &str,
) -> Result<()> {
    let api_version = object["apiVersion"].as_str().context("apiVersion")?;
    let kind = object["kind"].as_str().context("kind")?;
    let name = object["metadata"]["name"].as_str().context("name")?;
    let served = kinds.resolve(client, api_version, kind).await?.context("served kind")?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &served.resource);
    api.patch(name, &PatchParams::apply(manager), &Patch::Apply(object)).await?;
    Ok(())
}

/// Service account [`DEPLOYER`] in `namespace`, allowed every verb on `resources` (core group)
/// there and nothing else.
pub async fn grant_deployer(
    admin: &kube::Client,
    namespace: &str,
    resources: &[&str],
) -> Result<()> {
    let objects = [
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": DEPLOYER}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": DEPLOYER},
               "rules": [{"apiGroups": [""], "resources": resources, "verbs": ["*"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": DEPLOYER},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": DEPLOYER},
               "subjects": [{"kind": "ServiceAccount", "name": DEPLOYER,
                             "namespace": namespace}]}),
    ];
    let kinds = Kinds::default();
    for object in objects {
        apply_raw(admin, &kinds, namespace, &object, "test-setup").await?;
    }
    Ok(())
}

/// The desired state of Application `application` in `namespace` (also its destination) for
/// `objects`, scopes from the API server's discovery.
pub async fn desired_state(
    client: &kube::Client,
    kinds: &Kinds,
    application: &str,
    namespace: &str,
    objects: Vec<Value>,
) -> Result<DesiredState> {
    let scopes = kinds.scopes(client, &objects).await?;
    let rendered: Vec<Rendered> = objects
        .into_iter()
        .enumerate()
        .map(|(n, object)| Rendered { origin: format!("{application}.yaml#{n}"), object })
        .collect();
    let target =
        Target { application, application_namespace: namespace, destination_namespace: namespace };
    Ok(normalise(&rendered, |gk| scopes.get(gk).copied(), target)?)
}

/// Observe `state` the way the Application reconciler does: list the Application's live objects
/// of the desired kinds by its labels, then dry-run each desired object against them.
pub async fn observe(
    engine: &Engine<'_>,
    application: &str,
    namespace: &str,
    state: &DesiredState,
    revision: &str,
) -> Result<Vec<Observation>, EngineError> {
    let kinds: BTreeSet<ManagedKind> = state.objects.iter().map(inventory::managed_kind).collect();
    let kinds: Vec<ManagedKind> = kinds.into_iter().collect();
    let live = engine.inventory(namespace, application, namespace, &kinds).await?.live();
    engine.observe(&state.objects, revision, &live).await
}
