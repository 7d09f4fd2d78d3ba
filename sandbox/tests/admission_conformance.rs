//! The sandbox's admission chain against kube-apiserver's: scenarios from the Kubernetes
//! "Dynamic Admission Control" documentation
//! (<https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/>)
//! and kube-apiserver's admission webhook integration tests
//! (`test/integration/apiserver/admissionwebhook/*`), the webhook configuration rules of
//! `pkg/apis/admissionregistration/{v1/defaults.go,validation/validation.go}` and the registry's
//! create path (`staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`), written
//! in our own words. Every test starts its own sandbox and its own TLS webhook server on
//! loopback and talks to the sandbox with kube-rs (or the real kubectl).

mod common;

use axum::Json;
use axum::routing::post;
use base64::Engine;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a webhook path answers to a review (the whole AdmissionReview reply). A reply
/// `{"delayMs": N, "body": B}` answers B after N milliseconds (a slow webhook).
type Handler = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

/// A test webhook server on loopback TLS and what it was sent.
struct Hooks {
    addr: SocketAddr,
    ca: String,
    seen: Arc<Mutex<Vec<(String, Value)>>>,
    _handle: axum_server::Handle<SocketAddr>,
}

impl Hooks {
    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.addr.port())
    }

    /// The AdmissionReview requests `path` received, in order.
    fn requests(&self, path: &str) -> Vec<Value> {
        self.seen
            .lock()
            .expect("lock")
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, r)| r.clone())
            .collect()
    }
}

fn handler(f: impl Fn(&Value) -> Value + Send + Sync + 'static) -> Handler {
    Arc::new(f)
}

/// Serve `routes` with the given serving certificate; `ca_pem` becomes the caBundle.
async fn serve_with(
    routes: Vec<(&'static str, Handler)>,
    cert_pem: String,
    key_pem: String,
    ca_pem: &str,
) -> Hooks {
    kuvryn_sync_runtime::tls::install_crypto_provider();
    let seen: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let mut app = axum::Router::new();
    for (path, h) in routes {
        let seen = seen.clone();
        app = app.route(
            path,
            post(move |Json(r): Json<Value>| {
                let (seen, h) = (seen.clone(), h.clone());
                async move {
                    seen.lock().expect("lock").push((path.to_string(), r.clone()));
                    let mut out = h(&r);
                    if let Some(ms) = out.get("delayMs").and_then(Value::as_u64) {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        out = out["body"].clone();
                    }
                    Json(out)
                }
            }),
        );
    }
    let cfg = axum_server::tls_rustls::RustlsConfig::from_pem(
        cert_pem.into_bytes(),
        key_pem.into_bytes(),
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
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    Hooks { addr, ca, seen, _handle: handle }
}

/// Serve `routes` with a leaf certificate for 127.0.0.1 signed by a test CA.
async fn serve(routes: Vec<(&'static str, Handler)>) -> Hooks {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name.push(rcgen::DnType::CommonName, "admission-conformance-ca");
    let ca_cert = ca.self_signed(&ca_key).expect("ca");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("params")
        .signed_by(&key, &issuer)
        .expect("cert");
    serve_with(routes, cert.pem(), key.serialize_pem(), &ca_cert.pem()).await
}

fn review_reply(r: &Value, response: Value) -> Value {
    let mut response = response;
    response["uid"] = r["request"]["uid"].clone();
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

fn allow(r: &Value) -> Value {
    review_reply(r, json!({"allowed": true}))
}

fn deny(r: &Value, message: &str) -> Value {
    review_reply(
        r,
        json!({"allowed": false, "status": {"code": 403, "reason": "Forbidden", "message": message}}),
    )
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn patch(r: &Value, ops: Value) -> Value {
    review_reply(
        r,
        json!({"allowed": true, "patchType": "JSONPatch", "patch": b64(&ops.to_string())}),
    )
}

/// A label-adding JSONPatch that works whether or not the object has labels yet.
fn add_label(r: &Value, key: &str, value: &str) -> Value {
    let key = key.replace('/', "~1");
    let ops = if r["request"]["object"]["metadata"]["labels"].is_object() {
        json!([{"op": "add", "path": format!("/metadata/labels/{key}"), "value": value}])
    } else {
        json!([{"op": "add", "path": "/metadata/labels", "value": {key.replace("~1", "/"): value}}])
    };
    patch(r, ops)
}

fn configmap_rules() -> Value {
    json!([{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}])
}

/// A webhook entry calling `path` on `hooks` for `rules`.
fn webhook(name: &str, hooks: &Hooks, path: &str, rules: Value) -> Value {
    json!({"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "failurePolicy": "Fail",
        "clientConfig": {"url": hooks.url(path), "caBundle": hooks.ca}, "rules": rules})
}

fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn dynamic(c: &kube::Client, ar: &ApiResource, ns: Option<&str>) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(c.clone(), ns, ar),
        None => Api::all_with(c.clone(), ar),
    }
}

fn to_value(o: DynamicObject) -> Value {
    serde_json::to_value(o).expect("json")
}

/// (code, reason, message) of an API error.
fn status_of(e: kube::Error) -> (u16, String, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("not an API error: {other}"),
    }
}

struct Cluster {
    sb: ksync_sandbox::Sandbox,
    c: kube::Client,
}

async fn cluster() -> Cluster {
    let sb = common::sandbox().await;
    let c = sb.client().await.expect("client");
    Cluster { sb, c }
}

impl Cluster {
    async fn create(
        &self,
        ar: &ApiResource,
        ns: Option<&str>,
        obj: Value,
    ) -> Result<Value, kube::Error> {
        let o: DynamicObject = serde_json::from_value(obj).expect("object");
        dynamic(&self.c, ar, ns).create(&PostParams::default(), &o).await.map(to_value)
    }

    async fn get(&self, ar: &ApiResource, ns: Option<&str>, name: &str) -> Value {
        to_value(dynamic(&self.c, ar, ns).get(name).await.expect("get"))
    }

    async fn merge(
        &self,
        ar: &ApiResource,
        ns: Option<&str>,
        name: &str,
        p: Value,
    ) -> Result<Value, kube::Error> {
        dynamic(&self.c, ar, ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(&p))
            .await
            .map(to_value)
    }

    async fn configure(
        &self,
        mutating: bool,
        name: &str,
        hooks: Vec<Value>,
    ) -> Result<Value, kube::Error> {
        let kind = if mutating {
            "MutatingWebhookConfiguration"
        } else {
            "ValidatingWebhookConfiguration"
        };
        let ar =
            resource("admissionregistration.k8s.io/v1", kind, &format!("{}s", kind.to_lowercase()));
        self.create(
            &ar,
            None,
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name}, "webhooks": hooks}),
        )
        .await
    }

    async fn mutating(&self, name: &str, hooks: Vec<Value>) {
        self.configure(true, name, hooks).await.expect("mutating configuration");
    }

    async fn validating(&self, name: &str, hooks: Vec<Value>) {
        self.configure(false, name, hooks).await.expect("validating configuration");
    }

    async fn create_cm(&self, obj: Value) -> Result<Value, kube::Error> {
        let mut obj = obj;
        obj["apiVersion"] = json!("v1");
        obj["kind"] = json!("ConfigMap");
        self.create(&cm(), Some("default"), obj).await
    }

    /// Install the Widget CRD (example.com, namespaced) serving `versions` with `spec`'s schema.
    async fn widgets(&self, versions: &[&str], spec: Value) {
        let vs: Vec<Value> = versions
            .iter()
            .enumerate()
            .map(|(i, v)| {
                json!({"name": v, "served": true, "storage": i == 0,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}}})
            })
            .collect();
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
                "versions": vs}});
        self.sb.install_crds(&[serde_json::from_value(crd).expect("crd")]).await.expect("crds");
    }
}

