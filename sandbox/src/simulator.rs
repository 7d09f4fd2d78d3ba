//! `--simulate-workloads`: a kwok-like stand-in for the controllers, the scheduler and the
//! kubelet, so health and diagnosis can be exercised without a cluster. Statuses, conditions,
//! reasons and event wording follow what the real components write
//! (<https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/>,
//! <https://kubernetes.io/docs/concepts/workloads/controllers/deployment/#deployment-status>).
//!
//! Conventions that stand in for real failures:
//! - images from the registry host `unreachable.invalid` fail to pull: `ErrImagePull`, then
//!   `ImagePullBackOff`;
//! - an image tagged `crashloop` (e.g. `app:crashloop`) exits 1 at start: `CrashLoopBackOff`;
//! - an image tagged `unready` runs but its readiness probe fails (Ready=False);
//! - in Jobs, an image tagged `fail` exits 1 (the Job fails once `backoffLimit` is reached);
//!   other Job pods succeed;
//! - pods whose requests exceed the node's allocatable stay Pending (`Unschedulable`);
//! - a missing Secret or ConfigMap referenced by env, envFrom or a volume (not optional)
//!   gives `CreateContainerConfigError` until it appears;
//! - PersistentVolumeClaims stay Pending (there is no StorageClass).

use crate::resources::ResourceInfo;
use crate::store::{self, Store};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

pub const UNREACHABLE_REGISTRY: &str = "unreachable.invalid";
pub const NODE_NAME: &str = "sandbox-node-1";

struct Sim {
    store: Arc<Store>,
    ris: HashMap<&'static str, ResourceInfo>,
    /// Pods that already had their first pull failure (ErrImagePull before ImagePullBackOff).
    pull_failed: std::collections::HashSet<String>,
    /// Events already recorded (dedup key).
    events: std::collections::HashSet<String>,
}

fn hash_name(s: &str) -> String {
    // FNV-1a over the template, rendered with the alphabet kube uses for generated names.
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    (0..10)
        .map(|i| ALPHA[((h >> (i * 6)) % ALPHA.len() as u64) as usize] as char)
        .collect()
}

fn quantity_milli(q: &Value) -> i64 {
    let s = match q {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return 0,
    };
    let (num, mult): (&str, f64) = if let Some(n) = s.strip_suffix('m') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("Ki") {
        (n, 1024.0 * 1000.0)
    } else if let Some(n) = s.strip_suffix("Mi") {
        (n, 1024.0 * 1024.0 * 1000.0)
    } else if let Some(n) = s.strip_suffix("Gi") {
        (n, 1024.0 * 1024.0 * 1024.0 * 1000.0)
    } else if let Some(n) = s.strip_suffix('k') {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix('M') {
        (n, 1e9)
    } else if let Some(n) = s.strip_suffix('G') {
        (n, 1e12)
    } else {
        (s.as_str(), 1000.0)
    };
    (num.parse::<f64>().unwrap_or(0.0) * mult) as i64
}

fn image_tag(image: &str) -> &str {
    let last = image.rsplit('/').next().unwrap_or(image);
    last.split_once(':').map(|(_, t)| t).unwrap_or("latest")
}

fn image_host(image: &str) -> &str {
    match image.split_once('/') {
        Some((h, _)) if h.contains('.') || h.contains(':') || h == "localhost" => h,
        _ => "docker.io",
    }
}

fn s<'a>(o: &'a Value, p: &str) -> &'a str {
    o.pointer(p).and_then(Value::as_str).unwrap_or_default()
}

impl Sim {
    fn ri(&self, k: &str) -> &ResourceInfo {
        &self.ris[k]
    }

    fn list(&self, k: &str) -> Vec<Arc<Value>> {
        self.store.list_all(&self.ri(k).store_key(), None)
    }

