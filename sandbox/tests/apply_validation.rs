//! Server-side apply through the real kubectl (no-op re-apply, `kubectl diff --server-side`,
//! misspelled fields), `fieldValidation` of non-apply writes, patch options, generation rules,
//! custom resources and dry-run. Each test names the Kubernetes test or document section it ports.

mod common;

use kube::Client;
use serde_json::{Value, json};

const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
const APPLY: &str = "application/apply-patch+yaml";
const MERGE: &str = "application/merge-patch+json";

/// (status code, `Warning` headers) of a request; the body is not read.
async fn status_and_warnings(
    c: &Client,
    method: &str,
    url: &str,
    ct: &str,
    body: &Value,
) -> (u16, Vec<String>) {
    let req = axum::http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", ct)
        .body(kube::client::Body::from(serde_json::to_vec(body).expect("json")))
        .expect("request");
    let resp = c.send(req).await.expect("response");
    let warnings = resp
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(|w| {
            // `299 - "text"`
            let t = w.strip_prefix("299 - \"").unwrap_or(w);
            t.strip_suffix('"').unwrap_or(t).replace("\\\"", "\"")
        })
        .collect();
    (resp.status().as_u16(), warnings)
}

async fn send(c: &Client, method: &str, url: &str, ct: &str, body: &Value) -> Result<Value, Value> {
    let req = axum::http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", ct)
        .body(serde_json::to_vec(body).expect("json"))
        .expect("request");
    match c.request_text(req).await {
        Ok(t) => Ok(serde_json::from_str(&t).expect("json answer")),
        Err(kube::Error::Api(s)) => Err(serde_json::to_value(&*s).expect("status")),
        Err(e) => panic!("{method} {url}: {e}"),
    }
}

async fn get(c: &Client, url: &str) -> Value {
    send(c, "GET", url, "application/json", &Value::Null).await.expect("get")
}

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]}}}})
}

const WEB: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports:
        - name: http
          containerPort: 8080
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
  - name: http
    port: 80
    targetPort: 8080
"#;

fn rv_gen(v: &Value) -> (Value, Value) {
    (v["metadata"]["resourceVersion"].clone(), v["metadata"]["generation"].clone())
}

/// Ports apply_test.go TestNoOpApplyWithEmptyMap through kubectl, with the `kubectl diff
/// --server-side` check of
/// <https://kubernetes.io/docs/reference/using-api/server-side-apply/#comparison-with-client-side-apply>:
/// re-applying an unchanged Deployment and Service whose ports omit `protocol` keeps
/// resourceVersion and generation, keeps one port each, and the server-side diff is empty (exit 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reapply_of_unchanged_manifests_is_a_noop() {
    let sb = common::sandbox().await;
    let args = ["apply", "--server-side", "--field-manager=ksync", "-f", "-"];
    common::kubectl_stdin_ok(&sb, &args, WEB).await;
    let get_json = async |what: &str| -> Value {
        serde_json::from_str(&common::kubectl_ok(&sb, &["get", what, "web", "-o", "json"]).await)
            .expect("json")
    };
    let (d1, s1) = (get_json("deploy").await, get_json("svc").await);
    let out = common::kubectl_stdin_ok(&sb, &args, WEB).await;
    assert!(out.contains("deployment.apps/web serverside-applied"), "{out}");
    let (d2, s2) = (get_json("deploy").await, get_json("svc").await);
    assert_eq!(rv_gen(&d1), rv_gen(&d2), "{d2:#}");
    assert_eq!(rv_gen(&s1), rv_gen(&s2), "{s2:#}");
    assert_eq!(
        d2["spec"]["template"]["spec"]["containers"][0]["ports"],
        json!([{"name": "http", "containerPort": 8080, "protocol": "TCP"}])
    );
    assert_eq!(
        s2["spec"]["ports"],
        json!([{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}])
    );
    let o = common::kubectl_in(
        &sb,
        &["diff", "--server-side", "--field-manager=ksync", "-f", "-"],
        Some(WEB),
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}{}", common::stdout(&o), common::stderr(&o));
    assert_eq!(common::stdout(&o), "");
}

