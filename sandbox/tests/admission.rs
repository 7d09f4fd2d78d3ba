//! Priority 6: admission webhooks called over TLS with the requester's (impersonated) userInfo;
//! JSONPatch mutations applied; denials reach kubectl verbatim.

mod common;

use axum::Json;
use axum::routing::post;
use base64::Engine;
use common::{kubectl_in, kubectl_ok, stderr};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

type Seen = Arc<Mutex<Vec<Value>>>;

/// A small webhook server: /mutate adds a label, /validate denies `deny=true`.
async fn webhook_server(seen: Seen) -> (SocketAddr, String, axum_server::Handle<SocketAddr>) {
    kuvryn_sync_runtime::tls::install_crypto_provider();
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name.push(rcgen::DnType::CommonName, "test-webhook-ca");
    let ca_cert = ca.self_signed(&ca_key).expect("ca");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec![
        "hook.default.svc".to_string(),
        "127.0.0.1".to_string(),
    ])
    .expect("params")
    .signed_by(&key, &issuer)
    .expect("cert");
    let s1 = seen.clone();
    let s2 = seen.clone();
    let app = axum::Router::new()
        .route(
            "/mutate",
            post(move |Json(r): Json<Value>| {
                let seen = s1.clone();
                async move {
                    seen.lock().expect("lock").push(r["request"].clone());
                    let patch = json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}]);
                    let p = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
                    Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                        "response": {"uid": r["request"]["uid"], "allowed": true, "patchType": "JSONPatch", "patch": p, "warnings": ["mutated by test"]}}))
                }
            }),
        )
        .route(
            "/validate",
            post(move |Json(r): Json<Value>| {
                let seen = s2.clone();
                async move {
                    seen.lock().expect("lock").push(r["request"].clone());
                    let deny = r["request"]["object"]["metadata"]["labels"]["deny"] == "true";
                    let resp = if deny {
                        json!({"uid": r["request"]["uid"], "allowed": false, "status": {"code": 403, "reason": "Forbidden", "message": "configmaps labeled deny=true are not allowed"}})
                    } else {
                        json!({"uid": r["request"]["uid"], "allowed": true})
                    };
                    Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}))
                }
            }),
        );
    let cfg = axum_server::tls_rustls::RustlsConfig::from_pem(
        cert.pem().into_bytes(),
        key.serialize_pem().into_bytes(),
    )
    .await
    .expect("tls");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    let handle = axum_server::Handle::new();
    let server =
        axum_server::from_tcp_rustls(listener, cfg).expect("server").handle(handle.clone());
    tokio::spawn(async move { server.serve(app.into_make_service()).await });
    handle.listening().await.expect("listening");
    (addr, base64::engine::general_purpose::STANDARD.encode(ca_cert.pem()), handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_see_impersonated_user_mutate_and_deny() {
    let sb = common::sandbox().await;
    let seen: Seen = Arc::default();
    let (addr, ca, _h) = webhook_server(seen.clone()).await;
    sb.map_service("default", "hook", addr);
    let cfg = format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {{name: labeler}}
webhooks:
- name: label.example.com
  admissionReviewVersions: [v1]
  sideEffects: None
  clientConfig: {{url: "https://127.0.0.1:{port}/mutate", caBundle: {ca}}}
  rules: [{{operations: [CREATE, UPDATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}}]
  namespaceSelector:
    matchLabels: {{kubernetes.io/metadata.name: default}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: denier}}
webhooks:
- name: deny.example.com
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  clientConfig: {{service: {{namespace: default, name: hook, port: {port}, path: /validate}}, caBundle: {ca}}}
  rules: [{{operations: [CREATE, UPDATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}}]
  objectSelector:
    matchExpressions: [{{key: skip, operator: DoesNotExist}}]
"#,
        port = addr.port()
    );
    kubectl_in(&sb, &["apply", "-f", "-"], Some(&cfg)).await;
    kubectl_ok(&sb, &["create", "serviceaccount", "robot"]).await;
    kubectl_ok(
        &sb,
        &[
            "create",
            "clusterrolebinding",
            "robot-edit",
            "--clusterrole=edit",
            "--serviceaccount=default:robot",
        ],
    )
    .await;
    let sa = "system:serviceaccount:default:robot";

    let cm =
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok, labels: {app: x}}\ndata: {k: v}\n";
    let o = kubectl_in(&sb, &["create", "-f", "-", "--as", sa], Some(cm)).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("Warning: mutated by test"), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&kubectl_ok(&sb, &["get", "cm", "ok", "-o", "json"]).await)
        .expect("json");
    assert_eq!(v["metadata"]["labels"]["mutated"], "yes");
    {
        let seen = seen.lock().expect("lock");
        assert_eq!(seen.len(), 2, "mutating then validating");
        for r in seen.iter() {
            assert_eq!(r["userInfo"]["username"], sa);
            assert_eq!(
                r["userInfo"]["groups"],
                json!([
                    "system:serviceaccounts",
                    "system:serviceaccounts:default",
                    "system:authenticated"
                ])
            );
            assert_eq!(r["operation"], "CREATE");
            assert_eq!(r["kind"], json!({"group": "", "version": "v1", "kind": "ConfigMap"}));
            assert_eq!(r["namespace"], "default");
            assert_eq!(r["dryRun"], false);
        }
        // The validating webhook sees the mutated object.
        assert_eq!(seen[1]["object"]["metadata"]["labels"]["mutated"], "yes");
    }

    // Denials reach kubectl verbatim.
    let bad = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad, labels: {deny: \"true\"}}\n";
    let o = kubectl_in(&sb, &["create", "-f", "-"], Some(bad)).await;
    assert!(!o.status.success());
    assert_eq!(
        stderr(&o).lines().last().unwrap_or_default(),
        "Error from server (Forbidden): error when creating \"STDIN\": admission webhook \"deny.example.com\" denied the request: configmaps labeled deny=true are not allowed"
    );
    // Updates are reviewed with the old object; dry-run is flagged.
    let o = kubectl_in(&sb, &["label", "cm", "ok", "deny=true", "--dry-run=server"], None).await;
    assert!(
        stderr(&o).contains("admission webhook \"deny.example.com\" denied the request"),
        "{}",
        stderr(&o)
    );
    let last = seen.lock().expect("lock").last().cloned().expect("seen");
    assert_eq!(last["operation"], "UPDATE");
    assert_eq!(last["dryRun"], true);
    assert_eq!(last["oldObject"]["metadata"]["name"], "ok");
    assert_eq!(last["userInfo"]["username"], "kubernetes-admin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_webhook_fails_closed_or_open_by_policy() {
    let sb = common::sandbox().await;
    let cfg = |policy: &str| {
        format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {{name: gone}}\nwebhooks:\n- name: gone.example.com\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  failurePolicy: {policy}\n  timeoutSeconds: 2\n  clientConfig: {{url: \"https://127.0.0.1:1/x\"}}\n  rules: [{{operations: [CREATE], apiGroups: [\"\"], apiVersions: [v1], resources: [secrets]}}]\n"
        )
    };
    kubectl_in(&sb, &["apply", "-f", "-"], Some(&cfg("Fail"))).await;
    let o =
        kubectl_in(&sb, &["create", "secret", "generic", "s", "--from-literal=a=b"], None).await;
    assert!(
        stderr(&o).contains("Internal error occurred: failed calling webhook \"gone.example.com\": failed to call webhook: Post \"https://127.0.0.1:1/x?timeout=2s\""),
        "{}",
        stderr(&o)
    );
    kubectl_in(&sb, &["apply", "-f", "-"], Some(&cfg("Ignore"))).await;
    kubectl_ok(&sb, &["create", "secret", "generic", "s", "--from-literal=a=b"]).await;
}
