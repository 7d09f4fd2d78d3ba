//! One watch per managed kind, shared by every Application: each change of an object carrying
//! the `sync.kuvryn.io/application` label queues a reconcile of the Application its labels name.
//! Metadata-only watches (`PartialObjectMetadata`), so the controller never receives the
//! objects' contents; started the first time any Application records the kind in
//! `status.managedKinds`, never one per Application.
//!
//! A kind the controller may not watch (its RBAC is deliberately narrow: no Secrets, for one) is
//! logged once and left to the periodic resync.

use std::collections::BTreeSet;
use std::sync::Mutex;

use futures::StreamExt;
use kube::api::Api;
use kube::core::GroupVersionKind;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kuvryn_sync_api::{Application, ManagedKind, keys};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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
        scope: Scope,
    ) -> (Self, mpsc::Receiver<ObjectRef<Application>>) {
        let (triggers, receiver) = mpsc::channel(QUEUE);
        let started = Mutex::new(BTreeSet::new());
        (Self { client, triggers, stop, started, scope }, receiver)
    }

    /// Start a watch for each of `kinds` not watched yet.
    pub fn ensure(&self, kinds: &[ManagedKind]) {
        let mut started = self.started.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for kind in kinds {
            if started.insert((kind.api_version.clone(), kind.kind.clone())) {
                tokio::spawn(watch_kind(
                    self.client.clone(),
                    kind.clone(),
                    (self.triggers.clone(), self.scope.clone()),
                    self.stop.clone(),
                ));
            }
        }
    }
}

async fn watch_kind(
    client: kube::Client,
    kind: ManagedKind,
    (triggers, scope): (mpsc::Sender<ObjectRef<Application>>, Scope),
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
    let api: Api<PartialObjectMeta<kube::api::DynamicObject>> = Api::all_with(client, &resource);
    let config = watcher::Config::default().labels(keys::APPLICATION);
    let mut events = std::pin::pin!(watcher(api, config).default_backoff());
    tracing::info!(kind = %kind.kind, api_version = %kind.api_version, "watching managed kind");
    loop {
        let event = tokio::select! {
            () = stop.cancelled() => return,
            event = events.next() => event,
        };
        match event {
            None => return,
            Some(Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object))) => {
                let labels = object.metadata.labels.unwrap_or_default();
                if let (Some(name), Some(namespace)) =
                    (labels.get(keys::APPLICATION), labels.get(keys::APPLICATION_NAMESPACE))
                    && scope.owns_name(namespace, name)
                {
                    // A full queue drops the request: the resync covers it.
                    let _ = triggers.try_send(ObjectRef::new(name).within(namespace));
                }
            }
            Some(Ok(_)) => {}
            Some(Err(watcher::Error::InitialListFailed(kube::Error::Api(status))))
                if status.code == 403 =>
            {
                tracing::warn!(kind = %kind.kind, api_version = %kind.api_version,
                    "the controller may not watch this managed kind; the periodic resync covers it");
                return;
            }
            Some(Err(err)) => tracing::debug!(kind = %kind.kind, %err, "managed-kind watch error"),
        }
    }
}
