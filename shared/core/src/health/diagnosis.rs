//! Root-cause diagnosis: from the unhealthy managed resources of an Application and a snapshot of
//! the live objects around them to `status.diagnosis`, the few root causes a person has to fix.
//!
//! The controller gathers the inputs in three steps and then calls [`diagnose`]:
//! 1. for each unhealthy managed resource, [`related_selectors`] says which ReplicaSets, Pods
//!    and Jobs to list (owner references and label selectors);
//! 2. [`references_to_check`] says which Secrets, ConfigMaps, PersistentVolumeClaims and
//!    ServiceAccounts those Pods (or Pod templates) need; the controller GETs them and records the
//!    missing ones in [`Snapshot::absent`] (the ones that exist go into [`Snapshot::objects`], so
//!    a missing key can be told from a missing object);
//! 3. the Events whose `regarding` object is any of these go into [`Snapshot::events`].
//!
//! [`diagnose`] then walks down from each unhealthy managed resource:
//!
//! ```text
//! Deployment ─▶ current ReplicaSet ─▶ Pods ─▶ container states, Pod conditions, Events
//!                      │                          └─▶ Secret / ConfigMap / PVC / image / node
//!                      └─▶ ReplicaFailure / FailedCreate ─▶ ServiceAccount / ResourceQuota / webhook
//! StatefulSet, DaemonSet, ReplicaSet ─▶ Pods (and FailedCreate)
//! Job ─▶ Pods, then the Job's Failed condition (BackoffLimitExceeded, DeadlineExceeded)
//! PersistentVolumeClaim ─▶ its phase and provisioning Events
//! any other kind ─▶ the unhealthy objects it controls (owner references), else itself
//! ```
//!
//! The current ReplicaSet of a Deployment is the owned ReplicaSet whose
//! `deployment.kubernetes.io/revision` annotation equals the Deployment's; without a match (the
//! Deployment controller has not caught up), the owned one with the highest revision, then the
//! newest `creationTimestamp`, then the greatest name. Pod templates are not compared: the API
//! server defaults fields in the ReplicaSet's copy, so equal templates rarely compare equal.
//!
//! # Reasons
//!
//! | reason | evidence | root resource |
//! |---|---|---|
//! | `MissingSecret` | `CreateContainerConfigError` `secret "x" not found`; a `FailedMount` Event naming it; a referenced Secret in `absent` (env, envFrom, volume, projected volume, or an `imagePullSecrets` entry of a Pod that cannot pull its image) | the Secret |
//! | `MissingConfigMap` | as `MissingSecret`, for `configmap "x" not found` | the ConfigMap |
//! | `MissingSecretKey` | `CreateContainerConfigError` `couldn't find key k in Secret ns/x` | the Secret |
//! | `MissingConfigMapKey` | `couldn't find key k in ConfigMap ns/x` | the ConfigMap |
//! | `MissingPersistentVolumeClaim` | an unschedulable Pod whose claim is in `absent` or reported `persistentvolumeclaim "x" not found` | the claim |
//! | `PersistentVolumeClaimPending` | a claim that is not `Bound`, used by an unschedulable Pod or managed itself; the message carries its storage class and its `ProvisioningFailed`/`FailedBinding` Event | the claim |
//! | `MissingServiceAccount` | `ReplicaFailure`/`FailedCreate` `serviceaccount "x" not found` | the ServiceAccount |
//! | `QuotaExceeded` | `FailedCreate` `exceeded quota: q, …` | the ResourceQuota (the workload when unnamed) |
//! | `AdmissionRefused` | `FailedCreate` `admission webhook "…" denied the request` or `violates PodSecurity` | the workload that cannot create Pods |
//! | `FailedCreate` | any other `ReplicaFailure`/`FailedCreate` | the workload |
//! | `ImagePullBackOff` | container waiting `ErrImagePull`, `ImagePullBackOff` or `ErrImageNeverPull` (one reason for the pair the kubelet alternates between, so polls do not flap); evidence from the `Failed to pull image` Event | the Pod |
//! | `InvalidImageName` | container waiting `InvalidImageName`: retrying cannot help, the reference must change | the Pod |
//! | `CrashLoopBackOff` | container waiting `CrashLoopBackOff`; the message carries the restart count and the last termination (reason, exit code, message) | the Pod |
//! | `OOMKilled` | the last or current termination of a container has reason `OOMKilled` | the Pod |
//! | `ContainerFailed` | a container terminated with a non-zero exit code and is not restarted | the Pod |
//! | `CreateContainerConfigError` | that waiting reason with no missing object or key behind it | the Pod |
//! | `Unschedulable` | `PodScheduled=False`; message from the condition, else the `FailedScheduling` Event | the Pod |
//! | `ReadinessProbeFailed` | containers running but not ready, with an `Unhealthy` `Readiness probe failed` Event | the Pod |
//! | `ContainersNotReady` | containers running but not ready, without probe Events | the Pod |
//! | `Evicted` | Pod phase `Failed` with reason `Evicted` | the Pod |
//! | `JobFailed` | Job condition `Failed=True` (`BackoffLimitExceeded`, `DeadlineExceeded`, …), when its Pods show nothing more specific than failing containers | the Job |
//! | `HookFailed` | as `JobFailed`, for a Job annotated `sync.kuvryn.io/hook` | the Job |
//! | other container waiting reasons (`RunContainerError`, `CreateContainerError`, …) | the reason as the kubelet words it | the Pod |
//! | the HealthCheck rule's reason, else `HealthCheckFailed`-style reasons the caller passes | [`Unhealthy::health_check_reason`] | the managed resource |
//! | the reason of a failing `Ready`/`Stalled`/`Progressing`/`Available`/`Failed` condition, when CamelCase | nothing deeper was found | the resource |
//! | `Degraded` / `Progressing` | nothing deeper and no usable condition reason | the resource |
//!
//! # Output
//! One entry per root cause (resource and reason): the first chain that reaches it is kept and
//! the message names the other managed resources it affects; Pods of one workload failing for
//! the same Pod-level reason are one entry. Causes of Degraded resources come first, then those
//! of Progressing ones, each group in resource order, so the result does not depend on the order
//! of the inputs. At most [`MAX_ENTRIES`] entries, chains of at most [`MAX_CHAIN`] resources
//! (the middle is dropped, both ends kept), messages redacted and then cut to
//! [`MAX_MESSAGE_CHARS`] characters.
//!
//! Hand-written: root-cause analysis over Kubernetes objects exists only inside tools written in
//! Go or TypeScript (kubectl describe, k9s, Argo CD's resource tree, Komodor), none as a library
//! this crate could call, and the reasons and output bounds are Kuvryn Sync's own contract.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use kuvryn_sync_api::{Diagnosis, ResourceRef, keys};
use regex::Regex;
use serde_json::Value;

use crate::kstatus;
use crate::redact::{Redactor, truncate};

/// Most entries in `status.diagnosis`.
pub const MAX_ENTRIES: usize = 10;
/// Most resources in one entry's chain.
pub const MAX_CHAIN: usize = 10;
/// Most characters in one entry's message.
pub const MAX_MESSAGE_CHARS: usize = 512;
/// The annotation holding a Deployment's (and its ReplicaSets') rollout revision.
pub const DEPLOYMENT_REVISION: &str = "deployment.kubernetes.io/revision";

