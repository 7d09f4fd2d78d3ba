//! The kubelet's decision for one bound pod: the next `PodStatus` and the Events it records, from
//! the pod, the Secrets and ConfigMaps that exist, and the time each container entered its current
//! state. Pure; see the module documentation of [`super`] for the conventions.
//!
//! Behaviour follows <https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/> (phases,
//! container states, conditions, restart back-off) and the kubelet's event wording
//! (`pkg/kubelet/events`).

use super::events::{EventSpec, EventType, reference};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The env var a container sets to choose a simulated behaviour (see [`super`]).
pub const BEHAVIOUR_ENV: &str = "KSYNC_SIMULATE";
/// The env var with the exit code of a `crash` container (default 1).
pub const EXIT_CODE_ENV: &str = "KSYNC_SIMULATE_EXIT_CODE";
/// Env var: what a crashing container writes to its termination log, which the kubelet copies
/// into `state.terminated.message` (as a program that prints its error there would).
pub const TERMINATION_MESSAGE_ENV: &str = "KSYNC_SIMULATE_TERMINATION_MESSAGE";
/// Images whose registry host ends with this top-level domain cannot be pulled (RFC 2606).
pub const UNREACHABLE_TLD: &str = ".invalid";

/// Simulated durations (compressed; messages still state the real back-off).
#[derive(Debug, Clone)]
pub struct Timing {
    /// How long a container that exits (a Job's, or a `crash` one) runs first.
    pub run: Duration,
    /// What stands for the kubelet's first 10 s restart back-off: a crashed container waits this
    /// long in `CrashLoopBackOff`, doubling with each restart up to 30 times it (the 5 min cap).
    pub restart_backoff: Duration,
    /// How long `ErrImagePull` shows before `ImagePullBackOff`.
    pub image_backoff: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            run: Duration::from_millis(1000),
            restart_backoff: Duration::from_millis(1000),
            image_backoff: Duration::from_millis(1000),
        }
    }
}

/// The Secrets and ConfigMaps that exist: (namespace, name) -> keys.
#[derive(Debug, Clone, Default)]
pub struct WorldView {
    pub secrets: BTreeMap<(String, String), BTreeSet<String>>,
    pub config_maps: BTreeMap<(String, String), BTreeSet<String>>,
}

/// Everything besides the pod that the kubelet's decision depends on.
#[derive(Debug, Clone)]
pub struct PodContext<'a> {
    pub node_name: &'a str,
    pub host_ip: &'a str,
    /// The IP the pod gets (kept once assigned).
    pub pod_ip: &'a str,
    pub world: &'a WorldView,
    pub now: Timestamp,
    /// Container name -> when it entered the state its current status shows.
    pub entered: &'a BTreeMap<String, Timestamp>,
    pub timing: &'a Timing,
}

/// The kubelet's output for one pod.
#[derive(Debug, Clone)]
pub struct PodOutcome {
    pub status: PodStatus,
    pub events: Vec<EventSpec>,
}

/// A container's simulated behaviour, read from its `KSYNC_SIMULATE` env var.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Runs (forever under `restartPolicy: Always`, else exits 0 after [`Timing::run`]).
    Normal,
    /// Exits with a non-zero code after [`Timing::run`].
    Crash(i32),
    /// Runs, but its readiness probe fails.
    Unready,
}

pub fn behaviour(c: &Container) -> Behaviour {
    let env = |k: &str| c.env.iter().flatten().find(|e| e.name == k).and_then(|e| e.value.clone());
    match env(BEHAVIOUR_ENV).as_deref() {
        Some("crash") | Some("fail") => Behaviour::Crash(
            env(EXIT_CODE_ENV).and_then(|v| v.parse().ok()).filter(|c| *c != 0).unwrap_or(1),
        ),
        Some("unready") => Behaviour::Unready,
        _ => Behaviour::Normal,
    }
}

/// The container's `KSYNC_SIMULATE_TERMINATION_MESSAGE`, when it sets one.
fn termination_message(c: &Container) -> Option<String> {
    c.env.iter().flatten().find(|e| e.name == TERMINATION_MESSAGE_ENV).and_then(|e| e.value.clone())
}