/// Ports apply_test.go TestDefaultMissingKeys through kubectl: another manager renaming the port
/// the first applied without `protocol` conflicts on the port's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_second_manager_renaming_a_defaulted_port_conflicts() {
    let sb = common::sandbox().await;
    common::kubectl_stdin_ok(
        &sb,
        &["apply", "--server-side", "--field-manager=ksync", "-f", "-"],
        WEB,
    )
    .await;
    let renamed = WEB.replacen(
        "- name: http\n          containerPort",
        "- name: web\n          containerPort",
        1,
    );
    let o = common::kubectl_in(
        &sb,
        &["apply", "--server-side", "--field-manager=other", "-f", "-"],
        Some(&renamed),
    )
    .await;
    assert!(!o.status.success());
    let err = common::stderr(&o);
    assert!(
        err.contains("Apply failed with 1 conflict: conflict with \"ksync\": .spec.template.spec.containers[name=\"web\"].ports[containerPort=8080,protocol=\"TCP\"].name"),
        "{err}"
    );
}

/// kube-apiserver's server-side apply converts the configuration to the built-in type first and
/// rejects a field the schema does not declare (structured-merge-diff's typed conversion,
/// surfaced as documented in
/// <https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation>): kubectl
/// prints `Error from server (BadRequest): ... .spec.replcas: field not declared in schema`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_server_side_apply_rejects_a_misspelled_field() {
    let sb = common::sandbox().await;
    let typo = WEB.split("---").next().expect("deployment").replace("replicas: 2", "replcas: 2");
    let o = common::kubectl_in(&sb, &["apply", "--server-side", "-f", "-"], Some(&typo)).await;
    assert!(!o.status.success());
    let err = common::stderr(&o);
    assert!(err.starts_with("Error from server (BadRequest): "), "{err}");
    assert!(
        err.trim_end().ends_with("failed to create typed patch object (default/web; apps/v1, Kind=Deployment): .spec.replcas: field not declared in schema"),
        "{err}"
    );
    let o = common::kubectl(&sb, &["get", "deploy", "web"]).await;
    assert!(!o.status.success(), "the misspelled apply created the Deployment");
}

/// The same typed conversion over HTTP names every undeclared field by its structured path,
/// list items by their keys (see kubectl_server_side_apply_rejects_a_misspelled_field).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_names_every_undeclared_field() {
    let sb = common::sandbox().await;
    let c = sb.client().await.expect("client");
    let mut body = deployment("web");
    body["spec"]["replcas"] = json!(2);
    body["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = json!("Always");
    let e = send(&c, "PATCH", &format!("{DEPLOYS}/web?fieldManager=ci"), APPLY, &body)
        .await
        .expect_err("rejected");
    assert_eq!(e["code"], 400);
    assert_eq!(e["reason"], "BadRequest");
    assert_eq!(
        e["message"],
        "failed to create typed patch object (default/web; apps/v1, Kind=Deployment): errors:\n  .spec.replcas: field not declared in schema\n  .spec.template.spec.containers[name=\"nginx\"].imagePullPolcy: field not declared in schema"
    );
}

/// Ports field_validation_test.go testFieldValidationPost: Strict fails with the strict decoding
/// error, Warn (also the default) answers warnings, Ignore neither; the unknown fields are not
/// stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_field_validation() {
    let sb = common::sandbox().await;
    let c = sb.client().await.expect("client");
    let body = |name: &str| {
        let mut b = deployment(name);
        b["spec"]["unknown1"] = json!("val1");
        b["spec"]["template"]["spec"]["containers"][0]["unknownNested"] = json!("val1");
        b
    };
    let e = send(
        &c,
        "POST",
        &format!("{DEPLOYS}?fieldValidation=Strict"),
        "application/json",
        &body("strict"),
    )
    .await
    .expect_err("strict");
    assert_eq!(e["code"], 400);
    assert!(
        e["message"].as_str().unwrap_or_default().ends_with(
            "strict decoding error: unknown field \"spec.template.spec.containers[0].unknownNested\", unknown field \"spec.unknown1\""
        ),
        "{e:#}"
    );
    for (q, name, want) in [
        ("?fieldValidation=Warn", "warn", 2),
        ("", "none", 2),
        ("?fieldValidation=Ignore", "ignore", 0),
    ] {
        let (code, w) = status_and_warnings(
            &c,
            "POST",
            &format!("{DEPLOYS}{q}"),
            "application/json",
            &body(name),
        )
        .await;
        assert_eq!(code, 201);
        assert_eq!(w.len(), want, "{name}: {w:?}");
        if want > 0 {
            assert_eq!(w[1], "unknown field \"spec.unknown1\"");
        }
        let d = get(&c, &format!("{DEPLOYS}/{name}")).await;
        assert!(d["spec"].get("unknown1").is_none(), "{d:#}");
        assert!(d["spec"]["template"]["spec"]["containers"][0].get("unknownNested").is_none());
    }
}

