//! managedFields (FieldsV1) and server-side apply.
//!
//! Written by hand: no Rust crate implements structured-merge-diff. It follows the documented
//! rules of <https://kubernetes.io/docs/reference/using-api/server-side-apply/>: every field is owned
//! by the managers that set it (per manager, operation, apiVersion and subresource); an apply that
//! changes a field owned by another manager conflicts unless forced; fields an applier stops
//! applying are removed when nobody else owns them; an Update takes ownership of what it changes.

use crate::schema::{ListKind, Node, ObjKind};
use crate::status::ApiError;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// A path of FieldsV1 path elements (`f:name`, `k:{"name":"x"}`, `v:"x"`, `i:0`).
pub type Path = Vec<String>;
/// A field set: the paths a manager owns.
pub type FieldSet = BTreeSet<Path>;

/// Fields never tracked (stripped from both sides as kube-apiserver's fieldmanager does).
fn ignored_top(k: &str) -> bool {
    matches!(k, "apiVersion" | "kind")
}

fn ignored_meta(k: &str) -> bool {
    !matches!(k, "labels" | "annotations" | "ownerReferences" | "finalizers")
}

/// The default of a list-map key field the item leaves out. Kubernetes' only defaulted key is
/// `protocol` (ContainerPort, ServicePort: `TCP`); structured-merge-diff keys an item by its
/// defaulted key values
/// (<https://kubernetes.io/docs/reference/using-api/server-side-apply/#merge-strategy>).
fn key_default(k: &str) -> Option<Value> {
    (k == "protocol").then(|| json!("TCP"))
}

/// The value of key field `k` of a list-map item, defaulted when absent.
fn key_value(item: &Value, k: &str) -> Option<Value> {
    item.get(k).cloned().or_else(|| key_default(k))
}

/// Whether a list-map item has the key of a `k:` path element.
fn item_has_key(item: &Value, key: &Map<String, Value>) -> bool {
    key.iter().all(|(kk, kv)| key_value(item, kk).as_ref() == Some(kv))
}

/// Key element for an associative-list item: `k:{"name":"x"}` with keys sorted.
fn key_pe(item: &Value, keys: &[String]) -> String {
    let mut m = BTreeMap::new();
    for k in keys {
        if let Some(v) = key_value(item, k) {
            m.insert(k.clone(), v);
        }
    }
    format!("k:{}", serde_json::to_string(&m).unwrap_or_default())
}

#[derive(Clone, Copy)]
struct Mode {
    /// Mark granular maps with "." (Update semantics); apply marks only list items.
    mark_maps: bool,
    /// Custom resources: structs are marked like maps under Update.
    mark_structs: bool,
}

/// Flattens an object into its owned paths; `Some(v)` for leaves, `None` for markers (".").
fn flatten(
    v: &Value,
    node: Node<'_>,
    path: &mut Path,
    out: &mut BTreeMap<Path, Option<Value>>,
    mode: Mode,
) {
    match v {
        Value::Object(m) => {
            let kind = node.obj_kind();
            if kind == ObjKind::Atomic || m.is_empty() {
                if !path.is_empty() {
                    out.insert(path.clone(), Some(v.clone()));
                }
                return;
            }
            if !path.is_empty() && !path.last().is_some_and(|l| l.starts_with("k:")) {
                let mark = match kind {
                    ObjKind::Map => mode.mark_maps && (path.len() > 1 || path[0] != "f:metadata"),
                    ObjKind::Struct => mode.mark_structs && path[0] != "f:metadata",
                    ObjKind::Atomic => false,
                };
                if mark {
                    out.insert(path.clone(), None);
                }
            }
            for (k, c) in m {
                if path.is_empty() && ignored_top(k) {
                    continue;
                }
                if path.len() == 1 && path[0] == "f:metadata" && ignored_meta(k) {
                    continue;
                }
                path.push(format!("f:{k}"));
                flatten(c, node.prop(k), path, out, mode);
                path.pop();
            }
        }
        Value::Array(a) => match node.list_kind() {
            ListKind::Atomic => {
                out.insert(path.clone(), Some(v.clone()));
            }
            ListKind::Set => {
                if a.is_empty() {
                    out.insert(path.clone(), Some(v.clone()));
                }
                for item in a {
                    path.push(format!("v:{}", serde_json::to_string(item).unwrap_or_default()));
                    out.insert(path.clone(), Some(item.clone()));
                    path.pop();
                }
            }
            ListKind::Map(keys) => {
                if a.is_empty() {
                    out.insert(path.clone(), Some(v.clone()));
                }
                let inode = node.items();
                for item in a {
                    path.push(key_pe(item, &keys));
                    out.insert(path.clone(), None);
                    if let Value::Object(im) = item {
                        for (k, c) in im {
                            path.push(format!("f:{k}"));
                            flatten(c, inode.prop(k), path, out, mode);
                            path.pop();
                        }
                    }
                    path.pop();
                }
            }
        },
        _ => {
            out.insert(path.clone(), Some(v.clone()));
        }
    }
}