fn cm() -> ApiResource {
    resource("v1", "ConfigMap", "configmaps")
}

fn widget(version: &str) -> ApiResource {
    resource(&format!("example.com/{version}"), "Widget", "widgets")
}

fn widget_rules(version: &str) -> Value {
    json!([{"operations": ["CREATE", "UPDATE"], "apiGroups": ["example.com"], "apiVersions": [version], "resources": ["widgets"]}])
}

fn new_widget(version: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": format!("example.com/{version}"), "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

// ---------------------------------------------------------------------------------------------
// Order: mutating webhooks, defaulting, schema and CEL validation, validating webhooks.
// ---------------------------------------------------------------------------------------------

/// Dynamic Admission Control, "What are admission webhooks?": validation happens after all
/// mutations, so a mutating patch that breaks the CRD's structural schema is refused (422), not
/// stored (admission_test.go runs every webhook before the object is persisted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutating_patch_breaking_the_schema_is_refused() {
    let k = cluster().await;
    k.widgets(
        &["v1"],
        json!({"type": "object", "properties": {"replicas": {"type": "integer", "maximum": 5}}}),
    )
    .await;
    let hooks = serve(vec![(
        "/m",
        handler(|r| patch(r, json!([{"op": "replace", "path": "/spec/replicas", "value": 50}]))),
    )])
    .await;
    k.mutating("breaker", vec![webhook("break.example.com", &hooks, "/m", widget_rules("v1"))])
        .await;
    let e = k
        .create(&widget("v1"), Some("default"), new_widget("v1", "w", json!({"replicas": 1})))
        .await;
    let (code, reason, message) = status_of(e.expect_err("refused"));
    assert_eq!((code, reason.as_str()), (422, "Invalid"), "{message}");
    assert!(message.contains("spec.replicas"), "{message}");
    assert_eq!(hooks.requests("/m").len(), 1);
    let list = dynamic(&k.c, &widget("v1"), Some("default"))
        .list(&Default::default())
        .await
        .expect("list");
    assert!(list.items.is_empty(), "nothing stored");
}

/// Dynamic Admission Control, "Admission webhook phases" (mutating first): a request whose
/// object fails an `x-kubernetes-validations` rule still reaches the mutating webhook, which may
/// fix it before validation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cel_rule_is_checked_after_mutation() {
    let k = cluster().await;
    k.widgets(&["v1"], json!({"type": "object",
        "x-kubernetes-validations": [{"rule": "self.replicas <= 5", "message": "at most 5 replicas"}],
        "properties": {"replicas": {"type": "integer"}}})).await;
    let hooks = serve(vec![(
        "/m",
        handler(|r| patch(r, json!([{"op": "replace", "path": "/spec/replicas", "value": 3}]))),
    )])
    .await;
    k.mutating("fixer", vec![webhook("fix.example.com", &hooks, "/m", widget_rules("v1"))]).await;
    let w = k
        .create(&widget("v1"), Some("default"), new_widget("v1", "w", json!({"replicas": 10})))
        .await
        .expect("fixed by the webhook");
    assert_eq!(w["spec"]["replicas"], 3);
    assert_eq!(hooks.requests("/m")[0]["request"]["object"]["spec"]["replicas"], 10);
}

/// Dynamic Admission Control with CEL transition rules: `oldSelf` rules are checked on the
/// mutated object too, so a webhook that shrinks a value the rule forbids shrinking is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transition_rule_sees_the_mutated_object() {
    let k = cluster().await;
    k.widgets(&["v1"], json!({"type": "object",
        "x-kubernetes-validations": [{"rule": "self.replicas >= oldSelf.replicas", "message": "may not shrink"}],
        "properties": {"replicas": {"type": "integer"}}})).await;
    k.create(&widget("v1"), Some("default"), new_widget("v1", "w", json!({"replicas": 4})))
        .await
        .expect("created");
    let hooks = serve(vec![(
        "/m",
        handler(|r| {
            if r["request"]["operation"] == "UPDATE" {
                patch(r, json!([{"op": "replace", "path": "/spec/replicas", "value": 1}]))
            } else {
                allow(r)
            }
        }),
    )])
    .await;
    k.mutating("shrinker", vec![webhook("shrink.example.com", &hooks, "/m", widget_rules("v1"))])
        .await;
    let e = k.merge(&widget("v1"), Some("default"), "w", json!({"spec": {"replicas": 6}})).await;
    let (code, _, message) = status_of(e.expect_err("refused"));
    assert_eq!(code, 422, "{message}");
    assert!(message.contains("may not shrink"), "{message}");
    assert_eq!(k.get(&widget("v1"), Some("default"), "w").await["spec"]["replicas"], 4);
}

