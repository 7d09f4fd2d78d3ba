//! The controllers' decisions (pure): Deployment -> ReplicaSets, ReplicaSet -> Pods, Job -> Pods,
//! and the status each controller writes. Behaviour and wording follow
//! <https://kubernetes.io/docs/concepts/workloads/controllers/deployment/>,
//! <https://kubernetes.io/docs/concepts/workloads/controllers/replicaset/> and
//! <https://kubernetes.io/docs/concepts/workloads/controllers/job/>.

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetCondition,
    ReplicaSetSpec, ReplicaSetStatus,
};
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use std::collections::BTreeMap;

pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// Omit zero counts, as the Go `omitempty` tags of the status types do.
fn nz(n: i32) -> Option<i32> {
    (n != 0).then_some(n)
}

/// A controller owner reference to `owner`.
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.meta().name.clone().unwrap_or_default(),
        uid: owner.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

pub fn is_active(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && !matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

pub fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn ready_since(p: &Pod) -> Option<Timestamp> {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

/// Available: Ready for at least `minReadySeconds`.
pub fn is_available(p: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    is_ready(p)
        && (min_ready_seconds <= 0
            || ready_since(p)
                .is_some_and(|t| now.as_second() - t.as_second() >= i64::from(min_ready_seconds)))
}

/// A pod for `template` owned by `owner`, named by the server from `generate_name`.
pub fn pod_from_template(
    template: &PodTemplateSpec,
    owner: OwnerReference,
    namespace: &str,
    generate_name: &str,
    extra_labels: &BTreeMap<String, String>,
) -> Pod {
    let tm = template.metadata.clone().unwrap_or_default();
    let mut labels = tm.labels.unwrap_or_default();
    labels.extend(extra_labels.clone());
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(labels),
            annotations: tm.annotations,
            finalizers: tm.finalizers,
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// What a ReplicaSet wants done to its pods.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaSetPlan {
    /// How many pods to create.
    pub create: i32,
    /// Pods to delete (scale down), least useful first.
    pub delete: Vec<String>,
    pub status: ReplicaSetStatus,
}

/// The ReplicaSet controller: reconcile the owned active `pods` to `spec.replicas`.
pub fn plan_replicaset(rs: &ReplicaSet, pods: &[&Pod], now: Timestamp) -> ReplicaSetPlan {
    let spec = rs.spec.clone().unwrap_or_default();
    let want = spec.replicas.unwrap_or(1).max(0);
    let mut active: Vec<&Pod> = pods.iter().copied().filter(|p| is_active(p)).collect();
    let diff = want - active.len() as i32;
    let mut delete = vec![];
    if diff < 0 {
        // Delete unscheduled, then pending, then not ready, then the newest first
        // (controller.ActivePods ordering).
        active.sort_by_key(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            let ct = p.metadata.creation_timestamp.as_ref().map(|t| -t.0.as_second()).unwrap_or(0);
            (node, running, is_ready(p), ct)
        });
        delete =
            active.iter().take((-diff) as usize).filter_map(|p| p.metadata.name.clone()).collect();
    }
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let active_now: Vec<&&Pod> = pods.iter().filter(|p| is_active(p)).collect();
    let ready = active_now.iter().filter(|p| is_ready(p)).count() as i32;
    let available = active_now.iter().filter(|p| is_available(p, min_ready, now)).count() as i32;
    let replicas = active_now.len() as i32;
    let status = ReplicaSetStatus {
        replicas,
        fully_labeled_replicas: nz(replicas),
        ready_replicas: nz(ready),
        available_replicas: nz(available),
        observed_generation: rs.metadata.generation,
        ..Default::default()
    };
    ReplicaSetPlan { create: diff.max(0), delete, status }
}

/// The `FailedCreate` Warning a controller records on its owner when a Pod create is refused:
/// `create Pod NAME in StatefulSet OWNER failed error: ERR` from the statefulset controller
/// (`pkg/controller/statefulset/stateful_pod_control.go`), `Error creating: ERR` from the others
/// (`RealPodControl` in `pkg/controller/controller_utils.go`).
pub fn failed_create_message(component: &str, pod: &str, owner: &str, error: &str) -> String {
    match component {
        "statefulset-controller" => {
            format!("create Pod {pod} in StatefulSet {owner} failed error: {error}")
        }
        _ => format!("Error creating: {error}"),
    }
}

/// The ReplicaSet's conditions after a sync, as the replicaset controller's `calculateStatus`
/// sets them: `ReplicaFailure=True` reason `FailedCreate` with the API error while Pods are
/// still wanted and the last create failed (`create_failure`), removed otherwise; other
/// conditions kept. `None` when no condition is left (the field is omitted).
pub fn replica_failure_conditions(
    prev: Option<&[ReplicaSetCondition]>,
    create_failure: Option<&str>,
    now: Timestamp,
) -> Option<Vec<ReplicaSetCondition>> {
    let prev = prev.unwrap_or_default();
    let mut out: Vec<ReplicaSetCondition> =
        prev.iter().filter(|c| c.type_ != "ReplicaFailure").cloned().collect();
    if let Some(message) = create_failure {
        let old = prev.iter().find(|c| c.type_ == "ReplicaFailure" && c.status == "True");
        let kept = old.filter(|c| c.message.as_deref() == Some(message));
        out.push(kept.cloned().unwrap_or_else(|| ReplicaSetCondition {
            type_: "ReplicaFailure".into(),
            status: "True".into(),
            reason: Some("FailedCreate".into()),
            message: Some(message.to_string()),
            last_transition_time:
                old.and_then(|c| c.last_transition_time.clone()).or(Some(Time(now))),
        }));
    }
    (!out.is_empty()).then_some(out)
}

/// FNV-1a (32 bit), the hash the deployment controller uses for `pod-template-hash`.
fn fnv32a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// `pod-template-hash` of a template: FNV-32a over the template (and collision count), written
/// with the alphabet of `rand.SafeEncodeString` (no vowels, no confusable characters).
pub fn pod_template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut data = serde_json::to_vec(template).unwrap_or_default();
    if let Some(c) = collision_count {
        data.extend_from_slice(c.to_string().as_bytes());
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    fnv32a(&data)
        .to_string()
        .bytes()
        .map(|b| ALPHABET[(b as usize) % ALPHABET.len()] as char)
        .collect()
}

/// The template without the `pod-template-hash` label, to compare a ReplicaSet with its Deployment.
fn template_without_hash(t: &PodTemplateSpec) -> serde_json::Value {
    let mut t = t.clone();
    if let Some(l) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        l.remove(POD_TEMPLATE_HASH);
        if l.is_empty()
            && let Some(m) = t.metadata.as_mut()
        {
            m.labels = None;
        }
    }
    serde_json::to_value(t).unwrap_or_default()
}