fn flat(v: &Value, node: Node<'_>, mode: Mode, skip_status: bool) -> BTreeMap<Path, Option<Value>> {
    let mut out = BTreeMap::new();
    let mut p = vec![];
    flatten(v, node, &mut p, &mut out, mode);
    if skip_status {
        out.retain(|k, _| k.first().map(String::as_str) != Some("f:status"));
    }
    out
}

/// The field set an apply configuration claims.
pub fn apply_set(applied: &Value, node: Node<'_>, status_only: bool) -> FieldSet {
    let f = flat(applied, node, Mode { mark_maps: false, mark_structs: false }, false);
    filter_sub(f.into_keys().collect(), status_only)
}

fn filter_sub(s: FieldSet, status_only: bool) -> FieldSet {
    s.into_iter()
        .filter(|p| (p.first().map(String::as_str) == Some("f:status")) == status_only)
        .collect()
}

/// (changed or added, removed) between two versions of an object, as an Update sees them.
pub fn update_diff(
    old: &Value,
    new: &Value,
    node: Node<'_>,
    custom: bool,
    status_only: bool,
) -> (FieldSet, FieldSet) {
    let mode = Mode { mark_maps: true, mark_structs: custom };
    let o = flat(old, node, mode, false);
    let n = flat(new, node, mode, false);
    let changed: FieldSet =
        n.iter().filter(|(p, v)| o.get(*p) != Some(*v)).map(|(p, _)| p.clone()).collect();
    let removed: FieldSet = o
        .keys()
        .filter(|p| !n.contains_key(*p) && !n.keys().any(|q| q.starts_with(p)))
        .cloned()
        .collect();
    (filter_sub(changed, status_only), filter_sub(removed, status_only))
}

/// Serialize a field set as FieldsV1 JSON.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for p in set {
        let mut cur = &mut root;
        for pe in p {
            let e = cur.entry(pe.clone()).or_insert_with(|| json!({}));
            cur = match e.as_object_mut() {
                Some(m) => m,
                None => break,
            };
        }
    }
    // A node that is itself a member and has children gets ".".
    fn mark(m: &mut Map<String, Value>, set: &FieldSet, path: &mut Path) {
        for (k, v) in m.iter_mut() {
            path.push(k.clone());
            if let Some(cm) = v.as_object_mut()
                && !cm.is_empty()
            {
                if set.contains(path) {
                    cm.insert(".".into(), json!({}));
                }
                mark(cm, set, path);
            }
            path.pop();
        }
    }
    let mut p = vec![];
    mark(&mut root, set, &mut p);
    Value::Object(root)
}

pub fn from_fields_v1(v: &Value) -> FieldSet {
    fn walk(v: &Value, path: &mut Path, out: &mut FieldSet) {
        let Some(m) = v.as_object() else { return };
        for (k, c) in m {
            if k == "." {
                out.insert(path.clone());
                continue;
            }
            path.push(k.clone());
            if c.as_object().is_some_and(|cm| cm.is_empty()) {
                out.insert(path.clone());
            } else {
                walk(c, path, out);
            }
            path.pop();
        }
    }
    let mut out = FieldSet::new();
    walk(v, &mut vec![], &mut out);
    out
}

