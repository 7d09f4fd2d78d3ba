//! The garbage collector through kube-rs, as kube-controller-manager's behaves
//! (<https://kubernetes.io/docs/concepts/architecture/garbage-collection/>): background,
//! foreground and orphan propagation over a Deployment → ReplicaSet → Pods chain, an owner
//! reference to a uid that never existed, and a dependent with two owners.

mod common;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::fmt::Debug;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

/// An owner reference to `owner` (kind, name, uid), as a controller sets it.
fn owner_ref(kind: &str, api_version: &str, name: &str, uid: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": true,
        "blockOwnerDeletion": true})
}

/// Create an object from JSON and return its uid.
async fn create<K>(api: &Api<K>, obj: Value) -> String
where
    K: Resource + Clone + Debug + Serialize + DeserializeOwned,
{
    let obj: K = serde_json::from_value(obj).expect("object");
    let made = api.create(&PostParams::default(), &obj).await.expect("create");
    made.meta().uid.clone().expect("uid")
}

fn deployment(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"replicas": 1,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}}}})
}

fn replicaset(name: &str, owner: Option<Value>) -> Value {
    let mut rs = json!({"metadata": {"name": name}, "spec": {"replicas": 1,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}}}});
    if let Some(r) = owner {
        rs["metadata"]["ownerReferences"] = json!([r]);
    }
    rs
}

fn pod(name: &str, owners: Vec<Value>, finalizers: &[&str]) -> Value {
    json!({"metadata": {"name": name, "ownerReferences": owners, "finalizers": finalizers},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}})
}

fn configmap(name: &str, owners: Vec<Value>) -> Value {
    json!({"metadata": {"name": name, "ownerReferences": owners}, "data": {"k": "v"}})
}

/// The object if it exists (`None` once it is gone).
async fn get<K>(api: &Api<K>, name: &str) -> Option<K>
where
    K: Resource + Clone + Debug + DeserializeOwned,
{
    api.get_opt(name).await.expect("get")
}

/// Wait until every named object is gone.
async fn wait_gone<K>(what: &str, api: &Api<K>, names: &[&str])
where
    K: Resource + Clone + Debug + DeserializeOwned,
{
    common::wait_for(what, WAIT, || async {
        for n in names {
            get(api, n).await.is_none().then_some(())?;
        }
        Some(())
    })
    .await
}

struct Chain {
    deploys: Api<Deployment>,
    rss: Api<ReplicaSet>,
    pods: Api<Pod>,
}

/// Deployment `web` → ReplicaSet `web-1` → Pods `web-1-a`, `web-1-b` (the pods with these
/// finalizers), plus an unowned Pod `bystander`.
async fn chain(client: &kube::Client, ns: &str, pod_finalizers: &[&str]) -> Chain {
    let c = Chain {
        deploys: Api::namespaced(client.clone(), ns),
        rss: Api::namespaced(client.clone(), ns),
        pods: Api::namespaced(client.clone(), ns),
    };
    let d = create(&c.deploys, deployment("web")).await;
    let rs =
        create(&c.rss, replicaset("web-1", Some(owner_ref("Deployment", "apps/v1", "web", &d))))
            .await;
    for p in ["web-1-a", "web-1-b"] {
        let owners = vec![owner_ref("ReplicaSet", "apps/v1", "web-1", &rs)];
        create(&c.pods, pod(p, owners, pod_finalizers)).await;
    }
    create(&c.pods, pod("bystander", vec![], &[])).await;
    c
}

#[tokio::test]
async fn background_deletion_collects_the_deployment_replicaset_pods_chain() {
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let ns = sb.create_namespace("gc-bg").await.expect("namespace");
    let c = chain(&client, &ns, &[]).await;

    c.deploys.delete("web", &DeleteParams::background()).await.expect("delete deployment");

    wait_gone("the Deployment", &c.deploys, &["web"]).await;
    wait_gone("the ReplicaSet", &c.rss, &["web-1"]).await;
    wait_gone("the Pods", &c.pods, &["web-1-a", "web-1-b"]).await;
    assert!(get(&c.pods, "bystander").await.is_some(), "an unowned Pod stays");
}

