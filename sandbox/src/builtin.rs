//! Per-kind registry strategies of kube-apiserver that clients observe: status reset on create,
//! defaulting of the fields `kubectl get -o yaml` shows, and name validation
//! (<https://kubernetes.io/docs/concepts/overview/working-with-objects/names/>).

use crate::resources::ResourceInfo;
use serde_json::{Value, json};

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label)
}

/// Validate `metadata.name`; `Err((detail))` is the message after `Invalid value: "name": `.
pub fn validate_name(ri: &ResourceInfo, name: &str) -> Result<(), String> {
    match (ri.group.as_str(), ri.plural.as_str()) {
        ("", "namespaces") | ("", "services") => {
            if !is_label(name) {
                return Err(DNS1123_LABEL_MSG.to_string());
            }
        }
        ("rbac.authorization.k8s.io", _)
        | ("authorization.k8s.io", _)
        | ("authentication.k8s.io", _) => {
            if name == "." || name == ".." || name.contains('/') || name.contains('%') {
                return Err(format!("may not contain '/' or '%' or be '.' or '..': {name}"));
            }
        }
        _ => {
            if !is_subdomain(name) {
                return Err(DNS1123_SUBDOMAIN_MSG.to_string());
            }
        }
    }
    Ok(())
}

fn set_default(obj: &mut Value, key: &str, v: Value) {
    if let Some(m) = obj.as_object_mut() {
        m.entry(key.to_string()).or_insert(v);
    }
}

/// Defaults of `core/v1` PodSpec (pkg/apis/core/v1/defaults.go) that show up in `get -o yaml`.
pub fn default_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    // A volume without a source is an emptyDir (SetDefaults_Volume).
    if let Some(vs) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        for v in vs {
            if v.as_object().is_some_and(|m| m.keys().all(|k| k == "name")) {
                set_default(v, "emptyDir", json!({}));
            }
            // File modes of projected sources default to 0644 (SetDefaults_*VolumeSource).
            for src in ["secret", "configMap", "projected", "downwardAPI"] {
                if let Some(sv) = v.get_mut(src)
                    && sv.is_object()
                {
                    set_default(sv, "defaultMode", json!(420));
                }
            }
        }
    }
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs {
                let image = c["image"].as_str().unwrap_or_default().to_string();
                let last = image.rsplit('/').next().unwrap_or_default();
                let latest =
                    !last.contains(':') && !image.contains('@') || last.ends_with(":latest");
                set_default(
                    c,
                    "imagePullPolicy",
                    json!(if latest { "Always" } else { "IfNotPresent" }),
                );
                set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
                set_default(c, "terminationMessagePolicy", json!("File"));
                set_default(c, "resources", json!({}));
                if let Some(ps) = c.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ps {
                        set_default(p, "protocol", json!("TCP"));
                    }
                }
                // SetDefaults_Probe and SetDefaults_HTTPGetAction.
                for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
                    if let Some(pr) = c.get_mut(probe)
                        && pr.is_object()
                    {
                        set_default(pr, "timeoutSeconds", json!(1));
                        set_default(pr, "periodSeconds", json!(10));
                        set_default(pr, "successThreshold", json!(1));
                        set_default(pr, "failureThreshold", json!(3));
                        if let Some(h) = pr.get_mut("httpGet")
                            && h.is_object()
                        {
                            set_default(h, "path", json!("/"));
                            set_default(h, "scheme", json!("HTTP"));
                        }
                    }
                }
                // SetDefaults_ObjectFieldSelector.
                if let Some(env) = c.get_mut("env").and_then(Value::as_array_mut) {
                    for e in env {
                        if let Some(f) = e.pointer_mut("/valueFrom/fieldRef")
                            && f.is_object()
                        {
                            set_default(f, "apiVersion", json!("v1"));
                        }
                    }
                }
            }
        }
    }
}

fn default_template(obj: &mut Value) {
    if let Some(spec) = obj.pointer_mut("/spec/template/spec") {
        default_pod_spec(spec);
    }
}

/// A Secret's `stringData` is write-only: kube-apiserver merges it into `data` (base64-encoded,
/// over any `data` entry of the same key) when it converts the request, and never stores it.
fn merge_string_data(obj: &mut Value) {
    use base64::Engine as _;
    let Some(Value::Object(strings)) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    if !obj["data"].is_object() {
        obj["data"] = json!({});
    }
    let data = obj["data"].as_object_mut().expect("data is an object");
    for (key, value) in strings {
        let text = value.as_str().unwrap_or_default();
        data.insert(key, json!(base64::engine::general_purpose::STANDARD.encode(text)));
    }
}

