//! The diagnosis step's I/O: gather, as the Application's service account, the snapshot the
//! pure analysis (`kuvryn_sync_core::diagnosis`) needs for the objects that are not Healthy —
//! their ReplicaSets, Pods and Jobs, the Events about them, and whether the Secrets,
//! ConfigMaps, claims and service accounts they reference exist — then call it.
//!
//! An object whose controller has not acted on its current spec yet
//! ([`diagnosis::awaits_its_controller`]) is not looked into: it is named with its health
//! message, and nothing is read for it.
//!
//! Bounded: three levels of relatives, one Event list per namespace, at most
//! [`MAX_SNAPSHOT_OBJECTS`] objects; anything the service account may not read is left out (the
//! analysis then explains less, never wrongly). Secret values are never read into the snapshot:
//! a Secret's data keeps its keys with empty values. They are read for one purpose: every Secret
//! the workloads reference is taught to the redactor first, so a value a program printed into its
//! termination message or an Event is masked even when that Secret is not in Git.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DynamicObject, ListParams};
use kuvryn_sync_api::{Diagnosis, HealthState, ResourceRef};
use kuvryn_sync_apply::kinds::Kinds;
use kuvryn_sync_core::desired::{DesiredObject, ObjectKey};
use kuvryn_sync_core::diagnosis::{self, EventFacts, Snapshot, Unhealthy};
use kuvryn_sync_core::health_rules::HEALTH_CHECK_FAILED;
use kuvryn_sync_core::redact::Redactor;
use kuvryn_sync_core::rollout::{self, ObjectHealth};
use serde_json::Value;

/// Most objects gathered for one analysis.
pub const MAX_SNAPSHOT_OBJECTS: usize = 500;
/// Levels of relatives followed (Deployment → ReplicaSet → Pod).
const DEPTH: usize = 3;

/// The root causes of `health`'s unhealthy objects; empty when every object is Healthy.
pub async fn diagnose(
    client: &kube::Client,
    kinds: &Kinds,
    objects: &[DesiredObject],
    live: &BTreeMap<ObjectKey, Value>,
    health: &[ObjectHealth],
    redactor: &Redactor,
) -> Vec<Diagnosis> {
    let unhealthy: Vec<Unhealthy> = health
        .iter()
        .filter(|h| !rollout::is_done(h.state))
        .filter_map(|h| {
            let object = objects.iter().find(|o| o.key == h.key)?;
            Some(Unhealthy {
                resource: reference(&object.object),
                degraded: h.state == HealthState::Degraded,
                message: h.message.clone(),
                health_check_reason: h
                    .message
                    .starts_with(HEALTH_CHECK_FAILED)
                    .then(|| HEALTH_CHECK_FAILED.to_owned()),
            })
        })
        .collect();
    if unhealthy.is_empty() {
        return Vec::new();
    }
    let frontier: Vec<Value> = health
        .iter()
        .filter(|h| !rollout::is_done(h.state))
        .filter_map(|h| live.get(&h.key))
        .filter(|object| !diagnosis::awaits_its_controller(object))
        .cloned()
        .collect();
    let mut snapshot =
        Snapshot { objects: relatives(client, kinds, frontier).await, ..Default::default() };
    snapshot.events = events_about(client, &snapshot.objects).await;
    let mut redactor = redactor.clone();
    check_references(client, kinds, &mut snapshot, &mut redactor).await;
    diagnosis::diagnose(&unhealthy, &snapshot, &redactor)
}

/// Teach `redactor` the values of `object` when it is a Secret, so that a value a workload
/// printed (a termination message, an Event) is masked even when the Secret is not in Git.
fn learn_values(redactor: &mut Redactor, object: &Value) {
    use base64::Engine as _;
    if object["kind"] != "Secret" {
        return;
    }
    let decoded: Vec<Vec<u8>> = object
        .get("data")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|data| data.values())
        .filter_map(Value::as_str)
        .filter_map(|text| base64::engine::general_purpose::STANDARD.decode(text).ok())
        .collect();
    redactor.add_secret_data(decoded.iter().map(Vec::as_slice));
}

/// The unhealthy objects `frontier` and their relatives, [`DEPTH`] levels down, at most
/// [`MAX_SNAPSHOT_OBJECTS`].
async fn relatives(client: &kube::Client, kinds: &Kinds, mut frontier: Vec<Value>) -> Vec<Value> {
    let mut objects = Vec::new();
    let mut seen = BTreeSet::new();
    for _ in 0..DEPTH {
        let mut next = Vec::new();
        for object in &frontier {
            for query in diagnosis::related_selectors(object) {
                next.extend(related(client, kinds, &query).await);
            }
        }
        for object in std::mem::take(&mut frontier) {
            if seen.insert(uid_or_name(&object)) && objects.len() < MAX_SNAPSHOT_OBJECTS {
                objects.push(object);
            }
        }
        frontier = next.into_iter().filter(|o| !seen.contains(&uid_or_name(o))).collect();
        if frontier.is_empty() {
            break;
        }
    }
    objects.extend(frontier.into_iter().take(MAX_SNAPSHOT_OBJECTS));
    objects
}

