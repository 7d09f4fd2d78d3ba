//! One pass's decisions: each simulated controller (and the scheduler and kubelet) turns the
//! cached state into a list of [`Write`]s. The order of the writes is the order of the
//! controllers in [`Simulator::plan`].

use super::events::{EventSpec, EventType, reference};
use super::{Caches, Memory, Simulator, Write, deleting, endpoints, kubelet, nodes};
use super::{same, scheduler, state_signature, workloads};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Endpoints, Node, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// Pods by the uid of their controlling owner (owner reference with `controller: true`).
struct PodsByOwner<'a>(HashMap<String, Vec<&'a Pod>>);

impl<'a> PodsByOwner<'a> {
    fn index(pods: &'a [Arc<Pod>]) -> Self {
        let mut by_owner: HashMap<String, Vec<&Pod>> = HashMap::new();
        for p in pods {
            for r in
                p.metadata.owner_references.iter().flatten().filter(|r| r.controller == Some(true))
            {
                by_owner.entry(r.uid.clone()).or_default().push(p);
            }
        }
        PodsByOwner(by_owner)
    }

    fn of(&self, uid: &Option<String>) -> Vec<&'a Pod> {
        self.0.get(uid.as_deref().unwrap_or_default()).cloned().unwrap_or_default()
    }
}

/// Where a pod runs: its node and whether this pass binds it there.
struct Placement {
    node: String,
    bind: Option<String>,
}

impl Simulator {
    /// Decide this pass's writes from the caches.
    pub(super) fn plan(&mut self, now: Timestamp) -> Vec<Write> {
        let c = self.caches.clone();
        let mut out = vec![];
        let pods = c.pods.state();
        let owned = PodsByOwner::index(&pods);
        let rss = c.replicasets.state();
        plan_deployments(&c, &rss, now, &mut out);
        let memory = self.memory.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        plan_replicasets(&rss, &owned, &memory.create_failures, now, &mut out);
        plan_jobs(&c, &owned, now, &mut out);
        let node_objs = c.nodes.state();
        let node_refs: Vec<&Node> = node_objs.iter().map(|n| &**n).collect();
        plan_statefulsets(&c, &owned, now, &mut out);
        plan_daemonsets(&c, &owned, &node_refs, now, &mut out);
        let pvcs = c.pvcs.state();
        self.plan_pods(&pods, &node_refs, &pvcs, now, &mut out);
        plan_endpoints(&c, &pods, now, &mut out);
        plan_claim_events(&pvcs, &mut out);
        plan_quotas(&c, &pods, &mut out);
        out
    }

    /// The scheduler and the kubelet: bind pending pods to a node, then write each pod's status.
    fn plan_pods(
        &mut self,
        pods: &[Arc<Pod>],
        node_refs: &[&Node],
        pvcs: &[Arc<PersistentVolumeClaim>],
        now: Timestamp,
        out: &mut Vec<Write>,
    ) {
        let node_index: HashMap<String, (usize, String)> = self
            .opts
            .nodes
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), (i, nodes::node_ip(i))))
            .collect();
        let mut used = node_usage(pods);
        let world = world_view(&self.caches);
        let mut sorted: Vec<&Arc<Pod>> = pods.iter().filter(|p| !deleting(&***p)).collect();
        sorted.sort_by_key(|p| (p.metadata.creation_timestamp.as_ref().map(|t| t.0), p.name_any()));
        let memory = self.memory.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        memory.forget_departed(pods, now);
        for p in sorted {
            let Some(placement) = place_pod(p, node_refs, pvcs, &mut used, now, out) else {
                continue;
            };
            let Some((idx, host_ip)) = node_index.get(&placement.node) else { continue };
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let ip = memory.pod_ip(&uid, p, *idx);
            let entered = memory.entered_times(&uid, p, now);
            let mut input = (**p).clone();
            if placement.bind.is_some() {
                input.spec.get_or_insert_with(Default::default).node_name =
                    Some(placement.node.clone());
            }
            let cx = kubelet::PodContext {
                node_name: &placement.node,
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
            if placement.bind.is_some() || !same(&p.status, &Some(outcome.status.clone())) {
                input.status = Some(outcome.status);
                out.push(Write::PodStatus { pod: Box::new(input), bind: placement.bind });
            }
        }
    }
}

impl Memory {
    /// Forget pods that are gone, and stop counting repeats of events older than
    /// kube-apiserver's event TTL (one hour).
    fn forget_departed(&mut self, pods: &[Arc<Pod>], now: Timestamp) {
        let live: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        self.entered.retain(|(uid, _, _), _| live.contains(uid));
        self.ips.retain(|uid, _| live.contains(uid));
        self.events.retain(|_, e| now.as_second() - e.3.as_second() < 3600);
    }

