//! An Application's resource tree: its inventory (the objects of `status.managedKinds` carrying
//! its `sync.kuvryn.io/application` label), the objects they own (ReplicaSets, Pods) found by
//! owner reference, health per node from `core::kstatus`, and the diagnosis chains laid over it:
//! every resource of a chain is marked, and a root cause that is not an object here (a missing
//! Secret) is added under the last chain step that is.
//!
//! [`assemble`] is pure (objects in, tree out); [`fetch`] lists the objects as the user.

use std::collections::{BTreeSet, HashMap};

use anyhow::{Context, Result};
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{ApiResource, Scope};
use kuvryn_sync_api::{Application, Diagnosis, HealthState, ResourceRef, keys};
use kuvryn_sync_core::kstatus;
use serde_json::Value;

/// Kinds that own the objects listed in [`OWNED`]: only when the inventory holds one are those
/// listed.
const OWNERS: &[&str] = &["Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob"];

/// Owned kinds shown under their owners (by owner reference).
const OWNED: &[(&str, &str)] = &[("apps/v1", "ReplicaSet"), ("v1", "Pod"), ("batch/v1", "Job")];

/// One node of the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// Health from kstatus, or `None` for a root cause that is not an object here.
    pub health: Option<(HealthState, String)>,
    /// On a diagnosis chain.
    pub on_chain: bool,
    /// The reason when this node is a diagnosis root cause.
    pub root_cause: Option<String>,
    pub children: Vec<Node>,
}

/// (kind, namespace, name): how chain steps and objects are matched.
type Key = (String, String, String);

