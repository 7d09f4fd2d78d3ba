//! Desired state: from the objects a render produced to the normalised, validated set an
//! Application applies, and its fingerprint (`desiredStateHash`).
//!
//! Rules (a violation is `ValidationFailure`; every violation is reported at once and nothing is
//! applied):
//! - every object has `apiVersion`, `kind` and `metadata.name`;
//! - a namespaced object without a namespace gets the Application's destination namespace; one
//!   naming another namespace is refused (Git may not write outside the destination);
//! - a cluster-scoped object keeps no namespace. Scope comes from the API server's discovery,
//!   except for kinds defined by a CustomResourceDefinition rendered alongside: those take the
//!   rendered CRD's scope (the kind may not exist yet when the plan is made). A kind neither
//!   serves nor defines is refused;
//! - no two objects share group, kind, namespace and name;
//! - `sync.kuvryn.io/hook` is `pre-sync`, `post-sync` or `skip` (a `skip` object is left out of
//!   desired state entirely); `sync.kuvryn.io/sync-wave` is an integer (default 0);
//! - our labels (`sync.kuvryn.io/application`, `sync.kuvryn.io/application-namespace`) are set on
//!   every object, replacing whatever the manifest said. The `sync.kuvryn.io/revision` annotation
//!   is added per Revision by [`DesiredObject::for_revision`], after hashing, since the Revision's
//!   name derives from the hash.
//!
//! The hash is `sha256:` and the hex digest of the objects' canonical JSON (keys sorted at every
//! level), sorted by object identity: the same objects in any file or key order hash the same.

use std::collections::BTreeMap;
use std::fmt;

use kuvryn_sync_api::{FailureReason, keys};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// An object as a renderer produced it, with where it came from (for messages).
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// Where the object came from, such as `apps/web/deploy.yaml#2`.
    pub origin: String,
    /// The object.
    pub object: Value,
}

/// A kind, by API group (empty for the core group) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKind {
    pub group: String,
    pub kind: String,
}

impl GroupKind {
    /// A kind of `group` (empty for the core group).
    pub fn new(group: &str, kind: &str) -> Self {
        Self { group: group.to_owned(), kind: kind.to_owned() }
    }
}

impl fmt::Display for GroupKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.kind)
        } else {
            write!(f, "{}.{}", self.kind, self.group)
        }
    }
}

/// Whether objects of a kind live in a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Namespaced,
    Cluster,
}

/// One object's identity: group, kind, namespace (none when cluster-scoped) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub group_kind: GroupKind,
    pub namespace: Option<String>,
    pub name: String,
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{} {namespace}/{}", self.group_kind, self.name),
            None => write!(f, "{} {}", self.group_kind, self.name),
        }
    }
}

/// When in a rollout an object is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// A `pre-sync` hook: applied, and Healthy, before anything else.
    PreSync,
    /// The Application's resources.
    Main,
    /// A `post-sync` hook: applied once every wave is Healthy.
    PostSync,
}

/// A normalised desired object.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredObject {
    pub key: ObjectKey,
    pub stage: Stage,
    /// The sync wave (`sync.kuvryn.io/sync-wave`, default 0).
    pub wave: i64,
    /// The object with its namespace and our labels set.
    pub object: Value,
}

impl DesiredObject {
    /// The object as Revision `revision` applies it: with the `sync.kuvryn.io/revision`
    /// annotation.
    pub fn for_revision(&self, revision: &str) -> Value {
        let mut object = self.object.clone();
        metadata_map(&mut object, "annotations")
            .insert(keys::REVISION.to_owned(), Value::String(revision.to_owned()));
        object
    }
}

/// The validated desired state of one Application.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredState {
    /// Sorted by [`ObjectKey`].
    pub objects: Vec<DesiredObject>,
    /// `sha256:<hex>` over the objects; see the module documentation.
    pub hash: String,
}

/// The Application the objects are for.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// The Application's name.
    pub application: &'a str,
    /// The Application's namespace.
    pub application_namespace: &'a str,
    /// `spec.destination.namespace`.
    pub destination_namespace: &'a str,
}

