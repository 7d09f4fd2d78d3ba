//! The kwok-like workload simulator behind `--simulate-workloads` (issue 3, DESIGN §5).
//!
//! It is a set of controllers and a fake kubelet that talk to the sandbox as an ordinary client
//! (a `kube::Client` with reflectors), never to the store, so they behave as the real ones do on a
//! cluster: the scheduler binds pods to the simulated Nodes, the kubelet writes pod status through
//! `/status` and records Events, the deployment, replicaset, statefulset, daemonset and job
//! controllers create dependents with controller owner references (the server's garbage collector
//! removes them with their owner), and the endpoints controller maintains core/v1 Endpoints.
//! Every decision is a pure function ([`kubelet::pod_status`], [`scheduler::schedule`],
//! [`workloads::plan_deployment`], [`workloads::plan_replicaset`],
//! [`workloads::plan_statefulset`], [`workloads::plan_daemonset`], [`workloads::plan_job`],
//! [`endpoints::endpoints_for`], [`endpoints::claim_problem`]); this module only observes (one
//! reflector per kind), plans a list of writes, performs them (status through `/status` with
//! `kubelet`/`kube-controller-manager` as field managers) and waits until its caches show its own
//! writes before the next pass, so that it never acts twice on a stale view.
//!
//! Deployments roll like the deployment controller (new ReplicaSet `<name>-<pod-template-hash>`,
//! growth within `maxSurge`, old ReplicaSets shrinking while `replicas - maxUnavailable` stay
//! available, `Recreate`), with `observedGeneration`, the replica counts, `Available`
//! (`MinimumReplicasAvailable`/`MinimumReplicasUnavailable`) and `Progressing`
//! (`NewReplicaSetCreated`, `ReplicaSetUpdated`, `NewReplicaSetAvailable`,
//! `ProgressDeadlineExceeded` after `progressDeadlineSeconds` without progress). The template hash
//! is FNV-32a written with Kubernetes' safe alphabet, over the JSON of the template rather than Go's
//! `spew` dump, so its value differs from a real cluster's for the same template.
//!
//! # Nodes
//! One Node, `sandbox-node-1`: cpu 4, memory 8Gi, pods 110, `Ready`. A pod whose requests exceed
//! what is left stays `Pending` with `PodScheduled=False` reason `Unschedulable` and a
//! `FailedScheduling` Warning (`0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes
//! are available: 1 No preemption victims found for incoming pod.`).
//!
//! # Conventions a manifest uses to choose a failure
//! - **Unreachable registry**: an image whose registry host is under the `.invalid` top-level
//!   domain (RFC 2606 guarantees it never resolves), e.g. `unreachable.invalid/app:1`, fails to
//!   pull: `ErrImagePull` (with containerd's `no such host` error), then `ImagePullBackOff`
//!   (`Back-off pulling image "…"`), with the kubelet's `Pulling`, `Failed` and `BackOff` Events.
//! - **`KSYNC_SIMULATE=crash`** (env var of a container; `fail` is a synonym; the exit code is
//!   `KSYNC_SIMULATE_EXIT_CODE`, default 1): the container exits after [`kubelet::Timing::run`]; with
//!   `restartPolicy: Always` or `OnFailure` it goes into `CrashLoopBackOff` (`back-off 10s restarting
//!   failed container=…`, `lastState.terminated`, `restartCount` rising, `BackOff` Event), with
//!   `Never` the pod ends `Failed`. A Job whose pods crash fails with `BackoffLimitExceeded` once more
//!   than `backoffLimit` pods failed.
//! - **`KSYNC_SIMULATE=unready`**: the container runs but its readiness probe fails: the pod is
//!   `Running` and not `Ready` (`ContainersNotReady`), with an `Unhealthy` Event
//!   (`Readiness probe failed: HTTP probe failed with statuscode: 503`, or the TCP wording for a
//!   `tcpSocket` probe).
//! - **Run to completion**: containers of pods with `restartPolicy` `OnFailure` or `Never` (Jobs)
//!   exit 0 after [`kubelet::Timing::run`] unless told to crash, so a Job completes
//!   (`Complete`, `succeeded: 1`, `completionTime`).
//! - **Missing Secret or ConfigMap**: a container whose `env[].valueFrom` or `envFrom` refers to a
//!   missing, non-optional Secret/ConfigMap (or key) waits in `CreateContainerConfigError`
//!   (`secret "db" not found`, Warning `Failed` `Error: secret "db" not found`) and starts once it
//!   appears. A missing Secret/ConfigMap *volume* keeps the pod in `ContainerCreating` with a
//!   `FailedMount` Warning (`MountVolume.SetUp failed for volume "v" : secret "db" not found`), as
//!   the kubelet does, and recovers the same way.
//! - **PersistentVolumeClaims** stay `Pending` (the sandbox has no volumes or provisioners) with a
//!   `FailedBinding` Warning (`no persistent volumes available for this claim and no storage class
//!   is set`), or `ProvisioningFailed` for a named class; pods using them are unschedulable.
//!
//! Durations are compressed ([`kubelet::Timing`]): a second stands for the kubelet's 10 s restart
//! back-off (doubling up to the 5 min cap, so up to 30 s), an exiting container runs for a second
//! and `ErrImagePull` turns into `ImagePullBackOff` after a second; messages state the real
//! back-off (`back-off 10s`, `20s`, … `5m0s`).

