//! The plan: what a sync will change, computed before anything changes.
//!
//! For each desired object the apply layer makes a server-side dry-run apply (as the
//! Application's service account, under its field manager) and reads the live object; this
//! module compares the two and decides the action: `Create` when there is no live object,
//! `Update` with the paths of the fields that change, `Unchanged` otherwise. Prune adds `Delete`
//! for what it removes and `Unchanged` with a warning for what it keeps. Conflicts with other
//! field managers are listed per field; fields held only by `before-first-apply` (what a
//! client-side `kubectl apply` or a create left behind), or by managers that only ever updated
//! the object imperatively (drift, [`imperative_managers`]), are never conflicts.
//!
//! The plan never holds a value, only field paths: nothing in it can leak a Secret. Its digest is
//! `sha256:` and the hex digest of the desired-state hash and the full plan's canonical JSON, so
//! an approval binds to exactly this desired state and these changes. The Revision stores a
//! bounded summary ([`Plan::summary`]).

pub mod field_manager;
pub mod inventory;
pub mod order;
pub mod prune;
pub mod trim;

use std::collections::BTreeSet;

use kuvryn_sync_api::{AdoptedField, PlanAction, PlanChange, PlanSummary, ResourceRef};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::desired::ObjectKey;
use crate::prune::{ManagedObject, PrunePlan};

/// The manager Kubernetes records for fields set before server-side apply tracked them.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// The manager `kubectl apply` (client-side) records.
pub const KUBECTL_CLIENT_SIDE_APPLY: &str = "kubectl-client-side-apply";

/// Managers whose fields a sync takes over without counting a conflict: what existed before
/// server-side apply tracked the object, and what a client-side `kubectl apply` wrote (the
/// object was managed by hand from manifests; kubectl's own `--server-side` upgrade migrates
/// these two the same way). Any other manager is a real conflict.
pub const MIGRATED_MANAGERS: &[&str] = &[BEFORE_FIRST_APPLY, KUBECTL_CLIENT_SIDE_APPLY];

/// At most this many changes are stored in a Revision's summary.
pub const MAX_SUMMARY_CHANGES: usize = 100;

/// At most this many field paths are stored per change.
pub const MAX_FIELDS: usize = 20;

/// Fields the API server maintains: never a change of ours.
const SERVER_FIELDS: &[&str] = &[
    ".metadata.managedFields",
    ".metadata.resourceVersion",
    ".metadata.generation",
    ".metadata.uid",
    ".metadata.creationTimestamp",
    ".metadata.selfLink",
    ".status",
    // Server-side apply rewrites a client-side `kubectl apply`'s copy of the object from the
    // applied body on objects that carry it; the cached objects drop it (`trim`).
    ".metadata.annotations.kubectl.kubernetes.io/last-applied-configuration",
];

/// A field another manager holds, which the apply would take.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FieldConflict {
    /// The field path, such as `.spec.replicas`.
    pub field: String,
    /// The manager holding it.
    pub manager: String,
}

/// What the apply layer found out about one desired object.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    pub key: ObjectKey,
    /// The object's `apiVersion`.
    pub api_version: String,
    pub wave: i64,
    pub found: Found,
}

/// The live object and the dry-run result.
#[derive(Clone, Debug, PartialEq)]
pub enum Found {
    /// No live object: the apply creates it.
    Absent,
    /// A live object, and what it would be after the apply. `adopted` lists fields the apply takes
    /// from other managers (under `conflictPolicy: adopt`, from a dry run without force).
    Present { live: Value, dry_run: Value, adopted: Vec<FieldConflict> },
    /// The dry run (without force) was refused for these fields.
    Conflicts(Vec<FieldConflict>),
}

/// A whole plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Every change, in object order, deletions last.
    pub changes: Vec<PlanChange>,
    /// Objects whose apply conflicts with other managers, with the fields; empty under adopt.
    pub conflicts: Vec<(ObjectKey, Vec<FieldConflict>)>,
    /// See the module documentation.
    pub digest: String,
}

impl Plan {
    /// The objects the plan creates or updates.
    pub fn changed_keys(&self) -> BTreeSet<ObjectKey> {
        self.changes
            .iter()
            .filter(|c| matches!(c.action, PlanAction::Create | PlanAction::Update))
            .map(|c| ObjectKey {
                group_kind: crate::desired::GroupKind::new(
                    crate::desired::group_of(&c.resource.api_version),
                    &c.resource.kind,
                ),
                namespace: (!c.resource.namespace.is_empty()).then(|| c.resource.namespace.clone()),
                name: c.resource.name.clone(),
            })
            .collect()
    }