/// Custom resource defaulting docs ("Defaulting": defaults are applied after mutating
/// admission): a field a mutating patch removes is defaulted again, and the validating webhook
/// sees the defaulted value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_removed_by_mutation_is_defaulted_again() {
    let k = cluster().await;
    k.widgets(
        &["v1"],
        json!({"type": "object", "properties": {"mode": {"type": "string", "default": "auto"}}}),
    )
    .await;
    let hooks = serve(vec![
        ("/m", handler(|r| patch(r, json!([{"op": "remove", "path": "/spec/mode"}])))),
        ("/v", handler(allow)),
    ])
    .await;
    k.mutating("remover", vec![webhook("remove.example.com", &hooks, "/m", widget_rules("v1"))])
        .await;
    k.validating("checker", vec![webhook("check.example.com", &hooks, "/v", widget_rules("v1"))])
        .await;
    let w = k
        .create(&widget("v1"), Some("default"), new_widget("v1", "w", json!({"mode": "manual"})))
        .await
        .expect("created");
    assert_eq!(w["spec"]["mode"], "auto");
    assert_eq!(hooks.requests("/m")[0]["request"]["object"]["spec"]["mode"], "manual");
    assert_eq!(hooks.requests("/v")[0]["request"]["object"]["spec"]["mode"], "auto");
}

/// ObjectMeta validation (apimachinery `ValidateObjectMeta`, run by every registry): an invalid
/// label value is refused with 422 naming `metadata.labels`, with no webhook configured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_label_value_is_refused_without_webhooks() {
    let k = cluster().await;
    let e = k.create_cm(json!({"metadata": {"name": "c", "labels": {"app": "bad value!"}}})).await;
    let (code, reason, message) = status_of(e.expect_err("refused"));
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(
        message.starts_with(
            "ConfigMap \"c\" is invalid: metadata.labels: Invalid value: \"bad value!\""
        ),
        "{message}"
    );
    let e = k.create_cm(json!({"metadata": {"name": "c", "labels": {"bad key!": "x"}}})).await;
    assert_eq!(status_of(e.expect_err("refused")).0, 422);
}

/// ObjectMeta validation ("total annotation size" limit of 256 KiB) applies to every kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_annotations_are_refused() {
    let k = cluster().await;
    let big = "x".repeat(256 * 1024);
    let e = k.create_cm(json!({"metadata": {"name": "c", "annotations": {"big": big}}})).await;
    let (code, _, message) = status_of(e.expect_err("refused"));
    assert_eq!(code, 422);
    assert!(
        message.contains("metadata.annotations: Too long: may not be more than 262144 bytes"),
        "{message}"
    );
}

/// Dynamic Admission Control, "Admission webhook phases": a label a mutating webhook adds is
/// validated like the client's own, so an invalid value is refused instead of stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutating_webhook_adding_invalid_label_is_refused() {
    let k = cluster().await;
    let hooks = serve(vec![("/m", handler(|r| add_label(r, "team", "no spaces allowed")))]).await;
    k.mutating("labeler", vec![webhook("label.example.com", &hooks, "/m", configmap_rules())])
        .await;
    let e = k.create_cm(json!({"metadata": {"name": "c"}})).await;
    let (code, _, message) = status_of(e.expect_err("refused"));
    assert_eq!(code, 422, "{message}");
    assert!(message.contains("metadata.labels"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// matchConditions
// ---------------------------------------------------------------------------------------------

/// match_conditions_test.go (TestMatchConditions): a webhook is called only for requests whose
/// matchConditions are all true.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn match_conditions_on_object_select_requests() {
    let k = cluster().await;
    let hooks = serve(vec![("/v", handler(|r| deny(r, "caught")))]).await;
    let mut wh = webhook("cond.example.com", &hooks, "/v", configmap_rules());
    wh["matchConditions"] = json!([{"name": "only-caught", "expression": "object.metadata.name.startsWith('caught-')"}]);
    k.validating("conditional", vec![wh]).await;
    k.create_cm(json!({"metadata": {"name": "free"}})).await.expect("not matched");
    let e = k.create_cm(json!({"metadata": {"name": "caught-1"}})).await;
    assert!(
        status_of(e.expect_err("denied"))
            .2
            .contains("admission webhook \"cond.example.com\" denied the request: caught")
    );
    assert_eq!(hooks.requests("/v").len(), 1, "called only for the matching request");
}

/// Dynamic Admission Control, "Matching requests: matchConditions" (`oldObject` and
/// `request` are available): a condition on the update's old object and the operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn match_conditions_on_old_object_and_request() {
    let k = cluster().await;
    let hooks = serve(vec![("/v", handler(|r| deny(r, "frozen")))]).await;
    let mut wh = webhook("frozen.example.com", &hooks, "/v", configmap_rules());
    wh["matchConditions"] = json!([
        {"name": "update", "expression": "request.operation == 'UPDATE'"},
        {"name": "was-frozen", "expression": "has(oldObject.data) && oldObject.data.frozen == 'yes'"}
    ]);
    k.validating("freeze", vec![wh]).await;
    k.create_cm(json!({"metadata": {"name": "a"}, "data": {"frozen": "yes"}}))
        .await
        .expect("create is not matched");
    k.create_cm(json!({"metadata": {"name": "b"}, "data": {"frozen": "no"}}))
        .await
        .expect("created");
    k.merge(&cm(), Some("default"), "b", json!({"data": {"x": "1"}}))
        .await
        .expect("b was not frozen");
    let e = k.merge(&cm(), Some("default"), "a", json!({"data": {"x": "1"}})).await;
    assert!(status_of(e.expect_err("denied")).2.contains("frozen"));
    assert_eq!(hooks.requests("/v").len(), 1);
}

