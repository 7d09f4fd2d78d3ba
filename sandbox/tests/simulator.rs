//! Priority 7: the workload simulator: Deployments → ReplicaSets → Pods with realistic status,
//! and each failure kind with the reasons and messages real clusters use.

mod common;

use common::{kubectl_ok, kubectl_stdin_ok};
use ksync_sandbox::{Sandbox, SandboxOptions};
use serde_json::Value;
use std::time::Duration;

async fn sim() -> Sandbox {
    common::sandbox_with(SandboxOptions {
        simulate_workloads: true,
        ..Default::default()
    })
    .await
}

async fn get(sb: &Sandbox, args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&kubectl_ok(sb, &a).await).expect("json")
}

/// Wait until the first pod matching `selector` has a container in `state` with `reason`.
async fn wait_container_reason(sb: &Sandbox, selector: &str, reason: &str) -> Value {
    common::wait_for(reason, Duration::from_secs(20), || async {
        let v = get(sb, &["pods", "-l", selector]).await;
        let p = v["items"].as_array()?.first()?.clone();
        let cs = p.pointer("/status/containerStatuses/0")?;
        (cs.pointer("/state/waiting/reason").and_then(Value::as_str) == Some(reason)).then_some(p)
    })
    .await
}

fn deploy(name: &str, image: &str, replicas: u32, extra_container: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      containers:\n      - name: main\n        image: {image}\n{extra_container}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_rolls_out_to_ready_pods_with_endpoints() {
    let sb = sim().await;
    let nodes = get(&sb, &["nodes"]).await;
    assert_eq!(nodes["items"][0]["status"]["capacity"]["cpu"], "4");
    kubectl_stdin_ok(
        &sb,
        &["apply", "-f", "-"],
        &deploy("web", "nginx:1.27", 3, ""),
    )
    .await;
    kubectl_stdin_ok(&sb, &["apply", "-f", "-"], "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  selector: {app: web}\n  ports: [{port: 80}]\n").await;
    kubectl_ok(
        &sb,
        &[
            "wait",
            "--for=condition=Available",
            "deployment/web",
            "--timeout=20s",
        ],
    )
    .await;
    kubectl_ok(
        &sb,
        &["rollout", "status", "deployment/web", "--timeout=20s"],
    )
    .await;
    let d = get(&sb, &["deployment", "web"]).await;
    assert_eq!(d["status"]["readyReplicas"], 3);
    assert_eq!(d["status"]["observedGeneration"], 1);
    let prog = d["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Progressing")
        .cloned()
        .expect("progressing");
    assert_eq!(prog["reason"], "NewReplicaSetAvailable");
    let rs = get(&sb, &["rs", "-l", "app=web"]).await;
    assert_eq!(
        rs["items"][0]["metadata"]["ownerReferences"][0]["kind"],
        "Deployment"
    );
    let pods = get(&sb, &["pods", "-l", "app=web"]).await;
    assert_eq!(pods["items"].as_array().map(Vec::len), Some(3));
    let p = &pods["items"][0];
    assert_eq!(p["status"]["phase"], "Running");
    assert_eq!(p["status"]["containerStatuses"][0]["ready"], true);
    common::wait_for("endpoints", Duration::from_secs(20), || async {
        let ep = get(&sb, &["endpoints", "web"]).await;
        (ep.pointer("/subsets/0/addresses")
            .and_then(Value::as_array)
            .map(Vec::len)
            == Some(3))
        .then_some(())
    })
    .await;
    let events = kubectl_ok(&sb, &["get", "events"]).await;
    assert!(
        events.contains("ScalingReplicaSet") && events.contains("Scaled up replica set web-"),
        "{events}"
    );

    // Scale down through kubectl scale.
    kubectl_ok(&sb, &["scale", "deployment/web", "--replicas=1"]).await;
    common::wait_for("scaled down", Duration::from_secs(20), || async {
        let pods = get(&sb, &["pods", "-l", "app=web"]).await;
        (pods["items"].as_array().map(Vec::len) == Some(1)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_kinds_report_real_reasons() {
    let sb = sim().await;
    // Missing Secret: CreateContainerConfigError, recovering once the Secret exists.
    let env = "        env:\n        - name: PW\n          valueFrom: {secretKeyRef: {name: db, key: pw}}\n";
    kubectl_stdin_ok(
        &sb,
        &["apply", "-f", "-"],
        &deploy("cfgerr", "app:1", 1, env),
    )
    .await;
    let p = wait_container_reason(&sb, "app=cfgerr", "CreateContainerConfigError").await;
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        "secret \"db\" not found"
    );
    kubectl_ok(
        &sb,
        &["create", "secret", "generic", "db", "--from-literal=pw=x"],
    )
    .await;
    kubectl_ok(
        &sb,
        &[
            "wait",
            "--for=condition=Ready",
            "pod",
            "-l",
            "app=cfgerr",
            "--timeout=20s",
        ],
    )
    .await;
    let logs = kubectl_ok(&sb, &["logs", "-l", "app=cfgerr"]).await;
    assert_eq!(logs.trim(), "starting app:1");

    // Unreachable registry: ErrImagePull then ImagePullBackOff.
    kubectl_stdin_ok(
        &sb,
        &["apply", "-f", "-"],
        &deploy("pull", "unreachable.invalid/app:1", 1, ""),
    )
    .await;
    let p = wait_container_reason(&sb, "app=pull", "ImagePullBackOff").await;
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        "Back-off pulling image \"unreachable.invalid/app:1\""
    );
    let ev = kubectl_ok(&sb, &["get", "events", "--field-selector", "reason=Failed"]).await;
    assert!(ev.contains("Error: ErrImagePull"), "{ev}");

    // Crash loop by convention.
    kubectl_stdin_ok(
        &sb,
        &["apply", "-f", "-"],
        &deploy("crash", "app:crashloop", 1, ""),
    )
    .await;
    let p = wait_container_reason(&sb, "app=crash", "CrashLoopBackOff").await;
    let cs = &p["status"]["containerStatuses"][0];
    assert_eq!(cs["lastState"]["terminated"]["exitCode"], 1);
    assert!(cs["restartCount"].as_i64().unwrap_or(0) >= 1);
    assert!(
        cs["state"]["waiting"]["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("back-off 10s restarting failed container=main pod=")
    );
    let pod = p["metadata"]["name"].as_str().expect("name").to_string();
    let logs = kubectl_ok(&sb, &["logs", &pod, "--previous"]).await;
    assert!(logs.contains("panic: simulated crash"), "{logs}");
    let d = get(&sb, &["deployment", "crash"]).await;
    let avail = d["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Available")
        .cloned()
        .expect("available");
    assert_eq!(
        (avail["status"].as_str(), avail["reason"].as_str()),
        (Some("False"), Some("MinimumReplicasUnavailable"))
    );

    // Requests beyond capacity: Unschedulable with a FailedScheduling event.
    let big = "        resources: {requests: {cpu: \"64\"}}\n";
    kubectl_stdin_ok(&sb, &["apply", "-f", "-"], &deploy("big", "app:1", 1, big)).await;
    let p = common::wait_for("unschedulable", Duration::from_secs(20), || async {
        let v = get(&sb, &["pods", "-l", "app=big"]).await;
        let p = v["items"].as_array()?.first()?.clone();
        let c = p.pointer("/status/conditions/0")?.clone();
        (c["reason"] == "Unschedulable").then_some(p)
    })
    .await;
    assert_eq!(p["status"]["phase"], "Pending");
    assert_eq!(
        p["status"]["conditions"][0]["message"],
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    );
    let ev = kubectl_ok(
        &sb,
        &[
            "get",
            "events",
            "--field-selector",
            "reason=FailedScheduling",
        ],
    )
    .await;
    assert!(ev.contains("Insufficient cpu"), "{ev}");

    // Jobs complete, or fail by convention.
    let job = |name: &str, image: &str| {
        format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: {name}}}\nspec:\n  backoffLimit: 1\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{{name: main, image: \"{image}\"}}]\n"
        )
    };
    kubectl_stdin_ok(&sb, &["apply", "-f", "-"], &job("ok", "app:1")).await;
    kubectl_stdin_ok(&sb, &["apply", "-f", "-"], &job("bad", "app:fail")).await;
    kubectl_ok(
        &sb,
        &[
            "wait",
            "--for=condition=Complete",
            "job/ok",
            "--timeout=20s",
        ],
    )
    .await;
    kubectl_ok(
        &sb,
        &["wait", "--for=condition=Failed", "job/bad", "--timeout=20s"],
    )
    .await;
    let j = get(&sb, &["job", "bad"]).await;
    let failed = j["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Failed")
        .cloned()
        .expect("failed");
    assert_eq!(
        (failed["reason"].as_str(), failed["message"].as_str()),
        (
            Some("BackoffLimitExceeded"),
            Some("Job has reached the specified backoff limit")
        )
    );

    // PVCs without a StorageClass stay Pending.
    kubectl_stdin_ok(&sb, &["apply", "-f", "-"], "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {requests: {storage: 1Gi}}\n").await;
    let ev = common::wait_for("FailedBinding", Duration::from_secs(20), || async {
        let ev = kubectl_ok(
            &sb,
            &["get", "events", "--field-selector", "reason=FailedBinding"],
        )
        .await;
        ev.contains("no persistent volumes available for this claim and no storage class is set")
            .then_some(ev)
    })
    .await;
    assert!(!ev.is_empty());
    assert_eq!(
        get(&sb, &["pvc", "data"]).await["status"]["phase"],
        "Pending"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statefulsets_and_daemonsets_roll_out() {
    let sb = sim().await;
    let sts = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db}\nspec:\n  replicas: 2\n  serviceName: db\n  selector: {matchLabels: {app: db}}\n  template:\n    metadata: {labels: {app: db}}\n    spec: {containers: [{name: main, image: \"postgres:16\"}]}\n";
    let ds = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent}\nspec:\n  selector: {matchLabels: {app: agent}}\n  template:\n    metadata: {labels: {app: agent}}\n    spec: {containers: [{name: main, image: \"agent:1\"}]}\n";
    kubectl_stdin_ok(&sb, &["apply", "-f", "-"], sts).await;
    kubectl_stdin_ok(&sb, &["apply", "-f", "-"], ds).await;
    kubectl_ok(
        &sb,
        &["rollout", "status", "statefulset/db", "--timeout=20s"],
    )
    .await;
    kubectl_ok(
        &sb,
        &["rollout", "status", "daemonset/agent", "--timeout=20s"],
    )
    .await;
    let pods = kubectl_ok(&sb, &["get", "pods", "-l", "app=db", "-o", "name"]).await;
    assert_eq!(pods.trim(), "pod/db-0\npod/db-1");
    let v = get(&sb, &["sts", "db"]).await;
    assert_eq!(v["status"]["readyReplicas"], 2);
    let v = get(&sb, &["ds", "agent"]).await;
    assert_eq!(v["status"]["numberReady"], 1);
}
