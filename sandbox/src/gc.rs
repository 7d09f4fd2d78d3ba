//! The garbage collector's owner index and its decisions
//! (<https://kubernetes.io/docs/concepts/architecture/garbage-collection/>).
//!
//! kube-controller-manager's collector keeps an owner→dependents graph fed by informer events
//! and only revisits the nodes an event touched. The sandbox does the same, but the graph is
//! updated by the store in the same critical section as each write (there is no informer lag to
//! model), so it is hand-written here rather than taken from a crate: it is a few hash maps
//! keyed by uid plus the sets of objects and namespaces a write made worth another look. A pass
//! of the collector then costs O(what changed + their dependents), never O(stored objects).

use serde_json::Value;
use std::collections::{BTreeSet, HashMap, HashSet};

/// The store key of namespaces (`group/plural`, core group empty).
pub const NAMESPACES: &str = "/namespaces";

/// Where an object lives in the store: (store key, object key).
pub type Location = (String, String);

/// What the collector does about an object that is being deleted and may own others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerStep {
    /// Nothing for the collector to do.
    Nothing,
    /// `orphan` finalizer: remove this owner from every dependent, then drop the finalizer.
    OrphanDependents,
    /// `foregroundDeletion` finalizer with dependents left: delete them (foreground).
    DeleteDependents,
    /// `foregroundDeletion` finalizer and no dependent left: drop the finalizer.
    ReleaseForeground,
}

/// The step for an owner: `deleting` (it has a deletionTimestamp), its finalizers and how many
/// objects still name it as an owner.
pub fn owner_step(deleting: bool, finalizers: &[&str], dependents: usize) -> OwnerStep {
    if !deleting {
        OwnerStep::Nothing
    } else if finalizers.contains(&"orphan") {
        OwnerStep::OrphanDependents
    } else if !finalizers.contains(&"foregroundDeletion") {
        OwnerStep::Nothing
    } else if dependents == 0 {
        OwnerStep::ReleaseForeground
    } else {
        OwnerStep::DeleteDependents
    }
}

/// Whether a dependent is collected (background deletion): it is not already being deleted,
/// has owner references, and none of its owners exists (`owners_present`, one per reference;
/// a uid that never existed counts as gone, as in kube).
pub fn dependent_collectable(deleting: bool, owners_present: &[bool]) -> bool {
    !deleting && !owners_present.is_empty() && owners_present.iter().all(|present| !present)
}

/// The uids an object names in `metadata.ownerReferences`, sorted, without duplicates
/// (a reference without a uid names the empty uid, which no object has).
pub fn owner_uids(obj: &Value) -> Vec<String> {
    let mut uids: Vec<String> = obj
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| r["uid"].as_str().unwrap_or_default().to_string())
        .collect();
    uids.sort();
    uids.dedup();
    uids
}

/// Whether the object has a deletionTimestamp.
pub fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some()
}

/// The object's `metadata.finalizers`.
pub fn finalizers(obj: &Value) -> Vec<&str> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn meta<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.pointer(&format!("/metadata/{field}")).and_then(Value::as_str).unwrap_or_default()
}

/// Work taken out of the index for one pass.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Work {
    /// Objects (by uid) whose owners, dependents or deletion state changed.
    pub objects: Vec<String>,
    /// Terminating namespaces whose content changed.
    pub namespaces: Vec<String>,
}

/// The owner→dependents graph and what changed since the last pass.
#[derive(Debug, Default)]
pub struct OwnerIndex {
    /// Every stored object by uid.
    by_uid: HashMap<String, Location>,
    /// Owner uid → uids of the objects naming it (the owner may be gone or may never have
    /// existed).
    dependents: HashMap<String, HashSet<String>>,
    /// Namespaces with a deletionTimestamp.
    terminating: HashSet<String>,
    /// Objects (by uid) to look at in the next pass.
    dirty: HashSet<String>,
    /// Terminating namespaces to look at in the next pass.
    dirty_namespaces: BTreeSet<String>,
}

