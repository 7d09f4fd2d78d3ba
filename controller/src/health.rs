//! The HealthChecks the health of managed objects is judged by: watched, and compiled once per
//! change of the HealthChecks, not re-listed per evaluation. The judging itself (the hook rule,
//! the HealthCheck rules for the kind, then kstatus) is `kuvryn_sync_core::health`, which the CLI
//! uses too.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kuvryn_sync_api::HealthCheck;
use kuvryn_sync_core::health_rules::RuleSet;

/// The HealthChecks, as a watched store, and their rules compiled for the store's contents.
#[derive(Clone)]
pub struct HealthRules {
    store: Store<HealthCheck>,
    compiled: Arc<Mutex<Compiled>>,
}

/// The rules compiled for one state of the store: (name, resourceVersion) of each HealthCheck.
type Compiled = (Vec<(String, String)>, Arc<RuleSet>);

impl std::fmt::Debug for HealthRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthRules").field("health_checks", &self.store.state().len()).finish()
    }
}

impl HealthRules {
    /// Watch every HealthCheck until `stop`; the returned rules follow the watch.
    pub fn watch(client: kube::Client, stop: tokio_util::sync::CancellationToken) -> Self {
        let (store, writer) = reflector::store();
        let stream = watcher(Api::<HealthCheck>::all(client), watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .touched_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    next = stream.next() => match next {
                        Some(Err(err)) => tracing::warn!(%err, "HealthCheck watch"),
                        Some(Ok(_)) => {}
                        None => break,
                    },
                }
            }
        });
        HealthRules { store, compiled: Arc::default() }
    }

    /// The rules of the HealthChecks seen so far, compiled again only when they changed.
    pub fn current(&self) -> Arc<RuleSet> {
        let checks = self.store.state();
        let mut versions: Vec<(String, String)> = checks
            .iter()
            .map(|c| {
                let name = c.metadata.name.clone().unwrap_or_default();
                (name, c.metadata.resource_version.clone().unwrap_or_default())
            })
            .collect();
        versions.sort();
        let mut compiled = self.compiled.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if compiled.0 != versions {
            let specs: Vec<(String, &kuvryn_sync_api::HealthCheckSpec)> = checks
                .iter()
                .map(|c| (c.metadata.name.clone().unwrap_or_default(), &c.spec))
                .collect();
            let rules = RuleSet::new(specs.iter().map(|(name, spec)| (name.as_str(), *spec)));
            *compiled = (versions, Arc::new(rules));
        }
        Arc::clone(&compiled.1)
    }
}

// The pure rules live in `core::health`, shared with the CLI; the reconcilers call them here.
pub use kuvryn_sync_core::health::desired_health;