fn key_of(object: &Value) -> Key {
    let meta = &object["metadata"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (text(&object["kind"]), text(&meta["namespace"]), text(&meta["name"]))
}

fn key_of_ref(r: &ResourceRef) -> Key {
    (r.kind.clone(), r.namespace.clone(), r.name.clone())
}

fn owner_uids(object: &Value) -> Vec<String> {
    object["metadata"]["ownerReferences"]
        .as_array()
        .map(|refs| refs.iter().filter_map(|r| r["uid"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// The tree of `inventory` (the Application's objects) with the `owned` objects attached under
/// their owners, and `diagnosis` laid over it.
pub fn assemble(inventory: &[Value], owned: &[Value], diagnosis: &[Diagnosis]) -> Vec<Node> {
    let chain: BTreeSet<Key> = diagnosis
        .iter()
        .flat_map(|d| d.chain.iter().chain([&d.resource]))
        .map(key_of_ref)
        .collect();
    let mut by_owner: HashMap<String, Vec<&Value>> = HashMap::new();
    for object in owned {
        for uid in owner_uids(object) {
            by_owner.entry(uid).or_default().push(object);
        }
    }
    let mut roots: Vec<Node> =
        inventory.iter().map(|o| node(o, &by_owner, &chain, diagnosis, 0)).collect();
    roots.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    for entry in diagnosis {
        attach_root_cause(&mut roots, entry);
    }
    roots
}

fn node(
    object: &Value,
    by_owner: &HashMap<String, Vec<&Value>>,
    chain: &BTreeSet<Key>,
    diagnosis: &[Diagnosis],
    depth: usize,
) -> Node {
    let key = key_of(object);
    let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
    let mut children: Vec<Node> = match by_owner.get(uid) {
        Some(owned) if depth < 4 => {
            owned.iter().map(|o| node(o, by_owner, chain, diagnosis, depth + 1)).collect()
        }
        _ => Vec::new(),
    };
    children.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    let root_cause =
        diagnosis.iter().find(|d| key_of_ref(&d.resource) == key).map(|d| d.reason.clone());
    Node {
        on_chain: chain.contains(&key),
        root_cause,
        health: Some(kstatus::health(object)),
        kind: key.0,
        namespace: key.1,
        name: key.2,
        children,
    }
}

/// Put `entry`'s root cause under the deepest chain step present in the tree, unless it is in
/// the tree already; with no step present, it becomes a root.
fn attach_root_cause(roots: &mut Vec<Node>, entry: &Diagnosis) {
    let cause = key_of_ref(&entry.resource);
    if find(roots, &cause).is_some() {
        return;
    }
    let missing = Node {
        kind: cause.0.clone(),
        namespace: cause.1.clone(),
        name: cause.2.clone(),
        health: None,
        on_chain: true,
        root_cause: Some(entry.reason.clone()),
        children: Vec::new(),
    };
    let parent = entry.chain.iter().rev().map(key_of_ref).find(|k| find(roots, k).is_some());
    match parent.and_then(|k| find(roots, &k)) {
        Some(parent) => parent.children.push(missing),
        None => roots.push(missing),
    }
}

fn find<'a>(nodes: &'a mut [Node], key: &Key) -> Option<&'a mut Node> {
    for node in nodes {
        if (&node.kind, &node.namespace, &node.name) == (&key.0, &key.1, &key.2) {
            return Some(node);
        }
        if let Some(found) = find(&mut node.children, key) {
            return Some(found);
        }
    }
    None
}

/// List the Application's inventory and the objects they own, as the user.
pub async fn fetch(client: &kube::Client, app: &Application) -> Result<Vec<Node>> {
    let status = app.status.clone().unwrap_or_default();
    let name = app.metadata.name.as_deref().unwrap_or_default();
    let app_ns = app.metadata.namespace.as_deref().unwrap_or_default();
    let dest = &app.spec.destination.namespace;
    let selector = format!("{}={name}", keys::APPLICATION);
    let mut inventory = Vec::new();
    for managed in &status.managed_kinds {
        let objects = list(client, &managed.api_version, &managed.kind, dest, &selector).await?;
        inventory.extend(objects.into_iter().filter(|o| {
            let label = o["metadata"]["labels"][keys::APPLICATION_NAMESPACE].as_str();
            label.is_none_or(|ns| ns == app_ns)
        }));
    }
    let mut owned = Vec::new();
    if inventory.iter().any(|o| o["kind"].as_str().is_some_and(|k| OWNERS.contains(&k))) {
        for (api_version, kind) in OWNED {
            // Owned objects the user may not list leave the tree shorter, not the page broken.
            owned.extend(list(client, api_version, kind, dest, "").await.unwrap_or_default());
        }
    }
    Ok(assemble(&inventory, &owned, &status.diagnosis))
}

async fn list(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    namespace: &str,
    selector: &str,
) -> Result<Vec<Value>> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let (resource, caps): (ApiResource, _) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("cannot find the API of {api_version} {kind}"))?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), namespace, &resource),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let params = if selector.is_empty() {
        ListParams::default()
    } else {
        ListParams::default().labels(selector)
    };
    let listed = api.list(&params).await.with_context(|| format!("cannot list {kind}"))?;
    listed
        .items
        .into_iter()
        .map(|o| {
            let mut value = serde_json::to_value(&o)?;
            value["kind"] = Value::String(kind.to_owned());
            value["apiVersion"] = Value::String(api_version.to_owned());
            Ok(value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(kind: &str, name: &str, uid: &str, owner: Option<&str>) -> Value {
        let mut o = json!({"apiVersion": "v1", "kind": kind,
            "metadata": {"name": name, "namespace": "demo", "uid": uid}});
        if let Some(owner) = owner {
            o["metadata"]["ownerReferences"] = json!([{"uid": owner, "kind": "x", "name": "x"}]);
        }
        o
    }

    fn reference(kind: &str, name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": kind, "namespace": "demo", "name": name})
    }

    #[test]
    fn owned_objects_hang_under_their_owner_and_the_missing_secret_under_the_pod() {
        let inventory =
            [object("Deployment", "broken", "d1", None), object("Service", "svc", "s1", None)];
        let owned = [
            object("ReplicaSet", "broken-1", "r1", Some("d1")),
            object("Pod", "broken-1-a", "p1", Some("r1")),
            object("Pod", "stray", "p9", Some("zz")),
        ];
        let diagnosis: Vec<Diagnosis> = serde_json::from_value(json!([{
            "resource": reference("Secret", "db"), "reason": "MissingSecret", "message": "m",
            "chain": [reference("Deployment", "broken"), reference("ReplicaSet", "broken-1"),
                      reference("Pod", "broken-1-a"), reference("Secret", "db")],
        }]))
        .expect("diagnosis");
        let tree = assemble(&inventory, &owned, &diagnosis);
        assert_eq!(
            tree.iter().map(|n| n.kind.as_str()).collect::<Vec<_>>(),
            ["Deployment", "Service"]
        );
        let deployment = &tree[0];
        assert!(deployment.on_chain && !tree[1].on_chain);
        let pod = &deployment.children[0].children[0];
        assert_eq!((pod.name.as_str(), pod.on_chain), ("broken-1-a", true));
        let secret = &pod.children[0];
        assert_eq!((secret.kind.as_str(), secret.name.as_str()), ("Secret", "db"));
        assert_eq!(secret.root_cause.as_deref(), Some("MissingSecret"));
        assert_eq!(secret.health, None, "not an object of the tree");
    }

    #[test]
    fn a_root_cause_without_any_chain_step_in_the_tree_becomes_a_root() {
        let diagnosis: Vec<Diagnosis> = serde_json::from_value(json!([{
            "resource": reference("ConfigMap", "cfg"), "reason": "MissingConfigMap", "message": "",
            "chain": [],
        }]))
        .expect("diagnosis");
        let tree = assemble(&[], &[], &diagnosis);
        assert_eq!(tree.len(), 1);
        assert_eq!(tree[0].root_cause.as_deref(), Some("MissingConfigMap"));
    }
}
