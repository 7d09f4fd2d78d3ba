//! Label and field selectors, parsed as `k8s.io/apimachinery/pkg/labels` and `fields` parse them
//! (<https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors>).
//! Written by hand: no maintained crate parses Kubernetes selector strings.

use crate::status::ApiError;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default)]
pub struct LabelSelector(Vec<Req>);

/// A requirement of a label selector that only objects carrying a label can meet, so that a
/// label index can answer it: the label has one of `values` (`=`, `==`, `in`), or any value
/// (`exists`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Narrowing<'a> {
    Values(&'a str, &'a [String]),
    AnyValue(&'a str),
}

fn split_top(s: &str) -> Vec<String> {
    let mut out = vec![];
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out
}

fn set_values(s: &str) -> Result<Vec<String>, ApiError> {
    let s = s.trim();
    let inner = s.strip_prefix('(').and_then(|x| x.strip_suffix(')')).ok_or_else(|| {
        ApiError::bad_request(format!("unable to parse requirement: found '{s}', expected: '('"))
    })?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = vec![];
        for part in split_top(s) {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            let r = if let Some(k) = p.strip_prefix('!') {
                Req::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = p.split_once("!=") {
                Req::Ne(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once("==") {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once('=') {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once(" notin ") {
                Req::NotIn(k.trim().into(), set_values(v)?)
            } else if let Some((k, v)) = p.split_once(" in ") {
                Req::In(k.trim().into(), set_values(v)?)
            } else if p.contains(' ') || p.contains('(') {
                return Err(ApiError::bad_request(format!("unable to parse requirement: {p}")));
            } else {
                Req::Exists(p.to_string())
            };
            reqs.push(r);
        }
        Ok(LabelSelector(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The requirements an object can meet only by carrying a label (`=`, `==`, `in`,
    /// `exists`); `!=`, `notin` and `!` are also met by objects without the label.
    pub fn narrowings(&self) -> impl Iterator<Item = Narrowing<'_>> {
        self.0.iter().filter_map(|r| match r {
            Req::Eq(k, v) => Some(Narrowing::Values(k, std::slice::from_ref(v))),
            Req::In(k, vs) => Some(Narrowing::Values(k, vs)),
            Req::Exists(k) => Some(Narrowing::AnyValue(k)),
            Req::Ne(..) | Req::NotIn(..) | Req::NotExists(_) => None,
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::Ne(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }
}

/// Does a `metav1.LabelSelector` object (matchLabels/matchExpressions) select these labels?
pub fn label_selector_object_matches(sel: &Value, labels: Option<&Value>) -> bool {
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    if let Some(ml) = sel.get("matchLabels").and_then(Value::as_object)
        && !ml.iter().all(|(k, v)| get(k) == v.as_str())
    {
        return false;
    }
    for e in sel.get("matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        let k = e["key"].as_str().unwrap_or_default();
        let vals: Vec<&str> =
            e["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let ok = match e["operator"].as_str().unwrap_or_default() {
            "In" => get(k).is_some_and(|x| vals.contains(&x)),
            "NotIn" => !get(k).is_some_and(|x| vals.contains(&x)),
            "Exists" => get(k).is_some(),
            "DoesNotExist" => get(k).is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// A parsed field selector over a fixed set of supported field labels.
#[derive(Debug, Clone, Default)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// `allowed` lists the field labels the resource supports besides metadata.name/namespace.
    pub fn parse(s: &str, allowed: &[String]) -> Result<Self, ApiError> {
        let mut reqs = vec![];
        for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, eq, v) = if let Some((k, v)) = p.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = p.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = p.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{p}'"
                )));
            };
            let k = k.trim();
            if k != "metadata.name" && k != "metadata.namespace" && !allowed.iter().any(|a| a == k)
            {
                return Err(ApiError::bad_request(format!("field label not supported: {k}")));
            }
            reqs.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(k, eq, v)| {
            let mut cur = obj;
            for seg in k.split('.') {
                cur = match cur.get(seg) {
                    Some(c) => c,
                    None => &Value::Null,
                };
            }
            let s = match cur {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (s == *v) == *eq
        })
    }
}

/// Field labels kube-apiserver supports per built-in kind (beyond metadata.name/namespace).
pub fn builtin_field_labels(group: &str, plural: &str) -> Vec<String> {
    let v: &[&str] = match (group, plural) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "reason",
            "type",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "nodes") => &["spec.unschedulable"],
        ("batch", "jobs") => &["status.successful"],
        ("apps", "replicasets") => &["status.replicas"],
        _ => &[],
    };
    v.iter().map(|s| s.to_string()).collect()
}