/// `docker.io/library/nginx:latest` for `nginx`, like the container runtime reports it.
pub fn normalize_image(image: &str) -> String {
    let (first, rest) = image.split_once('/').unwrap_or(("", image));
    let has_host =
        !first.is_empty() && (first.contains('.') || first.contains(':') || first == "localhost");
    let full = if has_host {
        image.to_string()
    } else if first.is_empty() {
        format!("docker.io/library/{image}")
    } else {
        format!("docker.io/{first}/{rest}")
    };
    let last = full.rsplit('/').next().unwrap_or_default();
    if last.contains(':') || full.contains('@') { full } else { format!("{full}:latest") }
}

/// The registry host of an image reference, when it names one.
pub fn registry_host(image: &str) -> Option<&str> {
    let (first, _) = image.split_once('/')?;
    (first.contains('.') || first.contains(':') || first == "localhost").then_some(first)
}

/// Whether pulling `image` fails (its registry host is under `.invalid`).
pub fn unreachable(image: &str) -> bool {
    registry_host(image).is_some_and(|h| {
        let host = h.split(':').next().unwrap_or(h);
        host.ends_with(UNREACHABLE_TLD)
    })
}

/// The error the container runtime (containerd) returns for an unreachable registry.
pub fn pull_error(image: &str) -> String {
    let full = normalize_image(image);
    let host = registry_host(&full).unwrap_or("docker.io");
    let path = &full[host.len() + 1..];
    let (repo, reference) = match path.rsplit_once('@') {
        Some((r, d)) => (r, d),
        None => path.rsplit_once(':').unwrap_or((path, "latest")),
    };
    let bare = host.split(':').next().unwrap_or(host);
    format!(
        "rpc error: code = Unknown desc = failed to pull and unpack image \"{full}\": failed to resolve reference \"{full}\": failed to do request: Head \"https://{host}/v2/{repo}/manifests/{reference}\": dial tcp: lookup {bare}: no such host"
    )
}

fn fnv64(seed: u64, s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// 64 hex digits derived from `s` (container and image IDs).
pub fn hex64(s: &str) -> String {
    (0..4u64).map(|i| format!("{:016x}", fnv64(i, s))).collect()
}

/// The first env var, envFrom source or key a container references that is missing, worded as
/// the kubelet words `CreateContainerConfigError` (`secret "db" not found`).
pub fn config_error(c: &Container, ns: &str, world: &WorldView) -> Option<String> {
    let key = |n: &str| (ns.to_string(), n.to_string());
    // envFrom is expanded before env (kubelet makeEnvironmentVariables).
    for ef in c.env_from.iter().flatten() {
        if let Some(r) = &ef.config_map_ref
            && r.optional != Some(true)
            && !world.config_maps.contains_key(&key(&r.name))
        {
            return Some(format!("configmap \"{}\" not found", r.name));
        }
        if let Some(r) = &ef.secret_ref
            && r.optional != Some(true)
            && !world.secrets.contains_key(&key(&r.name))
        {
            return Some(format!("secret \"{}\" not found", r.name));
        }
    }
    for e in c.env.iter().flatten() {
        let Some(vf) = &e.value_from else { continue };
        if let Some(r) = &vf.config_map_key_ref
            && r.optional != Some(true)
        {
            match world.config_maps.get(&key(&r.name)) {
                None => return Some(format!("configmap \"{}\" not found", r.name)),
                Some(keys) if !keys.contains(&r.key) => {
                    return Some(format!(
                        "couldn't find key {} in ConfigMap {ns}/{}",
                        r.key, r.name
                    ));
                }
                _ => {}
            }
        }
        if let Some(r) = &vf.secret_key_ref
            && r.optional != Some(true)
        {
            match world.secrets.get(&key(&r.name)) {
                None => return Some(format!("secret \"{}\" not found", r.name)),
                Some(keys) if !keys.contains(&r.key) => {
                    return Some(format!("couldn't find key {} in Secret {ns}/{}", r.key, r.name));
                }
                _ => {}
            }
        }
    }
    None
}

/// The first Secret or ConfigMap volume whose source is missing: (volume, error).
pub fn mount_error(pod: &Pod, world: &WorldView) -> Option<(String, String)> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let key = |n: &str| (ns.clone(), n.to_string());
    for v in pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
        if let Some(s) = &v.secret
            && s.optional != Some(true)
            && let Some(n) = &s.secret_name
            && !world.secrets.contains_key(&key(n))
        {
            return Some((v.name.clone(), format!("secret \"{n}\" not found")));
        }
        if let Some(c) = &v.config_map
            && c.optional != Some(true)
            && !world.config_maps.contains_key(&key(&c.name))
        {
            return Some((v.name.clone(), format!("configmap \"{}\" not found", c.name)));
        }
        for p in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(s) = &p.secret
                && s.optional != Some(true)
                && !world.secrets.contains_key(&key(&s.name))
            {
                return Some((v.name.clone(), format!("secret \"{}\" not found", s.name)));
            }
            if let Some(c) = &p.config_map
                && c.optional != Some(true)
                && !world.config_maps.contains_key(&key(&c.name))
            {
                return Some((v.name.clone(), format!("configmap \"{}\" not found", c.name)));
            }
        }
    }
    None
}

