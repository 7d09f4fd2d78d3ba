//! Live state: one reflector (a kube-runtime watcher and its store) per kind the view shows,
//! made with the user's client, and a change signal the pages' server-sent event stream
//! forwards to the browser, which then fetches the page again and swaps its live region.
//!
//! A kind the user may not watch keeps retrying with backoff; its error, worded as the API
//! server said, is shown at the top of every page until a watch succeeds.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kuvryn_sync_api::{Application, ImagePolicy, Repository, Revision};
use serde::de::DeserializeOwned;
use tokio::sync::broadcast;

/// How long the stream waits for more changes before telling the browser, so a burst (a
/// relist of a thousand Applications) becomes one refresh.
const SETTLE: Duration = Duration::from_millis(150);

/// The stores of every kind the view shows and the change signal.
#[derive(Clone)]
pub struct Live {
    pub applications: Store<Application>,
    pub revisions: Store<Revision>,
    pub repositories: Store<Repository>,
    pub image_policies: Store<ImagePolicy>,
    changes: broadcast::Sender<()>,
    errors: Arc<Mutex<BTreeMap<&'static str, String>>>,
}

impl Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live").finish_non_exhaustive()
    }
}

impl Live {
    /// Start watching, in `namespace` or (with `None`) every namespace, as `client`'s user.
    pub fn start(client: &kube::Client, namespace: Option<&str>) -> Live {
        let (changes, _) = broadcast::channel(16);
        let errors = Arc::new(Mutex::new(BTreeMap::new()));
        let signal = Signal { changes: changes.clone(), errors: errors.clone() };
        Live {
            applications: watch(api(client, namespace), "Applications", signal.clone()),
            revisions: watch(api(client, namespace), "Revisions", signal.clone()),
            repositories: watch(api(client, namespace), "Repositories", signal.clone()),
            image_policies: watch(api(client, namespace), "ImagePolicies", signal),
            changes,
            errors,
        }
    }

    /// Wait until every store holds its first list, or `limit` passes (a kind the user may not
    /// list never gets one).
    pub async fn settle(&self, limit: Duration) {
        let all = futures::future::join4(
            self.applications.wait_until_ready(),
            self.revisions.wait_until_ready(),
            self.repositories.wait_until_ready(),
            self.image_policies.wait_until_ready(),
        );
        let _ = tokio::time::timeout(limit, all).await;
    }

    /// The failing watches, as `cannot watch KIND: MESSAGE`.
    pub fn errors(&self) -> Vec<String> {
        let errors = self.errors.lock().map(|e| e.clone()).unwrap_or_default();
        errors
            .into_iter()
            .map(|(kind, message)| format!("cannot watch {kind}: {message}"))
            .collect()
    }

    /// The server-sent event stream: a `change` event after every settled burst of changes
    /// (with data: browsers drop an event whose data is empty).
    pub fn events(&self) -> Sse<impl Stream<Item = Result<Event, Infallible>> + use<>> {
        let receiver = self.changes.subscribe();
        let stream = futures::stream::unfold(receiver, |mut receiver| async move {
            if let Err(broadcast::error::RecvError::Closed) = receiver.recv().await {
                return None;
            }
            tokio::time::sleep(SETTLE).await;
            while receiver.try_recv().is_ok() {}
            Some((Ok(Event::default().event("change").data("changed")), receiver))
        });
        Sse::new(stream).keep_alive(KeepAlive::default())
    }
}

fn api<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

#[derive(Clone)]
struct Signal {
    changes: broadcast::Sender<()>,
    errors: Arc<Mutex<BTreeMap<&'static str, String>>>,
}

impl Signal {
    fn set_error(&self, kind: &'static str, message: Option<String>) {
        if let Ok(mut errors) = self.errors.lock() {
            let changed = match message {
                Some(m) => errors.insert(kind, m.clone()).as_ref() != Some(&m),
                None => errors.remove(kind).is_some(),
            };
            if changed {
                let _ = self.changes.send(());
            }
        }
    }
}

fn watch<K>(api: Api<K>, kind: &'static str, signal: Signal) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let stream =
        reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone,
                ) => {
                    signal.set_error(kind, None);
                    let _ = signal.changes.send(());
                }
                Ok(_) => {}
                Err(error) => signal.set_error(kind, Some(super::api_words(&error))),
            }
        }
    });
    reader
}