/// Ports field_validation_test.go testFieldValidationPut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_field_validation() {
    let sb = common::sandbox().await;
    let c = sb.client().await.expect("client");
    send(&c, "POST", DEPLOYS, "application/json", &deployment("test-deployment-put"))
        .await
        .expect("post");
    let url = format!("{DEPLOYS}/test-deployment-put");
    let mut body = deployment("test-deployment-put");
    body["metadata"]["unknownMeta"] = json!("metaVal");
    body["spec"]["unknown1"] = json!("val1");
    let e = send(&c, "PUT", &format!("{url}?fieldValidation=Strict"), "application/json", &body)
        .await
        .expect_err("strict");
    assert!(
        e["message"].as_str().unwrap_or_default().ends_with(
            "strict decoding error: unknown field \"metadata.unknownMeta\", unknown field \"spec.unknown1\""
        ),
        "{e:#}"
    );
    let (code, w) = status_and_warnings(
        &c,
        "PUT",
        &format!("{url}?fieldValidation=Warn"),
        "application/json",
        &body,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        w,
        vec!["unknown field \"metadata.unknownMeta\"", "unknown field \"spec.unknown1\""]
    );
    let (code, w) = status_and_warnings(
        &c,
        "PUT",
        &format!("{url}?fieldValidation=Ignore"),
        "application/json",
        &body,
    )
    .await;
    assert_eq!((code, w.len()), (200, 0));
    let d = get(&c, &url).await;
    assert!(
        d["metadata"].get("unknownMeta").is_none() && d["spec"].get("unknown1").is_none(),
        "{d:#}"
    );
}

/// Ports field_validation_test.go testFieldValidationPatchTyped (merge-patch cases): Strict is a
/// 422 whose message ends with the strict decoding error; Warn and the default warn; Ignore is
/// silent; nothing unknown is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_patch_field_validation() {
    let sb = common::sandbox().await;
    let c = sb.client().await.expect("client");
    send(&c, "POST", DEPLOYS, "application/json", &deployment("test-deployment-patch-typed"))
        .await
        .expect("post");
    let url = format!("{DEPLOYS}/test-deployment-patch-typed");
    let p = json!({"spec": {"unknown1": "val1", "paused": false,
        "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:latest", "unknownNested": "val1"}]}}}});
    let e = send(&c, "PATCH", &format!("{url}?fieldValidation=Strict"), MERGE, &p)
        .await
        .expect_err("strict");
    assert_eq!(e["code"], 422, "{e:#}");
    assert!(
        e["message"].as_str().unwrap_or_default().ends_with(
            "strict decoding error: unknown field \"spec.template.spec.containers[0].unknownNested\", unknown field \"spec.unknown1\""
        ),
        "{e:#}"
    );
    let want = vec![
        "unknown field \"spec.template.spec.containers[0].unknownNested\"".to_string(),
        "unknown field \"spec.unknown1\"".to_string(),
    ];
    for q in ["?fieldValidation=Warn", ""] {
        let (code, w) = status_and_warnings(&c, "PATCH", &format!("{url}{q}"), MERGE, &p).await;
        assert_eq!((code, &w), (200, &want), "{q}");
    }
    let (code, w) =
        status_and_warnings(&c, "PATCH", &format!("{url}?fieldValidation=Ignore"), MERGE, &p).await;
    assert_eq!((code, w.len()), (200, 0));
    let d = get(&c, &url).await;
    assert!(d["spec"].get("unknown1").is_none(), "{d:#}");
}

/// Ports field_validation_test.go testFieldValidationPatchTyped (json-patch cases, the unknown
/// fields of the patched object).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_patch_field_validation() {
    let sb = common::sandbox().await;
    let c = sb.client().await.expect("client");
    send(&c, "POST", DEPLOYS, "application/json", &deployment("jp")).await.expect("post");
    let url = format!("{DEPLOYS}/jp");
    let p = json!([{"op": "add", "path": "/spec/unknown1", "value": "val1"},
        {"op": "add", "path": "/spec/template/spec/containers/0/unknownNested", "value": "val1"}]);
    let jp = "application/json-patch+json";
    let e = send(&c, "PATCH", &format!("{url}?fieldValidation=Strict"), jp, &p)
        .await
        .expect_err("strict");
    assert!(
        e["message"].as_str().unwrap_or_default().ends_with(
            "strict decoding error: unknown field \"spec.template.spec.containers[0].unknownNested\", unknown field \"spec.unknown1\""
        ),
        "{e:#}"
    );
    let (code, w) = status_and_warnings(&c, "PATCH", &url, jp, &p).await;
    assert_eq!((code, w.len()), (200, 2), "{w:?}");
}

