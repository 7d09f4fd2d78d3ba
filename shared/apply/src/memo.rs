//! Dry runs known to change nothing, remembered so a reconcile need not send them again.
//!
//! After an apply, or a dry run the plan found to change nothing, the engine records the
//! object's [`apply_fingerprint`]. While the listed object still has the same fingerprint, the
//! same dry run would again change nothing (see the fingerprint's documentation), so
//! [`Engine::observe`](crate::engine::Engine::observe) answers from the listed object instead of
//! sending it. A rollout's reconciles between its apply and `Healthy` (each workload status
//! change queues one) then cost the inventory's lists, not a dry run per object.
//!
//! Entries are trusted for a bounded time (`max_age`, the controller's resync interval): each
//! object is dry-run again at least that often, which covers what the fingerprint cannot see
//! (a changed default or mutating webhook on the server). The table is bounded too: when it is
//! full it is emptied, which only costs dry runs. Hand-written: it is a map with expiry keyed
//! by our own types, smaller than wiring a caching crate.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kuvryn_sync_core::desired::ObjectKey;
use kuvryn_sync_core::plan::apply_fingerprint;
use serde_json::Value;

/// Entries kept at most; a full table is emptied.
pub const CAPACITY: usize = 65_536;

/// Dry runs known to change nothing, per field manager and object.
#[derive(Debug)]
pub struct DryRunMemo {
    max_age: Duration,
    entries: Mutex<HashMap<(String, ObjectKey), Entry>>,
}

#[derive(Debug)]
struct Entry {
    fingerprint: [u8; 32],
    at: Instant,
}

impl DryRunMemo {
    /// A memo whose entries are trusted for `max_age`.
    pub fn new(max_age: Duration) -> Self {
        Self { max_age, entries: Mutex::new(HashMap::new()) }
    }

    /// Whether applying `body` under `manager` to `live` is known to change nothing.
    pub fn unchanged(&self, manager: &str, key: &ObjectKey, live: &Value, body: &Value) -> bool {
        let Some(fingerprint) = apply_fingerprint(live, body, manager) else {
            return false;
        };
        let entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.get(&(manager.to_owned(), key.clone())).is_some_and(|entry| {
            entry.fingerprint == fingerprint && entry.at.elapsed() < self.max_age
        })
    }

    /// Record that applying `body` under `manager` leaves `live` as it is (it was just applied,
    /// or a dry run changed nothing).
    pub fn record(&self, manager: &str, key: &ObjectKey, live: &Value, body: &Value) {
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let slot = (manager.to_owned(), key.clone());
        match apply_fingerprint(live, body, manager) {
            Some(fingerprint) => {
                if entries.len() >= CAPACITY && !entries.contains_key(&slot) {
                    entries.clear();
                }
                entries.insert(slot, Entry { fingerprint, at: Instant::now() });
            }
            None => {
                entries.remove(&slot);
            }
        }
    }

    /// Forget `key` under `manager` (the object is deleted, or a dry run found a change).
    pub fn forget(&self, manager: &str, key: &ObjectKey) {
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.remove(&(manager.to_owned(), key.clone()));
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kuvryn_sync_core::desired::GroupKind;
    use serde_json::json;

    const MANAGER: &str = "kuvryn-sync/web/site";

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            group_kind: GroupKind::new("", "ConfigMap"),
            namespace: Some("web".into()),
            name: name.into(),
        }
    }

    fn live(uid: &str, fields: Value) -> Value {
        json!({"metadata": {"uid": uid, "managedFields": [
            {"manager": MANAGER, "operation": "Apply", "apiVersion": "v1",
             "fieldsType": "FieldsV1", "fieldsV1": fields}]}})
    }

    #[test]
    fn remembers_per_manager_and_object_until_the_fingerprint_or_the_age_moves() {
        let body = json!({"data": {"a": "1"}});
        let fields = json!({"f:data": {"f:a": {}}});
        let memo = DryRunMemo::new(Duration::from_secs(60));
        let object = live("u1", fields.clone());
        assert!(!memo.unchanged(MANAGER, &key("a"), &object, &body), "nothing recorded yet");
        memo.record(MANAGER, &key("a"), &object, &body);
        assert!(memo.unchanged(MANAGER, &key("a"), &object, &body));
        assert!(!memo.unchanged(MANAGER, &key("b"), &object, &body), "another object");
        assert!(!memo.unchanged("other", &key("a"), &object, &body), "another manager");
        let taken = live("u1", json!({"f:data": {}}));
        assert!(!memo.unchanged(MANAGER, &key("a"), &taken, &body), "a field was taken");
        memo.forget(MANAGER, &key("a"));
        assert!(!memo.unchanged(MANAGER, &key("a"), &object, &body), "forgotten");
        assert!(memo.is_empty());

        let expired = DryRunMemo::new(Duration::ZERO);
        expired.record(MANAGER, &key("a"), &object, &body);
        assert!(!expired.unchanged(MANAGER, &key("a"), &object, &body), "too old to trust");

        let memo = DryRunMemo::new(Duration::from_secs(60));
        memo.record(MANAGER, &key("a"), &object, &body);
        let unheld = json!({"metadata": {"uid": "u1", "managedFields": []}});
        memo.record(MANAGER, &key("a"), &unheld, &body);
        assert!(memo.is_empty(), "recording an object we hold nothing of forgets it");
    }
}