    /// The pod's IP: remembered, or from its status, or the lowest free address of the node's
    /// pod CIDR (`10.244.<idx>.0/24`; `.1` is the gateway), reused once its pod is gone.
    fn pod_ip(&mut self, uid: &str, p: &Pod, node_idx: usize) -> String {
        if let Some(ip) = self.ips.get(uid) {
            return ip.clone();
        }
        let ip = match p.status.as_ref().and_then(|s| s.pod_ip.clone()) {
            Some(ip) => ip,
            None => {
                let taken: BTreeSet<&String> = self.ips.values().collect();
                (2..255)
                    .map(|h| format!("10.244.{node_idx}.{h}"))
                    .find(|ip| !taken.contains(ip))
                    .unwrap_or_else(|| format!("10.244.{node_idx}.255"))
            }
        };
        self.ips.insert(uid.to_string(), ip.clone());
        ip
    }

    /// When each container entered its current state (first observed by the simulator).
    fn entered_times(&mut self, uid: &str, p: &Pod, now: Timestamp) -> BTreeMap<String, Timestamp> {
        let mut entered = BTreeMap::new();
        for cs in p.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default() {
            let t = *self
                .entered
                .entry((uid.to_string(), cs.name.clone(), state_signature(&cs)))
                .or_insert(now);
            entered.insert(cs.name.clone(), t);
        }
        entered
    }
}

/// Requests of the active pods per node.
fn node_usage(pods: &[Arc<Pod>]) -> BTreeMap<String, scheduler::Resources> {
    let mut used: BTreeMap<String, scheduler::Resources> = BTreeMap::new();
    for p in pods.iter().filter(|p| workloads::is_active(p)) {
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            used.entry(n).or_default().add(&scheduler::pod_requests(p));
        }
    }
    used
}

/// The keys of every Secret and ConfigMap, for the kubelet's configuration checks.
fn world_view(c: &Caches) -> kubelet::WorldView {
    let mut world = kubelet::WorldView::default();
    for s in c.secrets.state() {
        let mut keys: BTreeSet<String> = s.data.iter().flat_map(|d| d.keys().cloned()).collect();
        keys.extend(s.string_data.iter().flat_map(|d| d.keys().cloned()));
        world.secrets.insert((s.namespace().unwrap_or_default(), s.name_any()), keys);
    }
    for m in c.config_maps.state() {
        let mut keys: BTreeSet<String> = m.data.iter().flat_map(|d| d.keys().cloned()).collect();
        keys.extend(m.binary_data.iter().flat_map(|d| d.keys().cloned()));
        world.config_maps.insert((m.namespace().unwrap_or_default(), m.name_any()), keys);
    }
    world
}

/// The pod's node: its `spec.nodeName`, or one the default scheduler picks now (`Scheduled`
/// event). `None`: not ours to schedule, or unschedulable (`FailedScheduling` event and status).
fn place_pod(
    p: &Pod,
    node_refs: &[&Node],
    pvcs: &[Arc<PersistentVolumeClaim>],
    used: &mut BTreeMap<String, scheduler::Resources>,
    now: Timestamp,
    out: &mut Vec<Write>,
) -> Option<Placement> {
    let spec = p.spec.clone().unwrap_or_default();
    if let Some(node) = spec.node_name.clone() {
        return Some(Placement { node, bind: None });
    }
    if spec.scheduler_name.as_deref().is_some_and(|s| s != "default-scheduler") {
        return None;
    }
    let ns = p.namespace().unwrap_or_default();
    let unbound = has_unbound_claim(p, &ns, pvcs);
    match scheduler::schedule(p, node_refs, used, unbound) {
        Ok(n) => {
            used.entry(n.clone()).or_default().add(&scheduler::pod_requests(p));
            out.push(Write::Event(Box::new(EventSpec::new(
                reference(p, None),
                EventType::Normal,
                "Scheduled",
                format!("Successfully assigned {ns}/{} to {n}", p.name_any()),
                "default-scheduler",
            ))));
            Some(Placement { node: n.clone(), bind: Some(n) })
        }
        Err(e) => {
            out.push(Write::Event(Box::new(
                EventSpec::new(
                    reference(p, None),
                    EventType::Warning,
                    "FailedScheduling",
                    e.message.clone(),
                    "default-scheduler",
                )
                .throttled(),
            )));
            let st = kubelet::unschedulable_status(p, &e.message, now);
            if !same(&p.status, &Some(st.clone())) {
                let mut np = p.clone();
                np.status = Some(st);
                out.push(Write::PodStatus { pod: Box::new(np), bind: None });
            }
            None
        }
    }
}

/// Whether the pod (in namespace `ns`) uses a PersistentVolumeClaim that is not `Bound`.
fn has_unbound_claim(p: &Pod, ns: &str, pvcs: &[Arc<PersistentVolumeClaim>]) -> bool {
    p.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .any(|claim| {
            !pvcs.iter().any(|c| {
                c.namespace().as_deref() == Some(ns)
                    && c.name_any() == claim.claim_name
                    && c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
            })
        })
}