/// match_conditions_test.go (TestMatchConditions "errors follow failurePolicy"): a condition
/// that cannot be evaluated refuses the request under `Fail` (naming the webhook) and lets it
/// through under `Ignore`, without calling the webhook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn match_condition_errors_follow_failure_policy() {
    let k = cluster().await;
    let hooks = serve(vec![("/v", handler(allow))]).await;
    let mut wh = webhook("broken.example.com", &hooks, "/v", configmap_rules());
    wh["matchConditions"] =
        json!([{"name": "missing-field", "expression": "object.spec.replicas > 1"}]);
    k.validating("broken", vec![wh.clone()]).await;
    let e = k.create_cm(json!({"metadata": {"name": "a"}})).await;
    let (code, _, message) = status_of(e.expect_err("fails closed"));
    assert_eq!(code, 500);
    assert!(message.contains("failed calling webhook \"broken.example.com\""), "{message}");
    assert!(message.contains("missing-field"), "{message}");
    wh["failurePolicy"] = json!("Ignore");
    let vwc = resource(
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
    );
    k.merge(&vwc, None, "broken", json!({"webhooks": [wh]})).await.expect("updated");
    k.create_cm(json!({"metadata": {"name": "b"}})).await.expect("fails open");
    assert!(hooks.requests("/v").is_empty());
}

// ---------------------------------------------------------------------------------------------
// Response verification
// ---------------------------------------------------------------------------------------------

/// Dynamic Admission Control, "Response" (`uid` must be copied from the request): a wrong uid
/// fails the call; Fail refuses naming the webhook, Ignore proceeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_response_uid_fails_the_call() {
    let k = cluster().await;
    let wrong = |r: &Value| {
        let mut a = allow(r);
        a["response"]["uid"] = json!("not-the-request-uid");
        a
    };
    let hooks = serve(vec![("/v", handler(wrong))]).await;
    let mut closed = webhook("uid.example.com", &hooks, "/v", configmap_rules());
    closed["objectSelector"] = json!({"matchLabels": {"policy": "fail"}});
    let mut open = webhook("uid-open.example.com", &hooks, "/v", configmap_rules());
    open["failurePolicy"] = json!("Ignore");
    open["objectSelector"] = json!({"matchLabels": {"policy": "ignore"}});
    k.validating("uids", vec![closed, open]).await;
    let e = k.create_cm(json!({"metadata": {"name": "a", "labels": {"policy": "fail"}}})).await;
    let message = status_of(e.expect_err("refused")).2;
    assert!(message.contains("failed calling webhook \"uid.example.com\": received invalid webhook response: expected response.uid="), "{message}");
    k.create_cm(json!({"metadata": {"name": "b", "labels": {"policy": "ignore"}}}))
        .await
        .expect("ignored");
}

/// Dynamic Admission Control, "Response" (the reply is an `admission.k8s.io/v1`
/// `AdmissionReview`): a reply without apiVersion and kind fails the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_without_api_version_and_kind_fails() {
    let k = cluster().await;
    let bare = |r: &Value| json!({"response": {"uid": r["request"]["uid"], "allowed": true}});
    let hooks = serve(vec![("/v", handler(bare))]).await;
    k.validating("bare", vec![webhook("bare.example.com", &hooks, "/v", configmap_rules())]).await;
    let e = k.create_cm(json!({"metadata": {"name": "a"}})).await;
    let message = status_of(e.expect_err("refused")).2;
    assert!(message.contains("failed calling webhook \"bare.example.com\""), "{message}");
    assert!(
        message.contains("expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview"),
        "{message}"
    );
}

/// Dynamic Admission Control, "Response: modifying the object" (only `JSONPatch` is
/// supported): an unknown patchType fails the call and nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_patch_type_fails() {
    let k = cluster().await;
    let merge = |r: &Value| {
        let mut a = add_label(r, "x", "y");
        a["response"]["patchType"] = json!("MergePatch");
        a
    };
    let hooks = serve(vec![("/m", handler(merge))]).await;
    k.mutating("merger", vec![webhook("merge.example.com", &hooks, "/m", configmap_rules())]).await;
    let e = k.create_cm(json!({"metadata": {"name": "a"}})).await;
    let message = status_of(e.expect_err("refused")).2;
    assert!(message.contains("failed calling webhook \"merge.example.com\": received invalid webhook response: webhook returned invalid response.patchType of \"MergePatch\""), "{message}");
}

/// admission_test.go (validating webhooks may not mutate): a validating webhook that returns a
/// patch fails the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validating_webhook_may_not_patch() {
    let k = cluster().await;
    let hooks = serve(vec![("/v", handler(|r| add_label(r, "x", "y")))]).await;
    k.validating("sneaky", vec![webhook("sneaky.example.com", &hooks, "/v", configmap_rules())])
        .await;
    let e = k.create_cm(json!({"metadata": {"name": "a"}})).await;
    let message = status_of(e.expect_err("refused")).2;
    assert!(message.contains("failed calling webhook \"sneaky.example.com\""), "{message}");
}

/// timeout_test.go (TestWebhookTimeoutWithWatchCache): a webhook slower than its
/// `timeoutSeconds` fails the call; Fail refuses naming it, Ignore lets the request through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_webhook_times_out_by_policy() {
    let k = cluster().await;
    let hooks =
        serve(vec![("/slow", handler(|r| json!({"delayMs": 4000, "body": allow(r)})))]).await;
    let mut closed = webhook("slow.example.com", &hooks, "/slow", configmap_rules());
    closed["timeoutSeconds"] = json!(1);
    closed["objectSelector"] = json!({"matchLabels": {"policy": "fail"}});
    let mut open = closed.clone();
    open["name"] = json!("slow-open.example.com");
    open["failurePolicy"] = json!("Ignore");
    open["objectSelector"] = json!({"matchLabels": {"policy": "ignore"}});
    k.validating("slow", vec![closed, open]).await;
    let e = k.create_cm(json!({"metadata": {"name": "a", "labels": {"policy": "fail"}}})).await;
    let message = status_of(e.expect_err("timed out")).2;
    assert!(message.contains("failed calling webhook \"slow.example.com\""), "{message}");
    assert!(message.contains("timeout=1s"), "{message}");
    k.create_cm(json!({"metadata": {"name": "b", "labels": {"policy": "ignore"}}}))
        .await
        .expect("ignored");
}