/// `25%` of `total`, rounded up for surge and down for unavailability.
pub fn scaled_value(v: Option<&IntOrString>, total: i32, round_up: bool) -> i32 {
    // Both default to 25% (https://kubernetes.io/docs/concepts/workloads/controllers/deployment/#rolling-update-deployment).
    match v {
        Some(IntOrString::Int(i)) => *i,
        Some(IntOrString::String(s)) => percent(s, total, round_up),
        None => percent("25%", total, round_up),
    }
}

fn percent(s: &str, total: i32, round_up: bool) -> i32 {
    let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
    let n = pct * i64::from(total);
    (if round_up { (n + 99) / 100 } else { n / 100 }) as i32
}

/// What the deployment controller wants done.
#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentPlan {
    /// A new ReplicaSet for the current template.
    pub create: Option<ReplicaSet>,
    /// (ReplicaSet name, new `spec.replicas`, annotations to set).
    pub scale: Vec<(String, i32, BTreeMap<String, String>)>,
    /// The Deployment's `deployment.kubernetes.io/revision`.
    pub revision: String,
    pub status: DeploymentStatus,
    /// `ScalingReplicaSet` event messages.
    pub events: Vec<String>,
}

fn dep_condition(
    prev: &[DeploymentCondition],
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    now: Timestamp,
    touch: bool,
) -> DeploymentCondition {
    let status = if ok { "True" } else { "False" };
    let p = prev.iter().find(|c| c.type_ == type_);
    let same_status = p.is_some_and(|p| p.status == status);
    let same = same_status
        && p.is_some_and(|p| {
            p.reason.as_deref() == Some(reason) && p.message.as_deref() == Some(&message)
        });
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_transition_time: if same_status {
            p.and_then(|p| p.last_transition_time.clone())
        } else {
            Some(Time(now))
        },
        last_update_time: if same && !touch {
            p.and_then(|p| p.last_update_time.clone())
        } else {
            Some(Time(now))
        },
    }
}