/// The deployment controller: Deployments -> ReplicaSets, revisions and status.
fn plan_deployments(c: &Caches, rss: &[Arc<ReplicaSet>], now: Timestamp, out: &mut Vec<Write>) {
    // ReplicaSets by the uid of their controlling owner, so that a pass costs O(objects), not
    // O(Deployments × ReplicaSets).
    let mut by_owner: HashMap<&str, Vec<&ReplicaSet>> = HashMap::new();
    for rs in rss {
        for r in rs.metadata.owner_references.iter().flatten() {
            if r.controller == Some(true) {
                by_owner.entry(r.uid.as_str()).or_default().push(&**rs);
            }
        }
    }
    for d in c.deployments.state().iter().filter(|d| !deleting(&***d)) {
        let uid = d.metadata.uid.as_deref().unwrap_or_default();
        let mut mine: Vec<&ReplicaSet> = by_owner.get(uid).cloned().unwrap_or_default();
        // An object naming the same owner twice is listed once, as the filter it replaces did.
        mine.dedup_by(|a, b| std::ptr::eq(*a, *b));
        let plan = workloads::plan_deployment(d, &mine, now);
        let ns = d.namespace().unwrap_or_default();
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
            out.push(Write::ScaleReplicaSet { ns: ns.clone(), name: rs, replicas, annotations });
        }
        // The revision annotation goes with the status, through `/status`, as the deployment
        // controller writes it (`UpdateStatus`): a status write does not bump the generation,
        // where the same annotation through the main endpoint would.
        let new_revision = d.annotations().get(workloads::REVISION) != Some(&plan.revision);
        if new_revision || !same(&d.status, &Some(plan.status.clone())) {
            let mut nd: Deployment = (**d).clone();
            nd.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(workloads::REVISION.to_string(), plan.revision);
            nd.status = Some(plan.status);
            out.push(Write::DeploymentStatus(Box::new(nd)));
        }
    }
}

/// The replicaset controller: ReplicaSets -> Pods and status.
fn plan_replicasets(
    rss: &[Arc<ReplicaSet>],
    owned: &PodsByOwner,
    create_failures: &HashMap<String, String>,
    now: Timestamp,
    out: &mut Vec<Write>,
) {
    for rs in rss.iter().filter(|r| !deleting(&***r)) {
        let mut plan = workloads::plan_replicaset(rs, &owned.of(&rs.metadata.uid), now);
        let failure = (plan.create > 0)
            .then(|| create_failures.get(rs.metadata.uid.as_deref().unwrap_or_default()))
            .flatten();
        plan.status.conditions = workloads::replica_failure_conditions(
            rs.status.as_ref().and_then(|s| s.conditions.as_deref()),
            failure.map(String::as_str),
            now,
        );
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
            let mut n: ReplicaSet = (**rs).clone();
            n.status = Some(plan.status);
            out.push(Write::ReplicaSetStatus(Box::new(n)));
        }
    }
}

/// The job controller: Jobs -> Pods, events and status.
fn plan_jobs(c: &Caches, owned: &PodsByOwner, now: Timestamp, out: &mut Vec<Write>) {
    for job in c.jobs.state().iter().filter(|j| !deleting(&***j)) {
        let plan = workloads::plan_job(job, &owned.of(&job.metadata.uid), now);
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
            let mut n: Job = (**job).clone();
            n.status = Some(plan.status);
            out.push(Write::JobStatus(Box::new(n)));
        }
    }
}

/// The statefulset controller: StatefulSets -> PersistentVolumeClaims, Pods and status.
fn plan_statefulsets(c: &Caches, owned: &PodsByOwner, now: Timestamp, out: &mut Vec<Write>) {
    let claim_names: Vec<String> = c
        .pvcs
        .state()
        .iter()
        .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
        .collect();
    for sts in c.statefulsets.state().iter().filter(|s| !deleting(&***s)) {
        let prefix = format!("{}/", sts.namespace().unwrap_or_default());
        let existing: Vec<String> = claim_names
            .iter()
            .filter_map(|c| c.strip_prefix(&prefix).map(str::to_string))
            .collect();
        let plan = workloads::plan_statefulset(sts, &owned.of(&sts.metadata.uid), &existing, now);
        statefulset_writes(sts, plan, out);
    }
}