    fn event(
        &mut self,
        obj: &Value,
        kind: &str,
        etype: &str,
        reason: &str,
        message: &str,
        component: &str,
    ) {
        let key = format!(
            "{}/{}/{}/{reason}/{message}",
            kind,
            s(obj, "/metadata/namespace"),
            s(obj, "/metadata/name")
        );
        if !self.events.insert(key) {
            return;
        }
        let ns = s(obj, "/metadata/namespace").to_string();
        let ns = if ns.is_empty() {
            "default".to_string()
        } else {
            ns
        };
        let now = store::now();
        let ev = json!({
            "metadata": {"generateName": format!("{}.", s(obj, "/metadata/name"))},
            "involvedObject": {"kind": kind, "namespace": s(obj, "/metadata/namespace"), "name": s(obj, "/metadata/name"), "uid": s(obj, "/metadata/uid"), "apiVersion": s(obj, "/apiVersion"), "resourceVersion": s(obj, "/metadata/resourceVersion")},
            "reason": reason,
            "message": message,
            "source": {"component": component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": etype,
            "reportingComponent": component,
            "reportingInstance": "",
        });
        let ri = self.ri("events").clone();
        let _ = self.store.create(&ri, &ns, ev, component);
    }

    fn ensure_node(&mut self) {
        let ri = self.ri("nodes").clone();
        if self.store.get(&ri, "", NODE_NAME).is_ok() {
            return;
        }
        let now = store::now();
        let node = json!({
            "metadata": {"name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok"}},
            "spec": {},
            "status": {
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100Gi"},
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100Gi"},
                "conditions": [
                    {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": "kubelet has sufficient memory available", "lastHeartbeatTime": now, "lastTransitionTime": now},
                    {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure", "message": "kubelet has no disk pressure", "lastHeartbeatTime": now, "lastTransitionTime": now},
                    {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID", "message": "kubelet has sufficient PID available", "lastHeartbeatTime": now, "lastTransitionTime": now},
                    {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now}
                ],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.10"}, {"type": "Hostname", "address": NODE_NAME}],
                "nodeInfo": {"kubeletVersion": "v1.33.0", "kubeProxyVersion": "v1.33.0", "containerRuntimeVersion": "containerd://1.7.24", "operatingSystem": "linux", "architecture": "amd64", "osImage": "kwok", "kernelVersion": "6.1.0", "machineID": "", "systemUUID": "", "bootID": ""},
            }
        });
        let _ = self.store.create(&ri, "", node, "kubelet");
    }

    fn owner_ref(owner: &Value, kind: &str, api_version: &str) -> Value {
        json!({"apiVersion": api_version, "kind": kind, "name": s(owner, "/metadata/name"), "uid": s(owner, "/metadata/uid"), "controller": true, "blockOwnerDeletion": true})
    }

    fn owned_by<'a>(objs: &'a [Arc<Value>], owner: &Value) -> Vec<&'a Arc<Value>> {
        let uid = s(owner, "/metadata/uid");
        objs.iter()
            .filter(|o| {
                o.pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .is_some_and(|rs| rs.iter().any(|r| r["uid"] == uid))
            })
            .collect()
    }

    fn set_status(&self, k: &str, old: &Arc<Value>, status: Value, manager: &str) {
        if old.get("status") == Some(&status) {
            return;
        }
        let mut n = (**old).clone();
        n["status"] = status;
        let ri = self.ri(k).clone();
        let _ = self.store.write(&ri, old, n, "status", manager);
    }

    fn reconcile_deployments(&mut self) {
        let rss = self.list("replicasets");
        for d in self.list("deployments") {
            if d.pointer("/metadata/deletionTimestamp").is_some() {
                continue;
            }
            let ns = s(&d, "/metadata/namespace").to_string();
            let tpl = d.pointer("/spec/template").cloned().unwrap_or(json!({}));
            let hash = hash_name(&tpl.to_string());
            let want = d
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let name = format!("{}-{hash}", s(&d, "/metadata/name"));
            let owned = Self::owned_by(&rss, &d);
            let current = owned
                .iter()
                .find(|r| s(r, "/metadata/name") == name)
                .cloned()
                .cloned();
            match &current {
                None => {
                    let mut t = tpl.clone();
                    t["metadata"]["labels"]["pod-template-hash"] = json!(hash);
                    let mut sel = d.pointer("/spec/selector").cloned().unwrap_or(json!({}));
                    sel["matchLabels"]["pod-template-hash"] = json!(hash);
                    let mut labels = t.pointer("/metadata/labels").cloned().unwrap_or(json!({}));
                    labels["pod-template-hash"] = json!(hash);
                    let rs = json!({
                        "metadata": {"name": name, "labels": labels, "annotations": {"deployment.kubernetes.io/desired-replicas": want.to_string(), "deployment.kubernetes.io/max-replicas": want.to_string(), "deployment.kubernetes.io/revision": (owned.len() + 1).to_string()},
                            "ownerReferences": [Self::owner_ref(&d, "Deployment", "apps/v1")]},
                        "spec": {"replicas": want, "selector": sel, "template": t},
                    });
                    let ri = self.ri("replicasets").clone();
                    if self
                        .store
                        .create(&ri, &ns, rs, "kube-controller-manager")
                        .is_ok()
                    {
                        self.event(
                            &d,
                            "Deployment",
                            "Normal",
                            "ScalingReplicaSet",
                            &format!("Scaled up replica set {name} from 0 to {want}"),
                            "deployment-controller",
                        );
                    }
                }
                Some(rs) => {
                    let have = rs
                        .pointer("/spec/replicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(0);
                    if have != want {
                        let mut n = (**rs).clone();
                        n["spec"]["replicas"] = json!(want);
                        let ri = self.ri("replicasets").clone();
                        if self
                            .store
                            .write(&ri, rs, n, "", "kube-controller-manager")
                            .is_ok()
                        {
                            let dir = if want > have { "up" } else { "down" };
                            self.event(
                                &d,
                                "Deployment",
                                "Normal",
                                "ScalingReplicaSet",
                                &format!("Scaled {dir} replica set {name} from {have} to {want}"),
                                "deployment-controller",
                            );
                        }
                    }
                }
            }
            // Old ReplicaSets scale to zero.
            for old in owned.iter().filter(|r| s(r, "/metadata/name") != name) {
                if old
                    .pointer("/spec/replicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
                    != 0
                {
                    let mut n = (***old).clone();
                    n["spec"]["replicas"] = json!(0);
                    let ri = self.ri("replicasets").clone();
                    let _ = self.store.write(&ri, old, n, "", "kube-controller-manager");
                }
            }
            let all_rs: Vec<&Arc<Value>> = owned;
            let sum = |p: &str| {
                all_rs
                    .iter()
                    .map(|r| r.pointer(p).and_then(Value::as_i64).unwrap_or(0))
                    .sum::<i64>()
            };
            let cur_status = |p: &str| {
                current
                    .as_ref()
                    .and_then(|r| r.pointer(p))
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
            };
            let replicas = sum("/status/replicas");
            let ready = sum("/status/readyReplicas");
            let available = sum("/status/availableReplicas");
            let updated = cur_status("/status/replicas");
            let prev = d.get("status").cloned().unwrap_or(json!({}));
            let now = store::now();
            let cond = |t: &str, st: &str, reason: &str, msg: String| {
                let same = prev["conditions"]
                    .as_array()
                    .and_then(|cs| cs.iter().find(|c| c["type"] == t))
                    .filter(|c| c["status"] == st && c["reason"] == reason)
                    .cloned();
                match same {
                    Some(mut c) => {
                        c["message"] = json!(msg);
                        c
                    }
                    None => {
                        json!({"type": t, "status": st, "reason": reason, "message": msg, "lastUpdateTime": now, "lastTransitionTime": now})
                    }
                }
            };
            let max_unavailable = 0.max(want / 4);
            let avail = if available >= want - max_unavailable && want > 0 || want == 0 {
                cond(
                    "Available",
                    "True",
                    "MinimumReplicasAvailable",
                    "Deployment has minimum availability.".into(),
                )
            } else {
                cond(
                    "Available",
                    "False",
                    "MinimumReplicasUnavailable",
                    "Deployment does not have minimum availability.".into(),
                )
            };
            let progressing = if updated == want && available == want {
                cond(
                    "Progressing",
                    "True",
                    "NewReplicaSetAvailable",
                    format!("ReplicaSet \"{name}\" has successfully progressed."),
                )
            } else if current.is_some() {
                cond(
                    "Progressing",
                    "True",
                    "ReplicaSetUpdated",
                    format!("ReplicaSet \"{name}\" is progressing."),
                )
            } else {
                cond(
                    "Progressing",
                    "True",
                    "NewReplicaSetCreated",
                    format!("Created new replica set \"{name}\""),
                )
            };
            let mut st = json!({
                "observedGeneration": d.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
                "replicas": replicas,
                "updatedReplicas": updated,
                "readyReplicas": ready,
                "availableReplicas": available,
                "conditions": [avail, progressing],
            });
            if replicas - available > 0 {
                st["unavailableReplicas"] = json!(replicas - available);
            }
            if let Some(m) = st.as_object_mut() {
                m.retain(|_, v| v != &json!(0));
            }
            self.set_status("deployments", &d, st, "kube-controller-manager");
        }
    }

    fn reconcile_replicasets(&mut self) {
        let pods = self.list("pods");
        for rs in self.list("replicasets") {
            if rs.pointer("/metadata/deletionTimestamp").is_some() {
                continue;
            }
            let ns = s(&rs, "/metadata/namespace").to_string();
            let want = rs
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1)
                .max(0) as usize;
            let owned: Vec<&Arc<Value>> = Self::owned_by(&pods, &rs)
                .into_iter()
                .filter(|p| p.pointer("/metadata/deletionTimestamp").is_none())
                .collect();
            if owned.len() < want {
                for _ in owned.len()..want {
                    let tpl = rs.pointer("/spec/template").cloned().unwrap_or(json!({}));
                    let pod = json!({
                        "metadata": {"generateName": format!("{}-", s(&rs, "/metadata/name")), "labels": tpl.pointer("/metadata/labels").cloned().unwrap_or(json!({})),
                            "ownerReferences": [Self::owner_ref(&rs, "ReplicaSet", "apps/v1")]},
                        "spec": tpl.get("spec").cloned().unwrap_or(json!({})),
                    });
                    let ri = self.ri("pods").clone();
                    if let Ok(p) = self.store.create(&ri, &ns, pod, "kube-controller-manager") {
                        self.event(
                            &rs,
                            "ReplicaSet",
                            "Normal",
                            "SuccessfulCreate",
                            &format!("Created pod: {}", s(&p, "/metadata/name")),
                            "replicaset-controller",
                        );
                    }
                }
            } else if owned.len() > want {
                for p in owned.iter().rev().take(owned.len() - want) {
                    let ri = self.ri("pods").clone();
                    if self
                        .store
                        .delete(&ri, &ns, s(p, "/metadata/name"), &json!({}), false)
                        .is_ok()
                    {
                        self.event(
                            &rs,
                            "ReplicaSet",
                            "Normal",
                            "SuccessfulDelete",
                            &format!("Deleted pod: {}", s(p, "/metadata/name")),
                            "replicaset-controller",
                        );
                    }
                }
            }
            let ready = owned.iter().filter(|p| pod_ready(p)).count();
            let mut st = json!({
                "replicas": owned.len().min(want.max(owned.len())),
                "fullyLabeledReplicas": owned.len(),
                "readyReplicas": ready,
                "availableReplicas": ready,
                "observedGeneration": rs.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
            });
            if let Some(m) = st.as_object_mut() {
                m.retain(|k, v| k == "replicas" || v != &json!(0));
            }
            self.set_status("replicasets", &rs, st, "kube-controller-manager");
        }
    }

    /// StatefulSets: ordinal pods `NAME-0..N-1`; DaemonSets: one pod on the node.
    fn reconcile_sets(&mut self) {
        let pods = self.list("pods");
        for (k, kind) in [("statefulsets", "StatefulSet"), ("daemonsets", "DaemonSet")] {
            if !self.ris.contains_key(k) {
                continue;
            }
            for set in self.list(k) {
                if set.pointer("/metadata/deletionTimestamp").is_some() {
                    continue;
                }
                let ns = s(&set, "/metadata/namespace").to_string();
                let name = s(&set, "/metadata/name").to_string();
                let want = if kind == "DaemonSet" {
                    1
                } else {
                    set.pointer("/spec/replicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(1)
                        .max(0)
                };
                let owned: Vec<&Arc<Value>> = Self::owned_by(&pods, &set)
                    .into_iter()
                    .filter(|p| p.pointer("/metadata/deletionTimestamp").is_none())
                    .collect();
                let tpl = set.pointer("/spec/template").cloned().unwrap_or(json!({}));
                let hash = hash_name(&tpl.to_string());
                for i in 0..want {
                    let pod_name = if kind == "StatefulSet" {
                        format!("{name}-{i}")
                    } else {
                        String::new()
                    };
                    let exists = if kind == "StatefulSet" {
                        owned.iter().any(|p| s(p, "/metadata/name") == pod_name)
                    } else {
                        !owned.is_empty()
                    };
                    if exists {
                        continue;
                    }
                    let mut labels = tpl
                        .pointer("/metadata/labels")
                        .cloned()
                        .unwrap_or(json!({}));
                    labels["controller-revision-hash"] = json!(format!("{name}-{hash}"));
                    let mut meta = json!({"labels": labels, "ownerReferences": [Self::owner_ref(&set, kind, "apps/v1")]});
                    if kind == "StatefulSet" {
                        meta["name"] = json!(pod_name);
                        meta["labels"]["statefulset.kubernetes.io/pod-name"] = json!(pod_name);
                        meta["labels"]["apps.kubernetes.io/pod-index"] = json!(i.to_string());
                    } else {
                        meta["generateName"] = json!(format!("{name}-"));
                    }
                    let pod = json!({"metadata": meta, "spec": tpl.get("spec").cloned().unwrap_or(json!({}))});
                    let ri = self.ri("pods").clone();
                    if let Ok(p) = self.store.create(&ri, &ns, pod, "kube-controller-manager") {
                        let ctl = if kind == "StatefulSet" {
                            "statefulset-controller"
                        } else {
                            "daemonset-controller"
                        };
                        let msg = if kind == "StatefulSet" {
                            format!(
                                "create Pod {} in StatefulSet {name} successful",
                                s(&p, "/metadata/name")
                            )
                        } else {
                            format!("Created pod: {}", s(&p, "/metadata/name"))
                        };
                        self.event(&set, kind, "Normal", "SuccessfulCreate", &msg, ctl);
                    }
                }
                if kind == "StatefulSet" {
                    for p in owned.iter().filter(|p| {
                        s(p, "/metadata/name")
                            .rsplit_once('-')
                            .and_then(|(_, i)| i.parse::<i64>().ok())
                            .is_some_and(|i| i >= want)
                    }) {
                        let ri = self.ri("pods").clone();
                        let _ =
                            self.store
                                .delete(&ri, &ns, s(p, "/metadata/name"), &json!({}), false);
                    }
                }
                let n = owned.len() as i64;
                let ready = owned.iter().filter(|p| pod_ready(p)).count() as i64;
                let observed = set
                    .pointer("/metadata/generation")
                    .cloned()
                    .unwrap_or(json!(1));
                let rev = format!("{name}-{hash}");
                let st = if kind == "StatefulSet" {
                    json!({"observedGeneration": observed, "replicas": n, "readyReplicas": ready, "currentReplicas": n, "updatedReplicas": n,
                           "availableReplicas": ready, "currentRevision": rev, "updateRevision": rev, "collisionCount": 0})
                } else {
                    json!({"observedGeneration": observed, "desiredNumberScheduled": 1, "currentNumberScheduled": n, "numberMisscheduled": 0,
                           "numberReady": ready, "numberAvailable": ready, "updatedNumberScheduled": n})
                };
                let mut st = st;
                if let Some(m) = st.as_object_mut() {
                    m.retain(|k, v| {
                        v != &json!(0)
                            || matches!(
                                k.as_str(),
                                "replicas"
                                    | "desiredNumberScheduled"
                                    | "currentNumberScheduled"
                                    | "numberMisscheduled"
                                    | "numberReady"
                            )
                    });
                }
                if kind == "DaemonSet" && ready < 1 {
                    st["numberUnavailable"] = json!(1 - ready);
                }
                self.set_status(k, &set, st, "kube-controller-manager");
            }
        }
    }

    fn reconcile_jobs(&mut self) {
        let pods = self.list("pods");
        for job in self.list("jobs") {
            if job.pointer("/metadata/deletionTimestamp").is_some()
                || job.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true)
            {
                continue;
            }
            let ns = s(&job, "/metadata/namespace").to_string();
            let owned = Self::owned_by(&pods, &job);
            let succeeded = owned
                .iter()
                .filter(|p| s(p, "/status/phase") == "Succeeded")
                .count() as i64;
            let failed = owned
                .iter()
                .filter(|p| s(p, "/status/phase") == "Failed")
                .count() as i64;
            let active = owned.len() as i64 - succeeded - failed;
            let completions = job
                .pointer("/spec/completions")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let backoff = job
                .pointer("/spec/backoffLimit")
                .and_then(Value::as_i64)
                .unwrap_or(6);
            let done = job
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True"
                    })
                });
            let now = store::now();
            let mut st = job.get("status").cloned().unwrap_or(json!({}));
            if st.get("startTime").is_none() {
                st["startTime"] = json!(now);
            }
            if !done && active == 0 && succeeded < completions && failed <= backoff {
                let tpl = job.pointer("/spec/template").cloned().unwrap_or(json!({}));
                let mut labels = tpl
                    .pointer("/metadata/labels")
                    .cloned()
                    .unwrap_or(json!({}));
                labels["batch.kubernetes.io/job-name"] = json!(s(&job, "/metadata/name"));
                labels["job-name"] = json!(s(&job, "/metadata/name"));
                let pod = json!({
                    "metadata": {"generateName": format!("{}-", s(&job, "/metadata/name")), "labels": labels,
                        "ownerReferences": [Self::owner_ref(&job, "Job", "batch/v1")]},
                    "spec": tpl.get("spec").cloned().unwrap_or(json!({})),
                });
                let ri = self.ri("pods").clone();
                if let Ok(p) = self.store.create(&ri, &ns, pod, "kube-controller-manager") {
                    self.event(
                        &job,
                        "Job",
                        "Normal",
                        "SuccessfulCreate",
                        &format!("Created pod: {}", s(&p, "/metadata/name")),
                        "job-controller",
                    );
                }
            }
            st["active"] = json!(active);
            st["succeeded"] = json!(succeeded);
            st["failed"] = json!(failed);
            st["ready"] = json!(0);
            st["terminating"] = json!(0);
            st["uncountedTerminatedPods"] = json!({});
            if !done && succeeded >= completions {
                st["completionTime"] = json!(now);
                st["conditions"] = json!([
                    {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastProbeTime": now, "lastTransitionTime": now},
                    {"type": "Complete", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastProbeTime": now, "lastTransitionTime": now}
                ]);
                self.event(
                    &job,
                    "Job",
                    "Normal",
                    "Completed",
                    "Job completed",
                    "job-controller",
                );
            } else if !done && failed > backoff {
                st["conditions"] = json!([
                    {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit", "lastProbeTime": now, "lastTransitionTime": now},
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit", "lastProbeTime": now, "lastTransitionTime": now}
                ]);
                self.event(
                    &job,
                    "Job",
                    "Warning",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                    "job-controller",
                );
            }
            if let Some(m) = st.as_object_mut() {
                for k in ["active", "succeeded", "failed"] {
                    if m.get(k) == Some(&json!(0)) {
                        m.remove(k);
                    }
                }
            }
            self.set_status("jobs", &job, st, "kube-controller-manager");
        }
    }

    fn missing_ref(&self, ns: &str, spec: &Value) -> Option<String> {
        let secrets = self.ri("secrets").clone();
        let cms = self.ri("configmaps").clone();
        let exists = |ri: &ResourceInfo, name: &str| self.store.get(ri, ns, name).is_ok();
        let mut checks: Vec<(bool, String, bool)> = vec![];
        for c in spec["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(spec["initContainers"].as_array().into_iter().flatten())
        {
            for e in c["env"].as_array().into_iter().flatten() {
                if let Some(r) = e.pointer("/valueFrom/secretKeyRef") {
                    checks.push((true, s(r, "/name").to_string(), r["optional"] == true));
                }
                if let Some(r) = e.pointer("/valueFrom/configMapKeyRef") {
                    checks.push((false, s(r, "/name").to_string(), r["optional"] == true));
                }
            }
            for e in c["envFrom"].as_array().into_iter().flatten() {
                if let Some(r) = e.get("secretRef") {
                    checks.push((true, s(r, "/name").to_string(), r["optional"] == true));
                }
                if let Some(r) = e.get("configMapRef") {
                    checks.push((false, s(r, "/name").to_string(), r["optional"] == true));
                }
            }
        }
        for v in spec["volumes"].as_array().into_iter().flatten() {
            if let Some(r) = v.get("secret") {
                checks.push((true, s(r, "/secretName").to_string(), r["optional"] == true));
            }
            if let Some(r) = v.get("configMap") {
                checks.push((false, s(r, "/name").to_string(), r["optional"] == true));
            }
        }
        for (is_secret, name, optional) in checks {
            if optional || name.is_empty() {
                continue;
            }
            if is_secret && !exists(&secrets, &name) {
                return Some(format!("secret \"{name}\" not found"));
            }
            if !is_secret && !exists(&cms, &name) {
                return Some(format!("configmap \"{name}\" not found"));
            }
        }
        None
    }

    fn reconcile_pods(&mut self) {
        let node_cpu = 4000i64;
        let node_mem = quantity_milli(&json!("8Gi"));
        let pods = self.list("pods");
        let mut used_cpu = 0;
        let mut used_mem = 0;
        let requests = |p: &Value| -> (i64, i64) {
            let mut cpu = 0;
            let mut mem = 0;
            for c in p
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                cpu += c
                    .pointer("/resources/requests/cpu")
                    .map(quantity_milli)
                    .unwrap_or(0);
                mem += c
                    .pointer("/resources/requests/memory")
                    .map(quantity_milli)
                    .unwrap_or(0);
            }
            (cpu, mem)
        };
        for p in pods.iter().filter(|p| !s(p, "/spec/nodeName").is_empty()) {
            let (c, m) = requests(p);
            used_cpu += c;
            used_mem += m;
        }
        for p in pods.iter() {
            let ipn = s(p, "/metadata/uid")
                .bytes()
                .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
            let pod_ip = format!("10.244.{}.{}", 1 + (ipn >> 8) % 250, 2 + ipn % 250);
            let ns = s(p, "/metadata/namespace").to_string();
            let name = s(p, "/metadata/name").to_string();
            let ri = self.ri("pods").clone();
            if p.pointer("/metadata/deletionTimestamp").is_some() {
                // The kubelet confirms termination.
                let _ =
                    self.store
                        .delete(&ri, &ns, &name, &json!({"gracePeriodSeconds": 0}), false);
                continue;
            }
            if matches!(s(p, "/status/phase"), "Succeeded" | "Failed") {
                continue;
            }
            let now = store::now();
            if s(p, "/spec/nodeName").is_empty() {
                let (c, m) = requests(p);
                if used_cpu + c > node_cpu || used_mem + m > node_mem {
                    let what = if used_cpu + c > node_cpu {
                        "cpu"
                    } else {
                        "memory"
                    };
                    let msg = format!(
                        "0/1 nodes are available: 1 Insufficient {what}. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
                    );
                    let st = json!({"phase": "Pending", "qosClass": s(p, "/status/qosClass"), "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg, "lastProbeTime": null, "lastTransitionTime": now}]});
                    let st = keep_times(p, st);
                    self.set_status("pods", p, st, "kube-scheduler");
                    self.event(
                        p,
                        "Pod",
                        "Warning",
                        "FailedScheduling",
                        &msg,
                        "default-scheduler",
                    );
                    continue;
                }
                used_cpu += c;
                used_mem += m;
                let mut n = (**p).clone();
                n["spec"]["nodeName"] = json!(NODE_NAME);
                if self.store.write(&ri, p, n, "", "kube-scheduler").is_ok() {
                    self.event(
                        p,
                        "Pod",
                        "Normal",
                        "Scheduled",
                        &format!("Successfully assigned {ns}/{name} to {NODE_NAME}"),
                        "default-scheduler",
                    );
                }
                continue;
            }
            // The kubelet.
            let spec = p.get("spec").cloned().unwrap_or(json!({}));
            let restart_never = s(p, "/spec/restartPolicy") == "Never"
                || s(p, "/spec/restartPolicy") == "OnFailure";
            let is_job = p.pointer("/metadata/labels/job-name").is_some();
            let mut statuses = vec![];
            let mut all_ready = true;
            let mut phase = "Running";
            let missing = self.missing_ref(&ns, &spec);
            let key = format!("{ns}/{name}");
            for c in spec["containers"].as_array().into_iter().flatten() {
                let cname = s(c, "/name");
                let image = s(c, "/image");
                let image_id_like = format!("{image}@sha256:{}", "0".repeat(64));
                let base = json!({"name": cname, "image": image, "imageID": "", "restartCount": 0, "started": false, "ready": false});
                let mut st = base.clone();
                if image_host(image) == UNREACHABLE_REGISTRY {
                    all_ready = false;
                    phase = "Pending";
                    let first = self.pull_failed.insert(format!("{key}/{cname}"));
                    let (reason, msg) = if first {
                        (
                            "ErrImagePull",
                            format!(
                                "failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": failed to do request: Head \"https://{UNREACHABLE_REGISTRY}/v2/\": dial tcp: lookup {UNREACHABLE_REGISTRY}: no such host"
                            ),
                        )
                    } else {
                        (
                            "ImagePullBackOff",
                            format!("Back-off pulling image \"{image}\""),
                        )
                    };
                    st["state"] = json!({"waiting": {"reason": reason, "message": msg}});
                    self.event(
                        p,
                        "Pod",
                        "Normal",
                        "Pulling",
                        &format!("Pulling image \"{image}\""),
                        "kubelet",
                    );
                    if first {
                        self.event(
                            p,
                            "Pod",
                            "Warning",
                            "Failed",
                            &format!("Failed to pull image \"{image}\": {msg}"),
                            "kubelet",
                        );
                        self.event(
                            p,
                            "Pod",
                            "Warning",
                            "Failed",
                            "Error: ErrImagePull",
                            "kubelet",
                        );
                    } else {
                        self.event(p, "Pod", "Normal", "BackOff", &msg, "kubelet");
                        self.event(
                            p,
                            "Pod",
                            "Warning",
                            "Failed",
                            "Error: ImagePullBackOff",
                            "kubelet",
                        );
                    }
                } else if let Some(m) = &missing {
                    all_ready = false;
                    phase = "Pending";
                    st["state"] =
                        json!({"waiting": {"reason": "CreateContainerConfigError", "message": m}});
                    self.event(
                        p,
                        "Pod",
                        "Warning",
                        "Failed",
                        &format!("Error: {m}"),
                        "kubelet",
                    );
                } else if is_job {
                    let fail = image_tag(image) == "fail";
                    st["state"] = json!({"terminated": {"exitCode": if fail { 1 } else { 0 }, "reason": if fail { "Error" } else { "Completed" }, "startedAt": now, "finishedAt": now, "containerID": format!("containerd://{}", hash_name(&key))}});
                    st["imageID"] = json!(image_id_like);
                    all_ready = false;
                    phase = if fail { "Failed" } else { "Succeeded" };
                } else if image_tag(image) == "crashloop" && !restart_never {
                    all_ready = false;
                    let restarts = p
                        .pointer("/status/containerStatuses")
                        .and_then(Value::as_array)
                        .and_then(|a| a.iter().find(|x| x["name"] == cname))
                        .and_then(|x| x["restartCount"].as_i64())
                        .unwrap_or(0);
                    st["restartCount"] = json!((restarts + 1).min(5));
                    st["state"] = json!({"waiting": {"reason": "CrashLoopBackOff", "message": format!("back-off 10s restarting failed container={cname} pod={name}_{ns}({})", s(p, "/metadata/uid"))}});
                    st["lastState"] = json!({"terminated": {"exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now, "containerID": format!("containerd://{}", hash_name(&key))}});
                    st["imageID"] = json!(image_id_like);
                    self.event(
                        p,
                        "Pod",
                        "Warning",
                        "BackOff",
                        "Back-off restarting failed container",
                        "kubelet",
                    );
                } else {
                    let ready = image_tag(image) != "unready";
                    all_ready &= ready;
                    st["state"] = json!({"running": {"startedAt": if s(p, "/status/startTime").is_empty() { now.clone() } else { s(p, "/status/startTime").to_string() }}});
                    st["ready"] = json!(ready);
                    st["started"] = json!(true);
                    st["imageID"] = json!(image_id_like);
                    st["containerID"] = json!(format!(
                        "containerd://{}",
                        hash_name(&format!("{key}/{cname}"))
                    ));
                    self.event(
                        p,
                        "Pod",
                        "Normal",
                        "Pulled",
                        &format!("Container image \"{image}\" already present on machine"),
                        "kubelet",
                    );
                    self.event(
                        p,
                        "Pod",
                        "Normal",
                        "Created",
                        &format!("Created container: {cname}"),
                        "kubelet",
                    );
                    self.event(
                        p,
                        "Pod",
                        "Normal",
                        "Started",
                        &format!("Started container {cname}"),
                        "kubelet",
                    );
                    if !ready {
                        self.event(
                            p,
                            "Pod",
                            "Warning",
                            "Unhealthy",
                            "Readiness probe failed: HTTP probe failed with statuscode: 503",
                            "kubelet",
                        );
                    }
                }
                statuses.push(st);
            }
            let ready_s = if all_ready && phase == "Running" {
                "True"
            } else {
                "False"
            };
            let not_ready: Vec<&str> = statuses
                .iter()
                .filter(|c| c["ready"] != true)
                .filter_map(|c| c["name"].as_str())
                .collect();
            let cmsg = format!("containers with unready status: [{}]", not_ready.join(" "));
            let mut conds = vec![
                json!({"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}),
                json!({"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}),
            ];
            if ready_s == "True" {
                conds.push(json!({"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}));
                conds.push(json!({"type": "ContainersReady", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}));
            } else {
                conds.push(json!({"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": cmsg, "lastProbeTime": null, "lastTransitionTime": now}));
                conds.push(json!({"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady", "message": cmsg, "lastProbeTime": null, "lastTransitionTime": now}));
            }
            conds.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}));
            let st = json!({
                "phase": phase,
                "conditions": conds,
                "hostIP": "10.0.0.10",
                "hostIPs": [{"ip": "10.0.0.10"}],
                "podIP": pod_ip,
                "podIPs": [{"ip": pod_ip}],
                "startTime": if s(p, "/status/startTime").is_empty() { now.clone() } else { s(p, "/status/startTime").to_string() },
                "containerStatuses": statuses,
                "qosClass": s(p, "/status/qosClass"),
            });
            let st = keep_times(p, st);
            self.set_status("pods", p, st, "kubelet");
        }
    }

    fn reconcile_services(&mut self) {
        let pods = self.list("pods");
        for svc in self.list("services") {
            let Some(sel) = svc
                .pointer("/spec/selector")
                .and_then(Value::as_object)
                .filter(|m| !m.is_empty())
            else {
                continue;
            };
            let ns = s(&svc, "/metadata/namespace").to_string();
            let name = s(&svc, "/metadata/name").to_string();
            let matching: Vec<&Arc<Value>> = pods
                .iter()
                .filter(|p| s(p, "/metadata/namespace") == ns && !s(p, "/status/podIP").is_empty())
                .filter(|p| {
                    sel.iter().all(|(k, v)| {
                        p.pointer("/metadata/labels").and_then(|l| l.get(k)) == Some(v)
                    })
                })
                .collect();
            let addr = |p: &Value| json!({"ip": s(p, "/status/podIP"), "nodeName": s(p, "/spec/nodeName"), "targetRef": {"kind": "Pod", "namespace": ns, "name": s(p, "/metadata/name"), "uid": s(p, "/metadata/uid")}});
            let ready: Vec<Value> = matching
                .iter()
                .filter(|p| pod_ready(p))
                .map(|p| addr(p))
                .collect();
            let not_ready: Vec<Value> = matching
                .iter()
                .filter(|p| !pod_ready(p))
                .map(|p| addr(p))
                .collect();
            let ports: Vec<Value> = svc
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|p| {
                    let mut o = json!({"port": p.get("targetPort").cloned().unwrap_or(p["port"].clone()), "protocol": p.get("protocol").cloned().unwrap_or(json!("TCP"))});
                    if let Some(n) = p.get("name") {
                        o["name"] = n.clone();
                    }
                    o
                })
                .collect();
            let mut subset = json!({"ports": ports});
            if !ready.is_empty() {
                subset["addresses"] = json!(ready);
            }
            if !not_ready.is_empty() {
                subset["notReadyAddresses"] = json!(not_ready);
            }
            let subsets = if matching.is_empty() {
                json!(null)
            } else {
                json!([subset])
            };
            let ri = self.ri("endpoints").clone();
            let mut ep = json!({"metadata": {"name": name, "namespace": ns, "labels": svc.pointer("/metadata/labels").cloned().unwrap_or(json!({}))}});
            if !subsets.is_null() {
                ep["subsets"] = subsets;
            }
            match self.store.get(&ri, &ns, &name) {
                Ok(cur) => {
                    if cur.get("subsets") != ep.get("subsets") {
                        let mut n = (*cur).clone();
                        match ep.get("subsets") {
                            Some(sb) => n["subsets"] = sb.clone(),
                            None => {
                                if let Some(m) = n.as_object_mut() {
                                    m.remove("subsets");
                                }
                            }
                        }
                        let _ = self
                            .store
                            .write(&ri, &cur, n, "", "kube-controller-manager");
                    }
                }
                Err(_) => {
                    let _ = self.store.create(&ri, &ns, ep, "kube-controller-manager");
                }
            }
        }
    }

    fn reconcile_pvcs(&mut self) {
        for pvc in self.list("persistentvolumeclaims") {
            if pvc
                .pointer("/spec/storageClassName")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                self.event(
                    &pvc,
                    "PersistentVolumeClaim",
                    "Normal",
                    "FailedBinding",
                    "no persistent volumes available for this claim and no storage class is set",
                    "persistentvolume-controller",
                );
            }
            if s(&pvc, "/status/phase") != "Pending" {
                self.set_status(
                    "persistentvolumeclaims",
                    &pvc,
                    json!({"phase": "Pending"}),
                    "kube-controller-manager",
                );
            }
        }
    }
}

/// `pods/log` for simulated containers: a start line for running containers, the crash for
/// `crashloop` ones (`previous=true` shows the last terminated run), and kubelet's errors otherwise.
pub fn pod_log(
    pod: &Value,
    container: Option<&str>,
    previous: bool,
) -> Result<String, crate::status::ApiError> {
    use crate::status::ApiError;
    let name = s(pod, "/metadata/name");
    let containers: Vec<&Value> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let c = match container {
        Some(want) => containers
            .iter()
            .find(|c| c["name"] == want)
            .copied()
            .ok_or_else(|| {
                ApiError::bad_request(format!("container {want} is not valid for pod {name}"))
            })?,
        None if containers.len() == 1 => containers[0],
        None => {
            let names: Vec<&str> = containers
                .iter()
                .filter_map(|c| c["name"].as_str())
                .collect();
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                names.join(" ")
            )));
        }
    };
    let cname = c["name"].as_str().unwrap_or_default();
    let st = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|x| x["name"] == cname))
        .cloned()
        .unwrap_or(json!({}));
    if previous {
        if st.pointer("/lastState/terminated").is_some() {
            return Ok(format!(
                "starting {}\npanic: simulated crash (image tag \"crashloop\")\n",
                s(c, "/image")
            ));
        }
        return Err(ApiError::bad_request(format!(
            "previous terminated container \"{cname}\" in pod \"{name}\" not found"
        )));
    }
    if let Some(reason) = st.pointer("/state/waiting/reason").and_then(Value::as_str) {
        if reason != "CrashLoopBackOff" {
            return Err(ApiError::bad_request(format!(
                "container \"{cname}\" in pod \"{name}\" is waiting to start: {}",
                if reason == "ContainerCreating" {
                    "ContainerCreating".to_string()
                } else {
                    reason.to_string()
                }
            )));
        }
        return Ok(format!(
            "starting {}\npanic: simulated crash (image tag \"crashloop\")\n",
            s(c, "/image")
        ));
    }
    if st.pointer("/state/running").is_none() && st.pointer("/state/terminated").is_none() {
        return Err(ApiError::bad_request(format!(
            "container \"{cname}\" in pod \"{name}\" is waiting to start: ContainerCreating"
        )));
    }
    Ok(format!("starting {}\n", s(c, "/image")))
}

fn pod_ready(p: &Value) -> bool {
    p.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Keep condition transition times when a condition's status did not change, so an unchanged
/// pod is not rewritten on every pass.
fn keep_times(old: &Value, mut st: Value) -> Value {
    let prev: BTreeMap<String, Value> = old
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or_default().to_string(),
                c.clone(),
            )
        })
        .collect();
    if let Some(cs) = st.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in cs {
            if let Some(p) = prev.get(c["type"].as_str().unwrap_or_default())
                && p["status"] == c["status"]
                && p["reason"] == c["reason"]
            {
                c["lastTransitionTime"] = p["lastTransitionTime"].clone();
            }
        }
    }
    // Running containers keep their start time.
    if let (Some(old_cs), Some(new_cs)) = (
        old.pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .cloned(),
        st.get_mut("containerStatuses")
            .and_then(Value::as_array_mut),
    ) {
        for c in new_cs {
            if let Some(o) = old_cs.iter().find(|o| o["name"] == c["name"]) {
                if let (Some(_), Some(ot)) = (
                    c.pointer("/state/running/startedAt"),
                    o.pointer("/state/running/startedAt"),
                ) {
                    c["state"]["running"]["startedAt"] = ot.clone();
                }
                if c.pointer("/state/waiting/reason") == Some(&json!("CrashLoopBackOff"))
                    && o.pointer("/state/waiting/reason") == Some(&json!("CrashLoopBackOff"))
                {
                    c["restartCount"] = o["restartCount"].clone();
                    c["lastState"] = o["lastState"].clone();
                }
            }
        }
    }
    st
}

