//! Strategic merge patch for built-in kinds, as far as kubectl's annotate, label, scale, edit and
//! client-side apply use it. Merge keys and strategies come from Kubernetes' own schemas
//! (`x-kubernetes-patch-merge-key`/`-strategy`, `list-map-keys`). Directives follow
//! <https://github.com/kubernetes/community/blob/master/contributors/devel/sig-api-machinery/strategic-merge-patch.md>.
//! Written by hand: no Rust crate implements strategic merge patch.

use crate::schema::{ListKind, Node};
use serde_json::{Map, Value};

pub fn apply(doc: &Value, patch: &Value, node: Node<'_>) -> Value {
    match (doc, patch) {
        (Value::Object(d), Value::Object(p)) => Value::Object(merge_map(d, p, node)),
        (_, Value::Object(p)) => Value::Object(merge_map(&Map::new(), p, node)),
        _ => patch.clone(),
    }
}

fn merge_map(d: &Map<String, Value>, p: &Map<String, Value>, node: Node<'_>) -> Map<String, Value> {
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut out = p.clone();
        out.remove("$patch");
        return out;
    }
    let mut out = d.clone();
    if let Some(rk) = p.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = rk.iter().filter_map(Value::as_str).collect();
        out.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, pv) in p {
        if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(a)), Some(del)) = (out.get_mut(field), pv.as_array()) {
                a.retain(|x| !del.contains(x));
            }
            continue;
        }
        if pv.is_null() {
            out.remove(k);
            continue;
        }
        let child = node.prop(k);
        let merged = match (out.get(k), pv) {
            (Some(Value::Object(dv)), Value::Object(pm)) => Value::Object(merge_map(dv, pm, child)),
            (Some(Value::Array(dv)), Value::Array(pa)) => merge_list(dv, pa, child),
            (None, Value::Object(pm)) => Value::Object(merge_map(&Map::new(), pm, child)),
            (None, Value::Array(pa)) => merge_list(&[], pa, child),
            _ => pv.clone(),
        };
        out.insert(k.clone(), merged);
    }
    out
}

fn merge_list(d: &[Value], p: &[Value], node: Node<'_>) -> Value {
    let merge_key = node.patch_merge_key().map(str::to_string).or_else(|| match node.list_kind() {
        ListKind::Map(keys) if keys.len() == 1 => Some(keys[0].clone()),
        _ => None,
    });
    let strategy_merge = node.patch_strategy().is_some_and(|s| s.split(',').any(|x| x == "merge"));
    if !strategy_merge {
        return Value::Array(p.iter().filter(|x| x.get("$patch").is_none()).cloned().collect());
    }
    match merge_key {
        Some(mk) => {
            let inode = node.items();
            let mut out: Vec<Value> = d.to_vec();
            for item in p {
                let key = item.get(&mk);
                if item.get("$patch").and_then(Value::as_str) == Some("delete") {
                    out.retain(|x| x.get(&mk) != key);
                    continue;
                }
                match out.iter_mut().find(|x| x.get(&mk) == key) {
                    Some(x) => *x = apply(x, item, inode),
                    None => out.push(item.clone()),
                }
            }
            Value::Array(out)
        }
        None => {
            let mut out: Vec<Value> = d.to_vec();
            for item in p {
                if !out.contains(item) {
                    out.push(item.clone());
                }
            }
            Value::Array(out)
        }
    }
}