/// The writes for one StatefulSet's plan.
fn statefulset_writes(sts: &StatefulSet, plan: workloads::StatefulSetPlan, out: &mut Vec<Write>) {
    let ns = sts.namespace().unwrap_or_default();
    let name = sts.name_any();
    for claim in plan.claims {
        let pod_name = plan.create.first().map(|p| p.name_any()).unwrap_or_default();
        let message = format!(
            "create Claim {} Pod {pod_name} in StatefulSet {name} success",
            claim.name_any()
        );
        out.push(Write::CreateClaim {
            claim: Box::new(claim),
            owner: reference(sts, None),
            message,
        });
    }
    for pod in plan.create {
        let message =
            Some(format!("create Pod {} in StatefulSet {name} successful", pod.name_any()));
        out.push(Write::CreatePod {
            pod: Box::new(pod),
            owner: reference(sts, None),
            component: "statefulset-controller",
            message,
        });
    }
    for pod in plan.delete {
        out.push(Write::Event(Box::new(EventSpec::new(
            reference(sts, None),
            EventType::Normal,
            "SuccessfulDelete",
            format!("delete Pod {pod} in StatefulSet {name} successful"),
            "statefulset-controller",
        ))));
        out.push(Write::DeletePod {
            ns: ns.clone(),
            name: pod,
            owner: reference(sts, None),
            component: "statefulset-controller",
        });
    }
    if !same(&sts.status, &Some(plan.status.clone())) {
        let mut n = sts.clone();
        n.status = Some(plan.status);
        out.push(Write::StatefulSetStatus(Box::new(n)));
    }
}

/// The daemonset controller: DaemonSets -> one Pod per node, and status.
fn plan_daemonsets(
    c: &Caches,
    owned: &PodsByOwner,
    node_refs: &[&Node],
    now: Timestamp,
    out: &mut Vec<Write>,
) {
    for ds in c.daemonsets.state().iter().filter(|s| !deleting(&***s)) {
        let ns = ds.namespace().unwrap_or_default();
        let plan = workloads::plan_daemonset(ds, &owned.of(&ds.metadata.uid), node_refs, now);
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
            let mut n: DaemonSet = (**ds).clone();
            n.status = Some(plan.status);
            out.push(Write::DaemonSetStatus(Box::new(n)));
        }
    }
}

/// The endpoints controller: Services -> Endpoints; managed Endpoints without a Service go.
fn plan_endpoints(c: &Caches, pods: &[Arc<Pod>], now: Timestamp, out: &mut Vec<Write>) {
    let services = c.services.state();
    // A Service selects Pods of its own namespace only: each looks at those.
    let mut pods_by_ns: HashMap<Option<&str>, Vec<&Pod>> = HashMap::new();
    for p in pods {
        pods_by_ns.entry(p.metadata.namespace.as_deref()).or_default().push(&**p);
    }
    let no_pods = Vec::new();
    for svc in services.iter().filter(|s| !deleting(&***s)) {
        let pod_refs = pods_by_ns.get(&svc.metadata.namespace.as_deref()).unwrap_or(&no_pods);
        let Some(mut want) = endpoints::endpoints_for(svc, pod_refs) else { continue };
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
    let service_keys: BTreeSet<(Option<&str>, Option<&str>)> = services
        .iter()
        .map(|s| (s.metadata.namespace.as_deref(), s.metadata.name.as_deref()))
        .collect();
    for ep in c.endpoints.state() {
        let managed = ep.annotations().contains_key(endpoints::TRIGGER_TIME);
        let has_svc =
            service_keys.contains(&(ep.metadata.namespace.as_deref(), ep.metadata.name.as_deref()));
        if managed && !has_svc && !deleting(&*ep) {
            out.push(Write::DeleteEndpoints {
                ns: ep.namespace().unwrap_or_default(),
                name: ep.name_any(),
            });
        }
    }
}

/// The persistentvolume controller: claims stay Pending, with a throttled Warning.
fn plan_claim_events(pvcs: &[Arc<PersistentVolumeClaim>], out: &mut Vec<Write>) {
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
}

/// The resourcequota controller: each ResourceQuota's `status` (`hard` and the tracked usage)
/// from the Pods of its namespace, so deletions free quota.
fn plan_quotas(c: &Caches, pods: &[Arc<Pod>], out: &mut Vec<Write>) {
    for q in c.quotas.state().iter().filter(|q| !deleting(&***q)) {
        let ns = q.namespace();
        let in_ns = pods.iter().filter(|p| p.namespace() == ns).map(|p| &**p);
        let used = crate::builtin_admission::usage_of(in_ns);
        let hard = q.spec.as_ref().and_then(|s| s.hard.clone()).unwrap_or_default();
        let status = crate::builtin_admission::quota_status(&hard, &used);
        let Ok(status) =
            serde_json::from_value::<k8s_openapi::api::core::v1::ResourceQuotaStatus>(status)
        else {
            continue;
        };
        if !same(&q.status, &Some(status.clone())) {
            let mut n = (**q).clone();
            n.status = Some(status);
            out.push(Write::QuotaStatus(Box::new(n)));
        }
    }
}