/// One reason the desired state is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DesiredError {
    #[error("{origin}: not an object (every document must be a Kubernetes object)")]
    NotAnObject { origin: String },
    #[error("{origin}: {field} is required")]
    MissingField { origin: String, field: &'static str },
    #[error(
        "{origin}: {key} names namespace {namespace:?}, but this Application deploys only to \
         {destination:?} (spec.destination.namespace); remove metadata.namespace or change it"
    )]
    ForeignNamespace { origin: String, key: ObjectKey, namespace: String, destination: String },
    #[error("{origin}: {key} is declared twice (first in {first})")]
    Duplicate { origin: String, key: ObjectKey, first: String },
    #[error(
        "{origin}: {key} has {annotation}: {value:?}; allowed values are pre-sync, post-sync and \
         skip",
        annotation = keys::HOOK
    )]
    UnknownHook { origin: String, key: ObjectKey, value: String },
    #[error(
        "{origin}: {key} has {annotation}: {value:?}; a sync wave is an integer such as -1, 0 or 5",
        annotation = keys::SYNC_WAVE
    )]
    InvalidWave { origin: String, key: ObjectKey, value: String },
    #[error(
        "{origin}: kind {group_kind} is not served by the API server and no \
         CustomResourceDefinition in this Application defines it"
    )]
    UnknownKind { origin: String, group_kind: GroupKind },
}

/// Every reason the desired state is refused (never empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub errors: Vec<DesiredError>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let messages: Vec<String> = self.errors.iter().map(ToString::to_string).collect();
        write!(f, "desired state refused: {}", messages.join("; "))
    }
}

impl std::error::Error for Refusal {}

impl Refusal {
    /// The failure reason: `PlanFailure` when every error is a kind the API server does not
    /// serve (the plan cannot be built, though each object is valid), else `ValidationFailure`.
    pub fn reason(&self) -> FailureReason {
        let unserved = |e: &DesiredError| matches!(e, DesiredError::UnknownKind { .. });
        if self.errors.iter().all(unserved) {
            FailureReason::PlanFailure
        } else {
            FailureReason::ValidationFailure
        }
    }
}

/// Normalise and validate `rendered` for `target`. `served` tells the scope of a kind the API
/// server serves (from discovery), `None` for one it does not serve.
pub fn normalise(
    rendered: &[Rendered],
    served: impl Fn(&GroupKind) -> Option<Scope>,
    target: Target<'_>,
) -> Result<DesiredState, Refusal> {
    let defined = scopes_defined_by_crds(rendered);
    let scope_of = |gk: &GroupKind| defined.get(gk).copied().or_else(|| served(gk));
    let mut errors = Vec::new();
    let mut seen: BTreeMap<ObjectKey, String> = BTreeMap::new();
    let mut objects = Vec::new();
    for item in rendered {
        match normalise_one(item, &scope_of, target) {
            Ok(None) => {}
            Ok(Some(object)) => match seen.get(&object.key) {
                Some(first) => errors.push(DesiredError::Duplicate {
                    origin: item.origin.clone(),
                    key: object.key.clone(),
                    first: first.clone(),
                }),
                None => {
                    seen.insert(object.key.clone(), item.origin.clone());
                    objects.push(object);
                }
            },
            Err(mut found) => errors.append(&mut found),
        }
    }
    if !errors.is_empty() {
        return Err(Refusal { errors });
    }
    objects.sort_by(|a, b| a.key.cmp(&b.key));
    let hash = fingerprint(&objects);
    Ok(DesiredState { objects, hash })
}