/// Whether what the snapshot's Pods reference exists (found objects join it, Secrets without
/// their values), and every referenced Secret's values taught to `redactor`.
async fn check_references(
    client: &kube::Client,
    kinds: &Kinds,
    snapshot: &mut Snapshot,
    redactor: &mut Redactor,
) {
    let to_check = diagnosis::references_to_check(snapshot);
    let unchecked_secrets: Vec<_> =
        diagnosis::secrets_referenced(snapshot).difference(&to_check).cloned().collect();
    for wanted in to_check {
        match get(client, kinds, &wanted).await {
            Some(Some(found)) => {
                learn_values(redactor, &found);
                snapshot.objects.push(without_secret_values(found));
            }
            Some(None) => {
                snapshot.absent.insert(wanted);
            }
            None => {}
        }
    }
    for wanted in unchecked_secrets {
        if let Some(Some(found)) = get(client, kinds, &wanted).await {
            learn_values(redactor, &found);
        }
    }
}

fn reference(object: &Value) -> ResourceRef {
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).unwrap_or_default();
    ResourceRef {
        api_version: text("/apiVersion").to_owned(),
        kind: text("/kind").to_owned(),
        namespace: text("/metadata/namespace").to_owned(),
        name: text("/metadata/name").to_owned(),
    }
}

fn uid_or_name(object: &Value) -> String {
    match object.pointer("/metadata/uid").and_then(Value::as_str) {
        Some(uid) => uid.to_owned(),
        None => format!("{:?}", reference(object)),
    }
}

/// The objects `query` selects, as the service account; nothing when it may not list them.
async fn related(
    client: &kube::Client,
    kinds: &Kinds,
    query: &diagnosis::RelatedQuery,
) -> Vec<Value> {
    let Ok(Some(served)) = kinds.resolve(client, &query.api_version, &query.kind).await else {
        return Vec::new();
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &query.namespace, &served.resource);
    let mut params = ListParams::default().limit(MAX_SNAPSHOT_OBJECTS as u32);
    if !query.label_selector.is_empty() {
        params = params.labels(&query.label_selector);
    }
    let Ok(list) = api.list(&params).await else {
        return Vec::new();
    };
    list.items
        .into_iter()
        .filter(|item| {
            query.owner_uid.as_ref().is_none_or(|uid| {
                item.metadata.owner_references.iter().flatten().any(|owner| &owner.uid == uid)
            })
        })
        .filter_map(|mut item| {
            item.types.get_or_insert_with(|| kube::api::TypeMeta {
                api_version: query.api_version.clone(),
                kind: query.kind.clone(),
            });
            serde_json::to_value(item).ok()
        })
        .collect()
}

/// One object by reference: `Some(Some)` found, `Some(None)` absent, `None` unknown (not served,
/// forbidden, or the API server failed).
async fn get(client: &kube::Client, kinds: &Kinds, wanted: &ResourceRef) -> Option<Option<Value>> {
    let served = kinds.resolve(client, &wanted.api_version, &wanted.kind).await.ok()??;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &wanted.namespace, &served.resource);
    match api.get_opt(&wanted.name).await {
        Ok(Some(mut found)) => {
            found.types.get_or_insert_with(|| kube::api::TypeMeta {
                api_version: wanted.api_version.clone(),
                kind: wanted.kind.clone(),
            });
            Some(serde_json::to_value(found).ok())
        }
        Ok(None) => Some(None),
        Err(_) => None,
    }
}

/// A Secret with its data keys and no values.
fn without_secret_values(mut object: Value) -> Value {
    if object["kind"] == "Secret" {
        for field in ["data", "stringData"] {
            if let Some(map) = object.get_mut(field).and_then(Value::as_object_mut) {
                for value in map.values_mut() {
                    *value = Value::String(String::new());
                }
            }
        }
    }
    object
}

/// The Events about the snapshot's objects, one list per namespace.
async fn events_about(client: &kube::Client, objects: &[Value]) -> Vec<EventFacts> {
    let wanted: BTreeSet<(String, String, String)> = objects
        .iter()
        .map(|o| {
            let r = reference(o);
            (r.namespace, r.kind, r.name)
        })
        .collect();
    let namespaces: BTreeSet<&str> = wanted.iter().map(|(ns, _, _)| ns.as_str()).collect();
    let mut facts = Vec::new();
    for namespace in namespaces.into_iter().filter(|ns| !ns.is_empty()) {
        let api: Api<Event> = Api::namespaced(client.clone(), namespace);
        let Ok(list) = api.list(&ListParams::default().limit(1000)).await else {
            continue;
        };
        for event in list.items {
            let about = &event.involved_object;
            let key = (
                about.namespace.clone().unwrap_or_default(),
                about.kind.clone().unwrap_or_default(),
                about.name.clone().unwrap_or_default(),
            );
            if !wanted.contains(&key) {
                continue;
            }
            facts.push(EventFacts {
                regarding: ResourceRef {
                    api_version: about.api_version.clone().unwrap_or_default(),
                    kind: key.1,
                    namespace: key.0,
                    name: key.2,
                },
                reason: event.reason.unwrap_or_default(),
                message: event.message.unwrap_or_default(),
                warning: event.type_.as_deref() == Some("Warning"),
                count: event.count.and_then(|c| u32::try_from(c).ok()).unwrap_or(1),
            });
        }
    }
    facts
}
