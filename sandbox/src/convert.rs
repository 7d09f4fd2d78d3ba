//! `events.k8s.io/v1` Events are served from the same storage as core `v1` Events, converted
//! field by field as kube-apiserver converts them
//! (<https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/>).

use serde_json::{Map, Value};

const PAIRS: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];

const SHARED: &[&str] = &[
    "metadata",
    "reason",
    "type",
    "eventTime",
    "series",
    "action",
    "related",
    "reportingInstance",
];

/// Is this the events.k8s.io view of core Events?
pub fn is_events_api(group: &str, plural: &str) -> bool {
    group == "events.k8s.io" && plural == "events"
}

fn rename(v: &Value, from_core: bool, api_version: &str) -> Value {
    let Some(m) = v.as_object() else {
        return v.clone();
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    out.insert("kind".into(), Value::String("Event".into()));
    for k in SHARED {
        if let Some(x) = m.get(*k) {
            out.insert((*k).to_string(), x.clone());
        }
    }
    for (core, ev) in PAIRS {
        let (src, dst) = if from_core { (*core, *ev) } else { (*ev, *core) };
        if let Some(x) = m.get(src) {
            out.insert(dst.to_string(), x.clone());
        }
    }
    Value::Object(out)
}

/// core/v1 Event -> events.k8s.io/v1 Event.
pub fn core_to_events(v: &Value) -> Value {
    rename(v, true, "events.k8s.io/v1")
}

/// events.k8s.io/v1 Event -> core/v1 Event.
pub fn events_to_core(v: &Value) -> Value {
    rename(v, false, "v1")
}