/// The deployment controller: the ReplicaSet for the current template, scaling (rolling update or
/// recreate) and the Deployment status, from the ReplicaSets it controls.
pub fn plan_deployment(d: &Deployment, rss: &[&ReplicaSet], now: Timestamp) -> DeploymentPlan {
    let spec = d.spec.clone().unwrap_or_default();
    let name = d.metadata.name.clone().unwrap_or_default();
    let ns = d.metadata.namespace.clone().unwrap_or_default();
    let desired = spec.replicas.unwrap_or(1).max(0);
    let prev = d.status.clone().unwrap_or_default();
    let collision = prev.collision_count;
    let want_template = template_without_hash(&spec.template);
    let new_rs = rss.iter().copied().find(|rs| {
        rs.spec
            .as_ref()
            .and_then(|s| s.template.as_ref())
            .is_some_and(|t| template_without_hash(t) == want_template)
    });
    let rev_of = |rs: &ReplicaSet| -> i64 {
        rs.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REVISION))
            .and_then(|r| r.parse().ok())
            .unwrap_or(0)
    };
    let olds: Vec<&ReplicaSet> = rss
        .iter()
        .copied()
        .filter(|rs| new_rs.is_none_or(|n| n.metadata.uid != rs.metadata.uid))
        .collect();
    let max_old_rev = olds.iter().map(|rs| rev_of(rs)).max().unwrap_or(0);
    let revision = match new_rs {
        Some(n) if rev_of(n) > max_old_rev => rev_of(n),
        _ => max_old_rev + 1,
    }
    .to_string();
    let recreate = spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate");
    let ru = spec.strategy.as_ref().and_then(|s| s.rolling_update.clone()).unwrap_or_default();
    let surge = if recreate { 0 } else { scaled_value(ru.max_surge.as_ref(), desired, true) };
    let mut max_unavailable =
        if recreate { 0 } else { scaled_value(ru.max_unavailable.as_ref(), desired, false) };
    // Both zero would never progress: the controller allows one unavailable pod then.
    if !recreate && surge == 0 && max_unavailable == 0 {
        max_unavailable = 1;
    }
    let annotations = |replicas: i32| -> BTreeMap<String, String> {
        BTreeMap::from([
            (REVISION.to_string(), revision.clone()),
            (DESIRED_REPLICAS.to_string(), desired.to_string()),
            (MAX_REPLICAS.to_string(), (desired + surge).max(replicas).to_string()),
        ])
    };
    let spec_replicas = |rs: &ReplicaSet| rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let old_pods: i32 =
        olds.iter().map(|rs| rs.status.as_ref().map(|s| s.replicas).unwrap_or(0)).sum();
    let old_total: i32 = olds.iter().map(|rs| spec_replicas(rs)).sum();
    let new_cur = new_rs.map(spec_replicas).unwrap_or(0);
    let new_available =
        new_rs.and_then(|n| n.status.as_ref()).and_then(|s| s.available_replicas).unwrap_or(0);
    let new_target = if recreate {
        // Recreate: the new ReplicaSet waits until every old pod is gone.
        if old_pods > 0 || old_total > 0 { new_cur } else { desired }
    } else if old_total == 0 || new_cur >= desired {
        desired
    } else {
        // Rolling update: grow the new ReplicaSet within desired + maxSurge pods in total.
        let room = desired + surge - (old_total + new_cur);
        new_cur + room.clamp(0, desired - new_cur)
    };
    let paused = spec.paused == Some(true);
    let mut events = vec![];
    let mut create = None;
    let mut scale = vec![];
    if !paused {
        match new_rs {
            None => {
                let hash = pod_template_hash(&spec.template, collision);
                let mut template = spec.template.clone();
                let tm = template.metadata.get_or_insert_with(Default::default);
                tm.labels
                    .get_or_insert_with(Default::default)
                    .insert(POD_TEMPLATE_HASH.into(), hash.clone());
                let mut selector: LabelSelector = spec.selector.clone();
                selector
                    .match_labels
                    .get_or_insert_with(Default::default)
                    .insert(POD_TEMPLATE_HASH.into(), hash.clone());
                let rs_name = format!("{name}-{hash}");
                create = Some(ReplicaSet {
                    metadata: ObjectMeta {
                        name: Some(rs_name.clone()),
                        namespace: Some(ns.clone()),
                        labels: tm.labels.clone(),
                        annotations: Some(annotations(new_target)),
                        owner_references: Some(vec![controller_ref(d)]),
                        ..Default::default()
                    },
                    spec: Some(ReplicaSetSpec {
                        replicas: Some(new_target),
                        min_ready_seconds: spec.min_ready_seconds,
                        selector,
                        template: Some(template),
                    }),
                    status: None,
                });
                events.push(format!("Scaled up replica set {rs_name} from 0 to {new_target}"));
            }
            Some(n) => {
                let cur = n.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                let ann = n.metadata.annotations.clone().unwrap_or_default();
                let want_ann = annotations(new_target);
                if cur != new_target || want_ann.iter().any(|(k, v)| ann.get(k) != Some(v)) {
                    scale.push((n.metadata.name.clone().unwrap_or_default(), new_target, want_ann));
                    if cur != new_target {
                        let dir = if new_target > cur { "up" } else { "down" };
                        events.push(format!(
                            "Scaled {dir} replica set {} from {cur} to {new_target}",
                            n.metadata.name.as_deref().unwrap_or_default()
                        ));
                    }
                }
            }
        }
        // Old ReplicaSets shrink, oldest first, as far as `desired - maxUnavailable` pods stay
        // available (rolling), or to zero at once (recreate).
        let min_available = desired - max_unavailable;
        let new_unavailable = (new_cur - new_available).max(0);
        let mut can_remove = if recreate {
            old_total
        } else {
            (old_total + new_cur - min_available - new_unavailable).max(0)
        };
        let mut olds_sorted = olds.clone();
        olds_sorted.sort_by_key(|rs| rev_of(rs));
        for rs in olds_sorted {
            let cur = spec_replicas(rs);
            let target = cur - cur.min(can_remove);
            can_remove -= cur - target;
            if target != cur {
                let mut ann = rs.metadata.annotations.clone().unwrap_or_default();
                ann.insert(DESIRED_REPLICAS.into(), desired.to_string());
                scale.push((rs.metadata.name.clone().unwrap_or_default(), target, ann));
                events.push(format!(
                    "Scaled down replica set {} from {cur} to {target}",
                    rs.metadata.name.as_deref().unwrap_or_default()
                ));
            }
        }
    }

    let st = |rs: &ReplicaSet| rs.status.clone().unwrap_or_default();
    let replicas: i32 = rss.iter().map(|rs| st(rs).replicas).sum();
    let updated = new_rs.map(|n| st(n).replicas).unwrap_or(0);
    let ready: i32 = rss.iter().map(|rs| st(rs).ready_replicas.unwrap_or(0)).sum();
    let available: i32 = rss.iter().map(|rs| st(rs).available_replicas.unwrap_or(0)).sum();
    let unavailable = (desired - available).max(0);
    let prev_conds = prev.conditions.clone().unwrap_or_default();
    let avail_ok = available >= desired - max_unavailable;
    let mut conditions = vec![dep_condition(
        &prev_conds,
        "Available",
        avail_ok,
        if avail_ok { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
        if avail_ok {
            "Deployment has minimum availability."
        } else {
            "Deployment does not have minimum availability."
        }
        .to_string(),
        now,
        false,
    )];
    let rs_name = create
        .as_ref()
        .and_then(|c| c.metadata.name.clone())
        .or_else(|| new_rs.and_then(|n| n.metadata.name.clone()))
        .unwrap_or_default();
    let new_observed = new_rs.is_some_and(|n| st(n).observed_generation == n.metadata.generation);
    let complete = new_rs.is_some()
        && new_observed
        && updated == desired
        && replicas == desired
        && available == desired
        && new_rs.and_then(|n| n.spec.as_ref()).and_then(|s| s.replicas) == Some(desired);
    let progressed = prev.updated_replicas.unwrap_or(0) != updated
        || prev.ready_replicas.unwrap_or(0) != ready
        || prev.available_replicas.unwrap_or(0) != available
        || prev.replicas.unwrap_or(0) != replicas;
    let prev_prog = prev_conds.iter().find(|c| c.type_ == "Progressing");
    let deadline = i64::from(spec.progress_deadline_seconds.unwrap_or(600));
    let stalled = !complete
        && !progressed
        && create.is_none()
        && prev_prog
            .and_then(|c| c.last_update_time.as_ref())
            .is_some_and(|t| now.as_second() - t.0.as_second() > deadline);
    let progressing = if create.is_some() {
        dep_condition(
            &prev_conds,
            "Progressing",
            true,
            "NewReplicaSetCreated",
            format!("Created new replica set \"{rs_name}\""),
            now,
            true,
        )
    } else if complete {
        dep_condition(
            &prev_conds,
            "Progressing",
            true,
            "NewReplicaSetAvailable",
            format!("ReplicaSet \"{rs_name}\" has successfully progressed."),
            now,
            false,
        )
    } else if stalled
        || prev_prog.is_some_and(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded"))
    {
        dep_condition(
            &prev_conds,
            "Progressing",
            false,
            "ProgressDeadlineExceeded",
            format!("ReplicaSet \"{rs_name}\" has timed out progressing."),
            now,
            false,
        )
    } else {
        dep_condition(
            &prev_conds,
            "Progressing",
            true,
            "ReplicaSetUpdated",
            format!("ReplicaSet \"{rs_name}\" is progressing."),
            now,
            progressed,
        )
    };
    conditions.push(progressing);
    let status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: nz(replicas),
        updated_replicas: nz(updated),
        ready_replicas: nz(ready),
        available_replicas: nz(available),
        unavailable_replicas: nz(unavailable),
        conditions: Some(conditions),
        collision_count: collision,
        ..Default::default()
    };
    DeploymentPlan { create, scale, revision, status, events }
}