/// How deep [`diagnose`] follows owner references below a managed resource.
const MAX_DEPTH: usize = 32;

/// One Event about an object, as the controller read it (`events.k8s.io/v1` or `core/v1`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventFacts {
    /// The object the Event is about (`regarding`, or `involvedObject` in core/v1).
    pub regarding: ResourceRef,
    /// The Event's reason, such as `FailedMount`.
    pub reason: String,
    /// The Event's note (`message` in core/v1).
    pub message: String,
    /// Whether the Event's type is `Warning`.
    pub warning: bool,
    /// How many times it happened (`deprecatedCount`/`series.count`, or `count` in core/v1).
    pub count: u32,
}

/// The live objects around the unhealthy managed resources.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Live objects as the API server returns them: the managed resources and their relatives
    /// (ReplicaSets, Pods, Jobs, PersistentVolumeClaims, the referenced objects that exist).
    pub objects: Vec<Value>,
    /// Events about those objects.
    pub events: Vec<EventFacts>,
    /// Objects from [`references_to_check`] that the controller looked up and found missing.
    pub absent: BTreeSet<ResourceRef>,
}

/// A managed resource that is not Healthy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unhealthy {
    /// The managed resource.
    pub resource: ResourceRef,
    /// Degraded (true) or Progressing (false).
    pub degraded: bool,
    /// Why, from kstatus or the HealthCheck rule that decided.
    pub message: String,
    /// The reason the HealthCheck decision gave, such as `HealthCheckFailed` when a rule errored.
    pub health_check_reason: Option<String>,
}

/// Which objects belong to an unhealthy resource: list `kind` in `namespace` with
/// `label_selector`, and keep those with an owner reference to `owner_uid` when it is set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelatedQuery {
    /// `apiVersion` to list.
    pub api_version: String,
    /// Kind to list.
    pub kind: String,
    /// Namespace to list in.
    pub namespace: String,
    /// A label selector in the API's string form (`app=web,tier in (a,b)`); empty selects all.
    pub label_selector: String,
    /// Keep only objects with an owner reference to this uid (the ReplicaSet in between makes
    /// this unknown for a Deployment's Pods).
    pub owner_uid: Option<String>,
}

/// A root cause's name: a CamelCase word (see the table in the module documentation).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// A referenced Secret does not exist.
    MissingSecret,
    /// A referenced ConfigMap does not exist.
    MissingConfigMap,
    /// A referenced key is missing from an existing Secret.
    MissingSecretKey,
    /// A referenced key is missing from an existing ConfigMap.
    MissingConfigMapKey,
    /// A referenced ServiceAccount does not exist.
    MissingServiceAccount,
    /// A referenced PersistentVolumeClaim does not exist.
    MissingPersistentVolumeClaim,
    /// A claim is not bound to a volume.
    PersistentVolumeClaimPending,
    /// A ResourceQuota refused the Pods.
    QuotaExceeded,
    /// An admission webhook or policy refused the Pods.
    AdmissionRefused,
    /// Pods could not be created for another reason.
    FailedCreate,
    /// A container image cannot be pulled.
    ImagePullBackOff,
    /// A container image reference is malformed.
    InvalidImageName,
    /// A container keeps exiting.
    CrashLoopBackOff,
    /// A container was killed for exceeding its memory limit.
    OomKilled,
    /// A container exited with an error and is not restarted.
    ContainerFailed,
    /// A container's configuration cannot be built.
    CreateContainerConfigError,
    /// No node can run the Pod.
    Unschedulable,
    /// A readiness probe keeps failing.
    ReadinessProbeFailed,
    /// Containers run but are not ready.
    ContainersNotReady,
    /// The kubelet evicted the Pod.
    Evicted,
    /// A Job failed.
    JobFailed,
    /// A hook Job failed.
    HookFailed,
    /// Degraded, with nothing more specific known.
    Degraded,
    /// Progressing, with nothing more specific known.
    Progressing,
    /// A reason the object or a HealthCheck rule gave (a condition's or container state's reason).
    Named(String),
}

impl Reason {
    /// The reason as `status.diagnosis[].reason` spells it.
    pub fn as_str(&self) -> &str {
        match self {
            Reason::MissingSecret => "MissingSecret",
            Reason::MissingConfigMap => "MissingConfigMap",
            Reason::MissingSecretKey => "MissingSecretKey",
            Reason::MissingConfigMapKey => "MissingConfigMapKey",
            Reason::MissingServiceAccount => "MissingServiceAccount",
            Reason::MissingPersistentVolumeClaim => "MissingPersistentVolumeClaim",
            Reason::PersistentVolumeClaimPending => "PersistentVolumeClaimPending",
            Reason::QuotaExceeded => "QuotaExceeded",
            Reason::AdmissionRefused => "AdmissionRefused",
            Reason::FailedCreate => "FailedCreate",
            Reason::ImagePullBackOff => "ImagePullBackOff",
            Reason::InvalidImageName => "InvalidImageName",
            Reason::CrashLoopBackOff => "CrashLoopBackOff",
            Reason::OomKilled => "OOMKilled",
            Reason::ContainerFailed => "ContainerFailed",
            Reason::CreateContainerConfigError => "CreateContainerConfigError",
            Reason::Unschedulable => "Unschedulable",
            Reason::ReadinessProbeFailed => "ReadinessProbeFailed",
            Reason::ContainersNotReady => "ContainersNotReady",
            Reason::Evicted => "Evicted",
            Reason::JobFailed => "JobFailed",
            Reason::HookFailed => "HookFailed",
            Reason::Degraded => "Degraded",
            Reason::Progressing => "Progressing",
            Reason::Named(reason) => reason,
        }
    }

