//! kstatus: the Kubernetes status conventions, as a pure function from a live object (the JSON
//! the API server returns) to one of five statuses, a message and the standard `Reconciling` or
//! `Stalled` condition that explains it.
//!
//! The behaviour is that of kstatus (`status.Compute` in the `pkg/kstatus/status` package of
//! kubernetes-sigs/cli-utils), the library Flux, kpt and cli-utils' own applier use to decide
//! when an applied object has settled. Its test cases, transcribed from cli-utils' Go tests, run
//! in the conformance suite (`tests/conformance/tests/kstatus_cases.rs`, reading
//! `fixtures/kstatus/status_compute_cases.yaml`). The reasons of the conditions are the same as
//! kstatus's, so they can be compared; the messages are our own. No Rust crate implements kstatus,
//! so this module is written by hand.
//!
//! The rules, in the order they are tried:
//!
//! 1. Generic: `metadata.deletionTimestamp` set is `Terminating`; a `status.observedGeneration`
//!    that differs from `metadata.generation` is `InProgress`; a `Reconciling=True` condition is
//!    `InProgress` and `Stalled=True` is `Failed`.
//! 2. Built-in kinds, one function each: Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job,
//!    PodDisruptionBudget, Service, PersistentVolumeClaim, CustomResourceDefinition; Secret,
//!    ConfigMap and CronJob are always `Current`.
//! 3. Any other kind (custom resources): a `Ready` condition decides when there is one, and an
//!    object without any of these signals is `Current`.
//!
//! An object kstatus cannot read (a field of the wrong type, a Pod phase it does not know) is
//! `Unknown`, where kstatus returns an error.
//!
//! Time: kstatus gives an unschedulable Pod [`SCHEDULE_WINDOW`] after its creation before calling
//! it `Failed`. This crate has no clock, so [`compute`] cannot tell whether that window has
//! passed and keeps such a Pod `InProgress` while it has a `creationTimestamp`; [`compute_at`]
//! takes the time and judges the window exactly as kstatus does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kuvryn_sync_api::HealthState;
use serde_json::{Map, Value};

/// kstatus's status of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Not yet at the state its spec asks for.
    InProgress,
    /// Will not get there without a change (or gave up trying).
    Failed,
    /// At the state its spec asks for.
    Current,
    /// Being deleted.
    Terminating,
    /// Could not be judged: the object does not have the shape its kind should have.
    Unknown,
}

impl Status {
    /// kstatus's spelling of the status.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "InProgress",
            Status::Failed => "Failed",
            Status::Current => "Current",
            Status::Terminating => "Terminating",
            Status::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The condition type kstatus reports while an object is on its way (`InProgress`).
pub const RECONCILING: &str = "Reconciling";

/// The condition type kstatus reports when an object will not get there (`Failed`).
pub const STALLED: &str = "Stalled";

/// How long after its creation an unschedulable Pod is still `InProgress` (see [`compute_at`]).
pub const SCHEDULE_WINDOW: SignedDuration = SignedDuration::from_secs(15);

/// A condition kstatus reports (Reconciling / Stalled), as in cli-utils.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputedCondition {
    /// [`RECONCILING`] or [`STALLED`].
    pub type_: String,
    /// Always `"True"`: kstatus reports these conditions only when they hold.
    pub status: String,
    /// kstatus's reason (for example `LessReady`), or the object's own reason when one of its
    /// conditions decided.
    pub reason: String,
    /// What is going on, for a person.
    pub message: String,
}

/// The result of [`compute`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Computed {
    pub status: Status,
    /// Why the object has this status, for a person.
    pub message: String,
    /// `Reconciling` with an `InProgress` status, `Stalled` with a `Failed` one, else none.
    pub conditions: Vec<ComputedCondition>,
}

impl Computed {
    fn current(message: impl Into<String>) -> Self {
        Self::without_condition(Status::Current, message)
    }

    fn terminating(message: impl Into<String>) -> Self {
        Self::without_condition(Status::Terminating, message)
    }

    fn unknown(message: impl Into<String>) -> Self {
        Self::without_condition(Status::Unknown, message)
    }

    fn in_progress(reason: &str, message: impl Into<String>) -> Self {
        Self::with_condition(Status::InProgress, RECONCILING, reason, message)
    }

    fn failed(reason: &str, message: impl Into<String>) -> Self {
        Self::with_condition(Status::Failed, STALLED, reason, message)
    }

    fn without_condition(status: Status, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), conditions: Vec::new() }
    }

    fn with_condition(
        status: Status,
        type_: &str,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        let message = message.into();
        let condition = ComputedCondition {
            type_: type_.to_owned(),
            status: "True".to_owned(),
            reason: reason.to_owned(),
            message: message.clone(),
        };
        Self { status, message, conditions: vec![condition] }
    }
}

/// Compute the status of a live object (JSON as the API server returns it).
///
/// Without a clock: an unschedulable Pod that has a `creationTimestamp` stays `InProgress`
/// (`PodNotScheduled`), because whether [`SCHEDULE_WINDOW`] has passed cannot be known. Use
/// [`compute_at`] to judge that window.
pub fn compute(object: &Value) -> Computed {
    evaluate(object, None)
}

/// [`compute`] at the time `now`: exactly kstatus, including the schedule window of Pods.
pub fn compute_at(object: &Value, now: &Time) -> Computed {
    evaluate(object, Some(now.0))
}

/// The Kuvryn Sync health of an object: Current -> Healthy, InProgress and Terminating ->
/// Progressing, Failed -> Degraded, Unknown -> Unknown; a suspended workload (a CronJob or Job
/// with spec.suspend: true, a Deployment with spec.paused: true) -> Suspended. Returns the health
/// and a short human message (the kstatus message).
///
/// Suspension wins over every status but `Terminating` (an object being deleted is Progressing
/// whatever its spec says); the message then names the field that suspends it.
pub fn health(object: &Value) -> (HealthState, String) {
    health_of(object, compute(object))
}

/// [`health`] at the time `now` (see [`compute_at`]).
pub fn health_at(object: &Value, now: &Time) -> (HealthState, String) {
    health_of(object, compute_at(object, now))
}

fn health_of(object: &Value, computed: Computed) -> (HealthState, String) {
    if computed.status != Status::Terminating
        && let Some(message) = suspension(object)
    {
        return (HealthState::Suspended, message.to_owned());
    }
    (health_state(computed.status), computed.message)
}

fn health_state(status: Status) -> HealthState {
    match status {
        Status::Current => HealthState::Healthy,
        Status::InProgress | Status::Terminating => HealthState::Progressing,
        Status::Failed => HealthState::Degraded,
        Status::Unknown => HealthState::Unknown,
    }
}

/// Why a workload is suspended, when it is.
fn suspension(object: &Value) -> Option<&'static str> {
    let (group, kind) = group_kind(object)?;
    let flag = |name| field(object, &["spec", name]).and_then(Value::as_bool) == Some(true);
    match (group, kind) {
        ("batch", "CronJob") if flag("suspend") => {
            Some("CronJob is suspended (spec.suspend): no new Jobs are started")
        }
        ("batch", "Job") if flag("suspend") => {
            Some("Job is suspended (spec.suspend): its Pods are not running")
        }
        ("apps" | "extensions", "Deployment") if flag("paused") => {
            Some("Deployment is paused (spec.paused): rollouts wait until it is resumed")
        }
        _ => None,
    }
}

