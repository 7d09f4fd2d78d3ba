//! Server-side apply and managedFields conformance: scenarios of Kubernetes' own tests, ported to
//! the sandbox and driven over HTTP (raw requests through a kube-rs client) and the real kubectl.
//! Each test names the Kubernetes test (file and test name) or the document section it ports; the
//! assertions are the ones the original makes, in our words.

mod common;

use kube::Client;
use serde_json::{Value, json};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const PODS: &str = "/api/v1/namespaces/default/pods";
const SVCS: &str = "/api/v1/namespaces/default/services";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
const APPLY: &str = "application/apply-patch+yaml";
const MERGE: &str = "application/merge-patch+json";
const SMP: &str = "application/strategic-merge-patch+json";
const JSONPATCH: &str = "application/json-patch+json";

type Res = Result<Value, Value>;

/// One request; `Err` is the Status the server answered with.
async fn send(c: &Client, method: &str, url: &str, ct: &str, body: &[u8]) -> Res {
    let req = axum::http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", ct)
        .header("accept", "application/json")
        .body(body.to_vec())
        .expect("request");
    match c.request_text(req).await {
        Ok(t) => Ok(serde_json::from_str(&t).expect("json answer")),
        Err(kube::Error::Api(s)) => Err(serde_json::to_value(&*s).expect("status json")),
        Err(e) => panic!("{method} {url}: {e}"),
    }
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("json")
}

/// Server-side apply of `body` to `url` (`url` may carry a query; `fieldManager` is appended).
async fn apply(c: &Client, url: &str, manager: &str, body: &Value) -> Res {
    let sep = if url.contains('?') { '&' } else { '?' };
    send(c, "PATCH", &format!("{url}{sep}fieldManager={manager}"), APPLY, &bytes(body)).await
}

async fn apply_force(c: &Client, url: &str, manager: &str, body: &Value) -> Res {
    let sep = if url.contains('?') { '&' } else { '?' };
    send(c, "PATCH", &format!("{url}{sep}fieldManager={manager}&force=true"), APPLY, &bytes(body))
        .await
}

async fn patch(c: &Client, url: &str, ct: &str, body: &Value) -> Res {
    send(c, "PATCH", url, ct, &bytes(body)).await
}

async fn put(c: &Client, url: &str, body: &Value) -> Res {
    send(c, "PUT", url, "application/json", &bytes(body)).await
}

async fn post(c: &Client, url: &str, body: &Value) -> Res {
    send(c, "POST", url, "application/json", &bytes(body)).await
}

async fn get(c: &Client, url: &str) -> Value {
    send(c, "GET", url, "application/json", b"").await.expect("get")
}

fn ok(r: Res) -> Value {
    r.unwrap_or_else(|e| panic!("request failed: {e:#}"))
}

fn err(r: Res) -> Value {
    match r {
        Ok(v) => panic!("request succeeded: {v:#}"),
        Err(e) => e,
    }
}

fn rv(v: &Value) -> String {
    v["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string()
}

fn mf(v: &Value) -> Vec<Value> {
    v["metadata"]["managedFields"].as_array().cloned().unwrap_or_default()
}

/// (manager, operation, subresource) of every managedFields entry, in order.
fn managers(v: &Value) -> Vec<(String, String, String)> {
    mf(v)
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or_default().to_string(),
                e["operation"].as_str().unwrap_or_default().to_string(),
                e["subresource"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn m3(m: &str, op: &str, sub: &str) -> (String, String, String) {
    (m.to_string(), op.to_string(), sub.to_string())
}

fn fields_of(v: &Value, manager: &str) -> Value {
    mf(v)
        .into_iter()
        .find(|e| e["manager"] == manager)
        .map(|e| e["fieldsV1"].clone())
        .unwrap_or(Value::Null)
}

/// Managers owning `.spec.replicas`.
fn replicas_owners(v: &Value) -> Vec<String> {
    mf(v)
        .iter()
        .filter(|e| e.pointer("/fieldsV1/f:spec/f:replicas").is_some())
        .map(|e| e["manager"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The Deployment most of Kubernetes' apply tests use.
fn nginx_deployment(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": "nginx"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]}
            }
        }
    })
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": {"test-label": "test"}},
        "data": {"key": "value"}})
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "test-container-a", "image": "test-image-one"}]}})
}

async fn setup() -> (ksync_sandbox::Sandbox, Client) {
    let sb = common::sandbox().await;
    let c = sb.client().await.expect("client");
    (sb, c)
}

fn dep(name: &str) -> String {
    format!("{DEPLOYS}/{name}")
}

// ---------------------------------------------------------------------------------------------
// test/integration/apiserver/apply/apply_test.go
// ---------------------------------------------------------------------------------------------

/// Ports apply_test.go TestApplyAlsoCreates: an apply creates a Pod and a Service (UDP port), and
/// a second manager re-applying the same body does not conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_also_creates() {
    let (_sb, c) = setup().await;
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "test-svc"},
        "spec": {"ports": [{"port": 8080, "protocol": "UDP"}]}});
    for (url, body) in
        [(format!("{PODS}/test-pod"), pod("test-pod")), (format!("{SVCS}/test-svc"), svc)]
    {
        ok(apply(&c, &url, "apply_test", &body).await);
        get(&c, &url).await;
        ok(apply(&c, &url, "apply_test_2", &body).await);
    }
}

/// Ports apply_test.go TestNoOpUpdateSameResourceVersion: a PUT of the object as read changes
/// nothing, so the resourceVersion stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_op_update_same_resource_version() {
    let (_sb, c) = setup().await;
    let body = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "no-op", "labels": {"a": "one", "c": "two", "b": "three"}},
        "spec": {"containers": [
            {"name": "test-container-a", "image": "test-image-one"},
            {"name": "test-container-c", "image": "test-image-two"},
            {"name": "test-container-b", "image": "test-image-three"}]}});
    ok(apply(&c, &format!("{PODS}/no-op"), "apply_test", &body).await);
    let created = get(&c, &format!("{PODS}/no-op")).await;
    let updated = ok(put(&c, &format!("{PODS}/no-op"), &created).await);
    assert_eq!(rv(&created), rv(&updated));
}