    /// The reason for a missing object of `kind`.
    fn missing(kind: RefKind) -> Self {
        match kind {
            RefKind::Secret => Reason::MissingSecret,
            RefKind::ConfigMap => Reason::MissingConfigMap,
            RefKind::PersistentVolumeClaim => Reason::MissingPersistentVolumeClaim,
            RefKind::ServiceAccount => Reason::MissingServiceAccount,
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kinds of objects a Pod refers to by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum RefKind {
    Secret,
    ConfigMap,
    PersistentVolumeClaim,
    ServiceAccount,
}

impl RefKind {
    fn kind(self) -> &'static str {
        match self {
            RefKind::Secret => "Secret",
            RefKind::ConfigMap => "ConfigMap",
            RefKind::PersistentVolumeClaim => "PersistentVolumeClaim",
            RefKind::ServiceAccount => "ServiceAccount",
        }
    }

    fn resource(self, namespace: &str, name: &str) -> ResourceRef {
        core_ref(self.kind(), namespace, name)
    }
}

/// Where in a Pod spec a reference sits.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Origin {
    /// `env[].valueFrom` or `envFrom[]` of a container.
    Env { container: String },
    /// A volume (plain or projected).
    Volume { volume: String },
    /// `imagePullSecrets[]`.
    ImagePullSecret,
    /// `serviceAccountName`.
    ServiceAccount,
}

/// One object a Pod spec refers to.
#[derive(Clone, Debug)]
struct PodReference {
    kind: RefKind,
    name: String,
    origin: Origin,
    optional: bool,
}

/// Every Secret, ConfigMap, PersistentVolumeClaim and ServiceAccount that the Pods in the
/// snapshot need, and those the Pod templates of workloads without any Pod yet need (a
/// ServiceAccount that is missing keeps the Pods from being created at all). References marked
/// `optional: true` are left out: their absence is no failure. `serviceAccountName` defaults to
/// `default`. Secrets named by CSI or storage-plugin volumes are not followed.
pub fn references_to_check(snapshot: &Snapshot) -> BTreeSet<ResourceRef> {
    let index = Index::new(snapshot);
    let mut out = BTreeSet::new();
    for object in &index.objects {
        let namespace = namespace_of(object);
        let spec = match kind_of(object) {
            "Pod" => object.get("spec"),
            kind if WORKLOAD_KINDS.contains(&kind) && !index.has_pods_below(object) => {
                at(object, &["spec", "template", "spec"])
            }
            _ => None,
        };
        let Some(spec) = spec else { continue };
        for reference in pod_spec_references(spec) {
            if !reference.optional {
                out.insert(reference.kind.resource(namespace, &reference.name));
            }
        }
    }
    out
}

/// Every Secret the snapshot's Pods and workload templates reference (optional ones too), whose
/// values the controller learns before analysis: a crashing program may print one into its
/// termination message or an Event, and the diagnosis must mask it even when the Secret is not in
/// Git.
pub fn secrets_referenced(snapshot: &Snapshot) -> BTreeSet<ResourceRef> {
    let mut out = BTreeSet::new();
    for object in &snapshot.objects {
        let spec = match kind_of(object) {
            "Pod" => object.get("spec"),
            kind if WORKLOAD_KINDS.contains(&kind) => at(object, &["spec", "template", "spec"]),
            _ => None,
        };
        let Some(spec) = spec else { continue };
        let namespace = namespace_of(object);
        for reference in pod_spec_references(spec) {
            if reference.kind == RefKind::Secret {
                out.insert(reference.kind.resource(namespace, &reference.name));
            }
        }
    }
    out
}

/// Workload kinds with a Pod template.
const WORKLOAD_KINDS: &[&str] = &["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"];

/// Whether `object`'s controller has not acted on its current spec yet: its
/// `metadata.generation` is ahead of `status.observedGeneration`, or a workload (a kind with a
/// Pod template) has no status at all. What lies below it then is the previous generation's
/// rollout, or nothing: there is no root cause to look for, so nothing is listed for it and its
/// diagnosis is its own health message. A controller that never catches up (stuck, or not
/// running) is named that way too.
pub fn awaits_its_controller(object: &Value) -> bool {
    let generation = object.pointer("/metadata/generation").and_then(Value::as_i64);
    let observed = object.pointer("/status/observedGeneration").and_then(Value::as_i64);
    match (generation, observed) {
        (Some(generation), Some(observed)) => observed < generation,
        (_, None) => {
            WORKLOAD_KINDS.contains(&kind_of(object)) && object.pointer("/status").is_none()
        }
        (None, Some(_)) => false,
    }
}

/// Which objects to list to diagnose `object`: a Deployment's ReplicaSets and Pods, the Pods of
/// a StatefulSet, DaemonSet, ReplicaSet or Job (by its selector, and owned by it), a CronJob's
/// Jobs. Other kinds have no Pods to list: their children, if any, are found by owner reference
/// among the managed resources. Events are not listed here: the controller fetches those whose
/// `regarding` object is in the snapshot.
pub fn related_selectors(object: &Value) -> Vec<RelatedQuery> {
    let namespace = namespace_of(object).to_owned();
    let uid = str_at(object, &["metadata", "uid"]).map(str::to_owned);
    let selector = at(object, &["spec", "selector"]).map(selector_string).unwrap_or_default();
    let query = |api_version: &str, kind: &str, label_selector: String, owner: bool| RelatedQuery {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        namespace: namespace.clone(),
        label_selector,
        owner_uid: if owner { uid.clone() } else { None },
    };
    match kind_of(object) {
        "Deployment" => {
            vec![
                query("apps/v1", "ReplicaSet", selector.clone(), true),
                query("v1", "Pod", selector, false),
            ]
        }
        "StatefulSet" | "DaemonSet" | "ReplicaSet" => vec![query("v1", "Pod", selector, true)],
        "Job" => {
            let selector = if selector.is_empty() {
                format!("job-name={}", name_of(object))
            } else {
                selector
            };
            vec![query("v1", "Pod", selector, true)]
        }
        "CronJob" => vec![query("batch/v1", "Job", String::new(), true)],
        _ => Vec::new(),
    }
}

/// A `LabelSelector` (`matchLabels`, `matchExpressions`) in the API's string form, sorted so the
/// same selector always gives the same string.
fn selector_string(selector: &Value) -> String {
    let mut terms: Vec<String> = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        terms.extend(labels.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())));
    }
    for expression in array_at(selector, &["matchExpressions"]) {
        let key = str_at(expression, &["key"]).unwrap_or_default();
        let values: Vec<&str> =
            array_at(expression, &["values"]).iter().filter_map(Value::as_str).collect();
        let term = match str_at(expression, &["operator"]).unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        terms.push(term);
    }
    terms.sort();
    terms.join(",")
}

/// The current ReplicaSet of `deployment` among `replica_sets` (see the module documentation for
/// the rule): only ReplicaSets it owns count.
pub fn current_replica_set<'a>(
    deployment: &Value,
    replica_sets: impl IntoIterator<Item = &'a Value>,
) -> Option<&'a Value> {
    let wanted = annotation(deployment, DEPLOYMENT_REVISION);
    let owned: Vec<&Value> = replica_sets
        .into_iter()
        .filter(|rs| kind_of(rs) == "ReplicaSet" && is_owned_by(rs, deployment))
        .collect();
    if let Some(wanted) = wanted
        && let Some(rs) =
            owned.iter().find(|rs| annotation(rs, DEPLOYMENT_REVISION) == Some(wanted))
    {
        return Some(rs);
    }
    owned.into_iter().max_by_key(|rs| {
        let revision = annotation(rs, DEPLOYMENT_REVISION).and_then(|r| r.parse::<u64>().ok());
        let created = str_at(rs, &["metadata", "creationTimestamp"]).unwrap_or_default();
        (revision, created, name_of(rs))
    })
}