/// The object cannot be judged; the text says why. kstatus returns an error here.
#[derive(Debug)]
struct Malformed(String);

type Verdict = Result<Computed, Malformed>;

/// A rule that may leave the decision to the next one.
type Decision = Result<Option<Computed>, Malformed>;

/// The rule of one built-in kind.
type KindRule = fn(&Resource<'_>) -> Verdict;

fn evaluate(object: &Value, now: Option<Timestamp>) -> Computed {
    judge(object, now).unwrap_or_else(|Malformed(why)| Computed::unknown(why))
}

fn judge(object: &Value, now: Option<Timestamp>) -> Verdict {
    if !object.is_object() {
        return Err(Malformed("the object is not a JSON object".to_owned()));
    }
    if let Some(decided) = terminating(object)? {
        return Ok(decided);
    }
    if let Some(decided) = generation_not_observed(object)? {
        return Ok(decided);
    }
    let resource = Resource::read(object, now)?;
    if let Some(decided) = standard_conditions(&resource) {
        return Ok(decided);
    }
    if let Some(rule) = group_kind(object).and_then(|(group, kind)| kind_rule(group, kind)) {
        return rule(&resource);
    }
    Ok(ready_condition(&resource)
        .unwrap_or_else(|| Computed::current("No condition says the object is still changing")))
}

// ---------------------------------------------------------------------------------------------
// Reading the object.

/// One entry of `status.conditions`; absent fields are empty, as in kstatus.
#[derive(Debug)]
struct Condition<'a> {
    type_: &'a str,
    status: &'a str,
    reason: &'a str,
    message: &'a str,
}

impl Condition<'_> {
    /// The condition's message, or `fallback` when it has none.
    fn message_or(&self, fallback: impl FnOnce() -> String) -> String {
        if self.message.is_empty() { fallback() } else { self.message.to_owned() }
    }
}

/// An object with its conditions read, and the time of judgement when there is one.
struct Resource<'a> {
    object: &'a Value,
    conditions: Vec<Condition<'a>>,
    now: Option<Timestamp>,
}

impl<'a> Resource<'a> {
    fn read(object: &'a Value, now: Option<Timestamp>) -> Result<Self, Malformed> {
        Ok(Self { object, conditions: conditions(object)?, now })
    }

    fn kind(&self) -> &'a str {
        field(self.object, &["kind"]).and_then(Value::as_str).unwrap_or("object")
    }

    /// A string field, `default` when absent or not a string.
    fn text(&self, path: &[&str], default: &'a str) -> &'a str {
        field(self.object, path).and_then(Value::as_str).unwrap_or(default)
    }

    /// An integer field, `default` when absent or not an integer.
    fn number(&self, path: &[&str], default: i64) -> i64 {
        field(self.object, path).and_then(Value::as_i64).unwrap_or(default)
    }

    /// Whether a boolean field is `true`.
    fn flag(&self, path: &[&str]) -> bool {
        field(self.object, path).and_then(Value::as_bool) == Some(true)
    }

    /// The first condition of this type with this status.
    fn condition(&self, type_: &str, status: &str) -> Option<&Condition<'a>> {
        self.conditions.iter().find(|c| c.type_ == type_ && c.status == status)
    }

    fn holds(&self, type_: &str) -> bool {
        self.condition(type_, "True").is_some()
    }
}

/// The value at `path`; `null` counts as absent.
fn field<'a>(object: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(object, |value, key| value.as_object()?.get(*key))
        .filter(|value| !value.is_null())
}

/// An integer field kstatus reads strictly: absent is `None`, another type is malformed.
fn strict_integer(object: &Value, path: &[&str]) -> Result<Option<i64>, Malformed> {
    match field(object, path) {
        None => Ok(None),
        Some(value) => value
            .as_i64()
            .map(Some)
            .ok_or_else(|| Malformed(format!("{} is {value}, not an integer", path.join(".")))),
    }
}

/// `status.conditions`, strictly: a wrong type anywhere in them makes the object malformed.
fn conditions(object: &Value) -> Result<Vec<Condition<'_>>, Malformed> {
    let status = match field(object, &["status"]) {
        None => return Ok(Vec::new()),
        Some(Value::Object(status)) => status,
        Some(other) => return Err(Malformed(format!("status is {other}, not an object"))),
    };
    let entries = match status.get("conditions") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(entries)) => entries,
        Some(other) => {
            return Err(Malformed(format!("status.conditions is {other}, not a list")));
        }
    };
    entries.iter().map(condition).collect()
}

fn condition(entry: &Value) -> Result<Condition<'_>, Malformed> {
    let Value::Object(map) = entry else {
        return Err(Malformed(format!("a status condition is {entry}, not an object")));
    };
    Ok(Condition {
        type_: condition_text(map, "type")?,
        status: condition_text(map, "status")?,
        reason: condition_text(map, "reason")?,
        message: condition_text(map, "message")?,
    })
}

fn condition_text<'a>(map: &'a Map<String, Value>, key: &str) -> Result<&'a str, Malformed> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(text)) => Ok(text),
        Some(other) => {
            Err(Malformed(format!("a status condition's {key} is {other}, not a string")))
        }
    }
}

/// The API group and kind; `None` when `apiVersion` is not `version` or `group/version`.
fn group_kind(object: &Value) -> Option<(&str, &str)> {
    let api_version = field(object, &["apiVersion"]).and_then(Value::as_str).unwrap_or("");
    let kind = field(object, &["kind"]).and_then(Value::as_str).unwrap_or("");
    let group = match api_version.split_once('/') {
        None => "",
        Some((_, version)) if version.contains('/') => return None,
        Some((group, _)) => group,
    };
    Some((group, kind))
}

// ---------------------------------------------------------------------------------------------
// Generic rules.

/// `metadata.deletionTimestamp` set: the object is going away.
fn terminating(object: &Value) -> Decision {
    match field(object, &["metadata", "deletionTimestamp"]) {
        None => Ok(None),
        Some(Value::String(at)) if at.is_empty() => Ok(None),
        Some(Value::String(at)) => {
            Ok(Some(Computed::terminating(format!("Being deleted since {at}"))))
        }
        Some(other) => {
            Err(Malformed(format!("metadata.deletionTimestamp is {other}, not a string")))
        }
    }
}

/// The controller has not yet seen the latest spec (checked only when both fields are present).
fn generation_not_observed(object: &Value) -> Decision {
    let Some(generation) = strict_integer(object, &["metadata", "generation"])? else {
        return Ok(None);
    };
    let Some(observed) = strict_integer(object, &["status", "observedGeneration"])? else {
        return Ok(None);
    };
    if observed == generation {
        return Ok(None);
    }
    let kind = field(object, &["kind"]).and_then(Value::as_str).unwrap_or("object");
    Ok(Some(Computed::in_progress(
        "LatestGenerationNotObserved",
        format!(
            "{kind} generation {generation} not yet observed (its controller last saw {observed})"
        ),
    )))
}