impl OwnerIndex {
    /// Record that `new` was stored at (`store_key`, `key`), replacing `old` if any.
    pub fn stored(&mut self, store_key: &str, key: &str, old: Option<&Value>, new: &Value) {
        let uid = meta(new, "uid");
        if let Some(old) = old.filter(|o| meta(o, "uid") != uid) {
            self.removed(store_key, old);
        }
        self.by_uid.insert(uid.to_string(), (store_key.to_string(), key.to_string()));
        let before = old.filter(|o| meta(o, "uid") == uid).map(owner_uids).unwrap_or_default();
        let after = owner_uids(new);
        if before != after {
            for gone in before.iter().filter(|u| !after.contains(u)) {
                self.unlink(gone, uid);
                self.dirty.insert(gone.clone());
            }
            for added in after.iter().filter(|u| !before.contains(u)) {
                self.dependents.entry(added.clone()).or_default().insert(uid.to_string());
                self.dirty.insert(added.clone());
            }
            if !after.is_empty() {
                self.dirty.insert(uid.to_string());
            }
        }
        if is_deleting(new)
            && finalizers(new).iter().any(|f| *f == "orphan" || *f == "foregroundDeletion")
        {
            self.dirty.insert(uid.to_string());
        }
        self.namespace_touched(store_key, new);
    }

    /// Record that `old` left the store (`store_key`).
    pub fn removed(&mut self, store_key: &str, old: &Value) {
        let uid = meta(old, "uid");
        self.by_uid.remove(uid);
        for owner in owner_uids(old) {
            self.unlink(&owner, uid);
            self.dirty.insert(owner);
        }
        if let Some(deps) = self.dependents.get(uid) {
            self.dirty.extend(deps.iter().cloned());
        }
        if store_key == NAMESPACES {
            let name = meta(old, "name");
            self.terminating.remove(name);
            self.dirty_namespaces.remove(name);
        } else {
            self.namespace_touched(store_key, old);
        }
    }

    fn unlink(&mut self, owner: &str, dependent: &str) {
        if let Some(deps) = self.dependents.get_mut(owner) {
            deps.remove(dependent);
            if deps.is_empty() {
                self.dependents.remove(owner);
            }
        }
    }

    fn namespace_touched(&mut self, store_key: &str, obj: &Value) {
        if store_key == NAMESPACES {
            if is_deleting(obj) {
                let name = meta(obj, "name").to_string();
                self.terminating.insert(name.clone());
                self.dirty_namespaces.insert(name);
            }
            return;
        }
        let ns = meta(obj, "namespace");
        if !ns.is_empty() && self.terminating.contains(ns) {
            self.dirty_namespaces.insert(ns.to_string());
        }
    }

    /// Where the object with this uid is stored.
    pub fn locate(&self, uid: &str) -> Option<&Location> {
        self.by_uid.get(uid)
    }

    /// Whether an object with this uid is stored.
    pub fn exists(&self, uid: &str) -> bool {
        self.by_uid.contains_key(uid)
    }

    /// The uids of the objects naming `owner` in their owner references.
    pub fn dependents_of(&self, owner: &str) -> impl Iterator<Item = &str> {
        self.dependents.get(owner).into_iter().flatten().map(String::as_str)
    }

    /// Whether any object names `owner` in its owner references.
    pub fn has_dependents(&self, owner: &str) -> bool {
        self.dependents.get(owner).is_some_and(|d| !d.is_empty())
    }

    /// Take what changed since the last pass (objects in a stable order).
    pub fn take_work(&mut self) -> Work {
        let mut objects: Vec<String> = self.dirty.drain().collect();
        objects.sort();
        let namespaces = std::mem::take(&mut self.dirty_namespaces).into_iter().collect();
        Work { objects, namespaces }
    }

    /// Look at this object again in the next pass (a write of the collector failed).
    pub fn retry_object(&mut self, uid: &str) {
        self.dirty.insert(uid.to_string());
    }