/// `.spec.containers[name="nginx"].image`: structured-merge-diff's path string.
pub fn path_string(p: &Path) -> String {
    let mut s = String::new();
    for pe in p {
        if let Some(f) = pe.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = pe.strip_prefix("k:") {
            let m: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
            s.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = pe.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        } else if let Some(i) = pe.strip_prefix("i:") {
            s.push_str(&format!("[{i}]"));
        }
    }
    s
}

/// One managedFields entry, decoded.
#[derive(Debug, Clone)]
pub struct Entry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: String,
    pub set: FieldSet,
}

impl Entry {
    /// The identifier `printManager` prints: apply managers by name, update managers with their
    /// apiVersion (k8s.io/apiserver fieldmanager `BuildManagerIdentifier`).
    fn display(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s = format!("{s} with subresource {:?}", self.subresource);
        }
        if self.operation == "Update" {
            s = format!("{s} using {}", self.api_version);
        }
        s
    }

    fn same_identity(&self, manager: &str, operation: &str, api_version: &str, sub: &str) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource == sub
            && (operation == "Apply" || self.api_version == api_version)
    }
}

pub fn decode(obj: &Value) -> Vec<Entry> {
    let all =
        obj.pointer("/metadata/managedFields").and_then(Value::as_array).into_iter().flatten().map(
            |e| Entry {
                manager: e["manager"].as_str().unwrap_or_default().to_string(),
                operation: e["operation"].as_str().unwrap_or("Update").to_string(),
                api_version: e["apiVersion"].as_str().unwrap_or_default().to_string(),
                time: e["time"].as_str().map(str::to_string),
                subresource: e["subresource"].as_str().unwrap_or_default().to_string(),
                set: from_fields_v1(&e["fieldsV1"]),
            },
        );
    // One entry per manager identity (name, operation, subresource and, for updates, apiVersion):
    // a later duplicate replaces an earlier one, as kube-apiserver's decoding does.
    let mut out: Vec<Entry> = vec![];
    for e in all {
        out.retain(|o| !o.same_identity(&e.manager, &e.operation, &e.api_version, &e.subresource));
        out.push(e);
    }
    out
}

pub fn encode(entries: &mut Vec<Entry>) -> Value {
    entries.retain(|e| !e.set.is_empty());
    // kube-apiserver sorts Apply entries first, then by time, then by manager.
    entries.sort_by(|a, b| {
        (a.operation != "Apply", &a.time, &a.manager).cmp(&(
            b.operation != "Apply",
            &b.time,
            &b.manager,
        ))
    });
    Value::Array(
        entries
            .iter()
            .map(|e| {
                let mut m = json!({
                    "manager": e.manager,
                    "operation": e.operation,
                    "apiVersion": e.api_version,
                    "time": e.time,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": to_fields_v1(&e.set),
                });
                if !e.subresource.is_empty() {
                    m["subresource"] = json!(e.subresource);
                }
                m
            })
            .collect(),
    )
}

/// Context of a managed write.
#[derive(Debug, Clone)]
pub struct Who<'a> {
    pub manager: &'a str,
    pub api_version: &'a str,
    pub subresource: &'a str,
    pub now: &'a str,
    pub custom: bool,
}

