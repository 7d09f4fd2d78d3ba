//! The endpoints controller (Service -> core/v1 Endpoints of the selected pods' IPs) and the
//! PersistentVolume controller's verdict on claims, both pure
//! (<https://kubernetes.io/docs/concepts/services-networking/service/#endpoints>,
//! <https://kubernetes.io/docs/concepts/storage/persistent-volumes/#binding>).

use super::workloads::is_ready;
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference,
    PersistentVolumeClaim, Pod, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The annotation the endpoints controller stamps on the Endpoints it maintains.
pub const TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// Whether the pod matches the service's selector.
pub fn selects(svc: &Service, pod: &Pod) -> bool {
    let Some(sel) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else { return false };
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    pod.metadata.namespace == svc.metadata.namespace
        && sel.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn target_port(p: &k8s_openapi::api::core::v1::ServicePort, pod: &Pod) -> Option<i32> {
    match p.target_port.as_ref() {
        None => Some(p.port),
        Some(IntOrString::Int(i)) => Some(*i),
        Some(IntOrString::String(name)) => pod
            .spec
            .as_ref()?
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|cp| cp.name.as_deref() == Some(name.as_str()))
            .map(|cp| cp.container_port),
    }
}

/// The Endpoints of a Service with a selector (`None` for a Service without one): ready pods
/// under `addresses`, the others that have an IP under `notReadyAddresses`, one subset per
/// distinct port set.
pub fn endpoints_for(svc: &Service, pods: &[&Pod]) -> Option<Endpoints> {
    let spec = svc.spec.as_ref()?;
    spec.selector.as_ref()?;
    let mut subsets: Vec<EndpointSubset> = vec![];
    let mut pods: Vec<&&Pod> = pods
        .iter()
        .filter(|p| {
            selects(svc, p)
                && super::workloads::is_active(p)
                && p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some()
        })
        .collect();
    pods.sort_by_key(|p| p.status.as_ref().and_then(|s| s.pod_ip.clone()));
    for pod in pods {
        let ports: Vec<EndpointPort> = spec
            .ports
            .iter()
            .flatten()
            .filter_map(|sp| {
                Some(EndpointPort {
                    name: sp.name.clone(),
                    port: target_port(sp, pod)?,
                    protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                    app_protocol: sp.app_protocol.clone(),
                })
            })
            .collect();
        let addr = EndpointAddress {
            ip: pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default(),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                namespace: pod.metadata.namespace.clone(),
                uid: pod.metadata.uid.clone(),
                ..Default::default()
            }),
            hostname: None,
        };
        let idx = match subsets
            .iter()
            .position(|s| s.ports.as_deref().unwrap_or_default() == ports.as_slice())
        {
            Some(i) => i,
            None => {
                subsets.push(EndpointSubset {
                    ports: (!ports.is_empty()).then_some(ports),
                    ..Default::default()
                });
                subsets.len() - 1
            }
        };
        let list = if is_ready(pod) {
            &mut subsets[idx].addresses
        } else {
            &mut subsets[idx].not_ready_addresses
        };
        list.get_or_insert_with(Vec::new).push(addr);
    }
    Some(Endpoints {
        metadata: ObjectMeta {
            name: svc.metadata.name.clone(),
            namespace: svc.metadata.namespace.clone(),
            labels: svc.metadata.labels.clone(),
            ..Default::default()
        },
        subsets: (!subsets.is_empty()).then_some(subsets),
    })
}

/// The warning the PersistentVolume controller records for a claim it cannot bind (no volumes exist
/// in the sandbox): (reason, message), `None` once bound.
pub fn claim_problem(pvc: &PersistentVolumeClaim) -> Option<(&'static str, String)> {
    let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase.is_some_and(|p| p != "Pending") {
        return None;
    }
    match pvc.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()) {
        None | Some("") => Some((
            "FailedBinding",
            "no persistent volumes available for this claim and no storage class is set"
                .to_string(),
        )),
        Some(class) => Some((
            "ProvisioningFailed",
            format!("storageclass.storage.k8s.io \"{class}\" not found"),
        )),
    }
}
