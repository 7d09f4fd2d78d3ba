//! The scheduler's decision: the first node (least allocated CPU) where the pod's requests fit,
//! or the `FailedScheduling` message worded as kube-scheduler words it
//! (<https://kubernetes.io/docs/concepts/scheduling-eviction/kube-scheduler/>).

use super::quantity::{milli_cpu, value};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

/// Requested (or allocatable) resources.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub pods: i64,
}

impl Resources {
    pub fn add(&mut self, o: &Resources) {
        self.milli_cpu += o.milli_cpu;
        self.memory += o.memory;
        self.pods += o.pods;
    }
}

fn requests_of(r: Option<&k8s_openapi::api::core::v1::ResourceRequirements>) -> (i64, i64) {
    let Some(r) = r else { return (0, 0) };
    // Requests default to limits when only limits are set
    // (https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/).
    let get = |k: &str| -> Option<&Quantity> {
        r.requests
            .as_ref()
            .and_then(|m| m.get(k))
            .or_else(|| r.limits.as_ref().and_then(|m| m.get(k)))
    };
    (get("cpu").map(milli_cpu).unwrap_or(0), get("memory").map(value).unwrap_or(0))
}

/// What a pod requests: the sum over containers, at least the largest init container.
pub fn pod_requests(pod: &Pod) -> Resources {
    let mut r = Resources { pods: 1, ..Default::default() };
    let Some(spec) = &pod.spec else { return r };
    for c in &spec.containers {
        let (cpu, mem) = requests_of(c.resources.as_ref());
        r.milli_cpu += cpu;
        r.memory += mem;
    }
    for c in spec.init_containers.iter().flatten() {
        let (cpu, mem) = requests_of(c.resources.as_ref());
        r.milli_cpu = r.milli_cpu.max(cpu);
        r.memory = r.memory.max(mem);
    }
    r
}

/// A node's allocatable resources.
pub fn allocatable(node: &Node) -> Resources {
    let a = node.status.as_ref().and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()));
    let get = |k: &str| a.and_then(|m| m.get(k));
    Resources {
        milli_cpu: get("cpu").map(milli_cpu).unwrap_or(0),
        memory: get("memory").map(value).unwrap_or(0),
        pods: get("pods").map(value).unwrap_or(110),
    }
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Why a pod cannot be scheduled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unschedulable {
    /// `0/1 nodes are available: 1 Insufficient cpu. preemption: …`
    pub message: String,
}

/// Pick a node for `pod` given what the pods already bound use on each node (`used`), or say why
/// none fits. `unbound_claims`: the pod uses a PersistentVolumeClaim that is not Bound.
pub fn schedule(
    pod: &Pod,
    nodes: &[&Node],
    used: &BTreeMap<String, Resources>,
    unbound_claims: bool,
) -> Result<String, Unschedulable> {
    let n = nodes.len();
    if unbound_claims {
        // The VolumeBinding plugin fails the pod before filtering nodes (PreFilter).
        return Err(Unschedulable {
            message: format!(
                "0/{n} nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/{n} nodes are available: {n} Preemption is not helpful for scheduling."
            ),
        });
    }
    let want = pod_requests(pod);
    let selector = pod.spec.as_ref().and_then(|s| s.node_selector.clone()).unwrap_or_default();
    // reason -> count, and whether preemption could help on that node.
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let (mut victims, mut not_helpful) = (0usize, 0usize);
    let mut fits: Vec<(&Node, i64)> = vec![];
    for node in nodes {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut node_reasons = vec![];
        let mut unresolvable = false;
        if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            node_reasons.push("node(s) were unschedulable".to_string());
            unresolvable = true;
        } else if !node_ready(node) {
            node_reasons
                .push("node(s) had untolerated taint {node.kubernetes.io/not-ready: }".to_string());
            unresolvable = true;
        } else if !selector.iter().all(|(k, v)| labels.get(k) == Some(v))
            || super::workloads::pinned_node(pod).is_some_and(|n| n != name)
        {
            node_reasons.push("node(s) didn't match Pod's node affinity/selector".to_string());
            unresolvable = true;
        } else {
            let cap = allocatable(node);
            let u = used.get(&name).copied().unwrap_or_default();
            if u.pods + want.pods > cap.pods {
                node_reasons.push("Too many pods".to_string());
            }
            if want.milli_cpu > 0 && u.milli_cpu + want.milli_cpu > cap.milli_cpu {
                node_reasons.push("Insufficient cpu".to_string());
            }
            if want.memory > 0 && u.memory + want.memory > cap.memory {
                node_reasons.push("Insufficient memory".to_string());
            }
            if node_reasons.is_empty() {
                fits.push((node, cap.milli_cpu - u.milli_cpu));
                continue;
            }
        }
        if unresolvable {
            not_helpful += 1;
        } else {
            victims += 1;
        }
        for r in node_reasons {
            *reasons.entry(r).or_default() += 1;
        }
    }
    if let Some((node, _)) = fits
        .iter()
        .max_by_key(|(node, free)| (*free, std::cmp::Reverse(node.metadata.name.clone())))
    {
        return Ok(node.metadata.name.clone().unwrap_or_default());
    }
    let mut parts: Vec<String> = reasons.iter().map(|(r, c)| format!("{c} {r}")).collect();
    parts.sort();
    let mut pre = vec![];
    if victims > 0 {
        pre.push(format!("{victims} No preemption victims found for incoming pod"));
    }
    if not_helpful > 0 {
        pre.push(format!("{not_helpful} Preemption is not helpful for scheduling"));
    }
    pre.sort();
    let body = if parts.is_empty() { String::new() } else { format!(" {}", parts.join(", ")) };
    Err(Unschedulable {
        message: format!(
            "0/{n} nodes are available:{body}. preemption: 0/{n} nodes are available: {}.",
            pre.join(", ")
        ),
    })
}