/// The root causes of `unhealthy`'s failures, by the rules in the module documentation.
pub fn diagnose(
    unhealthy: &[Unhealthy],
    snapshot: &Snapshot,
    redactor: &Redactor,
) -> Vec<Diagnosis> {
    let index = Index::new(snapshot);
    let mut ordered: Vec<&Unhealthy> = unhealthy.iter().collect();
    ordered.sort_by(|a, b| b.degraded.cmp(&a.degraded).then_with(|| a.resource.cmp(&b.resource)));
    let mut causes: Vec<Cause> = Vec::new();
    for resource in ordered {
        for finding in index.explain_managed(resource) {
            let key = (&finding.root, &finding.reason);
            match causes.iter_mut().find(|c| (&c.finding.root, &c.finding.reason) == key) {
                Some(cause) => {
                    if !cause.affected.contains(&resource.resource) {
                        cause.affected.push(resource.resource.clone());
                    }
                }
                None => causes.push(Cause { finding, affected: vec![resource.resource.clone()] }),
            }
        }
    }
    causes.into_iter().take(MAX_ENTRIES).map(|cause| cause.render(redactor)).collect()
}

/// Whether the root causes (resource and reason) differ; message wording (counts, ages) does not
/// count, nor does the order.
pub fn diagnosis_changed(before: &[Diagnosis], after: &[Diagnosis]) -> bool {
    let roots = |list: &[Diagnosis]| -> BTreeSet<(ResourceRef, String)> {
        list.iter().map(|d| (d.resource.clone(), d.reason.clone())).collect()
    };
    roots(before) != roots(after)
}

/// A root cause found below one managed resource.
#[derive(Clone, Debug)]
struct Finding {
    root: ResourceRef,
    reason: Reason,
    /// Unredacted evidence.
    evidence: String,
    /// From the managed resource down to `root`, both included.
    chain: Vec<ResourceRef>,
    /// How many other Pods of the same workload show the same cause.
    similar_pods: usize,
}

impl Finding {
    fn new(root: ResourceRef, reason: Reason, evidence: String, chain: &[ResourceRef]) -> Self {
        let mut chain = chain.to_vec();
        if chain.last() != Some(&root) {
            chain.push(root.clone());
        }
        Finding { root, reason, evidence, chain, similar_pods: 0 }
    }
}

/// A distinct root cause and the managed resources it affects, in order.
struct Cause {
    finding: Finding,
    affected: Vec<ResourceRef>,
}

impl Cause {
    fn render(self, redactor: &Redactor) -> Diagnosis {
        let mut message = self.finding.evidence;
        match self.finding.similar_pods {
            0 => {}
            1 => message.push_str("; 1 more Pod fails the same way"),
            n => message.push_str(&format!("; {n} more Pods fail the same way")),
        }
        if let Some(others) = self.affected.get(1..).filter(|o| !o.is_empty()) {
            message.push_str(&format!("; also affects {}", name_some(others)));
        }
        Diagnosis {
            resource: self.finding.root,
            reason: self.finding.reason.as_str().to_owned(),
            message: truncate(&redactor.redact(&message), MAX_MESSAGE_CHARS),
            chain: bound_chain(self.finding.chain),
        }
    }
}

/// The first [`NAMED_OTHERS`] resources by name, then how many more.
fn name_some(resources: &[ResourceRef]) -> String {
    let mut text = resources.iter().take(NAMED_OTHERS).map(describe).collect::<Vec<_>>().join(", ");
    if resources.len() > NAMED_OTHERS {
        text.push_str(&format!(" and {} more", resources.len() - NAMED_OTHERS));
    }
    text
}

/// How many other affected managed resources a message names.
const NAMED_OTHERS: usize = 3;

/// At most [`MAX_CHAIN`] resources: the first and last halves, the middle dropped.
fn bound_chain(chain: Vec<ResourceRef>) -> Vec<ResourceRef> {
    if chain.len() <= MAX_CHAIN {
        return chain;
    }
    let head = MAX_CHAIN / 2;
    let tail = MAX_CHAIN - head;
    let mut out = chain[..head].to_vec();
    out.extend_from_slice(&chain[chain.len() - tail..]);
    out
}

/// The snapshot, looked up by identity, owner and Event subject.
struct Index<'a> {
    /// Sorted by identity, so every walk is in a stable order.
    objects: Vec<&'a Value>,
    by_key: BTreeMap<Key, &'a Value>,
    events: BTreeMap<Key, Vec<&'a EventFacts>>,
    absent: BTreeSet<Key>,
}

/// Identity without the API version, so `v1` and `v1beta1` spellings of one object match.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    group: String,
    kind: String,
    namespace: String,
    name: String,
}

impl Key {
    fn of(r: &ResourceRef) -> Self {
        let group = r.api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or_default();
        Key {
            group: group.to_owned(),
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        }
    }
}

impl<'a> Index<'a> {
    fn new(snapshot: &'a Snapshot) -> Self {
        let mut objects: Vec<&Value> = snapshot.objects.iter().collect();
        objects.sort_by_key(|o| resource_ref(o));
        let by_key = objects.iter().map(|o| (Key::of(&resource_ref(o)), *o)).collect();
        let mut events: BTreeMap<Key, Vec<&EventFacts>> = BTreeMap::new();
        for event in &snapshot.events {
            events.entry(Key::of(&event.regarding)).or_default().push(event);
        }
        let absent = snapshot.absent.iter().map(Key::of).collect();
        Index { objects, by_key, events, absent }
    }