/// Defaulting applied on every write (kube-apiserver defaults on decode).
pub fn apply_defaults(ri: &ResourceInfo, obj: &mut Value) {
    if ri.custom {
        return;
    }
    match (ri.group.as_str(), ri.plural.as_str()) {
        ("", "pods") => {
            if let Some(spec) = obj.get_mut("spec") {
                default_pod_spec(spec);
                set_default(spec, "enableServiceLinks", json!(true));
                set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
                set_default(spec, "priority", json!(0));
            }
        }
        ("", "secrets") => {
            merge_string_data(obj);
            set_default(obj, "type", json!("Opaque"));
        }
        ("", "services") => {
            if let Some(spec) = obj.get_mut("spec") {
                set_default(spec, "type", json!("ClusterIP"));
                set_default(spec, "sessionAffinity", json!("None"));
                if let Some(ps) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ps {
                        set_default(p, "protocol", json!("TCP"));
                        let port = p["port"].clone();
                        set_default(p, "targetPort", port);
                    }
                }
            }
        }
        ("apps", "deployments") => {
            if let Some(spec) = obj.get_mut("spec") {
                set_default(spec, "replicas", json!(1));
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(spec, "progressDeadlineSeconds", json!(600));
                set_default(spec, "strategy", json!({}));
                if let Some(st) = spec.get_mut("strategy") {
                    set_default(st, "type", json!("RollingUpdate"));
                    if st["type"] == "RollingUpdate" {
                        set_default(st, "rollingUpdate", json!({}));
                        if let Some(ru) = st.get_mut("rollingUpdate") {
                            set_default(ru, "maxSurge", json!("25%"));
                            set_default(ru, "maxUnavailable", json!("25%"));
                        }
                    }
                }
            }
            default_template(obj);
        }
        ("apps", "replicasets") => {
            if let Some(spec) = obj.get_mut("spec") {
                set_default(spec, "replicas", json!(1));
            }
            default_template(obj);
        }
        ("apps", "statefulsets") => {
            if let Some(spec) = obj.get_mut("spec") {
                set_default(spec, "replicas", json!(1));
                set_default(spec, "podManagementPolicy", json!("OrderedReady"));
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(
                    spec,
                    "updateStrategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
                );
                set_default(
                    spec,
                    "persistentVolumeClaimRetentionPolicy",
                    json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
                );
            }
            default_template(obj);
        }
        ("apps", "daemonsets") => {
            if let Some(spec) = obj.get_mut("spec") {
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(
                    spec,
                    "updateStrategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}),
                );
            }
            default_template(obj);
        }
        ("batch", "jobs") => {
            if let Some(spec) = obj.get_mut("spec") {
                set_default(spec, "backoffLimit", json!(6));
                set_default(spec, "completions", json!(1));
                set_default(spec, "parallelism", json!(1));
                set_default(spec, "completionMode", json!("NonIndexed"));
                set_default(spec, "suspend", json!(false));
                set_default(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
                set_default(spec, "manualSelector", json!(false));
            }
            if let Some(spec) = obj.pointer_mut("/spec/template/spec") {
                default_pod_spec(spec);
            }
        }
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            // SetDefaults_Subject: users and groups are RBAC subjects.
            if let Some(subjects) = obj.get_mut("subjects").and_then(Value::as_array_mut) {
                for sub in subjects {
                    // A ServiceAccount's group is "", which is not serialized.
                    if matches!(sub["kind"].as_str(), Some("User" | "Group")) {
                        set_default(sub, "apiGroup", json!("rbac.authorization.k8s.io"));
                    }
                }
            }
        }
        ("batch", "cronjobs") => {
            if let Some(spec) = obj.get_mut("spec") {
                set_default(spec, "concurrencyPolicy", json!("Allow"));
                set_default(spec, "suspend", json!(false));
                set_default(spec, "successfulJobsHistoryLimit", json!(3));
                set_default(spec, "failedJobsHistoryLimit", json!(1));
            }
            if let Some(spec) = obj.pointer_mut("/spec/jobTemplate/spec/template/spec") {
                default_pod_spec(spec);
            }
        }
        _ => {}
    }
}

/// Status on create (the registry strategies' PrepareForCreate).
pub fn prepare_create(ri: &ResourceInfo, obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else { return };
    match (ri.group.as_str(), ri.plural.as_str()) {
        ("", "namespaces") => {
            m.insert("status".into(), json!({"phase": "Active"}));
            let spec = m.entry("spec").or_insert_with(|| json!({}));
            spec["finalizers"] = json!(["kubernetes"]);
        }
        ("", "pods") => {
            m.insert("status".into(), json!({"phase": "Pending", "qosClass": "BestEffort"}));
        }
        ("", "services") => {
            m.insert("status".into(), json!({"loadBalancer": {}}));
            // ClusterIP allocation from the default service CIDR 10.96.0.0/12 (stable per name).
            let ty = m
                .get("spec")
                .and_then(|s| s.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("ClusterIP")
                .to_string();
            let key = format!(
                "{}/{}",
                m.get("metadata")
                    .and_then(|x| x.get("namespace"))
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                m.get("metadata")
                    .and_then(|x| x.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            );
            if let Some(spec) = m.get_mut("spec").and_then(Value::as_object_mut) {
                if ty != "ExternalName" && !spec.contains_key("clusterIP") {
                    let h = key
                        .bytes()
                        .fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619));
                    let ip = if key == "default/kubernetes" {
                        "10.96.0.1".to_string()
                    } else {
                        format!("10.{}.{}.{}", 96 + (h >> 16) % 16, (h >> 8) % 256, 2 + h % 250)
                    };
                    spec.insert("clusterIP".into(), json!(ip));
                    spec.insert("clusterIPs".into(), json!([ip]));
                }
                if ty != "ExternalName" {
                    spec.entry("ipFamilies").or_insert(json!(["IPv4"]));
                    spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
                    spec.entry("internalTrafficPolicy").or_insert(json!("Cluster"));
                }
            }
        }
        ("", "nodes") | ("", "persistentvolumes") => {}
        ("", "persistentvolumeclaims") => {
            m.insert("status".into(), json!({"phase": "Pending"}));
        }
        _ if ri.status => {
            if ri.custom {
                m.remove("status");
            } else {
                m.insert("status".into(), json!({}));
            }
        }
        _ => {}
    }
}
