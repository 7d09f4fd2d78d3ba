//! Inventories answered from the controller's watches instead of one list per kind per
//! reconcile.
//!
//! The controller already watches every managed kind (one watch per kind, shared by all
//! Applications, filtered by the `sync.kuvryn.io/application` label). [`SharedInventory`] keeps
//! the objects those watches deliver, indexed by the Application their labels name, so
//! [`Engine::inventory`](crate::engine::Engine::inventory) finds an Application's live objects
//! without a request. It answers only when its answer is as good as a list would be:
//!
//! - **the kind's watch has listed everything** ([`SharedInventory::apply_event`] saw its
//!   initial list end), and is not re-listing after a break;
//! - **nothing this controller wrote is still on its way**: every apply and delete an engine
//!   makes is recorded as pending ([`SharedInventory::wrote`], [`SharedInventory::deleted`])
//!   until the watch delivers that very `resourceVersion` (or the deletion), or a re-list that
//!   began after the write ends. Watch events arrive in order, so once a write is seen, nothing
//!   older is left in the cache. No `resourceVersion` is ever compared for order (Kubernetes
//!   does not promise they are ordered), only for equality;
//! - **the service account may list the kind** in the destination: the inventory is still the
//!   service account's view (a kind it may not list is `PruneInventoryIncomplete`, never
//!   pruned), so its permission is checked with a real list, remembered for `max_age` (the
//!   controller's resync interval, like the dry-run memo's), and checked again after.
//!
//! Each object is kept trimmed ([`trim_live`]: no other manager's field sets, no
//! `last-applied-configuration` copy) and as compact JSON text, parsed again when a plan asks for
//! it: a parsed `serde_json::Value` takes several times the memory of its text (a map and a
//! string allocation per field), and the controller holds every managed object of every
//! Application. A plan reads a few objects per reconcile, so parsing them costs little.
//!
//! Otherwise the engine lists, as before. Hand-written: a map with an index and a pending set
//! keyed by our own types; kube-runtime's reflector store has neither the index by label nor
//! the pending writes.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kube::api::DynamicObject;
use kube::runtime::watcher;
use kuvryn_sync_api::keys;
use kuvryn_sync_core::desired::{GroupKind, ObjectKey};
use kuvryn_sync_core::field_manager;
use kuvryn_sync_core::plan::trim::trim_live;
use serde_json::Value;

/// The Application an object belongs to: namespace, name.
type AppId = (String, String);
/// An object of one kind: namespace (none when cluster-scoped), name.
type Slot = (Option<String>, String);

/// The watched objects of every managed kind, by Application, with this controller's writes
/// that the watches have not delivered yet.
#[derive(Debug)]
pub struct SharedInventory {
    max_age: Duration,
    kinds: Mutex<HashMap<GroupKind, KindCache>>,
    pending: Mutex<Pending>,
    /// When a service account was last seen allowed to list a kind in a namespace.
    allowed: Mutex<HashMap<(String, GroupKind, String), Instant>>,
}

#[derive(Debug, Default)]
struct KindCache {
    /// The initial list (or the last re-list) ended and no re-list is under way.
    synced: bool,
    /// A re-list under way: when it began, and the objects it delivered so far.
    relist: Option<(Instant, Objects)>,
    objects: Objects,
}

#[derive(Debug, Default)]
struct Objects {
    by_app: HashMap<AppId, HashMap<Slot, Cached>>,
    owner: HashMap<Slot, AppId>,
}

/// One watched object, as the cache keeps it.
#[derive(Debug)]
struct Cached {
    /// Its `metadata.resourceVersion`.
    version: Option<String>,
    /// Whether its deletion has begun.
    deleting: bool,
    /// The object, trimmed ([`trim_live`]), as compact JSON.
    json: Box<str>,
}

impl Cached {
    fn object(&self) -> Value {
        serde_json::from_str(&self.json).unwrap_or(Value::Null)
    }
}

impl Objects {
    fn insert(&mut self, slot: Slot, app: Option<AppId>, object: Cached) {
        self.remove(&slot);
        if let Some(app) = app {
            self.by_app.entry(app.clone()).or_default().insert(slot.clone(), object);
            self.owner.insert(slot, app);
        }
    }

