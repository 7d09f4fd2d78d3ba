//! The kwok-like workload simulator behind `--simulate-workloads`.
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
//! `kubelet`/`kube-controller-manager` as field managers; the writes to one object, or of one
//! owner's Pods, in order, several objects at once as the controllers' workers do) and waits until
//! its caches show its own writes before the next pass, so that it never acts twice on a stale
//! view. A pass costs O(objects): dependents are found through indexes by owner and namespace.
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
//!   `Never` the pod ends `Failed`. `KSYNC_SIMULATE_TERMINATION_MESSAGE` is what the container
//!   writes to its termination log: the kubelet's `terminated.message`. A Job whose pods crash
//!   fails with `BackoffLimitExceeded` once more than `backoffLimit` pods failed.
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
//! - **Pods the API refuses** (a missing ServiceAccount, an exceeded ResourceQuota, a webhook's
//!   denial): the owner gets a `FailedCreate` Warning (`Error creating: <the API error>`; the
//!   StatefulSet wording is `create Pod NAME in StatefulSet OWNER failed error: <the API error>`)
//!   and a ReplicaSet gets `ReplicaFailure=True` reason `FailedCreate` with the API error, as
//!   kube-controller-manager records them; the condition goes once a create succeeds (or no Pod is
//!   wanted any more). The owner's other creates wait for the next pass. The resourcequota
//!   controller keeps each ResourceQuota's `status.used` in step with the Pods.
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
mod plan;
pub mod quantity;
pub mod scheduler;
pub mod workloads;

#[cfg(test)]
mod tests;

use events::{EventSpec, EventType};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Event, Node, PersistentVolumeClaim, Pod, ResourceQuota, Secret, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
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
        quotas: watch(&client, &notify, &mut guard),
    };
    caches.wait_until_ready().await?;
    let mut sim = Simulator { client, caches, opts, memory: Default::default() };
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
    quotas: Store<ResourceQuota>,
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
            self.quotas.wait_until_ready().await?;
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
    /// owner uid -> the API error of its last Pod create, while that create keeps failing.
    create_failures: HashMap<String, String>,
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
    QuotaStatus(Box<ResourceQuota>),
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
    /// Locked only between awaits (lanes of a pass share it).
    memory: std::sync::Mutex<Memory>,
}

/// Writes of different lanes in flight at once.
const LANES: usize = 8;

/// A check that the caches show a write.
type Barrier = Box<dyn Fn() -> bool + Send>;

impl Write {
    /// The writes of one lane happen in order: those to one object (a status after the write
    /// it follows), an owner's Pod and claim creates and deletes (its creates stop at the first
    /// refusal), the repeats of one Event.
    fn lane(&self) -> String {
        let meta = |kind: &str, m: &ObjectMeta| {
            format!(
                "{kind}/{}/{}",
                m.namespace.as_deref().unwrap_or_default(),
                m.name.as_deref().unwrap_or_default()
            )
        };
        let owner = |o: &k8s_openapi::api::core::v1::ObjectReference| format!("owner/{:?}", o.uid);
        match self {
            Write::CreateReplicaSet(rs) | Write::ReplicaSetStatus(rs) => {
                meta("replicasets", &rs.metadata)
            }
            Write::ScaleReplicaSet { ns, name, .. } => format!("replicasets/{ns}/{name}"),
            Write::DeploymentStatus(d) => meta("deployments", &d.metadata),
            Write::JobStatus(j) => meta("jobs", &j.metadata),
            Write::CreatePod { owner: o, .. }
            | Write::CreateClaim { owner: o, .. }
            | Write::DeletePod { owner: o, .. } => owner(o),
            Write::StatefulSetStatus(o) => meta("statefulsets", &o.metadata),
            Write::DaemonSetStatus(o) => meta("daemonsets", &o.metadata),
            Write::PodStatus { pod, .. } => meta("pods", &pod.metadata),
            Write::CreateEndpoints(ep) | Write::ReplaceEndpoints(ep) => {
                meta("endpoints", &ep.metadata)
            }
            Write::DeleteEndpoints { ns, name } => format!("endpoints/{ns}/{name}"),
            Write::QuotaStatus(q) => meta("resourcequotas", &q.metadata),
            Write::Event(e) => format!("event/{}", e.key()),
        }
    }
}