    /// The bounded summary a Revision stores.
    pub fn summary(&self) -> PlanSummary {
        let count =
            |action: PlanAction| self.changes.iter().filter(|c| c.action == action).count() as i64;
        PlanSummary {
            digest: self.digest.clone(),
            create: count(PlanAction::Create),
            update: count(PlanAction::Update),
            delete: count(PlanAction::Delete),
            unchanged: count(PlanAction::Unchanged),
            changes: self.changes.iter().take(MAX_SUMMARY_CHANGES).cloned().collect(),
            truncated: self.changes.len() > MAX_SUMMARY_CHANGES,
        }
    }
}

/// Conflicts that count: every field held by a manager not in [`MIGRATED_MANAGERS`].
pub fn real_conflicts(conflicts: &[FieldConflict]) -> Vec<FieldConflict> {
    let mut real: Vec<FieldConflict> = conflicts
        .iter()
        .filter(|c| !MIGRATED_MANAGERS.contains(&c.manager.as_str()))
        .cloned()
        .collect();
    real.sort();
    real.dedup();
    real
}

/// Managers that wrote `live` only imperatively: every managedFields entry of theirs has
/// operation `Update` (`kubectl edit`, `kubectl patch`, `kubectl create`, a controller's update).
/// Their fields are drift, not ownership claims: a sync takes them back without counting a
/// conflict. Only other appliers (operation `Apply`, such as another Application) conflict.
pub fn imperative_managers(live: &Value) -> BTreeSet<String> {
    let entries = live["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
    let appliers: BTreeSet<&str> = entries
        .iter()
        .filter(|e| e["operation"] == "Apply")
        .filter_map(|e| e["manager"].as_str())
        .collect();
    entries
        .iter()
        .filter(|e| e["operation"] == "Update")
        .filter_map(|e| e["manager"].as_str())
        .filter(|m| !appliers.contains(m))
        .map(str::to_owned)
        .collect()
}

/// What decides whether a server-side apply of `body` under `manager` changes `live`: the
/// object's identity (`uid`, and whether it is being deleted), the body, and the fields
/// `manager` holds by apply (each `Apply` entry's `apiVersion` and `fieldsV1`; not its `time`).
/// `None` when `manager` holds nothing by apply (never applied, or its fields were all taken).
///
/// Server-side apply moves a field out of a manager's set whenever another writer changes or
/// removes its value (an update takes it, a forced apply takes it, a delete drops it), and
/// status writes touch no manager's spec fields. So when an apply of `body` was found to change
/// nothing (or was just made), and later the fingerprint is the same, the fields `manager` sets
/// still hold the values `body` gives them: the same apply would again change nothing. Fields
/// held only by others may have changed; they are not ours, so they are not drift.
pub fn apply_fingerprint(live: &Value, body: &Value, manager: &str) -> Option<[u8; 32]> {
    let metadata = &live["metadata"];
    let uid = metadata["uid"].as_str()?;
    let held: Vec<&Value> = metadata["managedFields"]
        .as_array()?
        .iter()
        .filter(|e| e["manager"] == manager && e["operation"] == "Apply")
        .filter(|e| e["subresource"].as_str().is_none_or(str::is_empty))
        .collect();
    if held.is_empty() {
        return None;
    }
    let mut hasher = Sha256::new();
    let mut part = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    part(uid.as_bytes());
    part(&[u8::from(metadata["deletionTimestamp"].is_string())]);
    part(body.to_string().as_bytes());
    for entry in held {
        part(entry["apiVersion"].to_string().as_bytes());
        part(entry["fieldsV1"].to_string().as_bytes());
    }
    Some(hasher.finalize().into())
}

/// The conflicts that stop an apply without force: [`real_conflicts`] held by managers not in
/// `imperative` ([`imperative_managers`]).
pub fn blocking_conflicts(
    conflicts: &[FieldConflict],
    imperative: &BTreeSet<String>,
) -> Vec<FieldConflict> {
    real_conflicts(conflicts).into_iter().filter(|c| !imperative.contains(&c.manager)).collect()
}

/// The conflicts in the message of a server-side apply refused with 409 Conflict: one line
/// `Apply failed with 1 conflict: conflict with "MANAGER"[ using VERSION[ at TIME]]: FIELD`, or a
/// header followed by `conflicts with "MANAGER"…:` lines each followed by `- FIELD` lines. The
/// API server's Status also carries them as causes, but clients such as kube-rs keep only the
/// message, so it is read here (hand-written: no library parses it). Unparsable text gives none.
pub fn parse_conflict_message(message: &str) -> Vec<FieldConflict> {
    let mut found = Vec::new();
    let Some((_, body)) = message.split_once(": ") else { return found };
    if let Some(single) = body.strip_prefix("conflict with ") {
        if let Some((manager, rest)) = quoted_manager(single)
            && let Some((_, field)) = rest.rsplit_once(": ")
        {
            found.push(FieldConflict { field: field.trim().to_owned(), manager });
        }
        return found;
    }
    let mut manager: Option<String> = None;
    for line in body.lines() {
        if let Some(header) = line.trim().strip_prefix("conflicts with ") {
            manager = quoted_manager(header).map(|(m, _)| m);
        } else if let (Some(field), Some(manager)) = (line.trim().strip_prefix("- "), &manager) {
            found.push(FieldConflict { field: field.trim().to_owned(), manager: manager.clone() });
        }
    }
    found
}

/// A leading `"MANAGER"`, and what follows it.
fn quoted_manager(text: &str) -> Option<(String, &str)> {
    let rest = text.trim_start().strip_prefix('"')?;
    let end = rest.find('"')?;
    Some((rest[..end].to_owned(), &rest[end + 1..]))
}

/// Build the plan for `desired_hash` from the observations and the prune decision.
pub fn plan(desired_hash: &str, observations: &[Observation], prune: &PrunePlan) -> Plan {
    let mut changes = Vec::new();
    let mut conflicts = Vec::new();
    for observation in observations {
        let (action, fields, adopted) = match &observation.found {
            Found::Absent => (PlanAction::Create, Vec::new(), Vec::new()),
            Found::Present { live, dry_run, adopted } => {
                let fields = changed_fields(live, dry_run);
                let action =
                    if fields.is_empty() { PlanAction::Unchanged } else { PlanAction::Update };
                (action, fields, real_conflicts(adopted))
            }
            Found::Conflicts(found) => {
                let real = real_conflicts(found);
                let fields = real.iter().map(|c| c.field.clone()).collect();
                if !real.is_empty() {
                    conflicts.push((observation.key.clone(), real));
                }
                (PlanAction::Update, fields, Vec::new())
            }
        };
        changes.push(change(observation, action, fields, adopted, None));
    }
    for object in &prune.delete {
        changes.push(pruned(object, PlanAction::Delete, None));
    }
    for (object, reason) in &prune.keep {
        changes.push(pruned(object, PlanAction::Unchanged, Some(reason.to_string())));
    }
    let digest = digest(desired_hash, &changes);
    Plan { changes, conflicts, digest }
}

fn change(
    observation: &Observation,
    action: PlanAction,
    mut fields: Vec<String>,
    adopted: Vec<FieldConflict>,
    warning: Option<String>,
) -> PlanChange {
    fields.truncate(MAX_FIELDS);
    PlanChange {
        resource: resource_ref(&observation.key, &observation.api_version),
        action,
        wave: observation.wave.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
        fields,
        adopted: adopted
            .into_iter()
            .take(MAX_FIELDS)
            .map(|c| AdoptedField { field: c.field, previous_manager: c.manager })
            .collect(),
        warning,
    }
}

/// A change for a pruned object, or one prune keeps.
fn pruned(object: &ManagedObject, action: PlanAction, warning: Option<String>) -> PlanChange {
    PlanChange {
        resource: resource_ref(&object.key, &object.api_version),
        action,
        wave: 0,
        fields: Vec::new(),
        adopted: Vec::new(),
        warning,
    }
}

fn resource_ref(key: &ObjectKey, api_version: &str) -> ResourceRef {
    ResourceRef {
        api_version: api_version.to_owned(),
        kind: key.group_kind.kind.clone(),
        namespace: key.namespace.clone().unwrap_or_default(),
        name: key.name.clone(),
    }
}

/// The paths (`.spec.replicas`, `.data.password`, `.spec.ports[1]`) where `after` differs from
/// `before`, most specific first, sorted; fields the API server maintains are ignored. Lists are
/// compared by position.
pub fn changed_fields(before: &Value, after: &Value) -> Vec<String> {
    let mut paths = BTreeSet::new();
    diff(before, after, String::new(), &mut paths);
    paths.into_iter().collect()
}

fn diff(before: &Value, after: &Value, path: String, out: &mut BTreeSet<String>) {
    if SERVER_FIELDS.contains(&path.as_str()) || before == after {
        return;
    }
    match (before, after) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let child = format!("{path}.{key}");
                diff(
                    a.get(key).unwrap_or(&Value::Null),
                    b.get(key).unwrap_or(&Value::Null),
                    child,
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (n, (x, y)) in a.iter().zip(b).enumerate() {
                diff(x, y, format!("{path}[{n}]"), out);
            }
        }
        _ => {
            out.insert(if path.is_empty() { ".".to_owned() } else { path });
        }
    }
}