/// Ports apply_test.go TestNoOpApplyWithEmptyMap: re-applying a Deployment whose template has an
/// empty annotations map and whose container port omits `protocol` (keyed with the defaulted
/// `TCP`) changes nothing: same resourceVersion, same generation, one port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_op_apply_with_empty_map() {
    let (_sb, c) = setup().await;
    let mut body = nginx_deployment("no-op");
    body["spec"]["replicas"] = json!(1);
    body["spec"]["template"]["metadata"]["annotations"] = json!({});
    body["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.14.2");
    body["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80}]);
    ok(apply(&c, &dep("no-op"), "apply_test", &body).await);
    let created = get(&c, &dep("no-op")).await;
    ok(apply(&c, &dep("no-op"), "apply_test", &body).await);
    let updated = get(&c, &dep("no-op")).await;
    assert_eq!(rv(&created), rv(&updated), "{updated:#}");
    assert_eq!(created["metadata"]["generation"], updated["metadata"]["generation"]);
    let ports = &updated["spec"]["template"]["spec"]["containers"][0]["ports"];
    assert_eq!(ports, &json!([{"containerPort": 80, "protocol": "TCP"}]));
    assert_eq!(
        fields_of(&updated, "apply_test")["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"nginx\"}"]
            ["f:ports"],
        json!({"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}})
    );
}

/// Ports apply_test.go TestApplyEmptyMarkerStructDifferentFromNil: dropping an applied empty
/// `emptyDir: {}` is a change (the manager no longer owns it), not a no-op.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_empty_marker_struct_different_from_nil() {
    let (_sb, c) = setup().await;
    let url = format!("{PODS}/pod-with-empty-dir");
    let mut body = pod("pod-with-empty-dir");
    body["spec"]["containers"][0]["volumeMounts"] =
        json!([{"mountPath": "/cache", "name": "cache-volume"}]);
    body["spec"]["volumes"] = json!([{"name": "cache-volume", "emptyDir": {}}]);
    ok(apply(&c, &url, "apply_test", &body).await);
    let created = get(&c, &url).await;
    body["spec"]["volumes"] = json!([{"name": "cache-volume"}]);
    ok(apply(&c, &url, "apply_test", &body).await);
    let updated = get(&c, &url).await;
    assert_ne!(rv(&created), rv(&updated));
}

/// Ports apply_test.go TestNoopChangeCreationTime: applying the same ConfigMap twice (with null
/// creationTimestamp and resourceVersion) answers the identical object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noop_change_creation_time() {
    let (_sb, c) = setup().await;
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "myconfig", "creationTimestamp": null, "resourceVersion": null},
        "data": {"key": "value"}});
    let first = ok(apply(&c, &format!("{CMS}/myconfig"), "apply_test", &body).await);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let second = ok(apply(&c, &format!("{CMS}/myconfig"), "apply_test", &body).await);
    assert_eq!(first, second);
}

fn nginx_statefulset() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
    "metadata": {"name": "nginx", "labels": {"app": "nginx"}},
    "spec": {
        "serviceName": "nginx",
        "selector": {"matchLabels": {"app": "nginx"}},
        "template": {"metadata": {"labels": {"app": "nginx"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx",
                "resources": {"limits": {"memory": "2048Mi"}}}]}},
        "volumeClaimTemplates": [{"metadata": {"name": "nginx"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]
    }})
}

/// Ports apply_test.go TestNoSemanticUpdateApplySameResourceVersion: re-applying a StatefulSet
/// with no semantic change keeps the resourceVersion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_semantic_update_apply_same_resource_version() {
    let (_sb, c) = setup().await;
    let url = "/apis/apps/v1/namespaces/default/statefulsets/nginx";
    let a = ok(apply(&c, url, "apply_test", &nginx_statefulset()).await);
    let b = ok(apply(&c, url, "apply_test", &nginx_statefulset()).await);
    assert_eq!(rv(&a), rv(&b));
}

/// Ports apply_test.go TestNoSemanticUpdatePutSameResourceVersion: a PUT of the created body
/// (no defaults, no resourceVersion) is no semantic change and keeps the resourceVersion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_semantic_update_put_same_resource_version() {
    let (_sb, c) = setup().await;
    let coll = "/apis/apps/v1/namespaces/default/statefulsets";
    let a = ok(post(&c, &format!("{coll}?fieldManager=apply_test"), &nginx_statefulset()).await);
    let b =
        ok(put(&c, &format!("{coll}/nginx?fieldManager=apply_test"), &nginx_statefulset()).await);
    assert_eq!(rv(&a), rv(&b));
}

/// Ports apply_test.go TestCreateOnApplyFailsWithUID: an apply that would create an object but
/// names a uid is a 409 Conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_on_apply_fails_with_uid() {
    let (_sb, c) = setup().await;
    let mut body = pod("test-pod-uid");
    body["metadata"]["uid"] = json!("88e00824-7f0e-11e8-94a1-c8d3ffb15800");
    let e = err(apply(&c, &format!("{PODS}/test-pod-uid"), "apply_test", &body).await);
    assert_eq!(e["code"], 409, "{e:#}");
    assert_eq!(e["reason"], "Conflict");
    assert_eq!(
        e["message"],
        "Operation cannot be fulfilled on pods \"test-pod-uid\": uid mismatch: the provided object specified uid 88e00824-7f0e-11e8-94a1-c8d3ffb15800, and no existing object was found"
    );
}

/// Ports apply_test.go TestApplyUpdateApplyConflictForced: apply, merge-patch replicas, re-apply
/// conflicts (with causes), forcing succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_update_apply_conflict_forced() {
    let (_sb, c) = setup().await;
    let body = nginx_deployment("deployment");
    ok(apply(&c, &dep("deployment"), "apply_test", &body).await);
    ok(patch(&c, &dep("deployment"), MERGE, &json!({"spec": {"replicas": 5}})).await);
    let e = err(apply(&c, &dep("deployment"), "apply_test", &body).await);
    assert_eq!(e["code"], 409);
    assert!(!e["details"]["causes"].as_array().expect("causes").is_empty());
    let d = ok(apply_force(&c, &dep("deployment"), "apply_test", &body).await);
    assert_eq!(d["spec"]["replicas"], 3);
}

