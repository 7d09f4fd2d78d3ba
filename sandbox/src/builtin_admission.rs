//! Two of kube-apiserver's built-in admission plugins, for Pod creates: **ServiceAccount** and
//! **ResourceQuota**. Without them a Pod naming a missing ServiceAccount, or one more Pod than a
//! ResourceQuota allows, would be created in the sandbox, and the `FailedCreate` paths of the
//! workload controllers (and Kuvryn Sync's diagnosis of them) could not be exercised.
//!
//! Followed (read, not copied):
//! - `plugin/pkg/admission/serviceaccount/admission.go`: a Pod runs as its `serviceAccountName`,
//!   `default` when unset; a Pod whose ServiceAccount does not exist in its namespace is refused
//!   with 403 `pods "NAME" is forbidden: error looking up service account NS/SA: serviceaccount
//!   "SA" not found`. The plugin's mutations (writing `serviceAccountName: default`, the token
//!   volume, image pull secrets) are not made, so stored Pods stay as the client sent them.
//! - `plugin/pkg/admission/resourcequota/controller.go` and
//!   `pkg/quota/v1/evaluator/core/pods.go`: a create whose usage added to the namespace's usage
//!   exceeds a quota's `spec.hard` is refused with 403 `exceeded quota: NAME, requested: R, used:
//!   U, limited: L` (each list `resource=quantity`, sorted, only the exceeded resources).
//!   Tracked: `pods`/`count/pods`, `requests.cpu`/`cpu` and `requests.memory`/`memory`, counted
//!   over the namespace's non-terminal Pods with the scheduler's request arithmetic; other keys
//!   of `spec.hard` are neither enforced nor reported in `status.used`. Pods without the tracked
//!   requests are counted as zero (kube refuses them with `must specify requests.cpu`; not
//!   modelled).
//!
//! Differences, by design: usage is computed from the store's live Pods on every check (kube
//! reads `status.used` and updates it with a compare-and-swap), so concurrent creates can both
//! pass; `status.used` is written on every admitted Pod and on quota create (kube's quota
//! controller recomputes it; the workload simulator does that here for deletions). Both plugins
//! run where the sandbox runs NamespaceLifecycle, before the webhooks (kube runs ResourceQuota
//! after the validating webhooks), which only matters when both would refuse.
//!
//! Hand-written: these plugins exist only inside kube-apiserver (Go).

use crate::resources::ResourceInfo;
use crate::simulator::quantity::{milli_cpu, value};
use crate::simulator::scheduler::{Resources, pod_requests};
use crate::status::{ApiError, ApiResult};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A resource a ResourceQuota's `spec.hard` can name that the sandbox tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tracked {
    /// `pods`, `count/pods`.
    Pods,
    /// `requests.cpu`, `cpu` (millicores).
    RequestsCpu,
    /// `requests.memory`, `memory` (bytes).
    RequestsMemory,
}

impl Tracked {
    /// The tracked resource a `spec.hard` key names, if any.
    pub fn from_key(key: &str) -> Option<Tracked> {
        match key {
            "pods" | "count/pods" => Some(Tracked::Pods),
            "requests.cpu" | "cpu" => Some(Tracked::RequestsCpu),
            "requests.memory" | "memory" => Some(Tracked::RequestsMemory),
            _ => None,
        }
    }

    /// This resource's amount in `r`, in its unit (count, millicores, bytes).
    fn amount(self, r: &Resources) -> i64 {
        match self {
            Tracked::Pods => r.pods,
            Tracked::RequestsCpu => r.milli_cpu,
            Tracked::RequestsMemory => r.memory,
        }
    }

    /// A quantity's amount in this resource's unit.
    fn parse(self, q: &Quantity) -> i64 {
        match self {
            Tracked::RequestsCpu => milli_cpu(q),
            Tracked::Pods | Tracked::RequestsMemory => value(q),
        }
    }

    /// An amount written as a quantity ([`format_milli`], [`format_bytes`], or the count).
    fn format(self, amount: i64) -> String {
        match self {
            Tracked::RequestsCpu => format_milli(amount),
            Tracked::Pods => amount.to_string(),
            Tracked::RequestsMemory => format_bytes(amount),
        }
    }
}

