//! What wakes a reconciler of our own kinds: changes to an object's spec (its generation) or to
//! its annotations (the push receivers and the CLI request work through annotations), its
//! finalizers (the first reconcile adds ours, then goes on) and the start of its deletion. The controller's own status writes move none of these, so they never
//! trigger a reconcile.

use futures::Stream;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{Predicate, WatchStreamExt, predicates, watcher};

/// A cluster-wide watch of `api`'s kind feeding a reflector store: the store, and the stream of
/// objects whose spec or annotations changed.
pub fn spec_or_annotation_changes<K>(
    api: Api<K>,
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
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(
            predicates::generation
                .combine(predicates::annotations)
                .combine(predicates::finalizers)
                .combine(being_deleted),
            Default::default(),
        );
    (reader, stream)
}

/// Whether deletion has started (an object with a finalizer is marked, not removed).
fn being_deleted<K: Resource>(object: &K) -> Option<u64> {
    Some(u64::from(object.meta().deletion_timestamp.is_some()))
}

/// Log a failed reconcile of `kind` (the error policy has already scheduled the retry).
pub fn log_failure<E: std::fmt::Display>(kind: &str, result: &Result<impl Sized, E>) {
    if let Err(err) = result {
        tracing::warn!(%err, kind, "reconcile failed");
    }
}