/// Ports apply_test.go TestApplyGroupsManySeparateUpdates: twenty updaters leave ten Update
/// entries at most; the oldest are merged into `ancient-changes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_groups_many_separate_updates() {
    let (_sb, c) = setup().await;
    let url = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/webhook";
    let body = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "webhook", "labels": {"applier": "true"}}});
    let mut obj = ok(apply(&c, url, "apply_test", &body).await);
    for i in 0..20 {
        let u = format!("updater{i}");
        obj = ok(patch(
            &c,
            &format!("{url}?fieldManager={u}"),
            MERGE,
            &json!({"metadata": {"labels": {u.clone(): "new"}}}),
        )
        .await);
    }
    let entries = mf(&obj);
    assert_eq!(entries.len(), 11, "{obj:#}");
    assert_eq!(entries[0]["manager"], "apply_test");
    assert_eq!(entries[1]["manager"], "ancient-changes");
}

/// Ports apply_test.go TestApplyManagedFields: the exact managedFields after an apply and two
/// merge patches by one updater (grouped into one entry with the latest time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_managed_fields() {
    let (_sb, c) = setup().await;
    let url = format!("{CMS}/test-cm");
    ok(apply(&c, &url, "apply_test", &configmap("test-cm")).await);
    let u = format!("{url}?fieldManager=updater");
    ok(patch(&c, &u, MERGE, &json!({"data": {"new-key": "value"}})).await);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    ok(patch(&c, &u, MERGE, &json!({"data": {"key": "new value"}})).await);
    let o = get(&c, &url).await;
    let e = mf(&o);
    assert_eq!(e.len(), 2, "{o:#}");
    assert_eq!(
        (&e[0]["manager"], &e[0]["operation"], &e[0]["apiVersion"], &e[0]["fieldsType"]),
        (&json!("apply_test"), &json!("Apply"), &json!("v1"), &json!("FieldsV1"))
    );
    assert_eq!(e[0]["fieldsV1"], json!({"f:metadata": {"f:labels": {"f:test-label": {}}}}));
    assert_eq!((&e[1]["manager"], &e[1]["operation"]), (&json!("updater"), &json!("Update")));
    assert_eq!(e[1]["fieldsV1"], json!({"f:data": {"f:key": {}, "f:new-key": {}}}));
    assert_ne!(e[0]["time"], e[1]["time"]);
    assert_eq!(o["data"], json!({"key": "new value", "new-key": "value"}));
}

/// Ports apply_test.go TestApplyRemovesEmptyManagedFields: an apply that owns nothing leaves no
/// managedFields entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_removes_empty_managed_fields() {
    let (_sb, c) = setup().await;
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "test-cm", "namespace": "default"}});
    ok(apply(&c, &format!("{CMS}/test-cm"), "apply_test", &body).await);
    ok(apply(&c, &format!("{CMS}/test-cm"), "apply_test", &body).await);
    let o = get(&c, &format!("{CMS}/test-cm")).await;
    assert!(o["metadata"].get("managedFields").is_none(), "{o:#}");
}

/// Ports apply_test.go TestApplyRequiresFieldManager: an apply without `fieldManager` is
/// rejected (kube-apiserver's PatchOptions validation, 422), with it it succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_requires_field_manager() {
    let (_sb, c) = setup().await;
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "test-cm", "namespace": "default"}});
    let e = err(patch(&c, &format!("{CMS}/test-cm"), APPLY, &body).await);
    assert_eq!(e["code"], 422, "{e:#}");
    assert_eq!(
        e["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    ok(apply(&c, &format!("{CMS}/test-cm"), "apply_test", &body).await);
}

/// Ports apply_test.go TestApplyRemoveContainerPort: the applier stops applying its only
/// container port; the port is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_remove_container_port() {
    let (_sb, c) = setup().await;
    let mut body = nginx_deployment("deployment");
    body["spec"]["template"]["spec"]["containers"][0]["ports"] =
        json!([{"containerPort": 80, "protocol": "TCP"}]);
    ok(apply(&c, &dep("deployment"), "apply_test", &body).await);
    let d = ok(apply(&c, &dep("deployment"), "apply_test", &nginx_deployment("deployment")).await);
    let c0 = &d["spec"]["template"]["spec"]["containers"][0];
    assert!(c0["ports"].as_array().is_none_or(|p| p.is_empty()), "{d:#}");
}

/// Ports apply_test.go TestApplyFailsWithVersionMismatch: an apply body of another group
/// version than the URL's is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_fails_with_version_mismatch() {
    let (_sb, c) = setup().await;
    ok(apply(&c, &dep("deployment"), "apply_test", &nginx_deployment("deployment")).await);
    let mut body = nginx_deployment("deployment");
    body["apiVersion"] = json!("extensions/v1beta");
    body["spec"]["replicas"] = json!(100);
    let e = err(apply(&c, &dep("deployment"), "apply_test", &body).await);
    assert_eq!(e["code"], 400, "{e:#}");
}

/// Ports apply_test.go TestApplyConvertsManagedFieldsVersion: a create carrying an entry of the
/// sidecar manager, then that manager's apply: two entries, the sidecar's at apps/v1 with exactly
/// the applied fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_converts_managed_fields_version() {
    let (_sb, c) = setup().await;
    let mut body = nginx_deployment("deployment");
    body["metadata"]["managedFields"] = json!([{
        "manager": "sidecar_controller", "operation": "Apply", "apiVersion": "extensions/v1beta1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {"f:sidecar_version": {}}},
            "f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"sidecar\"}": {".": {}, "f:image": {}}}}}}}
    }]);
    ok(post(&c, DEPLOYS, &body).await);
    let sidecar = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "deployment", "labels": {"sidecar_version": "release"}},
        "spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "sidecar:latest"}]}}}});
    let d = ok(apply(&c, &dep("deployment"), "sidecar_controller", &sidecar).await);
    let e = mf(&d);
    assert_eq!(e.len(), 2, "{d:#}");
    let s = e.iter().find(|e| e["manager"] == "sidecar_controller").expect("sidecar entry");
    assert_eq!(s["apiVersion"], "apps/v1");
    assert_eq!(s["operation"], "Apply");
    assert_eq!(
        s["fieldsV1"],
        json!({"f:metadata": {"f:labels": {"f:sidecar_version": {}}},
            "f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"sidecar\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}})
    );
}

