//! The simulated Nodes: Ready, with capacity, like a kubelet registers them
//! (<https://kubernetes.io/docs/reference/node/node-status/>).

use k8s_openapi::api::core::v1::{
    Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

/// One node to create.
#[derive(Debug, Clone)]
pub struct NodeTemplate {
    pub name: String,
    pub cpu: String,
    pub memory: String,
    pub pods: u32,
}

impl NodeTemplate {
    pub fn new(name: &str, cpu: &str, memory: &str, pods: u32) -> NodeTemplate {
        NodeTemplate { name: name.into(), cpu: cpu.into(), memory: memory.into(), pods }
    }
}

/// The Node object for `t`, the `index`th node (its pod CIDR is `10.244.<index>.0/24`).
pub fn node(t: &NodeTemplate, index: usize, now: Timestamp) -> Node {
    let res: BTreeMap<String, Quantity> = [
        ("cpu", t.cpu.clone()),
        ("memory", t.memory.clone()),
        ("pods", t.pods.to_string()),
        ("ephemeral-storage", "100Gi".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Quantity(v)))
    .collect();
    let cond = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    };
    let labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", t.name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Node {
        metadata: ObjectMeta {
            name: Some(t.name.clone()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                "node.alpha.kubernetes.io/ttl".to_string(),
                "0".to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: Some(format!("10.244.{index}.0/24")),
            pod_cidrs: Some(vec![format!("10.244.{index}.0/24")]),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(res.clone()),
            allocatable: Some(res),
            conditions: Some(vec![
                cond(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                cond(
                    "DiskPressure",
                    "False",
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                ),
                cond(
                    "PIDPressure",
                    "False",
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                ),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ]),
            addresses: Some(vec![
                NodeAddress { type_: "InternalIP".into(), address: node_ip(index) },
                NodeAddress { type_: "Hostname".into(), address: t.name.clone() },
            ]),
            node_info: Some(NodeSystemInfo {
                architecture: "amd64".into(),
                boot_id: format!("00000000-0000-4000-8000-{index:012}"),
                container_runtime_version: "containerd://2.0.3".into(),
                kernel_version: "6.1.0-sandbox".into(),
                kube_proxy_version: String::new(),
                kubelet_version: "v1.33.0".into(),
                machine_id: format!("{index:032x}"),
                operating_system: "linux".into(),
                os_image: "ksync-sandbox simulated node".into(),
                system_uuid: format!("00000000-0000-4000-8000-{index:012}"),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

/// The InternalIP of the `index`th node.
pub fn node_ip(index: usize) -> String {
    format!("172.18.0.{}", index + 2)
}