/// evanphx/json-patch, which kube-apiserver uses, passes a `test` for null at a member missing
/// from an existing object (clients add the first finalizer that way), and still fails a `test`
/// for null at a member that holds a value, or under a parent that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_patch_test_for_null_passes_on_a_missing_member() {
    let sb = common::sandbox().await;
    let c = sb.client().await.expect("client");
    send(&c, "POST", DEPLOYS, "application/json", &deployment("fin")).await.expect("post");
    let url = format!("{DEPLOYS}/fin");
    let jp = "application/json-patch+json";
    let add = json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["example.com/cleanup"]}]);
    send(&c, "PATCH", &url, jp, &add).await.expect("test for null on a missing member passes");
    let d = get(&c, &url).await;
    assert_eq!(d["metadata"]["finalizers"], json!(["example.com/cleanup"]), "{d:#}");
    let again = send(&c, "PATCH", &url, jp, &add).await.expect_err("the member now holds a list");
    assert_eq!(again["code"], 422, "{again:#}");
    let nowhere = json!([{"op": "test", "path": "/nothing/here", "value": null}]);
    let e = send(&c, "PATCH", &url, jp, &nowhere).await.expect_err("missing parent");
    assert_eq!(e["code"], 422, "{e:#}");
}

/// `force` is only for apply patches (API reference, PatchOptions.force: "This field must be unset
/// for non-apply patch requests"; kube-apiserver's ValidatePatchOptions): 422.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_on_a_non_apply_patch_is_invalid() {
    let sb = common::sandbox().await;
    let c = sb.client().await.expect("client");
    send(&c, "POST", DEPLOYS, "application/json", &deployment("web")).await.expect("post");
    let e = send(
        &c,
        "PATCH",
        &format!("{DEPLOYS}/web?force=true"),
        MERGE,
        &json!({"spec": {"replicas": 2}}),
    )
    .await
    .expect_err("invalid");
    assert_eq!(e["code"], 422);
    assert_eq!(e["reason"], "Invalid");
    assert_eq!(
        e["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
    );
}

/// `metadata.generation` of a Deployment (API reference ObjectMeta.generation; the apps
/// Deployment strategy bumps it on spec and annotation changes because annotations are copied to
/// its ReplicaSets): spec and annotation changes move it, label and status changes do not; a
/// ReplicaSet's annotations do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_generation_moves_on_spec_and_annotations_only() {
    let sb = common::sandbox().await;
    let c = sb.client().await.expect("client");
    let url = format!("{DEPLOYS}/web");
    let gen_after = async |p: Value, sub: &str| -> i64 {
        let v = send(&c, "PATCH", &format!("{url}{sub}"), MERGE, &p).await.expect("patch");
        v["metadata"]["generation"].as_i64().expect("generation")
    };
    let d = send(&c, "PATCH", &format!("{url}?fieldManager=ci"), APPLY, &deployment("web"))
        .await
        .expect("apply");
    assert_eq!(d["metadata"]["generation"], 1);
    assert_eq!(gen_after(json!({"metadata": {"labels": {"tier": "web"}}}), "").await, 1);
    assert_eq!(gen_after(json!({"status": {"replicas": 4}}), "/status").await, 1);
    assert_eq!(gen_after(json!({"metadata": {"annotations": {"note": "x"}}}), "").await, 2);
    assert_eq!(gen_after(json!({"spec": {"replicas": 3}}), "").await, 3);
    assert_eq!(gen_after(json!({"metadata": {"annotations": {"note": "x"}}}), "").await, 3);

    let rs_url = "/apis/apps/v1/namespaces/default/replicasets/web";
    let mut rs = deployment("web");
    rs["kind"] = json!("ReplicaSet");
    send(&c, "PATCH", &format!("{rs_url}?fieldManager=ci"), APPLY, &rs).await.expect("rs");
    let v = send(&c, "PATCH", rs_url, MERGE, &json!({"metadata": {"annotations": {"note": "x"}}}))
        .await
        .expect("rs patch");
    assert_eq!(v["metadata"]["generation"], 1);
}

