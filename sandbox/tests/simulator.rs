//! The workload simulator (`--simulate-workloads`): each behaviour and failure kind
//! through kube-rs and the real kubectl, asserting the reasons and messages real clusters use,
//! (the table tests of the pure decisions are unit tests in `src/simulator/tests.rs`).
// A failed unwrap in a test is a failed assertion.
#![allow(clippy::unwrap_used)]

mod common;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ContainerStatus, Endpoints, Event, Node, PersistentVolumeClaim, Pod, Secret, Service,
};
use ksync_sandbox::{Sandbox, SandboxOptions};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
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

fn pod_json(name: &str, container: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}}, "spec": {"containers": [container]}})
}

async fn create<K>(client: &Client, v: Value) -> K
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &obj(v)).await.expect("create")
}

fn cstatus(p: &Pod) -> Option<ContainerStatus> {
    p.status.as_ref()?.container_statuses.as_ref()?.first().cloned()
}

fn waiting(p: &Pod) -> Option<(String, String)> {
    let w = cstatus(p)?.state?.waiting?;
    Some((w.reason.unwrap_or_default(), w.message.unwrap_or_default()))
}

fn condition(p: &Pod, type_: &str) -> Option<(String, Option<String>, Option<String>)> {
    let c = p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)?.clone();
    Some((c.status, c.reason, c.message))
}

async fn wait_pod(client: &Client, name: &str, what: &str, pred: impl Fn(&Pod) -> bool) -> Pod {
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    common::wait_for(&format!("pod {name}: {what}"), WAIT, || {
        let api = api.clone();
        let pred = &pred;
        async move { api.get(name).await.ok().filter(|p| pred(p)) }
    })
    .await
}

