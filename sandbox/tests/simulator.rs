//! The workload simulator (`--simulate-workloads`, issue 3): each behaviour and failure kind
//! through kube-rs and the real kubectl, asserting the reasons and messages real clusters use,
//! plus table tests of the pure decisions.
// A failed unwrap in a test is a failed assertion; the table tests read better without `expect`.
#![allow(clippy::unwrap_used)]

mod common;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ContainerStatus, Endpoints, Event, Node, PersistentVolumeClaim, Pod, Secret, Service,
};
use k8s_openapi::jiff::Timestamp;
use ksync_sandbox::simulator::{endpoints, kubelet, quantity, scheduler, workloads};
use ksync_sandbox::{Sandbox, SandboxOptions};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::BTreeMap;
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
    assert_eq!(st.observed_generation, d.metadata.generation);
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

// ---- Table tests of the pure decisions ----

fn pod(v: Value) -> Pod {
    obj(json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": v}))
}

#[test]
fn quantities_parse_like_kubernetes() {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let q = |s: &str| Quantity(s.to_string());
    for (s, milli) in
        [("4", 4000), ("500m", 500), ("0.5", 500), ("1.5", 1500), ("100n", 1), ("2k", 2_000_000)]
    {
        assert_eq!(quantity::milli_cpu(&q(s)), milli, "{s}");
    }
    for (s, bytes) in [
        ("8Gi", 8 << 30),
        ("128Mi", 128 << 20),
        ("1G", 1_000_000_000),
        ("1e3", 1000),
        ("1.5Ki", 1536),
        ("110", 110),
    ] {
        assert_eq!(quantity::value(&q(s)), bytes, "{s}");
    }
    assert_eq!(quantity::scaled(&q("bogus"), 1), None);
}

#[test]
fn scheduler_messages_match_kube_scheduler() {
    let node: Node = obj(json!({"metadata": {"name": "n1", "labels": {"disk": "hdd"}}, "status": {
        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True"}]}}));
    let nodes = [&node];
    let used = BTreeMap::new();
    let req = |cpu: &str, mem: &str| {
        pod(
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}),
        )
    };
    let cases: Vec<(Pod, Result<&str, &str>)> = vec![
        (req("1", "1Gi"), Ok("n1")),
        (
            req("10", "1Gi"),
            Err(
                "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
            ),
        ),
        (
            req("10", "10Gi"),
            Err(
                "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
            ),
        ),
        (
            pod(json!({"nodeSelector": {"disk": "ssd"}, "containers": [{"name": "c"}]})),
            Err(
                "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
            ),
        ),
        // Limits stand in for missing requests.
        (
            pod(json!({"containers": [{"name": "c", "resources": {"limits": {"cpu": "5"}}}]})),
            Err(
                "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
            ),
        ),
    ];
    for (p, want) in cases {
        let got = scheduler::schedule(&p, &nodes, &used, false).map_err(|e| e.message);
        assert_eq!(got.as_deref().map_err(String::as_str), want);
    }
    let mut used = BTreeMap::new();
    used.insert("n1".to_string(), scheduler::Resources { milli_cpu: 3500, memory: 0, pods: 3 });
    assert!(scheduler::schedule(&req("1", "1Mi"), &nodes, &used, false).is_err());
    assert!(scheduler::schedule(&req("500m", "1Mi"), &nodes, &used, false).is_ok());
}

#[test]
fn config_errors_are_worded_like_the_kubelet() {
    let mut world = kubelet::WorldView::default();
    world.secrets.insert(("ns".into(), "db".into()), ["user".to_string()].into());
    world.config_maps.insert(("ns".into(), "cfg".into()), ["a".to_string()].into());
    let c = |v: Value| -> k8s_openapi::api::core::v1::Container {
        obj(json!({"name": "c", "image": "x"})
            .as_object()
            .cloned()
            .map(|mut m| {
                m.extend(v.as_object().cloned().unwrap());
                Value::Object(m)
            })
            .unwrap())
    };
    let cases = [
        (json!({"envFrom": [{"secretRef": {"name": "nope"}}]}), Some("secret \"nope\" not found")),
        (json!({"envFrom": [{"configMapRef": {"name": "x"}}]}), Some("configmap \"x\" not found")),
        (json!({"envFrom": [{"configMapRef": {"name": "x", "optional": true}}]}), None),
        (
            json!({"env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}),
            Some("couldn't find key password in Secret ns/db"),
        ),
        (
            json!({"env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "user"}}}]}),
            None,
        ),
        (
            json!({"env": [{"name": "P", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "b"}}}]}),
            Some("couldn't find key b in ConfigMap ns/cfg"),
        ),
        (
            json!({"env": [{"name": "P", "valueFrom": {"configMapKeyRef": {"name": "other", "key": "b"}}}]}),
            Some("configmap \"other\" not found"),
        ),
    ];
    for (v, want) in cases {
        assert_eq!(kubelet::config_error(&c(v.clone()), "ns", &world).as_deref(), want, "{v}");
    }
    let p = pod(
        json!({"containers": [{"name": "c"}], "volumes": [{"name": "creds", "secret": {"secretName": "gone"}}]}),
    );
    assert_eq!(
        kubelet::mount_error(&p, &world),
        Some(("creds".into(), "secret \"gone\" not found".into()))
    );
}

#[test]
fn images_normalize_and_unreachable_hosts_fail() {
    for (i, want) in [
        ("nginx", "docker.io/library/nginx:latest"),
        ("nginx:1.27", "docker.io/library/nginx:1.27"),
        ("team/app", "docker.io/team/app:latest"),
        ("ghcr.io/x/y:v1", "ghcr.io/x/y:v1"),
        ("localhost:5000/y", "localhost:5000/y:latest"),
    ] {
        assert_eq!(kubelet::normalize_image(i), want);
    }
    assert!(kubelet::unreachable("unreachable.invalid/app:1"));
    assert!(kubelet::unreachable("registry.invalid:5000/app"));
    assert!(!kubelet::unreachable("nginx"));
    assert!(!kubelet::unreachable("invalid/app"));
}

fn ctx<'a>(
    world: &'a kubelet::WorldView,
    entered: &'a BTreeMap<String, Timestamp>,
    timing: &'a kubelet::Timing,
    now: Timestamp,
) -> kubelet::PodContext<'a> {
    kubelet::PodContext {
        node_name: "n1",
        host_ip: "172.18.0.2",
        pod_ip: "10.244.0.9",
        world,
        now,
        entered,
        timing,
    }
}

#[test]
fn pod_status_state_machine() {
    let world = kubelet::WorldView::default();
    let timing = kubelet::Timing::default();
    let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let later = t0 + std::time::Duration::from_secs(5);
    let mut entered = BTreeMap::new();
    let step = |p: &Pod, now: Timestamp, entered: &BTreeMap<String, Timestamp>| {
        let out = kubelet::pod_status(p, &ctx(&world, entered, &timing, now));
        let mut n = p.clone();
        n.status = Some(out.status);
        (n, out.events.into_iter().map(|e| e.reason).collect::<Vec<_>>())
    };
    // A normal container runs and is ready at once.
    let p = pod(
        json!({"containers": [{"name": "c", "image": "nginx", "imagePullPolicy": "IfNotPresent"}]}),
    );
    let (p1, ev) = step(&p, t0, &entered);
    assert_eq!(ev, ["Pulled", "Created", "Started"]);
    assert_eq!(p1.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(condition(&p1, "Ready").unwrap().0, "True");
    // Idempotent: the same input gives the same status and no events.
    let (p2, ev) = step(&p1, later, &entered);
    assert!(ev.is_empty());
    assert_eq!(
        serde_json::to_value(&p1.status).unwrap(),
        serde_json::to_value(&p2.status).unwrap()
    );

    // Image pulls: ErrImagePull, then ImagePullBackOff once the back-off time passed.
    let p = pod(json!({"containers": [{"name": "c", "image": "unreachable.invalid/a:1"}]}));
    let (p1, ev) = step(&p, t0, &entered);
    assert_eq!(ev, ["Pulling", "Failed", "Failed"]);
    assert_eq!(waiting(&p1).unwrap().0, "ErrImagePull");
    entered.insert("c".to_string(), t0);
    let (same, ev) = step(&p1, t0, &entered);
    assert!(ev.is_empty());
    assert_eq!(waiting(&same).unwrap().0, "ErrImagePull");
    let (p2, ev) = step(&p1, later, &entered);
    assert_eq!(ev, ["BackOff", "Failed"]);
    assert_eq!(waiting(&p2).unwrap().0, "ImagePullBackOff");

    // Crash: running -> CrashLoopBackOff -> running with restartCount 1.
    let p = pod(
        json!({"containers": [{"name": "c", "image": "x:1", "env": [{"name": "KSYNC_SIMULATE", "value": "crash"}, {"name": "KSYNC_SIMULATE_EXIT_CODE", "value": "3"}]}]}),
    );
    let (p1, _) = step(&p, t0, &entered);
    let (p2, ev) = step(&p1, later, &entered);
    assert_eq!(ev, ["BackOff"]);
    assert_eq!(
        waiting(&p2).unwrap(),
        (
            "CrashLoopBackOff".into(),
            "back-off 10s restarting failed container=c pod=p_ns(u1)".into()
        )
    );
    assert_eq!(cstatus(&p2).unwrap().last_state.unwrap().terminated.unwrap().exit_code, 3);
    let (p3, ev) = step(&p2, later + std::time::Duration::from_secs(5), &entered);
    assert!(ev.contains(&"Started".to_string()));
    assert_eq!(cstatus(&p3).unwrap().restart_count, 1);
    assert_eq!(p3.status.as_ref().unwrap().phase.as_deref(), Some("Running"));

    // Run to completion under restartPolicy Never.
    let p = pod(json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": "x:1"}]}));
    let (p1, _) = step(&p, t0, &entered);
    let (p2, _) = step(&p1, later, &entered);
    assert_eq!(p2.status.as_ref().unwrap().phase.as_deref(), Some("Succeeded"));
    assert_eq!(condition(&p2, "Ready").unwrap().1.as_deref(), Some("PodCompleted"));

    // A missing Secret volume: ContainerCreating and FailedMount.
    let p = pod(
        json!({"containers": [{"name": "c", "image": "x:1"}], "volumes": [{"name": "v", "secret": {"secretName": "s"}}]}),
    );
    let out = kubelet::pod_status(&p, &ctx(&world, &entered, &timing, t0));
    assert_eq!(
        out.events[0].message,
        "MountVolume.SetUp failed for volume \"v\" : secret \"s\" not found"
    );
    let mut p1 = p.clone();
    p1.status = Some(out.status);
    assert_eq!(waiting(&p1).unwrap().0, "ContainerCreating");
    assert!(p1.status.as_ref().unwrap().pod_ip.is_none());
}

fn rs_with(replicas: i32) -> ReplicaSet {
    obj(json!({"metadata": {"name": "web-abc", "namespace": "ns", "uid": "rs1", "generation": 2},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}}))
}

fn running_pod(name: &str, ready: bool) -> Pod {
    obj(
        json!({"metadata": {"name": name, "namespace": "ns", "uid": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running", "podIP": format!("10.244.0.{}", name.len()), "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}}),
    )
}

#[test]
fn replicaset_plans_scale_and_status() {
    let now = Timestamp::now();
    let (a, b, c) = (running_pod("a", true), running_pod("b", false), running_pod("c", true));
    let cases = [
        (3, vec![&a], 2, 0, (1, Some(1), Some(1))),
        (1, vec![&a, &b, &c], 0, 2, (3, Some(2), Some(2))),
        (2, vec![&a, &b], 0, 0, (2, Some(1), Some(1))),
        (0, vec![], 0, 0, (0, None, None)),
    ];
    for (want, pods, create, delete, (replicas, ready, available)) in cases {
        let plan = workloads::plan_replicaset(&rs_with(want), &pods, now);
        assert_eq!((plan.create, plan.delete.len()), (create, delete), "replicas {want}");
        assert_eq!(
            (plan.status.replicas, plan.status.ready_replicas, plan.status.available_replicas),
            (replicas, ready, available)
        );
        assert_eq!(plan.status.observed_generation, Some(2));
    }
    // Scale down deletes the not-ready pod first.
    let plan = workloads::plan_replicaset(&rs_with(2), &[&a, &b, &c], now);
    assert_eq!(plan.delete, ["b"]);
}

#[test]
fn deployment_plans_replicasets_and_conditions() {
    let now = Timestamp::now();
    let d: Deployment = obj(
        json!({"metadata": {"name": "web", "namespace": "ns", "uid": "d1", "generation": 1},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}}}),
    );
    // No ReplicaSet yet: create `<name>-<hash>` with the hash label, owned by the Deployment.
    let plan = workloads::plan_deployment(&d, &[], now);
    let rs = plan.create.expect("a new ReplicaSet");
    let hash = workloads::pod_template_hash(&d.spec.as_ref().unwrap().template, None);
    assert_eq!(rs.metadata.name, Some(format!("web-{hash}")));
    assert!(hash.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    assert_eq!(
        rs.spec.as_ref().unwrap().selector.match_labels.as_ref().unwrap()["pod-template-hash"],
        hash
    );
    assert_eq!(rs.metadata.owner_references.as_ref().unwrap()[0].uid, "d1");
    assert_eq!(plan.revision, "1");
    assert_eq!(plan.events, [format!("Scaled up replica set web-{hash} from 0 to 2")]);
    let conds = plan.status.conditions.unwrap();
    assert_eq!(
        (conds[0].type_.as_str(), conds[0].reason.as_deref()),
        ("Available", Some("MinimumReplicasUnavailable"))
    );
    assert_eq!(
        (conds[1].type_.as_str(), conds[1].reason.as_deref(), conds[1].message.clone()),
        (
            "Progressing",
            Some("NewReplicaSetCreated"),
            Some(format!("Created new replica set \"web-{hash}\""))
        )
    );
    assert_eq!(plan.status.unavailable_replicas, Some(2));

    // The ReplicaSet is fully available: the rollout is complete.
    let mut rs = rs;
    rs.metadata.uid = Some("rs1".into());
    rs.metadata.generation = Some(1);
    rs.status = Some(obj(
        json!({"replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "observedGeneration": 1}),
    ));
    let plan = workloads::plan_deployment(&d, &[&rs], now);
    assert!(plan.create.is_none() && plan.scale.is_empty());
    let st = plan.status;
    assert_eq!(
        (
            st.replicas,
            st.updated_replicas,
            st.ready_replicas,
            st.available_replicas,
            st.unavailable_replicas
        ),
        (Some(2), Some(2), Some(2), Some(2), None)
    );
    let conds = st.conditions.unwrap();
    assert_eq!(conds[0].reason.as_deref(), Some("MinimumReplicasAvailable"));
    assert_eq!(
        conds[1].message.clone(),
        Some(format!("ReplicaSet \"web-{hash}\" has successfully progressed."))
    );

    // 1 of 2 available with maxUnavailable 25% (rounds down to 0): not available.
    rs.status = Some(obj(
        json!({"replicas": 2, "readyReplicas": 1, "availableReplicas": 1, "observedGeneration": 1}),
    ));
    let plan = workloads::plan_deployment(&d, &[&rs], now);
    let conds = plan.status.conditions.unwrap();
    assert_eq!(
        (conds[0].status.as_str(), conds[1].reason.as_deref()),
        ("False", Some("ReplicaSetUpdated"))
    );
    assert_eq!(
        workloads::scaled_value(
            Some(&k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("25%".into())),
            10,
            true,
        ),
        3
    );
    assert_eq!(workloads::scaled_value(None, 3, false), 0);
    assert_eq!(workloads::scaled_value(None, 3, true), 1);
}

#[test]
fn job_plans_completion_and_failure() {
    let now = Timestamp::now();
    let job = |limit: i32| -> Job {
        obj(
            json!({"metadata": {"name": "j", "namespace": "ns", "uid": "j1"}, "spec": {"backoffLimit": limit, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}),
        )
    };
    let phase = |name: &str, phase: &str| -> Pod {
        obj(json!({"metadata": {"name": name}, "status": {"phase": phase}}))
    };
    let plan = workloads::plan_job(&job(6), &[], now);
    assert_eq!(plan.create, 1);
    assert!(plan.status.start_time.is_some());
    let ok = phase("a", "Succeeded");
    let plan = workloads::plan_job(&job(6), &[&ok], now);
    let conds = plan.status.conditions.clone().unwrap();
    assert_eq!(
        conds.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
        ["SuccessCriteriaMet", "Complete"]
    );
    assert_eq!(
        (plan.status.succeeded, plan.status.completion_time.is_some(), plan.create),
        (Some(1), true, 0)
    );
    let (f1, f2) = (phase("a", "Failed"), phase("b", "Failed"));
    let plan = workloads::plan_job(&job(1), &[&f1], now);
    assert_eq!(
        (plan.create, plan.status.failed, plan.status.conditions.is_none()),
        (1, Some(1), true)
    );
    let plan = workloads::plan_job(&job(1), &[&f1, &f2], now);
    let conds = plan.status.conditions.clone().unwrap();
    assert_eq!(
        conds.iter().map(|c| (c.type_.as_str(), c.reason.as_deref())).collect::<Vec<_>>(),
        [("FailureTarget", Some("BackoffLimitExceeded")), ("Failed", Some("BackoffLimitExceeded"))]
    );
    assert_eq!(
        plan.events,
        [(
            true,
            "BackoffLimitExceeded".to_string(),
            "Job has reached the specified backoff limit".to_string()
        )]
    );
}

#[test]
fn endpoints_list_ready_and_not_ready_pod_ips() {
    let svc: Service = obj(
        json!({"metadata": {"name": "web", "namespace": "ns", "labels": {"tier": "fe"}}, "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}),
    );
    let mut a = running_pod("a", true);
    let mut b = running_pod("bb", false);
    for p in [&mut a, &mut b] {
        p.metadata.labels = Some(BTreeMap::from([("app".to_string(), "web".to_string())]));
        p.spec.as_mut().unwrap().containers[0].ports =
            Some(vec![obj(json!({"name": "http", "containerPort": 8080}))]);
    }
    let other = running_pod("ccc", true);
    let ep = endpoints::endpoints_for(&svc, &[&a, &b, &other]).expect("endpoints");
    assert_eq!(ep.metadata.labels.as_ref().unwrap()["tier"], "fe");
    let s = &ep.subsets.unwrap()[0];
    assert_eq!(
        s.addresses.as_ref().unwrap().iter().map(|x| x.ip.as_str()).collect::<Vec<_>>(),
        ["10.244.0.1"]
    );
    assert_eq!(s.not_ready_addresses.as_ref().unwrap()[0].ip, "10.244.0.2");
    assert_eq!(s.ports.as_ref().unwrap()[0].port, 8080);
    let no_sel: Service = obj(
        json!({"metadata": {"name": "x", "namespace": "ns"}, "spec": {"ports": [{"port": 80}]}}),
    );
    assert!(endpoints::endpoints_for(&no_sel, &[&a]).is_none());
    let empty = endpoints::endpoints_for(&svc, &[&other]).unwrap();
    assert!(empty.subsets.is_none());

    let claim = |class: Value| -> PersistentVolumeClaim {
        obj(
            json!({"metadata": {"name": "c"}, "spec": {"storageClassName": class}, "status": {"phase": "Pending"}}),
        )
    };
    assert_eq!(endpoints::claim_problem(&claim(Value::Null)).unwrap().0, "FailedBinding");
    assert_eq!(
        endpoints::claim_problem(&claim(json!(""))).unwrap().1,
        "no persistent volumes available for this claim and no storage class is set"
    );
    assert_eq!(
        endpoints::claim_problem(&claim(json!("fast"))).unwrap(),
        ("ProvisioningFailed", "storageclass.storage.k8s.io \"fast\" not found".to_string())
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

#[test]
fn statefulset_creates_ordinals_in_order() {
    use k8s_openapi::api::apps::v1::StatefulSet;
    let now = Timestamp::now();
    let sts: StatefulSet = obj(
        json!({"metadata": {"name": "db", "namespace": "ns", "uid": "s1", "generation": 1},
        "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}}),
    );
    let plan = workloads::plan_statefulset(&sts, &[], &[], now);
    assert_eq!(
        plan.create.iter().map(|p| p.metadata.name.clone().unwrap()).collect::<Vec<_>>(),
        ["db-0"]
    );
    assert_eq!(plan.claims[0].metadata.name.as_deref(), Some("data-db-0"));
    let vol = &plan.create[0].spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
    assert_eq!(vol.persistent_volume_claim.as_ref().unwrap().claim_name, "data-db-0");
    // db-1 waits for db-0 to be Ready.
    let (rev, _) = workloads::revision_name("db", &sts.spec.as_ref().unwrap().template);
    let mut p0 = running_pod("db-0", false);
    p0.metadata.labels =
        Some(BTreeMap::from([("controller-revision-hash".to_string(), rev.clone())]));
    let plan = workloads::plan_statefulset(&sts, &[&p0], &["data-db-0".into()], now);
    assert!(plan.create.is_empty());
    p0.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "True".into();
    let plan = workloads::plan_statefulset(&sts, &[&p0], &["data-db-0".into()], now);
    assert_eq!(plan.create[0].metadata.name.as_deref(), Some("db-1"));
    assert_eq!(plan.status.update_revision.as_deref(), Some(rev.as_str()));
}

#[test]
fn deployment_rolls_within_max_surge_and_max_unavailable() {
    let now = Timestamp::now();
    // 4 replicas, maxSurge 25% (1), maxUnavailable 25% (1).
    let d: Deployment = obj(
        json!({"metadata": {"name": "web", "namespace": "ns", "uid": "d1", "generation": 2},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "v2"}]}}}}),
    );
    let rs = |name: &str, image: &str, rev: &str, replicas: i32, available: i32| -> ReplicaSet {
        obj(json!({"metadata": {"name": name, "namespace": "ns", "uid": name, "generation": 1,
                                "annotations": {"deployment.kubernetes.io/revision": rev}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": name}}, "spec": {"containers": [{"name": "c", "image": image}]}}},
            "status": {"replicas": replicas, "readyReplicas": available, "availableReplicas": available, "observedGeneration": 1}}))
    };
    let old = rs("web-old", "v1", "1", 4, 4);
    // First step: a new ReplicaSet with one surge pod, and one old pod may go.
    let plan = workloads::plan_deployment(&d, &[&old], now);
    let new = plan.create.expect("new ReplicaSet");
    assert_eq!(new.spec.as_ref().unwrap().replicas, Some(1));
    assert_eq!(plan.revision, "2");
    assert_eq!(
        plan.scale,
        [(
            "web-old".to_string(),
            3,
            BTreeMap::from([
                ("deployment.kubernetes.io/desired-replicas".to_string(), "4".to_string()),
                ("deployment.kubernetes.io/revision".to_string(), "1".to_string())
            ])
        )]
    );
    // Later: new has 2 (1 available), old has 3 (all available): 5 pods = 4 + surge; one
    // unavailable new pod leaves room to remove one old pod (4 - 1 = 3 must stay available).
    let new_rs = rs("web-new", "v2", "2", 2, 1);
    let old = rs("web-old", "v1", "1", 3, 3);
    let plan = workloads::plan_deployment(&d, &[&old, &new_rs], now);
    assert!(plan.create.is_none());
    let scaled: Vec<(String, i32)> = plan.scale.iter().map(|(n, r, _)| (n.clone(), *r)).collect();
    // The new ReplicaSet only gets its desired/max-replicas annotations; the old one shrinks.
    assert_eq!(scaled, [("web-new".to_string(), 2), ("web-old".to_string(), 2)]);
    assert_eq!(plan.events, ["Scaled down replica set web-old from 3 to 2"]);
    let conds = plan.status.conditions.unwrap();
    assert_eq!(conds[1].message.as_deref(), Some("ReplicaSet \"web-new\" is progressing."));
}
