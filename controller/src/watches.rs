//! One watch per managed kind, shared by every Application: each change of an object carrying
//! the `sync.kuvryn.io/application` label queues a reconcile of the Application its labels name,
//! once the object is in the [`SharedInventory`] the plans read their inventory from. Started
//! the first time any Application records the kind in `status.managedKinds`, never one per
//! Application.
//!
//! A kind the controller may not watch (its RBAC is deliberately narrow: no Secrets, for one) is
//! logged once, then listed every [`LIST_EVERY`] instead (when it may list it), and its watch is
//! tried again every [`WATCH_RETRY_AFTER`], so RBAC granted later takes effect without a restart.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::core::GroupVersionKind;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kuvryn_sync_api::{Application, ManagedKind, keys};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use kuvryn_sync_apply::shared_inventory::SharedInventory;
use kuvryn_sync_core::desired::{GroupKind, group_of};

use crate::shards::Scope;

/// Reconcile requests queued at most; more are dropped (the resync still covers them).
pub const QUEUE: usize = 1024;

/// The shared watches.
pub struct ManagedWatches {
    client: kube::Client,
    triggers: mpsc::Sender<ObjectRef<Application>>,
    stop: CancellationToken,
    started: Mutex<BTreeSet<(String, String)>>,
    /// Requests for Applications outside the controller's shard are not queued.
    scope: Scope,
    /// Where the watched objects go.
    inventory: Arc<SharedInventory>,
}

impl std::fmt::Debug for ManagedWatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedWatches").finish_non_exhaustive()
    }
}

impl ManagedWatches {
    /// Watches as the controller's `client`; reconcile requests go to the returned receiver.
    pub fn new(
        client: kube::Client,
        stop: CancellationToken,
        (scope, inventory): (Scope, Arc<SharedInventory>),
    ) -> (Self, mpsc::Receiver<ObjectRef<Application>>) {
        let (triggers, receiver) = mpsc::channel(QUEUE);
        let started = Mutex::new(BTreeSet::new());
        (Self { client, triggers, stop, started, scope, inventory }, receiver)
    }

    /// Start a watch for each of `kinds` not watched yet.
    pub fn ensure(&self, kinds: &[ManagedKind]) {
        let mut started = self.started.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for kind in kinds {
            if started.insert((kind.api_version.clone(), kind.kind.clone())) {
                tokio::spawn(watch_kind(
                    self.client.clone(),
                    kind.clone(),
                    (self.triggers.clone(), self.scope.clone(), Arc::clone(&self.inventory)),
                    self.stop.clone(),
                ));
            }
        }
    }
}

async fn watch_kind(
    client: kube::Client,
    kind: ManagedKind,
    requests: Requests,
    stop: CancellationToken,
) {
    let (group, version) = match kind.api_version.rsplit_once('/') {
        Some((group, version)) => (group, version),
        None => ("", kind.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &kind.kind);
    let resource = match kube::discovery::pinned_kind(&client, &gvk).await {
        Ok((resource, _)) => resource,
        Err(err) => {
            tracing::warn!(kind = %kind.kind, api_version = %kind.api_version, %err,
                "cannot watch a managed kind; the periodic resync covers it");
            return;
        }
    };
    let lister: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &resource);
    let api: Api<kube::api::DynamicObject> = Api::all_with(client, &resource);
    let mut warned = false;
    loop {
        let watched = watch_until_forbidden(&api, &kind, &requests, &stop).await;
        requests.2.forget_kind(&group_kind(&kind));
        if watched == Watched::Stopped {
            return;
        }
        if !std::mem::replace(&mut warned, true) {
            tracing::warn!(kind = %kind.kind, api_version = %kind.api_version,
                every = ?LIST_EVERY, retry = ?WATCH_RETRY_AFTER,
                "the controller may not watch this managed kind: listing it periodically \
                 instead and trying the watch again");
        }
        if list_periodically(&lister, &requests, &stop).await == Watched::Stopped {
            return;
        }
    }
}

/// How often a kind that may not be watched is listed instead.
pub const LIST_EVERY: Duration = Duration::from_secs(5);
/// How long a kind is listed before its watch is tried again (RBAC may have been granted).
pub const WATCH_RETRY_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug, PartialEq, Eq)]
enum Watched {
    /// The controller stops, or the stream ended.
    Stopped,
    /// The API server refused the watch (or its initial list) with 403.
    Forbidden,
}

fn group_kind(kind: &ManagedKind) -> GroupKind {
    GroupKind::new(group_of(&kind.api_version), &kind.kind)
}

