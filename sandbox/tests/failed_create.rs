//! Pods the API server refuses, and how the workload controllers report it.
//!
//! - ServiceAccount admission
//!   (<https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#serviceaccount>,
//!   <https://kubernetes.io/docs/concepts/security/service-accounts/#default-service-accounts>):
//!   every namespace has a `default` ServiceAccount, and a Pod naming a missing one is refused.
//! - ResourceQuota admission
//!   (<https://kubernetes.io/docs/concepts/policy/resource-quotas/>; the refusal text is the one
//!   shown in <https://kubernetes.io/docs/tasks/administer-cluster/manage-resources/quota-memory-cpu-namespace/>).
//! - The controllers' `FailedCreate` Events and the ReplicaSet's `ReplicaFailure` condition
//!   (<https://kubernetes.io/docs/concepts/workloads/controllers/replicaset/>, the
//!   `ReplicaSetConditionType` doc in the apps/v1 API reference, and kube-controller-manager's
//!   `controller_utils.go` wording `Error creating: ...`), for ServiceAccount, quota and
//!   validating-webhook refusals.
// A failed unwrap in a test is a failed assertion.
#![allow(clippy::unwrap_used)]

mod common;

use axum::Json;
use axum::routing::post;
use base64::Engine;
use common::{kubectl_in, kubectl_stdin_ok, stderr};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Event, Pod, ResourceQuota, ServiceAccount};
use ksync_sandbox::{Sandbox, SandboxOptions};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(15);

async fn sim() -> (Sandbox, Client) {
    let sb =
        common::sandbox_with(SandboxOptions { simulate_workloads: true, ..Default::default() })
            .await;
    let client = sb.client().await.expect("client");
    (sb, client)
}

fn obj<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

/// A ReplicaSet of one Pod running as `service_account`.
fn replicaset(name: &str, service_account: &str) -> ReplicaSet {
    obj(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"serviceAccountName": service_account,
                                       "containers": [{"name": "app", "image": "registry.example/app:1"}]}}},
    }))
}

/// The first Warning Event on `object` with `reason` whose message satisfies `pred`.
async fn wait_event(
    client: &Client,
    ns: &str,
    object: &str,
    reason: &str,
    pred: impl Fn(&str) -> bool,
) -> Event {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    common::wait_for(&format!("event {reason} on {object}"), WAIT, || {
        let api = api.clone();
        let pred = &pred;
        async move {
            api.list(&ListParams::default()).await.ok()?.items.into_iter().find(|e| {
                e.involved_object.name.as_deref() == Some(object)
                    && e.reason.as_deref() == Some(reason)
                    && e.type_.as_deref() == Some("Warning")
                    && pred(e.message.as_deref().unwrap_or_default())
            })
        }
    })
    .await
}