// ---------------------------------------------------------------------------------------------
// reinvocationPolicy
// ---------------------------------------------------------------------------------------------

/// Counts calls and adds `label=<n>` when `always` or when the label is missing.
fn counting_labeler(label: &'static str, always: bool, count: Arc<AtomicUsize>) -> Handler {
    handler(move |r| {
        let n = count.fetch_add(1, Ordering::SeqCst) + 1;
        let has = r["request"]["object"]["metadata"]["labels"][label].is_string();
        if always || !has { add_label(r, label, &n.to_string()) } else { allow(r) }
    })
}

/// reinvocation_test.go ("reinvoke webhooks when a later webhook mutates"): an `IfNeeded`
/// webhook runs once more after a later webhook changed the object, and sees that change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_needed_webhook_is_reinvoked_after_a_later_change() {
    let k = cluster().await;
    let (a, b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let hooks = serve(vec![
        ("/a", counting_labeler("a", false, a.clone())),
        ("/b", counting_labeler("b", false, b.clone())),
    ])
    .await;
    let mut first = webhook("a.example.com", &hooks, "/a", configmap_rules());
    first["reinvocationPolicy"] = json!("IfNeeded");
    k.mutating("chain", vec![first, webhook("b.example.com", &hooks, "/b", configmap_rules())])
        .await;
    let o = k.create_cm(json!({"metadata": {"name": "c"}})).await.expect("created");
    assert_eq!((a.load(Ordering::SeqCst), b.load(Ordering::SeqCst)), (2, 1));
    assert_eq!(hooks.requests("/a")[1]["request"]["object"]["metadata"]["labels"]["b"], "1");
    assert_eq!(o["metadata"]["labels"], json!({"a": "1", "b": "1"}));
}

/// reinvocation_test.go ("no reinvocation for Never"): with the default policy the earlier
/// webhook is not called again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_policy_webhook_is_not_reinvoked() {
    let k = cluster().await;
    let (a, b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let hooks = serve(vec![
        ("/a", counting_labeler("a", false, a.clone())),
        ("/b", counting_labeler("b", false, b.clone())),
    ])
    .await;
    k.mutating(
        "chain",
        vec![
            webhook("a.example.com", &hooks, "/a", configmap_rules()),
            webhook("b.example.com", &hooks, "/b", configmap_rules()),
        ],
    )
    .await;
    k.create_cm(json!({"metadata": {"name": "c"}})).await.expect("created");
    assert_eq!((a.load(Ordering::SeqCst), b.load(Ordering::SeqCst)), (1, 1));
}

/// reinvocation_test.go ("no reinvocation when nothing changed after"): an `IfNeeded` webhook
/// is not reinvoked when later webhooks leave the object as it was (its own change does not
/// count).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_needed_webhook_is_not_reinvoked_without_later_change() {
    let k = cluster().await;
    let (a, b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let quiet = {
        let b = b.clone();
        handler(move |r| {
            b.fetch_add(1, Ordering::SeqCst);
            allow(r)
        })
    };
    let hooks = serve(vec![("/a", counting_labeler("a", false, a.clone())), ("/b", quiet)]).await;
    let mut first = webhook("a.example.com", &hooks, "/a", configmap_rules());
    first["reinvocationPolicy"] = json!("IfNeeded");
    k.mutating("chain", vec![first, webhook("b.example.com", &hooks, "/b", configmap_rules())])
        .await;
    k.create_cm(json!({"metadata": {"name": "c"}})).await.expect("created");
    assert_eq!((a.load(Ordering::SeqCst), b.load(Ordering::SeqCst)), (1, 1));
}

/// reinvocation_test.go ("reinvocation happens at most once"): two `IfNeeded` webhooks that
/// change the object on every call are each called exactly twice, never a third time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reinvocation_happens_at_most_once() {
    let k = cluster().await;
    let (a, b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let hooks = serve(vec![
        ("/a", counting_labeler("a", true, a.clone())),
        ("/b", counting_labeler("b", true, b.clone())),
    ])
    .await;
    let mut first = webhook("a.example.com", &hooks, "/a", configmap_rules());
    first["reinvocationPolicy"] = json!("IfNeeded");
    let mut second = webhook("b.example.com", &hooks, "/b", configmap_rules());
    second["reinvocationPolicy"] = json!("IfNeeded");
    k.mutating("chain", vec![first, second]).await;
    let o = k.create_cm(json!({"metadata": {"name": "c"}})).await.expect("created");
    assert_eq!((a.load(Ordering::SeqCst), b.load(Ordering::SeqCst)), (2, 2));
    assert_eq!(o["metadata"]["labels"], json!({"a": "2", "b": "2"}));
}

// ---------------------------------------------------------------------------------------------
// What webhooks see on CREATE
// ---------------------------------------------------------------------------------------------

/// registry/generic/registry/store.go (`Store.create`: "Init metadata as early as possible" —
/// FillObjectMetaSystemFields and the generateName name are set there, after the handler's
/// mutating admission, before `BeforeCreate` and validating admission): a mutating webhook sees
/// no name, uid or creationTimestamp for a generateName create; a validating webhook sees all
/// three; `request.name` stays empty for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_system_fields_are_set_after_mutating_admission() {
    let k = cluster().await;
    let hooks = serve(vec![("/m", handler(allow)), ("/v", handler(allow))]).await;
    k.mutating("m", vec![webhook("m.example.com", &hooks, "/m", configmap_rules())]).await;
    k.validating("v", vec![webhook("v.example.com", &hooks, "/v", configmap_rules())]).await;
    let o = k.create_cm(json!({"metadata": {"generateName": "gen-"}})).await.expect("created");
    let name = o["metadata"]["name"].as_str().expect("name");
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    let m = &hooks.requests("/m")[0]["request"];
    assert_eq!(m["name"], "");
    assert!(m["object"]["metadata"].get("name").is_none(), "{m}");
    assert!(m["object"]["metadata"].get("uid").is_none(), "{m}");
    assert!(m["object"]["metadata"].get("creationTimestamp").is_none(), "{m}");
    let v = &hooks.requests("/v")[0]["request"];
    assert_eq!(v["name"], "");
    assert_eq!(v["object"]["metadata"]["name"], name);
    assert_eq!(v["object"]["metadata"]["uid"], o["metadata"]["uid"]);
    assert!(v["object"]["metadata"]["creationTimestamp"].is_string(), "{v}");
}