/// The first Event on `object` with `reason` (and, if given, exactly `message`).
async fn wait_event(client: &Client, object: &str, reason: &str, message: Option<&str>) -> Event {
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    common::wait_for(&format!("event {reason} on {object}"), WAIT, || {
        let api = api.clone();
        async move {
            api.list(&ListParams::default()).await.ok()?.items.into_iter().find(|e| {
                e.involved_object.name.as_deref() == Some(object)
                    && e.reason.as_deref() == Some(reason)
                    && message.is_none_or(|m| e.message.as_deref() == Some(m))
            })
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_ready_with_capacity() {
    let (_sb, client) = sim().await;
    let nodes: Api<Node> = Api::all(client);
    let n = nodes.get("sandbox-node-1").await.expect("node");
    let st = n.status.expect("status");
    let cap = st.capacity.expect("capacity");
    assert_eq!(cap["cpu"].0, "4");
    assert_eq!(cap["memory"].0, "8Gi");
    assert_eq!(cap["pods"].0, "110");
    let ready =
        st.conditions.expect("conditions").into_iter().find(|c| c.type_ == "Ready").expect("Ready");
    assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("True", Some("KubeletReady")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_deployment_becomes_available_with_replicasets_pods_and_endpoints() {
    let (sb, client) = sim().await;
    common::kubectl_ok(
        &sb,
        &["create", "deployment", "web", "--image=nginx:1.27", "--replicas=2", "--port=80"],
    )
    .await;
    common::kubectl_ok(
        &sb,
        &["wait", "--for=condition=Available", "deployment/web", "--timeout=15s"],
    )
    .await;

    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d = common::wait_for("deployment web complete", WAIT, || {
        let deps = deps.clone();
        async move {
            let d = deps.get("web").await.ok()?;
            let st = d.status.clone()?;
            let prog = st.conditions.as_ref()?.iter().find(|c| c.type_ == "Progressing")?.clone();
            (prog.reason.as_deref() == Some("NewReplicaSetAvailable")).then_some(d)
        }
    })
    .await;
    let st = d.status.clone().expect("status");
    // The revision annotation is written through /status, as the deployment controller does:
    // the generation the create gave stays, and the status has observed it.
    assert_eq!(d.metadata.generation, Some(1));
    assert_eq!(st.observed_generation, Some(1));
    let shown = common::kubectl_ok(
        &sb,
        &[
            "get",
            "deployment/web",
            "-o",
            "jsonpath={.metadata.generation}/{.status.observedGeneration}",
        ],
    )
    .await;
    assert_eq!(shown, "1/1");
    assert_eq!(
        (st.replicas, st.updated_replicas, st.ready_replicas, st.available_replicas),
        (Some(2), Some(2), Some(2), Some(2))
    );
    assert_eq!(st.unavailable_replicas, None);
    let avail = st
        .conditions
        .as_ref()
        .expect("conditions")
        .iter()
        .find(|c| c.type_ == "Available")
        .expect("Available")
        .clone();
    assert_eq!(
        (avail.status.as_str(), avail.reason.as_deref(), avail.message.as_deref()),
        ("True", Some("MinimumReplicasAvailable"), Some("Deployment has minimum availability."))
    );
    assert_eq!(
        d.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("deployment.kubernetes.io/revision"))
            .map(String::as_str),
        Some("1")
    );

    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let list = rss.list(&ListParams::default()).await.expect("rs list").items;
    assert_eq!(list.len(), 1);
    let rs = &list[0];
    let hash = rs
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("pod-template-hash"))
        .cloned()
        .expect("hash label");
    assert_eq!(rs.metadata.name.as_deref(), Some(format!("web-{hash}").as_str()));
    let owner = &rs.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Deployment", "web", Some(true))
    );
    assert_eq!(owner.uid, d.metadata.uid.clone().unwrap());

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let list = pods.list(&ListParams::default().labels("app=web")).await.expect("pods").items;
    assert_eq!(list.len(), 2);
    for p in &list {
        let name = p.metadata.name.clone().unwrap();
        let suffix =
            name.strip_prefix(&format!("web-{hash}-")).expect("pod named after its ReplicaSet");
        assert_eq!(suffix.len(), 5);
        let st = p.status.clone().unwrap();
        assert_eq!(st.phase.as_deref(), Some("Running"));
        assert!(st.pod_ip.as_deref().is_some_and(|ip| ip.starts_with("10.244.")));
        assert_eq!(st.host_ip.as_deref(), Some("172.18.0.2"));
        assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("sandbox-node-1"));
        for t in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
            assert_eq!(condition(p, t).map(|c| c.0), Some("True".to_string()), "{t}");
        }
        let cs = cstatus(p).unwrap();
        assert!(cs.ready && cs.started == Some(true) && cs.restart_count == 0);
        assert!(cs.state.unwrap().running.unwrap().started_at.is_some());
        assert_eq!(cs.image, "docker.io/library/nginx:1.27");
        assert_eq!(p.metadata.owner_references.as_ref().unwrap()[0].kind, "ReplicaSet");
    }
    let first = list[0].metadata.name.clone().unwrap();
    let ev = wait_event(&client, &first, "Scheduled", None).await;
    assert_eq!(
        ev.message.as_deref(),
        Some(format!("Successfully assigned default/{first} to sandbox-node-1").as_str())
    );
    wait_event(&client, &first, "Started", Some("Started container nginx")).await;
    wait_event(
        &client,
        "web",
        "ScalingReplicaSet",
        Some(&format!("Scaled up replica set web-{hash} from 0 to 2")),
    )
    .await;

    // Service -> Endpoints with the ready pods' IPs.
    let _svc: Service = create(&client, json!({"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 8080, "targetPort": 80}]}})).await;
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let ep = common::wait_for("endpoints web", WAIT, || {
        let eps = eps.clone();
        async move {
            eps.get("web").await.ok().filter(|e| {
                e.subsets
                    .as_ref()
                    .is_some_and(|s| s[0].addresses.as_ref().is_some_and(|a| a.len() == 2))
            })
        }
    })
    .await;
    let subset = &ep.subsets.unwrap()[0];
    let mut ips: Vec<String> =
        subset.addresses.clone().unwrap().into_iter().map(|a| a.ip).collect();
    let mut want: Vec<String> =
        list.iter().map(|p| p.status.clone().unwrap().pod_ip.unwrap()).collect();
    ips.sort();
    want.sort();
    assert_eq!(ips, want);
    let port = &subset.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.port, port.protocol.as_deref()),
        (Some("http"), 80, Some("TCP"))
    );

    // Scaling and a template change (a rolling update to a new ReplicaSet).
    common::kubectl_ok(&sb, &["scale", "deployment/web", "--replicas=3"]).await;
    common::wait_for("3 ready", WAIT, || {
        let deps = deps.clone();
        async move {
            deps.get("web")
                .await
                .ok()
                .filter(|d| d.status.as_ref().and_then(|s| s.ready_replicas) == Some(3))
        }
    })
    .await;
    deps.patch(
        "web",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.28"}]}}}})),
    )
    .await
    .expect("patch image");
    let d = common::wait_for("rollout to the new ReplicaSet", WAIT, || {
        let deps = deps.clone();
        async move {
            let d = deps.get("web").await.ok()?;
            let st = d.status.clone()?;
            let done = st.observed_generation == d.metadata.generation
                && st.updated_replicas == Some(3)
                && st.replicas == Some(3)
                && st.available_replicas == Some(3)
                && st
                    .conditions
                    .as_ref()?
                    .iter()
                    .any(|c| c.reason.as_deref() == Some("NewReplicaSetAvailable"));
            done.then_some(d)
        }
    })
    .await;
    assert_eq!(
        d.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("deployment.kubernetes.io/revision"))
            .map(String::as_str),
        Some("2")
    );
    // Two spec changes (scale, image), and no generation for either revision annotation.
    assert_eq!(d.metadata.generation, Some(3));
    let list = rss.list(&ListParams::default()).await.expect("rs list").items;
    assert_eq!(list.len(), 2);
    let old = list
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(&format!("web-{hash}")))
        .expect("old rs");
    assert_eq!(old.spec.as_ref().unwrap().replicas, Some(0));

    // Deleting the Deployment garbage-collects its ReplicaSets and pods (owner references), and
    // the Endpoints empty out.
    common::kubectl_ok(&sb, &["delete", "deployment", "web"]).await;
    common::wait_for("dependents collected", WAIT, || {
        let (rss, pods) = (rss.clone(), pods.clone());
        async move {
            let rs_left = rss.list(&ListParams::default()).await.ok()?.items.len();
            let pods_left =
                pods.list(&ListParams::default().labels("app=web")).await.ok()?.items.len();
            (rs_left == 0 && pods_left == 0).then_some(())
        }
    })
    .await;
    common::wait_for("endpoints emptied", WAIT, || {
        let eps = eps.clone();
        async move { eps.get("web").await.ok().filter(|e| e.subsets.is_none()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stuck_rollout_exceeds_its_progress_deadline() {
    let (_sb, client) = sim().await;
    let _d: Deployment = create(
        &client,
        json!({"metadata": {"name": "stuck"}, "spec": {"replicas": 1, "progressDeadlineSeconds": 2,
            "selector": {"matchLabels": {"app": "stuck"}},
            "template": {"metadata": {"labels": {"app": "stuck"}}, "spec": {"containers": [{"name": "app", "image": "unreachable.invalid/app:1"}]}}}}),
    )
    .await;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d = common::wait_for("ProgressDeadlineExceeded", WAIT, || {
        let deps = deps.clone();
        async move {
            let d = deps.get("stuck").await.ok()?;
            let c = d
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Progressing")?
                .clone();
            (c.reason.as_deref() == Some("ProgressDeadlineExceeded")).then_some(d)
        }
    })
    .await;
    let st = d.status.unwrap();
    let conds = st.conditions.unwrap();
    let prog = conds.iter().find(|c| c.type_ == "Progressing").unwrap();
    assert_eq!(prog.status, "False");
    let hash = prog.message.clone().unwrap();
    assert!(
        hash.starts_with("ReplicaSet \"stuck-") && hash.ends_with("\" has timed out progressing."),
        "{hash}"
    );
    let avail = conds.iter().find(|c| c.type_ == "Available").unwrap();
    assert_eq!(
        (avail.status.as_str(), avail.reason.as_deref()),
        ("False", Some("MinimumReplicasUnavailable"))
    );
    assert_eq!(
        (st.replicas, st.updated_replicas, st.ready_replicas, st.unavailable_replicas),
        (Some(1), Some(1), None, Some(1))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_exceeding_capacity_is_unschedulable_with_failed_scheduling() {
    let (_sb, client) = sim().await;
    let _p: Pod = create(&client, pod_json("big", json!({"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "10", "memory": "1Gi"}}}))).await;
    let want = "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.";
    let p = wait_pod(&client, "big", "Unschedulable", |p| {
        condition(p, "PodScheduled").is_some_and(|c| c.1.as_deref() == Some("Unschedulable"))
    })
    .await;
    assert_eq!(
        condition(&p, "PodScheduled"),
        Some(("False".into(), Some("Unschedulable".into()), Some(want.into())))
    );
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    assert_eq!(p.status.as_ref().unwrap().qos_class.as_deref(), Some("Burstable"));
    assert!(p.spec.as_ref().unwrap().node_name.is_none());
    let ev = wait_event(&client, "big", "FailedScheduling", Some(want)).await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_eq!(ev.source.and_then(|s| s.component).as_deref(), Some("default-scheduler"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_secret_is_create_container_config_error_until_it_appears() {
    let (_sb, client) = sim().await;
    let _p: Pod = create(
        &client,
        pod_json("db-client", json!({"name": "app", "image": "nginx", "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]})),
    )
    .await;
    let p = wait_pod(&client, "db-client", "CreateContainerConfigError", |p| {
        waiting(p).is_some_and(|w| w.0 == "CreateContainerConfigError")
    })
    .await;
    assert_eq!(
        waiting(&p),
        Some(("CreateContainerConfigError".into(), "secret \"db\" not found".into()))
    );
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    let ev =
        wait_event(&client, "db-client", "Failed", Some("Error: secret \"db\" not found")).await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_eq!(ev.involved_object.field_path.as_deref(), Some("spec.containers{app}"));

    // A ConfigMap through envFrom.
    let _p: Pod = create(
        &client,
        pod_json(
            "cm-client",
            json!({"name": "app", "image": "nginx", "envFrom": [{"configMapRef": {"name": "x"}}]}),
        ),
    )
    .await;
    let p = wait_pod(&client, "cm-client", "CreateContainerConfigError", |p| {
        waiting(p).is_some_and(|w| w.0 == "CreateContainerConfigError")
    })
    .await;
    assert_eq!(waiting(&p).unwrap().1, "configmap \"x\" not found");

    // A Secret volume: the kubelet cannot mount it, the pod stays ContainerCreating.
    let mut vol = pod_json("vol-client", json!({"name": "app", "image": "nginx"}));
    vol["spec"]["volumes"] = json!([{"name": "certs", "secret": {"secretName": "tls"}}]);
    let _p: Pod = create(&client, vol).await;
    let want = "MountVolume.SetUp failed for volume \"certs\" : secret \"tls\" not found";
    let ev = wait_event(&client, "vol-client", "FailedMount", Some(want)).await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    let p = wait_pod(&client, "vol-client", "ContainerCreating", |p| waiting(p).is_some()).await;
    assert_eq!(waiting(&p).unwrap().0, "ContainerCreating");
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));

    let _s: Secret =
        create(&client, json!({"metadata": {"name": "db"}, "stringData": {"password": "s3cr3t"}}))
            .await;
    let p = wait_pod(&client, "db-client", "Running and Ready", |p| {
        condition(p, "Ready").is_some_and(|c| c.0 == "True")
    })
    .await;
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
    assert!(cstatus(&p).unwrap().state.unwrap().running.is_some());

    // The others recover too once what they reference exists.
    let _c: k8s_openapi::api::core::v1::ConfigMap =
        create(&client, json!({"metadata": {"name": "x"}, "data": {"k": "v"}})).await;
    let _t: Secret =
        create(&client, json!({"metadata": {"name": "tls"}, "stringData": {"tls.crt": "c"}})).await;
    for name in ["cm-client", "vol-client"] {
        wait_pod(&client, name, "Running and Ready", |p| {
            condition(p, "Ready").is_some_and(|c| c.0 == "True")
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_registry_is_err_image_pull_then_image_pull_back_off() {
    let (_sb, client) = sim().await;
    let image = "unreachable.invalid/team/app:1.0";
    let _p: Pod = create(&client, pod_json("pull", json!({"name": "app", "image": image}))).await;
    let p = wait_pod(&client, "pull", "ErrImagePull", |p| {
        waiting(p).is_some_and(|w| w.0 == "ErrImagePull")
    })
    .await;
    let err = "rpc error: code = Unknown desc = failed to pull and unpack image \"unreachable.invalid/team/app:1.0\": failed to resolve reference \"unreachable.invalid/team/app:1.0\": failed to do request: Head \"https://unreachable.invalid/v2/team/app/manifests/1.0\": dial tcp: lookup unreachable.invalid: no such host";
    assert_eq!(waiting(&p).unwrap().1, err);
    let p = wait_pod(&client, "pull", "ImagePullBackOff", |p| {
        waiting(p).is_some_and(|w| w.0 == "ImagePullBackOff")
    })
    .await;
    assert_eq!(
        waiting(&p).unwrap().1,
        format!("Back-off pulling image \"{image}\": ErrImagePull: {err}")
    );
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    assert_eq!(condition(&p, "Ready").and_then(|c| c.1).as_deref(), Some("ContainersNotReady"));
    wait_event(&client, "pull", "Pulling", Some(&format!("Pulling image \"{image}\""))).await;
    wait_event(
        &client,
        "pull",
        "Failed",
        Some(&format!("Failed to pull image \"{image}\": {err}")),
    )
    .await;
    wait_event(&client, "pull", "Failed", Some("Error: ErrImagePull")).await;
    wait_event(&client, "pull", "BackOff", Some(&format!("Back-off pulling image \"{image}\"")))
        .await;
    wait_event(&client, "pull", "Failed", Some("Error: ImagePullBackOff")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashing_container_is_crash_loop_back_off_with_rising_restarts() {
    let (sb, client) = sim().await;
    let _p: Pod = create(&client, pod_json("crash", json!({"name": "app", "image": "busybox:1.36", "env": [{"name": "KSYNC_SIMULATE", "value": "crash"}]}))).await;
    let p = wait_pod(&client, "crash", "CrashLoopBackOff", |p| {
        waiting(p).is_some_and(|w| w.0 == "CrashLoopBackOff")
    })
    .await;
    let uid = p.metadata.uid.clone().unwrap();
    assert_eq!(
        waiting(&p).unwrap().1,
        format!("back-off 10s restarting failed container=app pod=crash_default({uid})")
    );
    let cs = cstatus(&p).unwrap();
    let term = cs.last_state.unwrap().terminated.expect("lastState.terminated");
    assert_eq!((term.exit_code, term.reason.as_deref()), (1, Some("Error")));
    assert!(!cs.ready);
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
    // The back-off doubles with each restart.
    let p = wait_pod(&client, "crash", "back-off 20s", |p| {
        waiting(p).is_some_and(|w| w.1.starts_with("back-off 20s restarting failed container=app"))
    })
    .await;
    assert_eq!(cstatus(&p).unwrap().restart_count, 1);
    wait_pod(&client, "crash", "restartCount >= 2", |p| {
        cstatus(p).is_some_and(|c| c.restart_count >= 2)
    })
    .await;
    wait_event(
        &client,
        "crash",
        "BackOff",
        Some(&format!("Back-off restarting failed container app in pod crash_default({uid})")),
    )
    .await;
    // kubectl logs --previous shows the crashed instance (pods/log).
    let out = tokio::process::Command::new("/usr/bin/kubectl")
        .arg("--kubeconfig")
        .arg(sb.kubeconfig_path())
        .args(["logs", "crash", "--previous", "-n", "default"])
        .output()
        .await
        .expect("kubectl");
    let logs = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(logs.contains("simulated crash (KSYNC_SIMULATE=crash): exit code 1"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_readiness_is_running_but_not_ready() {
    let (_sb, client) = sim().await;
    let _p: Pod = create(
        &client,
        pod_json(
            "unready",
            json!({"name": "app", "image": "nginx", "env": [{"name": "KSYNC_SIMULATE", "value": "unready"}],
                   "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}}}),
        ),
    )
    .await;
    let p = wait_pod(&client, "unready", "Running", |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    })
    .await;
    let msg = "containers with unready status: [app]";
    assert_eq!(
        condition(&p, "Ready"),
        Some(("False".into(), Some("ContainersNotReady".into()), Some(msg.into())))
    );
    assert_eq!(
        condition(&p, "ContainersReady"),
        Some(("False".into(), Some("ContainersNotReady".into()), Some(msg.into())))
    );
    let cs = cstatus(&p).unwrap();
    assert!(!cs.ready && cs.started == Some(true) && cs.state.unwrap().running.is_some());
    let ev = wait_event(
        &client,
        "unready",
        "Unhealthy",
        Some("Readiness probe failed: HTTP probe failed with statuscode: 503"),
    )
    .await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));

    // A Service lists it under notReadyAddresses.
    let _svc: Service = create(&client, json!({"metadata": {"name": "unready"}, "spec": {"selector": {"app": "unready"}, "ports": [{"port": 80}]}})).await;
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let ep = common::wait_for("endpoints unready", WAIT, || {
        let eps = eps.clone();
        async move { eps.get("unready").await.ok().filter(|e| e.subsets.is_some()) }
    })
    .await;
    let s = &ep.subsets.unwrap()[0];
    assert!(s.addresses.is_none());
    assert_eq!(s.not_ready_addresses.as_ref().map(Vec::len), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_complete_or_fail_with_backoff_limit_exceeded() {
    let (sb, client) = sim().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let _ok: Job = create(
        &client,
        json!({"metadata": {"name": "ok"}, "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}}),
    )
    .await;
    let _bad: Job = create(
        &client,
        json!({"metadata": {"name": "bad"}, "spec": {"backoffLimit": 1, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "env": [{"name": "KSYNC_SIMULATE", "value": "fail"}]}]}}}}),
    )
    .await;
    common::kubectl_ok(&sb, &["wait", "--for=condition=Complete", "job/ok", "--timeout=15s"]).await;
    let ok = jobs.get("ok").await.expect("job");
    let st = ok.status.unwrap();
    assert_eq!((st.succeeded, st.active, st.failed), (Some(1), None, None));
    assert!(st.completion_time.is_some() && st.start_time.is_some());
    let c = st.conditions.unwrap().into_iter().find(|c| c.type_ == "Complete").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
        ("True", Some("CompletionsReached"), Some("Reached expected number of succeeded pods"))
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let ok_pods = pods.list(&ListParams::default().labels("job-name=ok")).await.unwrap().items;
    assert_eq!(ok_pods.len(), 1);
    assert_eq!(ok_pods[0].status.as_ref().unwrap().phase.as_deref(), Some("Succeeded"));
    let t = cstatus(&ok_pods[0]).unwrap().state.unwrap().terminated.unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    wait_event(&client, "ok", "Completed", Some("Job completed")).await;

    common::kubectl_ok(&sb, &["wait", "--for=condition=Failed", "job/bad", "--timeout=15s"]).await;
    let bad = jobs.get("bad").await.expect("job");
    let st = bad.status.unwrap();
    assert_eq!((st.failed, st.succeeded, st.active), (Some(2), None, None));
    let c = st.conditions.unwrap().into_iter().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
        ("True", Some("BackoffLimitExceeded"), Some("Job has reached the specified backoff limit"))
    );
    let bad_pods = pods.list(&ListParams::default().labels("job-name=bad")).await.unwrap().items;
    assert_eq!(bad_pods.len(), 2);
    assert!(bad_pods.iter().all(|p| p.status.as_ref().unwrap().phase.as_deref() == Some("Failed")));
    wait_event(
        &client,
        "bad",
        "BackoffLimitExceeded",
        Some("Job has reached the specified backoff limit"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pvc_without_storage_class_stays_pending() {
    let (_sb, client) = sim().await;
    let _c: PersistentVolumeClaim = create(
        &client,
        json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
    let ev = wait_event(
        &client,
        "data",
        "FailedBinding",
        Some("no persistent volumes available for this claim and no storage class is set"),
    )
    .await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_eq!(ev.source.and_then(|s| s.component).as_deref(), Some("persistentvolume-controller"));
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    assert_eq!(pvcs.get("data").await.unwrap().status.unwrap().phase.as_deref(), Some("Pending"));
    // A pod using it cannot be scheduled.
    let mut p = pod_json("uses-data", json!({"name": "app", "image": "nginx"}));
    p["spec"]["volumes"] = json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]);
    let _p: Pod = create(&client, p).await;
    let p = wait_pod(&client, "uses-data", "Unschedulable", |p| {
        condition(p, "PodScheduled").is_some_and(|c| c.0 == "False")
    })
    .await;
    assert_eq!(
        condition(&p, "PodScheduled").unwrap().2.as_deref(),
        Some(
            "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statefulset_and_daemonset_become_ready() {
    use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
    let (_sb, client) = sim().await;
    let template = json!({"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db", "image": "postgres:17"}]}});
    let _s: StatefulSet = create(
        &client,
        json!({"metadata": {"name": "db"}, "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": template}}),
    )
    .await;
    let mut ds_template = template.clone();
    ds_template["metadata"]["labels"] = json!({"app": "agent"});
    let _d: DaemonSet = create(
        &client,
        json!({"metadata": {"name": "agent"}, "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": ds_template}}),
    )
    .await;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let s = common::wait_for("statefulset ready", WAIT, || {
        let sts = sts.clone();
        async move {
            sts.get("db")
                .await
                .ok()
                .filter(|s| s.status.as_ref().and_then(|st| st.ready_replicas) == Some(2))
        }
    })
    .await;
    let st = s.status.unwrap();
    assert_eq!(
        (st.replicas, st.current_replicas, st.updated_replicas, st.available_replicas),
        (2, Some(2), Some(2), Some(2))
    );
    assert_eq!(st.current_revision, st.update_revision);
    assert_eq!(st.observed_generation, s.metadata.generation);
    let p0 = wait_pod(&client, "db-0", "Ready", |p| {
        condition(p, "Ready").is_some_and(|c| c.0 == "True")
    })
    .await;
    assert_eq!(p0.metadata.labels.as_ref().unwrap()["statefulset.kubernetes.io/pod-name"], "db-0");
    wait_pod(&client, "db-1", "Ready", |p| condition(p, "Ready").is_some_and(|c| c.0 == "True"))
        .await;
    wait_event(
        &client,
        "db",
        "SuccessfulCreate",
        Some("create Pod db-0 in StatefulSet db successful"),
    )
    .await;

    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
    let d = common::wait_for("daemonset ready", WAIT, || {
        let dss = dss.clone();
        async move {
            dss.get("agent")
                .await
                .ok()
                .filter(|d| d.status.as_ref().is_some_and(|st| st.number_ready == 1))
        }
    })
    .await;
    let st = d.status.unwrap();
    assert_eq!(
        (
            st.desired_number_scheduled,
            st.current_number_scheduled,
            st.number_available,
            st.number_unavailable
        ),
        (1, 1, Some(1), None)
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let agent = pods.list(&ListParams::default().labels("app=agent")).await.unwrap().items;
    assert_eq!(agent.len(), 1);
    assert_eq!(agent[0].spec.as_ref().unwrap().node_name.as_deref(), Some("sandbox-node-1"));
}