async fn cleared(c: &Client, ct: &str, body: Value) -> Value {
    let url = format!("{CMS}/test-cm");
    ok(apply(c, &url, "apply_test", &configmap("test-cm")).await);
    if ct == "PUT" {
        ok(put(c, &url, &body).await);
    } else {
        ok(patch(c, &url, ct, &body).await);
    }
    let o = get(c, &url).await;
    assert!(mf(&o).is_empty(), "managedFields not cleared: {o:#}");
    assert_eq!(o["metadata"]["labels"], json!({"test-label": "test"}));
    o
}

/// Ports apply_test.go TestClearManagedFieldsWithMergePatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_managed_fields_with_merge_patch() {
    let (_sb, c) = setup().await;
    cleared(&c, MERGE, json!({"metadata": {"managedFields": [{}]}})).await;
}

/// Ports apply_test.go TestClearManagedFieldsWithStrategicMergePatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_managed_fields_with_strategic_merge_patch() {
    let (_sb, c) = setup().await;
    cleared(&c, SMP, json!({"metadata": {"managedFields": [{}]}})).await;
}

/// Ports apply_test.go TestClearManagedFieldsWithJSONPatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_managed_fields_with_json_patch() {
    let (_sb, c) = setup().await;
    cleared(
        &c,
        JSONPATCH,
        json!([{"op": "replace", "path": "/metadata/managedFields", "value": [{}]}]),
    )
    .await;
}

/// Ports apply_test.go TestClearManagedFieldsWithUpdate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_managed_fields_with_update() {
    let (_sb, c) = setup().await;
    let mut body = configmap("test-cm");
    body["metadata"]["managedFields"] = json!([{}]);
    cleared(&c, "PUT", body).await;
}

/// Ports apply_test.go TestClearManagedFieldsWithUpdateEmptyList: after a PUT with
/// `managedFields: []`, a later merge patch stays untracked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_managed_fields_with_update_empty_list() {
    let (_sb, c) = setup().await;
    let mut body = configmap("test-cm");
    body["metadata"]["managedFields"] = json!([]);
    cleared(&c, "PUT", body).await;
    let url = format!("{CMS}/test-cm");
    ok(patch(&c, &url, MERGE, &json!({"metadata": {"labels": {"test-label": "v1"}}})).await);
    let o = get(&c, &url).await;
    assert!(mf(&o).is_empty(), "tracking resumed: {o:#}");
    assert_eq!(o["metadata"]["labels"]["test-label"], "v1");
}

fn bad_entry() -> Value {
    json!([{"manager": "apply_test", "operation": "Apply", "apiVersion": "v1",
        "time": "2019-07-08T09:31:18Z", "fieldsType": "", "fieldsV1": {}}])
}

/// Ports apply_test.go TestErrorsDontFail: a create with a managedFields entry of empty
/// fieldsType succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_dont_fail() {
    let (_sb, c) = setup().await;
    let mut body = configmap("test-cm");
    body["metadata"]["managedFields"] = bad_entry();
    ok(post(&c, &format!("{CMS}?fieldManager=apply_test"), &body).await);
}

/// Ports apply_test.go TestErrorsDontFailUpdate: the same entry in a PUT succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_dont_fail_update() {
    let (_sb, c) = setup().await;
    ok(post(&c, &format!("{CMS}?fieldManager=apply_test"), &configmap("test-cm")).await);
    let mut body = configmap("test-cm");
    body["metadata"]["managedFields"] = bad_entry();
    ok(put(&c, &format!("{CMS}/test-cm?fieldManager=apply_test"), &body).await);
}

/// Ports apply_test.go TestErrorsDontFailPatch: the same entry through a JSON patch succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_dont_fail_patch() {
    let (_sb, c) = setup().await;
    ok(post(&c, &format!("{CMS}?fieldManager=apply_test"), &configmap("test-cm")).await);
    let p = json!([{"op": "replace", "path": "/metadata/managedFields", "value": bad_entry()}]);
    ok(patch(&c, &format!("{CMS}/test-cm?fieldManager=apply_test"), JSONPATCH, &p).await);
}

/// Ports apply_test.go TestApplyDoesNotChangeManagedFieldsViaSubresources: a merge patch to
/// `/status` whose body carries managedFields does not rewrite the main entries; it adds the
/// status updater's entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_does_not_change_managed_fields_via_subresources() {
    let (_sb, c) = setup().await;
    let live = ok(apply(&c, &format!("{PODS}/just-a-pod"), "apply_test", &pod("just-a-pod")).await);
    let body = json!({
        "metadata": {"managedFields": [{"manager": "testing", "operation": "Update", "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:containers": {"k:{\"name\":\"testing\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}]},
        "status": {"conditions": [{"type": "MyStatus", "status": "true"}]}
    });
    let new = ok(patch(
        &c,
        &format!("{PODS}/just-a-pod/status?fieldManager=update_managedfields_test"),
        MERGE,
        &body,
    )
    .await);
    let (l, n) = (mf(&live), mf(&new));
    assert_eq!(l.len(), 1, "{live:#}");
    assert_eq!(n.len(), 2, "{new:#}");
    assert_eq!(l[0], n[0]);
    assert_eq!(n[1]["manager"], "update_managedfields_test");
    assert_eq!(n[1]["subresource"], "status");
}

/// Ports apply_test.go TestApplyUnsetExclusivelyOwnedFields: fields only the applier owned and
/// no longer applies are removed (a defaulted one returns to its default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_unset_exclusively_owned_fields() {
    let (_sb, c) = setup().await;
    let url = dep("deployment-exclusive-unset");
    let mut body = nginx_deployment("deployment-exclusive-unset");
    body["spec"]["template"]["spec"]["hostname"] = json!("test-hostname");
    ok(apply(&c, &url, "apply_test", &body).await);
    let mut body = nginx_deployment("deployment-exclusive-unset");
    body["spec"].as_object_mut().expect("spec").remove("replicas");
    let d = ok(apply(&c, &url, "apply_test", &body).await);
    assert_eq!(d["spec"]["replicas"], 1);
    assert!(d["spec"]["template"]["spec"].get("hostname").is_none());
}

/// Ports apply_test.go TestApplyUnsetSharedFields: fields another applier also owns stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_unset_shared_fields() {
    let (_sb, c) = setup().await;
    let url = dep("deployment-shared-unset");
    let mut body = nginx_deployment("deployment-shared-unset");
    body["spec"]["template"]["spec"]["hostname"] = json!("test-hostname");
    for m in ["shared_owner_1", "shared_owner_2"] {
        ok(apply(&c, &url, m, &body).await);
    }
    let mut body = nginx_deployment("deployment-shared-unset");
    body["spec"].as_object_mut().expect("spec").remove("replicas");
    let d = ok(apply(&c, &url, "shared_owner_1", &body).await);
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["spec"]["template"]["spec"]["hostname"], "test-hostname");
}

