//! The store's label index: for each resource, label key → value → the keys of the objects
//! carrying that label, kept in step with every write in the same critical section (like the
//! garbage collector's [`crate::gc::OwnerIndex`]).
//!
//! A labelled list (a controller's inventory, `sync.kuvryn.io/application=NAME`, once per managed
//! kind and reconcile) would otherwise look at every object of the kind, so N Applications each
//! listing their few objects would cost O(N²) under the store's lock. With the index, a selector
//! with at least one requirement only a labelled object can meet (`=`, `==`, `in`, `exists`) looks
//! at the objects carrying the label it names with the fewest objects, then checks the whole
//! selector on them; the answer is the one a full scan gives, in the same (key) order.
//! kube-apiserver's watch cache answers these lists from memory too; the sandbox's index is a few
//! nested maps, so it is written here rather than taken from a crate.

use crate::selector::{LabelSelector, Narrowing};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

/// Label value → object keys (sorted, as lists are).
type ByValue = HashMap<String, BTreeSet<String>>;

/// The labels of every stored object, by resource (store key).
#[derive(Debug, Default)]
pub struct LabelIndex {
    /// Store key → label key → label value → object keys.
    by_resource: HashMap<String, HashMap<String, ByValue>>,
}

/// An object's labels with string values (a label selector matches only those).
fn labels(obj: &Value) -> impl Iterator<Item = (&String, &str)> {
    obj.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|v| (k, v)))
}

fn label_of<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.get("metadata")?.get("labels")?.get(key)?.as_str()
}

impl LabelIndex {
    /// Record that `new` was stored at (`store_key`, `key`), replacing `old` if any.
    pub fn stored(&mut self, store_key: &str, key: &str, old: Option<&Value>, new: &Value) {
        if let Some(old) = old {
            let gone: Vec<(&String, &str)> =
                labels(old).filter(|(k, v)| label_of(new, k) != Some(*v)).collect();
            if !gone.is_empty() {
                self.forget(store_key, key, gone);
            }
        }
        let mut added =
            labels(new).filter(|(k, v)| old.is_none_or(|o| label_of(o, k) != Some(*v))).peekable();
        if added.peek().is_none() {
            return;
        }
        let by_key = self.by_resource.entry(store_key.to_string()).or_default();
        for (k, v) in added {
            let keys = by_key.entry(k.clone()).or_default().entry(v.to_string()).or_default();
            keys.insert(key.to_string());
        }
    }

    /// Record that `old`, stored at (`store_key`, `key`), was removed.
    pub fn removed(&mut self, store_key: &str, key: &str, old: &Value) {
        self.forget(store_key, key, labels(old).collect());
    }

    /// Record that every object of `store_key` was removed.
    pub fn removed_all(&mut self, store_key: &str) {
        self.by_resource.remove(store_key);
    }

    fn forget(&mut self, store_key: &str, key: &str, gone: Vec<(&String, &str)>) {
        let Some(by_key) = self.by_resource.get_mut(store_key) else { return };
        for (k, v) in gone {
            let Some(by_value) = by_key.get_mut(k.as_str()) else { continue };
            if let Some(keys) = by_value.get_mut(v) {
                keys.remove(key);
                if keys.is_empty() {
                    by_value.remove(v);
                }
            }
            if by_value.is_empty() {
                by_key.remove(k.as_str());
            }
        }
    }

