//! The order a rollout applies objects in, and the order a deletion removes them in.
//!
//! Applying goes by stage (pre-sync hooks, the Application's resources, post-sync hooks), then by
//! sync wave ascending, then by kind in [`KIND_ORDER`]: CustomResourceDefinitions and Namespaces
//! first (a CRD must be Established before its custom resources can be applied, a Namespace
//! exist before what lives in it), then what others refer to (accounts, Secrets, ConfigMaps,
//! storage, RBAC), then Services, then workloads, then what routes to them; kinds not in the list
//! (custom resources and anything else) come last, by group and kind. Within a kind, objects go by
//! namespace and name. Each (stage, wave) is an [`ApplyGroup`] that must be Healthy before the
//! next starts. Deleting goes in exactly the reverse order.

use crate::desired::{DesiredObject, GroupKind, ObjectKey, Stage};

/// Built-in kinds in apply order, by (group, kind).
pub const KIND_ORDER: &[(&str, &str)] = &[
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("", "Namespace"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("", "ResourceQuota"),
    ("", "LimitRange"),
    ("policy", "PodDisruptionBudget"),
    ("", "ServiceAccount"),
    ("", "Secret"),
    ("", "ConfigMap"),
    ("storage.k8s.io", "StorageClass"),
    ("", "PersistentVolume"),
    ("", "PersistentVolumeClaim"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("", "Service"),
    ("apps", "DaemonSet"),
    ("", "Pod"),
    ("", "ReplicationController"),
    ("apps", "ReplicaSet"),
    ("apps", "Deployment"),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("apps", "StatefulSet"),
    ("batch", "Job"),
    ("batch", "CronJob"),
    ("networking.k8s.io", "IngressClass"),
    ("networking.k8s.io", "Ingress"),
    ("apiregistration.k8s.io", "APIService"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
];

/// Objects applied together: one stage and wave, in kind order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyGroup {
    pub stage: Stage,
    pub wave: i64,
    pub objects: Vec<ObjectKey>,
}

/// The position of a kind in [`KIND_ORDER`]; kinds not listed sort after every listed one.
pub fn kind_rank(group_kind: &GroupKind) -> usize {
    KIND_ORDER
        .iter()
        .position(|(group, kind)| *group == group_kind.group && *kind == group_kind.kind)
        .unwrap_or(KIND_ORDER.len())
}

/// The sort key of an object within a group.
fn apply_key(key: &ObjectKey) -> (usize, &GroupKind, &Option<String>, &str) {
    (kind_rank(&key.group_kind), &key.group_kind, &key.namespace, &key.name)
}

/// The groups a rollout applies, in order.
pub fn apply_groups(objects: &[DesiredObject]) -> Vec<ApplyGroup> {
    let mut sorted: Vec<&DesiredObject> = objects.iter().collect();
    sorted.sort_by(|a, b| {
        (a.stage, a.wave, apply_key(&a.key)).cmp(&(b.stage, b.wave, apply_key(&b.key)))
    });
    let mut groups: Vec<ApplyGroup> = Vec::new();
    for object in sorted {
        match groups.last_mut() {
            Some(group) if group.stage == object.stage && group.wave == object.wave => {
                group.objects.push(object.key.clone());
            }
            _ => groups.push(ApplyGroup {
                stage: object.stage,
                wave: object.wave,
                objects: vec![object.key.clone()],
            }),
        }
    }
    groups
}

/// `keys` in the order a deletion removes them: the reverse of the kind order (custom resources
/// before their CRDs, workloads before the Secrets they mount, Namespaces last).
pub fn delete_order(keys: &[ObjectKey]) -> Vec<ObjectKey> {
    let mut sorted = keys.to_vec();
    sort_for_deletion(&mut sorted, |key| key);
    sorted
}

/// Sort `items` into deletion order by the object key each one has.
pub fn sort_for_deletion<T>(items: &mut [T], key: impl Fn(&T) -> &ObjectKey) {
    items.sort_by(|a, b| apply_key(key(b)).cmp(&apply_key(key(a))));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn key(group: &str, kind: &str, name: &str) -> ObjectKey {
        ObjectKey {
            group_kind: GroupKind::new(group, kind),
            namespace: Some("web".into()),
            name: name.into(),
        }
    }

    fn object(group: &str, kind: &str, name: &str, stage: Stage, wave: i64) -> DesiredObject {
        DesiredObject { key: key(group, kind, name), stage, wave, object: Value::Null }
    }

    fn names(keys: &[ObjectKey]) -> Vec<String> {
        keys.iter().map(|k| format!("{}/{}", k.group_kind.kind, k.name)).collect()
    }

    #[test]
    fn groups_go_by_stage_then_wave_then_kind() {
        let objects = vec![
            object("apps", "Deployment", "api", Stage::Main, 0),
            object("example.com", "Widget", "w", Stage::Main, 0),
            object("", "ConfigMap", "settings", Stage::Main, 0),
            object("apiextensions.k8s.io", "CustomResourceDefinition", "widgets", Stage::Main, 0),
            object("", "Namespace", "web", Stage::Main, 0),
            object("batch", "Job", "smoke", Stage::PostSync, 0),
            object("batch", "Job", "migrate", Stage::PreSync, 0),
            object("", "Service", "late", Stage::Main, 2),
            object("", "Secret", "early", Stage::Main, -1),
            object("apps", "Deployment", "alpha", Stage::Main, 0),
        ];
        let groups: Vec<(Stage, i64, Vec<String>)> = apply_groups(&objects)
            .into_iter()
            .map(|g| (g.stage, g.wave, names(&g.objects)))
            .collect();
        let expect = |stage, wave, list: &[&str]| {
            (stage, wave, list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
        };
        assert_eq!(
            groups,
            vec![
                expect(Stage::PreSync, 0, &["Job/migrate"]),
                expect(Stage::Main, -1, &["Secret/early"]),
                expect(
                    Stage::Main,
                    0,
                    &[
                        "CustomResourceDefinition/widgets",
                        "Namespace/web",
                        "ConfigMap/settings",
                        "Deployment/alpha",
                        "Deployment/api",
                        "Widget/w",
                    ]
                ),
                expect(Stage::Main, 2, &["Service/late"]),
                expect(Stage::PostSync, 0, &["Job/smoke"]),
            ]
        );
    }

    #[test]
    fn deletion_reverses_the_kind_order() {
        let keys = vec![
            key("", "Namespace", "web"),
            key("apiextensions.k8s.io", "CustomResourceDefinition", "widgets"),
            key("example.com", "Widget", "w"),
            key("", "Secret", "db"),
            key("apps", "Deployment", "api"),
        ];
        assert_eq!(
            names(&delete_order(&keys)),
            vec![
                "Widget/w",
                "Deployment/api",
                "Secret/db",
                "Namespace/web",
                "CustomResourceDefinition/widgets"
            ]
        );
    }

    #[test]
    fn unlisted_kinds_rank_after_every_listed_one() {
        let last = kind_rank(&GroupKind::new(
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration",
        ));
        assert!(kind_rank(&GroupKind::new("example.com", "Widget")) > last);
        assert_eq!(
            kind_rank(&GroupKind::new("apiextensions.k8s.io", "CustomResourceDefinition")),
            0
        );
        assert_eq!(kind_rank(&GroupKind::new("", "Namespace")), 1);
    }
}