/// The object's own `Reconciling=True` or `Stalled=True`, whichever comes first.
fn standard_conditions(resource: &Resource<'_>) -> Option<Computed> {
    resource.conditions.iter().filter(|c| c.status == "True").find_map(|c| match c.type_ {
        RECONCILING => Some(Computed::in_progress(
            c.reason,
            c.message_or(|| format!("{} reports Reconciling", resource.kind())),
        )),
        STALLED => Some(Computed::failed(
            c.reason,
            c.message_or(|| format!("{} reports Stalled", resource.kind())),
        )),
        _ => None,
    })
}

/// For kinds without a rule of their own: the first `Ready` condition with a known status.
fn ready_condition(resource: &Resource<'_>) -> Option<Computed> {
    resource.conditions.iter().filter(|c| c.type_ == "Ready").find_map(|c| match c.status {
        "True" => Some(Computed::current(format!("{} is Ready", resource.kind()))),
        "False" | "Unknown" => Some(Computed::in_progress(
            c.reason,
            c.message_or(|| format!("{} is not Ready yet (Ready={})", resource.kind(), c.status)),
        )),
        _ => None,
    })
}

// ---------------------------------------------------------------------------------------------
// Built-in kinds.

/// The rule of a built-in kind, by API group and kind.
fn kind_rule(group: &str, kind: &str) -> Option<KindRule> {
    let rule: KindRule = match (group, kind) {
        ("", "Pod") => pod,
        ("", "Service") => service,
        ("", "PersistentVolumeClaim") => persistent_volume_claim,
        ("", "Secret" | "ConfigMap") | ("batch", "CronJob") => always_current,
        ("apps", "StatefulSet") => stateful_set,
        ("apps" | "extensions", "Deployment") => deployment,
        ("apps" | "extensions", "DaemonSet") => daemon_set,
        ("apps" | "extensions", "ReplicaSet") => replica_set,
        ("batch", "Job") => job,
        ("policy", "PodDisruptionBudget") => pod_disruption_budget,
        ("apiextensions.k8s.io", "CustomResourceDefinition") => custom_resource_definition,
        _ => return None,
    };
    Some(rule)
}

/// Kinds with nothing to roll out.
fn always_current(resource: &Resource<'_>) -> Verdict {
    Ok(Computed::current(format!("{} has nothing to roll out", resource.kind())))
}

/// Pod: by phase; a finished Pod (Succeeded or Failed) is Current.
fn pod(resource: &Resource<'_>) -> Verdict {
    match resource.text(&["status", "phase"], "") {
        "Succeeded" => Ok(Computed::current("Pod ran to completion")),
        "Failed" => Ok(Computed::current("Pod has finished, unsuccessfully (phase Failed)")),
        "Running" => Ok(running_pod(resource)),
        "Pending" => Ok(pending_pod(resource)),
        "" => Ok(Computed::in_progress("PodNotObserved", "Pod has no phase yet")),
        other => Err(Malformed(format!("Pod phase {other:?} is not a known phase"))),
    }
}

fn running_pod(resource: &Resource<'_>) -> Computed {
    if resource.holds("Ready") {
        return Computed::current("Pod is running and Ready");
    }
    let looping = crash_looping_containers(resource.object);
    if !looping.is_empty() {
        return Computed::failed(
            "ContainerCrashLooping",
            format!("Container(s) in CrashLoopBackOff: {}", looping.join(", ")),
        );
    }
    Computed::in_progress("PodRunningNotReady", "Pod is running, not Ready yet")
}

fn pending_pod(resource: &Resource<'_>) -> Computed {
    let unschedulable =
        resource.condition("PodScheduled", "False").is_some_and(|c| c.reason == "Unschedulable");
    if !unschedulable {
        return Computed::in_progress("PodPending", "Pod is Pending");
    }
    if within_schedule_window(resource) {
        Computed::in_progress("PodNotScheduled", "Pod is waiting to be scheduled")
    } else {
        Computed::failed(
            "PodUnschedulable",
            "No node can take the Pod (PodScheduled=False, Unschedulable)",
        )
    }
}

/// Whether an unschedulable Pod is still young enough to wait. A missing or unreadable
/// `creationTimestamp` counts as long ago, as in kstatus; with no clock, a Pod that has one is
/// given the benefit of the doubt.
fn within_schedule_window(resource: &Resource<'_>) -> bool {
    let created = resource.text(&["metadata", "creationTimestamp"], "").parse::<Timestamp>().ok();
    match (created, resource.now) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(created), Some(now)) => now.duration_since(created) < SCHEDULE_WINDOW,
    }
}

/// Names of the containers whose waiting reason is `CrashLoopBackOff`.
fn crash_looping_containers(object: &Value) -> Vec<&str> {
    let statuses = field(object, &["status", "containerStatuses"]).and_then(Value::as_array);
    statuses
        .into_iter()
        .flatten()
        .filter(|s| {
            field(s, &["state", "waiting", "reason"]).and_then(Value::as_str)
                == Some("CrashLoopBackOff")
        })
        .filter_map(|s| field(s, &["name"]).and_then(Value::as_str))
        .collect()
}

/// Service: a LoadBalancer Service is in progress until it has a cluster IP.
fn service(resource: &Resource<'_>) -> Verdict {
    let load_balancer = resource.text(&["spec", "type"], "ClusterIP") == "LoadBalancer";
    if load_balancer && resource.text(&["spec", "clusterIP"], "").is_empty() {
        return Ok(Computed::in_progress(
            "NoIPAssigned",
            "LoadBalancer Service has no cluster IP yet",
        ));
    }
    Ok(Computed::current("Service is ready"))
}

/// PersistentVolumeClaim: Current once Bound.
fn persistent_volume_claim(resource: &Resource<'_>) -> Verdict {
    let phase = resource.text(&["status", "phase"], "");
    if phase == "Bound" {
        return Ok(Computed::current("PersistentVolumeClaim is Bound"));
    }
    let phase = if phase.is_empty() { "none yet" } else { phase };
    Ok(Computed::in_progress(
        "NotBound",
        format!("PersistentVolumeClaim is not Bound (phase: {phase})"),
    ))
}

/// StatefulSet: replica counts, partitioned rollouts and revisions (it sets no conditions).
fn stateful_set(resource: &Resource<'_>) -> Verdict {
    if resource.text(&["spec", "updateStrategy", "type"], "") == "OnDelete" {
        return Ok(Computed::current(
            "StatefulSet uses the OnDelete update strategy: Pods are replaced by hand",
        ));
    }
    let wanted = resource.number(&["spec", "replicas"], 1);
    let replicas = resource.number(&["status", "replicas"], 0);
    let ready = resource.number(&["status", "readyReplicas"], 0);
    let current = resource.number(&["status", "currentReplicas"], 0);
    let updated = resource.number(&["status", "updatedReplicas"], 0);
    let partition = resource.number(&["spec", "updateStrategy", "rollingUpdate", "partition"], -1);
    if wanted > replicas {
        return Ok(Computed::in_progress(
            "LessReplicas",
            format!("{replicas} of {wanted} replicas exist"),
        ));
    }
    if wanted > ready {
        return Ok(Computed::in_progress(
            "LessReady",
            format!("{ready} of {wanted} replicas are ready"),
        ));
    }
    if replicas > wanted {
        return Ok(extra_pods(replicas - wanted));
    }
    if partition != -1 {
        let to_update = wanted - partition;
        if updated < to_update {
            return Ok(Computed::in_progress(
                "PartitionRollout",
                format!("{updated} of {to_update} replicas above the partition are updated"),
            ));
        }
        return Ok(Computed::current(format!(
            "Partitioned rollout done: {updated} replicas updated"
        )));
    }
    if wanted > current {
        return Ok(Computed::in_progress(
            "LessCurrent",
            format!("{current} of {wanted} replicas run the current revision"),
        ));
    }
    if resource.text(&["status", "currentRevision"], "")
        != resource.text(&["status", "updateRevision"], "")
    {
        return Ok(Computed::in_progress(
            "RevisionMismatch",
            "The update revision is not yet the current revision",
        ));
    }
    Ok(Computed::current(format!("All {replicas} replicas are ready and current")))
}