/// What the job controller wants done.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPlan {
    pub create: i32,
    pub delete: Vec<String>,
    pub status: JobStatus,
    /// (type, reason, message) events on the Job.
    pub events: Vec<(bool, String, String)>,
}

fn job_condition(type_: &str, reason: &str, message: &str, now: Timestamp) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// Whether a Job has finished (`Complete` or `Failed` is True).
pub fn job_finished(job: &Job) -> bool {
    job.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
        cs.iter().any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
    })
}

/// The job controller: pods until `completions` succeed or more than `backoffLimit` fail.
pub fn plan_job(job: &Job, pods: &[&Pod], now: Timestamp) -> JobPlan {
    let spec = job.spec.clone().unwrap_or_default();
    let prev = job.status.clone().unwrap_or_default();
    let completions = spec.completions.unwrap_or(1).max(1);
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let backoff_limit = spec.backoff_limit.unwrap_or(6);
    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
    let succeeded = pods.iter().filter(|p| phase(p) == "Succeeded").count() as i32;
    let failed_pods = pods.iter().filter(|p| phase(p) == "Failed").count() as i32;
    // With restartPolicy OnFailure the restarts count as failures.
    let restarts: i32 = pods
        .iter()
        .filter(|p| is_active(p))
        .flat_map(|p| {
            p.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default()
        })
        .map(|c| c.restart_count)
        .sum();
    let active: Vec<&&Pod> = pods.iter().filter(|p| is_active(p)).collect();
    let ready = active.iter().filter(|p| is_ready(p)).count() as i32;
    let mut status = JobStatus {
        start_time: prev.start_time.clone().or(Some(Time(now))),
        active: nz(active.len() as i32),
        ready: Some(ready),
        succeeded: nz(succeeded),
        failed: nz(failed_pods),
        terminating: Some(0),
        uncounted_terminated_pods: Some(UncountedTerminatedPods::default()),
        conditions: prev.conditions.clone(),
        completion_time: prev.completion_time.clone(),
        ..Default::default()
    };
    let mut plan = JobPlan { create: 0, delete: vec![], status: status.clone(), events: vec![] };
    if job_finished(job) {
        plan.status = prev;
        plan.delete = active.iter().filter_map(|p| p.metadata.name.clone()).collect();
        return plan;
    }
    if spec.suspend == Some(true) {
        return plan;
    }
    if failed_pods + restarts > backoff_limit {
        let msg = "Job has reached the specified backoff limit";
        status.conditions = Some(vec![
            job_condition("FailureTarget", "BackoffLimitExceeded", msg, now),
            job_condition("Failed", "BackoffLimitExceeded", msg, now),
        ]);
        status.active = None;
        status.ready = Some(0);
        plan.delete = active.iter().filter_map(|p| p.metadata.name.clone()).collect();
        plan.events.push((true, "BackoffLimitExceeded".into(), msg.into()));
    } else if succeeded >= completions {
        let msg = "Reached expected number of succeeded pods";
        status.conditions = Some(vec![
            job_condition("SuccessCriteriaMet", "CompletionsReached", msg, now),
            job_condition("Complete", "CompletionsReached", msg, now),
        ]);
        status.completion_time = Some(Time(now));
        status.active = None;
        plan.delete = active.iter().filter_map(|p| p.metadata.name.clone()).collect();
        plan.events.push((false, "Completed".into(), "Job completed".into()));
    } else {
        let want_active = parallelism.min(completions - succeeded);
        plan.create = (want_active - active.len() as i32).max(0);
    }
    plan.status = status;
    plan
}

