//! Which managed objects a sync prunes, and which it keeps and why.
//!
//! An object is a prune candidate when it carries the Application's labels, is of a kind in
//! `status.managedKinds`, and desired state no longer declares it. Candidates of a high-risk kind
//! (Namespace, CustomResourceDefinition, PersistentVolumeClaim, PersistentVolume, Secret) and
//! those annotated `sync.kuvryn.io/prune: disabled` are kept: the plan lists them as Unchanged
//! with a warning saying why, and one `PruneSkipped` Event per attempt names up to
//! [`MAX_NAMED`] of them. They keep our labels, so they stay in the inventory. The caller never
//! calls this after a failed render or source step, and reports `PruneInventoryIncomplete`
//! instead when it could not list a managed kind (what cannot be seen is never pruned).

use std::collections::BTreeSet;
use std::fmt;

use crate::desired::{GroupKind, ObjectKey};
use crate::order::sort_for_deletion;

/// Kinds a sync never prunes.
pub const HIGH_RISK_KINDS: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("", "PersistentVolumeClaim"),
    ("", "PersistentVolume"),
    ("", "Secret"),
];

/// How many kept objects a `PruneSkipped` Event names.
pub const MAX_NAMED: usize = 5;

/// A live object carrying the Application's labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagedObject {
    pub key: ObjectKey,
    /// Its `apiVersion`, as listed.
    pub api_version: String,
    /// Whether it is annotated `sync.kuvryn.io/prune: disabled`.
    pub prune_disabled: bool,
}

/// Why a candidate is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepReason {
    /// Its kind is in [`HIGH_RISK_KINDS`].
    HighRisk,
    /// It is annotated `sync.kuvryn.io/prune: disabled`.
    PruneDisabled,
}

impl fmt::Display for KeepReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeepReason::HighRisk => {
                "not pruned: its kind is high-risk and is never pruned during a sync; delete it \
                 by hand once it is no longer needed"
            }
            KeepReason::PruneDisabled => {
                "not pruned: it is annotated sync.kuvryn.io/prune: disabled; delete it by hand \
                 once it is no longer needed"
            }
        })
    }
}

/// What a sync prunes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrunePlan {
    /// To delete, in deletion order.
    pub delete: Vec<ManagedObject>,
    /// Kept, with the reason, sorted by key.
    pub keep: Vec<(ManagedObject, KeepReason)>,
}

impl PrunePlan {
    /// The `PruneSkipped` Event message, or `None` when nothing was kept.
    pub fn skipped_message(&self) -> Option<String> {
        if self.keep.is_empty() {
            return None;
        }
        let named: Vec<String> =
            self.keep.iter().take(MAX_NAMED).map(|(object, _)| object.key.to_string()).collect();
        let more = self.keep.len().saturating_sub(MAX_NAMED);
        let tail = if more > 0 { format!(" and {more} more") } else { String::new() };
        Some(format!(
            "kept {} object(s) removed from desired state: {}{tail}",
            self.keep.len(),
            named.join(", ")
        ))
    }
}

/// Whether a sync never prunes objects of `group_kind`.
pub fn is_high_risk(group_kind: &GroupKind) -> bool {
    HIGH_RISK_KINDS.iter().any(|(g, k)| *g == group_kind.group && *k == group_kind.kind)
}