    fn get(&self, r: &ResourceRef) -> Option<&'a Value> {
        self.by_key.get(&Key::of(r)).copied()
    }

    fn is_absent(&self, r: &ResourceRef) -> bool {
        self.absent.contains(&Key::of(r))
    }

    /// The most repeated Event about `r` that `wanted` accepts (ties: greatest message), so the
    /// choice does not depend on the order Events were listed in.
    fn event(
        &self,
        r: &ResourceRef,
        wanted: impl Fn(&EventFacts) -> bool,
    ) -> Option<&'a EventFacts> {
        self.events
            .get(&Key::of(r))?
            .iter()
            .copied()
            .filter(|e| wanted(e))
            .max_by(|a, b| a.count.cmp(&b.count).then_with(|| a.message.cmp(&b.message)))
    }

    /// Objects of `kind` that `owner` owns, in identity order.
    fn owned(&self, owner: &Value, kind: &str) -> Vec<&'a Value> {
        self.objects
            .iter()
            .copied()
            .filter(|o| kind_of(o) == kind && is_owned_by(o, owner))
            .collect()
    }

    /// Objects `owner` controls, of any kind.
    fn controlled(&self, owner: &Value) -> Vec<&'a Value> {
        self.objects.iter().copied().filter(|o| is_owned_by(o, owner)).collect()
    }

    /// Whether any Pod in the snapshot belongs to `workload`, directly or through a ReplicaSet.
    fn has_pods_below(&self, workload: &Value) -> bool {
        if !self.owned(workload, "Pod").is_empty() {
            return true;
        }
        self.owned(workload, "ReplicaSet").iter().any(|rs| !self.owned(rs, "Pod").is_empty())
    }

    fn explain_managed(&self, unhealthy: &Unhealthy) -> Vec<Finding> {
        let chain = [unhealthy.resource.clone()];
        let found = match self.get(&unhealthy.resource) {
            Some(object) => self.explain(object, &chain, 0),
            None => Vec::new(),
        };
        if !found.is_empty() {
            return found;
        }
        vec![self.managed_fallback(unhealthy)]
    }

    /// The managed resource itself, with its HealthCheck or kstatus message.
    fn managed_fallback(&self, unhealthy: &Unhealthy) -> Finding {
        let object = self.get(&unhealthy.resource);
        let reason = unhealthy
            .health_check_reason
            .as_deref()
            .filter(|r| is_camel_case(r))
            .map(|r| Reason::Named(r.to_owned()))
            .or_else(|| object.and_then(failing_condition_reason))
            .unwrap_or(if unhealthy.degraded { Reason::Degraded } else { Reason::Progressing });
        let evidence = format!("{}: {}", describe(&unhealthy.resource), unhealthy.message);
        Finding::new(unhealthy.resource.clone(), reason, evidence, &[])
    }

    /// Causes below `object`, whose chain from the managed resource is `chain` (ending with it).
    fn explain(&self, object: &Value, chain: &[ResourceRef], depth: usize) -> Vec<Finding> {
        if depth > MAX_DEPTH {
            return Vec::new();
        }
        match kind_of(object) {
            "Deployment" => match current_replica_set(object, self.objects.iter().copied()) {
                Some(rs) => self.explain(rs, &extend(chain, rs), depth + 1),
                None => self.creation_failures(object, chain),
            },
            "ReplicaSet" | "StatefulSet" | "DaemonSet" => {
                let mut found = self.creation_failures(object, chain);
                found.extend(self.explain_pods(&self.owned(object, "Pod"), chain));
                found
            }
            "Job" => self.explain_job(object, chain),
            "Pod" => self.explain_pods(&[object], &chain[..chain.len() - 1]),
            "PersistentVolumeClaim" => self.explain_claim(object, chain).into_iter().collect(),
            _ => self.explain_children(object, chain, depth),
        }
    }

    /// Unhealthy objects `object` controls, followed down; one that shows nothing deeper is the
    /// cause itself, with its kstatus message.
    fn explain_children(
        &self,
        object: &Value,
        chain: &[ResourceRef],
        depth: usize,
    ) -> Vec<Finding> {
        let mut found = Vec::new();
        for child in self.controlled(object) {
            let computed = kstatus::compute(child);
            if !matches!(computed.status, kstatus::Status::Failed | kstatus::Status::InProgress) {
                continue;
            }
            let child_chain = extend(chain, child);
            let below = self.explain(child, &child_chain, depth + 1);
            if below.is_empty() {
                let degraded = computed.status == kstatus::Status::Failed;
                let reason = failing_condition_reason(child).unwrap_or(if degraded {
                    Reason::Degraded
                } else {
                    Reason::Progressing
                });
                let r = resource_ref(child);
                let evidence = format!("{}: {}", describe(&r), computed.message);
                found.push(Finding::new(r, reason, evidence, &child_chain));
            } else {
                found.extend(below);
            }
        }
        found
    }

    /// The Pods' causes; a Pod-level cause shared by several Pods is kept once, for the first.
    fn explain_pods(&self, pods: &[&Value], chain: &[ResourceRef]) -> Vec<Finding> {
        let mut found: Vec<Finding> = Vec::new();
        for pod in pods {
            for finding in self.explain_pod(pod, &extend(chain, pod)) {
                let same = |f: &&mut Finding| {
                    f.reason == finding.reason
                        && (f.root == finding.root
                            || (f.root.kind == "Pod" && finding.root.kind == "Pod"))
                };
                match found.iter_mut().find(same) {
                    Some(first) => first.similar_pods += 1,
                    None => found.push(finding),
                }
            }
        }
        found
    }

    fn explain_pod(&self, pod: &Value, chain: &[ResourceRef]) -> Vec<Finding> {
        if pod_is_healthy(pod) {
            return Vec::new();
        }
        let pod_ref = resource_ref(pod);
        if str_at(pod, &["status", "reason"]) == Some("Evicted") {
            let message = str_at(pod, &["status", "message"]).unwrap_or_default();
            let evidence = format!("Pod {}: Evicted: {message}", pod_ref.name);
            return vec![Finding::new(pod_ref, Reason::Evicted, evidence, chain)];
        }
        if let Some(condition) = condition(pod, "PodScheduled")
            && str_at(condition, &["status"]) == Some("False")
        {
            return vec![self.explain_unschedulable(pod, condition, chain)];
        }
        let references = pod.get("spec").map(pod_spec_references).unwrap_or_default();
        let mut found: Vec<Finding> = container_statuses(pod)
            .filter_map(|status| self.explain_container(pod, &references, status, chain))
            .collect();
        if found.is_empty() {
            found.extend(self.explain_mount(pod, &references, chain));
        }
        if found.is_empty() {
            found.extend(self.explain_not_ready(pod, chain));
        }
        if found.is_empty() {
            let not_pull_secret = |r: &PodReference| r.origin != Origin::ImagePullSecret;
            found.extend(self.missing_references(pod, &references, chain, not_pull_secret, None));
        }
        found
    }

    /// A Pod no node can take: a claim that is missing or unbound, else the scheduler's message.
    fn explain_unschedulable(
        &self,
        pod: &Value,
        condition: &Value,
        chain: &[ResourceRef],
    ) -> Finding {
        let pod_ref = resource_ref(pod);
        let namespace = &pod_ref.namespace;
        let message = str_at(condition, &["message"])
            .filter(|m| !m.is_empty())
            .map(str::to_owned)
            .or_else(|| {
                self.event(&pod_ref, |e| e.reason == "FailedScheduling").map(|e| e.message.clone())
            })
            .unwrap_or_default();
        let detail = format!("Pod {}: Unschedulable: {message}", pod_ref.name);
        let claims = pod.get("spec").map(pod_spec_references).unwrap_or_default();
        for claim in claims.iter().filter(|r| r.kind == RefKind::PersistentVolumeClaim) {
            let claim_ref = claim.kind.resource(namespace, &claim.name);
            let named_missing =
                message.contains(&format!("persistentvolumeclaim \"{}\" not found", claim.name));
            if self.is_absent(&claim_ref) || named_missing {
                let evidence = format!("{} does not exist; {detail}", describe(&claim_ref));
                return Finding::new(
                    claim_ref,
                    Reason::MissingPersistentVolumeClaim,
                    evidence,
                    chain,
                );
            }
            if let Some(object) = self.get(&claim_ref)
                && let Some(mut finding) = self.explain_claim(object, &extend(chain, object))
            {
                finding.evidence = format!("{}; {detail}", finding.evidence);
                return finding;
            }
        }
        let reason = match str_at(condition, &["reason"]) {
            Some("Unschedulable") | None => Reason::Unschedulable,
            Some(other) if is_camel_case(other) => Reason::Named(other.to_owned()),
            Some(_) => Reason::Unschedulable,
        };
        Finding::new(pod_ref, reason, detail, chain)
    }

    /// A claim that is not Bound.
    fn explain_claim(&self, claim: &Value, chain: &[ResourceRef]) -> Option<Finding> {
        let phase = str_at(claim, &["status", "phase"]).unwrap_or("Pending");
        if phase == "Bound" {
            return None;
        }
        let claim_ref = resource_ref(claim);
        let class = match str_at(claim, &["spec", "storageClassName"]) {
            Some(class) if !class.is_empty() => format!("storage class \"{class}\""),
            _ => "no storage class".to_owned(),
        };
        let mut evidence = format!("{} is {phase} ({class})", describe(&claim_ref));
        let event =
            self.event(&claim_ref, |e| e.warning).or_else(|| self.event(&claim_ref, |_| true));
        if let Some(event) = event {
            evidence.push_str(&format!(": {}: {}", event.reason, event.message));
        }
        Some(Finding::new(claim_ref, Reason::PersistentVolumeClaimPending, evidence, chain))
    }

    /// The cause one container's status shows.
    fn explain_container(
        &self,
        pod: &Value,
        references: &[PodReference],
        status: &Value,
        chain: &[ResourceRef],
    ) -> Option<Finding> {
        let pod_ref = resource_ref(pod);
        let container = str_at(status, &["name"]).unwrap_or_default();
        let on_pod = |reason: Reason, detail: String| {
            Some(Finding::new(
                pod_ref.clone(),
                reason,
                format!("Pod {}: {detail}", pod_ref.name),
                chain,
            ))
        };
        if let Some(terminated) = at(status, &["state", "terminated"]) {
            let code = terminated.get("exitCode").and_then(Value::as_i64).unwrap_or_default();
            let detail = format!("container {container} {}", termination(terminated));
            return match str_at(terminated, &["reason"]) {
                Some("OOMKilled") => on_pod(Reason::OomKilled, format!("OOMKilled: {detail}")),
                _ if code != 0 => {
                    on_pod(Reason::ContainerFailed, format!("ContainerFailed: {detail}"))
                }
                _ => None,
            };
        }
        let waiting = at(status, &["state", "waiting"])?;
        let reason = str_at(waiting, &["reason"]).unwrap_or_default();
        let message = str_at(waiting, &["message"]).unwrap_or_default();
        let detail = format!("{reason}: container {container} is waiting: {message}");
        match reason {
            "CreateContainerConfigError" => {
                let of_container =
                    |r: &PodReference| r.origin == Origin::Env { container: container.to_owned() };
                if let Some((root, missing)) = parse_missing(message, &pod_ref.namespace) {
                    let evidence = match missing {
                        Reason::MissingSecretKey | Reason::MissingConfigMapKey => {
                            format!(
                                "{} has no such key; Pod {}: {detail}",
                                describe(&root),
                                pod_ref.name
                            )
                        }
                        _ => format!(
                            "{} does not exist; Pod {}: {detail}",
                            describe(&root),
                            pod_ref.name
                        ),
                    };
                    return Some(Finding::new(root, missing, evidence, chain));
                }
                if let Some(found) = self
                    .missing_references(pod, references, chain, of_container, Some(&detail))
                    .into_iter()
                    .next()
                {
                    return Some(found);
                }
                on_pod(Reason::CreateContainerConfigError, detail)
            }
            "ErrImagePull" | "ImagePullBackOff" | "ErrImageNeverPull" => {
                let image = image_of(pod, container);
                let pull = self
                    .event(&pod_ref, |e| e.warning && e.message.starts_with("Failed to pull image"))
                    .map(|e| e.message.as_str())
                    .unwrap_or(message);
                let detail = format!(
                    "{reason}: container {container} cannot pull image \"{image}\": {pull}"
                );
                let pull_secret = |r: &PodReference| r.origin == Origin::ImagePullSecret;
                if let Some(found) = self
                    .missing_references(pod, references, chain, pull_secret, Some(&detail))
                    .into_iter()
                    .next()
                {
                    return Some(found);
                }
                on_pod(Reason::ImagePullBackOff, detail)
            }
            "InvalidImageName" => on_pod(Reason::InvalidImageName, detail),
            "CrashLoopBackOff" => {
                let restarts =
                    status.get("restartCount").and_then(Value::as_i64).unwrap_or_default();
                let last = at(status, &["lastState", "terminated"]);
                let last_text =
                    last.map(termination).unwrap_or_else(|| "last exit unknown".to_owned());
                let detail =
                    format!("container {container} restarted {restarts} times; last {last_text}");
                if last.and_then(|t| str_at(t, &["reason"])) == Some("OOMKilled") {
                    on_pod(Reason::OomKilled, format!("OOMKilled: {detail}"))
                } else {
                    on_pod(Reason::CrashLoopBackOff, format!("CrashLoopBackOff: {detail}"))
                }
            }
            "ContainerCreating" | "PodInitializing" | "" => None,
            other if is_camel_case(other) => on_pod(Reason::Named(other.to_owned()), detail),
            _ => None,
        }
    }

    /// A Pod kept from starting by a missing volume source (`FailedMount`).
    fn explain_mount(
        &self,
        pod: &Value,
        references: &[PodReference],
        chain: &[ResourceRef],
    ) -> Option<Finding> {
        let pod_ref = resource_ref(pod);
        let mount_event = self.event(&pod_ref, |e| e.reason == "FailedMount");
        if let Some(event) = mount_event
            && let Some((root, reason)) = parse_missing(&event.message, &pod_ref.namespace)
        {
            let evidence = format!(
                "{} does not exist; Pod {}: FailedMount: {}",
                describe(&root),
                pod_ref.name,
                event.message
            );
            return Some(Finding::new(root, reason, evidence, chain));
        }
        let volume = |r: &PodReference| matches!(r.origin, Origin::Volume { .. });
        let detail = mount_event.map(|e| format!("FailedMount: {}", e.message));
        self.missing_references(pod, references, chain, volume, detail.as_deref())
            .into_iter()
            .next()
    }

    /// Containers that run but are not ready.
    fn explain_not_ready(&self, pod: &Value, chain: &[ResourceRef]) -> Option<Finding> {
        // Init containers are never ready while they run; only the regular ones count.
        let running_unready = array_at(pod, &["status", "containerStatuses"]).iter().any(|s| {
            at(s, &["state", "running"]).is_some()
                && s.get("ready").and_then(Value::as_bool) != Some(true)
        });
        if !running_unready {
            return None;
        }
        let pod_ref = resource_ref(pod);
        if let Some(event) = self.event(&pod_ref, |e| {
            e.reason == "Unhealthy" && e.message.starts_with("Readiness probe failed")
        }) {
            let evidence = format!("Pod {}: ReadinessProbeFailed: {}", pod_ref.name, event.message);
            return Some(Finding::new(pod_ref, Reason::ReadinessProbeFailed, evidence, chain));
        }
        let message =
            condition(pod, "Ready").and_then(|c| str_at(c, &["message"])).unwrap_or_default();
        let evidence = format!("Pod {}: ContainersNotReady: {message}", pod_ref.name);
        Some(Finding::new(pod_ref, Reason::ContainersNotReady, evidence, chain))
    }

    /// The Pod's required references that `wanted` selects and that are in `absent`.
    fn missing_references(
        &self,
        pod: &Value,
        references: &[PodReference],
        chain: &[ResourceRef],
        wanted: impl Fn(&PodReference) -> bool,
        detail: Option<&str>,
    ) -> Vec<Finding> {
        let namespace = namespace_of(pod);
        let mut found: Vec<Finding> = Vec::new();
        for reference in references.iter().filter(|r| !r.optional && wanted(r)) {
            let root = reference.kind.resource(namespace, &reference.name);
            if !self.is_absent(&root) || found.iter().any(|f| f.root == root) {
                continue;
            }
            let evidence = format!(
                "{} does not exist; Pod {}: {}",
                describe(&root),
                name_of(pod),
                detail.map(str::to_owned).unwrap_or_else(|| origin_text(reference))
            );
            found.push(Finding::new(root, Reason::missing(reference.kind), evidence, chain));
        }
        found
    }

    /// Pods a workload controller could not create (`ReplicaFailure` condition or `FailedCreate`
    /// Events).
    fn creation_failures(&self, object: &Value, chain: &[ResourceRef]) -> Vec<Finding> {
        let r = resource_ref(object);
        let message = condition(object, "ReplicaFailure")
            .filter(|c| str_at(c, &["status"]) == Some("True"))
            .and_then(|c| str_at(c, &["message"]))
            .map(str::to_owned)
            .or_else(|| {
                self.event(&r, |e| e.warning && e.reason == "FailedCreate")
                    .map(|e| e.message.clone())
            });
        let Some(message) = message else { return Vec::new() };
        let (root, reason) = classify_create_failure(&message, &r);
        let evidence = match reason {
            Reason::MissingServiceAccount => {
                format!(
                    "{} does not exist; {}: FailedCreate: {message}",
                    describe(&root),
                    describe(&r)
                )
            }
            _ => format!("{}: FailedCreate: {message}", describe(&r)),
        };
        vec![Finding::new(root, reason, evidence, chain)]
    }

    /// A Job: its Pods' specific causes, else its `Failed` condition (`JobFailed`/`HookFailed`)
    /// with the failing containers as evidence.
    fn explain_job(&self, job: &Value, chain: &[ResourceRef]) -> Vec<Finding> {
        let mut found = self.creation_failures(job, chain);
        let pods = self.owned(job, "Pod");
        let pod_findings = self.explain_pods(&pods, chain);
        let failed = condition(job, "Failed").filter(|c| str_at(c, &["status"]) == Some("True"));
        let Some(failed) = failed else {
            found.extend(pod_findings);
            return found;
        };
        let (generic, specific): (Vec<Finding>, Vec<Finding>) = pod_findings
            .into_iter()
            .partition(|f| matches!(f.reason, Reason::ContainerFailed | Reason::CrashLoopBackOff));
        if !specific.is_empty() || !found.is_empty() {
            found.extend(specific);
            return found;
        }
        let r = resource_ref(job);
        let is_hook =
            matches!(annotation(job, keys::HOOK), Some(keys::HOOK_PRE_SYNC | keys::HOOK_POST_SYNC));
        let reason = if is_hook { Reason::HookFailed } else { Reason::JobFailed };
        let mut evidence = format!(
            "{} failed: {}: {}",
            describe(&r),
            str_at(failed, &["reason"]).unwrap_or("Failed"),
            str_at(failed, &["message"]).unwrap_or_default()
        );
        if let Some(pod) = generic.first() {
            evidence.push_str(&format!("; {}", pod.evidence));
        }
        vec![Finding::new(r, reason, evidence, chain)]
    }
}