pub mod endpoints;
pub mod events;
pub mod kubelet;
pub mod logs;
pub mod nodes;
pub mod quantity;
pub mod scheduler;
pub mod workloads;

use events::{EventSpec, EventType, reference};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Event, Node, PersistentVolumeClaim, Pod, Secret, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// How to run the simulator.
#[derive(Debug, Clone)]
pub struct SimulatorOptions {
    pub nodes: Vec<nodes::NodeTemplate>,
    pub timing: kubelet::Timing,
    /// Resync period (time-driven transitions are checked at least this often).
    pub tick: Duration,
}

impl Default for SimulatorOptions {
    fn default() -> Self {
        SimulatorOptions {
            nodes: vec![nodes::NodeTemplate::new("sandbox-node-1", "4", "8Gi", 110)],
            timing: kubelet::Timing::default(),
            tick: Duration::from_millis(200),
        }
    }
}

/// Start the simulator against the sandbox whose admin kubeconfig is at `kubeconfig`; returns
/// once the Nodes exist and the caches are synced.
pub async fn start(kubeconfig: &Path) -> anyhow::Result<JoinHandle<()>> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await?;
    start_with(Client::try_from(cfg)?, SimulatorOptions::default()).await
}

/// Start the simulator with `client` (an identity allowed to do what controllers and kubelets do).
pub async fn start_with(client: Client, opts: SimulatorOptions) -> anyhow::Result<JoinHandle<()>> {
    let now = Timestamp::now();
    let node_api: Api<Node> = Api::all(client.clone());
    for (i, t) in opts.nodes.iter().enumerate() {
        match node_api
            .create(
                &PostParams { field_manager: Some("kubelet".into()), ..Default::default() },
                &nodes::node(t, i, now),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let notify = Arc::new(Notify::new());
    let mut guard = AbortOnDrop(vec![]);
    let caches = Caches {
        nodes: watch(&client, &notify, &mut guard),
        pods: watch(&client, &notify, &mut guard),
        deployments: watch(&client, &notify, &mut guard),
        replicasets: watch(&client, &notify, &mut guard),
        jobs: watch(&client, &notify, &mut guard),
        services: watch(&client, &notify, &mut guard),
        endpoints: watch(&client, &notify, &mut guard),
        secrets: watch(&client, &notify, &mut guard),
        config_maps: watch(&client, &notify, &mut guard),
        pvcs: watch(&client, &notify, &mut guard),
        statefulsets: watch(&client, &notify, &mut guard),
        daemonsets: watch(&client, &notify, &mut guard),
    };
    caches.wait_until_ready().await?;
    let mut sim = Simulator { client, caches, opts, memory: Memory::default() };
    Ok(tokio::spawn(async move {
        let _guard = guard;
        loop {
            tokio::select! {
                _ = notify.notified() => {}
                _ = tokio::time::sleep(sim.opts.tick) => {}
            }
            // Let a burst of watch events settle into one pass.
            tokio::time::sleep(Duration::from_millis(15)).await;
            sim.pass().await;
        }
    }))
}

/// Aborts the watcher tasks when the simulator task ends.
#[derive(Debug)]
struct AbortOnDrop(Vec<JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

fn watch<K>(client: &Client, notify: &Arc<Notify>, guard: &mut AbortOnDrop) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let api: Api<K> = Api::all(client.clone());
    let stream =
        reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    let notify = notify.clone();
    guard.0.push(tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while stream.next().await.is_some() {
            notify.notify_one();
        }
    }));
    reader
}

#[derive(Clone)]
struct Caches {
    nodes: Store<Node>,
    pods: Store<Pod>,
    deployments: Store<Deployment>,
    replicasets: Store<ReplicaSet>,
    jobs: Store<Job>,
    services: Store<Service>,
    endpoints: Store<Endpoints>,
    secrets: Store<Secret>,
    config_maps: Store<ConfigMap>,
    pvcs: Store<PersistentVolumeClaim>,
    statefulsets: Store<StatefulSet>,
    daemonsets: Store<DaemonSet>,
}