    fn remove(&mut self, slot: &Slot) {
        if let Some(app) = self.owner.remove(slot)
            && let Some(objects) = self.by_app.get_mut(&app)
        {
            objects.remove(slot);
            if objects.is_empty() {
                self.by_app.remove(&app);
            }
        }
    }
}

#[derive(Debug, Default)]
struct Pending {
    writes: HashMap<ObjectKey, Write>,
    /// Pending writes per Application and kind, so a lookup need not scan them all.
    counts: HashMap<(AppId, GroupKind), usize>,
}

#[derive(Debug)]
struct Write {
    app: AppId,
    /// The `resourceVersion` the write produced; `None` for a delete.
    version: Option<String>,
    at: Instant,
}

impl Pending {
    fn add(&mut self, key: ObjectKey, write: Write) {
        let slot = (write.app.clone(), key.group_kind.clone());
        if let Some(old) = self.writes.insert(key.clone(), write) {
            self.count_down(&(old.app, key.group_kind.clone()));
        }
        *self.counts.entry(slot).or_insert(0) += 1;
    }

    fn remove(&mut self, key: &ObjectKey) {
        if let Some(old) = self.writes.remove(key) {
            self.count_down(&(old.app, key.group_kind.clone()));
        }
    }

    fn count_down(&mut self, slot: &(AppId, GroupKind)) {
        if let Some(count) = self.counts.get_mut(slot) {
            *count -= 1;
            if *count == 0 {
                self.counts.remove(slot);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SharedInventory {
    /// A cache whose knowledge of a service account's list permission is trusted for `max_age`.
    pub fn new(max_age: Duration) -> Self {
        Self {
            max_age,
            kinds: Mutex::default(),
            pending: Mutex::default(),
            allowed: Mutex::default(),
        }
    }

    /// Feed one event of the watch of `kind` (the controller's watch of the objects carrying
    /// the `sync.kuvryn.io/application` label).
    pub fn apply_event(&self, kind: &GroupKind, event: &watcher::Event<DynamicObject>) {
        let mut kinds = lock(&self.kinds);
        let cache = kinds.entry(kind.clone()).or_default();
        match event {
            watcher::Event::Init => {
                cache.synced = false;
                cache.relist = Some((Instant::now(), Objects::default()));
            }
            watcher::Event::InitApply(object) => {
                if let Some((_, objects)) = cache.relist.as_mut() {
                    let (slot, app, value) = entry(object);
                    objects.insert(slot, app, value);
                }
            }
            watcher::Event::InitDone => {
                if let Some((began, objects)) = cache.relist.take() {
                    cache.objects = objects;
                    cache.synced = true;
                    drop(kinds);
                    let mut pending = lock(&self.pending);
                    let seen: Vec<ObjectKey> = pending
                        .writes
                        .iter()
                        .filter(|(key, write)| key.group_kind == *kind && write.at < began)
                        .map(|(key, _)| key.clone())
                        .collect();
                    for key in &seen {
                        pending.remove(key);
                    }
                }
            }
            watcher::Event::Apply(object) => {
                let (slot, app, value) = entry(object);
                let deleting = object.metadata.deletion_timestamp.is_some();
                let version = object.metadata.resource_version.clone();
                cache.objects.insert(slot.clone(), app, value);
                drop(kinds);
                self.seen(object_key(kind, &slot), version.as_deref(), deleting);
            }
            watcher::Event::Delete(object) => {
                let (slot, _, _) = entry(object);
                cache.objects.remove(&slot);
                drop(kinds);
                self.seen(object_key(kind, &slot), None, true);
            }
        }
    }

    /// The watch of `kind` stopped (refused, or the controller stops): answer from lists again.
    pub fn forget_kind(&self, kind: &GroupKind) {
        lock(&self.kinds).remove(kind);
    }

    /// The watch delivered `key` at `version` (or its deletion, or its deletion under way).
    fn seen(&self, key: ObjectKey, version: Option<&str>, deleting: bool) {
        let mut pending = lock(&self.pending);
        let done = pending.writes.get(&key).is_some_and(|write| match &write.version {
            Some(written) => version == Some(written.as_str()),
            None => deleting,
        });
        if done {
            pending.remove(&key);
        }
    }

    /// Application `app` (namespace, name) applied `key`; the API server answered `version`.
    /// Pending until the watch delivers that version (an apply that changed nothing keeps the
    /// version the cache already has, and is not pending). An empty version never matches, so
    /// only a re-list ends it.
    pub fn wrote(&self, app: (&str, &str), key: &ObjectKey, version: &str) {
        if self.cached(key).is_some_and(|(cached, _)| cached.as_deref() == Some(version)) {
            return;
        }
        let app = (app.0.to_owned(), app.1.to_owned());
        let write = Write { app, version: Some(version.to_owned()), at: Instant::now() };
        lock(&self.pending).add(key.clone(), write);
    }

    /// Application `app` deleted `key`: pending until the watch delivers the deletion (or its
    /// start, for an object with finalizers), unless the cache already shows it being deleted.
    pub fn deleted(&self, app: (&str, &str), key: &ObjectKey) {
        if self.cached(key).is_some_and(|(_, deleting)| deleting) {
            return;
        }
        let app = (app.0.to_owned(), app.1.to_owned());
        lock(&self.pending).add(key.clone(), Write { app, version: None, at: Instant::now() });
    }

    /// The cached `resourceVersion` of `key`, and whether it is being deleted.
    fn cached(&self, key: &ObjectKey) -> Option<(Option<String>, bool)> {
        let kinds = lock(&self.kinds);
        let objects = &kinds.get(&key.group_kind)?.objects;
        let slot = (key.namespace.clone(), key.name.clone());
        let object = objects.by_app.get(objects.owner.get(&slot)?)?.get(&slot)?;
        Some((object.version.clone(), object.deleting))
    }

    /// Service account `identity` listed `kind` in `destination` (the Application's namespace
    /// for namespaced kinds, empty for cluster-scoped ones): `allowed`, or refused.
    pub fn listed(&self, identity: &str, kind: &GroupKind, destination: &str, allowed: bool) {
        let slot = (identity.to_owned(), kind.clone(), destination.to_owned());
        let mut memo = lock(&self.allowed);
        if allowed {
            memo.insert(slot, Instant::now());
        } else {
            memo.remove(&slot);
        }
    }

    /// Application `app`'s live objects of `kind` in `destination` (`None` for cluster-scoped
    /// kinds), as service account `identity` would list them; `None` when the cache cannot say
    /// (see the module documentation), and the caller lists instead.
    pub fn objects(
        &self,
        identity: &str,
        app: (&str, &str),
        kind: &GroupKind,
        destination: Option<&str>,
    ) -> Option<Vec<Value>> {
        let permission = (identity.to_owned(), kind.clone(), destination.unwrap_or("").to_owned());
        let fresh =
            lock(&self.allowed).get(&permission).is_some_and(|at| at.elapsed() < self.max_age);
        if !fresh {
            return None;
        }
        let id = (app.0.to_owned(), app.1.to_owned());
        if lock(&self.pending).counts.contains_key(&(id.clone(), kind.clone())) {
            return None;
        }
        let kinds = lock(&self.kinds);
        let cache = kinds.get(kind).filter(|c| c.synced && c.relist.is_none())?;
        let Some(objects) = cache.objects.by_app.get(&id) else { return Some(Vec::new()) };
        Some(
            objects
                .iter()
                .filter(|((namespace, _), _)| namespace.as_deref() == destination)
                .map(|(_, object)| object.object())
                .collect(),
        )
    }

    /// Objects cached, over every kind (for metrics and tests).
    pub fn len(&self) -> usize {
        lock(&self.kinds).values().map(|c| c.objects.owner.len()).sum()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where `object` goes in the cache, and what the cache keeps of it: trimmed for the
/// Application its labels name (its field manager's field sets are what the plan reads).
fn entry(object: &DynamicObject) -> (Slot, Option<AppId>, Cached) {
    let meta = &object.metadata;
    let slot = (meta.namespace.clone(), meta.name.clone().unwrap_or_default());
    let labels = meta.labels.as_ref();
    let app = labels.and_then(|labels| {
        Some((
            labels.get(keys::APPLICATION_NAMESPACE)?.clone(),
            labels.get(keys::APPLICATION)?.clone(),
        ))
    });
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some((namespace, name)) = &app {
        trim_live(&mut value, &field_manager::for_application(namespace, name));
    }
    let cached = Cached {
        version: meta.resource_version.clone(),
        deleting: meta.deletion_timestamp.is_some(),
        json: value.to_string().into_boxed_str(),
    };
    (slot, app, cached)
}

fn object_key(kind: &GroupKind, (namespace, name): &Slot) -> ObjectKey {
    ObjectKey { group_kind: kind.clone(), namespace: namespace.clone(), name: name.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kuvryn_sync_core::plan::trim;
    use serde_json::json;

    const SA: &str = "system:serviceaccount:team:deployer";
    const APP: (&str, &str) = ("team", "web");

    fn kind() -> GroupKind {
        GroupKind::new("apps", "Deployment")
    }

    fn object(name: &str, app: &str, version: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "team", "resourceVersion": version,
                         "labels": {keys::APPLICATION: app, keys::APPLICATION_NAMESPACE: "team"}}
        }))
        .expect("object")
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey { group_kind: kind(), namespace: Some("team".into()), name: name.into() }
    }

    /// A cache whose watch of Deployments listed `objects`, and whose service account listed
    /// Deployments in `team` once.
    fn listed(objects: &[DynamicObject]) -> SharedInventory {
        let cache = SharedInventory::new(Duration::from_secs(300));
        cache.apply_event(&kind(), &watcher::Event::Init);
        for object in objects {
            cache.apply_event(&kind(), &watcher::Event::InitApply(object.clone()));
        }
        cache.apply_event(&kind(), &watcher::Event::InitDone);
        cache.listed(SA, &kind(), "team", true);
        cache
    }

    fn names(found: Option<Vec<Value>>) -> Option<Vec<String>> {
        found.map(|objects| {
            let mut names: Vec<String> = objects
                .iter()
                .map(|o| o["metadata"]["name"].as_str().unwrap_or_default().to_owned())
                .collect();
            names.sort();
            names
        })
    }

    fn found(cache: &SharedInventory) -> Option<Vec<String>> {
        names(cache.objects(SA, APP, &kind(), Some("team")))
    }

    #[test]
    fn answers_with_the_applications_own_objects_once_the_watch_has_listed() {
        let cache = SharedInventory::new(Duration::from_secs(300));
        cache.listed(SA, &kind(), "team", true);
        assert_eq!(found(&cache), None, "no watch yet");
        cache.apply_event(&kind(), &watcher::Event::Init);
        cache.apply_event(&kind(), &watcher::Event::InitApply(object("a", "web", "1")));
        assert_eq!(found(&cache), None, "the initial list has not ended");
        cache.apply_event(&kind(), &watcher::Event::InitApply(object("b", "api", "2")));
        cache.apply_event(&kind(), &watcher::Event::InitDone);
        assert_eq!(found(&cache), Some(vec!["a".to_owned()]));
        assert_eq!(names(cache.objects(SA, APP, &kind(), Some("other"))), None, "not listed there");
        cache.listed(SA, &kind(), "other", true);
        assert_eq!(names(cache.objects(SA, APP, &kind(), Some("other"))), Some(vec![]));
        assert_eq!(names(cache.objects(SA, ("team", "none"), &kind(), Some("team"))), Some(vec![]));
    }

    #[test]
    fn a_service_account_not_seen_allowed_to_list_is_listed_again() {
        let cache = listed(&[object("a", "web", "1")]);
        assert_eq!(
            names(cache.objects("system:serviceaccount:team:other", APP, &kind(), Some("team"))),
            None
        );
        cache.listed(SA, &kind(), "team", false);
        assert_eq!(found(&cache), None, "refused: the list reports the kind unlisted");
        let expired = SharedInventory::new(Duration::ZERO);
        expired.apply_event(&kind(), &watcher::Event::Init);
        expired.apply_event(&kind(), &watcher::Event::InitDone);
        expired.listed(SA, &kind(), "team", true);
        assert_eq!(found(&expired), None, "the permission is trusted for max_age only");
    }

    #[test]
    fn a_write_is_pending_until_the_watch_delivers_its_version() {
        let cache = listed(&[object("a", "web", "1")]);
        cache.wrote(APP, &key("a"), "7");
        assert_eq!(found(&cache), None, "the cache still has version 1");
        cache.apply_event(&kind(), &watcher::Event::Apply(object("a", "web", "5")));
        assert_eq!(found(&cache), None, "an older event is not the write");
        cache.apply_event(&kind(), &watcher::Event::Apply(object("a", "web", "7")));
        assert_eq!(found(&cache), Some(vec!["a".to_owned()]));
        let live = cache.objects(SA, APP, &kind(), Some("team")).expect("answer");
        assert_eq!(live[0]["metadata"]["resourceVersion"], "7");
        // Another Application's write does not hold this one's inventory back.
        cache.wrote(("team", "api"), &key("b"), "9");
        assert_eq!(found(&cache), Some(vec!["a".to_owned()]));
    }

    #[test]
    fn an_apply_that_changed_nothing_is_not_pending() {
        let cache = listed(&[object("a", "web", "3")]);
        cache.wrote(APP, &key("a"), "3");
        assert_eq!(found(&cache), Some(vec!["a".to_owned()]));
    }

    #[test]
    fn a_delete_is_pending_until_the_watch_delivers_it() {
        let cache = listed(&[object("a", "web", "3"), object("b", "web", "4")]);
        cache.deleted(APP, &key("a"));
        assert_eq!(found(&cache), None);
        cache.apply_event(&kind(), &watcher::Event::Delete(object("a", "web", "8")));
        assert_eq!(found(&cache), Some(vec!["b".to_owned()]));
        let mut deleting = object("b", "web", "9");
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        cache.deleted(APP, &key("b"));
        cache.apply_event(&kind(), &watcher::Event::Apply(deleting));
        assert_eq!(found(&cache), Some(vec!["b".to_owned()]), "its deletion began: seen");
        cache.deleted(APP, &key("b"));
        assert_eq!(found(&cache), Some(vec!["b".to_owned()]), "already being deleted: not pending");
    }

    #[test]
    fn a_relist_that_began_after_a_write_ends_it() {
        let cache = listed(&[object("a", "web", "1")]);
        cache.wrote(APP, &key("a"), "");
        assert_eq!(found(&cache), None, "an empty version never matches");
        cache.apply_event(&kind(), &watcher::Event::Init);
        assert_eq!(found(&cache), None, "re-listing");
        cache.apply_event(&kind(), &watcher::Event::InitApply(object("a", "web", "12")));
        cache.apply_event(&kind(), &watcher::Event::InitDone);
        assert_eq!(found(&cache), Some(vec!["a".to_owned()]));
    }

    #[test]
    fn objects_are_kept_trimmed_for_their_application() {
        let mut watched = object("a", "web", "1");
        let entry = |manager: &str, operation: &str| {
            serde_json::from_value(json!({"manager": manager, "operation": operation,
                "apiVersion": "apps/v1", "time": "2026-12-05T01:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:replicas": {}}}}))
            .expect("entry")
        };
        watched.metadata.managed_fields = Some(vec![
            entry("kuvryn-sync/team/web", "Apply"),
            entry("kube-controller-manager", "Update"),
        ]);
        watched.metadata.annotations = Some(
            [(trim::LAST_APPLIED.to_owned(), "{}".to_owned()), ("keep".to_owned(), "1".to_owned())]
                .into(),
        );
        watched.data = json!({"spec": {"replicas": 2}, "status": {"replicas": 2}});
        let cache = listed(&[watched]);
        let live = cache.objects(SA, APP, &kind(), Some("team")).expect("answer");
        let metadata = &live[0]["metadata"];
        assert_eq!(
            metadata["managedFields"],
            json!([{"manager": "kuvryn-sync/team/web", "operation": "Apply",
                    "apiVersion": "apps/v1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                   {"manager": "kube-controller-manager", "operation": "Update"}]),
            "the Application's own field set is what the dry-run memo reads"
        );
        assert_eq!(metadata["annotations"], json!({"keep": "1"}));
        assert_eq!(metadata["resourceVersion"], "1");
        assert_eq!(live[0]["spec"], json!({"replicas": 2}));
        assert_eq!(live[0]["status"], json!({"replicas": 2}));
    }

    #[test]
    fn a_relabelled_object_moves_to_its_new_application_and_a_stopped_watch_forgets() {
        let cache = listed(&[object("a", "web", "1")]);
        cache.apply_event(&kind(), &watcher::Event::Apply(object("a", "api", "2")));
        assert_eq!(found(&cache), Some(vec![]));
        assert_eq!(
            names(cache.objects(SA, ("team", "api"), &kind(), Some("team"))),
            Some(vec!["a".to_owned()])
        );
        assert_eq!(cache.len(), 1);
        cache.forget_kind(&kind());
        assert_eq!(found(&cache), None);
        assert!(cache.is_empty());
    }
}
