//! `ksync tree APP`: the Application's managed objects as a tree, each with its kind, name,
//! health, sync state and a diagnosis marker, and below the workloads the objects they own
//! (ReplicaSets, Pods) found by owner references.
//!
//! The managed objects are found the way the controller's inventory finds them: every kind in
//! `status.managedKinds`, listed with the Application's labels. Health is judged by the
//! controller's rules (`kuvryn_sync_core::health`): a hook by the hook rule, any other object by
//! the cluster's HealthChecks for its kind, then kstatus. Sync state per object comes from the newest Revision's plan:
//! while that Revision is not applied yet (phase before Observing), an object it creates,
//! updates or deletes is `OutOfSync` (a create is listed though nothing is live yet, marked
//! `Missing`), and every other object is `Synced`. The marker is `!` with the diagnosis reason for
//! a root cause in `status.diagnosis`, and `>` with it for a resource on the chain leading to one.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{ApiResource, pinned_kind};
use kuvryn_sync_api::{
    Application, Diagnosis, HealthCheck, HealthCheckSpec, PlanAction, ResourceRef, Revision,
    RevisionPhase, keys,
};
use kuvryn_sync_core::health::{live_stage, object_health};
use kuvryn_sync_core::health_rules::RuleSet;
use kuvryn_sync_core::redact::redact_shapes;
use serde::Serialize;
use serde_json::Value;

use crate::Outcome;
use crate::cluster::Cluster;
use crate::output::{self, Format, OutputArgs};

/// `ksync tree` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct TreeArgs {
    /// The Application.
    pub app: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// One object of the tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// Healthy, Progressing, Degraded, Suspended, Unknown; `-` for an object not live.
    pub health: String,
    /// Synced, OutOfSync, Missing; `-` for objects the Application does not manage itself.
    pub sync: String,
    /// `! Reason` (a root cause), `> Reason` (on a chain to one), or empty.
    pub marker: String,
    /// The objects it owns.
    pub children: Vec<Node>,
    #[serde(skip)]
    uid: String,
}

/// Per object key (apiVersion-less: kind, namespace, name), the newest Revision's pending action.
pub fn pending_actions(
    newest: Option<&Revision>,
) -> BTreeMap<(String, String, String), PlanAction> {
    let Some(revision) = newest else { return BTreeMap::new() };
    let status = revision.status.clone().unwrap_or_default();
    let applied = matches!(status.phase, Some(RevisionPhase::Observing | RevisionPhase::Healthy));
    if applied {
        return BTreeMap::new();
    }
    let Some(plan) = status.plan else { return BTreeMap::new() };
    plan.changes
        .into_iter()
        .filter(|c| c.action != PlanAction::Unchanged)
        .map(|c| ((c.resource.kind, c.resource.namespace, c.resource.name), c.action))
        .collect()
}

/// The marker of the object `(kind, namespace, name)` given the diagnosis.
pub fn marker(diagnosis: &[Diagnosis], kind: &str, namespace: &str, name: &str) -> String {
    let is = |r: &ResourceRef| r.kind == kind && r.name == name && r.namespace == namespace;
    if let Some(d) = diagnosis.iter().find(|d| is(&d.resource)) {
        return format!("! {}", d.reason);
    }
    diagnosis
        .iter()
        .find(|d| d.chain.iter().any(is))
        .map_or_else(String::new, |d| format!("> {}", d.reason))
}

/// How `ksync tree` judges health: the controller's rules (`core::health`) with the cluster's
/// HealthChecks, at one instant.
pub struct Judge {
    pub rules: RuleSet,
    pub now: Time,
}

impl Judge {
    /// The health of `live` as the controller judges it: the hook rule for a hook (by its
    /// annotation), the HealthCheck rules for its kind, then kstatus.
    pub fn health(&self, live: &Value) -> String {
        object_health(&self.rules, live_stage(live), live, &self.now).0.to_string()
    }
}