/// `sha256:<hex>` over the desired-state hash and the plan's canonical JSON.
fn digest(desired_hash: &str, changes: &[PlanChange]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(desired_hash.as_bytes());
    hasher.update(b"\n");
    // serde_json serialises struct fields in declaration order: stable for these types.
    let plan = serde_json::to_string(changes).unwrap_or_default();
    hasher.update(plan.as_bytes());
    let hex: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::GroupKind;
    use crate::prune::KeepReason;
    use serde_json::json;

    fn key(kind: &str, name: &str) -> ObjectKey {
        ObjectKey {
            group_kind: GroupKind::new("", kind),
            namespace: Some("web".into()),
            name: name.into(),
        }
    }

    fn observed(kind: &str, name: &str, found: Found) -> Observation {
        Observation { key: key(kind, name), api_version: "v1".into(), wave: 0, found }
    }

    fn managed(kind: &str, name: &str) -> ManagedObject {
        ManagedObject { key: key(kind, name), api_version: "v1".into(), prune_disabled: false }
    }

    #[test]
    fn apply_fingerprint_moves_only_with_what_an_apply_would_change() {
        let manager = "kuvryn-sync/web/site";
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"}});
        let entry = |manager: &str, operation: &str, fields: Value, time: &str| {
            json!({"manager": manager, "operation": operation, "apiVersion": "v1",
                   "time": time, "fieldsType": "FieldsV1", "fieldsV1": fields})
        };
        let ours = json!({"f:data": {"f:a": {}}});
        let live = |uid: &str, entries: Vec<Value>| {
            json!({"metadata": {"name": "site", "uid": uid, "resourceVersion": "7",
                                "managedFields": entries},
                   "data": {"a": "1"}})
        };
        let base = live("u1", vec![entry(manager, "Apply", ours.clone(), "t1")]);
        let print = |object: &Value, body: &Value| apply_fingerprint(object, body, manager);
        let before = print(&base, &body).expect("held by apply");
        let mut deleting = base.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-12-01T00:00:00Z");
        let mut status_written = base.clone();
        status_written["metadata"]["resourceVersion"] = json!("9");
        status_written["status"] = json!({"ready": true});
        let cases: Vec<(&str, Value, Value, Option<bool>)> = vec![
            ("status and resourceVersion moved", status_written, body.clone(), Some(true)),
            (
                "our entry's time moved",
                live("u1", vec![entry(manager, "Apply", ours.clone(), "t2")]),
                body.clone(),
                Some(true),
            ),
            (
                "another manager added a field",
                live(
                    "u1",
                    vec![
                        entry(manager, "Apply", ours.clone(), "t1"),
                        entry("kubectl-edit", "Update", json!({"f:data": {"f:b": {}}}), "t3"),
                    ],
                ),
                body.clone(),
                Some(true),
            ),
            (
                "an edit took one of our fields",
                live(
                    "u1",
                    vec![
                        entry(manager, "Apply", json!({"f:data": {}}), "t1"),
                        entry("kubectl-edit", "Update", ours.clone(), "t3"),
                    ],
                ),
                body.clone(),
                Some(false),
            ),
            (
                "deleted and created again",
                live("u2", vec![entry(manager, "Apply", ours.clone(), "t1")]),
                body.clone(),
                Some(false),
            ),
            ("being deleted", deleting, body.clone(), Some(false)),
            (
                "another body",
                base.clone(),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "2"}}),
                Some(false),
            ),
            (
                "we hold nothing by apply",
                live("u1", vec![entry(manager, "Update", ours.clone(), "t1")]),
                body.clone(),
                None,
            ),
            ("no managedFields", json!({"metadata": {"uid": "u1"}}), body.clone(), None),
        ];
        for (case, object, body, same) in cases {
            assert_eq!(print(&object, &body).map(|p| p == before), same, "{case}");
        }
    }

    fn conflict(field: &str, manager: &str) -> FieldConflict {
        FieldConflict { field: field.into(), manager: manager.into() }
    }

    #[test]
    fn changed_fields_name_paths_not_values_and_ignore_server_fields() {
        let live = json!({
            "metadata": {"name": "db", "resourceVersion": "5", "managedFields": [{"manager": "a"}],
                         "labels": {"a": "1"}},
            "data": {"password": "b2xk", "user": "YQ=="},
            "spec": {"ports": [{"port": 80}, {"port": 443}]},
            "status": {"phase": "Old"},
        });
        let after = json!({
            "metadata": {"name": "db", "resourceVersion": "6", "managedFields": [{"manager": "b"}],
                         "labels": {"a": "1", "b": "2"}},
            "data": {"password": "bmV3", "user": "YQ=="},
            "spec": {"ports": [{"port": 80}, {"port": 8443}]},
            "status": {"phase": "New"},
        });
        assert_eq!(
            changed_fields(&live, &after),
            vec![".data.password", ".metadata.labels.b", ".spec.ports[1].port"]
        );
        assert!(changed_fields(&live, &live).is_empty());
        // A list of another length changes as a whole.
        let two = json!({"spec": {"ports": [80, 443]}});
        let three = json!({"spec": {"ports": [80, 443, 9]}});
        assert_eq!(changed_fields(&two, &three), vec![".spec.ports"]);
    }

    #[test]
    fn actions_follow_what_was_found_and_prune_comes_last() {
        let same = json!({"data": {"a": "1"}});
        let observations = vec![
            observed("ConfigMap", "new", Found::Absent),
            observed(
                "ConfigMap",
                "same",
                Found::Present { live: same.clone(), dry_run: same.clone(), adopted: vec![] },
            ),
            observed(
                "ConfigMap",
                "changed",
                Found::Present {
                    live: same.clone(),
                    dry_run: json!({"data": {"a": "2"}}),
                    adopted: vec![
                        conflict(".data.a", "kubectl-edit"),
                        conflict(".data.b", BEFORE_FIRST_APPLY),
                    ],
                },
            ),
        ];
        let prune = PrunePlan {
            delete: vec![managed("ConfigMap", "old")],
            keep: vec![(managed("Secret", "db"), KeepReason::HighRisk)],
        };
        let plan = plan("sha256:desired", &observations, &prune);
        let rows: Vec<(&str, PlanAction, Vec<String>, bool)> = plan
            .changes
            .iter()
            .map(|c| (c.resource.name.as_str(), c.action, c.fields.clone(), c.warning.is_some()))
            .collect();
        assert_eq!(
            rows,
            vec![
                ("new", PlanAction::Create, vec![], false),
                ("same", PlanAction::Unchanged, vec![], false),
                ("changed", PlanAction::Update, vec![".data.a".to_owned()], false),
                ("old", PlanAction::Delete, vec![], false),
                ("db", PlanAction::Unchanged, vec![], true),
            ]
        );
        assert_eq!(
            plan.changes[2].adopted,
            vec![AdoptedField { field: ".data.a".into(), previous_manager: "kubectl-edit".into() }],
            "before-first-apply is taken without being listed"
        );
        assert!(plan.conflicts.is_empty());
        let summary = plan.summary();
        assert_eq!(
            (summary.create, summary.update, summary.delete, summary.unchanged),
            (1, 1, 1, 2)
        );
        assert!(!summary.truncated);
        assert_eq!(summary.digest, plan.digest);
    }

    #[test]
    fn conflicts_name_field_and_manager_and_migrated_managers_are_never_one() {
        let observations = vec![
            observed(
                "ConfigMap",
                "shared",
                Found::Conflicts(vec![
                    conflict(".data.a", "kuvryn-sync/team/other"),
                    conflict(".data.b", BEFORE_FIRST_APPLY),
                ]),
            ),
            observed(
                "ConfigMap",
                "legacy",
                Found::Conflicts(vec![conflict(".data.x", BEFORE_FIRST_APPLY)]),
            ),
            observed(
                "ConfigMap",
                "by-hand",
                Found::Conflicts(vec![conflict(".data.y", KUBECTL_CLIENT_SIDE_APPLY)]),
            ),
        ];
        let plan = plan("h", &observations, &PrunePlan::default());
        assert_eq!(
            plan.conflicts,
            vec![(key("ConfigMap", "shared"), vec![conflict(".data.a", "kuvryn-sync/team/other")])]
        );
    }

    #[test]
    fn the_digest_binds_desired_state_and_every_change() {
        let absent = vec![observed("ConfigMap", "a", Found::Absent)];
        let base = plan("sha256:one", &absent, &PrunePlan::default()).digest;
        assert_eq!(base, plan("sha256:one", &absent, &PrunePlan::default()).digest, "stable");
        assert_ne!(base, plan("sha256:two", &absent, &PrunePlan::default()).digest);
        let pruning = PrunePlan { delete: vec![managed("ConfigMap", "b")], keep: vec![] };
        assert_ne!(base, plan("sha256:one", &absent, &pruning).digest);
        assert!(base.starts_with("sha256:") && base.len() == 71, "{base}");
    }

    #[test]
    fn conflict_messages_of_the_api_server_are_read() {
        let cases: Vec<(&str, Vec<FieldConflict>)> = vec![
            (
                "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using v1: .data.a",
                vec![conflict(".data.a", "kubectl-edit")],
            ),
            (
                "Apply failed with 1 conflict: conflict with \"kuvryn-sync/team/other\": .spec.replicas",
                vec![conflict(".spec.replicas", "kuvryn-sync/team/other")],
            ),
            (
                "Apply failed with 1 conflict: conflict with \"kubectl\" using apps/v1 at \
                 2026-01-02T03:04:05Z: .spec.template.spec.containers[name=\"app\"].image",
                vec![conflict(".spec.template.spec.containers[name=\"app\"].image", "kubectl")],
            ),
            (
                "Apply failed with 3 conflicts: conflicts with \"a\" using apps/v1:\n- .spec.replicas\n\
                 - .spec.paused\nconflicts with \"b\":\n- .metadata.labels.tier",
                vec![
                    conflict(".spec.replicas", "a"),
                    conflict(".spec.paused", "a"),
                    conflict(".metadata.labels.tier", "b"),
                ],
            ),
            ("the server is on fire", vec![]),
            ("Operation cannot be fulfilled: the object has been modified", vec![]),
        ];
        for (message, expected) in cases {
            assert_eq!(parse_conflict_message(message), expected, "{message}");
        }
    }

    #[test]
    fn the_summary_is_bounded_and_counts_everything() {
        let observations: Vec<Observation> =
            (0..150).map(|n| observed("ConfigMap", &format!("c{n}"), Found::Absent)).collect();
        let summary = plan("h", &observations, &PrunePlan::default()).summary();
        assert_eq!(summary.create, 150);
        assert_eq!(summary.changes.len(), MAX_SUMMARY_CHANGES);
        assert!(summary.truncated);
    }

    #[test]
    fn imperative_writers_are_drift_and_appliers_conflict() {
        let live = json!({"metadata": {"managedFields": [
            {"manager": "kuvryn-sync/team/a", "operation": "Apply"},
            {"manager": "kubectl-edit", "operation": "Update"},
            {"manager": "hpa-controller", "operation": "Update"},
            {"manager": "mixed", "operation": "Update"},
            {"manager": "mixed", "operation": "Apply", "subresource": "status"},
        ]}});
        let imperative = imperative_managers(&live);
        assert_eq!(imperative, ["hpa-controller", "kubectl-edit"].map(String::from).into());
        assert!(imperative_managers(&json!({})).is_empty());
        let conflict = |field: &str, manager: &str| FieldConflict {
            field: field.into(),
            manager: manager.into(),
        };
        let conflicts = vec![
            conflict(".data.a", "kubectl-edit"),
            conflict(".data.b", "kuvryn-sync/team/a"),
            conflict(".data.c", "before-first-apply"),
            conflict(".data.d", "mixed"),
        ];
        assert_eq!(
            blocking_conflicts(&conflicts, &imperative),
            vec![conflict(".data.b", "kuvryn-sync/team/a"), conflict(".data.d", "mixed")]
        );
    }
}