/// Ports apply_test.go TestApplyCanTransferFieldOwnershipToController: a controller's update
/// takes replicas over; when the applier stops applying them the value persists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_can_transfer_field_ownership_to_controller() {
    let (_sb, c) = setup().await;
    let url = dep("deployment-shared-map-item-removal");
    let mut applied = ok(apply(
        &c,
        &url,
        "test_applier",
        &nginx_deployment("deployment-shared-map-item-removal"),
    )
    .await);
    applied["spec"]["replicas"] = json!(4);
    ok(put(&c, &format!("{url}?fieldManager=test_updater"), &applied).await);
    let mut body = nginx_deployment("deployment-shared-map-item-removal");
    body["spec"].as_object_mut().expect("spec").remove("replicas");
    let d = ok(apply(&c, &url, "test_applier", &body).await);
    assert_eq!(d["spec"]["replicas"], 4);
}

/// Ports apply_test.go TestApplyCanRemoveMapItemsContributedToByControllers: a controller sets
/// workingDir in the applier's container; the applier replaces the container by another one and
/// the old container goes whole (no nameless stub with the controller's field).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_can_remove_map_items_contributed_to_by_controllers() {
    let (_sb, c) = setup().await;
    let url = dep("deployment-shared-map-item-removal");
    let mut body = nginx_deployment("deployment-shared-map-item-removal");
    body["spec"].as_object_mut().expect("spec").remove("replicas");
    let mut applied = ok(apply(&c, &url, "test_applier", &body).await);
    applied["spec"]["template"]["spec"]["containers"][0]["workingDir"] = json!("/home/replacement");
    ok(put(&c, &format!("{url}?fieldManager=test_updater"), &applied).await);
    let mut body = nginx_deployment("deployment-shared-map-item-removal");
    body["spec"]["template"]["spec"]["hostname"] = json!("test-hostname");
    body["spec"]["template"]["spec"]["containers"][0]["name"] = json!("other-container");
    let d = ok(apply(&c, &url, "test_applier", &body).await);
    let cs = d["spec"]["template"]["spec"]["containers"].as_array().expect("containers");
    assert_eq!(cs.len(), 1, "{d:#}");
    assert_eq!(cs[0]["name"], "other-container");
    // Nobody owns fields of the removed container any more.
    assert!(!d["metadata"]["managedFields"].to_string().contains("nginx\\\"}"), "{d:#}");
}

/// Ports apply_test.go TestDefaultMissingKeys: a port applied without protocol is keyed with the
/// defaulted `TCP`, so another applier renaming the same port (protocol given) gets exactly one
/// conflict, on the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_missing_keys() {
    let (_sb, c) = setup().await;
    let url = dep("deployment-shared-map-item-removal");
    let mut body = nginx_deployment("deployment-shared-map-item-removal");
    body["spec"].as_object_mut().expect("spec").remove("replicas");
    body["spec"]["template"]["spec"]["containers"][0]["ports"] =
        json!([{"name": "foo", "containerPort": 80}]);
    ok(apply(&c, &url, "test_applier", &body).await);
    body["spec"]["template"]["spec"]["containers"][0]["ports"] =
        json!([{"name": "bar", "containerPort": 80, "protocol": "TCP"}]);
    let e = err(apply(&c, &url, "test_applier_conflict", &body).await);
    assert_eq!(e["code"], 409);
    let causes = e["details"]["causes"].as_array().expect("causes");
    assert_eq!(causes.len(), 1, "{e:#}");
    assert_eq!(
        causes[0]["field"],
        ".spec.template.spec.containers[name=\"nginx\"].ports[containerPort=80,protocol=\"TCP\"].name"
    );
    let d = get(&c, &url).await;
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["ports"].as_array().map(Vec::len),
        Some(1)
    );
}

/// Ports apply_test.go TestUpgradeClientSideToServerSideApply: kubectl's manager may take over
/// fields still holding their last-applied value, but not replicas changed since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_client_side_to_server_side_apply() {
    let (_sb, c) = setup().await;
    let last = r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"my-deployment","labels":{"app":"my-app"}},"spec":{"replicas": 3,"template":{"metadata":{"labels":{"app":"my-app"}},"spec":{"containers":[{"name":"my-c","image":"my-image"}]}}}}"#;
    let created = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "my-deployment", "labels": {"app": "my-app"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": last}},
        "spec": {"replicas": 100000, "selector": {"matchLabels": {"app": "my-app"}},
            "template": {"metadata": {"labels": {"app": "my-app"}},
                "spec": {"containers": [{"name": "my-c", "image": "my-image"}]}}}});
    ok(post(&c, DEPLOYS, &created).await);
    let url = dep("my-deployment");
    let mut body = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "my-deployment", "labels": {"app": "my-new-label"}},
        "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "my-app"}},
            "spec": {"containers": [{"name": "my-c", "image": "my-image"}]}}}});
    let e = err(apply(&c, &url, "kubectl", &body).await);
    assert_eq!(e["code"], 409, "{e:#}");
    body["spec"].as_object_mut().expect("spec").remove("replicas");
    body["spec"]["template"]["spec"]["containers"][0]["image"] = json!("my-image-new");
    ok(apply(&c, &url, "kubectl", &body).await);
    let d = get(&c, &url).await;
    assert_eq!(d["spec"]["replicas"], 100000);
    assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["image"], "my-image-new");
}