/// Millicores as kube writes them: whole cores without a suffix, else `NNNm`.
pub fn format_milli(m: i64) -> String {
    if m % 1000 == 0 { (m / 1000).to_string() } else { format!("{m}m") }
}

/// Bytes with the largest binary suffix that divides them, else the largest decimal one (an
/// approximation of `Quantity.String()`, which keeps the format of the quantities summed).
pub fn format_bytes(b: i64) -> String {
    if b == 0 {
        return "0".into();
    }
    for (suffix, unit) in [("Ti", 1i64 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if b % unit == 0 {
            return format!("{}{suffix}", b / unit);
        }
    }
    for (suffix, unit) in [("T", 1_000_000_000_000i64), ("G", 1_000_000_000), ("M", 1_000_000)] {
        if b % unit == 0 {
            return format!("{}{suffix}", b / unit);
        }
    }
    if b % 1000 == 0 { format!("{}k", b / 1000) } else { b.to_string() }
}

/// The ServiceAccount a Pod runs as: `serviceAccountName`, else the deprecated
/// `serviceAccount`, else `default`.
pub fn service_account_of(pod: &Value) -> String {
    ["serviceAccountName", "serviceAccount"]
        .iter()
        .find_map(|k| pod.pointer(&format!("/spec/{k}")).and_then(Value::as_str))
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_string()
}

/// The ServiceAccount plugin's refusal text for a missing `ns/sa`.
pub fn missing_service_account(ns: &str, sa: &str) -> String {
    format!("error looking up service account {ns}/{sa}: serviceaccount \"{sa}\" not found")
}

/// Whether a Pod counts against quota: not in a terminal phase and not being deleted.
pub fn counts_against_quota(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

/// The namespace's usage: the sum of [`pod_requests`] over the Pods that count.
pub fn usage_of<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> Resources {
    let mut used = Resources::default();
    for p in pods.into_iter().filter(|p| counts_against_quota(p)) {
        used.add(&pod_requests(p));
    }
    used
}

/// `status` of a quota with `hard` and the namespace usage `used`: `hard` as written and the
/// tracked resources' usage.
pub fn quota_status(hard: &BTreeMap<String, Quantity>, used: &Resources) -> Value {
    let used_map: BTreeMap<&String, String> = hard
        .keys()
        .filter_map(|k| Some((k, Tracked::from_key(k)?.format(Tracked::from_key(k)?.amount(used)))))
        .collect();
    json!({"hard": hard, "used": used_map})
}

/// The quota decision for one create: `Ok(())` when `used + requested` stays within every
/// tracked entry of `hard`, else the refusal text naming the exceeded resources.
pub fn check_quota(
    name: &str,
    hard: &BTreeMap<String, Quantity>,
    used: &Resources,
    requested: &Resources,
) -> Result<(), String> {
    let exceeded: Vec<(&String, Tracked, &Quantity)> = hard
        .iter()
        .filter_map(|(k, q)| Some((k, Tracked::from_key(k)?, q)))
        .filter(|(_, t, q)| t.amount(used) + t.amount(requested) > t.parse(q))
        .collect();
    if exceeded.is_empty() {
        return Ok(());
    }
    let list = |f: &dyn Fn(Tracked, &Quantity) -> String| -> String {
        exceeded.iter().map(|(k, t, q)| format!("{k}={}", f(*t, q))).collect::<Vec<_>>().join(",")
    };
    Err(format!(
        "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
        list(&|t, _| t.format(t.amount(requested))),
        list(&|t, _| t.format(t.amount(used))),
        list(&|_, q| q.0.clone()),
    ))
}

/// The name a refusal names: the Pod's name, else its `generateName` (kube-apiserver has not
/// generated the name when admission runs).
fn refused_name(obj: &Value) -> &str {
    ["/metadata/name", "/metadata/generateName"]
        .iter()
        .find_map(|p| obj.pointer(p).and_then(Value::as_str).filter(|s| !s.is_empty()))
        .unwrap_or_default()
}

/// The core (`v1`) objects the plugins read and the quota status they write. The store, which
/// runs the plugins on every create, provides them, so the plugins need not know the store.
pub trait CoreObjects {
    /// Whether the `plural` object `ns/name` exists.
    fn exists(&self, plural: &str, ns: &str, name: &str) -> bool;
    /// The namespace's `plural` objects as stored.
    fn list(&self, plural: &str, ns: &str) -> Vec<Arc<Value>>;
    /// Write `next`'s `status` through the status subresource (best effort).
    fn write_status(&self, plural: &str, ns: &str, next: Value);
}

/// Run the plugins on a create of `obj` in `ns` (after defaulting, before the webhooks).
/// A Pod may be refused (403); an admitted Pod updates the namespace's quotas' `status.used`
/// (unless `dry_run`); a new ResourceQuota gets its `status` at once.
pub fn admit_create(
    objects: &dyn CoreObjects,
    ri: &ResourceInfo,
    ns: &str,
    obj: &mut Value,
    dry_run: bool,
) -> ApiResult<()> {
    if !ri.group.is_empty() {
        return Ok(());
    }
    match ri.plural.as_str() {
        "pods" => admit_pod(objects, ns, obj, dry_run),
        "resourcequotas" => {
            let hard: BTreeMap<String, Quantity> = obj
                .pointer("/spec/hard")
                .and_then(|h| serde_json::from_value(h.clone()).ok())
                .unwrap_or_default();
            obj["status"] = quota_status(&hard, &usage_of(&live_pods(objects, ns)));
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The namespace's Pods, decoded.
fn live_pods(objects: &dyn CoreObjects, ns: &str) -> Vec<Pod> {
    objects
        .list("pods", ns)
        .iter()
        .filter_map(|p| serde_json::from_value((**p).clone()).ok())
        .collect()
}

fn name_of(o: &Value) -> &str {
    o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()
}

fn admit_pod(objects: &dyn CoreObjects, ns: &str, obj: &Value, dry_run: bool) -> ApiResult<()> {
    let name = refused_name(obj).to_string();
    let sa = service_account_of(obj);
    if !objects.exists("serviceaccounts", ns, &sa) {
        return Err(ApiError::forbidden("", "pods", &name, &missing_service_account(ns, &sa)));
    }
    let quotas = objects.list("resourcequotas", ns);
    if quotas.is_empty() {
        return Ok(());
    }
    let pod: Pod = serde_json::from_value(obj.clone())
        .map_err(|e| ApiError::bad_request(format!("decoding the Pod: {e}")))?;
    let requested = pod_requests(&pod);
    let used = usage_of(&live_pods(objects, ns));
    for q in &quotas {
        let hard = hard_of(q);
        check_quota(name_of(q), &hard, &used, &requested)
            .map_err(|why| ApiError::forbidden("", "pods", &name, &why))?;
    }
    if !dry_run {
        let mut after = used;
        after.add(&requested);
        for q in &quotas {
            write_quota_status(objects, ns, q, &after);
        }
    }
    Ok(())
}

fn hard_of(quota: &Value) -> BTreeMap<String, Quantity> {
    quota
        .pointer("/spec/hard")
        .and_then(|h| serde_json::from_value(h.clone()).ok())
        .unwrap_or_default()
}

/// Write `status` for the usage `used` (best effort: the quota controller corrects it).
fn write_quota_status(objects: &dyn CoreObjects, ns: &str, quota: &Value, used: &Resources) {
    let status = quota_status(&hard_of(quota), used);
    if quota.get("status") == Some(&status) {
        return;
    }
    let mut next = quota.clone();
    next["status"] = status;
    objects.write_status("resourcequotas", ns, next);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hard(entries: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        entries.iter().map(|(k, v)| (k.to_string(), Quantity(v.to_string()))).collect()
    }

    /// (hard, used, requested, expected decision)
    type QuotaCase =
        (Vec<(&'static str, &'static str)>, Resources, Resources, Result<(), &'static str>);

    fn res(milli_cpu: i64, memory: i64, pods: i64) -> Resources {
        Resources { milli_cpu, memory, pods }
    }

    #[test]
    fn quota_decisions_name_only_the_exceeded_resources() {
        const MI: i64 = 1 << 20;
        // (hard, used, requested, expected)
        let cases: Vec<QuotaCase> = vec![
            (vec![("pods", "2")], res(0, 0, 1), res(0, 0, 1), Ok(())),
            (
                vec![("pods", "1")],
                res(0, 0, 1),
                res(0, 0, 1),
                Err("exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1"),
            ),
            // The example of "Configure Memory and CPU Quotas for a Namespace" (kubernetes.io).
            (
                vec![
                    ("limits.cpu", "2"),
                    ("limits.memory", "2Gi"),
                    ("requests.cpu", "1"),
                    ("requests.memory", "1Gi"),
                ],
                res(400, 600 * MI, 1),
                res(400, 700 * MI, 1),
                Err(
                    "exceeded quota: q, requested: requests.memory=700Mi, used: requests.memory=600Mi, limited: requests.memory=1Gi",
                ),
            ),
            (
                vec![("cpu", "1"), ("count/pods", "1")],
                res(500, 0, 1),
                res(600, 0, 1),
                Err(
                    "exceeded quota: q, requested: count/pods=1,cpu=600m, used: count/pods=1,cpu=500m, limited: count/pods=1,cpu=1",
                ),
            ),
            // Untracked resources are not enforced.
            (vec![("services", "0")], res(0, 0, 5), res(0, 0, 1), Ok(())),
        ];
        for (h, used, requested, want) in cases {
            let got = check_quota("q", &hard(&h), &used, &requested);
            assert_eq!(got, want.map_err(str::to_string), "hard {h:?}");
        }
    }

    #[test]
    fn quota_status_reports_hard_and_tracked_usage() {
        let h = hard(&[("pods", "3"), ("requests.memory", "1Gi"), ("services", "2")]);
        let got = quota_status(&h, &res(1500, 512 << 20, 2));
        assert_eq!(
            got,
            json!({"hard": {"pods": "3", "requests.memory": "1Gi", "services": "2"},
                   "used": {"pods": "2", "requests.memory": "512Mi"}})
        );
    }

    #[test]
    fn quantities_are_written_in_kube_units() {
        let cases = [
            (0, "0", "0"),
            (1000, "1", "1k"),
            (1500, "1500m", "1500"),
            (1 << 30, "1073741824m", "1Gi"),
        ];
        for (n, cpu, bytes) in cases {
            assert_eq!(format_milli(n), cpu, "{n} millicores");
            assert_eq!(format_bytes(n), bytes, "{n} bytes");
        }
        assert_eq!(format_bytes(2_000_000), "2M");
        assert_eq!(format_bytes(1536), "1536");
    }

    #[test]
    fn service_account_defaults_to_default() {
        let cases = [
            (json!({"spec": {}}), "default"),
            (json!({"spec": {"serviceAccountName": ""}}), "default"),
            (json!({"spec": {"serviceAccountName": "app"}}), "app"),
            (json!({"spec": {"serviceAccount": "old"}}), "old"),
        ];
        for (pod, want) in cases {
            assert_eq!(service_account_of(&pod), want, "{pod}");
        }
        assert_eq!(
            missing_service_account("ns", "app"),
            "error looking up service account ns/app: serviceaccount \"app\" not found"
        );
    }

    #[test]
    fn terminal_and_deleting_pods_do_not_count() {
        let pod = |phase: &str, deleting: bool| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "p", "deletionTimestamp": deleting.then_some("2026-01-01T00:00:00Z")},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
                "status": {"phase": phase},
            }))
            .expect("pod")
        };
        let pods = [
            pod("Running", false),
            pod("Succeeded", false),
            pod("Failed", false),
            pod("Pending", true),
        ];
        assert_eq!(usage_of(&pods), res(100, 0, 1));
    }
}