impl Caches {
    async fn wait_until_ready(&self) -> anyhow::Result<()> {
        let w = async {
            self.nodes.wait_until_ready().await?;
            self.pods.wait_until_ready().await?;
            self.deployments.wait_until_ready().await?;
            self.replicasets.wait_until_ready().await?;
            self.jobs.wait_until_ready().await?;
            self.services.wait_until_ready().await?;
            self.endpoints.wait_until_ready().await?;
            self.secrets.wait_until_ready().await?;
            self.config_maps.wait_until_ready().await?;
            self.pvcs.wait_until_ready().await?;
            self.statefulsets.wait_until_ready().await?;
            self.daemonsets.wait_until_ready().await?;
            Ok::<_, reflector::store::WriterDropped>(())
        };
        tokio::time::timeout(Duration::from_secs(30), w).await??;
        Ok(())
    }
}

/// What the simulator remembers between passes (the kubelet's and the recorder's memory).
#[derive(Debug, Default)]
struct Memory {
    /// (pod uid, container, state signature) -> when first observed.
    entered: HashMap<(String, String, String), Timestamp>,
    /// pod uid -> IP.
    ips: HashMap<String, String>,
    /// event key -> (namespace, name, count, last emitted).
    events: HashMap<String, (String, String, i32, Timestamp)>,
    /// Events created so far (keeps Event names unique).
    event_seq: u64,
}

/// One write a pass decided on.
#[derive(Debug)]
enum Write {
    CreateReplicaSet(Box<ReplicaSet>),
    ScaleReplicaSet {
        ns: String,
        name: String,
        replicas: i32,
        annotations: BTreeMap<String, String>,
    },
    DeploymentRevision {
        ns: String,
        name: String,
        revision: String,
    },
    DeploymentStatus(Box<Deployment>),
    ReplicaSetStatus(Box<ReplicaSet>),
    JobStatus(Box<Job>),
    /// `message`: the owner's `SuccessfulCreate` event (default `Created pod: <name>`).
    CreatePod {
        pod: Box<Pod>,
        owner: k8s_openapi::api::core::v1::ObjectReference,
        component: &'static str,
        message: Option<String>,
    },
    CreateClaim {
        claim: Box<PersistentVolumeClaim>,
        owner: k8s_openapi::api::core::v1::ObjectReference,
        message: String,
    },
    StatefulSetStatus(Box<StatefulSet>),
    DaemonSetStatus(Box<DaemonSet>),
    DeletePod {
        ns: String,
        name: String,
        owner: k8s_openapi::api::core::v1::ObjectReference,
        component: &'static str,
    },
    /// Bind to `spec.nodeName` (when set on the object and not yet in the store), then write status.
    PodStatus {
        pod: Box<Pod>,
        bind: Option<String>,
    },
    CreateEndpoints(Box<Endpoints>),
    ReplaceEndpoints(Box<Endpoints>),
    DeleteEndpoints {
        ns: String,
        name: String,
    },
    Event(Box<EventSpec>),
}

struct Simulator {
    client: Client,
    caches: Caches,
    opts: SimulatorOptions,
    memory: Memory,
}

fn same<T: Serialize>(a: &T, b: &T) -> bool {
    serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
}

fn deleting<K: Resource>(o: &K) -> bool {
    o.meta().deletion_timestamp.is_some()
}

fn state_signature(c: &k8s_openapi::api::core::v1::ContainerStatus) -> String {
    let s = c.state.clone().unwrap_or_default();
    let kind = if s.running.is_some() {
        "running".to_string()
    } else if let Some(t) = &s.terminated {
        format!("terminated/{}", t.exit_code)
    } else {
        format!("waiting/{}", s.waiting.and_then(|w| w.reason).unwrap_or_default())
    };
    format!("{kind}/{}", c.restart_count)
}

impl Simulator {
    /// Observe, decide, write.
    async fn pass(&mut self) {
        let now = Timestamp::now();
        let writes = self.plan(now);
        self.execute(writes, now).await;
    }