    /// Look at this namespace again in the next pass, if it is still terminating.
    pub fn retry_namespace(&mut self, name: &str) {
        if self.terminating.contains(name) {
            self.dirty_namespaces.insert(name.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn owner_steps() {
        use OwnerStep::*;
        let table: &[(bool, &[&str], usize, OwnerStep)] = &[
            (false, &[], 3, Nothing),
            (false, &["orphan"], 3, Nothing),
            (false, &["foregroundDeletion"], 3, Nothing),
            (true, &[], 3, Nothing),
            (true, &["example.com/hold"], 3, Nothing),
            (true, &["orphan"], 3, OrphanDependents),
            (true, &["orphan"], 0, OrphanDependents),
            (true, &["foregroundDeletion"], 2, DeleteDependents),
            (true, &["example.com/hold", "foregroundDeletion"], 0, ReleaseForeground),
            (true, &["orphan", "foregroundDeletion"], 1, OrphanDependents),
        ];
        for (deleting, fins, deps, want) in table {
            assert_eq!(owner_step(*deleting, fins, *deps), *want, "{deleting} {fins:?} {deps}");
        }
    }

    #[test]
    fn dependents_collectable_only_when_every_owner_is_gone() {
        let table: &[(bool, &[bool], bool)] = &[
            (false, &[], false),
            (false, &[true], false),
            (false, &[false], true),
            (false, &[false, true], false),
            (false, &[false, false], true),
            (true, &[false], false),
        ];
        for (deleting, owners, want) in table {
            assert_eq!(dependent_collectable(*deleting, owners), *want, "{deleting} {owners:?}");
        }
    }

    fn obj(ns: &str, name: &str, uid: &str, owners: &[&str]) -> Value {
        let refs: Vec<Value> = owners
            .iter()
            .map(|u| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": u}))
            .collect();
        json!({"metadata": {"namespace": ns, "name": name, "uid": uid, "ownerReferences": refs}})
    }

    #[test]
    fn removing_an_owner_marks_only_its_dependents_and_owners() {
        let mut ix = OwnerIndex::default();
        let owner = obj("a", "owner", "u-owner", &[]);
        ix.stored("/configmaps", "a/owner", None, &owner);
        for i in 0..100 {
            let o = obj("a", &format!("x{i}"), &format!("u-x{i}"), &[]);
            ix.stored("/configmaps", &format!("a/x{i}"), None, &o);
        }
        let dep = obj("a", "dep", "u-dep", &["u-owner", "u-never"]);
        ix.stored("/configmaps", "a/dep", None, &dep);
        assert_eq!(
            ix.take_work().objects,
            vec!["u-dep".to_string(), "u-never".into(), "u-owner".into()]
        );
        assert!(ix.has_dependents("u-owner"));
        assert!(ix.has_dependents("u-never"));
        assert!(!ix.exists("u-never"));

        // An update that keeps the same owners is nothing new for the collector.
        let mut dep2 = dep.clone();
        dep2["data"] = json!({"k": "v"});
        ix.stored("/configmaps", "a/dep", Some(&dep), &dep2);
        assert_eq!(ix.take_work(), Work::default());

        ix.removed("/configmaps", &owner);
        assert_eq!(ix.take_work().objects, vec!["u-dep".to_string()]);
        assert_eq!(ix.locate("u-dep"), Some(&("/configmaps".to_string(), "a/dep".to_string())));

        ix.removed("/configmaps", &dep2);
        assert!(!ix.has_dependents("u-owner"));
        assert!(!ix.has_dependents("u-never"));
        assert_eq!(ix.take_work().objects, vec!["u-never".to_string(), "u-owner".into()]);
    }

    #[test]
    fn terminating_namespaces_are_revisited_when_their_content_changes() {
        let mut ix = OwnerIndex::default();
        let ns = json!({"metadata": {"name": "a", "uid": "u-ns"}});
        ix.stored(NAMESPACES, "a", None, &ns);
        let cm = obj("a", "c", "u-c", &[]);
        ix.stored("/configmaps", "a/c", None, &cm);
        assert_eq!(ix.take_work(), Work::default());
        let mut gone = ns.clone();
        gone["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        ix.stored(NAMESPACES, "a", Some(&ns), &gone);
        assert_eq!(ix.take_work().namespaces, vec!["a".to_string()]);
        ix.removed("/configmaps", &cm);
        assert_eq!(ix.take_work().namespaces, vec!["a".to_string()]);
        ix.removed(NAMESPACES, &gone);
        ix.retry_namespace("a");
        assert_eq!(ix.take_work(), Work::default());
    }
}