fn noxu_crd(status_subresource: bool, structural: bool) -> Value {
    let schema = if structural {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
                "cronSpec": {"type": "string"},
                "replicas": {"type": "integer"},
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                    "items": {"type": "object", "required": ["containerPort", "protocol"], "properties": {
                        "containerPort": {"type": "integer", "format": "int32"},
                        "hostIP": {"type": "string"}, "hostPort": {"type": "integer", "format": "int32"},
                        "name": {"type": "string"}, "protocol": {"type": "string"}}}}}},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}})
    } else {
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
    };
    let mut version = json!({"name": "v1beta1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": schema}});
    if status_subresource {
        version["subresources"] = json!({"status": {}});
    }
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "noxus.mygroup.example.com"},
        "spec": {"group": "mygroup.example.com", "scope": "Cluster",
            "names": {"plural": "noxus", "singular": "nonenglishnoxu", "kind": "WishIHadChosenNoxu", "listKind": "NoxuItemList"},
            "versions": [version]}})
}

const NOXUS: &str = "/apis/mygroup.example.com/v1beta1/noxus";

async fn install(c: &Client, crd: &Value) {
    send(
        c,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "application/json",
        crd,
    )
    .await
    .expect("crd");
    common::wait_for("noxus served", std::time::Duration::from_secs(10), || async {
        send(c, "GET", NOXUS, "application/json", &Value::Null).await.ok().map(|_| ())
    })
    .await;
}

fn noxu(body: Value) -> Value {
    let mut b = json!({"apiVersion": "mygroup.example.com/v1beta1", "kind": "WishIHadChosenNoxu",
        "metadata": {"name": "mytest"}});
    for (k, v) in body.as_object().expect("object") {
        b[k] = v.clone();
    }
    b
}

/// Ports apply_crd_test.go TestApplyCRDNoSchema: a custom resource without a schema is created by
/// apply; after a merge patch of replicas a re-apply has exactly one conflict; forcing wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_crd_no_schema() {
    let sb = common::sandbox().await;
    let c = sb.client().await.expect("client");
    install(&c, &noxu_crd(false, false)).await;
    let url = format!("{NOXUS}/mytest");
    let body = noxu(json!({"spec": {"replicas": 1}}));
    let v = send(&c, "PATCH", &format!("{url}?fieldManager=apply_test"), APPLY, &body)
        .await
        .expect("create");
    assert_eq!(v["spec"]["replicas"], 1);
    let v = send(&c, "PATCH", &url, MERGE, &json!({"spec": {"replicas": 5}})).await.expect("merge");
    assert_eq!(v["spec"]["replicas"], 5);
    let e = send(&c, "PATCH", &format!("{url}?fieldManager=apply_test"), APPLY, &body)
        .await
        .expect_err("conflict");
    assert_eq!(e["details"]["causes"].as_array().map(Vec::len), Some(1), "{e:#}");
    let v = send(&c, "PATCH", &format!("{url}?fieldManager=apply_test&force=true"), APPLY, &body)
        .await
        .expect("force");
    assert_eq!(v["spec"]["replicas"], 1);
}

