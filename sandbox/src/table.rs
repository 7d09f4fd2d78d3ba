//! Server-side printing: `meta.k8s.io/v1` Tables for `kubectl get`
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#receiving-resources-as-tables>).
//! Columns follow kube-apiserver's printers for the built-ins and a CRD's
//! `additionalPrinterColumns` (Age when none is given).

use crate::resources::ResourceInfo;
use serde_json::{Value, json};

/// Ages as kube-apiserver prints them (apimachinery `duration.HumanDuration` rules).
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let d = (hours / 24) % 365;
        return if d == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{d}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn age(ts: Option<&str>) -> String {
    let Some(ts) = ts else {
        return "<unknown>".into();
    };
    match ts.parse::<jiff::Timestamp>() {
        Ok(t) => human_duration(jiff::Timestamp::now().as_second() - t.as_second()),
        Err(_) => "<unknown>".into(),
    }
}

fn col(name: &str, ty: &str, format: &str, priority: i64) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": "", "priority": priority})
}

fn count(v: &Value) -> i64 {
    match v {
        Value::Object(m) => m.len() as i64,
        Value::Array(a) => a.len() as i64,
        _ => 0,
    }
}

/// A CRD printer column's cell, as kube-apiserver's table convertor makes it: the first value
/// its JSONPath selects, converted to the column's type; `null` (kubectl's `<none>`) when the
/// path selects nothing or the value does not fit the type. A `string` column prints any
/// value (objects and lists as JSON); a `date` column shows the age.
fn printer_cell(o: &Value, column: &Value) -> Value {
    let path = column["jsonPath"].as_str().unwrap_or_default();
    let Some(v) = crate::jsonpath::first(o, path) else { return Value::Null };
    match (column["type"].as_str().unwrap_or("string"), &v) {
        (_, Value::Null) => Value::Null,
        ("date", Value::String(ts)) => json!(age(Some(ts))),
        ("integer", Value::Number(n)) => {
            n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)).map_or(Value::Null, |i| json!(i))
        }
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, |f| json!(f)),
        ("boolean", Value::Bool(_)) => v,
        ("string", Value::String(_)) => v,
        ("string", Value::Number(_) | Value::Bool(_)) => json!(v.to_string()),
        ("string", Value::Object(_) | Value::Array(_)) => json!(v.to_string()),
        _ => Value::Null,
    }
}

fn s<'a>(o: &'a Value, p: &str) -> &'a str {
    o.pointer(p).and_then(Value::as_str).unwrap_or_default()
}

fn i(o: &Value, p: &str) -> i64 {
    o.pointer(p).and_then(Value::as_i64).unwrap_or(0)
}

fn pod_cells(o: &Value) -> Vec<Value> {
    let total = o.pointer("/spec/containers").map(count).unwrap_or(0);
    let statuses = o
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let ready = statuses.iter().filter(|c| c["ready"] == true).count();
    let restarts: i64 = statuses.iter().map(|c| c["restartCount"].as_i64().unwrap_or(0)).sum();
    let mut reason = s(o, "/status/reason").to_string();
    if reason.is_empty() {
        reason = s(o, "/status/phase").to_string();
    }
    for c in &statuses {
        if let Some(w) = c.pointer("/state/waiting/reason").and_then(Value::as_str) {
            reason = w.to_string();
        } else if let Some(t) = c.pointer("/state/terminated/reason").and_then(Value::as_str) {
            reason = t.to_string();
        }
    }
    if o.pointer("/metadata/deletionTimestamp").is_some() {
        reason = "Terminating".into();
    }
    vec![json!(format!("{ready}/{total}")), json!(reason), json!(restarts)]
}