/// Labels the job controller puts on its pods.
pub fn job_pod_labels(job: &Job) -> BTreeMap<String, String> {
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    BTreeMap::from([
        ("batch.kubernetes.io/controller-uid".to_string(), uid.clone()),
        ("batch.kubernetes.io/job-name".to_string(), name.clone()),
        ("controller-uid".to_string(), uid),
        ("job-name".to_string(), name),
    ])
}

/// `<name>-<hash>`: the revision name (ControllerRevision) of a StatefulSet or DaemonSet template.
pub fn revision_name(owner: &str, template: &PodTemplateSpec) -> (String, String) {
    let hash = pod_template_hash(template, None);
    (format!("{owner}-{hash}"), hash)
}

/// What the StatefulSet controller wants done.
#[derive(Debug, Clone, PartialEq)]
pub struct StatefulSetPlan {
    /// Pods (named `<sts>-<ordinal>`) to create.
    pub create: Vec<Pod>,
    /// Claims from `volumeClaimTemplates` to create first (`<template>-<sts>-<ordinal>`).
    pub claims: Vec<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
    pub delete: Vec<String>,
    pub status: k8s_openapi::api::apps::v1::StatefulSetStatus,
}

fn ordinal(sts: &str, pod: &Pod) -> Option<i32> {
    pod.metadata.name.as_deref()?.strip_prefix(sts)?.strip_prefix('-')?.parse().ok()
}