/// Record an Update (create, update, any non-apply patch) in `new`'s managedFields.
pub fn record_update(old: Option<&Value>, new: &mut Value, node: Node<'_>, who: &Who<'_>) {
    let mut entries = old.map(decode).unwrap_or_default();
    // An existing object without managedFields (they were reset) stays untracked until the next
    // apply, which seeds `before-first-apply` (k8s.io/apiserver fieldmanager skipNonApplied).
    if old.is_some() && entries.is_empty() {
        set_entries(new, &mut entries);
        return;
    }
    let empty = json!({});
    let status_only = who.subresource == "status";
    let (changed, removed) = update_diff(old.unwrap_or(&empty), new, node, who.custom, status_only);
    if changed.is_empty() && removed.is_empty() {
        set_entries(new, &mut entries);
        return;
    }
    for e in entries.iter_mut() {
        e.set.retain(|p| !changed.contains(p) && !removed.contains(p));
    }
    match entries
        .iter_mut()
        .find(|e| e.same_identity(who.manager, "Update", who.api_version, who.subresource))
    {
        Some(e) => {
            e.set.extend(changed);
            e.time = Some(who.now.to_string());
        }
        None => entries.push(Entry {
            manager: who.manager.to_string(),
            operation: "Update".into(),
            api_version: who.api_version.to_string(),
            time: Some(who.now.to_string()),
            subresource: who.subresource.to_string(),
            set: changed,
        }),
    }
    // Drop the ownership of removed parents' children too.
    for e in entries.iter_mut() {
        e.set.retain(|p| !removed.iter().any(|r| p.starts_with(r)));
    }
    set_entries(new, &mut entries);
}

/// At most this many Update entries are kept (k8s.io/apiserver fieldmanager
/// `DefaultMaxUpdateManagers`); the oldest are merged into `ancient-changes`.
const MAX_UPDATE_MANAGERS: usize = 10;
const ANCIENT_CHANGES: &str = "ancient-changes";

/// Merge the oldest Update entries into one `ancient-changes` entry per apiVersion until at most
/// [`MAX_UPDATE_MANAGERS`] Update entries remain.
fn cap_updates(entries: &mut Vec<Entry>) {
    entries.retain(|e| !e.set.is_empty());
    let count = |es: &[Entry]| es.iter().filter(|e| e.operation == "Update").count();
    while count(entries) > MAX_UPDATE_MANAGERS {
        // Oldest first; a bucket itself is never merged away.
        let Some(i) = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.operation == "Update" && e.manager != ANCIENT_CHANGES)
            .min_by(|(ia, a), (ib, b)| (&a.time, ia).cmp(&(&b.time, ib)))
            .map(|(i, _)| i)
        else {
            return;
        };
        let old = entries.remove(i);
        match entries.iter_mut().find(|e| {
            e.manager == ANCIENT_CHANGES
                && e.operation == "Update"
                && e.api_version == old.api_version
        }) {
            Some(b) => {
                b.set.extend(old.set);
                if old.time > b.time {
                    b.time = old.time;
                }
            }
            None => entries.push(Entry {
                manager: ANCIENT_CHANGES.into(),
                operation: "Update".into(),
                api_version: old.api_version,
                time: old.time,
                subresource: String::new(),
                set: old.set,
            }),
        }
    }
}

fn set_entries(obj: &mut Value, entries: &mut Vec<Entry>) {
    cap_updates(entries);
    let enc = encode(entries);
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if enc.as_array().is_some_and(|a| a.is_empty()) {
            m.remove("managedFields");
        } else {
            m.insert("managedFields".into(), enc);
        }
    }
}

fn get_at<'v>(v: &'v Value, p: &[String]) -> Option<&'v Value> {
    let mut cur = v;
    for pe in p {
        cur = if let Some(f) = pe.strip_prefix("f:") {
            cur.get(f)?
        } else if let Some(k) = pe.strip_prefix("k:") {
            let key: Map<String, Value> = serde_json::from_str(k).ok()?;
            cur.as_array()?.iter().find(|it| item_has_key(it, &key))?
        } else if let Some(sv) = pe.strip_prefix("v:") {
            let val: Value = serde_json::from_str(sv).ok()?;
            cur.as_array()?.iter().find(|it| **it == val)?
        } else {
            return None;
        };
    }
    Some(cur)
}

