//! Table tests of the simulator's pure decisions (the behaviour through the API is tested in
//! `tests/simulator.rs`).
// A failed unwrap in a test is a failed assertion; the table tests read better without `expect`.
#![allow(clippy::unwrap_used)]

use super::{endpoints, kubelet, quantity, scheduler, workloads};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStatus, Node, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::jiff::Timestamp;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn obj<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("valid object")
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

#[test]
fn failed_creates_are_worded_like_kube_controller_manager() {
    let err = r#"pods "web-" is forbidden: error looking up service account ns/app: serviceaccount "app" not found"#;
    // (component, pod, owner, expected Event message)
    let cases = [
        ("replicaset-controller", "", "web-1", format!("Error creating: {err}")),
        ("job-controller", "", "migrate", format!("Error creating: {err}")),
        ("daemonset-controller", "", "agent", format!("Error creating: {err}")),
        (
            "statefulset-controller",
            "db-0",
            "db",
            format!("create Pod db-0 in StatefulSet db failed error: {err}"),
        ),
    ];
    for (component, pod, owner, want) in cases {
        assert_eq!(
            workloads::failed_create_message(component, pod, owner, err),
            want,
            "{component}"
        );
    }
}

#[test]
fn replica_failure_condition_follows_the_last_create() {
    use k8s_openapi::api::apps::v1::ReplicaSetCondition;
    let t0: Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
    let t1: Timestamp = "2026-01-01T00:01:00Z".parse().expect("time");
    let failure = |message: &str, at: Timestamp| ReplicaSetCondition {
        type_: "ReplicaFailure".into(),
        status: "True".into(),
        reason: Some("FailedCreate".into()),
        message: Some(message.into()),
        last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at)),
    };
    let other =
        ReplicaSetCondition { type_: "Other".into(), status: "True".into(), ..Default::default() };
    // (previous conditions, last create failure, expected conditions)
    type Case = (Vec<ReplicaSetCondition>, Option<&'static str>, Option<Vec<ReplicaSetCondition>>);
    let cases: Vec<Case> = vec![
        (vec![], None, None),
        (vec![], Some("denied"), Some(vec![failure("denied", t1)])),
        // Still failing with the same error: unchanged (no status write every pass).
        (vec![failure("denied", t0)], Some("denied"), Some(vec![failure("denied", t0)])),
        // A different error: new message, the transition time stays.
        (vec![failure("denied", t0)], Some("quota"), Some(vec![failure("quota", t0)])),
        // Creation succeeded again: removed, other conditions kept.
        (vec![other.clone(), failure("denied", t0)], None, Some(vec![other.clone()])),
        (vec![failure("denied", t0)], None, None),
    ];
    for (prev, create_failure, want) in cases {
        let got = workloads::replica_failure_conditions(Some(&prev), create_failure, t1);
        assert_eq!(got, want, "prev {prev:?}, failure {create_failure:?}");
    }
}

#[test]
fn writes_to_one_object_or_of_one_owner_share_a_lane() {
    use super::Write;
    use super::events::{EventSpec, EventType};
    use k8s_openapi::api::core::v1::ObjectReference;
    let dep: Deployment = obj(json!({"metadata": {"name": "web", "namespace": "ns", "uid": "d1"}}));
    let owner = |uid: &str| ObjectReference { uid: Some(uid.into()), ..Default::default() };
    let pod_of = |name: &str| -> Box<Pod> {
        Box::new(obj(json!({"metadata": {"name": name, "namespace": "ns"}})))
    };
    let create = |name: &str, uid: &str| Write::CreatePod {
        pod: pod_of(name),
        owner: owner(uid),
        component: "replicaset-controller",
        message: None,
    };
    let event = |reason: &str| {
        let e =
            EventSpec::new(owner("d1"), EventType::Normal, reason, "m", "deployment-controller");
        Write::Event(Box::new(e))
    };
    let same = [
        // An owner's Pod creates stop at its first refusal, so they stay in order.
        (create("a", "rs1"), create("b", "rs1")),
        (
            create("a", "rs1"),
            Write::DeletePod {
                ns: "ns".into(),
                name: "c".into(),
                owner: owner("rs1"),
                component: "replicaset-controller",
            },
        ),
        (event("ScalingReplicaSet"), event("ScalingReplicaSet")),
    ];
    for (a, b) in &same {
        assert_eq!(a.lane(), b.lane(), "{a:?} / {b:?}");
    }
    let apart = [
        (create("a", "rs1"), create("a", "rs2")),
        (Write::DeploymentStatus(Box::new(dep.clone())), event("ScalingReplicaSet")),
        (event("ScalingReplicaSet"), event("Other")),
        (
            Write::PodStatus { pod: pod_of("a"), bind: None },
            Write::PodStatus { pod: pod_of("b"), bind: None },
        ),
    ];
    for (a, b) in &apart {
        assert_ne!(a.lane(), b.lane(), "{a:?} / {b:?}");
    }
}