/// Normalise one object; `None` for a `skip` hook.
fn normalise_one(
    item: &Rendered,
    scope_of: &impl Fn(&GroupKind) -> Option<Scope>,
    target: Target<'_>,
) -> Result<Option<DesiredObject>, Vec<DesiredError>> {
    let origin = &item.origin;
    if !item.object.is_object() {
        return Err(vec![DesiredError::NotAnObject { origin: origin.clone() }]);
    }
    let mut object = item.object.clone();
    let api_version = required_str(&object, &["apiVersion"], origin, "apiVersion")?;
    let kind = required_str(&object, &["kind"], origin, "kind")?;
    let name = required_str(&object, &["metadata", "name"], origin, "metadata.name")?;
    let group_kind = GroupKind::new(group_of(&api_version), &kind);
    let Some(scope) = scope_of(&group_kind) else {
        return Err(vec![DesiredError::UnknownKind { origin: origin.clone(), group_kind }]);
    };
    let written = object["metadata"]["namespace"].as_str().filter(|ns| !ns.is_empty());
    let namespace = match scope {
        Scope::Cluster => None,
        Scope::Namespaced => Some(written.unwrap_or(target.destination_namespace).to_owned()),
    };
    let key = ObjectKey { group_kind, namespace: namespace.clone(), name };
    let mut errors = Vec::new();
    if let (Scope::Namespaced, Some(written)) = (scope, written)
        && written != target.destination_namespace
    {
        errors.push(DesiredError::ForeignNamespace {
            origin: origin.clone(),
            key: key.clone(),
            namespace: written.to_owned(),
            destination: target.destination_namespace.to_owned(),
        });
    }
    let annotation =
        |name: &str| object["metadata"]["annotations"][name].as_str().map(str::to_owned);
    let stage = match annotation(keys::HOOK).as_deref() {
        None => Some(Stage::Main),
        Some(keys::HOOK_PRE_SYNC) => Some(Stage::PreSync),
        Some(keys::HOOK_POST_SYNC) => Some(Stage::PostSync),
        Some(keys::HOOK_SKIP) => None,
        Some(other) => {
            let value = other.to_owned();
            errors.push(DesiredError::UnknownHook {
                origin: origin.clone(),
                key: key.clone(),
                value,
            });
            None
        }
    };
    let wave = match annotation(keys::SYNC_WAVE) {
        None => 0,
        Some(text) => text.trim().parse::<i64>().unwrap_or_else(|_| {
            errors.push(DesiredError::InvalidWave {
                origin: origin.clone(),
                key: key.clone(),
                value: text,
            });
            0
        }),
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    let Some(stage) = stage else { return Ok(None) };
    set_namespace(&mut object, namespace.as_deref());
    let labels = metadata_map(&mut object, "labels");
    labels.insert(keys::APPLICATION.to_owned(), Value::String(target.application.to_owned()));
    labels.insert(
        keys::APPLICATION_NAMESPACE.to_owned(),
        Value::String(target.application_namespace.to_owned()),
    );
    Ok(Some(DesiredObject { key, stage, wave, object }))
}

/// The kinds the CustomResourceDefinitions among `objects` define: their custom resources may be
/// planned before the API server serves them.
pub fn kinds_defined_by(objects: &[DesiredObject]) -> std::collections::BTreeSet<GroupKind> {
    objects
        .iter()
        .filter(|o| {
            o.key.group_kind == GroupKind::new("apiextensions.k8s.io", "CustomResourceDefinition")
        })
        .filter_map(|crd| {
            let group = crd.object["spec"]["group"].as_str()?;
            let kind = crd.object["spec"]["names"]["kind"].as_str()?;
            Some(GroupKind::new(group, kind))
        })
        .collect()
}

/// The scopes of kinds defined by CustomResourceDefinitions among `rendered`.
fn scopes_defined_by_crds(rendered: &[Rendered]) -> BTreeMap<GroupKind, Scope> {
    rendered
        .iter()
        .map(|item| &item.object)
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .filter(|o| o["apiVersion"].as_str().is_some_and(|v| group_of(v) == "apiextensions.k8s.io"))
        .filter_map(|crd| {
            let group = crd["spec"]["group"].as_str()?;
            let kind = crd["spec"]["names"]["kind"].as_str()?;
            let scope = match crd["spec"]["scope"].as_str()? {
                "Cluster" => Scope::Cluster,
                _ => Scope::Namespaced,
            };
            Some((GroupKind::new(group, kind), scope))
        })
        .collect()
}

/// The API group of an `apiVersion` (`apps/v1` → `apps`, `v1` → the core group, empty).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

fn required_str(
    object: &Value,
    path: &[&str],
    origin: &str,
    field: &'static str,
) -> Result<String, Vec<DesiredError>> {
    path.iter()
        .try_fold(object, |value, key| value.get(key))
        .and_then(Value::as_str)
        .filter(|text| !text.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| vec![DesiredError::MissingField { origin: origin.to_owned(), field }])
}

fn set_namespace(object: &mut Value, namespace: Option<&str>) {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    match namespace {
        Some(namespace) => {
            metadata.insert("namespace".to_owned(), Value::String(namespace.to_owned()));
        }
        None => {
            metadata.remove("namespace");
        }
    }
}

/// `metadata.<field>` as a map, created (or replaced, when it is not a map) as needed.
fn metadata_map<'a>(object: &'a mut Value, field: &str) -> &'a mut Map<String, Value> {
    let metadata = object
        .as_object_mut()
        .map(|o| o.entry("metadata").or_insert_with(|| Value::Object(Map::new())))
        .expect("normalised objects are JSON objects");
    if !metadata.is_object() {
        *metadata = Value::Object(Map::new());
    }
    let map = metadata
        .as_object_mut()
        .expect("metadata is an object")
        .entry(field)
        .or_insert_with(|| Value::Object(Map::new()));
    if !map.is_object() {
        *map = Value::Object(Map::new());
    }
    map.as_object_mut().expect("a map")
}

/// `sha256:<hex>` over the canonical JSON of `objects` (already sorted by key).
fn fingerprint(objects: &[DesiredObject]) -> String {
    let mut hasher = Sha256::new();
    for object in objects {
        let mut text = String::new();
        canonical_json(&object.object, &mut text);
        hasher.update(text.as_bytes());
        hasher.update(b"\n");
    }
    let digest = hasher.finalize();
    let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("sha256:{hex}")
}

/// JSON with object keys sorted at every level, whatever map order serde_json was built with.
pub(crate) fn canonical_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (n, (key, value)) in entries.into_iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical_json(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                canonical_json(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests;