    /// The keys of the objects of `store_key` that can match `selector`, sorted: those carrying
    /// the label of the selector's narrowest requirement an object meets only with that label.
    /// `None` when there is no such requirement, or when it would leave at least half of the
    /// `total` objects (a scan is then as cheap): the caller looks at every object. Each
    /// candidate must still be checked against the whole selector.
    pub fn candidates(
        &self,
        store_key: &str,
        selector: &LabelSelector,
        total: usize,
    ) -> Option<Vec<&str>> {
        let Some(by_key) = self.by_resource.get(store_key) else {
            // No object of the resource carries a label.
            return selector.narrowings().next().map(|_| Vec::new());
        };
        let sets = |n: &Narrowing<'_>| -> Vec<&BTreeSet<String>> {
            match *n {
                Narrowing::Values(k, values) => match by_key.get(k) {
                    Some(by_value) => values.iter().filter_map(|v| by_value.get(v)).collect(),
                    None => vec![],
                },
                Narrowing::AnyValue(k) => {
                    by_key.get(k).map(|by_value| by_value.values().collect()).unwrap_or_default()
                }
            }
        };
        let (count, narrowest) = selector
            .narrowings()
            .map(|n| {
                let sets = sets(&n);
                (sets.iter().map(|s| s.len()).sum::<usize>(), sets)
            })
            .min_by_key(|(count, _)| *count)?;
        if total > 0 && count * 2 >= total {
            return None;
        }
        let single = narrowest.len() == 1;
        let mut keys: Vec<&str> = narrowest.into_iter().flatten().map(String::as_str).collect();
        if !single {
            // Distinct values of one label: no key twice, but the sets interleave.
            keys.sort_unstable();
        }
        Some(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}})
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).expect("selector")
    }

    /// The candidates for `selector`, with a large total so the index always answers.
    fn found(index: &LabelIndex, selector: &str) -> Option<Vec<String>> {
        index
            .candidates("sk", &sel(selector), 1_000)
            .map(|keys| keys.into_iter().map(str::to_string).collect())
    }

    fn index_of(objects: &[(&str, Value)]) -> LabelIndex {
        let mut index = LabelIndex::default();
        for (key, labels) in objects {
            index.stored("sk", key, None, &obj(labels.clone()));
        }
        index
    }

    #[test]
    fn narrowing_requirements_answer_from_the_index_in_key_order() {
        let index = index_of(&[
            ("ns/c", json!({"app": "a", "tier": "web"})),
            ("ns/a", json!({"app": "a"})),
            ("ns/b", json!({"app": "b", "tier": "db"})),
            ("other/a", json!({"app": "a", "tier": "web"})),
        ]);
        let table: &[(&str, Option<&[&str]>)] = &[
            ("app=a", Some(&["ns/a", "ns/c", "other/a"])),
            ("app==b", Some(&["ns/b"])),
            ("app=missing", Some(&[])),
            ("nolabel=x", Some(&[])),
            ("app in (b,a)", Some(&["ns/a", "ns/b", "ns/c", "other/a"])),
            ("app in ()", Some(&[])),
            ("tier", Some(&["ns/b", "ns/c", "other/a"])),
            // The narrowest requirement is used: one object is tier=db.
            ("app in (a,b),tier=db", Some(&["ns/b"])),
            // Objects without the label meet these: the caller scans.
            ("app!=a", None),
            ("app notin (a)", None),
            ("!tier", None),
            ("", None),
        ];
        for (selector, want) in table {
            let want = want.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(found(&index, selector), want, "selector {selector:?}");
        }
    }

    #[test]
    fn label_changes_deletes_and_resource_removal_keep_the_index_in_step() {
        let mut index = LabelIndex::default();
        let v1 = obj(json!({"app": "a", "keep": "x"}));
        index.stored("sk", "ns/o", None, &v1);
        // An update changing one label and adding another.
        let v2 = obj(json!({"app": "b", "keep": "x", "new": "y"}));
        index.stored("sk", "ns/o", Some(&v1), &v2);
        assert_eq!(found(&index, "app=a"), Some(vec![]));
        assert_eq!(found(&index, "app=b"), Some(vec!["ns/o".to_string()]));
        assert_eq!(found(&index, "keep=x"), Some(vec!["ns/o".to_string()]));
        assert_eq!(found(&index, "new"), Some(vec!["ns/o".to_string()]));
        // An update (a patch) dropping every label.
        let v3 = obj(json!(null));
        index.stored("sk", "ns/o", Some(&v2), &v3);
        for s in ["app", "keep=x", "new=y"] {
            assert_eq!(found(&index, s), Some(vec![]), "{s} after the labels went");
        }
        assert!(index.by_resource.get("sk").is_none_or(HashMap::is_empty), "no empty entries");
        // Labels again, then a delete.
        index.stored("sk", "ns/o", Some(&v3), &v1);
        index.stored("sk", "ns/p", None, &v1);
        index.removed("sk", "ns/o", &v1);
        assert_eq!(found(&index, "app=a"), Some(vec!["ns/p".to_string()]));
        // Non-string label values are not labels a selector matches.
        index.stored("sk", "ns/q", None, &obj(json!({"app": 1})));
        assert_eq!(found(&index, "app"), Some(vec!["ns/p".to_string()]));
        // The resource stops being served.
        index.removed_all("sk");
        assert_eq!(found(&index, "app=a"), Some(vec![]));
    }

    #[test]
    fn a_requirement_most_objects_meet_is_left_to_a_scan() {
        let index = index_of(&[
            ("ns/a", json!({"managed": "yes", "app": "a"})),
            ("ns/b", json!({"managed": "yes", "app": "b"})),
        ]);
        assert_eq!(index.candidates("sk", &sel("managed=yes"), 3), None);
        assert_eq!(index.candidates("sk", &sel("managed=yes,app=a"), 3), Some(vec!["ns/a"]));
        assert_eq!(index.candidates("sk", &sel("managed=yes"), 5), Some(vec!["ns/a", "ns/b"]));
    }
}