/// Column definitions and per-object cells (after the Name cell, before Age when `age_last`).
fn columns(ri: &ResourceInfo) -> (Vec<Value>, bool) {
    if ri.custom {
        let mut cols = vec![];
        let mut pcs = ri.printer_columns.clone();
        if pcs.is_empty() {
            pcs.push(
                json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}),
            );
        }
        for c in &pcs {
            cols.push(json!({
                "name": c["name"],
                "type": c["type"],
                "format": c.get("format").cloned().unwrap_or(json!("")),
                "description": c.get("description").cloned().unwrap_or(json!("")),
                "priority": c.get("priority").cloned().unwrap_or(json!(0)),
            }));
        }
        return (cols, false);
    }
    let c = |n: &str| col(n, "string", "", 0);
    let ci = |n: &str| col(n, "integer", "", 0);
    let cols = match (ri.group.as_str(), ri.plural.as_str()) {
        ("apiextensions.k8s.io", "customresourcedefinitions")
        | ("rbac.authorization.k8s.io", "roles")
        | ("rbac.authorization.k8s.io", "clusterroles") => {
            return (vec![col("Created At", "date", "", 0)], false);
        }
        ("", "configmaps") => vec![ci("Data")],
        ("", "secrets") => vec![c("Type"), ci("Data")],
        ("", "serviceaccounts") => vec![ci("Secrets")],
        ("", "namespaces") => vec![c("Status")],
        ("", "pods") => vec![c("Ready"), c("Status"), c("Restarts")],
        ("", "services") => vec![c("Type"), c("Cluster-IP"), c("External-IP"), c("Port(s)")],
        ("", "endpoints") => vec![c("Endpoints")],
        ("", "nodes") => vec![c("Status"), c("Roles")],
        ("", "persistentvolumeclaims") => vec![
            c("Status"),
            c("Volume"),
            c("Capacity"),
            c("Access Modes"),
            c("StorageClass"),
            c("VolumeAttributesClass"),
        ],
        ("apps", "deployments") => vec![c("Ready"), ci("Up-to-date"), ci("Available")],
        ("apps", "replicasets") => vec![ci("Desired"), ci("Current"), ci("Ready")],
        ("apps", "statefulsets") => vec![c("Ready")],
        ("batch", "jobs") => vec![c("Status"), c("Completions"), c("Duration")],
        ("rbac.authorization.k8s.io", "rolebindings")
        | ("rbac.authorization.k8s.io", "clusterrolebindings") => vec![c("Role")],
        ("coordination.k8s.io", "leases") => vec![c("Holder")],
        ("admissionregistration.k8s.io", _) => vec![ci("Webhooks")],
        _ => vec![],
    };
    (cols, true)
}

fn cells(ri: &ResourceInfo, o: &Value) -> Vec<Value> {
    if ri.custom {
        let mut pcs = ri.printer_columns.clone();
        if pcs.is_empty() {
            pcs.push(
                json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}),
            );
        }
        return pcs.iter().map(|c| printer_cell(o, c)).collect();
    }
    match (ri.group.as_str(), ri.plural.as_str()) {
        ("apiextensions.k8s.io", "customresourcedefinitions")
        | ("rbac.authorization.k8s.io", "roles")
        | ("rbac.authorization.k8s.io", "clusterroles") => {
            vec![json!(s(o, "/metadata/creationTimestamp"))]
        }
        ("", "configmaps") => vec![json!(
            o.get("data").map(count).unwrap_or(0) + o.get("binaryData").map(count).unwrap_or(0)
        )],
        ("", "secrets") => vec![json!(s(o, "/type")), json!(o.get("data").map(count).unwrap_or(0))],
        ("", "serviceaccounts") => vec![json!(o.get("secrets").map(count).unwrap_or(0))],
        ("", "namespaces") => vec![json!(s(o, "/status/phase"))],
        ("", "pods") => pod_cells(o),
        ("", "services") => {
            let ports: Vec<String> = o
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP")))
                .collect();
            let ports = if ports.is_empty() { "<none>".to_string() } else { ports.join(",") };
            let cip = s(o, "/spec/clusterIP");
            vec![
                json!(s(o, "/spec/type")),
                json!(if cip.is_empty() { "<none>" } else { cip }),
                json!("<none>"),
                json!(ports),
            ]
        }
        ("", "endpoints") => {
            let mut eps = vec![];
            for sub in o.get("subsets").and_then(Value::as_array).into_iter().flatten() {
                for a in sub["addresses"].as_array().into_iter().flatten() {
                    for p in sub["ports"].as_array().into_iter().flatten() {
                        eps.push(format!("{}:{}", a["ip"].as_str().unwrap_or_default(), p["port"]));
                    }
                }
            }
            vec![json!(if eps.is_empty() { "<none>".to_string() } else { eps.join(",") })]
        }
        ("", "nodes") => {
            let ready = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .map(|c| if c["status"] == "True" { "Ready" } else { "NotReady" })
                .unwrap_or("Unknown");
            vec![json!(ready), json!("<none>")]
        }
        ("", "persistentvolumeclaims") => vec![
            json!(s(o, "/status/phase")),
            json!(s(o, "/spec/volumeName")),
            json!(s(o, "/status/capacity/storage")),
            json!(""),
            json!(o.pointer("/spec/storageClassName").and_then(Value::as_str).unwrap_or("<unset>")),
            json!("<unset>"),
        ],
        ("apps", "deployments") => vec![
            json!(format!("{}/{}", i(o, "/status/readyReplicas"), i(o, "/spec/replicas"))),
            json!(i(o, "/status/updatedReplicas")),
            json!(i(o, "/status/availableReplicas")),
        ],
        ("apps", "replicasets") => vec![
            json!(i(o, "/spec/replicas")),
            json!(i(o, "/status/replicas")),
            json!(i(o, "/status/readyReplicas")),
        ],
        ("apps", "statefulsets") => {
            vec![json!(format!("{}/{}", i(o, "/status/readyReplicas"), i(o, "/spec/replicas")))]
        }
        ("batch", "jobs") => {
            let conds = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let has = |t: &str| conds.iter().any(|c| c["type"] == t && c["status"] == "True");
            let st = if has("Complete") {
                "Complete"
            } else if has("Failed") {
                "Failed"
            } else {
                "Running"
            };
            let completions = o.pointer("/spec/completions").and_then(Value::as_i64).unwrap_or(1);
            vec![
                json!(st),
                json!(format!("{}/{}", i(o, "/status/succeeded"), completions)),
                json!(""),
            ]
        }
        ("rbac.authorization.k8s.io", "rolebindings")
        | ("rbac.authorization.k8s.io", "clusterrolebindings") => {
            vec![json!(format!("{}/{}", s(o, "/roleRef/kind"), s(o, "/roleRef/name")))]
        }
        ("coordination.k8s.io", "leases") => vec![json!(s(o, "/spec/holderIdentity"))],
        ("admissionregistration.k8s.io", _) => {
            vec![json!(o.get("webhooks").map(count).unwrap_or(0))]
        }
        _ => vec![],
    }
}