/// The chain with `object` appended.
fn extend(chain: &[ResourceRef], object: &Value) -> Vec<ResourceRef> {
    let mut out = chain.to_vec();
    out.push(resource_ref(object));
    out
}

static NOT_FOUND: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"\b(secret|configmap|persistentvolumeclaim|serviceaccount)s? "([^"]+)" not found"#)
        .expect("valid regex")
});

static MISSING_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"couldn't find key (\S+) in (Secret|ConfigMap) ([^/\s]+)/(\S+)")
        .expect("valid regex")
});

static QUOTA: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"exceeded quota: ([^,\s]+)").expect("valid regex"));

/// A missing object or key named in kubelet or controller wording, in `namespace`.
fn parse_missing(message: &str, namespace: &str) -> Option<(ResourceRef, Reason)> {
    if let Some(captures) = MISSING_KEY.captures(message) {
        let (kind, reason) = match &captures[2] {
            "Secret" => (RefKind::Secret, Reason::MissingSecretKey),
            _ => (RefKind::ConfigMap, Reason::MissingConfigMapKey),
        };
        return Some((kind.resource(&captures[3], &captures[4]), reason));
    }
    let captures = NOT_FOUND.captures(message)?;
    let kind = match &captures[1] {
        "secret" => RefKind::Secret,
        "configmap" => RefKind::ConfigMap,
        "persistentvolumeclaim" => RefKind::PersistentVolumeClaim,
        _ => RefKind::ServiceAccount,
    };
    Some((kind.resource(namespace, &captures[2]), Reason::missing(kind)))
}

