//! The real kubectl against the sandbox: create, get, label, annotate, patch, scale, delete,
//! wait, api-resources and CRDs.

mod common;

use common::{kubectl, kubectl_ok, kubectl_stdin_ok, stderr};
use serde_json::Value;
use std::time::Duration;

const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  labels: {app: web}\ndata:\n  k: v\n";

const DEPLOY: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        env:
        - {name: A, value: "1"}
      - name: side
        image: busybox:1.36
"#;

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget, shortNames: [wd]}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
          status:
            type: object
            properties:
              conditions:
                type: array
                items:
                  type: object
                  properties:
                    type: {type: string}
                    status: {type: string}
"#;

fn json(s: &str) -> Value {
    serde_json::from_str(s).expect("kubectl printed JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_get_label_annotate_patch_delete() {
    let sb = common::sandbox().await;
    assert_eq!(
        kubectl_stdin_ok(&sb, &["create", "-f", "-"], CM).await.trim(),
        "configmap/cfg created"
    );
    let o = common::kubectl_in(&sb, &["create", "-f", "-"], Some(CM)).await;
    assert_eq!(
        stderr(&o).trim(),
        "Error from server (AlreadyExists): error when creating \"STDIN\": configmaps \"cfg\" already exists"
    );

    let y = kubectl_ok(&sb, &["get", "configmap", "cfg", "-o", "yaml"]).await;
    assert!(
        y.contains("  name: cfg\n")
            && y.contains("  k: v\n")
            && y.contains("uid: ")
            && y.contains("resourceVersion: "),
        "{y}"
    );
    let v = json(&kubectl_ok(&sb, &["get", "cm", "-o", "json"]).await);
    assert_eq!(v["kind"], "List");
    assert_eq!(v["items"][0]["metadata"]["name"], "cfg");

    let o = kubectl(&sb, &["get", "cm", "nope"]).await;
    assert_eq!(stderr(&o).trim(), "Error from server (NotFound): configmaps \"nope\" not found");

    assert_eq!(
        kubectl_ok(&sb, &["label", "cm", "cfg", "tier=front"]).await.trim(),
        "configmap/cfg labeled"
    );
    assert_eq!(
        kubectl_ok(&sb, &["annotate", "cm", "cfg", "note=hello"]).await.trim(),
        "configmap/cfg annotated"
    );
    assert_eq!(
        kubectl_ok(&sb, &["patch", "cm", "cfg", "--type=merge", "-p", r#"{"data":{"m":"1"}}"#])
            .await
            .trim(),
        "configmap/cfg patched"
    );
    assert_eq!(
        kubectl_ok(
            &sb,
            &[
                "patch",
                "cm",
                "cfg",
                "--type=json",
                "-p",
                r#"[{"op":"add","path":"/data/j","value":"2"}]"#
            ]
        )
        .await
        .trim(),
        "configmap/cfg patched"
    );
    let v = json(&kubectl_ok(&sb, &["get", "cm", "cfg", "-o", "json"]).await);
    assert_eq!(v["metadata"]["labels"]["tier"], "front");
    assert_eq!(v["metadata"]["annotations"]["note"], "hello");
    assert_eq!(v["data"], serde_json::json!({"k": "v", "m": "1", "j": "2"}));
    let names = kubectl_ok(&sb, &["get", "cm", "-l", "tier=front", "-o", "name"]).await;
    assert_eq!(names.trim(), "configmap/cfg");
    let names =
        kubectl_ok(&sb, &["get", "cm", "--field-selector", "metadata.name!=cfg", "-o", "name"])
            .await;
    assert_eq!(names.trim(), "configmap/kube-root-ca.crt");

    // dry-run=server changes nothing.
    kubectl_ok(&sb, &["label", "cm", "cfg", "dry=run", "--dry-run=server"]).await;
    let v = json(&kubectl_ok(&sb, &["get", "cm", "cfg", "-o", "json"]).await);
    assert!(v["metadata"]["labels"].get("dry").is_none());

    assert_eq!(kubectl_ok(&sb, &["delete", "cm", "cfg"]).await.trim(), "configmap \"cfg\" deleted");
    let o = kubectl(&sb, &["get", "cm", "cfg"]).await;
    assert!(!o.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategic_merge_scale_and_cascade() {
    let sb = common::sandbox().await;
    kubectl_stdin_ok(&sb, &["apply", "-f", "-"], DEPLOY).await;
    // Strategic merge: containers merge by name, env by name.
    kubectl_ok(&sb, &["patch", "deploy", "web", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"name":"nginx","image":"nginx:1.28","env":[{"name":"B","value":"2"}]}]}}}}"#]).await;
    let v = json(&kubectl_ok(&sb, &["get", "deploy", "web", "-o", "json"]).await);
    let cs = &v["spec"]["template"]["spec"]["containers"];
    assert_eq!(cs.as_array().map(Vec::len), Some(2), "{cs}");
    assert_eq!(cs[0]["image"], "nginx:1.28");
    let env: Vec<&str> =
        cs[0]["env"].as_array().expect("env").iter().filter_map(|e| e["name"].as_str()).collect();
    assert_eq!(env, vec!["A", "B"]);
    assert_eq!(v["metadata"]["generation"], 2);

    assert_eq!(
        kubectl_ok(&sb, &["scale", "deploy", "web", "--replicas=4"]).await.trim(),
        "deployment.apps/web scaled"
    );
    let v = json(&kubectl_ok(&sb, &["get", "deploy", "web", "-o", "json"]).await);
    assert_eq!(v["spec"]["replicas"], 4);

    // An owned ConfigMap goes with its owner (cascade=background); with orphan it stays.
    let uid = v["metadata"]["uid"].as_str().expect("uid").to_string();
    let owned = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: owned\n  ownerReferences:\n  - {{apiVersion: apps/v1, kind: Deployment, name: web, uid: {uid}}}\n"
    );
    kubectl_stdin_ok(&sb, &["create", "-f", "-"], &owned).await;
    assert_eq!(
        kubectl_ok(&sb, &["delete", "deploy", "web", "--cascade=foreground"]).await.trim(),
        "deployment.apps \"web\" deleted"
    );
    common::wait_for("dependent deleted", Duration::from_secs(10), || async {
        let o = kubectl(&sb, &["get", "cm", "owned", "-o", "name"]).await;
        (!o.status.success()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_namespaces_and_wait() {
    let sb = common::sandbox().await;
    assert_eq!(
        kubectl_ok(&sb, &["create", "namespace", "team"]).await.trim(),
        "namespace/team created"
    );
    let held = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  namespace: team\n  finalizers: [example.com/hold]\n";
    kubectl_stdin_ok(&sb, &["create", "-f", "-"], held).await;
    assert_eq!(
        kubectl_ok(&sb, &["delete", "cm", "held", "-n", "team", "--wait=false"]).await.trim(),
        "configmap \"held\" deleted"
    );
    let v = json(&kubectl_ok(&sb, &["get", "cm", "held", "-n", "team", "-o", "json"]).await);
    assert!(v["metadata"]["deletionTimestamp"].is_string());
    // Namespace deletion waits for the finalizer.
    kubectl_ok(&sb, &["delete", "ns", "team", "--wait=false"]).await;
    let v = json(&kubectl_ok(&sb, &["get", "ns", "team", "-o", "json"]).await);
    assert_eq!(v["status"]["phase"], "Terminating");
    let o = common::kubectl_in(
        &sb,
        &["create", "-f", "-"],
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: late, namespace: team}\n"),
    )
    .await;
    assert!(
        stderr(&o).contains(
            "unable to create new content in namespace team because it is being terminated"
        ),
        "{}",
        stderr(&o)
    );
    kubectl_ok(
        &sb,
        &[
            "patch",
            "cm",
            "held",
            "-n",
            "team",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
    )
    .await;
    kubectl_ok(&sb, &["wait", "--for=delete", "namespace/team", "--timeout=20s"]).await;

    // CRDs: established, served, printed, waited on.
    kubectl_stdin_ok(&sb, &["apply", "-f", "-"], CRD).await;
    kubectl_ok(
        &sb,
        &["wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=20s"],
    )
    .await;
    let out = kubectl_ok(&sb, &["get", "crd"]).await;
    assert_eq!(
        out.lines().next().map(|h| h.split_whitespace().collect::<Vec<_>>()),
        Some(vec!["NAME", "CREATED", "AT"])
    );
    let o = kubectl(&sb, &["delete", "namespace", "default"]).await;
    assert_eq!(
        stderr(&o).trim(),
        "Error from server (Forbidden): namespaces \"default\" is forbidden: this namespace may not be deleted"
    );
    // apply --prune with kubectl's default allowlist (it needs every kind of that list served).
    let two = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: pa, labels: {set: one}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: pb, labels: {set: one}}\n";
    kubectl_stdin_ok(&sb, &["apply", "-l", "set=one", "--prune", "-f", "-"], two).await;
    let out = kubectl_stdin_ok(
        &sb,
        &["apply", "-l", "set=one", "--prune", "-f", "-"],
        two.split("---").next().unwrap_or_default(),
    )
    .await;
    assert!(out.contains("configmap/pb pruned"), "{out}");
    let res = kubectl_ok(&sb, &["api-resources", "--api-group=example.com", "-o", "name"]).await;
    assert_eq!(res.trim(), "widgets.example.com");
    kubectl_stdin_ok(
        &sb,
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 3}\n",
    )
    .await;
    let v = json(&kubectl_ok(&sb, &["get", "wd", "w1", "-o", "json"]).await);
    assert_eq!(v["spec"]["size"], 3);
    kubectl_ok(
        &sb,
        &[
            "patch",
            "widget",
            "w1",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
        ],
    )
    .await;
    let out =
        kubectl_ok(&sb, &["wait", "--for=condition=Ready", "widget/w1", "--timeout=20s"]).await;
    assert_eq!(out.trim(), "widget.example.com/w1 condition met");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_resources_lists_the_builtins() {
    let sb = common::sandbox().await;
    let out = kubectl_ok(&sb, &["api-resources", "-o", "name"]).await;
    for r in [
        "namespaces",
        "configmaps",
        "secrets",
        "serviceaccounts",
        "services",
        "endpoints",
        "pods",
        "nodes",
        "persistentvolumeclaims",
        "persistentvolumes",
        "resourcequotas",
        "events",
        "events.events.k8s.io",
        "deployments.apps",
        "replicasets.apps",
        "statefulsets.apps",
        "daemonsets.apps",
        "jobs.batch",
        "cronjobs.batch",
        "ingresses.networking.k8s.io",
        "roles.rbac.authorization.k8s.io",
        "rolebindings.rbac.authorization.k8s.io",
        "clusterroles.rbac.authorization.k8s.io",
        "clusterrolebindings.rbac.authorization.k8s.io",
        "validatingwebhookconfigurations.admissionregistration.k8s.io",
        "mutatingwebhookconfigurations.admissionregistration.k8s.io",
        "customresourcedefinitions.apiextensions.k8s.io",
        "leases.coordination.k8s.io",
        "selfsubjectaccessreviews.authorization.k8s.io",
        "subjectaccessreviews.authorization.k8s.io",
    ] {
        assert!(out.lines().any(|l| l == r), "missing {r} in\n{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_create_commands_send_protobuf() {
    let sb = common::sandbox().await;
    assert_eq!(
        kubectl_ok(&sb, &["create", "namespace", "apps"]).await.trim(),
        "namespace/apps created"
    );
    assert_eq!(
        kubectl_ok(
            &sb,
            &[
                "-n",
                "apps",
                "create",
                "configmap",
                "conf",
                "--from-literal=a=1",
                "--from-literal=b=2"
            ]
        )
        .await
        .trim(),
        "configmap/conf created"
    );
    assert_eq!(
        kubectl_ok(
            &sb,
            &["-n", "apps", "create", "secret", "generic", "pw", "--from-literal=password=s3cr3t"]
        )
        .await
        .trim(),
        "secret/pw created"
    );
    assert_eq!(
        kubectl_ok(&sb, &["-n", "apps", "create", "serviceaccount", "robot"]).await.trim(),
        "serviceaccount/robot created"
    );
    assert_eq!(
        kubectl_ok(
            &sb,
            &[
                "-n",
                "apps",
                "create",
                "deployment",
                "web",
                "--image=nginx:1.27",
                "--replicas=2",
                "--port=80"
            ]
        )
        .await
        .trim(),
        "deployment.apps/web created"
    );
    assert_eq!(
        kubectl_ok(
            &sb,
            &[
                "-n",
                "apps",
                "create",
                "role",
                "reader",
                "--verb=get,list",
                "--resource=pods,configmaps"
            ]
        )
        .await
        .trim(),
        "role.rbac.authorization.k8s.io/reader created"
    );
    assert_eq!(
        kubectl_ok(
            &sb,
            &[
                "-n",
                "apps",
                "create",
                "rolebinding",
                "reader",
                "--role=reader",
                "--serviceaccount=apps:robot"
            ]
        )
        .await
        .trim(),
        "rolebinding.rbac.authorization.k8s.io/reader created"
    );

    let v = json(
        &kubectl_ok(
            &sb,
            &["-n", "apps", "get", "cm", "conf", "-o", "json", "--show-managed-fields"],
        )
        .await,
    );
    assert_eq!(v["data"], serde_json::json!({"a": "1", "b": "2"}));
    for (args, want) in [
        (
            vec!["-n", "apps", "create", "job", "once", "--image=busybox:1.36", "--", "echo", "hi"],
            "job.batch/once created",
        ),
        (
            vec![
                "-n",
                "apps",
                "create",
                "cronjob",
                "tick",
                "--image=busybox:1.36",
                "--schedule=*/5 * * * *",
            ],
            "cronjob.batch/tick created",
        ),
        (vec!["-n", "apps", "create", "quota", "q", "--hard=pods=10"], "resourcequota/q created"),
        (
            vec!["-n", "apps", "create", "service", "clusterip", "web", "--tcp=80:8080"],
            "service/web created",
        ),
        (
            vec!["create", "clusterrole", "pod-reader", "--verb=get", "--resource=pods"],
            "clusterrole.rbac.authorization.k8s.io/pod-reader created",
        ),
        (
            vec![
                "create",
                "clusterrolebinding",
                "pod-reader",
                "--clusterrole=pod-reader",
                "--user=jane",
            ],
            "clusterrolebinding.rbac.authorization.k8s.io/pod-reader created",
        ),
    ] {
        assert_eq!(kubectl_ok(&sb, &args).await.trim(), want);
    }
    let w = json(&kubectl_ok(&sb, &["-n", "apps", "get", "job", "once", "-o", "json"]).await);
    assert_eq!(
        w["spec"]["template"]["spec"]["containers"][0]["command"],
        serde_json::json!(["echo", "hi"])
    );
    assert_eq!(w["spec"]["template"]["spec"]["restartPolicy"], "Never");
    let w = json(&kubectl_ok(&sb, &["-n", "apps", "get", "cronjob", "tick", "-o", "json"]).await);
    assert_eq!(w["spec"]["schedule"], "*/5 * * * *");
    let w = json(&kubectl_ok(&sb, &["-n", "apps", "get", "svc", "web", "-o", "json"]).await);
    assert_eq!(w["spec"]["ports"][0]["targetPort"], 8080);
    assert!(w["spec"]["clusterIP"].as_str().is_some_and(|ip| ip.starts_with("10.")), "{w}");
    let w = json(&kubectl_ok(&sb, &["-n", "apps", "get", "quota", "q", "-o", "json"]).await);
    assert_eq!(w["spec"]["hard"]["pods"], "10");
    let all = kubectl_ok(&sb, &["get", "all", "-n", "default"]).await;
    assert!(all.contains("service/kubernetes") && all.contains("10.96.0.1"), "{all}");
    assert_eq!(v["metadata"]["managedFields"][0]["manager"], "kubectl-create");
    let v = json(&kubectl_ok(&sb, &["-n", "apps", "get", "secret", "pw", "-o", "json"]).await);
    assert_eq!(v["data"]["password"], "czNjcjN0");
    assert_eq!(v["type"], "Opaque");
    let v = json(&kubectl_ok(&sb, &["-n", "apps", "get", "deploy", "web", "-o", "json"]).await);
    assert_eq!(v["spec"]["replicas"], 2);
    assert_eq!(v["spec"]["selector"]["matchLabels"]["app"], "web");
    let c = &v["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        (c["name"].as_str(), c["image"].as_str(), c["ports"][0]["containerPort"].as_i64()),
        (Some("nginx"), Some("nginx:1.27"), Some(80))
    );
    assert!(v["metadata"].get("namespace").is_some_and(|n| n == "apps"));
    let v = json(&kubectl_ok(&sb, &["-n", "apps", "get", "role", "reader", "-o", "json"]).await);
    assert_eq!(v["rules"][0]["verbs"], serde_json::json!(["get", "list"]));
    let v =
        json(&kubectl_ok(&sb, &["-n", "apps", "get", "rolebinding", "reader", "-o", "json"]).await);
    assert_eq!(
        v["subjects"][0],
        serde_json::json!({"kind": "ServiceAccount", "name": "robot", "namespace": "apps"})
    );
    assert_eq!(
        v["roleRef"],
        serde_json::json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_prints_server_side_tables_and_watches() {
    use tokio::io::AsyncBufReadExt;
    let sb = common::sandbox().await;
    kubectl_ok(&sb, &["create", "configmap", "a", "--from-literal=x=1", "--from-literal=y=2"])
        .await;
    kubectl_ok(&sb, &["create", "deployment", "web", "--image=nginx:1.27", "--replicas=3"]).await;
    let out = kubectl_ok(&sb, &["get", "cm"]).await;
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0], vec!["NAME", "DATA", "AGE"]);
    assert_eq!(&lines[1][..2], &["a", "2"]);
    let out = kubectl_ok(&sb, &["get", "deploy"]).await;
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0], vec!["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]);
    assert_eq!(&lines[1][..4], &["web", "0/3", "0", "0"]);
    let out = kubectl_ok(&sb, &["get", "deploy", "-o", "wide"]).await;
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        lines[0],
        vec!["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    );
    assert_eq!(&lines[1][5..], &["nginx", "nginx:1.27", "app=web"]);
    let out = kubectl_ok(&sb, &["get", "cm", "-A", "--show-labels"]).await;
    assert!(
        out.lines().next().is_some_and(|h| h.split_whitespace().collect::<Vec<_>>()
            == ["NAMESPACE", "NAME", "DATA", "AGE", "LABELS"]),
        "{out}"
    );
    // CRD printer columns.
    kubectl_stdin_ok(&sb, &["apply", "-f", "-"], CRD).await;
    kubectl_ok(
        &sb,
        &["wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=20s"],
    )
    .await;
    kubectl_stdin_ok(
        &sb,
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 7}\n",
    )
    .await;
    let out = kubectl_ok(&sb, &["get", "widgets"]).await;
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines, vec![vec!["NAME", "SIZE"], vec!["w1", "7"]]);

    // get -w: a Table watch; the new object appears as a row.
    let mut child = tokio::process::Command::new(common::KUBECTL)
        .arg("--kubeconfig")
        .arg(sb.kubeconfig_path())
        .args(["get", "cm", "-w", "--request-timeout=30s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl get -w");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let header = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("header in time")
        .expect("read")
        .expect("line");
    assert_eq!(header.split_whitespace().collect::<Vec<_>>(), ["NAME", "DATA", "AGE"]);
    kubectl_ok(&sb, &["create", "configmap", "watched"]).await;
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        while let Ok(Some(l)) = lines.next_line().await {
            if l.starts_with("watched ") {
                return l;
            }
        }
        String::new()
    })
    .await
    .expect("watch row in time");
    assert_eq!(found.split_whitespace().take(2).collect::<Vec<_>>(), ["watched", "0"]);
    child.kill().await.expect("stop kubectl");

    // -o json watch gets plain watch events.
    let out = kubectl_ok(
        &sb,
        &["get", "cm", "a", "-w", "-o", "json", "--output-watch-events", "--request-timeout=2s"],
    )
    .await;
    assert!(out.contains("\"type\":\"ADDED\""), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_field_validation_and_delete_collection() {
    let sb = common::sandbox().await;
    let bad = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\nfoo: bar\ndata: {k: v}\n";
    let o = common::kubectl_in(&sb, &["create", "-f", "-"], Some(bad)).await;
    assert_eq!(
        stderr(&o).trim(),
        "Error from server (BadRequest): error when creating \"STDIN\": ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"foo\""
    );
    let o = common::kubectl_in(&sb, &["create", "--validate=warn", "-f", "-"], Some(bad)).await;
    assert!(o.status.success());
    assert!(stderr(&o).contains("Warning: unknown field \"foo\""), "{}", stderr(&o));

    for i in 0..4 {
        let tier = if i < 3 { "a" } else { "b" };
        kubectl_ok(&sb, &["create", "configmap", &format!("x{i}")]).await;
        kubectl_ok(&sb, &["label", "configmap", &format!("x{i}"), &format!("tier={tier}")]).await;
    }
    // kubectl deletes one by one; the API's deletecollection is exercised directly too.
    let out = kubectl_ok(&sb, &["delete", "configmap", "-l", "tier=a"]).await;
    assert_eq!(out.lines().count(), 3, "{out}");
    let client = sb.client().await.expect("client");
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client, "default");
    cms.delete_collection(&Default::default(), &kube::api::ListParams::default().labels("tier=b"))
        .await
        .expect("deletecollection");
    let left = kubectl_ok(&sb, &["get", "configmap", "-l", "tier", "-o", "name"]).await;
    assert_eq!(left.trim(), "");
}

/// A Secret's `stringData` is write-only, as in kube-apiserver: merged into `data`
/// (base64-encoded, winning over a `data` entry of the same key) and never stored, on create
/// and on update, client-side or server-side apply alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_string_data_is_merged_into_data_and_not_stored() {
    let sb = common::sandbox().await;
    let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\n\
                  data: {user: YWRtaW4=, password: b2xk}\nstringData: {password: s3cr3t}\n";
    kubectl_stdin_ok(&sb, &["create", "-f", "-"], secret).await;
    let stored = json(&kubectl_ok(&sb, &["get", "secret", "db", "-o", "json"]).await);
    assert_eq!(stored["data"]["password"], "czNjcjN0", "{stored}");
    assert_eq!(stored["data"]["user"], "YWRtaW4=", "{stored}");
    assert!(stored.get("stringData").is_none(), "stringData was stored: {stored}");
    assert_eq!(stored["type"], "Opaque");

    let applied =
        "apiVersion: v1\nkind: Secret\nmetadata: {name: applied}\nstringData: {token: t0k}\n";
    kubectl_stdin_ok(&sb, &["apply", "--server-side", "-f", "-"], applied).await;
    let stored = json(&kubectl_ok(&sb, &["get", "secret", "applied", "-o", "json"]).await);
    assert_eq!(stored["data"]["token"], "dDBr", "{stored}");
    assert!(stored.get("stringData").is_none(), "{stored}");
}