fn extra_pods(extra: i64) -> Computed {
    Computed::in_progress("ExtraPods", format!("{extra} surplus replica(s) still to terminate"))
}

/// Deployment: replica counts, then the Progressing and Available conditions.
fn deployment(resource: &Resource<'_>) -> Verdict {
    if let Some(c) = resource
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing" && c.reason == "ProgressDeadlineExceeded")
    {
        return Ok(Computed::failed(
            c.reason,
            c.message_or(|| "Deployment exceeded its progress deadline".to_owned()),
        ));
    }
    let wanted = resource.number(&["spec", "replicas"], 1);
    let replicas = resource.number(&["status", "replicas"], 0);
    let updated = resource.number(&["status", "updatedReplicas"], 0);
    let ready = resource.number(&["status", "readyReplicas"], 0);
    let available = resource.number(&["status", "availableReplicas"], 0);
    if wanted > replicas {
        return Ok(Computed::in_progress(
            "LessReplicas",
            format!("{replicas} of {wanted} replicas exist"),
        ));
    }
    if wanted > updated {
        return Ok(Computed::in_progress(
            "LessUpdated",
            format!("{updated} of {wanted} replicas are updated"),
        ));
    }
    if replicas > wanted {
        return Ok(extra_pods(replicas - wanted));
    }
    if updated > available {
        return Ok(Computed::in_progress(
            "LessAvailable",
            format!("{available} of {updated} updated replicas are available"),
        ));
    }
    if wanted > ready {
        return Ok(Computed::in_progress(
            "LessReady",
            format!("{ready} of {wanted} replicas are ready"),
        ));
    }
    Ok(deployment_conditions(resource, replicas))
}

/// A Deployment whose replica counts are right: it still needs `Progressing` (when it has a
/// progress deadline) to say the new ReplicaSet is available, and `Available=True`.
fn deployment_conditions(resource: &Resource<'_>, replicas: i64) -> Computed {
    // Without a deadline (or with the maximum, which means none) the controller never sets
    // Progressing, so there is nothing to wait for.
    let no_deadline = resource.number(&["spec", "progressDeadlineSeconds"], i64::from(i32::MAX))
        == i64::from(i32::MAX);
    let rolled_out = no_deadline
        || resource.conditions.iter().any(|c| {
            c.type_ == "Progressing" && c.status == "True" && c.reason == "NewReplicaSetAvailable"
        });
    if !rolled_out {
        return Computed::in_progress(
            "ReplicaSetNotAvailable",
            "The new ReplicaSet is not available yet (Progressing)",
        );
    }
    if !resource.holds("Available") {
        return Computed::in_progress("DeploymentNotAvailable", "Deployment is not Available yet");
    }
    Computed::current(format!("Deployment is available with {replicas} replica(s)"))
}

/// ReplicaSet: a `ReplicaFailure` condition, then replica counts.
fn replica_set(resource: &Resource<'_>) -> Verdict {
    if resource.holds("ReplicaFailure") {
        return Ok(Computed::in_progress(
            "ReplicaFailure",
            "ReplicaSet reports ReplicaFailure: its Pods could not all be created",
        ));
    }
    let wanted = resource.number(&["spec", "replicas"], 1);
    let replicas = resource.number(&["status", "replicas"], 0);
    let ready = resource.number(&["status", "readyReplicas"], 0);
    let available = resource.number(&["status", "availableReplicas"], 0);
    let labelled = resource.number(&["status", "fullyLabeledReplicas"], 0);
    if wanted > labelled {
        return Ok(Computed::in_progress(
            "LessLabelled",
            format!("{labelled} of {wanted} replicas carry the selector's labels"),
        ));
    }
    if wanted > available {
        return Ok(Computed::in_progress(
            "LessAvailable",
            format!("{available} of {wanted} replicas are available"),
        ));
    }
    if wanted > ready {
        return Ok(Computed::in_progress(
            "LessReady",
            format!("{ready} of {wanted} replicas are ready"),
        ));
    }
    if replicas > wanted {
        return Ok(extra_pods(replicas - wanted));
    }
    Ok(Computed::current(format!("ReplicaSet is available with {replicas} replica(s)")))
}

/// DaemonSet: its controller always writes the generations, so both must be present; then
/// the scheduled, updated, available and ready counts against the desired one.
fn daemon_set(resource: &Resource<'_>) -> Verdict {
    if strict_integer(resource.object, &["metadata", "generation"])?.is_none() {
        return Ok(Computed::in_progress("NoGeneration", "DaemonSet has no metadata.generation"));
    }
    if strict_integer(resource.object, &["status", "observedGeneration"])?.is_none() {
        return Ok(Computed::in_progress(
            "NoObservedGeneration",
            "DaemonSet has no status.observedGeneration: its controller has not seen it yet",
        ));
    }
    let desired = resource.number(&["status", "desiredNumberScheduled"], -1);
    if desired == -1 {
        return Ok(Computed::in_progress(
            "NoDesiredNumber",
            "DaemonSet has no status.desiredNumberScheduled yet",
        ));
    }
    let counts = [
        ("currentNumberScheduled", "LessCurrent", "are scheduled"),
        ("updatedNumberScheduled", "LessUpdated", "are updated"),
        ("numberAvailable", "LessAvailable", "are available"),
        ("numberReady", "LessReady", "are ready"),
    ];
    for (name, reason, what) in counts {
        let count = resource.number(&["status", name], 0);
        if desired > count {
            return Ok(Computed::in_progress(
                reason,
                format!("{count} of {desired} daemon Pods {what}"),
            ));
        }
    }
    Ok(Computed::current(format!("All {desired} daemon Pods are scheduled, updated and ready")))
}

/// PodDisruptionBudget: once its generation is observed (a generic rule), it is Current.
fn pod_disruption_budget(_: &Resource<'_>) -> Verdict {
    Ok(Computed::current("PodDisruptionBudget has been observed by its controller"))
}

/// Job: Complete or Failed conditions, a deliberate suspension, else whether it has started.
fn job(resource: &Resource<'_>) -> Verdict {
    let parallelism = resource.number(&["spec", "parallelism"], 1);
    let completions = resource.number(&["spec", "completions"], parallelism);
    let succeeded = resource.number(&["status", "succeeded"], 0);
    let failed = resource.number(&["status", "failed"], 0);
    let active = resource.number(&["status", "active"], 0);
    let suspended = resource.flag(&["spec", "suspend"]);
    for c in resource.conditions.iter().filter(|c| c.status == "True") {
        match c.type_ {
            "Complete" => {
                return Ok(Computed::current(format!(
                    "Job is Complete: {succeeded} of {completions} completions succeeded"
                )));
            }
            "Failed" => {
                return Ok(Computed::failed(
                    "JobFailed",
                    format!(
                        "Job has Failed: {failed} failed Pod(s), {completions} completion(s) wanted"
                    ),
                ));
            }
            "Suspended" if suspended => return Ok(Computed::current("Job is suspended")),
            _ => {}
        }
    }
    if resource.text(&["status", "startTime"], "").is_empty() {
        return Ok(Computed::in_progress("JobNotStarted", "Job has not started yet"));
    }
    Ok(Computed::current(format!(
        "Job is running: {succeeded} succeeded, {active} active, {failed} failed"
    )))
}