/// The StatefulSet controller: ordinal pods, one at a time under `OrderedReady` (each waits for
/// the previous to be Running and Ready), all at once under `Parallel`; scale down from the highest
/// ordinal; a template change replaces pods from the highest ordinal
/// (<https://kubernetes.io/docs/concepts/workloads/controllers/statefulset/>).
pub fn plan_statefulset(
    sts: &k8s_openapi::api::apps::v1::StatefulSet,
    pods: &[&Pod],
    existing_claims: &[String],
    now: Timestamp,
) -> StatefulSetPlan {
    let spec = sts.spec.clone().unwrap_or_default();
    let name = sts.metadata.name.clone().unwrap_or_default();
    let ns = sts.metadata.namespace.clone().unwrap_or_default();
    let want = spec.replicas.unwrap_or(1).max(0);
    let parallel = spec.pod_management_policy.as_deref() == Some("Parallel");
    let (update_rev, _) = revision_name(&name, &spec.template);
    let rev_of = |p: &Pod| {
        p.metadata.labels.as_ref().and_then(|l| l.get("controller-revision-hash")).cloned()
    };
    let active: Vec<&Pod> = pods.iter().copied().filter(|p| is_active(p)).collect();
    let by_ord: BTreeMap<i32, &Pod> =
        active.iter().filter_map(|p| Some((ordinal(&name, p)?, *p))).collect();
    let mut plan = StatefulSetPlan {
        create: vec![],
        claims: vec![],
        delete: vec![],
        status: Default::default(),
    };
    let all_ready = active.iter().all(|p| is_ready(p));
    for i in 0..want {
        if by_ord.contains_key(&i) {
            continue;
        }
        if !parallel && (0..i).any(|j| by_ord.get(&j).is_none_or(|p| !is_ready(p))) {
            break;
        }
        let pod_name = format!("{name}-{i}");
        let extra = BTreeMap::from([
            ("controller-revision-hash".to_string(), update_rev.clone()),
            ("statefulset.kubernetes.io/pod-name".to_string(), pod_name.clone()),
            ("apps.kubernetes.io/pod-index".to_string(), i.to_string()),
        ]);
        let mut pod = pod_from_template(&spec.template, controller_ref(sts), &ns, "", &extra);
        pod.metadata.generate_name = None;
        pod.metadata.name = Some(pod_name.clone());
        let ps = pod.spec.get_or_insert_with(Default::default);
        ps.hostname = Some(pod_name.clone());
        ps.subdomain = spec.service_name.clone().filter(|s| !s.is_empty());
        for t in spec.volume_claim_templates.iter().flatten() {
            let tname = t.metadata.name.clone().unwrap_or_default();
            let claim = format!("{tname}-{name}-{i}");
            let vols = ps.volumes.get_or_insert_with(Vec::new);
            vols.retain(|v| v.name != tname);
            vols.push(k8s_openapi::api::core::v1::Volume {
                name: tname.clone(),
                persistent_volume_claim: Some(
                    k8s_openapi::api::core::v1::PersistentVolumeClaimVolumeSource {
                        claim_name: claim.clone(),
                        read_only: None,
                    },
                ),
                ..Default::default()
            });
            if !existing_claims.contains(&claim) {
                let mut labels = t.metadata.labels.clone().unwrap_or_default();
                if let Some(sel) = spec.selector.match_labels.as_ref() {
                    labels.extend(sel.clone());
                }
                plan.claims.push(k8s_openapi::api::core::v1::PersistentVolumeClaim {
                    metadata: ObjectMeta {
                        name: Some(claim),
                        namespace: Some(ns.clone()),
                        labels: Some(labels),
                        ..Default::default()
                    },
                    spec: t.spec.clone(),
                    status: None,
                });
            }
        }
        plan.create.push(pod);
        if !parallel {
            break;
        }
    }
    // Scale down from the highest ordinal, then replace outdated pods from the highest ordinal.
    if let Some((_, p)) = by_ord.iter().rev().find(|(o, _)| **o >= want) {
        plan.delete.extend(p.metadata.name.clone());
    } else if all_ready
        && plan.create.is_empty()
        && let Some((_, p)) =
            by_ord.iter().rev().find(|(_, p)| rev_of(p).as_deref() != Some(&update_rev))
    {
        plan.delete.extend(p.metadata.name.clone());
    }
    let prev = sts.status.clone().unwrap_or_default();
    let updated =
        active.iter().filter(|p| rev_of(p).as_deref() == Some(&update_rev)).count() as i32;
    let current_rev = if updated == active.len() as i32 {
        update_rev.clone()
    } else {
        prev.current_revision.clone().unwrap_or_else(|| update_rev.clone())
    };
    let current =
        active.iter().filter(|p| rev_of(p).as_deref() == Some(&current_rev)).count() as i32;
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    plan.status = k8s_openapi::api::apps::v1::StatefulSetStatus {
        observed_generation: sts.metadata.generation,
        replicas: active.len() as i32,
        ready_replicas: nz(active.iter().filter(|p| is_ready(p)).count() as i32),
        available_replicas: Some(
            active.iter().filter(|p| is_available(p, min_ready, now)).count() as i32
        ),
        current_replicas: nz(current),
        updated_replicas: nz(updated),
        current_revision: Some(current_rev),
        update_revision: Some(update_rev),
        collision_count: Some(prev.collision_count.unwrap_or(0)),
        ..Default::default()
    };
    plan
}