#[tokio::test]
async fn foreground_deletion_removes_the_owner_last() {
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let ns = sb.create_namespace("gc-fg").await.expect("namespace");
    // The Pods are held by a finalizer, so the chain's state can be looked at while they are.
    let c = chain(&client, &ns, &["example.com/hold"]).await;

    c.deploys.delete("web", &DeleteParams::foreground()).await.expect("delete deployment");

    // Deletion runs down the chain: both Pods are being deleted, the owners wait for them.
    common::wait_for("the Pods marked for deletion", WAIT, || async {
        for p in ["web-1-a", "web-1-b"] {
            get(&c.pods, p).await?.metadata.deletion_timestamp?;
        }
        Some(())
    })
    .await;
    for (kind, meta) in [
        ("Deployment", get(&c.deploys, "web").await.map(|d| d.metadata)),
        ("ReplicaSet", get(&c.rss, "web-1").await.map(|r| r.metadata)),
    ] {
        let meta = meta.unwrap_or_else(|| panic!("the {kind} is still there while a Pod is"));
        assert!(meta.deletion_timestamp.is_some(), "the {kind} is being deleted");
        assert!(
            meta.finalizers.unwrap_or_default().iter().any(|f| f == "foregroundDeletion"),
            "the {kind} waits with the foregroundDeletion finalizer"
        );
    }

    // Release one Pod: the owners still wait for the other.
    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    c.pods.patch("web-1-a", &PatchParams::default(), &release).await.expect("release a");
    wait_gone("the first Pod", &c.pods, &["web-1-a"]).await;
    assert!(get(&c.deploys, "web").await.is_some(), "the Deployment waits for the last Pod");
    assert!(get(&c.rss, "web-1").await.is_some(), "the ReplicaSet waits for the last Pod");

    c.pods.patch("web-1-b", &PatchParams::default(), &release).await.expect("release b");
    wait_gone("the ReplicaSet", &c.rss, &["web-1"]).await;
    wait_gone("the Deployment", &c.deploys, &["web"]).await;
    assert!(get(&c.pods, "bystander").await.is_some(), "an unowned Pod stays");
}

#[tokio::test]
async fn orphan_propagation_keeps_dependents_without_the_owner_reference() {
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let ns = sb.create_namespace("gc-orphan").await.expect("namespace");
    let c = chain(&client, &ns, &[]).await;

    c.deploys.delete("web", &DeleteParams::orphan()).await.expect("delete deployment");

    wait_gone("the Deployment", &c.deploys, &["web"]).await;
    let rs = get(&c.rss, "web-1").await.expect("the ReplicaSet stays");
    assert!(
        rs.metadata.owner_references.unwrap_or_default().is_empty(),
        "the ReplicaSet no longer names the Deployment"
    );
    for p in ["web-1-a", "web-1-b"] {
        let pod = get(&c.pods, p).await.expect("the Pods stay");
        let owners = pod.metadata.owner_references.unwrap_or_default();
        assert_eq!(owners.len(), 1, "{p} still names its ReplicaSet");
        assert_eq!(owners[0].name, "web-1");
    }
}

#[tokio::test]
async fn a_dependent_of_a_uid_that_never_existed_is_collected() {
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let ns = sb.create_namespace("gc-ghost").await.expect("namespace");
    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    let ghost = "00000000-0000-4000-8000-000000000000";
    create(&cms, configmap("haunted", vec![owner_ref("ConfigMap", "v1", "ghost", ghost)])).await;
    create(&cms, configmap("plain", vec![])).await;

    wait_gone("the dependent of a missing owner", &cms, &["haunted"]).await;
    assert!(get(&cms, "plain").await.is_some(), "an unowned ConfigMap stays");
}

#[tokio::test]
async fn a_dependent_with_two_owners_stays_until_both_are_gone() {
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let ns = sb.create_namespace("gc-two").await.expect("namespace");
    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    let a = create(&cms, configmap("owner-a", vec![])).await;
    let b = create(&cms, configmap("owner-b", vec![])).await;
    let ref_a = owner_ref("ConfigMap", "v1", "owner-a", &a);
    let ref_b = owner_ref("ConfigMap", "v1", "owner-b", &b);
    create(&cms, configmap("shared", vec![ref_a.clone(), ref_b])).await;
    // Collected with owner-a: once it is gone, the collector has handled owner-a's deletion.
    create(&cms, configmap("only-a", vec![ref_a])).await;

    cms.delete("owner-a", &DeleteParams::background()).await.expect("delete owner-a");
    wait_gone("owner-a's own dependent", &cms, &["owner-a", "only-a"]).await;
    let shared = get(&cms, "shared").await.expect("the shared dependent stays with owner-b");
    let owners = shared.metadata.owner_references.unwrap_or_default();
    assert_eq!(owners.len(), 2, "background deletion leaves the references alone");

    cms.delete("owner-b", &DeleteParams::background()).await.expect("delete owner-b");
    wait_gone("the shared dependent", &cms, &["owner-b", "shared"]).await;
}