/// Decide what to prune from the live `managed` objects, given the `desired` keys and the kinds
/// in `status.managedKinds`.
pub fn plan_prune(
    desired: &BTreeSet<ObjectKey>,
    managed_kinds: &BTreeSet<GroupKind>,
    managed: &[ManagedObject],
) -> PrunePlan {
    let mut delete = Vec::new();
    let mut keep = Vec::new();
    for object in managed {
        if desired.contains(&object.key) || !managed_kinds.contains(&object.key.group_kind) {
            continue;
        }
        if is_high_risk(&object.key.group_kind) {
            keep.push((object.clone(), KeepReason::HighRisk));
        } else if object.prune_disabled {
            keep.push((object.clone(), KeepReason::PruneDisabled));
        } else {
            delete.push(object.clone());
        }
    }
    keep.sort_by(|a, b| a.0.key.cmp(&b.0.key));
    sort_for_deletion(&mut delete, |object| &object.key);
    PrunePlan { delete, keep }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(group: &str, kind: &str, name: &str) -> ObjectKey {
        ObjectKey { group_kind: GroupKind::new(group, kind), namespace: None, name: name.into() }
    }

    fn managed(group: &str, kind: &str, name: &str, prune_disabled: bool) -> ManagedObject {
        let api_version = if group.is_empty() { "v1".to_owned() } else { format!("{group}/v1") };
        ManagedObject { key: key(group, kind, name), api_version, prune_disabled }
    }

    fn kinds(list: &[(&str, &str)]) -> BTreeSet<GroupKind> {
        list.iter().map(|(g, k)| GroupKind::new(g, k)).collect()
    }

    #[test]
    fn prune_deletes_what_desired_state_dropped_and_keeps_what_it_must() {
        let all_kinds = kinds(&[
            ("", "ConfigMap"),
            ("apps", "Deployment"),
            ("", "Secret"),
            ("", "Namespace"),
            ("", "PersistentVolumeClaim"),
            ("", "PersistentVolume"),
            ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ]);
        // (live object, still desired, expected: Some(keep reason) | None = delete | skip)
        type Row = (ManagedObject, bool, &'static str);
        let rows: Vec<Row> = vec![
            (managed("", "ConfigMap", "kept-in-git", false), true, "untouched"),
            (managed("", "ConfigMap", "removed", false), false, "delete"),
            (managed("apps", "Deployment", "removed", false), false, "delete"),
            (managed("", "ConfigMap", "pinned", true), false, "keep: disabled"),
            (managed("", "Secret", "db", false), false, "keep: high-risk"),
            (managed("", "Namespace", "web", false), false, "keep: high-risk"),
            (managed("", "PersistentVolumeClaim", "data", false), false, "keep: high-risk"),
            (managed("", "PersistentVolume", "pv", false), false, "keep: high-risk"),
            (
                managed("apiextensions.k8s.io", "CustomResourceDefinition", "w", false),
                false,
                "keep: high-risk",
            ),
            // A kind missing from managedKinds is not pruned (the inventory is the authority).
            (managed("batch", "Job", "unlisted", false), false, "untouched"),
        ];
        let desired: BTreeSet<ObjectKey> =
            rows.iter().filter(|(_, desired, _)| *desired).map(|(m, _, _)| m.key.clone()).collect();
        let live: Vec<ManagedObject> = rows.iter().map(|(m, _, _)| m.clone()).collect();
        let plan = plan_prune(&desired, &all_kinds, &live);
        for (object, _, expected) in &rows {
            let deleted = plan.delete.iter().any(|d| d.key == object.key);
            let kept = plan.keep.iter().find(|(k, _)| k.key == object.key).map(|(_, r)| *r);
            let found = match (deleted, kept) {
                (true, None) => "delete",
                (false, Some(KeepReason::HighRisk)) => "keep: high-risk",
                (false, Some(KeepReason::PruneDisabled)) => "keep: disabled",
                (false, None) => "untouched",
                (true, Some(_)) => "both",
            };
            assert_eq!(found, *expected, "{}", object.key);
        }
        // Deletion order: workloads before configuration.
        assert_eq!(
            plan.delete.iter().map(|d| d.key.group_kind.kind.as_str()).collect::<Vec<_>>(),
            vec!["Deployment", "ConfigMap"]
        );
    }

    #[test]
    fn the_event_names_at_most_five_and_counts_the_rest() {
        let keep: Vec<(ManagedObject, KeepReason)> = (0..7)
            .map(|n| (managed("", "Secret", &format!("s{n}"), false), KeepReason::HighRisk))
            .collect();
        let plan = PrunePlan { delete: vec![], keep };
        let message = plan.skipped_message().expect("a message");
        assert_eq!(
            message,
            "kept 7 object(s) removed from desired state: Secret s0, Secret s1, Secret s2, \
             Secret s3, Secret s4 and 2 more"
        );
        assert_eq!(PrunePlan::default().skipped_message(), None);
    }

    #[test]
    fn keep_reasons_say_why_and_what_to_do() {
        assert!(KeepReason::HighRisk.to_string().contains("high-risk"));
        assert!(KeepReason::PruneDisabled.to_string().contains("sync.kuvryn.io/prune: disabled"));
        for reason in [KeepReason::HighRisk, KeepReason::PruneDisabled] {
            assert!(reason.to_string().contains("delete it by hand"), "{reason}");
        }
    }
}