// ---------------------------------------------------------------------------------------------
// Webhook configuration defaults and validation
// ---------------------------------------------------------------------------------------------

/// admissionregistration/v1/defaults.go (SetDefaults_MutatingWebhook, SetDefaults_Rule,
/// SetDefaults_ServiceReference): unset members are stored with their defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_configuration_defaults() {
    let k = cluster().await;
    let wh = json!({"name": "d.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "clientConfig": {"service": {"namespace": "default", "name": "hook"}},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]});
    let o = k.configure(true, "defaults", vec![wh.clone()]).await.expect("created");
    let got = &o["webhooks"][0];
    assert_eq!(got["failurePolicy"], "Fail");
    assert_eq!(got["matchPolicy"], "Equivalent");
    assert_eq!(got["timeoutSeconds"], 10);
    assert_eq!(got["namespaceSelector"], json!({}));
    assert_eq!(got["objectSelector"], json!({}));
    assert_eq!(got["reinvocationPolicy"], "Never");
    assert_eq!(got["rules"][0]["scope"], "*");
    assert_eq!(got["clientConfig"]["service"]["port"], 443);
    let v = k.configure(false, "defaults", vec![wh]).await.expect("created");
    assert!(v["webhooks"][0].get("reinvocationPolicy").is_none(), "validating webhooks have none");
    assert_eq!(v["webhooks"][0]["failurePolicy"], "Fail");
}

/// admissionregistration/validation/validation.go (ValidateValidatingWebhookConfiguration):
/// invalid webhooks are refused with 422 Invalid naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_webhook_configurations_are_refused() {
    let k = cluster().await;
    let valid = json!({"name": "ok.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "clientConfig": {"url": "https://127.0.0.1:1/x"},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]});
    let cases: Vec<(&str, Value, &str)> = vec![
        ("no sideEffects", json!({"sideEffects": null}), "webhooks[0].sideEffects: Required value"),
        (
            "sideEffects Some",
            json!({"sideEffects": "Some"}),
            "webhooks[0].sideEffects: Unsupported value: \"Some\"",
        ),
        (
            "no versions",
            json!({"admissionReviewVersions": null}),
            "webhooks[0].admissionReviewVersions: Required value",
        ),
        (
            "unknown version",
            json!({"admissionReviewVersions": ["v2"]}),
            "webhooks[0].admissionReviewVersions: Invalid value",
        ),
        (
            "timeout 31",
            json!({"timeoutSeconds": 31}),
            "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
        ),
        (
            "unqualified name",
            json!({"name": "hook"}),
            "webhooks[0].name: Invalid value: \"hook\": should be a domain with at least three segments separated by dots",
        ),
        (
            "bad selector",
            json!({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}),
            "webhooks[0].namespaceSelector.matchExpressions[0].values: Required value",
        ),
        (
            "bad operation",
            json!({"rules": [{"operations": ["MOVE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]}),
            "webhooks[0].rules[0].operations[0]: Unsupported value: \"MOVE\"",
        ),
        (
            "no resources",
            json!({"rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": []}]}),
            "webhooks[0].rules[0].resources: Required value",
        ),
        (
            "http url",
            json!({"clientConfig": {"url": "http://127.0.0.1/x"}}),
            "webhooks[0].clientConfig.url: Invalid value",
        ),
    ];
    for (what, edit, want) in cases {
        let mut wh = valid.clone();
        json_patch::merge(&mut wh, &edit);
        let e = k.configure(false, "bad", vec![wh]).await;
        let (code, reason, message) = status_of(e.expect_err(what));
        assert_eq!((code, reason.as_str()), (422, "Invalid"), "{what}: {message}");
        assert!(
            message.starts_with(
                "ValidatingWebhookConfiguration.admissionregistration.k8s.io \"bad\" is invalid"
            ),
            "{what}: {message}"
        );
        assert!(message.contains(want), "{what}: {message}");
    }
}

/// admissionregistration/validation/validation.go (webhook names are unique within a
/// configuration): a duplicate name is refused, on create and on update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_webhook_names_are_refused() {
    let k = cluster().await;
    let wh = json!({"name": "same.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "clientConfig": {"url": "https://127.0.0.1:1/x"},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]});
    let e = k.configure(true, "dup", vec![wh.clone(), wh.clone()]).await;
    let message = status_of(e.expect_err("refused")).2;
    assert!(
        message.contains("webhooks[1].name: Duplicate value: \"same.example.com\""),
        "{message}"
    );
    k.configure(true, "dup", vec![wh.clone()]).await.expect("one is fine");
    let mwc = resource(
        "admissionregistration.k8s.io/v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
    );
    let e = k.merge(&mwc, None, "dup", json!({"webhooks": [wh.clone(), wh]})).await;
    assert_eq!(status_of(e.expect_err("refused")).0, 422);
}

// ---------------------------------------------------------------------------------------------
// matchPolicy, dry run, AdmissionReview versions
// ---------------------------------------------------------------------------------------------

/// Dynamic Admission Control, "Matching requests: matchPolicy" (Equivalent) and admission_test.go
/// (requests through another version carry `requestKind`/`requestResource`): a request on v2 of
/// a CRD reaches a webhook whose rule names v1, with the object converted to v1; its patch
/// lands on the stored object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equivalent_match_policy_converts_to_the_rule_version() {
    let k = cluster().await;
    k.widgets(
        &["v1", "v2"],
        json!({"type": "object", "properties": {"size": {"type": "integer"}}}),
    )
    .await;
    let hooks = serve(vec![(
        "/m",
        handler(|r| {
            add_label(
                r,
                "seen-as",
                r["request"]["object"]["apiVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .replace('/', ".")
                    .as_str(),
            )
        }),
    )])
    .await;
    k.mutating("v1-only", vec![webhook("v1.example.com", &hooks, "/m", widget_rules("v1"))]).await;
    let w = k
        .create(&widget("v2"), Some("default"), new_widget("v2", "w", json!({"size": 1})))
        .await
        .expect("created");
    assert_eq!(w["apiVersion"], "example.com/v2");
    assert_eq!(w["metadata"]["labels"]["seen-as"], "example.com.v1");
    let r = &hooks.requests("/m")[0]["request"];
    assert_eq!(r["kind"], json!({"group": "example.com", "version": "v1", "kind": "Widget"}));
    assert_eq!(r["resource"]["version"], "v1");
    assert_eq!(
        r["requestKind"],
        json!({"group": "example.com", "version": "v2", "kind": "Widget"})
    );
    assert_eq!(r["requestResource"]["version"], "v2");
    assert_eq!(r["object"]["apiVersion"], "example.com/v1");
}

/// Dynamic Admission Control, "Matching requests: matchPolicy" (Exact): a request on another
/// version does not match a rule naming v1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_match_policy_skips_other_versions() {
    let k = cluster().await;
    k.widgets(
        &["v1", "v2"],
        json!({"type": "object", "properties": {"size": {"type": "integer"}}}),
    )
    .await;
    let hooks = serve(vec![("/v", handler(|r| deny(r, "v1 only")))]).await;
    let mut wh = webhook("exact.example.com", &hooks, "/v", widget_rules("v1"));
    wh["matchPolicy"] = json!("Exact");
    k.validating("exact", vec![wh]).await;
    k.create(&widget("v2"), Some("default"), new_widget("v2", "w", json!({})))
        .await
        .expect("not matched");
    assert!(hooks.requests("/v").is_empty());
    let e = k.create(&widget("v1"), Some("default"), new_widget("v1", "x", json!({}))).await;
    assert!(status_of(e.expect_err("denied")).2.contains("v1 only"));
}

/// Dynamic Admission Control, "Side effects" and "Request" (`dryRun` and `options`): a
/// dry-run create is sent with `dryRun: true` and CreateOptions carrying `dryRun: ["All"]`,
/// and nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_request_carries_dry_run_and_options() {
    let k = cluster().await;
    let hooks = serve(vec![("/v", handler(allow))]).await;
    k.validating("dry", vec![webhook("dry.example.com", &hooks, "/v", configmap_rules())]).await;
    let o: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}}),
    )
    .expect("obj");
    let pp = PostParams { dry_run: true, field_manager: Some("tester".into()) };
    dynamic(&k.c, &cm(), Some("default")).create(&pp, &o).await.expect("dry run");
    let r = &hooks.requests("/v")[0]["request"];
    assert_eq!(r["dryRun"], true);
    assert_eq!(
        r["options"],
        json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "dryRun": ["All"], "fieldManager": "tester"})
    );
    let got = dynamic(&k.c, &cm(), Some("default")).get_opt("d").await.expect("get");
    assert!(got.is_none(), "dry run stores nothing");
}

