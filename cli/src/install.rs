//! Where Kuvryn Sync runs in a cluster, and which versions: shared by `ksync version` and
//! `ksync check`.
//!
//! Versions are read from two places, chosen because both exist without any extra endpoint:
//! - the controller's leader Lease (`kuvryn-sync-controller` in the install namespace): its holder,
//!   renew time and the [`CONTROLLER_VERSION`] annotation the leader writes when it is elected,
//!   with its own build version, so it names the binary that is running;
//! - the Deployments of the install namespace labelled `app.kubernetes.io/part-of=kuvryn-sync`
//!   (the chart's labels): per `app.kubernetes.io/component`, the `app.kubernetes.io/version`
//!   label and the container image. The webhook is read from there only.

use anyhow::Result;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kuvryn_sync_api::CONTROLLER_NAME;

pub use kuvryn_sync_api::keys::CONTROLLER_VERSION;

/// The install namespace flag of `version` and `check`.
#[derive(Debug, Clone, clap::Args)]
pub struct InstallArgs {
    /// Namespace Kuvryn Sync is installed in (the controller's Lease and the Deployments).
    #[arg(long, default_value = "kuvryn-system", value_name = "NAMESPACE")]
    pub install_namespace: String,
}

/// What the leader Lease says.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Leader {
    pub holder: Option<String>,
    pub version: Option<String>,
    /// Seconds since the Lease was last renewed.
    pub renewed_seconds_ago: Option<i64>,
    /// Whether the holder renewed it within its lease duration.
    pub current: bool,
}

/// The leader as `lease` records it at `now`.
pub fn leader_of(lease: &Lease, now: Timestamp) -> Leader {
    let spec = lease.spec.clone().unwrap_or_default();
    let ago = spec.renew_time.as_ref().map(|t| now.as_second() - t.0.as_second());
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    Leader {
        holder: spec.holder_identity.filter(|h| !h.is_empty()),
        version: lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CONTROLLER_VERSION).cloned()),
        renewed_seconds_ago: ago,
        current: ago.is_some_and(|ago| ago <= duration),
    }
}

/// The controller's leader Lease, if any; a sharded install has none, and its most recently
/// renewed shard Lease (`kuvryn-sync-controller-shard-…`) stands for it.
pub async fn leader(client: &kube::Client, namespace: &str) -> Result<Option<Leader>> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    if let Some(lease) = leases.get_opt(CONTROLLER_NAME).await? {
        return Ok(Some(leader_of(&lease, Timestamp::now())));
    }
    let all = leases.list(&Default::default()).await?.items;
    Ok(freshest_shard_lease(&all).map(|l| leader_of(l, Timestamp::now())))
}

/// Of `leases`, the controller's shard Lease renewed last.
pub fn freshest_shard_lease(leases: &[Lease]) -> Option<&Lease> {
    let prefix = format!("{CONTROLLER_NAME}-shard-");
    leases
        .iter()
        .filter(|l| l.metadata.name.as_deref().is_some_and(|n| n.starts_with(&prefix)))
        .filter(|l| l.spec.as_ref().and_then(|s| s.holder_identity.as_ref()).is_some())
        .max_by_key(|l| l.spec.as_ref().and_then(|s| s.renew_time.as_ref()).map(|t| t.0))
}

/// One component Deployment.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Component {
    pub component: String,
    pub name: String,
    pub version: Option<String>,
    pub image: Option<String>,
    pub ready_replicas: i32,
    pub replicas: i32,
}

/// The component of a chart-labelled Deployment.
pub fn component_of(deployment: &Deployment) -> Component {
    let labels = deployment.metadata.labels.clone().unwrap_or_default();
    let spec = deployment.spec.clone().unwrap_or_default();
    let image = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone());
    let status = deployment.status.clone().unwrap_or_default();
    Component {
        component: labels.get("app.kubernetes.io/component").cloned().unwrap_or_else(|| "-".into()),
        name: deployment.metadata.name.clone().unwrap_or_default(),
        version: labels.get("app.kubernetes.io/version").cloned(),
        image,
        ready_replicas: status.ready_replicas.unwrap_or(0),
        replicas: spec.replicas.unwrap_or(1),
    }
}

/// The chart's Deployments in `namespace`.
pub async fn components(client: &kube::Client, namespace: &str) -> Result<Vec<Component>> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().labels("app.kubernetes.io/part-of=kuvryn-sync");
    let mut found: Vec<Component> =
        api.list(&params).await?.items.iter().map(component_of).collect();
    found.sort_by(|a, b| a.component.cmp(&b.component));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_lease_renewed_within_its_duration_has_a_current_leader_and_its_version() {
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": CONTROLLER_NAME, "annotations": {CONTROLLER_VERSION: "0.1.0"}},
            "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15,
                     "renewTime": "2026-12-01T10:00:00.000000Z"},
        }))
        .expect("lease");
        let at = |t: &str| t.parse::<Timestamp>().expect("time");
        let fresh = leader_of(&lease, at("2026-12-01T10:00:10Z"));
        assert_eq!(fresh.holder.as_deref(), Some("pod-a"));
        assert_eq!(fresh.version.as_deref(), Some("0.1.0"));
        assert!(fresh.current);
        assert!(!leader_of(&lease, at("2026-12-01T10:01:00Z")).current);
    }

    #[test]
    fn a_sharded_install_is_represented_by_its_freshest_held_shard_lease() {
        let lease = |name: &str, holder: Option<&str>, renewed: &str| -> Lease {
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"holderIdentity": holder, "renewTime": renewed},
            }))
            .expect("lease")
        };
        let leases = [
            lease("other-app", Some("x"), "2026-12-01T10:00:30.000000Z"),
            lease(&format!("{CONTROLLER_NAME}-shard-0"), Some("a"), "2026-12-01T10:00:10.000000Z"),
            lease(&format!("{CONTROLLER_NAME}-shard-1"), Some("b"), "2026-12-01T10:00:20.000000Z"),
            lease(&format!("{CONTROLLER_NAME}-shard-2"), None, "2026-12-01T10:00:25.000000Z"),
        ];
        let found = freshest_shard_lease(&leases).and_then(|l| l.metadata.name.clone());
        assert_eq!(found, Some(format!("{CONTROLLER_NAME}-shard-1")));
        assert!(freshest_shard_lease(&leases[..1]).is_none(), "not ours");
    }

    #[test]
    fn a_deployment_gives_its_component_version_and_image() {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "ks-webhook", "labels": {"app.kubernetes.io/component": "webhook",
                          "app.kubernetes.io/version": "0.1.0"}},
            "spec": {"replicas": 2, "selector": {}, "template": {"spec": {"containers": [
                {"name": "webhook", "image": "registry.example/kuvryn-sync-webhook:0.1.0"}]}}},
            "status": {"readyReplicas": 1},
        }))
        .expect("deployment");
        let c = component_of(&d);
        assert_eq!((c.component.as_str(), c.version.as_deref()), ("webhook", Some("0.1.0")));
        assert_eq!(c.image.as_deref(), Some("registry.example/kuvryn-sync-webhook:0.1.0"));
        assert_eq!((c.ready_replicas, c.replicas), (1, 2));
    }
}