/// Does the Accept header ask for a Table?
pub fn wants_table(accept: &str) -> bool {
    accept.split(',').next().is_some_and(|first| first.contains("as=Table"))
}

fn is_core_event(ri: &ResourceInfo) -> bool {
    !ri.custom && ri.plural == "events"
}

/// The event printer: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE (+ wide columns).
fn event_cells(o: &Value) -> Vec<Value> {
    let last = o
        .get("lastTimestamp")
        .and_then(Value::as_str)
        .or_else(|| o.get("eventTime").and_then(Value::as_str))
        .or_else(|| o.pointer("/metadata/creationTimestamp").and_then(Value::as_str));
    let io = o.get("involvedObject").or_else(|| o.get("regarding")).cloned().unwrap_or(json!({}));
    let object = format!("{}/{}", s(&io, "/kind").to_lowercase(), s(&io, "/name"));
    let source = o
        .pointer("/source/component")
        .and_then(Value::as_str)
        .unwrap_or(s(o, "/reportingController"));
    vec![
        json!(age(last)),
        json!(s(o, "/type")),
        json!(s(o, "/reason")),
        json!(object),
        json!(s(&io, "/fieldPath")),
        json!(source),
        json!(
            o.get("message").or_else(|| o.get("note")).and_then(Value::as_str).unwrap_or_default()
        ),
        json!(age(o.get("firstTimestamp").and_then(Value::as_str).or(last))),
        json!(o.get("count").and_then(Value::as_i64).unwrap_or(1)),
        json!(s(o, "/metadata/name")),
    ]
}