/// `(status, reason, message)` of the ReplicaSet's `ReplicaFailure` condition.
fn replica_failure(rs: &ReplicaSet) -> Option<(String, Option<String>, Option<String>)> {
    let c =
        rs.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "ReplicaFailure")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn wait_rs(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&ReplicaSet) -> bool,
) -> ReplicaSet {
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    common::wait_for(&format!("replicaset {name}: {what}"), WAIT, || {
        let api = api.clone();
        let pred = &pred;
        async move { api.get(name).await.ok().filter(|r| pred(r)) }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_naming_a_missing_service_account_is_forbidden_and_default_exists() {
    let sb = common::sandbox().await;
    let client = sb.client().await.unwrap();
    let ns = sb.create_namespace("sa").await.unwrap();
    // kube-controller-manager's serviceaccounts controller made `default` in the new namespace.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    common::wait_for("default ServiceAccount", WAIT, || {
        let sas = sas.clone();
        async move { sas.get("default").await.ok() }
    })
    .await;
    let pod = |name: &str, sa: Option<&str>| {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}});
        if let Some(sa) = sa {
            p["spec"]["serviceAccountName"] = json!(sa);
        }
        p.to_string()
    };
    kubectl_stdin_ok(&sb, &["-n", &ns, "create", "-f", "-"], &pod("plain", None)).await;
    let o =
        kubectl_in(&sb, &["-n", &ns, "create", "-f", "-"], Some(&pod("p", Some("ghost")))).await;
    assert!(!o.status.success());
    assert_eq!(
        stderr(&o).trim(),
        format!(
            "Error from server (Forbidden): error when creating \"STDIN\": pods \"p\" is forbidden: error looking up service account {ns}/ghost: serviceaccount \"ghost\" not found"
        )
    );
    // kube-rs sees a 403 Forbidden Status.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let err = pods
        .create(
            &PostParams::default(),
            &obj(serde_json::from_str(&pod("q", Some("ghost"))).unwrap()),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden")),
        other => panic!("want a 403, got {other}"),
    }
    // Once the ServiceAccount exists the same Pod is admitted.
    sas.create(&PostParams::default(), &obj(json!({"metadata": {"name": "ghost"}}))).await.unwrap();
    kubectl_stdin_ok(&sb, &["-n", &ns, "create", "-f", "-"], &pod("p", Some("ghost"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_quota_refuses_the_pod_that_exceeds_hard_and_tracks_used() {
    let (sb, client) = sim().await;
    let ns = sb.create_namespace("quota").await.unwrap();
    // The "Configure Memory and CPU Quotas for a Namespace" task, step by step.
    let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "mem-cpu-demo"},
        "spec": {"hard": {"requests.cpu": "1", "requests.memory": "1Gi", "limits.cpu": "2", "limits.memory": "2Gi"}}});
    kubectl_stdin_ok(&sb, &["-n", &ns, "create", "-f", "-"], &quota.to_string()).await;
    let pod = |name: &str, mem: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "nginx",
                "resources": {"limits": {"memory": "800Mi", "cpu": "800m"}, "requests": {"memory": mem, "cpu": "400m"}}}]}})
        .to_string()
    };
    kubectl_stdin_ok(&sb, &["-n", &ns, "create", "-f", "-"], &pod("quota-mem-cpu-demo", "600Mi"))
        .await;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
    let used = |q: &ResourceQuota, k: &str| {
        q.status.as_ref().and_then(|s| s.used.as_ref()).and_then(|u| u.get(k)).map(|v| v.0.clone())
    };
    let q = quotas.get("mem-cpu-demo").await.unwrap();
    assert_eq!(used(&q, "requests.memory").as_deref(), Some("600Mi"), "{q:?}");
    assert_eq!(used(&q, "requests.cpu").as_deref(), Some("400m"), "{q:?}");
    let hard = q.status.as_ref().and_then(|s| s.hard.clone()).unwrap_or_default();
    assert_eq!(hard.get("requests.memory").map(|v| v.0.as_str()), Some("1Gi"));

    let o = kubectl_in(
        &sb,
        &["-n", &ns, "create", "-f", "-"],
        Some(&pod("quota-mem-cpu-demo-2", "700Mi")),
    )
    .await;
    assert_eq!(
        stderr(&o).trim(),
        "Error from server (Forbidden): error when creating \"STDIN\": pods \"quota-mem-cpu-demo-2\" is forbidden: exceeded quota: mem-cpu-demo, requested: requests.memory=700Mi, used: requests.memory=600Mi, limited: requests.memory=1Gi"
    );
    // Deleting the first Pod frees the quota (the resourcequota controller recomputes `used`).
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.delete("quota-mem-cpu-demo", &DeleteParams::default()).await.unwrap();
    common::wait_for("used back to 0", WAIT, || {
        let quotas = quotas.clone();
        async move {
            let q = quotas.get("mem-cpu-demo").await.ok()?;
            (used(&q, "requests.memory").as_deref() == Some("0")).then_some(())
        }
    })
    .await;
    kubectl_stdin_ok(&sb, &["-n", &ns, "create", "-f", "-"], &pod("quota-mem-cpu-demo-2", "700Mi"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicaset_reports_failed_create_and_clears_it_when_pods_can_be_created() {
    let (sb, client) = sim().await;
    let ns = sb.create_namespace("rs").await.unwrap();
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    rss.create(&PostParams::default(), &replicaset("web", "app")).await.unwrap();
    let refusal = format!(
        "pods \"web-\" is forbidden: error looking up service account {ns}/app: serviceaccount \"app\" not found"
    );
    let ev =
        wait_event(&client, &ns, "web", "FailedCreate", |m| m.starts_with("Error creating:")).await;
    assert_eq!(ev.message.as_deref(), Some(format!("Error creating: {refusal}").as_str()));
    assert_eq!(
        ev.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("replicaset-controller")
    );
    let rs = wait_rs(&client, &ns, "web", "ReplicaFailure", |r| replica_failure(r).is_some()).await;
    assert_eq!(
        replica_failure(&rs),
        Some(("True".into(), Some("FailedCreate".into()), Some(refusal.clone())))
    );
    assert_eq!(rs.status.as_ref().map(|s| s.replicas), Some(0));

    // The ServiceAccount appears: the Pod is created and the condition goes.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    sas.create(&PostParams::default(), &obj(json!({"metadata": {"name": "app"}}))).await.unwrap();
    let rs = wait_rs(&client, &ns, "web", "a Pod and no ReplicaFailure", |r| {
        replica_failure(r).is_none() && r.status.as_ref().is_some_and(|s| s.replicas == 1)
    })
    .await;
    assert_eq!(rs.status.and_then(|s| s.conditions), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_refusal_reaches_the_replicaset_condition() {
    let (sb, client) = sim().await;
    let ns = sb.create_namespace("rsquota").await.unwrap();
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
    quotas
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "pods-max"}, "spec": {"hard": {"pods": "0"}}})),
        )
        .await
        .unwrap();
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    rss.create(&PostParams::default(), &replicaset("web", "default")).await.unwrap();
    let rs = wait_rs(&client, &ns, "web", "ReplicaFailure", |r| replica_failure(r).is_some()).await;
    assert_eq!(
        replica_failure(&rs).and_then(|c| c.2).as_deref(),
        Some(
            "pods \"web-\" is forbidden: exceeded quota: pods-max, requested: pods=1, used: pods=0, limited: pods=0"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_statefulset_and_daemonset_record_failed_create() {
    let (sb, client) = sim().await;
    let ns = sb.create_namespace("owners").await.unwrap();
    let spec = json!({"serviceAccountName": "ghost", "restartPolicy": "Never",
        "containers": [{"name": "app", "image": "registry.example/app:1"}]});
    let always = json!({"serviceAccountName": "ghost",
        "containers": [{"name": "app", "image": "registry.example/app:1"}]});
    let labels = json!({"labels": {"app": "x"}});
    let objects = [
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate"},
            "spec": {"backoffLimit": 0, "template": {"metadata": labels, "spec": spec}}}),
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
            "spec": {"serviceName": "db", "replicas": 1, "selector": {"matchLabels": {"app": "x"}},
                     "template": {"metadata": labels, "spec": always}}}),
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": {"app": "x"}},
                     "template": {"metadata": labels, "spec": always}}}),
    ];
    for o in &objects {
        kubectl_stdin_ok(&sb, &["-n", &ns, "create", "-f", "-"], &o.to_string()).await;
    }
    let missing =
        format!("error looking up service account {ns}/ghost: serviceaccount \"ghost\" not found");
    let cases = [
        (
            "migrate",
            "job-controller",
            format!("Error creating: pods \"migrate-\" is forbidden: {missing}"),
        ),
        (
            "db",
            "statefulset-controller",
            format!(
                "create Pod db-0 in StatefulSet db failed error: pods \"db-0\" is forbidden: {missing}"
            ),
        ),
        (
            "agent",
            "daemonset-controller",
            format!("Error creating: pods \"agent-\" is forbidden: {missing}"),
        ),
    ];
    for (owner, component, message) in cases {
        let ev = wait_event(&client, &ns, owner, "FailedCreate", |_| true).await;
        assert_eq!(ev.message.as_deref(), Some(message.as_str()), "{owner}");
        assert_eq!(ev.source.and_then(|s| s.component).as_deref(), Some(component), "{owner}");
    }
}