fn remove_at(v: &mut Value, p: &[String]) {
    let Some((last, parent)) = p.split_last() else {
        return;
    };
    let mut cur = v;
    for pe in parent {
        let next = if let Some(f) = pe.strip_prefix("f:") {
            cur.get_mut(f)
        } else if let Some(k) = pe.strip_prefix("k:") {
            let Ok(key) = serde_json::from_str::<Map<String, Value>>(k) else {
                return;
            };
            cur.as_array_mut().and_then(|a| a.iter_mut().find(|it| item_has_key(it, &key)))
        } else {
            None
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let Some(f) = last.strip_prefix("f:") {
        if let Some(m) = cur.as_object_mut() {
            m.remove(f);
        }
    } else if let Some(k) = last.strip_prefix("k:") {
        if let (Ok(key), Some(a)) =
            (serde_json::from_str::<Map<String, Value>>(k), cur.as_array_mut())
        {
            a.retain(|it| !item_has_key(it, &key));
        }
    } else if let Some(sv) = last.strip_prefix("v:")
        && let (Ok(val), Some(a)) = (serde_json::from_str::<Value>(sv), cur.as_array_mut())
    {
        a.retain(|it| *it != val);
    }
}

/// Remove the item (or field) at `p`; a list left empty goes too (`omitempty` lists of the
/// built-in types are never stored empty).
fn remove_item_at(v: &mut Value, p: &[String]) {
    remove_at(v, p);
    let Some((last, parent)) = p.split_last() else { return };
    if (last.starts_with("k:") || last.starts_with("v:"))
        && get_at(v, parent).and_then(Value::as_array).is_some_and(|a| a.is_empty())
    {
        remove_at(v, parent);
    }
}

/// Merge an apply configuration into the live object following the schema's merge strategies.
pub fn merge(live: &Value, applied: &Value, node: Node<'_>) -> Value {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) if node.obj_kind() != ObjKind::Atomic => {
            let mut out = l.clone();
            for (k, av) in a {
                let merged = match l.get(k) {
                    Some(lv) => merge(lv, av, node.prop(k)),
                    None => av.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Value::Array(l), Value::Array(a)) => match node.list_kind() {
            ListKind::Atomic => applied.clone(),
            ListKind::Set => {
                let mut out = l.clone();
                for it in a {
                    if !out.contains(it) {
                        out.push(it.clone());
                    }
                }
                Value::Array(out)
            }
            ListKind::Map(keys) => {
                let inode = node.items();
                let mut out = l.clone();
                for it in a {
                    let k = key_pe(it, &keys);
                    match out.iter_mut().find(|x| key_pe(x, &keys) == k) {
                        Some(x) => *x = merge(x, it, inode),
                        None => out.push(it.clone()),
                    }
                }
                Value::Array(out)
            }
        },
        _ => applied.clone(),
    }
}

/// Server-side apply of `applied` by `who.manager` onto `live` (None: the object is created).
/// Returns the new object with its managedFields; `Err` is the 409 conflict Status.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    node: Node<'_>,
    who: &Who<'_>,
    force: bool,
    conflict_err: impl Fn(String, Vec<Value>) -> ApiError,
) -> Result<Value, ApiError> {
    let empty = json!({"metadata": {}});
    let live_v = live.unwrap_or(&empty);
    let mut entries = decode(live_v);
    let status_only = who.subresource == "status";
    // Objects without managedFields: kube-apiserver's skipNonApplied/before-first-apply manager owns
    // everything that exists before the first apply.
    if live.is_some() && entries.is_empty() {
        let (set, _) = update_diff(&json!({}), live_v, node, who.custom, status_only);
        entries.push(Entry {
            manager: "before-first-apply".into(),
            operation: "Update".into(),
            api_version: who.api_version.to_string(),
            time: Some(who.now.to_string()),
            subresource: who.subresource.to_string(),
            set,
        });
    }
    let new_set = apply_set(applied, node, status_only);
    let me = |e: &Entry| e.same_identity(who.manager, "Apply", who.api_version, who.subresource);
    let prev_set = entries.iter().find(|e| me(e)).map(|e| e.set.clone()).unwrap_or_default();

    let mut merged = merge(live_v, applied, node);
    // Conflicts: fields this apply changes that another manager owns.
    let mut conflicts: Vec<(String, Path)> = vec![];
    for e in entries.iter().filter(|e| !me(e)) {
        for p in new_set.intersection(&e.set) {
            // Only leaves conflict: a list item or map that has owned fields below it is a
            // marker ("."), whose ownership is shared.
            let is_parent = new_set.range(p.clone()..).nth(1).is_some_and(|q| q.starts_with(p));
            if is_parent {
                continue;
            }
            let before = get_at(live_v, p);
            let after = get_at(&merged, p);
            if before != after {
                conflicts.push((e.display(), p.clone()));
            }
        }
    }
    // Upgrading from client-side apply: for the "kubectl" manager, conflicts on fields whose live
    // value still equals the last-applied-configuration annotation are taken over, as
    // kube-apiserver's lastAppliedManager does
    // (https://kubernetes.io/docs/reference/using-api/server-side-apply/#upgrading-from-client-side-apply-to-server-side-apply).
    let mut force = force;
    if !conflicts.is_empty() && !force && who.manager == "kubectl" {
        let allowed = last_applied_allowed(live_v, node);
        if conflicts.iter().all(|(_, p)| allowed.contains(p)) {
            force = true;
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(&conflicts, &conflict_err));
    }
    for e in entries
        .iter_mut()
        .filter(|e| !e.same_identity(who.manager, "Apply", who.api_version, who.subresource))
    {
        if force {
            e.set.retain(|p| !conflicts.iter().any(|(_, c)| c == p));
        }
    }
    // Fields this manager stopped applying: removed unless someone else still owns them.
    let others: FieldSet =
        entries.iter().filter(|e| !me(e)).flat_map(|e| e.set.iter().cloned()).collect();
    let mut dropped: Vec<&Path> =
        prev_set.difference(&new_set).filter(|p| !others.contains(*p)).collect();
    // Shallowest first: removing a list item or map removes what is under it.
    dropped.sort_by_key(|p| p.len());
    let mut removed: Vec<&Path> = vec![];
    for p in dropped {
        // Still applied below: stays. A list item nobody else owns as an item goes whole, even
        // when another manager set fields inside it (structured-merge-diff removes the item, not
        // just the fields the applier owned, which would leave a keyless stub). Another field
        // still (partly) owned by someone else stays.
        let item = p.last().is_some_and(|l| l.starts_with("k:") || l.starts_with("v:"));
        if new_set.iter().any(|o| o.starts_with(p))
            || (!item && others.iter().any(|o| o.starts_with(p)))
        {
            continue;
        }
        if removed.iter().any(|r| p.starts_with(r)) {
            continue;
        }
        remove_item_at(&mut merged, p);
        removed.push(p);
    }
    // Nobody owns what is gone.
    if !removed.is_empty() {
        for e in entries.iter_mut().filter(|e| !me(e)) {
            e.set.retain(|q| !removed.iter().any(|r| q.starts_with(r)));
        }
    }
    match entries.iter_mut().find(|e| me(e)) {
        Some(e) => {
            e.set = new_set;
            e.time = Some(who.now.to_string());
            e.api_version = who.api_version.to_string();
        }
        None => entries.push(Entry {
            manager: who.manager.to_string(),
            operation: "Apply".into(),
            api_version: who.api_version.to_string(),
            time: Some(who.now.to_string()),
            subresource: who.subresource.to_string(),
            set: new_set,
        }),
    }
    set_entries(&mut merged, &mut entries);
    Ok(merged)
}

/// Fields of the live object that still hold the values of its last-applied-configuration.
fn last_applied_allowed(live: &Value, node: Node<'_>) -> FieldSet {
    let Some(la) = live
        .pointer("/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration")
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
    else {
        return FieldSet::new();
    };
    apply_set(&la, node, false).into_iter().filter(|p| get_at(live, p) == get_at(&la, p)).collect()
}

/// kube-apiserver's `NewConflictError` wording (k8s.io/apiserver fieldmanager/internal/conflict.go).
fn conflict_error(
    conflicts: &[(String, Path)],
    mk: &impl Fn(String, Vec<Value>) -> ApiError,
) -> ApiError {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(m, p)| json!({"reason": "FieldManagerConflict", "message": format!("conflict with {m}"), "field": path_string(p)}))
        .collect();
    let message = if conflicts.len() == 1 {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            conflicts[0].0,
            path_string(&conflicts[0].1)
        )
    } else {
        let mut by: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (m, p) in conflicts {
            by.entry(m.as_str()).or_default().push(path_string(p));
        }
        let mut lines = vec![];
        for (m, ps) in by {
            lines.push(format!("conflicts with {m}:"));
            for p in ps {
                lines.push(format!("- {p}"));
            }
        }
        format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
    };
    mk(message, causes)
}