/// Run the simulator until the task is aborted.
pub async fn run(store: Arc<Store>) {
    let mut ris = HashMap::new();
    for (k, g, plural) in [
        ("nodes", "", "nodes"),
        ("pods", "", "pods"),
        ("events", "", "events"),
        ("secrets", "", "secrets"),
        ("configmaps", "", "configmaps"),
        ("services", "", "services"),
        ("endpoints", "", "endpoints"),
        ("persistentvolumeclaims", "", "persistentvolumeclaims"),
        ("deployments", "apps", "deployments"),
        ("replicasets", "apps", "replicasets"),
        ("jobs", "batch", "jobs"),
        ("statefulsets", "apps", "statefulsets"),
        ("daemonsets", "apps", "daemonsets"),
    ] {
        if let Some(ri) = store.resource(g, "v1", plural) {
            ris.insert(k, ri);
        }
    }
    let mut sim = Sim {
        store: store.clone(),
        ris,
        pull_failed: Default::default(),
        events: Default::default(),
    };
    sim.ensure_node();
    let mut rx = store.subscribe();
    let watched = [
        "/pods",
        "apps/deployments",
        "apps/replicasets",
        "apps/statefulsets",
        "apps/daemonsets",
        "batch/jobs",
        "/services",
        "/secrets",
        "/configmaps",
        "/persistentvolumeclaims",
    ];
    loop {
        sim.reconcile_deployments();
        sim.reconcile_replicasets();
        sim.reconcile_sets();
        sim.reconcile_jobs();
        sim.reconcile_pods();
        sim.reconcile_services();
        sim.reconcile_pvcs();
        // Wait for a relevant change, or tick (back-off states move on with time).
        let tick = tokio::time::sleep(Duration::from_millis(500));
        tokio::pin!(tick);
        loop {
            tokio::select! {
                r = rx.recv() => match r {
                    Ok(ev) if watched.contains(&ev.store_key.as_str()) => break,
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                    Err(_) => return,
                },
                _ = &mut tick => break,
            }
        }
        // Coalesce bursts of changes into one pass.
        while rx.try_recv().is_ok() {}
    }
}