/// Ports apply_test.go TestRenamingAppliedFieldManagers: renaming both apply entries to one name
/// in a PUT leaves one entry (the later one's fields).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renaming_applied_field_managers() {
    let (_sb, c) = setup().await;
    let url = format!("{PODS}/just-a-pod");
    let mut body = pod("just-a-pod");
    body["metadata"]["labels"] = json!({"a": "one"});
    ok(apply(&c, &url, "multi_manager_one", &body).await);
    let two = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"b": "two"}}});
    ok(apply(&c, &url, "multi_manager_two", &two).await);
    let mut p = get(&c, &url).await;
    assert_eq!(p["metadata"]["labels"], json!({"a": "one", "b": "two"}));
    for e in p["metadata"]["managedFields"].as_array_mut().expect("entries") {
        e["manager"] = json!("multi_manager");
    }
    let o = ok(put(&c, &url, &p).await);
    let e = mf(&o);
    assert_eq!(e.len(), 1, "{o:#}");
    assert_eq!((&e[0]["manager"], &e[0]["operation"]), (&json!("multi_manager"), &json!("Apply")));
    assert_eq!(e[0]["fieldsV1"], json!({"f:metadata": {"f:labels": {"f:b": {}}}}));
}

/// Ports apply_test.go TestRenamingUpdatedFieldManagers: the same with two Update entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renaming_updated_field_managers() {
    let (_sb, c) = setup().await;
    let url = format!("{PODS}/just-a-pod");
    ok(apply(&c, &url, "first", &pod("just-a-pod")).await);
    let one = json!({"metadata": {"labels": {"a": "one"}}});
    ok(patch(&c, &format!("{url}?fieldManager=multi_manager_one"), MERGE, &one).await);
    let two = json!({"metadata": {"labels": {"b": "two"}}});
    ok(patch(&c, &format!("{url}?fieldManager=multi_manager_two"), MERGE, &two).await);
    let mut p = get(&c, &url).await;
    assert_eq!(p["metadata"]["labels"], json!({"a": "one", "b": "two"}));
    for e in p["metadata"]["managedFields"].as_array_mut().expect("entries") {
        e["manager"] = json!("multi_manager");
    }
    let o = ok(put(&c, &url, &p).await);
    let e = mf(&o);
    assert_eq!(e.len(), 2, "{o:#}");
    assert_eq!((&e[1]["manager"], &e[1]["operation"]), (&json!("multi_manager"), &json!("Update")));
    assert_eq!(e[1]["fieldsV1"], json!({"f:metadata": {"f:labels": {"f:b": {}}}}));
}

/// Ports apply_test.go TestDroppingSubresourceFromSpecField: a main and a status entry of one
/// updater; clearing `subresource` in a PUT merges them (the later one stands).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_subresource_from_spec_field() {
    let (_sb, c) = setup().await;
    let url = format!("{PODS}/just-a-pod");
    ok(apply(&c, &url, "first", &pod("just-a-pod")).await);
    ok(patch(
        &c,
        &format!("{url}?fieldManager=manager"),
        MERGE,
        &json!({"metadata": {"labels": {"a": "two"}}}),
    )
    .await);
    ok(patch(
        &c,
        &format!("{url}/status?fieldManager=manager"),
        MERGE,
        &json!({"status": {"phase": "Running"}}),
    )
    .await);
    let mut p = get(&c, &url).await;
    assert_eq!(p["metadata"]["labels"], json!({"a": "two"}));
    assert_eq!(p["status"]["phase"], "Running");
    assert_eq!(
        managers(&p),
        vec![
            m3("first", "Apply", ""),
            m3("manager", "Update", ""),
            m3("manager", "Update", "status")
        ]
    );
    for e in p["metadata"]["managedFields"].as_array_mut().expect("entries") {
        if let Some(m) = e.as_object_mut() {
            m.remove("subresource");
        }
    }
    let o = ok(put(&c, &url, &p).await);
    let e = mf(&o);
    assert_eq!(e.len(), 2, "{o:#}");
    assert_eq!((&e[1]["manager"], &e[1]["operation"]), (&json!("manager"), &json!("Update")));
    assert_eq!(e[1]["fieldsV1"], json!({"f:status": {"f:phase": {}}}));
}