fn row(ri: &ResourceInfo, o: &Value, include: &str) -> Value {
    let (_, age_last) = columns(ri);
    let mut c = vec![];
    if is_core_event(ri) {
        c = event_cells(o);
    } else {
        c.push(json!(o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()));
        c.extend(cells(ri, o));
        if age_last {
            c.push(json!(age(o.pointer("/metadata/creationTimestamp").and_then(Value::as_str))));
        }
        c.extend(wide_cells(ri, o));
    }
    let mut r = json!({"cells": c});
    match include {
        "None" => {}
        "Object" => r["object"] = o.clone(),
        _ => {
            r["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o.get("metadata").cloned().unwrap_or(json!({}))});
        }
    }
    r
}

pub fn column_definitions(ri: &ResourceInfo) -> Vec<Value> {
    if is_core_event(ri) {
        return vec![
            col("Last Seen", "string", "", 0),
            col("Type", "string", "", 0),
            col("Reason", "string", "", 0),
            col("Object", "string", "", 0),
            col("Subobject", "string", "", 1),
            col("Source", "string", "", 1),
            col("Message", "string", "", 0),
            col("First Seen", "string", "", 1),
            col("Count", "string", "", 1),
            col("Name", "string", "name", 1),
        ];
    }
    let (cols, age_last) = columns(ri);
    let mut defs = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names", "priority": 0}),
    ];
    defs.extend(cols);
    if age_last {
        defs.push(json!({"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created.", "priority": 0}));
    }
    defs.extend(wide_columns(ri).into_iter().map(|n| col(n, "string", "", 1)));
    defs
}

/// `-o wide` columns (priority 1) of the built-in printers.
fn wide_columns(ri: &ResourceInfo) -> Vec<&'static str> {
    if ri.custom {
        return vec![];
    }
    match (ri.group.as_str(), ri.plural.as_str()) {
        ("", "pods") => vec!["IP", "Node", "Nominated Node", "Readiness Gates"],
        ("apps", "deployments") | ("apps", "replicasets") | ("apps", "statefulsets") => {
            vec!["Containers", "Images", "Selector"]
        }
        ("", "services") => vec!["Selector"],
        _ => vec![],
    }
}

fn wide_cells(ri: &ResourceInfo, o: &Value) -> Vec<Value> {
    let none = |x: String| {
        if x.is_empty() { "<none>".to_string() } else { x }
    };
    match wide_columns(ri).first() {
        Some(&"IP") => vec![
            json!(none(s(o, "/status/podIP").to_string())),
            json!(none(s(o, "/spec/nodeName").to_string())),
            json!(none(s(o, "/status/nominatedNodeName").to_string())),
            json!("<none>"),
        ],
        Some(&"Containers") => {
            let cs: Vec<&Value> = o
                .pointer("/spec/template/spec/containers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .collect();
            let names: Vec<&str> = cs.iter().filter_map(|c| c["name"].as_str()).collect();
            let images: Vec<&str> = cs.iter().filter_map(|c| c["image"].as_str()).collect();
            let sel: Vec<String> = o
                .pointer("/spec/selector/matchLabels")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect();
            vec![json!(names.join(",")), json!(images.join(",")), json!(none(sel.join(",")))]
        }
        Some(&"Selector") => {
            let sel: Vec<String> = o
                .pointer("/spec/selector")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect();
            vec![json!(none(sel.join(",")))]
        }
        _ => vec![],
    }
}

/// A Table of objects; `meta` is the list metadata (resourceVersion, continue).
pub fn table(
    ri: &ResourceInfo,
    objs: &[Value],
    meta: Value,
    include: &str,
    with_columns: bool,
) -> Value {
    let mut t = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "rows": objs.iter().map(|o| row(ri, o, include)).collect::<Vec<_>>(),
    });
    if with_columns {
        t["columnDefinitions"] = json!(column_definitions(ri));
    } else {
        t["columnDefinitions"] = Value::Null;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Printer-column cells: the first value the JSONPath selects, in the column's type.
    #[test]
    fn printer_cells_follow_the_column_type() {
        let o = json!({"spec": {"replicas": 3.0, "ratio": 2, "on": true, "labels": {"a": "b"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let column = |ty: &str, path: &str| json!({"type": ty, "jsonPath": path});
        let cases = [
            (column("string", r#".status.conditions[?(@.type=="Ready")].status"#), json!("True")),
            (column("string", ".status.conditions[?(@.type=='Stalled')].status"), Value::Null),
            (column("integer", ".spec.replicas"), json!(3)),
            (column("number", ".spec.ratio"), json!(2.0)),
            (column("boolean", ".spec.on"), json!(true)),
            (column("string", ".spec.on"), json!("true")),
            (column("string", ".spec.labels"), json!(r#"{"a":"b"}"#)),
            (column("integer", ".spec.labels"), Value::Null),
            (column("string", ".spec.missing"), Value::Null),
        ];
        for (c, want) in cases {
            assert_eq!(printer_cell(&o, &c), want, "{c}");
        }
    }
}
