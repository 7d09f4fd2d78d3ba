//! Priority 3: server-side apply (ownership, conflicts worded as kube-apiserver, force, removal
//! of fields an applier stops applying), Update tracking, patches and dry-run, via kube-rs and kubectl.

mod common;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

fn status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or_default().to_string(),
                e["operation"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn fields_of<'a>(obj: &'a Value, manager: &str) -> &'a Value {
    obj["metadata"]["managedFields"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["manager"] == manager))
        .map(|e| &e["fieldsV1"])
        .unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_ownership_conflicts_force_and_removal() {
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cfg = |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data});

    let a = PatchParams::apply("alpha");
    let b = PatchParams::apply("beta");
    let c = cms
        .patch("c", &a, &Patch::Apply(cfg(json!({"x": "1", "y": "2"}))))
        .await
        .expect("create by apply");
    let v = serde_json::to_value(&c).expect("json");
    assert_eq!(managers(&v), vec![("alpha".to_string(), "Apply".to_string())]);
    assert_eq!(fields_of(&v, "alpha"), &json!({"f:data": {"f:x": {}, "f:y": {}}}));

    // Same value: shared ownership, no conflict.
    cms.patch("c", &b, &Patch::Apply(cfg(json!({"y": "2"})))).await.expect("co-own");
    // Different value: 409 in kube-apiserver's words.
    let e = status(
        cms.patch("c", &b, &Patch::Apply(cfg(json!({"x": "9"})))).await.expect_err("conflict"),
    );
    assert_eq!(e.code, 409);
    assert_eq!(e.reason, "Conflict");
    assert_eq!(e.message, "Apply failed with 1 conflict: conflict with \"alpha\": .data.x");
    let raw = serde_json::to_value(&e).expect("status json");
    assert_eq!(
        raw["details"]["causes"],
        json!([{"reason": "FieldManagerConflict", "message": "conflict with \"alpha\"", "field": ".data.x"}])
    );

    // Force takes the field over.
    let c = cms
        .patch("c", &b.clone().force(), &Patch::Apply(cfg(json!({"x": "9", "y": "2"}))))
        .await
        .expect("force");
    let v = serde_json::to_value(&c).expect("json");
    assert_eq!(c.data.as_ref().and_then(|d| d.get("x")).map(String::as_str), Some("9"));
    assert_eq!(fields_of(&v, "alpha"), &json!({"f:data": {"f:y": {}}}));
    assert_eq!(fields_of(&v, "beta"), &json!({"f:data": {"f:x": {}, "f:y": {}}}));

    // alpha stops applying y: beta still owns it, so it stays.
    let c = cms.patch("c", &a, &Patch::Apply(cfg(json!({"z": "3"})))).await.expect("apply");
    assert_eq!(c.data.as_ref().map(|d| d.len()), Some(3));
    // beta stops applying x and y: nobody owns them, they go.
    let c = cms.patch("c", &b, &Patch::Apply(cfg(json!({})))).await.expect("apply");
    let keys: Vec<&String> = c.data.as_ref().map(|d| d.keys().collect()).unwrap_or_default();
    assert_eq!(keys, vec!["z"]);

    // An Update (merge patch) takes ownership of what it changes.
    let c = cms
        .patch(
            "c",
            &PatchParams { field_manager: Some("editor".into()), ..Default::default() },
            &Patch::Merge(json!({"data": {"z": "4"}})),
        )
        .await
        .expect("merge");
    let v = serde_json::to_value(&c).expect("json");
    assert!(managers(&v).contains(&("editor".to_string(), "Update".to_string())));
    let e = status(
        cms.patch("c", &a, &Patch::Apply(cfg(json!({"z": "5"}))))
            .await
            .expect_err("conflict with updater"),
    );
    assert_eq!(
        e.message,
        "Apply failed with 1 conflict: conflict with \"editor\" using v1: .data.z"
    );

    // Several conflicts are grouped by manager.
    cms.patch(
        "c",
        &PatchParams { field_manager: Some("ed2".into()), ..Default::default() },
        &Patch::Merge(json!({"data": {"q": "1"}})),
    )
    .await
    .expect("merge");
    let e = status(
        cms.patch("c", &a, &Patch::Apply(cfg(json!({"z": "5", "q": "2"}))))
            .await
            .expect_err("conflicts"),
    );
    assert_eq!(
        e.message,
        "Apply failed with 2 conflicts: conflicts with \"ed2\" using v1:\n- .data.q\nconflicts with \"editor\" using v1:\n- .data.z"
    );

    // dryRun=All on apply changes nothing.
    let before = cms.get("c").await.expect("get");
    let mut pp = a.clone().force();
    pp.dry_run = true;
    let dry =
        cms.patch("c", &pp, &Patch::Apply(cfg(json!({"dry": "run"})))).await.expect("dry apply");
    assert!(dry.data.as_ref().is_some_and(|d| d.contains_key("dry")));
    let after = cms.get("c").await.expect("get");
    assert_eq!(before.metadata.resource_version, after.metadata.resource_version);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_merges_associative_lists_by_key() {
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let deps: Api<Deployment> = Api::namespaced(client, "default");
    let dep = |containers: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
               "spec": {"selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}}}})
    };
    deps.patch(
        "web",
        &PatchParams::apply("base"),
        &Patch::Apply(dep(json!([{"name": "app", "image": "app:1"}]))),
    )
    .await
    .expect("base");
    let d = deps
        .patch("web", &PatchParams::apply("sidecar"), &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"template": {"spec": {"containers": [{"name": "proxy", "image": "envoy:1"}]}}}})))
        .await
        .expect("sidecar");
    let v = serde_json::to_value(&d).expect("json");
    let names: Vec<&str> = v["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, vec!["app", "proxy"]);
    assert_eq!(
        fields_of(&v, "sidecar")["f:spec"]["f:template"]["f:spec"]["f:containers"],
        json!({"k:{\"name\":\"proxy\"}": {".": {}, "f:image": {}, "f:name": {}}})
    );
    // The selector is an atomic map: owned whole.
    assert_eq!(fields_of(&v, "base")["f:spec"]["f:selector"], json!({}));
    // The sidecar manager drops its container: removed.
    let d = deps
        .patch(
            "web",
            &PatchParams::apply("sidecar"),
            &Patch::Apply(
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}),
            ),
        )
        .await
        .expect("sidecar gone");
    let n = d.spec.as_ref().and_then(|s| s.template.spec.as_ref()).map(|s| s.containers.len());
    assert_eq!(n, Some(1));
}