/// Ports apply_crd_test.go TestApplyCRDStructuralSchema: finalizers merge as a set, a re-apply
/// after a replicas merge patch conflicts once, another applier editing the applied list-map item
/// conflicts once, adding its own item works, and a PUT never creates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_crd_structural_schema() {
    let sb = common::sandbox().await;
    let c = sb.client().await.expect("client");
    install(&c, &noxu_crd(false, true)).await;
    let url = format!("{NOXUS}/mytest");
    let mut body = noxu(json!({"spec": {"cronSpec": "* * * * */5", "replicas": 1,
        "ports": [{"name": "x", "containerPort": 80, "protocol": "TCP"}]}}));
    body["metadata"]["finalizers"] = json!(["test-finalizer"]);
    let apply = async |m: &str, b: &Value, force: bool| {
        let f = if force { "&force=true" } else { "" };
        send(&c, "PATCH", &format!("{url}?fieldManager={m}{f}"), APPLY, b).await
    };
    let v = apply("apply_test", &body, false).await.expect("create");
    assert_eq!(v["metadata"]["finalizers"], json!(["test-finalizer"]));
    assert_eq!(v["spec"]["ports"].as_array().map(Vec::len), Some(1));
    send(
        &c,
        "PATCH",
        &url,
        MERGE,
        &json!({"metadata": {"finalizers": ["test-finalizer", "another-one"]}}),
    )
    .await
    .expect("finalizer");
    let v = apply("apply_test", &body, false).await.expect("same config");
    assert_eq!(v["metadata"]["finalizers"], json!(["test-finalizer", "another-one"]));
    send(&c, "PATCH", &url, MERGE, &json!({"spec": {"replicas": 5}})).await.expect("replicas");
    let e = apply("apply_test", &body, false).await.expect_err("conflict");
    assert_eq!(e["details"]["causes"].as_array().map(Vec::len), Some(1), "{e:#}");
    let v = apply("apply_test", &body, true).await.expect("force");
    assert_eq!(v["spec"]["replicas"], 1);
    let other = |port: i64| {
        noxu(json!({"spec": {"ports": [{"name": "y", "containerPort": port, "protocol": "TCP"}]}}))
    };
    let e = apply("apply_test_2", &other(80), false).await.expect_err("item conflict");
    assert_eq!(e["details"]["causes"].as_array().map(Vec::len), Some(1), "{e:#}");
    let v = apply("apply_test_2", &other(8080), false).await.expect("new item");
    assert_eq!(v["spec"]["ports"].as_array().map(Vec::len), Some(2));
    let e = send(
        &c,
        "PUT",
        &format!("{NOXUS}/should-not-exist"),
        "application/json",
        &noxu(json!({"metadata": {"name": "should-not-exist"}, "spec": {"replicas": 1}})),
    )
    .await
    .expect_err("no create on update");
    assert_eq!(e["code"], 404);
}

/// Custom resources' generation
/// (<https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#status-subresource>):
/// with the status subresource, status changes do not move it; without it, every change but
/// metadata does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resource_generation_follows_the_status_subresource() {
    for (status_subresource, want) in [(true, 1), (false, 2)] {
        let sb = common::sandbox().await;
        let c = sb.client().await.expect("client");
        install(&c, &noxu_crd(status_subresource, true)).await;
        let url = format!("{NOXUS}/mytest");
        let v = send(
            &c,
            "PATCH",
            &format!("{url}?fieldManager=t"),
            APPLY,
            &noxu(json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect("create");
        assert_eq!(v["metadata"]["generation"], 1);
        let sub = if status_subresource { "/status" } else { "" };
        let v =
            send(&c, "PATCH", &format!("{url}{sub}"), MERGE, &json!({"status": {"ready": true}}))
                .await
                .expect("status");
        assert_eq!(v["metadata"]["generation"], want, "status subresource {status_subresource}");
        let v = send(&c, "PATCH", &url, MERGE, &json!({"metadata": {"labels": {"a": "b"}}}))
            .await
            .expect("label");
        assert_eq!(v["metadata"]["generation"], want);
    }
}

/// Ports test/integration/dryrun/dryrun_test.go TestDryRun for apply: an apply-create with
/// `dryRun=All` answers the object it would create and stores nothing; a dry-run apply of a
/// change answers the change and leaves the object alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_apply_stores_nothing() {
    let sb = common::sandbox().await;
    let c = sb.client().await.expect("client");
    let url = format!("{DEPLOYS}/web");
    let v =
        send(&c, "PATCH", &format!("{url}?fieldManager=ci&dryRun=All"), APPLY, &deployment("web"))
            .await
            .expect("dry create");
    assert_eq!(v["metadata"]["name"], "web");
    assert!(v["metadata"].get("resourceVersion").is_none(), "{v:#}");
    let e = send(&c, "GET", &url, "application/json", &Value::Null).await.expect_err("not stored");
    assert_eq!(e["code"], 404);
    let live = send(&c, "PATCH", &format!("{url}?fieldManager=ci"), APPLY, &deployment("web"))
        .await
        .expect("create");
    let mut changed = deployment("web");
    changed["spec"]["replicas"] = json!(7);
    let v = send(&c, "PATCH", &format!("{url}?fieldManager=ci&dryRun=All"), APPLY, &changed)
        .await
        .expect("dry");
    assert_eq!(v["spec"]["replicas"], 7);
    assert_eq!(v["metadata"]["generation"], 2);
    let now = get(&c, &url).await;
    assert_eq!(now, live);
}