/// The cluster's HealthChecks compiled; when they cannot be listed (RBAC, no CRD), no rules, and
/// a note on stderr saying health follows the status conventions only.
async fn judge(cluster: &Cluster) -> Judge {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let checks =
        match Api::<HealthCheck>::all(cluster.client.clone()).list(&Default::default()).await {
            Ok(list) => list.items,
            Err(err) => {
                eprintln!(
                    "note: cannot list HealthChecks ({}); health shown by the Kubernetes status \
                 conventions only",
                    redact_shapes(&err.to_string())
                );
                Vec::new()
            }
        };
    let named: Vec<(String, &HealthCheckSpec)> =
        checks.iter().map(|c| (c.metadata.name.clone().unwrap_or_default(), &c.spec)).collect();
    Judge { rules: RuleSet::new(named.iter().map(|(name, spec)| (name.as_str(), *spec))), now }
}

fn node_of(object: &Value, judge: &Judge) -> Node {
    let meta = &object["metadata"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    Node {
        api_version: text(&object["apiVersion"]),
        kind: text(&object["kind"]),
        namespace: text(&meta["namespace"]),
        name: text(&meta["name"]),
        health: judge.health(object),
        sync: "-".into(),
        marker: String::new(),
        children: Vec::new(),
        uid: text(&meta["uid"]),
    }
}

/// Hang each of `owned` under the node (in `nodes`, recursively) whose uid its owner reference
/// names; returns what found no owner.
pub fn adopt(nodes: &mut [Node], owned: Vec<(String, Node)>) -> Vec<(String, Node)> {
    let mut left = owned;
    for node in nodes.iter_mut() {
        let (mine, rest): (Vec<_>, Vec<_>) =
            left.into_iter().partition(|(owner, _)| *owner == node.uid);
        left = rest;
        node.children.extend(mine.into_iter().map(|(_, child)| child));
        node.children.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
        left = adopt(&mut node.children, left);
    }
    left
}

/// The tree drawn with box characters, one object a line, columns aligned.
pub fn draw(root: &str, nodes: &[Node]) -> String {
    let mut lines: Vec<(String, &Node)> = Vec::new();
    fn walk<'a>(nodes: &'a [Node], prefix: &str, lines: &mut Vec<(String, &'a Node)>) {
        for (i, node) in nodes.iter().enumerate() {
            let last = i + 1 == nodes.len();
            let branch = if last { "└── " } else { "├── " };
            let label = format!("{prefix}{branch}{} {}", node.kind, node.name);
            lines.push((label, node));
            let deeper = format!("{prefix}{}", if last { "    " } else { "│   " });
            walk(&node.children, &deeper, lines);
        }
    }
    walk(nodes, "", &mut lines);
    let width = lines.iter().map(|(l, _)| l.chars().count()).max().unwrap_or(0).max(4);
    let mut out = format!("{root}\n");
    for (label, node) in &lines {
        let pad = " ".repeat(width - label.chars().count());
        let line = format!("{label}{pad}   {:<11} {:<9} {}", node.health, node.sync, node.marker);
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Run `ksync tree`.
pub async fn run(cluster: &Cluster, args: &TreeArgs) -> Result<Outcome> {
    let app = cluster.application(&args.app).await?;
    let revisions = cluster.revisions(&args.app).await?;
    let pending = pending_actions(revisions.first());
    let judge = judge(cluster).await;
    let mut nodes = managed(cluster, &app, &judge).await?;
    let status = app.status.clone().unwrap_or_default();
    for node in &mut nodes {
        let key = (node.kind.clone(), node.namespace.clone(), node.name.clone());
        node.sync = match pending.get(&key) {
            Some(_) => "OutOfSync".into(),
            None => "Synced".into(),
        };
    }
    for ((kind, namespace, name), action) in &pending {
        let live =
            nodes.iter().any(|n| &n.kind == kind && &n.namespace == namespace && &n.name == name);
        if *action == PlanAction::Create && !live {
            nodes.push(Node {
                api_version: String::new(),
                kind: kind.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
                health: "-".into(),
                sync: "Missing".into(),
                marker: String::new(),
                children: Vec::new(),
                uid: String::new(),
            });
        }
    }
    nodes.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    let owned = owned_objects(cluster, &app.spec.destination.namespace, &judge).await;
    adopt(&mut nodes, owned);
    mark(&mut nodes, &status.diagnosis);
    match args.output.format {
        Some(Format::Name) | Some(Format::Wide) => {
            Err(crate::Refused("`tree` prints a tree or -o json|yaml".into()).into())
        }
        Some(format) => output::print(&output::structured(format, &nodes)?).map(|()| Outcome::Done),
        None => {
            let root = format!(
                "Application {}/{}   {} {}",
                cluster.namespace, args.app, status.health.state, status.sync.state
            );
            output::print(&draw(&root, &nodes))?;
            Ok(Outcome::Done)
        }
    }
}

fn mark(nodes: &mut [Node], diagnosis: &[Diagnosis]) {
    for node in nodes {
        node.marker = marker(diagnosis, &node.kind, &node.namespace, &node.name);
        mark(&mut node.children, diagnosis);
    }
}

/// The Application's live objects, one labelled list per managed kind.
async fn managed(cluster: &Cluster, app: &Application, judge: &Judge) -> Result<Vec<Node>> {
    let status = app.status.clone().unwrap_or_default();
    let selector = format!("{}={}", keys::APPLICATION, args_name(app));
    let mut nodes = Vec::new();
    for kind in &status.managed_kinds {
        let (group, version) = match kind.api_version.split_once('/') {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (String::new(), kind.api_version.clone()),
        };
        let gvk = kube::api::GroupVersionKind::gvk(&group, &version, &kind.kind);
        let (resource, _) = pinned_kind(&cluster.client, &gvk).await.with_context(|| {
            format!("cannot find {} {} on the API server", kind.api_version, kind.kind)
        })?;
        let api: Api<DynamicObject> = if kind.namespaced {
            Api::namespaced_with(cluster.client.clone(), &app.spec.destination.namespace, &resource)
        } else {
            Api::all_with(cluster.client.clone(), &resource)
        };
        let listed = api
            .list(&ListParams::default().labels(&selector))
            .await
            .with_context(|| format!("cannot list {} of the Application", resource.plural))?;
        for object in listed.items {
            let mut value = serde_json::to_value(&object)?;
            complete_type(&mut value, &resource);
            let namespace_label = value["metadata"]["labels"][keys::APPLICATION_NAMESPACE].as_str();
            if namespace_label.is_some_and(|ns| Some(ns) != app.metadata.namespace.as_deref()) {
                continue; // another namespace's Application of the same name
            }
            nodes.push(node_of(&value, judge));
        }
    }
    Ok(nodes)
}

fn args_name(app: &Application) -> String {
    app.metadata.name.clone().unwrap_or_default()
}

/// A listed object's `apiVersion` and `kind`, which list items may leave out.
fn complete_type(value: &mut Value, resource: &ApiResource) {
    value["apiVersion"] = Value::String(resource.api_version.clone());
    value["kind"] = Value::String(resource.kind.clone());
}

/// ReplicaSets and Pods of `namespace` with the uid of their controlling owner; what the user may
/// not list is left out.
async fn owned_objects(cluster: &Cluster, namespace: &str, judge: &Judge) -> Vec<(String, Node)> {
    let kinds = [("apps", "v1", "ReplicaSet"), ("", "v1", "Pod")];
    let mut owned = Vec::new();
    for (group, version, kind) in kinds {
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        let Ok((resource, _)) = pinned_kind(&cluster.client, &gvk).await else { continue };
        let api: Api<DynamicObject> =
            Api::namespaced_with(cluster.client.clone(), namespace, &resource);
        let Ok(listed) = api.list(&ListParams::default()).await else { continue };
        for object in listed.items {
            let owner = object
                .metadata
                .owner_references
                .as_ref()
                .and_then(|refs| refs.iter().find(|r| r.controller == Some(true)))
                .map(|r| r.uid.clone());
            let Some(owner) = owner else { continue };
            let Ok(mut value) = serde_json::to_value(&object) else { continue };
            complete_type(&mut value, &resource);
            owned.push((owner, node_of(&value, judge)));
        }
    }
    owned
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(kind: &str, name: &str, uid: &str) -> Node {
        Node {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: "team-a".into(),
            name: name.into(),
            health: "Healthy".into(),
            sync: "Synced".into(),
            marker: String::new(),
            children: Vec::new(),
            uid: uid.into(),
        }
    }

    #[test]
    fn owned_objects_hang_under_their_owner_and_the_tree_is_drawn() {
        let mut nodes = vec![node("ConfigMap", "settings", "u1"), node("Deployment", "web", "u2")];
        let owned = vec![
            ("u3".to_owned(), node("Pod", "web-abc-x", "u4")),
            ("u2".to_owned(), node("ReplicaSet", "web-abc", "u3")),
            ("zz".to_owned(), node("Pod", "stranger", "u5")),
        ];
        let left = adopt(&mut nodes, owned);
        assert_eq!(left.len(), 1, "the Pod hangs under its ReplicaSet; only the stranger stays");
        nodes[1].marker = "! MissingSecret".into();
        let text = draw("Application team-a/web", &nodes);
        let want = "\
Application team-a/web
├── ConfigMap settings       Healthy     Synced
└── Deployment web           Healthy     Synced    ! MissingSecret
    └── ReplicaSet web-abc   Healthy     Synced
        └── Pod web-abc-x    Healthy     Synced
";
        assert_eq!(text, want);
    }

    #[test]
    fn markers_name_root_causes_and_chains() {
        let diagnosis: Vec<Diagnosis> = serde_json::from_value(json!([{
            "resource": {"apiVersion": "v1", "kind": "Secret", "namespace": "team-a", "name": "db"},
            "reason": "MissingSecret", "message": "m",
            "chain": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "team-a", "name": "web"}],
        }]))
        .expect("diagnosis");
        assert_eq!(marker(&diagnosis, "Secret", "team-a", "db"), "! MissingSecret");
        assert_eq!(marker(&diagnosis, "Deployment", "team-a", "web"), "> MissingSecret");
        assert_eq!(marker(&diagnosis, "ConfigMap", "team-a", "web"), "");
    }

    #[test]
    fn only_an_unapplied_revision_makes_objects_out_of_sync() {
        let revision = |phase: &str| -> Revision {
            serde_json::from_value(json!({
                "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Revision",
                "metadata": {"name": "web-1", "namespace": "team-a"},
                "spec": {"applicationRef": {"name": "web"}, "source": {"repositoryRef": {"name": "apps"}, "revision": "c1", "render": {"type": "yaml"}}, "desiredStateHash": "h"},
                "status": {"phase": phase, "plan": {"digest": "d", "create": 1, "update": 0, "delete": 0, "unchanged": 1,
                    "changes": [
                        {"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "team-a", "name": "new"}, "action": "Create"},
                        {"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "team-a", "name": "same"}, "action": "Unchanged"}]}},
            }))
            .expect("revision")
        };
        let pending = pending_actions(Some(&revision("AwaitingApproval")));
        assert_eq!(pending.len(), 1);
        assert_eq!(
            pending.get(&("ConfigMap".into(), "team-a".into(), "new".into())),
            Some(&PlanAction::Create)
        );
        assert!(pending_actions(Some(&revision("Healthy"))).is_empty());
        assert!(pending_actions(None).is_empty());
    }

    /// The tree judges as the controller does: the cluster's HealthCheck for a kind decides
    /// before kstatus, and a hook Job is judged by the hook rule.
    #[test]
    fn health_follows_health_checks_and_the_hook_rule() {
        let spec: HealthCheckSpec = serde_json::from_value(json!({"group": "example.com",
            "kind": "Widget",
            "rules": [{"expression": "object.status.phase == 'Broken'", "state": "Degraded"}]}))
        .expect("a HealthCheck");
        let judge = Judge {
            rules: RuleSet::new([("widgets", &spec)]),
            now: Time("2026-01-01T00:00:00Z".parse().expect("a time")),
        };
        let widget = |phase: &str| {
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "status": {"phase": phase}})
        };
        let job = |hook: &str| {
            json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "migrate", "annotations": {keys::HOOK: hook}},
            "spec": {"parallelism": 1},
            "status": {"active": 1, "startTime": "2026-01-01T00:00:00Z"}})
        };
        assert_eq!(judge.health(&widget("Broken")), "Degraded");
        assert_eq!(judge.health(&widget("Fine")), "Healthy");
        // kstatus calls a running Job Current; a hook is Healthy only once Complete.
        assert_eq!(judge.health(&job("skip")), "Healthy");
        assert_eq!(judge.health(&job("pre-sync")), "Progressing");
    }
}
