//! Navigation over OpenAPI schemas: Kubernetes' own built-in definitions (shipped as data, see
//! `data/PROVENANCE.md`) and CRD `openAPIV3Schema`s. Server-side apply uses the
//! `x-kubernetes-list-type`, `x-kubernetes-list-map-keys` and `x-kubernetes-map-type` extensions
//! exactly as kube-apiserver does (<https://kubernetes.io/docs/reference/using-api/server-side-apply/#merge-strategy>).

use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::OnceLock;

static DEFS_JSON: &str = include_str!("../data/k8s-v1.33-definitions.json");

pub struct Defs {
    pub defs: Map<String, Value>,
    /// (group, version, kind) -> definition name.
    pub by_gvk: HashMap<(String, String, String), String>,
}

impl std::fmt::Debug for Defs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Defs({} definitions)", self.defs.len())
    }
}

pub fn defs() -> &'static Defs {
    static D: OnceLock<Defs> = OnceLock::new();
    D.get_or_init(|| {
        let v: Value = serde_json::from_str(DEFS_JSON).unwrap_or_default();
        let defs = v.get("$defs").and_then(Value::as_object).cloned().unwrap_or_default();
        let mut by_gvk = HashMap::new();
        for (name, d) in &defs {
            for gvk in d["x-kubernetes-group-version-kind"].as_array().into_iter().flatten() {
                let g = gvk["group"].as_str().unwrap_or_default().to_string();
                let ver = gvk["version"].as_str().unwrap_or_default().to_string();
                let k = gvk["kind"].as_str().unwrap_or_default().to_string();
                by_gvk.entry((g, ver, k)).or_insert_with(|| name.clone());
            }
        }
        Defs { defs, by_gvk }
    })
}

pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// How an object node merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjKind {
    Struct,
    Map,
    Atomic,
}

/// How a list merges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListKind {
    Atomic,
    Set,
    Map(Vec<String>),
}

/// A position in a schema; `None` means no schema is known (deduced: granular maps, atomic lists).
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    pub s: Option<&'a Value>,
    /// At the root of a custom resource: `metadata` uses ObjectMeta.
    pub root: bool,
}

fn lookup_ref(r: &str) -> Option<&'static Value> {
    let name = r.rsplit('/').next()?;
    defs().defs.get(name)
}

impl<'a> Node<'a> {
    /// The root node of a built-in kind.
    pub fn builtin(group: &str, version: &str, kind: &str) -> Node<'static> {
        let d = defs();
        match d.by_gvk.get(&(group.to_string(), version.to_string(), kind.to_string())) {
            Some(n) => Node { s: d.defs.get(n), root: true },
            None => Node { s: None, root: true },
        }
    }

    fn resolve(self) -> Self {
        let Some(mut s) = self.s else { return self };
        for _ in 0..8 {
            if let Some(r) = s.get("$ref").and_then(Value::as_str) {
                match lookup_ref(r) {
                    Some(t) => s = t,
                    None => return Node { s: None, ..self },
                }
            } else if let Some(first) =
                s.get("allOf").and_then(Value::as_array).and_then(|a| a.first())
            {
                if first.get("$ref").is_some() && s.get("properties").is_none() {
                    s = first;
                } else {
                    break;
                }
            } else {
                break;
            }
        }
        Node { s: Some(s), root: self.root }
    }

    pub fn prop(self, k: &str) -> Node<'a> {
        if self.root && k == "metadata" {
            return Node { s: defs().defs.get(OBJECT_META), root: false };
        }
        let Some(s) = self.s else {
            return Node { s: None, root: false };
        };
        if let Some(p) = s.get("properties").and_then(|p| p.get(k)) {
            return Node { s: Some(p), root: false }.resolve();
        }
        match s.get("additionalProperties") {
            Some(a) if a.is_object() => Node { s: Some(a), root: false }.resolve(),
            _ => Node { s: None, root: false },
        }
    }

    pub fn items(self) -> Node<'a> {
        match self.s.and_then(|s| s.get("items")) {
            Some(i) => Node { s: Some(i), root: false }.resolve(),
            None => Node { s: None, root: false },
        }
    }

    pub fn obj_kind(self) -> ObjKind {
        let Some(s) = self.s else { return ObjKind::Map };
        if s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic") {
            return ObjKind::Atomic;
        }
        if s.get("properties").is_some() {
            return ObjKind::Struct;
        }
        if s.get("additionalProperties").is_some_and(|a| a.is_object() || a == &Value::Bool(true)) {
            return ObjKind::Map;
        }
        ObjKind::Struct
    }

    pub fn list_kind(self) -> ListKind {
        let Some(s) = self.s else {
            return ListKind::Atomic;
        };
        match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("map") => ListKind::Map(
                s["x-kubernetes-list-map-keys"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|k| k.as_str().map(str::to_string)).collect())
                    .unwrap_or_default(),
            ),
            Some("set") => ListKind::Set,
            _ => ListKind::Atomic,
        }
    }

    /// `x-kubernetes-patch-merge-key` for strategic merge patch.
    pub fn patch_merge_key(self) -> Option<&'a str> {
        self.s?.get("x-kubernetes-patch-merge-key")?.as_str()
    }

    pub fn patch_strategy(self) -> Option<&'a str> {
        self.s?.get("x-kubernetes-patch-strategy")?.as_str()
    }
}