/// CustomResourceDefinition: NamesAccepted and Established, in the order they appear.
fn custom_resource_definition(resource: &Resource<'_>) -> Verdict {
    for c in &resource.conditions {
        let refused = match (c.type_, c.status) {
            ("NamesAccepted", "False") => true,
            ("Established", "False") => c.reason != "Installing",
            ("Established", "True") => {
                return Ok(Computed::current("CustomResourceDefinition is Established"));
            }
            _ => false,
        };
        if refused {
            return Ok(Computed::failed(
                c.reason,
                c.message_or(|| format!("CustomResourceDefinition reports {}=False", c.type_)),
            ));
        }
    }
    Ok(Computed::in_progress("Installing", "CustomResourceDefinition is not Established yet"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `body` with `apiVersion` and `kind` set.
    fn object(api_version: &str, kind: &str, mut body: Value) -> Value {
        body["apiVersion"] = json!(api_version);
        body["kind"] = json!(kind);
        body
    }

    fn at(rfc3339: &str) -> Time {
        Time(rfc3339.parse().expect("timestamp"))
    }

    /// The reason of the single condition, with its type; `None` when there is no condition.
    fn reported(computed: &Computed) -> Option<(&str, &str)> {
        assert!(computed.conditions.len() <= 1, "{computed:?}");
        computed.conditions.first().map(|c| {
            assert_eq!(c.status, "True", "{computed:?}");
            assert_eq!(c.message, computed.message, "{computed:?}");
            (c.type_.as_str(), c.reason.as_str())
        })
    }

    type Row = (&'static str, Value, Status, Option<(&'static str, &'static str)>);

    fn check(rows: Vec<Row>, run: impl Fn(&Value) -> Computed) {
        let mut wrong = Vec::new();
        for (name, input, status, condition) in rows {
            let computed = run(&input);
            if computed.status != status || reported(&computed) != condition {
                wrong.push(format!("{name}: expected {status} {condition:?}, got {computed:?}"));
            }
            assert!(!computed.message.is_empty(), "{name}: empty message");
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    const PROGRESS: &str = RECONCILING;

    #[test]
    fn generic_rules() {
        let rows: Vec<Row> = vec![
            (
                "deletionTimestamp wins over everything",
                object(
                    "apps/v1",
                    "Deployment",
                    json!({"metadata": {"generation": 3,
                                        "deletionTimestamp": "2024-01-01T00:00:00Z"},
                           "status": {"observedGeneration": 1}}),
                ),
                Status::Terminating,
                None,
            ),
            (
                "empty deletionTimestamp is ignored",
                object("example.io/v1", "Thing", json!({"metadata": {"deletionTimestamp": ""}})),
                Status::Current,
                None,
            ),
            (
                "generation ahead of observedGeneration",
                object(
                    "example.io/v1",
                    "Thing",
                    json!({"metadata": {"generation": 5}, "status": {"observedGeneration": 4}}),
                ),
                Status::InProgress,
                Some((PROGRESS, "LatestGenerationNotObserved")),
            ),
            (
                "observedGeneration alone is not compared",
                object("example.io/v1", "Thing", json!({"status": {"observedGeneration": 4}})),
                Status::Current,
                None,
            ),
            (
                "generation check runs before a kind rule",
                object(
                    "v1",
                    "ConfigMap",
                    json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 1}}),
                ),
                Status::InProgress,
                Some((PROGRESS, "LatestGenerationNotObserved")),
            ),
            (
                "Reconciling=True carries the object's reason",
                object(
                    "example.io/v1",
                    "Thing",
                    json!({"status": {"conditions": [
                        {"type": "Ready", "status": "True"},
                        {"type": "Reconciling", "status": "True", "reason": "Scaling",
                         "message": "adding nodes"}]}}),
                ),
                Status::InProgress,
                Some((PROGRESS, "Scaling")),
            ),
            (
                "Stalled=True is Failed",
                object(
                    "example.io/v1",
                    "Thing",
                    json!({"status": {"conditions": [
                        {"type": "Stalled", "status": "True", "reason": "BadConfig"}]}}),
                ),
                Status::Failed,
                Some((STALLED, "BadConfig")),
            ),
            (
                "the first of Reconciling and Stalled decides",
                object(
                    "example.io/v1",
                    "Thing",
                    json!({"status": {"conditions": [
                        {"type": "Stalled", "status": "True", "reason": "Stuck"},
                        {"type": "Reconciling", "status": "True", "reason": "Working"}]}}),
                ),
                Status::Failed,
                Some((STALLED, "Stuck")),
            ),
            (
                "standard conditions override a kind rule",
                object(
                    "v1",
                    "Pod",
                    json!({"status": {"phase": "Running", "conditions": [
                        {"type": "Ready", "status": "True"},
                        {"type": "Reconciling", "status": "True", "reason": "Resizing"}]}}),
                ),
                Status::InProgress,
                Some((PROGRESS, "Resizing")),
            ),
            (
                "Reconciling=False is no signal",
                object(
                    "example.io/v1",
                    "Thing",
                    json!({"status": {"conditions": [{"type": "Reconciling", "status": "False"}]}}),
                ),
                Status::Current,
                None,
            ),
            (
                "custom resource with no status",
                object("example.io/v1", "Thing", json!({"metadata": {"generation": 1}})),
                Status::Current,
                None,
            ),
            (
                "custom resource Ready=True",
                object(
                    "example.io/v1",
                    "Thing",
                    json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
                ),
                Status::Current,
                None,
            ),
            (
                "custom resource Ready=False carries its reason",
                object(
                    "example.io/v1",
                    "Thing",
                    json!({"status": {"conditions": [
                        {"type": "Ready", "status": "False", "reason": "Waiting"}]}}),
                ),
                Status::InProgress,
                Some((PROGRESS, "Waiting")),
            ),
            (
                "custom resource Ready=Unknown",
                object(
                    "example.io/v1",
                    "Thing",
                    json!({"status": {"conditions": [
                        {"type": "Ready", "status": "Unknown", "reason": "Checking"}]}}),
                ),
                Status::InProgress,
                Some((PROGRESS, "Checking")),
            ),
            (
                "a Ready with an odd status is skipped",
                object(
                    "example.io/v1",
                    "Thing",
                    json!({"status": {"conditions": [
                        {"type": "Ready", "status": "Maybe"},
                        {"type": "Ready", "status": "False", "reason": "Second"}]}}),
                ),
                Status::InProgress,
                Some((PROGRESS, "Second")),
            ),
            (
                "other conditions say nothing",
                object(
                    "example.io/v1",
                    "Thing",
                    json!({"status": {"conditions": [{"type": "Synced", "status": "False"}]}}),
                ),
                Status::Current,
                None,
            ),
            (
                "a kind rule is not second-guessed by Ready",
                object(
                    "v1",
                    "ConfigMap",
                    json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
                ),
                Status::Current,
                None,
            ),
            (
                "null status counts as none",
                object("example.io/v1", "Thing", json!({"status": null})),
                Status::Current,
                None,
            ),
        ];
        check(rows, compute);
    }

    #[test]
    fn malformed_objects_are_unknown() {
        let rows: Vec<Row> = vec![
            ("not an object", json!(["a", "list"]), Status::Unknown, None),
            (
                "generation of the wrong type",
                object("example.io/v1", "Thing", json!({"metadata": {"generation": "one"}})),
                Status::Unknown,
                None,
            ),
            (
                "status that is not an object",
                object("example.io/v1", "Thing", json!({"status": "fine"})),
                Status::Unknown,
                None,
            ),
            (
                "conditions that are not a list",
                object(
                    "example.io/v1",
                    "Thing",
                    json!({"status": {"conditions": {"type": "Ready"}}}),
                ),
                Status::Unknown,
                None,
            ),
            (
                "a condition status that is not a string",
                object(
                    "example.io/v1",
                    "Thing",
                    json!({"status": {"conditions": [{"type": "Ready", "status": true}]}}),
                ),
                Status::Unknown,
                None,
            ),
            (
                "a Pod phase nobody knows",
                object("v1", "Pod", json!({"status": {"phase": "Hibernating"}})),
                Status::Unknown,
                None,
            ),
            (
                "a malformed condition does not hide a deletion",
                object(
                    "example.io/v1",
                    "Thing",
                    json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}, "status": 7}),
                ),
                Status::Terminating,
                None,
            ),
        ];
        check(rows, compute);
    }

    #[test]
    fn pods() {
        let pod = |status: Value| {
            object("v1", "Pod", json!({"metadata": {"name": "p"}, "status": status}))
        };
        let unschedulable =
            json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]);
        let rows: Vec<Row> = vec![
            (
                "no phase",
                object("v1", "Pod", json!({})),
                Status::InProgress,
                Some((PROGRESS, "PodNotObserved")),
            ),
            ("succeeded", pod(json!({"phase": "Succeeded"})), Status::Current, None),
            ("failed is finished", pod(json!({"phase": "Failed"})), Status::Current, None),
            (
                "running and ready",
                pod(json!({"phase": "Running",
                           "conditions": [{"type": "Ready", "status": "True"}]})),
                Status::Current,
                None,
            ),
            (
                "running, not ready",
                pod(json!({"phase": "Running",
                           "conditions": [{"type": "Ready", "status": "False"}]})),
                Status::InProgress,
                Some((PROGRESS, "PodRunningNotReady")),
            ),
            (
                "crash looping",
                pod(json!({"phase": "Running", "containerStatuses": [
                    {"name": "ok", "state": {"running": {}}},
                    {"name": "app", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]})),
                Status::Failed,
                Some((STALLED, "ContainerCrashLooping")),
            ),
            (
                "pending",
                pod(json!({"phase": "Pending"})),
                Status::InProgress,
                Some((PROGRESS, "PodPending")),
            ),
            (
                "unschedulable, no creationTimestamp",
                pod(json!({"phase": "Pending", "conditions": unschedulable})),
                Status::Failed,
                Some((STALLED, "PodUnschedulable")),
            ),
            (
                "unschedulable with a creationTimestamp, no clock",
                object(
                    "v1",
                    "Pod",
                    json!({"metadata": {"creationTimestamp": "2024-05-01T10:00:00Z"},
                           "status": {"phase": "Pending", "conditions": unschedulable}}),
                ),
                Status::InProgress,
                Some((PROGRESS, "PodNotScheduled")),
            ),
        ];
        check(rows, compute);
    }

    #[test]
    fn pod_schedule_window_with_a_clock() {
        let pod = object(
            "v1",
            "Pod",
            json!({"metadata": {"creationTimestamp": "2024-05-01T10:00:00Z"},
                   "status": {"phase": "Pending", "conditions": [
                       {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}),
        );
        // (now, expected status, expected reason)
        let steps = [
            ("2024-05-01T10:00:00Z", Status::InProgress, "PodNotScheduled"),
            ("2024-05-01T10:00:14Z", Status::InProgress, "PodNotScheduled"),
            ("2024-05-01T10:00:15Z", Status::Failed, "PodUnschedulable"),
            ("2024-05-01T11:00:00Z", Status::Failed, "PodUnschedulable"),
        ];
        for (now, status, reason) in steps {
            let computed = compute_at(&pod, &at(now));
            assert_eq!(computed.status, status, "at {now}");
            assert_eq!(computed.conditions[0].reason, reason, "at {now}");
        }
    }

    #[test]
    fn deployments() {
        let deployment = |spec: Value, status: Value| {
            object(
                "apps/v1",
                "Deployment",
                json!({"metadata": {"generation": 1}, "spec": spec, "status": status}),
            )
        };
        let counts = |n: i64| {
            json!({"observedGeneration": 1, "replicas": n, "updatedReplicas": n, "readyReplicas": n,
                   "availableReplicas": n})
        };
        let with_conditions = |n: i64, conditions: Value| {
            let mut status = counts(n);
            status["conditions"] = conditions;
            status
        };
        let healthy = json!([
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            {"type": "Available", "status": "True"}]);
        let rows: Vec<Row> = vec![
            (
                "no status",
                deployment(json!({}), json!(null)),
                Status::InProgress,
                Some((PROGRESS, "LessReplicas")),
            ),
            (
                "all there",
                deployment(json!({"replicas": 3}), with_conditions(3, healthy.clone())),
                Status::Current,
                None,
            ),
            (
                "progress deadline exceeded",
                deployment(
                    json!({"replicas": 3}),
                    with_conditions(
                        1,
                        json!([{"type": "Progressing", "status": "False",
                                "reason": "ProgressDeadlineExceeded"}]),
                    ),
                ),
                Status::Failed,
                Some((STALLED, "ProgressDeadlineExceeded")),
            ),
            (
                "not all updated",
                deployment(
                    json!({"replicas": 3}),
                    json!({"observedGeneration": 1, "replicas": 3, "updatedReplicas": 1}),
                ),
                Status::InProgress,
                Some((PROGRESS, "LessUpdated")),
            ),
            (
                "old replicas still terminating",
                deployment(json!({"replicas": 2}), with_conditions(3, healthy.clone())),
                Status::InProgress,
                Some((PROGRESS, "ExtraPods")),
            ),
            (
                "updated but not available",
                deployment(
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
                           "readyReplicas": 2,
                           "availableReplicas": 1}),
                ),
                Status::InProgress,
                Some((PROGRESS, "LessAvailable")),
            ),
            (
                "not ready",
                deployment(
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
                           "readyReplicas": 1,
                           "availableReplicas": 2}),
                ),
                Status::InProgress,
                Some((PROGRESS, "LessReady")),
            ),
            (
                "deadline set, Progressing not done",
                deployment(
                    json!({"replicas": 1, "progressDeadlineSeconds": 600}),
                    with_conditions(
                        1,
                        json!([{"type": "Progressing", "status": "True",
                                "reason": "ReplicaSetUpdated"},
                               {"type": "Available", "status": "True"}]),
                    ),
                ),
                Status::InProgress,
                Some((PROGRESS, "ReplicaSetNotAvailable")),
            ),
            (
                "no deadline: Progressing not needed",
                deployment(
                    json!({}),
                    with_conditions(1, json!([{"type": "Available", "status": "True"}])),
                ),
                Status::Current,
                None,
            ),
            (
                "not Available",
                deployment(
                    json!({}),
                    with_conditions(1, json!([{"type": "Available", "status": "False"}])),
                ),
                Status::InProgress,
                Some((PROGRESS, "DeploymentNotAvailable")),
            ),
            (
                "extensions group too",
                object("extensions/v1beta1", "Deployment", json!({})),
                Status::InProgress,
                Some((PROGRESS, "LessReplicas")),
            ),
        ];
        check(rows, compute);
    }

    #[test]
    fn stateful_sets() {
        let sts = |spec: Value, status: Value| {
            object("apps/v1", "StatefulSet", json!({"spec": spec, "status": status}))
        };
        let rows: Vec<Row> = vec![
            (
                "no status",
                sts(json!({}), json!(null)),
                Status::InProgress,
                Some((PROGRESS, "LessReplicas")),
            ),
            (
                "OnDelete is left to the user",
                sts(json!({"replicas": 3, "updateStrategy": {"type": "OnDelete"}}), json!(null)),
                Status::Current,
                None,
            ),
            (
                "not ready",
                sts(
                    json!({"replicas": 2}),
                    json!({"replicas": 2, "readyReplicas": 1, "currentReplicas": 2}),
                ),
                Status::InProgress,
                Some((PROGRESS, "LessReady")),
            ),
            (
                "surplus",
                sts(
                    json!({"replicas": 2}),
                    json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 3}),
                ),
                Status::InProgress,
                Some((PROGRESS, "ExtraPods")),
            ),
            (
                "partition not rolled out",
                sts(
                    json!({"replicas": 4, "updateStrategy": {"rollingUpdate": {"partition": 2}}}),
                    json!({"replicas": 4, "readyReplicas": 4, "updatedReplicas": 1}),
                ),
                Status::InProgress,
                Some((PROGRESS, "PartitionRollout")),
            ),
            (
                "partition rolled out",
                sts(
                    json!({"replicas": 4, "updateStrategy": {"rollingUpdate": {"partition": 2}}}),
                    json!({"replicas": 4, "readyReplicas": 4, "updatedReplicas": 2}),
                ),
                Status::Current,
                None,
            ),
            (
                "not current",
                sts(
                    json!({"replicas": 2}),
                    json!({"replicas": 2, "readyReplicas": 2, "currentReplicas": 1}),
                ),
                Status::InProgress,
                Some((PROGRESS, "LessCurrent")),
            ),
            (
                "revisions differ",
                sts(
                    json!({"replicas": 2}),
                    json!({"replicas": 2, "readyReplicas": 2, "currentReplicas": 2,
                           "currentRevision": "web-1", "updateRevision": "web-2"}),
                ),
                Status::InProgress,
                Some((PROGRESS, "RevisionMismatch")),
            ),
            (
                "all good",
                sts(
                    json!({"replicas": 2}),
                    json!({"replicas": 2, "readyReplicas": 2, "currentReplicas": 2,
                           "currentRevision": "web-2", "updateRevision": "web-2"}),
                ),
                Status::Current,
                None,
            ),
        ];
        check(rows, compute);
    }

    #[test]
    fn daemon_sets() {
        let ds = |metadata: Value, status: Value| {
            object("apps/v1", "DaemonSet", json!({"metadata": metadata, "status": status}))
        };
        let observed = |extra: Value| {
            let mut status = json!({"observedGeneration": 1, "desiredNumberScheduled": 3,
                "currentNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 3,
                "numberReady": 3});
            for (key, value) in extra.as_object().expect("map") {
                status[key] = value.clone();
            }
            status
        };
        let one = json!({"generation": 1});
        let rows: Vec<Row> = vec![
            (
                "no generation",
                ds(json!({}), json!({})),
                Status::InProgress,
                Some((PROGRESS, "NoGeneration")),
            ),
            (
                "no observedGeneration",
                ds(one.clone(), json!({})),
                Status::InProgress,
                Some((PROGRESS, "NoObservedGeneration")),
            ),
            (
                "no desired number",
                ds(one.clone(), json!({"observedGeneration": 1})),
                Status::InProgress,
                Some((PROGRESS, "NoDesiredNumber")),
            ),
            (
                "not all scheduled",
                ds(one.clone(), observed(json!({"currentNumberScheduled": 2}))),
                Status::InProgress,
                Some((PROGRESS, "LessCurrent")),
            ),
            (
                "not all updated",
                ds(one.clone(), observed(json!({"updatedNumberScheduled": 2}))),
                Status::InProgress,
                Some((PROGRESS, "LessUpdated")),
            ),
            (
                "not all available",
                ds(one.clone(), observed(json!({"numberAvailable": 2}))),
                Status::InProgress,
                Some((PROGRESS, "LessAvailable")),
            ),
            (
                "not all ready",
                ds(one.clone(), observed(json!({"numberReady": 2}))),
                Status::InProgress,
                Some((PROGRESS, "LessReady")),
            ),
            ("all good", ds(one, observed(json!({}))), Status::Current, None),
        ];
        check(rows, compute);
    }

    #[test]
    fn replica_sets() {
        let rs = |status: Value| {
            object("apps/v1", "ReplicaSet", json!({"spec": {"replicas": 2}, "status": status}))
        };
        let counts = |labelled: i64, available: i64, ready: i64, replicas: i64| {
            json!({"fullyLabeledReplicas": labelled, "availableReplicas": available,
                   "readyReplicas": ready,
                   "replicas": replicas})
        };
        let rows: Vec<Row> = vec![
            (
                "ReplicaFailure",
                rs(json!({"conditions": [{"type": "ReplicaFailure", "status": "True"}]})),
                Status::InProgress,
                Some((PROGRESS, "ReplicaFailure")),
            ),
            (
                "not labelled",
                rs(counts(1, 2, 2, 2)),
                Status::InProgress,
                Some((PROGRESS, "LessLabelled")),
            ),
            (
                "not available",
                rs(counts(2, 1, 2, 2)),
                Status::InProgress,
                Some((PROGRESS, "LessAvailable")),
            ),
            (
                "not ready",
                rs(counts(2, 2, 1, 2)),
                Status::InProgress,
                Some((PROGRESS, "LessReady")),
            ),
            ("surplus", rs(counts(2, 2, 2, 4)), Status::InProgress, Some((PROGRESS, "ExtraPods"))),
            ("all good", rs(counts(2, 2, 2, 2)), Status::Current, None),
        ];
        check(rows, compute);
    }

    #[test]
    fn jobs_and_cron_jobs() {
        let job = |spec: Value, status: Value| {
            object("batch/v1", "Job", json!({"spec": spec, "status": status}))
        };
        let rows: Vec<Row> = vec![
            (
                "not started",
                job(json!({}), json!({})),
                Status::InProgress,
                Some((PROGRESS, "JobNotStarted")),
            ),
            (
                "running",
                job(json!({}), json!({"startTime": "2024-05-01T10:00:00Z", "active": 1})),
                Status::Current,
                None,
            ),
            (
                "complete",
                job(json!({}), json!({"conditions": [{"type": "Complete", "status": "True"}]})),
                Status::Current,
                None,
            ),
            (
                "failed",
                job(
                    json!({}),
                    json!({"conditions": [
                        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}),
                ),
                Status::Failed,
                Some((STALLED, "JobFailed")),
            ),
            (
                "suspended on purpose",
                job(
                    json!({"suspend": true}),
                    json!({"conditions": [{"type": "Suspended", "status": "True"}]}),
                ),
                Status::Current,
                None,
            ),
            (
                "Suspended condition after a resume",
                job(
                    json!({"suspend": false}),
                    json!({"conditions": [{"type": "Suspended", "status": "True"}]}),
                ),
                Status::InProgress,
                Some((PROGRESS, "JobNotStarted")),
            ),
            (
                "CronJob",
                object("batch/v1", "CronJob", json!({"spec": {"schedule": "@daily"}})),
                Status::Current,
                None,
            ),
        ];
        check(rows, compute);
    }

    #[test]
    fn other_built_in_kinds() {
        let rows: Vec<Row> = vec![
            ("Secret", object("v1", "Secret", json!({"data": {}})), Status::Current, None),
            ("ConfigMap", object("v1", "ConfigMap", json!({"data": {}})), Status::Current, None),
            (
                "PodDisruptionBudget observed",
                object(
                    "policy/v1",
                    "PodDisruptionBudget",
                    json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 2}}),
                ),
                Status::Current,
                None,
            ),
            (
                "ClusterIP Service",
                object("v1", "Service", json!({"spec": {"clusterIP": "10.0.0.1"}})),
                Status::Current,
                None,
            ),
            (
                "LoadBalancer without a cluster IP",
                object("v1", "Service", json!({"spec": {"type": "LoadBalancer"}})),
                Status::InProgress,
                Some((PROGRESS, "NoIPAssigned")),
            ),
            (
                "LoadBalancer with a cluster IP",
                object(
                    "v1",
                    "Service",
                    json!({"spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.2"}}),
                ),
                Status::Current,
                None,
            ),
            (
                "PersistentVolumeClaim pending",
                object("v1", "PersistentVolumeClaim", json!({"status": {"phase": "Pending"}})),
                Status::InProgress,
                Some((PROGRESS, "NotBound")),
            ),
            (
                "PersistentVolumeClaim bound",
                object("v1", "PersistentVolumeClaim", json!({"status": {"phase": "Bound"}})),
                Status::Current,
                None,
            ),
            (
                "a kind of the same name in another group has no rule",
                object("example.io/v1", "Service", json!({"spec": {"type": "LoadBalancer"}})),
                Status::Current,
                None,
            ),
        ];
        check(rows, compute);
    }

    #[test]
    fn custom_resource_definitions() {
        let crd = |conditions: Value| {
            object(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                json!({"status": {"conditions": conditions}}),
            )
        };
        let rows: Vec<Row> = vec![
            ("no conditions", crd(json!([])), Status::InProgress, Some((PROGRESS, "Installing"))),
            (
                "installing",
                crd(json!([{"type": "Established", "status": "False", "reason": "Installing"}])),
                Status::InProgress,
                Some((PROGRESS, "Installing")),
            ),
            (
                "names refused",
                crd(
                    json!([{"type": "NamesAccepted", "status": "False", "reason": "NameConflict"}]),
                ),
                Status::Failed,
                Some((STALLED, "NameConflict")),
            ),
            (
                "not established for another reason",
                crd(json!([{"type": "Established", "status": "False", "reason": "Broken"}])),
                Status::Failed,
                Some((STALLED, "Broken")),
            ),
            (
                "established",
                crd(json!([{"type": "NamesAccepted", "status": "True"},
                           {"type": "Established", "status": "True"}])),
                Status::Current,
                None,
            ),
        ];
        check(rows, compute);
    }

    #[test]
    fn health_mapping() {
        let deleting = json!({"deletionTimestamp": "2024-05-01T10:00:00Z"});
        let rows: Vec<(&str, Value, HealthState)> = vec![
            ("Current is Healthy", object("v1", "ConfigMap", json!({})), HealthState::Healthy),
            (
                "InProgress is Progressing",
                object("batch/v1", "Job", json!({})),
                HealthState::Progressing,
            ),
            (
                "Terminating is Progressing",
                object("v1", "ConfigMap", json!({"metadata": deleting.clone()})),
                HealthState::Progressing,
            ),
            (
                "Failed is Degraded",
                object(
                    "v1",
                    "Pod",
                    json!({"status": {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}),
                ),
                HealthState::Degraded,
            ),
            (
                "Unknown is Unknown",
                object("v1", "Pod", json!({"status": {"phase": "Odd"}})),
                HealthState::Unknown,
            ),
            (
                "suspended CronJob",
                object("batch/v1", "CronJob", json!({"spec": {"suspend": true}})),
                HealthState::Suspended,
            ),
            (
                "suspended Job, even while kstatus says InProgress",
                object("batch/v1", "Job", json!({"spec": {"suspend": true}})),
                HealthState::Suspended,
            ),
            (
                "paused Deployment",
                object("apps/v1", "Deployment", json!({"spec": {"paused": true}})),
                HealthState::Suspended,
            ),
            (
                "resumed CronJob is not suspended",
                object("batch/v1", "CronJob", json!({"spec": {"suspend": false}})),
                HealthState::Healthy,
            ),
            (
                "spec.paused means nothing on a Job",
                object(
                    "batch/v1",
                    "Job",
                    json!({"spec": {"paused": true},
                           "status": {"startTime": "2024-05-01T10:00:00Z"}}),
                ),
                HealthState::Healthy,
            ),
            (
                "a suspended workload being deleted is Progressing",
                object(
                    "batch/v1",
                    "CronJob",
                    json!({"metadata": deleting, "spec": {"suspend": true}}),
                ),
                HealthState::Progressing,
            ),
        ];
        for (name, input, expected) in rows {
            let (state, message) = health(&input);
            assert_eq!(state, expected, "{name}: {message}");
            assert!(!message.is_empty(), "{name}");
        }
        let (_, message) =
            health(&object("apps/v1", "Deployment", json!({"spec": {"paused": true}})));
        assert!(message.contains("paused"), "{message}");
    }

    #[test]
    fn health_at_uses_the_clock() {
        let pod = object(
            "v1",
            "Pod",
            json!({"metadata": {"creationTimestamp": "2024-05-01T10:00:00Z"},
                   "status": {"phase": "Pending", "conditions": [
                       {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}),
        );
        assert_eq!(health(&pod).0, HealthState::Progressing);
        assert_eq!(health_at(&pod, &at("2024-05-01T10:00:05Z")).0, HealthState::Progressing);
        assert_eq!(health_at(&pod, &at("2024-05-01T10:05:00Z")).0, HealthState::Degraded);
    }

    #[test]
    fn status_spellings() {
        let all = [
            (Status::InProgress, "InProgress"),
            (Status::Failed, "Failed"),
            (Status::Current, "Current"),
            (Status::Terminating, "Terminating"),
            (Status::Unknown, "Unknown"),
        ];
        for (status, spelling) in all {
            assert_eq!(status.as_str(), spelling);
            assert_eq!(status.to_string(), spelling);
        }
    }
}