/// A TLS webhook server whose `/validate` denies every Pod; returns its address and CA (base64).
async fn pod_denier() -> (SocketAddr, String, axum_server::Handle<SocketAddr>) {
    kuvryn_sync_runtime::tls::install_crypto_provider();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name.push(rcgen::DnType::CommonName, "failed-create-test-ca");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["denier.default.svc".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let app = axum::Router::new().route(
        "/validate",
        post(|Json(r): Json<Value>| async move {
            let resp = json!({"uid": r["request"]["uid"], "allowed": false,
                "status": {"code": 403, "reason": "Forbidden", "message": "pods need an approved image"}});
            Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}))
        }),
    );
    let cfg = axum_server::tls_rustls::RustlsConfig::from_pem(
        cert.pem().into_bytes(),
        key.serialize_pem().into_bytes(),
    )
    .await
    .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = axum_server::Handle::new();
    let server = axum_server::from_tcp_rustls(listener, cfg).unwrap().handle(handle.clone());
    tokio::spawn(async move { server.serve(app.into_make_service()).await });
    handle.listening().await.unwrap();
    (addr, base64::engine::general_purpose::STANDARD.encode(ca_cert.pem()), handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_denial_surfaces_as_failed_create() {
    let (sb, client) = sim().await;
    let (addr, ca, _server) = pod_denier().await;
    sb.map_service("default", "denier", addr);
    let ns = sb.create_namespace("hook").await.unwrap();
    let cfg = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "pod-denier"},
        "webhooks": [{"name": "deny-pods.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail",
            "clientConfig": {"service": {"namespace": "default", "name": "denier", "port": addr.port(), "path": "/validate"}, "caBundle": ca},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}]});
    kubectl_stdin_ok(&sb, &["create", "-f", "-"], &cfg.to_string()).await;
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    rss.create(&PostParams::default(), &replicaset("web", "default")).await.unwrap();
    let rs = wait_rs(&client, &ns, "web", "ReplicaFailure", |r| replica_failure(r).is_some()).await;
    let (status, reason, message) = replica_failure(&rs).unwrap();
    assert_eq!((status.as_str(), reason.as_deref()), ("True", Some("FailedCreate")));
    assert_eq!(
        message.as_deref(),
        Some(
            "admission webhook \"deny-pods.example.com\" denied the request: pods need an approved image"
        )
    );
    let ev = wait_event(&client, &ns, "web", "FailedCreate", |_| true).await;
    assert_eq!(
        ev.message.as_deref(),
        Some(
            "Error creating: admission webhook \"deny-pods.example.com\" denied the request: pods need an approved image"
        )
    );
}