/// Ports apply_test.go TestSubresourceField: a merge patch of `/scale` is recorded as an Update
/// with `subresource: scale` owning `.spec.replicas`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subresource_field() {
    let (_sb, c) = setup().await;
    ok(apply(&c, &dep("deployment"), "manager", &nginx_deployment("deployment")).await);
    ok(patch(
        &c,
        &format!("{}/scale?fieldManager=manager", dep("deployment")),
        MERGE,
        &json!({"spec": {"replicas": 32}}),
    )
    .await);
    let d = get(&c, &dep("deployment")).await;
    assert_eq!(managers(&d), vec![m3("manager", "Apply", ""), m3("manager", "Update", "scale")]);
    assert_eq!(mf(&d)[1]["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    assert_eq!(mf(&d)[1]["apiVersion"], "apps/v1");
}

// ---------------------------------------------------------------------------------------------
// test/integration/apiserver/apply/scale_test.go
// ---------------------------------------------------------------------------------------------

fn scale_body(replicas: i64) -> Value {
    json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": "test", "namespace": "default"}, "spec": {"replicas": replicas}})
}

/// Ports scale_test.go TestScaleAllResources: for Deployment, StatefulSet, ReplicaSet and
/// ReplicationController, ownership of replicas moves between apply, `/scale` merge patches,
/// `/scale` applies (conflicting, then forced), `/scale` PUTs and co-owning applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_all_resources() {
    let (_sb, c) = setup().await;
    let apps = |kind: &str| {
        json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "test"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "nginx"}},
                "template": {"metadata": {"labels": {"app": "nginx"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]}}}})
    };
    let rc = json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "test"},
        "spec": {"replicas": 1, "selector": {"app": "nginx"},
            "template": {"metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]}}}});
    let cases = [
        ("/apis/apps/v1/namespaces/default/deployments/test", apps("Deployment")),
        ("/apis/apps/v1/namespaces/default/statefulsets/test", apps("StatefulSet")),
        ("/apis/apps/v1/namespaces/default/replicasets/test", apps("ReplicaSet")),
        ("/api/v1/namespaces/default/replicationcontrollers/test", rc),
    ];
    for (url, body) in cases {
        let scale = format!("{url}/scale");
        let check = async |want: i64, owners: &[&str]| {
            let o = get(&c, url).await;
            assert_eq!(o["spec"]["replicas"], want, "{url}: {o:#}");
            let mut got = replicas_owners(&o);
            got.sort();
            let mut owners: Vec<String> = owners.iter().map(|s| s.to_string()).collect();
            owners.sort();
            assert_eq!(got, owners, "{url}: {o:#}");
        };
        ok(apply(&c, url, "apply_test", &body).await);
        check(1, &["apply_test"]).await;
        ok(patch(
            &c,
            &format!("{scale}?fieldManager=scale_test"),
            MERGE,
            &json!({"spec": {"replicas": 5}}),
        )
        .await);
        check(5, &["scale_test"]).await;
        assert_eq!(err(apply(&c, url, "apply_test", &body).await)["code"], 409);
        ok(apply_force(&c, url, "apply_test", &body).await);
        check(1, &["apply_test"]).await;
        let e = err(apply(&c, &scale, "apply_scale", &scale_body(17)).await);
        assert_eq!(e["code"], 409, "{e:#}");
        assert!(e["message"].as_str().unwrap_or_default().contains("apply_test"), "{e:#}");
        ok(apply_force(&c, &scale, "apply_scale", &scale_body(17)).await);
        check(17, &["apply_scale"]).await;
        ok(put(&c, &format!("{scale}?fieldManager=replace_test"), &scale_body(7)).await);
        check(7, &["replace_test"]).await;
        ok(apply(&c, &scale, "co_owning_test", &scale_body(7)).await);
        check(7, &["replace_test", "co_owning_test"]).await;
        ok(patch(
            &c,
            &format!("{scale}?fieldManager=scale_test"),
            MERGE,
            &json!({"spec": {"replicas": 5}}),
        )
        .await);
        check(5, &["scale_test"]).await;
    }
}

/// Ports scale_test.go TestScaleUpdateOnlyStatus: a `/scale` patch touching only status changes
/// neither replicas nor their ownership.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_update_only_status() {
    let (_sb, c) = setup().await;
    let mut body = nginx_deployment("test");
    body["spec"]["replicas"] = json!(1);
    ok(apply(&c, &dep("test"), "apply_test", &body).await);
    ok(patch(
        &c,
        &format!("{}/scale?fieldManager=scale_test", dep("test")),
        MERGE,
        &json!({"status": {"replicas": 42}}),
    )
    .await);
    let d = get(&c, &dep("test")).await;
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(replicas_owners(&d), vec!["apply_test".to_string()]);
}

// ---------------------------------------------------------------------------------------------
// status_test.go, reset_fields_test.go
// ---------------------------------------------------------------------------------------------

/// Ports status_test.go TestApplyStatus (for a Deployment): an apply to `/status` is recorded
/// with `subresource: status`, owns only status fields and leaves the spec alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_status() {
    let (_sb, c) = setup().await;
    ok(apply(&c, &dep("deployment"), "create_test", &nginx_deployment("deployment")).await);
    let mut status = nginx_deployment("deployment");
    status["spec"]["replicas"] = json!(9);
    status["status"] = json!({"replicas": 3, "observedGeneration": 1});
    let d =
        ok(apply(&c, &format!("{}/status", dep("deployment")), "apply_status_test", &status).await);
    assert_eq!(d["spec"]["replicas"], 3, "status endpoint changed the spec: {d:#}");
    assert_eq!(d["status"]["replicas"], 3);
    assert!(managers(&d).contains(&m3("apply_status_test", "Apply", "status")), "{d:#}");
    assert_eq!(
        fields_of(&d, "apply_status_test"),
        json!({"f:status": {"f:observedGeneration": {}, "f:replicas": {}}})
    );
}

/// Ports reset_fields_test.go TestApplyResetFields (for a Deployment): fields a write resets (the
/// main endpoint resets status, the status endpoint resets the spec) are not owned, so two
/// managers applying both endpoints with different values never conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_reset_fields() {
    let (_sb, c) = setup().await;
    let mut obj1 = nginx_deployment("deployment");
    obj1["status"] = json!({"replicas": 1});
    let mut obj2 = nginx_deployment("deployment");
    obj2["spec"]["replicas"] = json!(7);
    obj2["status"] = json!({"replicas": 2});
    ok(apply(&c, &dep("deployment"), "fieldmanager_main", &obj1).await);
    ok(apply(&c, &format!("{}/status", dep("deployment")), "fieldmanager_status", &obj2).await);
    let d = ok(apply(&c, &dep("deployment"), "fieldmanager_main", &obj1).await);
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["status"]["replicas"], 2);
    assert!(fields_of(&d, "fieldmanager_main").get("f:status").is_none(), "{d:#}");
    assert!(fields_of(&d, "fieldmanager_status").get("f:spec").is_none(), "{d:#}");
}

// ---------------------------------------------------------------------------------------------
// staging/src/k8s.io/apimachinery/pkg/util/managedfields (fieldmanager_test.go,
// internal/skipnonapplied_test.go, internal/capmanagers_test.go)
// ---------------------------------------------------------------------------------------------