/// What the DaemonSet controller wants done.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonSetPlan {
    /// Pods to create, each pinned to its node by node affinity.
    pub create: Vec<Pod>,
    pub delete: Vec<String>,
    pub status: k8s_openapi::api::apps::v1::DaemonSetStatus,
}

/// The node a DaemonSet pod is pinned to (`matchFields` on `metadata.name`).
pub fn pinned_node(pod: &Pod) -> Option<String> {
    let terms = &pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().flat_map(|t| t.match_fields.iter().flatten()).find_map(|f| {
        (f.key == "metadata.name" && f.operator == "In")
            .then(|| f.values.as_ref()?.first().cloned())
            .flatten()
    })
}

/// The DaemonSet controller: one pod per node whose labels match the template's `nodeSelector`
/// (<https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/>).
pub fn plan_daemonset(
    ds: &k8s_openapi::api::apps::v1::DaemonSet,
    pods: &[&Pod],
    nodes: &[&k8s_openapi::api::core::v1::Node],
    now: Timestamp,
) -> DaemonSetPlan {
    let spec = ds.spec.clone().unwrap_or_default();
    let name = ds.metadata.name.clone().unwrap_or_default();
    let ns = ds.metadata.namespace.clone().unwrap_or_default();
    let (_, hash) = revision_name(&name, &spec.template);
    let selector =
        spec.template.spec.as_ref().and_then(|s| s.node_selector.clone()).unwrap_or_default();
    let eligible: Vec<String> = nodes
        .iter()
        .filter(|n| {
            let labels = n.metadata.labels.clone().unwrap_or_default();
            selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        })
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    let active: Vec<&Pod> = pods.iter().copied().filter(|p| is_active(p)).collect();
    let node_of =
        |p: &Pod| pinned_node(p).or_else(|| p.spec.as_ref().and_then(|s| s.node_name.clone()));
    let rev_of = |p: &Pod| {
        p.metadata.labels.as_ref().and_then(|l| l.get("controller-revision-hash")).cloned()
    };
    let mut plan = DaemonSetPlan { create: vec![], delete: vec![], status: Default::default() };
    for node in &eligible {
        if active.iter().any(|p| node_of(p).as_deref() == Some(node)) {
            continue;
        }
        let extra = BTreeMap::from([
            ("controller-revision-hash".to_string(), hash.clone()),
            (
                "pod-template-generation".to_string(),
                ds.metadata.generation.unwrap_or(1).to_string(),
            ),
        ]);
        let mut pod =
            pod_from_template(&spec.template, controller_ref(ds), &ns, &format!("{name}-"), &extra);
        let affinity: k8s_openapi::api::core::v1::Affinity = serde_json::from_value(serde_json::json!({
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]}}
        }))
        .unwrap_or_default();
        pod.spec.get_or_insert_with(Default::default).affinity = Some(affinity);
        plan.create.push(pod);
    }
    for p in &active {
        if node_of(p).is_some_and(|n| !eligible.contains(&n)) {
            plan.delete.extend(p.metadata.name.clone());
        }
    }
    // Rolling update, maxUnavailable 1: replace one outdated pod at a time.
    if plan.create.is_empty()
        && active.iter().all(|p| is_ready(p))
        && let Some(p) = active.iter().find(|p| rev_of(p).as_deref() != Some(&hash))
    {
        plan.delete.extend(p.metadata.name.clone());
    }
    let on_eligible: Vec<&&Pod> =
        active.iter().filter(|p| node_of(p).is_some_and(|n| eligible.contains(&n))).collect();
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let scheduled = on_eligible.len() as i32;
    let available = on_eligible.iter().filter(|p| is_available(p, min_ready, now)).count() as i32;
    let desired = eligible.len() as i32;
    plan.status = k8s_openapi::api::apps::v1::DaemonSetStatus {
        observed_generation: ds.metadata.generation,
        current_number_scheduled: scheduled,
        desired_number_scheduled: desired,
        number_misscheduled: (active.len() - on_eligible.len()) as i32,
        number_ready: on_eligible.iter().filter(|p| is_ready(p)).count() as i32,
        number_available: nz(available),
        number_unavailable: nz(desired - available),
        updated_number_scheduled: nz(on_eligible
            .iter()
            .filter(|p| rev_of(p).as_deref() == Some(&hash))
            .count() as i32),
        ..Default::default()
    };
    plan
}
