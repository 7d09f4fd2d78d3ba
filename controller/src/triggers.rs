//! What wakes a reconciler of our own kinds: changes to an object's spec (its generation) or to
//! its annotations (the push receivers and the CLI request work through annotations), its
//! finalizers (the first reconcile adds ours, then goes on) and the start of its deletion. The controller's own status writes move none of these, so they never
//! trigger a reconcile.

use futures::Stream;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{Predicate, WatchStreamExt, predicates, watcher};

use crate::shards::Scope;

/// A cluster-wide watch of `api`'s kind, narrowed to the controller's shard (`scope`), feeding a
/// reflector store: the store (which holds only the objects in scope, so only they are
/// reconciled), and the stream of objects whose spec or annotations changed.
pub fn spec_or_annotation_changes<K>(
    api: Api<K>,
    scope: Scope,
) -> (Store<K>, impl Stream<Item = Result<K, watcher::Error>> + Send)
where
    K: Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let events = watcher(api, scope.watcher_config()).default_backoff().modify(trim_metadata);
    let stream = scope.narrow(events).reflect(writer).applied_objects().predicate_filter(
        predicates::generation
            .combine(predicates::annotations)
            .combine(predicates::finalizers)
            .combine(being_deleted),
        Default::default(),
    );
    (reader, stream)
}

/// Drop from a watched object of our own kinds what no reconciler reads and the store need not
/// hold for every object: its `managedFields` (the reconcilers write status and finalizers
/// without reading them) and a client-side `kubectl apply`'s copy of the whole object.
pub fn trim_metadata<K: Resource>(object: &mut K) {
    let metadata = object.meta_mut();
    metadata.managed_fields = None;
    if let Some(annotations) = metadata.annotations.as_mut() {
        annotations.remove(kuvryn_sync_core::plan::trim::LAST_APPLIED);
    }
}

/// Whether deletion has started (an object with a finalizer is marked, not removed).
fn being_deleted<K: Resource>(object: &K) -> Option<u64> {
    Some(u64::from(object.meta().deletion_timestamp.is_some()))
}

/// Log a failed reconcile of `kind` (the error policy has already scheduled the retry). A
/// request for an object the store does not hold is not a failure: a sharded controller is
/// asked about other shards' Applications by the shared watches, and skips them.
pub fn log_failure<E: std::error::Error + 'static>(
    kind: &str,
    result: &Result<impl Sized, kube::runtime::controller::Error<E, watcher::Error>>,
) {
    match result {
        Err(kube::runtime::controller::Error::ObjectNotFound(object)) => {
            tracing::debug!(%object, kind, "not in this controller's shard; skipped");
        }
        Err(err) => tracing::warn!(%err, kind, "reconcile failed"),
        Ok(_) => {}
    }
}