const DEPLOY: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: REPLICAS
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_client_side_then_server_side_conflicts_and_force() {
    let sb = common::sandbox().await;
    let out =
        common::kubectl_stdin_ok(&sb, &["apply", "-f", "-"], &DEPLOY.replace("REPLICAS", "2"))
            .await;
    assert_eq!(out.trim(), "deployment.apps/web created");
    let out =
        common::kubectl_stdin_ok(&sb, &["apply", "-f", "-"], &DEPLOY.replace("REPLICAS", "2"))
            .await;
    assert_eq!(out.trim(), "deployment.apps/web unchanged");

    let changed = DEPLOY.replace("REPLICAS", "5");
    let o = common::kubectl_in(
        &sb,
        &["apply", "--server-side", "--field-manager=ci", "-f", "-"],
        Some(&changed),
    )
    .await;
    assert!(!o.status.success());
    let err = common::stderr(&o);
    assert!(
        err.starts_with("error: Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using apps/v1: .spec.replicas\nPlease review the fields above--they currently have other managers."),
        "{err}"
    );
    let out = common::kubectl_stdin_ok(
        &sb,
        &["apply", "--server-side", "--field-manager=ci", "--force-conflicts", "-f", "-"],
        &changed,
    )
    .await;
    assert_eq!(out.trim(), "deployment.apps/web serverside-applied");
    let y =
        common::kubectl_ok(&sb, &["get", "deploy", "web", "-o", "json", "--show-managed-fields"])
            .await;
    let v: Value = serde_json::from_str(&y).expect("json");
    assert_eq!(v["spec"]["replicas"], 5);
    assert_eq!(fields_of(&v, "ci")["f:spec"]["f:replicas"], json!({}));
    assert!(fields_of(&v, "kubectl-client-side-apply")["f:spec"].get("f:replicas").is_none());

    // kubectl's own upgrade from client-side to server-side apply (default manager "kubectl").
    let out = common::kubectl_stdin_ok(
        &sb,
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        &DEPLOY.replace("REPLICAS", "3"),
    )
    .await;
    assert_eq!(out.trim(), "deployment.apps/web serverside-applied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_upgrades_client_side_to_server_side_and_edit_is_tracked() {
    let sb = common::sandbox().await;
    common::kubectl_stdin_ok(&sb, &["apply", "-f", "-"], &DEPLOY.replace("REPLICAS", "2")).await;
    // kubectl migrates kubectl-client-side-apply's fields to its own apply manager first (it
    // patches managedFields), so switching to --server-side does not conflict.
    let out = common::kubectl_stdin_ok(
        &sb,
        &["apply", "--server-side", "-f", "-"],
        &DEPLOY.replace("REPLICAS", "3"),
    )
    .await;
    assert_eq!(out.trim(), "deployment.apps/web serverside-applied");
    let v: Value = serde_json::from_str(
        &common::kubectl_ok(&sb, &["get", "deploy", "web", "-o", "json", "--show-managed-fields"])
            .await,
    )
    .expect("json");
    assert_eq!(v["spec"]["replicas"], 3);
    assert_eq!(fields_of(&v, "kubectl")["f:spec"]["f:replicas"], json!({}));

    // kubectl edit (strategic merge patch under the kubectl-edit manager).
    let out = tokio::process::Command::new(common::KUBECTL)
        .arg("--kubeconfig")
        .arg(sb.kubeconfig_path())
        .args(["edit", "deploy", "web"])
        .env("KUBE_EDITOR", "sed -i s/nginx:1.27/nginx:1.28/")
        .output()
        .await
        .expect("kubectl edit");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "deployment.apps/web edited");
    let v: Value = serde_json::from_str(
        &common::kubectl_ok(&sb, &["get", "deploy", "web", "-o", "json", "--show-managed-fields"])
            .await,
    )
    .expect("json");
    assert_eq!(v["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.28");
    assert!(
        managers(&v).contains(&("kubectl-edit".to_string(), "Update".to_string())),
        "{:?}",
        managers(&v)
    );
    // Another applier setting the old image now conflicts with the editor.
    let o = common::kubectl_in(
        &sb,
        &["apply", "--server-side", "--field-manager=ci", "-f", "-"],
        Some(&DEPLOY.replace("REPLICAS", "3")),
    )
    .await;
    assert!(
        common::stderr(&o).starts_with("error: Apply failed with 1 conflict: conflict with \"kubectl-edit\" using apps/v1: .spec.template.spec.containers[name=\"nginx\"].image"),
        "{}",
        common::stderr(&o)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_runtime_controller_runs_against_the_sandbox() {
    use futures::StreamExt;
    use kube::runtime::controller::{Action, Controller};
    use std::sync::Arc;
    use std::time::Duration;

    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    #[derive(Debug)]
    struct Err;
    impl std::fmt::Display for Err {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "reconcile error")
        }
    }
    impl std::error::Error for Err {}
    async fn reconcile(cm: Arc<ConfigMap>, api: Arc<Api<ConfigMap>>) -> Result<Action, Err> {
        let name = cm.metadata.name.clone().unwrap_or_default();
        if cm.metadata.annotations.as_ref().and_then(|a| a.get("reconciled")).is_none() {
            let patch = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "annotations": {"reconciled": "yes"}}});
            api.patch(&name, &PatchParams::apply("test-controller"), &Patch::Apply(patch))
                .await
                .map_err(|_| Err)?;
        }
        Ok(Action::await_change())
    }
    let ctl = Controller::new(cms.clone(), kube::runtime::watcher::Config::default())
        .run(reconcile, |_, _, _| Action::requeue(Duration::from_secs(1)), Arc::new(cms.clone()))
        .for_each(|_| async {});
    let task = tokio::spawn(ctl);
    for i in 0..5 {
        cms.patch(&format!("c{i}"), &PatchParams::apply("test"), &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}")}, "data": {"i": i.to_string()}})))
            .await
            .expect("create");
    }
    common::wait_for("all reconciled", Duration::from_secs(20), || {
        let cms = cms.clone();
        async move {
            let mut l = cms.list(&Default::default()).await.ok()?;
            // Every namespace also holds kube-root-ca.crt (reconciled too).
            l.items.retain(|c| c.metadata.name.as_deref() != Some("kube-root-ca.crt"));
            (l.items.len() == 5
                && l.items.iter().all(|c| {
                    c.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("reconciled"))
                }))
            .then_some(())
        }
    })
    .await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleared_managed_fields_become_before_first_apply() {
    let sb = common::sandbox().await;
    common::kubectl_ok(&sb, &["create", "configmap", "c", "--from-literal=k=v"]).await;
    // Clearing managedFields (https://kubernetes.io/docs/reference/using-api/server-side-apply/#clearing-managedfields).
    common::kubectl_ok(
        &sb,
        &[
            "patch",
            "cm",
            "c",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/metadata/managedFields","value":[{}]}]"#,
        ],
    )
    .await;
    let v: Value = serde_json::from_str(
        &common::kubectl_ok(&sb, &["get", "cm", "c", "-o", "json", "--show-managed-fields"]).await,
    )
    .expect("json");
    assert!(v["metadata"].get("managedFields").is_none(), "{v}");
    let cfg = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {k: v2}\n";
    let o = common::kubectl_in(
        &sb,
        &["apply", "--server-side", "--field-manager=ci", "-f", "-"],
        Some(cfg),
    )
    .await;
    assert!(
        common::stderr(&o).starts_with("error: Apply failed with 1 conflict: conflict with \"before-first-apply\" using v1: .data.k"),
        "{}",
        common::stderr(&o)
    );
}