/// Keep the watched objects in the shared inventory and queue the Applications of their
/// changes, until stopped or refused.
async fn watch_until_forbidden(
    api: &Api<kube::api::DynamicObject>,
    kind: &ManagedKind,
    requests: &Requests,
    stop: &CancellationToken,
) -> Watched {
    let config = watcher::Config::default().labels(keys::APPLICATION);
    let group_kind = group_kind(kind);
    let mut events = std::pin::pin!(watcher(api.clone(), config).default_backoff());
    tracing::info!(kind = %kind.kind, api_version = %kind.api_version, "watching managed kind");
    loop {
        let event = tokio::select! {
            () = stop.cancelled() => return Watched::Stopped,
            event = events.next() => event,
        };
        if let Some(Ok(event)) = &event {
            requests.2.apply_event(&group_kind, event);
        }
        match event {
            None => return Watched::Stopped,
            Some(Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object))) => {
                request_reconcile(requests, &object.metadata);
            }
            Some(Ok(_)) => {}
            Some(Err(
                watcher::Error::InitialListFailed(kube::Error::Api(status))
                | watcher::Error::WatchStartFailed(kube::Error::Api(status))
                | watcher::Error::WatchFailed(kube::Error::Api(status)),
            )) if status.code == 403 => return Watched::Forbidden,
            Some(Err(err)) => tracing::debug!(kind = %kind.kind, %err, "managed-kind watch error"),
        }
    }
}

/// For [`WATCH_RETRY_AFTER`], list the kind every [`LIST_EVERY`] and queue the Applications of
/// the objects that changed, appeared or went away between two lists (a refused list is just
/// tried again).
async fn list_periodically(
    api: &Api<kube::api::DynamicObject>,
    requests: &Requests,
    stop: &CancellationToken,
) -> Watched {
    let params = kube::api::ListParams::default().labels(keys::APPLICATION);
    let mut before: Option<Listed> = None;
    let until = tokio::time::Instant::now() + WATCH_RETRY_AFTER;
    while tokio::time::Instant::now() < until {
        if let Ok(list) = api.list_metadata(&params).await {
            let now: Listed = list.items.into_iter().map(|o| (listed_key(&o), o)).collect();
            if let Some(before) = &before {
                for object in moved(before, &now) {
                    request_reconcile(requests, &object.metadata);
                }
            }
            before = Some(now);
        }
        tokio::select! {
            () = stop.cancelled() => return Watched::Stopped,
            () = tokio::time::sleep(LIST_EVERY) => {}
        }
    }
    Watched::Forbidden
}

/// One listing: each object by uid (or namespace/name), with its `resourceVersion`.
type Listed = BTreeMap<String, PartialObjectMeta<kube::api::DynamicObject>>;

fn listed_key(object: &PartialObjectMeta<kube::api::DynamicObject>) -> String {
    let meta = &object.metadata;
    meta.uid.clone().unwrap_or_else(|| {
        format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        )
    })
}

/// The objects of two listings that changed (another `resourceVersion`), appeared or went away.
fn moved<'a>(
    before: &'a Listed,
    now: &'a Listed,
) -> Vec<&'a PartialObjectMeta<kube::api::DynamicObject>> {
    let changed = now.iter().filter(|(key, object)| {
        before
            .get(*key)
            .is_none_or(|old| old.metadata.resource_version != object.metadata.resource_version)
    });
    let gone = before.iter().filter(|(key, _)| !now.contains_key(*key));
    changed.chain(gone).map(|(_, object)| object).collect()
}

/// Where reconcile requests go, which Applications this replica reconciles, and where watched
/// objects are kept.
type Requests = (mpsc::Sender<ObjectRef<Application>>, Scope, Arc<SharedInventory>);

/// Queue the Application `object`'s labels name, when this replica's shard owns it; a full
/// queue drops the request (the resync covers it).
fn request_reconcile((triggers, scope, _): &Requests, metadata: &kube::api::ObjectMeta) {
    let Some(labels) = metadata.labels.as_ref() else { return };
    if let (Some(name), Some(namespace)) =
        (labels.get(keys::APPLICATION), labels.get(keys::APPLICATION_NAMESPACE))
        && scope.owns_name(namespace, name)
    {
        let _ = triggers.try_send(ObjectRef::new(name).within(namespace));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(uid: &str, version: &str, app: &str) -> PartialObjectMeta<kube::api::DynamicObject> {
        let mut object: PartialObjectMeta<kube::api::DynamicObject> =
            serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                                                      "metadata": {}}))
            .expect("metadata");
        object.metadata.uid = Some(uid.into());
        object.metadata.resource_version = Some(version.into());
        object.metadata.labels = Some(
            [
                (keys::APPLICATION.to_owned(), app.to_owned()),
                (keys::APPLICATION_NAMESPACE.to_owned(), "team".to_owned()),
            ]
            .into(),
        );
        object
    }

    fn listing(objects: &[(&str, &str, &str)]) -> Listed {
        objects.iter().map(|(uid, v, app)| ((*uid).to_owned(), object(uid, v, app))).collect()
    }

    #[test]
    fn a_listing_wakes_the_applications_of_what_changed_appeared_or_went_away() {
        let before = listing(&[("a", "1", "web"), ("b", "2", "api"), ("c", "3", "db")]);
        let now = listing(&[("a", "1", "web"), ("b", "5", "api"), ("d", "6", "cache")]);
        let mut woken: Vec<String> = moved(&before, &now)
            .into_iter()
            .filter_map(|o| o.metadata.labels.as_ref()?.get(keys::APPLICATION).cloned())
            .collect();
        woken.sort();
        assert_eq!(woken, ["api", "cache", "db"], "b changed, d appeared, c went away");
        assert!(moved(&now, &now).is_empty(), "nothing moved");
    }
}