    fn plan(&mut self, now: Timestamp) -> Vec<Write> {
        let c = &self.caches;
        let mut out = vec![];
        let pods = c.pods.state();
        let mut by_owner: HashMap<String, Vec<&Pod>> = HashMap::new();
        for p in &pods {
            for r in
                p.metadata.owner_references.iter().flatten().filter(|r| r.controller == Some(true))
            {
                by_owner.entry(r.uid.clone()).or_default().push(p);
            }
        }
        let owned = |uid: &Option<String>| {
            by_owner.get(uid.as_deref().unwrap_or_default()).cloned().unwrap_or_default()
        };

        // Deployments -> ReplicaSets.
        let rss = c.replicasets.state();
        for d in c.deployments.state().iter().filter(|d| !deleting(&***d)) {
            let uid = d.metadata.uid.clone().unwrap_or_default();
            let mine: Vec<&ReplicaSet> = rss
                .iter()
                .map(|r| &**r)
                .filter(|r| workloads::controlled_by(&r.metadata, &uid))
                .collect();
            let plan = workloads::plan_deployment(d, &mine, now);
            let ns = d.namespace().unwrap_or_default();
            let name = d.name_any();
            for m in &plan.events {
                out.push(Write::Event(Box::new(EventSpec::new(
                    reference(&**d, None),
                    EventType::Normal,
                    "ScalingReplicaSet",
                    m.clone(),
                    "deployment-controller",
                ))));
            }
            if let Some(rs) = plan.create {
                out.push(Write::CreateReplicaSet(Box::new(rs)));
            }
            for (rs, replicas, annotations) in plan.scale {
                out.push(Write::ScaleReplicaSet {
                    ns: ns.clone(),
                    name: rs,
                    replicas,
                    annotations,
                });
            }
            if d.annotations().get(workloads::REVISION) != Some(&plan.revision) {
                out.push(Write::DeploymentRevision {
                    ns: ns.clone(),
                    name: name.clone(),
                    revision: plan.revision.clone(),
                });
            }
            if !same(&d.status, &Some(plan.status.clone())) {
                let mut nd = (**d).clone();
                nd.status = Some(plan.status);
                out.push(Write::DeploymentStatus(Box::new(nd)));
            }
        }

        // ReplicaSets -> Pods.
        for rs in rss.iter().filter(|r| !deleting(&***r)) {
            let mine = owned(&rs.metadata.uid);
            let plan = workloads::plan_replicaset(rs, &mine, now);
            let ns = rs.namespace().unwrap_or_default();
            let template = rs.spec.as_ref().and_then(|s| s.template.clone()).unwrap_or_default();
            for _ in 0..plan.create.min(500) {
                let pod = workloads::pod_from_template(
                    &template,
                    workloads::controller_ref(&**rs),
                    &ns,
                    &format!("{}-", rs.name_any()),
                    &BTreeMap::new(),
                );
                out.push(Write::CreatePod {
                    pod: Box::new(pod),
                    owner: reference(&**rs, None),
                    component: "replicaset-controller",
                    message: None,
                });
            }
            for name in plan.delete {
                out.push(Write::DeletePod {
                    ns: ns.clone(),
                    name,
                    owner: reference(&**rs, None),
                    component: "replicaset-controller",
                });
            }
            if !same(&rs.status, &Some(plan.status.clone())) {
                let mut n = (**rs).clone();
                n.status = Some(plan.status);
                out.push(Write::ReplicaSetStatus(Box::new(n)));
            }
        }

        // Jobs -> Pods.
        for job in c.jobs.state().iter().filter(|j| !deleting(&***j)) {
            let mine = owned(&job.metadata.uid);
            let plan = workloads::plan_job(job, &mine, now);
            let ns = job.namespace().unwrap_or_default();
            let template = job.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
            for _ in 0..plan.create.min(500) {
                let pod = workloads::pod_from_template(
                    &template,
                    workloads::controller_ref(&**job),
                    &ns,
                    &format!("{}-", job.name_any()),
                    &workloads::job_pod_labels(job),
                );
                out.push(Write::CreatePod {
                    pod: Box::new(pod),
                    owner: reference(&**job, None),
                    component: "job-controller",
                    message: None,
                });
            }
            for name in plan.delete {
                out.push(Write::DeletePod {
                    ns: ns.clone(),
                    name,
                    owner: reference(&**job, None),
                    component: "job-controller",
                });
            }
            for (warning, reason, message) in plan.events {
                let t = if warning { EventType::Warning } else { EventType::Normal };
                out.push(Write::Event(Box::new(EventSpec::new(
                    reference(&**job, None),
                    t,
                    &reason,
                    message,
                    "job-controller",
                ))));
            }
            if !same(&job.status, &Some(plan.status.clone())) {
                let mut n = (**job).clone();
                n.status = Some(plan.status);
                out.push(Write::JobStatus(Box::new(n)));
            }
        }

        // StatefulSets and DaemonSets -> Pods.
        let node_objs = c.nodes.state();
        let node_refs: Vec<&Node> = node_objs.iter().map(|n| &**n).collect();
        let claim_names: Vec<String> = c
            .pvcs
            .state()
            .iter()
            .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
            .collect();
        for sts in c.statefulsets.state().iter().filter(|s| !deleting(&***s)) {
            let ns = sts.namespace().unwrap_or_default();
            let name = sts.name_any();
            let prefix = format!("{ns}/");
            let existing: Vec<String> = claim_names
                .iter()
                .filter_map(|c| c.strip_prefix(&prefix).map(str::to_string))
                .collect();
            let plan = workloads::plan_statefulset(sts, &owned(&sts.metadata.uid), &existing, now);
            for claim in plan.claims {
                let pod_name = plan.create.first().map(|p| p.name_any()).unwrap_or_default();
                let message = format!(
                    "create Claim {} Pod {pod_name} in StatefulSet {name} success",
                    claim.name_any()
                );
                out.push(Write::CreateClaim {
                    claim: Box::new(claim),
                    owner: reference(&**sts, None),
                    message,
                });
            }
            for pod in plan.create {
                let message =
                    Some(format!("create Pod {} in StatefulSet {name} successful", pod.name_any()));
                out.push(Write::CreatePod {
                    pod: Box::new(pod),
                    owner: reference(&**sts, None),
                    component: "statefulset-controller",
                    message,
                });
            }
            for pod in plan.delete {
                out.push(Write::Event(Box::new(EventSpec::new(
                    reference(&**sts, None),
                    EventType::Normal,
                    "SuccessfulDelete",
                    format!("delete Pod {pod} in StatefulSet {name} successful"),
                    "statefulset-controller",
                ))));
                out.push(Write::DeletePod {
                    ns: ns.clone(),
                    name: pod,
                    owner: reference(&**sts, None),
                    component: "statefulset-controller",
                });
            }
            if !same(&sts.status, &Some(plan.status.clone())) {
                let mut n = (**sts).clone();
                n.status = Some(plan.status);
                out.push(Write::StatefulSetStatus(Box::new(n)));
            }
        }
        for ds in c.daemonsets.state().iter().filter(|s| !deleting(&***s)) {
            let ns = ds.namespace().unwrap_or_default();
            let plan = workloads::plan_daemonset(ds, &owned(&ds.metadata.uid), &node_refs, now);
            for pod in plan.create {
                out.push(Write::CreatePod {
                    pod: Box::new(pod),
                    owner: reference(&**ds, None),
                    component: "daemonset-controller",
                    message: None,
                });
            }
            for name in plan.delete {
                out.push(Write::DeletePod {
                    ns: ns.clone(),
                    name,
                    owner: reference(&**ds, None),
                    component: "daemonset-controller",
                });
            }
            if !same(&ds.status, &Some(plan.status.clone())) {
                let mut n = (**ds).clone();
                n.status = Some(plan.status);
                out.push(Write::DaemonSetStatus(Box::new(n)));
            }
        }

        // The scheduler and the kubelet.
        let node_index: HashMap<String, (usize, String)> = self
            .opts
            .nodes
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), (i, nodes::node_ip(i))))
            .collect();
        let mut used: BTreeMap<String, scheduler::Resources> = BTreeMap::new();
        for p in pods.iter().filter(|p| workloads::is_active(p)) {
            if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                used.entry(n).or_default().add(&scheduler::pod_requests(p));
            }
        }
        let pvcs = c.pvcs.state();
        let mut world = kubelet::WorldView::default();
        for s in c.secrets.state() {
            let mut keys: BTreeSet<String> =
                s.data.iter().flat_map(|d| d.keys().cloned()).collect();
            keys.extend(s.string_data.iter().flat_map(|d| d.keys().cloned()));
            world.secrets.insert((s.namespace().unwrap_or_default(), s.name_any()), keys);
        }
        for m in c.config_maps.state() {
            let mut keys: BTreeSet<String> =
                m.data.iter().flat_map(|d| d.keys().cloned()).collect();
            keys.extend(m.binary_data.iter().flat_map(|d| d.keys().cloned()));
            world.config_maps.insert((m.namespace().unwrap_or_default(), m.name_any()), keys);
        }
        let mut sorted: Vec<&Arc<Pod>> = pods.iter().filter(|p| !deleting(&***p)).collect();
        sorted.sort_by_key(|p| (p.metadata.creation_timestamp.as_ref().map(|t| t.0), p.name_any()));
        let live: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        self.memory.entered.retain(|(uid, _, _), _| live.contains(uid));
        self.memory.ips.retain(|uid, _| live.contains(uid));
        // Stop counting repeats of events older than kube-apiserver's event TTL (one hour).
        self.memory.events.retain(|_, e| now.as_second() - e.3.as_second() < 3600);
        for p in sorted {
            let spec = p.spec.clone().unwrap_or_default();
            let mut bind = None;
            let node = match spec.node_name.clone() {
                Some(n) => n,
                None => {
                    if spec.scheduler_name.as_deref().is_some_and(|s| s != "default-scheduler") {
                        continue;
                    }
                    let ns = p.namespace().unwrap_or_default();
                    let unbound = spec
                        .volumes
                        .iter()
                        .flatten()
                        .filter_map(|v| v.persistent_volume_claim.as_ref())
                        .any(|claim| {
                            !pvcs.iter().any(|c| {
                                c.namespace().as_deref() == Some(ns.as_str())
                                    && c.name_any() == claim.claim_name
                                    && c.status.as_ref().and_then(|s| s.phase.as_deref())
                                        == Some("Bound")
                            })
                        });
                    match scheduler::schedule(p, &node_refs, &used, unbound) {
                        Ok(n) => {
                            used.entry(n.clone()).or_default().add(&scheduler::pod_requests(p));
                            out.push(Write::Event(Box::new(EventSpec::new(
                                reference(&**p, None),
                                EventType::Normal,
                                "Scheduled",
                                format!("Successfully assigned {ns}/{} to {n}", p.name_any()),
                                "default-scheduler",
                            ))));
                            bind = Some(n.clone());
                            n
                        }
                        Err(e) => {
                            out.push(Write::Event(Box::new(
                                EventSpec::new(
                                    reference(&**p, None),
                                    EventType::Warning,
                                    "FailedScheduling",
                                    e.message.clone(),
                                    "default-scheduler",
                                )
                                .throttled(),
                            )));
                            let st = kubelet::unschedulable_status(p, &e.message, now);
                            if !same(&p.status, &Some(st.clone())) {
                                let mut np = (**p).clone();
                                np.status = Some(st);
                                out.push(Write::PodStatus { pod: Box::new(np), bind: None });
                            }
                            continue;
                        }
                    }
                }
            };
            let Some((_, host_ip)) = node_index.get(&node) else { continue };
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let ip = match self.memory.ips.get(&uid) {
                Some(ip) => ip.clone(),
                None => {
                    let ip = match p.status.as_ref().and_then(|s| s.pod_ip.clone()) {
                        Some(ip) => ip,
                        None => {
                            let idx = node_index.get(&node).map(|(i, _)| *i).unwrap_or(0);
                            // The lowest free address of the node's pod CIDR (10.244.<idx>.0/24;
                            // .1 is the gateway), reused once its pod is gone.
                            let taken: BTreeSet<&String> = self.memory.ips.values().collect();
                            (2..255)
                                .map(|h| format!("10.244.{idx}.{h}"))
                                .find(|ip| !taken.contains(ip))
                                .unwrap_or_else(|| format!("10.244.{idx}.255"))
                        }
                    };
                    self.memory.ips.insert(uid.clone(), ip.clone());
                    ip
                }
            };
            let mut entered = BTreeMap::new();
            for cs in
                p.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default()
            {
                let t = *self
                    .memory
                    .entered
                    .entry((uid.clone(), cs.name.clone(), state_signature(&cs)))
                    .or_insert(now);
                entered.insert(cs.name.clone(), t);
            }
            let mut input = (**p).clone();
            if bind.is_some() {
                input.spec.get_or_insert_with(Default::default).node_name = Some(node.clone());
            }
            let cx = kubelet::PodContext {
                node_name: &node,
                host_ip,
                pod_ip: &ip,
                world: &world,
                now,
                entered: &entered,
                timing: &self.opts.timing,
            };
            let outcome = kubelet::pod_status(&input, &cx);
            for e in outcome.events {
                out.push(Write::Event(Box::new(e)));
            }
            if bind.is_some() || !same(&p.status, &Some(outcome.status.clone())) {
                input.status = Some(outcome.status);
                out.push(Write::PodStatus { pod: Box::new(input), bind });
            }
        }

        // Services -> Endpoints.
        let services = c.services.state();
        let pod_refs: Vec<&Pod> = pods.iter().map(|p| &**p).collect();
        for svc in services.iter().filter(|s| !deleting(&***s)) {
            let Some(mut want) = endpoints::endpoints_for(svc, &pod_refs) else { continue };
            let key = ObjectRef::<Endpoints>::new(&svc.name_any())
                .within(&svc.namespace().unwrap_or_default());
            match c.endpoints.get(&key) {
                None => {
                    want.metadata.annotations = Some(BTreeMap::from([(
                        endpoints::TRIGGER_TIME.to_string(),
                        Time(now).0.to_string(),
                    )]));
                    out.push(Write::CreateEndpoints(Box::new(want)));
                }
                Some(cur) => {
                    if !same(&cur.subsets, &want.subsets)
                        || !same(&cur.metadata.labels, &want.metadata.labels)
                    {
                        let mut n = (*cur).clone();
                        n.subsets = want.subsets;
                        n.metadata.labels = want.metadata.labels;
                        n.metadata
                            .annotations
                            .get_or_insert_with(Default::default)
                            .insert(endpoints::TRIGGER_TIME.into(), now.to_string());
                        out.push(Write::ReplaceEndpoints(Box::new(n)));
                    }
                }
            }
        }
        for ep in c.endpoints.state() {
            let managed = ep.annotations().contains_key(endpoints::TRIGGER_TIME);
            let has_svc = services
                .iter()
                .any(|s| s.name_any() == ep.name_any() && s.namespace() == ep.namespace());
            if managed && !has_svc && !deleting(&*ep) {
                out.push(Write::DeleteEndpoints {
                    ns: ep.namespace().unwrap_or_default(),
                    name: ep.name_any(),
                });
            }
        }

        // PersistentVolumeClaims stay Pending.
        for pvc in pvcs.iter().filter(|p| !deleting(&***p)) {
            if let Some((reason, message)) = endpoints::claim_problem(pvc) {
                out.push(Write::Event(Box::new(
                    EventSpec::new(
                        reference(&**pvc, None),
                        EventType::Warning,
                        reason,
                        message,
                        "persistentvolume-controller",
                    )
                    .throttled(),
                )));
            }
        }
        out
    }

    async fn execute(&mut self, writes: Vec<Write>, now: Timestamp) {
        let mut barrier: Vec<Box<dyn Fn() -> bool + Send>> = vec![];
        for w in writes {
            if let Err(e) = self.write(w, now, &mut barrier).await {
                tracing::debug!("simulator write: {e}");
            }
        }
        // Read our own writes before the next pass, so that it does not act on stale caches.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while !barrier.iter().all(|f| f()) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn write(
        &mut self,
        w: Write,
        now: Timestamp,
        barrier: &mut Vec<Box<dyn Fn() -> bool + Send>>,
    ) -> kube::Result<()> {
        let pp = |m: &str| PostParams { field_manager: Some(m.to_string()), ..Default::default() };
        let pm = |m: &str| PatchParams { field_manager: Some(m.to_string()), ..Default::default() };
        let c = self.client.clone();
        match w {
            Write::CreateReplicaSet(rs) => {
                let api: Api<ReplicaSet> = Api::namespaced(c, &rs.namespace().unwrap_or_default());
                let made = api.create(&pp("kube-controller-manager"), &rs).await?;
                barrier.push(seen(&self.caches.replicasets, &made));
            }
            Write::ScaleReplicaSet { ns, name, replicas, annotations } => {
                let api: Api<ReplicaSet> = Api::namespaced(c, &ns);
                let patch = json!({"metadata": {"annotations": annotations}, "spec": {"replicas": replicas}});
                let made =
                    api.patch(&name, &pm("kube-controller-manager"), &Patch::Merge(patch)).await?;
                barrier.push(seen(&self.caches.replicasets, &made));
            }
            Write::DeploymentRevision { ns, name, revision } => {
                let api: Api<Deployment> = Api::namespaced(c, &ns);
                let patch = json!({"metadata": {"annotations": {workloads::REVISION: revision}}});
                let made =
                    api.patch(&name, &pm("kube-controller-manager"), &Patch::Merge(patch)).await?;
                barrier.push(seen(&self.caches.deployments, &made));
            }
            Write::DeploymentStatus(d) => {
                let api: Api<Deployment> = Api::namespaced(c, &d.namespace().unwrap_or_default());
                let made =
                    api.replace_status(&d.name_any(), &pp("kube-controller-manager"), &d).await?;
                barrier.push(seen(&self.caches.deployments, &made));
            }
            Write::ReplicaSetStatus(rs) => {
                let api: Api<ReplicaSet> = Api::namespaced(c, &rs.namespace().unwrap_or_default());
                let made =
                    api.replace_status(&rs.name_any(), &pp("kube-controller-manager"), &rs).await?;
                barrier.push(seen(&self.caches.replicasets, &made));
            }
            Write::JobStatus(j) => {
                let api: Api<Job> = Api::namespaced(c, &j.namespace().unwrap_or_default());
                let made =
                    api.replace_status(&j.name_any(), &pp("kube-controller-manager"), &j).await?;
                barrier.push(seen(&self.caches.jobs, &made));
            }
            Write::CreatePod { pod, owner, component, message } => {
                let api: Api<Pod> = Api::namespaced(c, &pod.namespace().unwrap_or_default());
                let made = api.create(&pp("kube-controller-manager"), &pod).await?;
                barrier.push(seen(&self.caches.pods, &made));
                let m = message.unwrap_or_else(|| format!("Created pod: {}", made.name_any()));
                let e = EventSpec::new(owner, EventType::Normal, "SuccessfulCreate", m, component);
                self.record(e, now).await;
            }
            Write::CreateClaim { claim, owner, message } => {
                let ns = claim.namespace().unwrap_or_default();
                let api: Api<PersistentVolumeClaim> = Api::namespaced(c, &ns);
                let made = api.create(&pp("kube-controller-manager"), &claim).await?;
                barrier.push(seen(&self.caches.pvcs, &made));
                let e = EventSpec::new(
                    owner,
                    EventType::Normal,
                    "SuccessfulCreate",
                    message,
                    "statefulset-controller",
                );
                self.record(e, now).await;
            }
            Write::StatefulSetStatus(o) => {
                let api: Api<StatefulSet> = Api::namespaced(c, &o.namespace().unwrap_or_default());
                let made =
                    api.replace_status(&o.name_any(), &pp("kube-controller-manager"), &o).await?;
                barrier.push(seen(&self.caches.statefulsets, &made));
            }
            Write::DaemonSetStatus(o) => {
                let api: Api<DaemonSet> = Api::namespaced(c, &o.namespace().unwrap_or_default());
                let made =
                    api.replace_status(&o.name_any(), &pp("kube-controller-manager"), &o).await?;
                barrier.push(seen(&self.caches.daemonsets, &made));
            }
            Write::DeletePod { ns, name, owner, component } => {
                let api: Api<Pod> = Api::namespaced(c, &ns);
                api.delete(&name, &DeleteParams::default()).await?;
                let store = self.caches.pods.clone();
                let key = ObjectRef::<Pod>::new(&name).within(&ns);
                barrier.push(Box::new(move || {
                    store.get(&key).is_none_or(|p| p.metadata.deletion_timestamp.is_some())
                }));
                let e = EventSpec::new(
                    owner,
                    EventType::Normal,
                    "SuccessfulDelete",
                    format!("Deleted pod: {name}"),
                    component,
                );
                self.record(e, now).await;
            }
            Write::PodStatus { pod, bind } => {
                let ns = pod.namespace().unwrap_or_default();
                let api: Api<Pod> = Api::namespaced(c, &ns);
                let mut obj = *pod;
                if let Some(node) = bind {
                    // The scheduler binds through `pods/binding`; the effect is `spec.nodeName`.
                    let patch = json!({"spec": {"nodeName": node}});
                    let bound = api
                        .patch(&obj.name_any(), &pm("kube-scheduler"), &Patch::Merge(patch))
                        .await?;
                    obj.metadata.resource_version = bound.metadata.resource_version;
                }
                let made = api.replace_status(&obj.name_any(), &pp("kubelet"), &obj).await?;
                barrier.push(seen(&self.caches.pods, &made));
            }
            Write::CreateEndpoints(ep) => {
                let api: Api<Endpoints> = Api::namespaced(c, &ep.namespace().unwrap_or_default());
                let made = api.create(&pp("kube-controller-manager"), &ep).await?;
                barrier.push(seen(&self.caches.endpoints, &made));
            }
            Write::ReplaceEndpoints(ep) => {
                let api: Api<Endpoints> = Api::namespaced(c, &ep.namespace().unwrap_or_default());
                let made = api.replace(&ep.name_any(), &pp("kube-controller-manager"), &ep).await?;
                barrier.push(seen(&self.caches.endpoints, &made));
            }
            Write::DeleteEndpoints { ns, name } => {
                let api: Api<Endpoints> = Api::namespaced(c, &ns);
                api.delete(&name, &DeleteParams::default()).await?;
            }
            Write::Event(e) => self.record(*e, now).await,
        }
        Ok(())
    }

    /// Record an event, counting repeats on the same Event like the event correlator (throttled
    /// ones at most once per [`events::THROTTLE`]).
    async fn record(&mut self, e: EventSpec, now: Timestamp) {
        let key = e.key();
        let ns = e.regarding.namespace.clone().unwrap_or_else(|| "default".into());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        let manager = match e.component.as_str() {
            "kubelet" => "kubelet",
            "default-scheduler" => "kube-scheduler",
            _ => "kube-controller-manager",
        };
        match self.memory.events.get(&key).cloned() {
            Some((_, _, _, last))
                if e.throttled
                    && now.as_millisecond() - last.as_millisecond()
                        < events::THROTTLE.as_millis() as i64 => {}
            Some((ns, name, count, _)) => {
                let patch = json!({"count": count + 1, "lastTimestamp": Time(now)});
                if api
                    .patch(
                        &name,
                        &PatchParams { field_manager: Some(manager.into()), ..Default::default() },
                        &Patch::Merge(patch),
                    )
                    .await
                    .is_ok()
                {
                    self.memory.events.insert(key, (ns, name, count + 1, now));
                }
            }
            None => {
                self.memory.event_seq += 1;
                let ev = e.to_event(now, self.memory.event_seq);
                let name = ev.metadata.name.clone().unwrap_or_default();
                match api
                    .create(
                        &PostParams { field_manager: Some(manager.into()), ..Default::default() },
                        &ev,
                    )
                    .await
                {
                    Ok(_) => {
                        self.memory.events.insert(key, (ns, name, 1, now));
                    }
                    Err(err) => tracing::debug!("simulator event: {err}"),
                }
            }
        }
    }
}

/// A barrier check: the store has caught up with `written`.
fn seen<K>(store: &Store<K>, written: &K) -> Box<dyn Fn() -> bool + Send>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let store = store.clone();
    let key = ObjectRef::from_obj(written);
    let rv: u64 =
        written.meta().resource_version.as_deref().and_then(|r| r.parse().ok()).unwrap_or(0);
    Box::new(move || {
        store.get(&key).is_some_and(|o| {
            o.meta().resource_version.as_deref().and_then(|r| r.parse::<u64>().ok()).unwrap_or(0)
                >= rv
        })
    })
}