/// The QoS class (<https://kubernetes.io/docs/concepts/workloads/pods/pod-qos/>).
pub fn qos_class(pod: &Pod) -> &'static str {
    let Some(spec) = &pod.spec else { return "BestEffort" };
    let all: Vec<&Container> =
        spec.containers.iter().chain(spec.init_containers.iter().flatten()).collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &all {
        let r = c.resources.clone().unwrap_or_default();
        let req = r.requests.unwrap_or_default();
        let lim = r.limits.unwrap_or_default();
        any |= !req.is_empty() || !lim.is_empty();
        for k in ["cpu", "memory"] {
            match (req.get(k), lim.get(k)) {
                (_, None) => guaranteed = false,
                (Some(a), Some(b)) if a != b => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// `name_namespace(uid)`, how the kubelet names a pod in messages.
fn pod_desc(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

fn waiting(reason: &str, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting { reason: Some(reason.into()), message }),
        ..Default::default()
    }
}

fn state_reason(s: Option<&ContainerState>) -> Option<&str> {
    s.and_then(|s| s.waiting.as_ref()).and_then(|w| w.reason.as_deref())
}

/// The condition `type_` with `lastTransitionTime` kept while its status does not change.
pub fn pod_condition(
    prev: &[PodCondition],
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: Timestamp,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let since = prev
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.map(str::to_string),
        message,
        last_transition_time: Some(since),
        last_probe_time: None,
        ..Default::default()
    }
}

/// Status of a pod the scheduler could not place (`PodScheduled=False`, `Unschedulable`).
pub fn unschedulable_status(pod: &Pod, message: &str, now: Timestamp) -> PodStatus {
    let prev = pod.status.clone().unwrap_or_default();
    let conds = prev.conditions.clone().unwrap_or_default();
    PodStatus {
        phase: Some("Pending".into()),
        conditions: Some(vec![pod_condition(
            &conds,
            "PodScheduled",
            false,
            Some("Unschedulable"),
            Some(message.to_string()),
            now,
        )]),
        qos_class: Some(qos_class(pod).into()),
        ..Default::default()
    }
}

fn millis_since(t: Option<&Timestamp>, now: Timestamp) -> i64 {
    t.map(|t| now.as_millisecond() - t.as_millisecond()).unwrap_or(0)
}

/// The kubelet's next status for a pod bound to this node.
pub fn pod_status(pod: &Pod, cx: &PodContext<'_>) -> PodOutcome {
    let now = cx.now;
    let spec = pod.spec.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let prev = pod.status.clone().unwrap_or_default();
    let prev_conds = prev.conditions.clone().unwrap_or_default();
    let prev_cs = prev.container_statuses.clone().unwrap_or_default();
    let restart_policy = spec.restart_policy.clone().unwrap_or_else(|| "Always".into());
    let host = Some(cx.node_name);
    let mut events = vec![];
    let ev = |field: Option<String>, t: EventType, reason: &str, msg: String| {
        EventSpec::new(reference(pod, field), t, reason, msg, "kubelet").on_host(host)
    };
    let ever_started = prev_cs.iter().any(|c| {
        c.restart_count > 0
            || c.last_state.as_ref().is_some_and(|s| s.terminated.is_some())
            || c.state.as_ref().is_some_and(|s| s.running.is_some() || s.terminated.is_some())
    });
    // Volumes are set up before the pod sandbox exists; a missing source keeps it there.
    let mount = if ever_started { None } else { mount_error(pod, cx.world) };
    if let Some((vol, err)) = &mount {
        events.push(
            ev(
                None,
                EventType::Warning,
                "FailedMount",
                format!("MountVolume.SetUp failed for volume \"{vol}\" : {err}"),
            )
            // Retried on every sync while the source is missing.
            .throttled(),
        );
    }
    let sandbox_ready = mount.is_none();
    let mut statuses = vec![];
    for c in &spec.containers {
        let field = Some(format!("spec.containers{{{}}}", c.name));
        let image_ref = c.image.clone().unwrap_or_default();
        let p = prev_cs.iter().find(|s| s.name == c.name);
        let image = normalize_image(&image_ref);
        let image_id = format!(
            "{}@sha256:{}",
            image.rsplit_once(':').map(|(r, _)| r).unwrap_or(&image),
            hex64(&image)
        );
        let mut st = ContainerStatus {
            name: c.name.clone(),
            image: image.clone(),
            image_id: String::new(),
            ready: false,
            started: Some(false),
            restart_count: p.map(|p| p.restart_count).unwrap_or(0),
            last_state: Some(p.and_then(|p| p.last_state.clone()).unwrap_or_default()),
            container_id: p.and_then(|p| p.container_id.clone()),
            ..Default::default()
        };
        let since = millis_since(cx.entered.get(&c.name), now);
        let prev_state = p.and_then(|p| p.state.as_ref());
        let prev_reason = state_reason(prev_state);
        let beh = behaviour(c);
        let start = |st: &mut ContainerStatus, events: &mut Vec<EventSpec>, restart: bool| {
            if restart {
                st.restart_count += 1;
            }
            st.container_id = Some(format!(
                "containerd://{}",
                hex64(&format!("{}/{}/{}", pod_desc(pod), c.name, st.restart_count))
            ));
            st.state = Some(ContainerState {
                running: Some(ContainerStateRunning { started_at: Some(Time(now)) }),
                ..Default::default()
            });
            st.started = Some(true);
            st.ready = beh != Behaviour::Unready;
            if c.image_pull_policy.as_deref() == Some("Always") && !restart {
                events.push(ev(
                    field.clone(),
                    EventType::Normal,
                    "Pulling",
                    format!("Pulling image \"{}\"", image_ref),
                ));
                events.push(ev(
                    field.clone(),
                    EventType::Normal,
                    "Pulled",
                    format!("Successfully pulled image \"{}\" in 0s (0s including waiting). Image size: 0 bytes.", image_ref),
                ));
            } else {
                events.push(ev(
                    field.clone(),
                    EventType::Normal,
                    "Pulled",
                    format!("Container image \"{}\" already present on machine", image_ref),
                ));
            }
            events.push(ev(
                field.clone(),
                EventType::Normal,
                "Created",
                format!("Created container: {}", c.name),
            ));
            events.push(ev(
                field.clone(),
                EventType::Normal,
                "Started",
                format!("Started container {}", c.name),
            ));
            if beh == Behaviour::Unready {
                events.push(ev(
                    field.clone(),
                    EventType::Warning,
                    "Unhealthy",
                    readiness_failure(c, cx.pod_ip),
                ));
            }
        };
        if !sandbox_ready {
            st.state = Some(waiting("ContainerCreating", None));
        } else if let Some(run) = prev_state.and_then(|s| s.running.as_ref()) {
            st.image_id = image_id.clone();
            st.state = prev_state.cloned();
            st.started = Some(true);
            st.ready = beh != Behaviour::Unready;
            if beh == Behaviour::Unready {
                // The probe keeps failing every period.
                events.push(
                    ev(
                        field.clone(),
                        EventType::Warning,
                        "Unhealthy",
                        readiness_failure(c, cx.pod_ip),
                    )
                    .throttled(),
                );
            }
            let exits = matches!(beh, Behaviour::Crash(_)) || restart_policy != "Always";
            if exits && since >= cx.timing.run.as_millis() as i64 {
                let code = if let Behaviour::Crash(code) = beh { code } else { 0 };
                let term = ContainerStateTerminated {
                    exit_code: code,
                    reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
                    message: termination_message(c),
                    started_at: run.started_at.clone(),
                    finished_at: Some(Time(now)),
                    container_id: st.container_id.clone(),
                    ..Default::default()
                };
                let restarts = match restart_policy.as_str() {
                    "Always" => true,
                    "OnFailure" => code != 0,
                    _ => false,
                };
                st.ready = false;
                st.started = Some(false);
                if restarts {
                    // Back-off doubles from 10s up to five minutes
                    // (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#container-restarts).
                    let secs = 10u64.saturating_mul(1u64 << st.restart_count.clamp(0, 5)).min(300);
                    let secs = if secs >= 300 {
                        "5m0s".to_string()
                    } else if secs >= 60 {
                        format!("{}m{}s", secs / 60, secs % 60)
                    } else {
                        format!("{secs}s")
                    };
                    st.last_state =
                        Some(ContainerState { terminated: Some(term), ..Default::default() });
                    st.state = Some(waiting(
                        "CrashLoopBackOff",
                        Some(format!(
                            "back-off {secs} restarting failed container={} pod={}",
                            c.name,
                            pod_desc(pod)
                        )),
                    ));
                    events.push(ev(
                        field.clone(),
                        EventType::Warning,
                        "BackOff",
                        format!(
                            "Back-off restarting failed container {} in pod {}",
                            c.name,
                            pod_desc(pod)
                        ),
                    ));
                } else {
                    st.state =
                        Some(ContainerState { terminated: Some(term), ..Default::default() });
                }
            }
        } else if prev_state.is_some_and(|s| s.terminated.is_some()) {
            st.image_id = image_id.clone();
            st.state = prev_state.cloned();
        } else if unreachable(&image_ref) {
            let err = pull_error(&image_ref);
            match prev_reason {
                Some("ErrImagePull") if since >= cx.timing.image_backoff.as_millis() as i64 => {
                    st.state = Some(waiting(
                        "ImagePullBackOff",
                        Some(format!(
                            "Back-off pulling image \"{}\": ErrImagePull: {err}",
                            image_ref
                        )),
                    ));
                    events.push(ev(
                        field.clone(),
                        EventType::Normal,
                        "BackOff",
                        format!("Back-off pulling image \"{}\"", image_ref),
                    ));
                    events.push(ev(
                        field.clone(),
                        EventType::Warning,
                        "Failed",
                        "Error: ImagePullBackOff".into(),
                    ));
                }
                Some("ErrImagePull") => st.state = prev_state.cloned(),
                Some("ImagePullBackOff") => {
                    st.state = prev_state.cloned();
                    events.push(
                        ev(
                            field.clone(),
                            EventType::Normal,
                            "BackOff",
                            format!("Back-off pulling image \"{image_ref}\""),
                        )
                        .throttled(),
                    );
                }
                _ => {
                    st.state = Some(waiting("ErrImagePull", Some(err.clone())));
                    events.push(ev(
                        field.clone(),
                        EventType::Normal,
                        "Pulling",
                        format!("Pulling image \"{}\"", image_ref),
                    ));
                    events.push(ev(
                        field.clone(),
                        EventType::Warning,
                        "Failed",
                        format!("Failed to pull image \"{}\": {err}", image_ref),
                    ));
                    events.push(ev(
                        field.clone(),
                        EventType::Warning,
                        "Failed",
                        "Error: ErrImagePull".into(),
                    ));
                }
            }
        } else if prev_reason == Some("CrashLoopBackOff") {
            st.image_id = image_id.clone();
            // The kubelet's back-off (10s doubling to 5m) scaled to `restart_backoff` per 10s.
            let unit = cx.timing.restart_backoff.as_millis() as i64;
            let wait = (unit << st.restart_count.clamp(0, 5)).min(unit * 30);
            if since >= wait {
                if let Some(err) = config_error(c, &ns, cx.world) {
                    st.state = Some(waiting("CreateContainerConfigError", Some(err.clone())));
                    events.push(ev(
                        field.clone(),
                        EventType::Warning,
                        "Failed",
                        format!("Error: {err}"),
                    ));
                } else {
                    start(&mut st, &mut events, true);
                }
            } else {
                st.state = prev_state.cloned();
            }
        } else if let Some(err) = config_error(c, &ns, cx.world) {
            st.image_id = image_id.clone();
            st.state = Some(waiting("CreateContainerConfigError", Some(err.clone())));
            // Reported on every sync while it lasts.
            events.push(
                ev(field.clone(), EventType::Warning, "Failed", format!("Error: {err}"))
                    .throttled(),
            );
        } else {
            st.image_id = image_id.clone();
            let restart = st.last_state.as_ref().is_some_and(|s| s.terminated.is_some());
            start(&mut st, &mut events, restart);
        }
        statuses.push(st);
    }

    let never_started = |s: &ContainerStatus| {
        s.restart_count == 0
            && s.last_state.as_ref().is_none_or(|l| l.terminated.is_none())
            && s.state.as_ref().is_some_and(|st| st.waiting.is_some())
    };
    let terminated: Vec<i32> = statuses
        .iter()
        .filter_map(|s| s.state.as_ref().and_then(|st| st.terminated.as_ref()).map(|t| t.exit_code))
        .collect();
    let phase = if !statuses.is_empty() && terminated.len() == statuses.len() {
        if terminated.iter().all(|c| *c == 0) { "Succeeded" } else { "Failed" }
    } else if statuses.iter().any(never_started) {
        "Pending"
    } else {
        "Running"
    };
    let terminal = matches!(phase, "Succeeded" | "Failed");
    let unready: Vec<&str> =
        statuses.iter().filter(|s| !s.ready).map(|s| s.name.as_str()).collect();
    let all_ready = unready.is_empty();
    let (reason, message) = if terminal {
        (Some("PodCompleted"), None)
    } else if all_ready {
        (None, None)
    } else {
        (
            Some("ContainersNotReady"),
            Some(format!("containers with unready status: [{}]", unready.join(" "))),
        )
    };
    let init_done = true;
    let conditions = vec![
        pod_condition(
            &prev_conds,
            "PodReadyToStartContainers",
            sandbox_ready && !terminal,
            None,
            None,
            now,
        ),
        pod_condition(&prev_conds, "Initialized", init_done, None, None, now),
        pod_condition(&prev_conds, "Ready", all_ready && !terminal, reason, message.clone(), now),
        pod_condition(&prev_conds, "ContainersReady", all_ready && !terminal, reason, message, now),
        pod_condition(&prev_conds, "PodScheduled", true, None, None, now),
    ];
    let init_statuses = spec.init_containers.as_ref().filter(|v| !v.is_empty()).map(|ics| {
        ics.iter()
            .map(|c| (c, c.image.clone().unwrap_or_default()))
            .map(|(c, image_ref)| ContainerStatus {
                name: c.name.clone(),
                image: normalize_image(&image_ref),
                image_id: format!("{}@sha256:{}", normalize_image(&image_ref), hex64(&image_ref)),
                ready: sandbox_ready,
                started: Some(false),
                restart_count: 0,
                container_id: sandbox_ready.then(|| {
                    format!("containerd://{}", hex64(&format!("{}/{}", pod_desc(pod), c.name)))
                }),
                state: Some(if sandbox_ready {
                    ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: 0,
                            reason: Some("Completed".into()),
                            started_at: prev.start_time.clone().or(Some(Time(now))),
                            finished_at: prev.start_time.clone().or(Some(Time(now))),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }
                } else {
                    waiting("PodInitializing", None)
                }),
                last_state: Some(ContainerState::default()),
                ..Default::default()
            })
            .collect()
    });
    let status = PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        host_ip: Some(cx.host_ip.into()),
        host_ips: Some(vec![HostIP { ip: cx.host_ip.into() }]),
        pod_ip: sandbox_ready.then(|| cx.pod_ip.to_string()),
        pod_ips: sandbox_ready.then(|| vec![PodIP { ip: cx.pod_ip.into() }]),
        start_time: prev.start_time.clone().or(Some(Time(now))),
        container_statuses: Some(statuses),
        init_container_statuses: init_statuses,
        qos_class: Some(qos_class(pod).into()),
        ..Default::default()
    };
    PodOutcome { status, events }
}

/// The `Unhealthy` event message for a failing readiness probe, by probe kind.
pub fn readiness_failure(c: &Container, pod_ip: &str) -> String {
    let probe = c.readiness_probe.as_ref();
    let port = |p: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString| match p {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => i.to_string(),
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.clone(),
    };
    if let Some(t) = probe.and_then(|p| p.tcp_socket.as_ref()) {
        format!(
            "Readiness probe failed: dial tcp {pod_ip}:{}: connect: connection refused",
            port(&t.port)
        )
    } else if probe.is_some_and(|p| p.exec.is_some()) {
        "Readiness probe failed: ".to_string()
    } else {
        "Readiness probe failed: HTTP probe failed with statuscode: 503".to_string()
    }
}