/// Dynamic Admission Control, "Request" (the API server sends the first
/// `admissionReviewVersions` entry it supports): `[v1beta1, v1]` gets a v1beta1 review,
/// `[v2, v1]` a v1 review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_supported_review_version_is_sent() {
    let k = cluster().await;
    let echo = |r: &Value| json!({"apiVersion": r["apiVersion"], "kind": "AdmissionReview", "response": {"uid": r["request"]["uid"], "allowed": true}});
    let hooks = serve(vec![("/beta", handler(echo)), ("/v1", handler(echo))]).await;
    let mut beta = webhook("beta.example.com", &hooks, "/beta", configmap_rules());
    beta["admissionReviewVersions"] = json!(["v1beta1", "v1"]);
    let mut v1 = webhook("v1.example.com", &hooks, "/v1", configmap_rules());
    v1["admissionReviewVersions"] = json!(["v2", "v1"]);
    k.validating("versions", vec![beta, v1]).await;
    k.create_cm(json!({"metadata": {"name": "c"}})).await.expect("created");
    assert_eq!(hooks.requests("/beta")[0]["apiVersion"], "admission.k8s.io/v1beta1");
    assert_eq!(hooks.requests("/v1")[0]["apiVersion"], "admission.k8s.io/v1");
}

// ---------------------------------------------------------------------------------------------
// Namespaces
// ---------------------------------------------------------------------------------------------

/// Dynamic Admission Control, "Matching requests: namespaceSelector" (selecting on the
/// `kubernetes.io/metadata.name` label kube-apiserver sets on every Namespace, see
/// pkg/registry/core/namespace/strategy.go): the label is set on create and a client can
/// neither remove nor change it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_name_label_is_set_and_immutable() {
    let k = cluster().await;
    let ns = resource("v1", "Namespace", "namespaces");
    let o = k.create(&ns, None, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "wrong"}}})).await.expect("created");
    assert_eq!(o["metadata"]["labels"]["kubernetes.io/metadata.name"], "team-a");
    let o = k
        .merge(
            &ns,
            None,
            "team-a",
            json!({"metadata": {"labels": {"kubernetes.io/metadata.name": null, "x": "y"}}}),
        )
        .await
        .expect("patched");
    assert_eq!(o["metadata"]["labels"], json!({"kubernetes.io/metadata.name": "team-a", "x": "y"}));
    let o = k
        .merge(
            &ns,
            None,
            "team-a",
            json!({"metadata": {"labels": {"kubernetes.io/metadata.name": "other"}}}),
        )
        .await
        .expect("patched");
    assert_eq!(o["metadata"]["labels"]["kubernetes.io/metadata.name"], "team-a");
}