/// The root and reason of a Pod creation failure of `workload`.
fn classify_create_failure(message: &str, workload: &ResourceRef) -> (ResourceRef, Reason) {
    if let Some((root, Reason::MissingServiceAccount)) = parse_missing(message, &workload.namespace)
    {
        return (root, Reason::MissingServiceAccount);
    }
    if message.contains("exceeded quota") {
        let root = QUOTA
            .captures(message)
            .map(|c| core_ref("ResourceQuota", &workload.namespace, &c[1]))
            .unwrap_or_else(|| workload.clone());
        return (root, Reason::QuotaExceeded);
    }
    let webhook = message.contains("admission webhook") && message.contains("denied the request");
    if webhook || message.contains("violates PodSecurity") {
        return (workload.clone(), Reason::AdmissionRefused);
    }
    (workload.clone(), Reason::FailedCreate)
}

/// `terminated with exit code 1 (Error): message`.
fn termination(terminated: &Value) -> String {
    let code = terminated.get("exitCode").and_then(Value::as_i64).unwrap_or_default();
    let mut text = format!("terminated with exit code {code}");
    if let Some(reason) = str_at(terminated, &["reason"]) {
        text.push_str(&format!(" ({reason})"));
    }
    if let Some(message) = str_at(terminated, &["message"]).map(str::trim).filter(|m| !m.is_empty())
    {
        text.push_str(&format!(": {message}"));
    }
    text
}

/// What a reference is for, when no event words the failure.
fn origin_text(reference: &PodReference) -> String {
    let what = format!("{} \"{}\"", reference.kind.kind(), reference.name);
    match &reference.origin {
        Origin::Env { container } => format!("container {container} takes environment from {what}"),
        Origin::Volume { volume } => format!("volume \"{volume}\" mounts {what}"),
        Origin::ImagePullSecret => format!("imagePullSecrets names {what}"),
        Origin::ServiceAccount => format!("the Pod runs as {what}"),
    }
}

