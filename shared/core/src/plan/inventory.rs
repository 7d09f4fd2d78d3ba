//! The inventory: which kinds an Application manages (`status.managedKinds`), recorded before
//! objects of a new kind are applied, so that a crash between the apply and the status write
//! loses nothing — the next reconcile still lists, watches and prunes that kind. A kind leaves
//! the inventory only once no live object of it carries the Application's labels, so kept
//! high-risk objects keep their kind listed.
//!
//! Also the identity a sync acts as: `spec.serviceAccountName`, else the controller's default,
//! else nothing (never the controller's own identity).

use std::collections::BTreeSet;

use kuvryn_sync_api::ManagedKind;

use crate::desired::{DesiredObject, GroupKind, Scope, group_of};

/// The kinds to record before applying `desired`: the current ones plus every desired kind.
/// `None` when the current inventory already holds them all (no status write needed first).
pub fn kinds_before_apply(
    current: &[ManagedKind],
    desired: &[DesiredObject],
) -> Option<Vec<ManagedKind>> {
    let mut kinds: BTreeSet<ManagedKind> = current.iter().cloned().collect();
    let before = kinds.len();
    kinds.extend(desired.iter().map(managed_kind));
    (kinds.len() != before).then(|| kinds.into_iter().collect())
}

/// The kinds to keep after a sync: desired kinds, and recorded kinds that still have live objects
/// carrying the Application's labels (`live_kinds`, after pruning).
pub fn kinds_after_sync(
    current: &[ManagedKind],
    desired: &[DesiredObject],
    live_kinds: &BTreeSet<GroupKind>,
) -> Vec<ManagedKind> {
    let mut kinds: BTreeSet<ManagedKind> = desired.iter().map(managed_kind).collect();
    kinds.extend(
        current
            .iter()
            .filter(|k| live_kinds.contains(&GroupKind::new(group_of(&k.api_version), &k.kind)))
            .cloned(),
    );
    kinds.into_iter().collect()
}

/// The inventory entry of a desired object's kind.
pub fn managed_kind(object: &DesiredObject) -> ManagedKind {
    ManagedKind {
        api_version: object.object["apiVersion"].as_str().unwrap_or_default().to_owned(),
        kind: object.key.group_kind.kind.clone(),
        namespaced: object.key.namespace.is_some(),
    }
}

/// The scope recorded for a kind.
pub fn scope_of(kind: &ManagedKind) -> Scope {
    if kind.namespaced { Scope::Namespaced } else { Scope::Cluster }
}

/// The service account a sync acts as: the Application's, else the controller's default; `None`
/// means `ServiceAccountRequired`. Empty names count as unset.
pub fn service_account<'a>(
    application: Option<&'a str>,
    controller_default: Option<&'a str>,
) -> Option<&'a str> {
    application.filter(|n| !n.is_empty()).or(controller_default.filter(|n| !n.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::{ObjectKey, Stage};
    use serde_json::json;

    fn object(api_version: &str, kind: &str, namespaced: bool) -> DesiredObject {
        DesiredObject {
            key: ObjectKey {
                group_kind: GroupKind::new(group_of(api_version), kind),
                namespace: namespaced.then(|| "web".to_owned()),
                name: "x".into(),
            },
            stage: Stage::Main,
            wave: 0,
            object: json!({"apiVersion": api_version, "kind": kind}),
        }
    }

    fn kind(api_version: &str, kind: &str, namespaced: bool) -> ManagedKind {
        ManagedKind { api_version: api_version.into(), kind: kind.into(), namespaced }
    }

    #[test]
    fn new_kinds_are_recorded_before_the_apply_and_known_ones_need_no_write() {
        let current = vec![kind("v1", "ConfigMap", true)];
        let desired = vec![object("v1", "ConfigMap", true), object("apps/v1", "Deployment", true)];
        assert_eq!(
            kinds_before_apply(&current, &desired),
            Some(vec![kind("apps/v1", "Deployment", true), kind("v1", "ConfigMap", true)])
        );
        assert_eq!(kinds_before_apply(&current, &[object("v1", "ConfigMap", true)]), None);
        // Dropping a kind from desired state does not remove it before the apply: prune needs it.
        assert_eq!(kinds_before_apply(&current, &[]), None);
    }

    #[test]
    fn a_kind_leaves_the_inventory_only_when_nothing_of_it_is_left() {
        let current = vec![
            kind("v1", "ConfigMap", true),
            kind("v1", "Secret", true),
            kind("batch/v1", "Job", true),
        ];
        let desired = vec![object("v1", "ConfigMap", true)];
        // A Secret removed from Git was kept (high-risk), so its kind stays; every Job was pruned.
        let live: BTreeSet<GroupKind> =
            [GroupKind::new("", "ConfigMap"), GroupKind::new("", "Secret")].into();
        assert_eq!(
            kinds_after_sync(&current, &desired, &live),
            vec![kind("v1", "ConfigMap", true), kind("v1", "Secret", true)]
        );
        assert_eq!(scope_of(&kind("v1", "Namespace", false)), Scope::Cluster);
    }

    #[test]
    fn the_identity_is_the_applications_then_the_default_never_none_silently() {
        let cases = [
            (Some("deployer"), Some("fallback"), Some("deployer")),
            (None, Some("fallback"), Some("fallback")),
            (Some(""), Some("fallback"), Some("fallback")),
            (None, None, None),
            (Some(""), Some(""), None),
        ];
        for (application, default, expected) in cases {
            assert_eq!(service_account(application, default), expected, "{application:?}");
        }
    }
}