/// Fields of an apply configuration its schema does not declare, as structured-merge-diff's
/// typed conversion names them (`.spec.replcas`,
/// `.spec.template.spec.containers[name="app"].imagePullPolcy`).
pub fn undeclared_fields(applied: &Value, node: Node<'_>) -> Vec<String> {
    fn walk(v: &Value, node: Node<'_>, path: &mut Path, out: &mut Vec<String>) {
        let Some(s) = node.s else { return };
        if s.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true) {
            return;
        }
        match v {
            Value::Object(m) => {
                let props = s.get("properties").and_then(Value::as_object);
                let addl = s
                    .get("additionalProperties")
                    .is_some_and(|a| a.is_object() || a == &Value::Bool(true));
                for (k, c) in m {
                    let top = path.is_empty() && ignored_top(k);
                    let known = props.is_some_and(|pp| pp.contains_key(k))
                        || addl
                        || top
                        || (path.is_empty() && node.root && k == "metadata");
                    path.push(format!("f:{k}"));
                    if !known && props.is_some() {
                        out.push(path_string(path));
                    } else if known && !top {
                        walk(c, node.prop(k), path, out);
                    }
                    path.pop();
                }
            }
            Value::Array(a) => {
                let inode = node.items();
                let kind = node.list_kind();
                for (i, it) in a.iter().enumerate() {
                    path.push(match &kind {
                        ListKind::Map(keys) => key_pe(it, keys),
                        _ => format!("i:{i}"),
                    });
                    walk(it, inode, path, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = vec![];
    walk(applied, node, &mut vec![], &mut out);
    out
}

/// Remove the fields the schema does not declare (what decoding into the built-in types drops).
pub fn drop_undeclared(obj: &mut Value, node: Node<'_>) {
    let Some(s) = node.s else { return };
    if s.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true) {
        return;
    }
    match obj {
        Value::Object(m) => {
            let props = s.get("properties").and_then(Value::as_object);
            let addl = s
                .get("additionalProperties")
                .is_some_and(|a| a.is_object() || a == &Value::Bool(true));
            if let Some(pp) = props
                && !addl
            {
                m.retain(|k, _| {
                    pp.contains_key(k) || (node.root && (k == "metadata" || ignored_top(k)))
                });
            }
            for (k, c) in m.iter_mut() {
                drop_undeclared(c, node.prop(k));
            }
        }
        Value::Array(a) => {
            let inode = node.items();
            for it in a {
                drop_undeclared(it, inode);
            }
        }
        _ => {}
    }
}

/// The JSON type name of the value at a dotted path (for CEL error messages).
pub fn path_value_type(obj: &Value, dotted: &str) -> &'static str {
    let mut cur = obj;
    for seg in dotted.split('.').filter(|s| !s.is_empty()) {
        match cur.get(seg) {
            Some(c) => cur = c,
            None => return "object",
        }
    }
    match cur {
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::Bool(_) => "boolean",
        Value::Null => "null",
    }
}

#[cfg(test)]
mod tests {
    use super::{Who, record_update};
    use crate::schema::Node;
    use serde_json::json;

    #[test]
    fn create_records_an_update_entry() {
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"app": "web"}}, "data": {"k": "v"}});
        let who = Who {
            manager: "kubectl-create",
            api_version: "v1",
            subresource: "",
            now: "2026-01-01T00:00:00Z",
            custom: false,
        };
        record_update(None, &mut obj, Node::builtin("", "v1", "ConfigMap"), &who);
        let mf = &obj["metadata"]["managedFields"][0];
        assert_eq!(mf["manager"], "kubectl-create", "{obj:#}");
        assert_eq!(
            mf["fieldsV1"],
            json!({"f:data": {".": {}, "f:k": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}})
        );
    }
}