/// Dynamic Admission Control, "Matching requests: namespaceSelector": a selector on
/// `kubernetes.io/metadata.name` matches requests in a namespace created through the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_selector_on_name_label_matches() {
    let k = cluster().await;
    let ns = resource("v1", "Namespace", "namespaces");
    k.create(
        &ns,
        None,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}}),
    )
    .await
    .expect("ns");
    let hooks = serve(vec![("/m", handler(|r| add_label(r, "team", "b")))]).await;
    let mut wh = webhook("team.example.com", &hooks, "/m", configmap_rules());
    wh["namespaceSelector"] = json!({"matchLabels": {"kubernetes.io/metadata.name": "team-b"}});
    k.mutating("team-b", vec![wh]).await;
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    let in_b = k.create(&cm(), Some("team-b"), body.clone()).await.expect("created");
    assert_eq!(in_b["metadata"]["labels"]["team"], "b");
    let in_default = k.create(&cm(), Some("default"), body).await.expect("created");
    assert!(in_default["metadata"]["labels"]["team"].is_null());
    assert_eq!(hooks.requests("/m").len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Serving certificates
// ---------------------------------------------------------------------------------------------

/// Make a self-signed certificate with the real openssl CLI (which marks it `CA:TRUE`).
fn openssl_self_signed(dir: &std::path::Path, san: &str) -> (String, String) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
        ])
        .arg("-addext")
        .arg(format!("subjectAltName={san}"))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (std::fs::read_to_string(cert).expect("cert"), std::fs::read_to_string(key).expect("key"))
}

/// Dynamic Admission Control, "Contacting the webhook" (`caBundle` is the PEM the server
/// certificate is checked against, as Go crypto/tls checks it): a self-signed `CA:TRUE`
/// certificate that is its own caBundle is accepted; the same kind of certificate for another
/// name is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_signed_ca_certificate_as_its_own_bundle_is_called() {
    let k = cluster().await;
    let dir = tempfile::tempdir().expect("tmp");
    let (cert, key) = openssl_self_signed(dir.path(), "IP:127.0.0.1");
    let text = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-text"])
        .stdin(std::fs::File::open(dir.path().join("cert.pem")).expect("cert"))
        .output()
        .expect("openssl x509");
    assert!(String::from_utf8_lossy(&text.stdout).contains("CA:TRUE"), "the certificate is a CA");
    let hooks =
        serve_with(vec![("/m", handler(|r| add_label(r, "tls", "ok")))], cert.clone(), key, &cert)
            .await;
    k.mutating("self-signed", vec![webhook("self.example.com", &hooks, "/m", configmap_rules())])
        .await;
    let o = k.create_cm(json!({"metadata": {"name": "c"}})).await.expect("called");
    assert_eq!(o["metadata"]["labels"]["tls"], "ok");

    let other = tempfile::tempdir().expect("tmp");
    let (cert, key) = openssl_self_signed(other.path(), "DNS:elsewhere.example.com");
    let wrong = serve_with(vec![("/v", handler(allow))], cert.clone(), key, &cert).await;
    k.validating("wrong-name", vec![webhook("wrong.example.com", &wrong, "/v", configmap_rules())])
        .await;
    let e = k.create_cm(json!({"metadata": {"name": "d"}})).await;
    let message = status_of(e.expect_err("name mismatch")).2;
    assert!(message.contains("failed calling webhook \"wrong.example.com\""), "{message}");
    assert!(wrong.requests("/v").is_empty());
}

/// admission_test.go (DELETE is admitted with the old object and DeleteOptions): a dry-run
/// delete carries `dryRun: ["All"]` in its options and keeps the object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_delete_carries_delete_options() {
    let k = cluster().await;
    k.create_cm(json!({"metadata": {"name": "c"}})).await.expect("created");
    let hooks = serve(vec![("/v", handler(allow))]).await;
    let rules = json!([{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]);
    k.validating("deletes", vec![webhook("del.example.com", &hooks, "/v", rules)]).await;
    let dp = kube::api::DeleteParams { dry_run: true, ..Default::default() };
    dynamic(&k.c, &cm(), Some("default")).delete("c", &dp).await.expect("dry run delete");
    let r = &hooks.requests("/v")[0]["request"];
    assert_eq!(r["operation"], "DELETE");
    assert_eq!(r["dryRun"], true);
    assert_eq!(r["options"]["kind"], "DeleteOptions");
    assert_eq!(r["options"]["dryRun"], json!(["All"]));
    assert_eq!(r["oldObject"]["metadata"]["name"], "c");
    k.get(&cm(), Some("default"), "c").await;
}

/// invalid_managedfields_test.go (TestMutatingWebhookResetsInvalidManagedFields): managedFields
/// a mutating webhook leaves invalid are put back as they were before admission, and the client
/// is warned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_managed_fields_from_a_webhook_are_reset() {
    let k = cluster().await;
    let bogus = |r: &Value| {
        patch(
            r,
            json!([{"op": "replace", "path": "/metadata/managedFields", "value": [{"manager": "webhook", "operation": "Bogus", "fieldsType": "FieldsV1", "fieldsV1": {}}]}]),
        )
    };
    let hooks = serve(vec![("/m", handler(bogus))]).await;
    k.mutating("bogus", vec![webhook("bogus.example.com", &hooks, "/m", configmap_rules())]).await;
    let doc = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {k: v}\n";
    let out =
        common::kubectl_in(&k.sb, &["create", "-f", "-", "--field-manager", "tester"], Some(doc))
            .await;
    let stderr = common::stderr(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(".metadata.managedFields was in an invalid state after admission"),
        "{stderr}"
    );
    assert!(stderr.contains("unexpected operation: Bogus"), "{stderr}");
    let o = k.get(&cm(), Some("default"), "c").await;
    let mf = o["metadata"]["managedFields"].as_array().expect("managedFields");
    assert_eq!(mf.len(), 1, "{mf:?}");
    assert_eq!(mf[0]["manager"], "tester");
    assert_eq!(mf[0]["operation"], "Update");
}