/// Every object a Pod spec refers to, in spec order.
fn pod_spec_references(spec: &Value) -> Vec<PodReference> {
    let mut out = Vec::new();
    let optional = |v: &Value| v.get("optional").and_then(Value::as_bool) == Some(true);
    let mut push = |kind, name: Option<&str>, origin: Origin, optional: bool| {
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            out.push(PodReference { kind, name: name.to_owned(), origin, optional });
        }
    };
    let containers =
        array_at(spec, &["initContainers"]).iter().chain(array_at(spec, &["containers"]));
    for container in containers {
        let origin = || Origin::Env {
            container: str_at(container, &["name"]).unwrap_or_default().to_owned(),
        };
        for env in array_at(container, &["envFrom"]) {
            if let Some(r) = env.get("secretRef") {
                push(RefKind::Secret, str_at(r, &["name"]), origin(), optional(r));
            }
            if let Some(r) = env.get("configMapRef") {
                push(RefKind::ConfigMap, str_at(r, &["name"]), origin(), optional(r));
            }
        }
        for env in array_at(container, &["env"]) {
            if let Some(r) = at(env, &["valueFrom", "secretKeyRef"]) {
                push(RefKind::Secret, str_at(r, &["name"]), origin(), optional(r));
            }
            if let Some(r) = at(env, &["valueFrom", "configMapKeyRef"]) {
                push(RefKind::ConfigMap, str_at(r, &["name"]), origin(), optional(r));
            }
        }
    }
    for volume in array_at(spec, &["volumes"]) {
        let origin =
            || Origin::Volume { volume: str_at(volume, &["name"]).unwrap_or_default().to_owned() };
        if let Some(s) = volume.get("secret") {
            push(RefKind::Secret, str_at(s, &["secretName"]), origin(), optional(s));
        }
        if let Some(c) = volume.get("configMap") {
            push(RefKind::ConfigMap, str_at(c, &["name"]), origin(), optional(c));
        }
        if let Some(c) = volume.get("persistentVolumeClaim") {
            push(RefKind::PersistentVolumeClaim, str_at(c, &["claimName"]), origin(), false);
        }
        for source in array_at(volume, &["projected", "sources"]) {
            if let Some(s) = source.get("secret") {
                push(RefKind::Secret, str_at(s, &["name"]), origin(), optional(s));
            }
            if let Some(c) = source.get("configMap") {
                push(RefKind::ConfigMap, str_at(c, &["name"]), origin(), optional(c));
            }
        }
    }
    for secret in array_at(spec, &["imagePullSecrets"]) {
        push(RefKind::Secret, str_at(secret, &["name"]), Origin::ImagePullSecret, false);
    }
    let account = str_at(spec, &["serviceAccountName"])
        .or_else(|| str_at(spec, &["serviceAccount"]))
        .filter(|n| !n.is_empty())
        .unwrap_or("default");
    push(RefKind::ServiceAccount, Some(account), Origin::ServiceAccount, false);
    out
}

/// A Pod that needs nothing: it completed, or it runs and is Ready.
fn pod_is_healthy(pod: &Value) -> bool {
    let ready = condition(pod, "Ready").and_then(|c| str_at(c, &["status"])) == Some("True");
    match str_at(pod, &["status", "phase"]) {
        Some("Succeeded") => true,
        Some("Running") => ready,
        _ => false,
    }
}

/// Init container statuses, then container statuses.
fn container_statuses(pod: &Value) -> impl Iterator<Item = &Value> {
    array_at(pod, &["status", "initContainerStatuses"])
        .iter()
        .chain(array_at(pod, &["status", "containerStatuses"]))
}

/// The image a container of the Pod's spec asks for.
fn image_of<'a>(pod: &'a Value, container: &str) -> &'a str {
    array_at(pod, &["spec", "initContainers"])
        .iter()
        .chain(array_at(pod, &["spec", "containers"]))
        .find(|c| str_at(c, &["name"]) == Some(container))
        .and_then(|c| str_at(c, &["image"]))
        .unwrap_or_default()
}

/// The reason of the first failing condition that names one in CamelCase: `Ready=False`,
/// `Stalled=True`, `Progressing=False`, `Available=False` or `Failed=True`.
fn failing_condition_reason(object: &Value) -> Option<Reason> {
    const FAILING: &[(&str, &str)] = &[
        ("Ready", "False"),
        ("Stalled", "True"),
        ("Progressing", "False"),
        ("Available", "False"),
        ("Failed", "True"),
    ];
    FAILING.iter().find_map(|(type_, status)| {
        condition(object, type_)
            .filter(|c| str_at(c, &["status"]) == Some(status))
            .and_then(|c| str_at(c, &["reason"]))
            .filter(|r| is_camel_case(r))
            .map(|r| Reason::Named(r.to_owned()))
    })
}

/// `Word` or `WordsLikeThis`: an ASCII capital followed by letters and digits.
fn is_camel_case(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase()) && chars.all(|c| c.is_ascii_alphanumeric())
}

/// Whether `object` has an owner reference to `owner`: by uid when both have one, else by kind
/// and name (in the same namespace).
fn is_owned_by(object: &Value, owner: &Value) -> bool {
    if namespace_of(object) != namespace_of(owner) {
        return false;
    }
    let owner_uid = str_at(owner, &["metadata", "uid"]);
    array_at(object, &["metadata", "ownerReferences"]).iter().any(|r| {
        match (owner_uid, str_at(r, &["uid"])) {
            (Some(a), Some(b)) => a == b,
            _ => {
                str_at(r, &["kind"]) == Some(kind_of(owner))
                    && str_at(r, &["name"]) == Some(name_of(owner))
            }
        }
    })
}

/// The condition of `type_` in `status.conditions`.
fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    array_at(object, &["status", "conditions"]).iter().find(|c| str_at(c, &["type"]) == Some(type_))
}

fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    at(object, &["metadata", "annotations"])?.get(key)?.as_str()
}

/// `Kind namespace/name` (or `Kind name` when cluster-scoped).
fn describe(r: &ResourceRef) -> String {
    if r.namespace.is_empty() {
        format!("{} {}", r.kind, r.name)
    } else {
        format!("{} {}/{}", r.kind, r.namespace, r.name)
    }
}

fn core_ref(kind: &str, namespace: &str, name: &str) -> ResourceRef {
    ResourceRef {
        api_version: "v1".to_owned(),
        kind: kind.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

/// The identity of a live object.
fn resource_ref(object: &Value) -> ResourceRef {
    ResourceRef {
        api_version: str_at(object, &["apiVersion"]).unwrap_or_default().to_owned(),
        kind: kind_of(object).to_owned(),
        namespace: namespace_of(object).to_owned(),
        name: name_of(object).to_owned(),
    }
}

fn kind_of(object: &Value) -> &str {
    str_at(object, &["kind"]).unwrap_or_default()
}

fn namespace_of(object: &Value) -> &str {
    str_at(object, &["metadata", "namespace"]).unwrap_or_default()
}

fn name_of(object: &Value) -> &str {
    str_at(object, &["metadata", "name"]).unwrap_or_default()
}

fn at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(key))
}

fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(value, path)?.as_str()
}

fn array_at<'a>(value: &'a Value, path: &[&str]) -> &'a [Value] {
    at(value, path).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

#[cfg(test)]
#[path = "diagnosis_tests.rs"]
mod tests;