/// Ports managedfields/fieldmanager_test.go TestUpdateApplyConflict: an object created by an
/// update conflicts with another manager's apply of a changed field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_apply_conflict() {
    let (_sb, c) = setup().await;
    ok(post(
        &c,
        &format!("{DEPLOYS}?fieldManager=fieldmanager_test"),
        &nginx_deployment("deployment"),
    )
    .await);
    let body = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "deployment"}, "spec": {"replicas": 101}});
    let e = err(apply(&c, &dep("deployment"), "fieldmanager_conflict", &body).await);
    assert_eq!(e["code"], 409);
    assert_eq!(
        e["message"],
        "Apply failed with 1 conflict: conflict with \"fieldmanager_test\" using apps/v1: .spec.replicas"
    );
}

/// Ports managedfields/fieldmanager_test.go TestApplyFailsWithManagedFields: an apply
/// configuration carrying managedFields is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_fails_with_managed_fields() {
    let (_sb, c) = setup().await;
    let mut body = pod("p");
    body["metadata"]["managedFields"] = json!([{"manager": "test"}]);
    let e = err(apply(&c, &format!("{PODS}/p"), "fieldmanager_test", &body).await);
    assert_eq!(e["code"], 400, "{e:#}");
    assert_eq!(e["reason"], "BadRequest");
    assert_eq!(e["message"], "metadata.managedFields must be nil");
}

/// Ports managedfields/fieldmanager_test.go TestApplySuccessWithNoManagedFields and
/// TestApplyDoesNotStripLabels: an apply of labels only succeeds and is tracked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_success_with_no_managed_fields() {
    let (_sb, c) = setup().await;
    ok(apply(&c, &format!("{PODS}/p"), "first", &pod("p")).await);
    let body = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"a": "b"}}});
    let p = ok(apply(&c, &format!("{PODS}/p"), "fieldmanager_test", &body).await);
    assert_eq!(
        fields_of(&p, "fieldmanager_test"),
        json!({"f:metadata": {"f:labels": {"f:a": {}}}})
    );
}

/// Ports managedfields/fieldmanager_test.go TestNoOpChanges: a second applier of the same
/// configuration changes the object (a new entry); a no-op update and a no-op forced re-apply
/// do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_op_changes() {
    let (_sb, c) = setup().await;
    let url = format!("{PODS}/p");
    let mut body = pod("p");
    body["metadata"]["labels"] = json!({"a": "b"});
    let a = ok(apply(&c, &url, "fieldmanager_test_apply", &body).await);
    let b = ok(apply(&c, &url, "fieldmanager_test_apply_other", &body).await);
    assert_ne!(rv(&a), rv(&b));
    let u = ok(put(&c, &format!("{url}?fieldManager=fieldmanager_test_update"), &b).await);
    assert_eq!(u, b);
    let f = ok(apply_force(&c, &url, "fieldmanager_test_apply", &body).await);
    assert_eq!(f, b);
}

/// Ports internal/skipnonapplied_test.go TestNoUpdateBeforeFirstApply: an apply-create is
/// tracked with exactly the applier's entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_update_before_first_apply() {
    let (_sb, c) = setup().await;
    let mut body = pod("pod");
    body["metadata"]["labels"] = json!({"app": "nginx"});
    let p = ok(apply(&c, &format!("{PODS}/pod"), "fieldmanager_test_apply", &body).await);
    assert_eq!(managers(&p), vec![m3("fieldmanager_test_apply", "Apply", "")]);
}

/// Ports internal/skipnonapplied_test.go TestUpdateBeforeFirstApply: once managedFields are
/// reset, updates are not tracked; the first apply conflicts with `before-first-apply` on the
/// one field it changes, and forcing leaves the applier and `before-first-apply`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_before_first_apply() {
    let (_sb, c) = setup().await;
    let url = format!("{PODS}/pod");
    let mut body = pod("pod");
    body["spec"]["containers"][0] = json!({"name": "nginx", "image": "nginx:latest"});
    body["metadata"]["labels"] = json!({"app": "nginx"});
    ok(post(&c, PODS, &body).await);
    ok(patch(&c, &url, MERGE, &json!({"metadata": {"managedFields": []}})).await);
    let p = ok(patch(
        &c,
        &format!("{url}?fieldManager=fieldmanager_test_update"),
        MERGE,
        &json!({"metadata": {"labels": {"app": "my-nginx"}}}),
    )
    .await);
    assert!(mf(&p).is_empty(), "update was tracked: {p:#}");
    let e = err(apply(&c, &url, "fieldmanager_test_apply", &body).await);
    let causes = e["details"]["causes"].as_array().expect("causes");
    assert_eq!(causes.len(), 1, "{e:#}");
    assert_eq!(causes[0]["field"], ".metadata.labels.app");
    assert!(causes[0]["message"].as_str().unwrap_or_default().contains("before-first-apply"));
    let p = ok(apply_force(&c, &url, "fieldmanager_test_apply", &body).await);
    let m = managers(&p);
    assert_eq!(m.len(), 2, "{p:#}");
    assert_eq!(m[0].0, "fieldmanager_test_apply");
    assert_eq!(m[1].0, "before-first-apply");
}

/// Ports internal/capmanagers_test.go TestCapUpdateManagers: with more than ten updaters the
/// oldest are merged into `ancient-changes`, whose fields are the union of theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cap_update_managers() {
    let (_sb, c) = setup().await;
    let url = format!("{CMS}/c");
    ok(post(
        &c,
        &format!("{CMS}?fieldManager=creator"),
        &json!({"metadata": {"name": "c"}, "data": {"x": "0"}}),
    )
    .await);
    for i in 0..12 {
        let p = json!({"data": {format!("k{i}"): "v"}});
        ok(patch(&c, &format!("{url}?fieldManager=updater{i:02}"), MERGE, &p).await);
    }
    let o = get(&c, &url).await;
    let e = mf(&o);
    assert_eq!(e.len(), 10, "{o:#}");
    let bucket = fields_of(&o, "ancient-changes");
    // creator, updater00..updater02 went into the bucket.
    assert_eq!(
        bucket,
        json!({"f:data": {".": {}, "f:x": {}, "f:k0": {}, "f:k1": {}, "f:k2": {}}}),
        "{o:#}"
    );
    assert!(e.iter().all(|e| e["manager"] != "creator" && e["manager"] != "updater00"));
}
