//! The Revisions this controller wrote that the Revision watch has not delivered yet.
//!
//! A reconcile reads the Revision it plans from the watched store instead of from the API server
//! (the "no Revision re-read after writing it"). The store lags the controller's own
//! writes, so each write's `resourceVersion` is remembered until the watch delivers that very
//! version, or a re-list that began after the write ends; while one is pending the Revision is
//! read from the API server, as before. Versions are compared for equality only, never for
//! order. Hand-written: a map keyed by namespace and name with one rule.
//!
//! The same events also keep the names of each Application's Revisions ([`RevisionWrites::names`]),
//! so a reconcile finds its own Revisions in the store by name instead of going through every
//! Application's (at 10,000 Applications that scan took a fifth of the controller's CPU).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use kube::ResourceExt;
use kube::runtime::watcher;
use kuvryn_sync_api::{Revision, keys};

/// Revisions written and not yet seen on the watch.
#[derive(Debug, Default)]
pub struct RevisionWrites {
    pending: Mutex<HashMap<(String, String), (String, Instant)>>,
    /// When the watch's current re-list began, while one is under way.
    relist: Mutex<Option<Instant>>,
    /// Revision names by the namespace and `sync.kuvryn.io/application` label they were last
    /// delivered with (a name may stay after its Revision went during a break in the watch, or
    /// moved to another Application: readers check the store's object).
    by_application: Mutex<HashMap<(String, String), BTreeSet<String>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn slot(revision: &Revision) -> (String, String) {
    (revision.namespace().unwrap_or_default(), revision.name_any())
}

impl RevisionWrites {
    /// The API server answered a write with `written`.
    pub fn wrote(&self, written: &Revision) {
        let version = written.resource_version().unwrap_or_default();
        lock(&self.pending).insert(slot(written), (version, Instant::now()));
    }

    /// Whether a write to `namespace/name` is still on its way to the store.
    pub fn pending(&self, namespace: &str, name: &str) -> bool {
        lock(&self.pending).contains_key(&(namespace.to_owned(), name.to_owned()))
    }

    /// The names of the Revisions delivered for Application `namespace/application` (see
    /// `by_application`).
    pub fn names(&self, namespace: &str, application: &str) -> Vec<String> {
        let key = (namespace.to_owned(), application.to_owned());
        lock(&self.by_application)
            .get(&key)
            .map(|n| n.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn index(&self, revision: &Revision, present: bool) {
        let Some(application) = revision.labels().get(keys::APPLICATION) else { return };
        let key = (revision.namespace().unwrap_or_default(), application.clone());
        let mut index = lock(&self.by_application);
        if present {
            index.entry(key).or_default().insert(revision.name_any());
        } else if let Some(names) = index.get_mut(&key) {
            names.remove(&revision.name_any());
            if names.is_empty() {
                index.remove(&key);
            }
        }
    }

    /// One event of the Revision watch, after the store applied it.
    pub fn apply_event(&self, event: &watcher::Event<Revision>) {
        match event {
            watcher::Event::Apply(revision) | watcher::Event::InitApply(revision) => {
                self.index(revision, true);
            }
            watcher::Event::Delete(revision) => self.index(revision, false),
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
        match event {
            watcher::Event::Init => *lock(&self.relist) = Some(Instant::now()),
            watcher::Event::InitDone => {
                if let Some(began) = lock(&self.relist).take() {
                    lock(&self.pending).retain(|_, (_, at)| *at >= began);
                }
            }
            watcher::Event::Apply(revision) | watcher::Event::InitApply(revision) => {
                let version = revision.resource_version().unwrap_or_default();
                let mut pending = lock(&self.pending);
                if pending.get(&slot(revision)).is_some_and(|(written, _)| *written == version) {
                    pending.remove(&slot(revision));
                }
            }
            watcher::Event::Delete(revision) => {
                lock(&self.pending).remove(&slot(revision));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revision(name: &str, version: &str) -> Revision {
        let spec = serde_json::from_value(serde_json::json!({
            "applicationRef": {"name": "web"},
            "source": {"repositoryRef": {"name": "apps"}, "revision": "abc", "path": ".",
                       "render": {"type": "yaml"}},
            "desiredStateHash": "h"
        }))
        .expect("spec");
        let mut revision = Revision::new(name, spec);
        revision.metadata.namespace = Some("team".to_owned());
        revision.metadata.resource_version = Some(version.to_owned());
        revision.metadata.labels = Some([(keys::APPLICATION.to_owned(), "web".to_owned())].into());
        revision
    }

    #[test]
    fn revisions_are_named_by_their_application() {
        let writes = RevisionWrites::default();
        writes.apply_event(&watcher::Event::InitApply(revision("web-1", "4")));
        writes.apply_event(&watcher::Event::Apply(revision("web-2", "5")));
        let mut other = revision("api-1", "6");
        other.metadata.labels = Some([(keys::APPLICATION.to_owned(), "api".to_owned())].into());
        writes.apply_event(&watcher::Event::Apply(other));
        assert_eq!(writes.names("team", "web"), ["web-1", "web-2"]);
        assert_eq!(writes.names("team", "api"), ["api-1"]);
        assert!(writes.names("other", "web").is_empty(), "another namespace");
        writes.apply_event(&watcher::Event::Delete(revision("web-1", "7")));
        assert_eq!(writes.names("team", "web"), ["web-2"]);
    }

    #[test]
    fn a_write_is_pending_until_its_version_is_delivered() {
        let writes = RevisionWrites::default();
        assert!(!writes.pending("team", "web-1"));
        writes.wrote(&revision("web-1", "4"));
        writes.wrote(&revision("web-1", "5"));
        assert!(writes.pending("team", "web-1"));
        writes.apply_event(&watcher::Event::Apply(revision("web-1", "4")));
        assert!(writes.pending("team", "web-1"), "an earlier write is not the last one");
        writes.apply_event(&watcher::Event::Apply(revision("web-1", "5")));
        assert!(!writes.pending("team", "web-1"));
    }

    #[test]
    fn a_relist_that_began_after_the_write_or_a_delete_ends_it() {
        let writes = RevisionWrites::default();
        writes.wrote(&revision("web-1", "4"));
        writes.apply_event(&watcher::Event::Init);
        writes.wrote(&revision("web-2", "6"));
        writes.apply_event(&watcher::Event::InitDone);
        assert!(!writes.pending("team", "web-1"), "the re-list began after the write");
        assert!(writes.pending("team", "web-2"), "written while re-listing: not covered");
        writes.apply_event(&watcher::Event::Delete(revision("web-2", "7")));
        assert!(!writes.pending("team", "web-2"));
    }
}