/// Whether two states are written the same: equal values serialise the same (the cheap test,
/// true for most objects of most passes); unequal ones may still (times are written to the
/// second), which their JSON tells.
fn same<T: Serialize + PartialEq>(a: &T, b: &T) -> bool {
    a == b || serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
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
    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Observe, decide, write.
    async fn pass(&mut self) {
        let now = Timestamp::now();
        let writes = self.plan(now);
        self.execute(writes, now).await;
    }

    /// Perform a pass's writes: those of one lane ([`Write::lane`]) in order, up to [`LANES`]
    /// lanes at once, as kube-controller-manager's controllers run several workers each.
    async fn execute(&mut self, writes: Vec<Write>, now: Timestamp) {
        let mut lanes: Vec<Vec<Write>> = vec![];
        let mut lane_of: HashMap<String, usize> = HashMap::new();
        for w in writes {
            let at = *lane_of.entry(w.lane()).or_insert_with(|| {
                lanes.push(vec![]);
                lanes.len() - 1
            });
            lanes[at].push(w);
        }
        let this = &*self;
        let barrier: Vec<Barrier> = futures::stream::iter(lanes)
            .map(|lane| this.run_lane(lane, now))
            .buffer_unordered(LANES)
            .flat_map(futures::stream::iter)
            .collect()
            .await;
        // Read our own writes before the next pass, so that it does not act on stale caches.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while !barrier.iter().all(|f| f()) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// One lane's writes, in order; the checks that the caches show them.
    async fn run_lane(&self, lane: Vec<Write>, now: Timestamp) -> Vec<Barrier> {
        let mut barrier = vec![];
        // A Pod create failed: like the controllers' slow start, the owner's remaining creates
        // (all in this lane) wait for the next pass.
        let mut refused = false;
        for w in lane {
            let create = matches!(w, Write::CreatePod { .. });
            if create && refused {
                continue;
            }
            if let Err(e) = self.write(w, now, &mut barrier).await {
                refused |= create;
                tracing::debug!("simulator write: {e}");
            }
        }
        barrier
    }

    /// Perform one write.
    async fn write(
        &self,
        w: Write,
        now: Timestamp,
        barrier: &mut Vec<Barrier>,
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
                let uid = owner.uid.clone().unwrap_or_default();
                let made = match api.create(&pp("kube-controller-manager"), &pod).await {
                    Ok(made) => made,
                    Err(err) => {
                        self.record_failed_create(&pod, owner, component, &err, now).await;
                        return Err(err);
                    }
                };
                self.memory().create_failures.remove(&uid);
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
            Write::QuotaStatus(q) => {
                let api: Api<ResourceQuota> =
                    Api::namespaced(c, &q.namespace().unwrap_or_default());
                let made =
                    api.replace_status(&q.name_any(), &pp("kube-controller-manager"), &q).await?;
                barrier.push(seen(&self.caches.quotas, &made));
            }
            Write::DeleteEndpoints { ns, name } => {
                let api: Api<Endpoints> = Api::namespaced(c, &ns);
                api.delete(&name, &DeleteParams::default()).await?;
            }
            Write::Event(e) => self.record(*e, now).await,
        }
        Ok(())
    }

    /// A refused Pod create: remember the API error for the owner's status and record the
    /// owner's `FailedCreate` Warning in the controller's wording.
    async fn record_failed_create(
        &self,
        pod: &Pod,
        owner: k8s_openapi::api::core::v1::ObjectReference,
        component: &'static str,
        err: &kube::Error,
        now: Timestamp,
    ) {
        let text = match err {
            kube::Error::Api(s) => s.message.clone(),
            other => other.to_string(),
        };
        let message = workloads::failed_create_message(
            component,
            pod.metadata.name.as_deref().unwrap_or_default(),
            owner.name.as_deref().unwrap_or_default(),
            &text,
        );
        self.memory().create_failures.insert(owner.uid.clone().unwrap_or_default(), text);
        let e = EventSpec::new(owner, EventType::Warning, "FailedCreate", message, component)
            .throttled();
        self.record(e, now).await;
    }

    /// Record an event, counting repeats on the same Event like the event correlator (throttled
    /// ones at most once per [`events::THROTTLE`]).
    async fn record(&self, e: EventSpec, now: Timestamp) {
        let key = e.key();
        let ns = e.regarding.namespace.clone().unwrap_or_else(|| "default".into());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        let manager = match e.component.as_str() {
            "kubelet" => "kubelet",
            "default-scheduler" => "kube-scheduler",
            _ => "kube-controller-manager",
        };
        let known = self.memory().events.get(&key).cloned();
        match known {
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
                    self.memory().events.insert(key, (ns, name, count + 1, now));
                }
            }
            None => {
                let seq = {
                    let mut memory = self.memory();
                    memory.event_seq += 1;
                    memory.event_seq
                };
                let ev = e.to_event(now, seq);
                let name = ev.metadata.name.clone().unwrap_or_default();
                match api
                    .create(
                        &PostParams { field_manager: Some(manager.into()), ..Default::default() },
                        &ev,
                    )
                    .await
                {
                    Ok(_) => {
                        self.memory().events.insert(key, (ns, name, 1, now));
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
