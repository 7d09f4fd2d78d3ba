//! Defaults and validation of `admissionregistration.k8s.io/v1` Mutating- and
//! ValidatingWebhookConfigurations, following kube-apiserver's
//! `pkg/apis/admissionregistration/v1/defaults.go` and
//! `pkg/apis/admissionregistration/validation/validation.go` (the field errors name the same
//! paths and say the same thing). Hand-written: the rules are data checks on a JSON object
//! and no maintained crate carries them.

use crate::metavalid::{Cause, is_dns_subdomain, label_value_errors, qualified_name_errors};
use crate::resources::ResourceInfo;
use serde_json::{Value, json};
use std::collections::HashSet;

/// The AdmissionReview versions the sandbox can send, in order of preference.
pub const SUPPORTED_REVIEW_VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// Which configuration kind an object is, if it is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigKind {
    /// MutatingWebhookConfiguration.
    Mutating,
    /// ValidatingWebhookConfiguration.
    Validating,
}

/// The configuration kind served at `ri`, if any.
pub fn config_kind(ri: &ResourceInfo) -> Option<ConfigKind> {
    if ri.group != "admissionregistration.k8s.io" {
        return None;
    }
    match ri.plural.as_str() {
        "mutatingwebhookconfigurations" => Some(ConfigKind::Mutating),
        "validatingwebhookconfigurations" => Some(ConfigKind::Validating),
        _ => None,
    }
}

fn default_member(o: &mut Value, key: &str, v: Value) {
    if let Some(m) = o.as_object_mut()
        && m.get(key).is_none_or(Value::is_null)
    {
        m.insert(key.to_string(), v);
    }
}

/// kube-apiserver's v1 defaults for each webhook (a no-op for other kinds).
pub fn apply_defaults(ri: &ResourceInfo, obj: &mut Value) {
    let Some(kind) = config_kind(ri) else { return };
    for wh in obj.get_mut("webhooks").and_then(Value::as_array_mut).into_iter().flatten() {
        default_webhook(wh, kind);
    }
}

fn default_webhook(wh: &mut Value, kind: ConfigKind) {
    default_member(wh, "failurePolicy", json!("Fail"));
    default_member(wh, "matchPolicy", json!("Equivalent"));
    default_member(wh, "namespaceSelector", json!({}));
    default_member(wh, "objectSelector", json!({}));
    default_member(wh, "timeoutSeconds", json!(10));
    if kind == ConfigKind::Mutating {
        default_member(wh, "reinvocationPolicy", json!("Never"));
    }
    for rule in wh.get_mut("rules").and_then(Value::as_array_mut).into_iter().flatten() {
        default_member(rule, "scope", json!("*"));
    }
    if let Some(svc) = wh.pointer_mut("/clientConfig/service").filter(|s| s.is_object()) {
        default_member(svc, "port", json!(443));
    }
}

fn required(field: String, msg: &str) -> Cause {
    let m = if msg.is_empty() {
        "Required value".to_string()
    } else {
        format!("Required value: {msg}")
    };
    (field, "FieldValueRequired".into(), m)
}

fn invalid(field: String, value: &Value, msg: &str) -> Cause {
    (field, "FieldValueInvalid".into(), format!("Invalid value: {}: {msg}", go_value(value)))
}

fn not_supported(field: String, value: &Value, allowed: &[&str]) -> Cause {
    let a: Vec<String> = allowed.iter().map(|x| format!("{x:?}")).collect();
    (
        field,
        "FieldValueNotSupported".into(),
        format!("Unsupported value: {}: supported values: {}", go_value(value), a.join(", ")),
    )
}

/// A value as apimachinery's field errors print it (strings quoted, lists as Go slices).
fn go_value(v: &Value) -> String {
    match v {
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(go_value).collect();
            format!("[]string{{{}}}", items.join(", "))
        }
        other => other.to_string(),
    }
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str).collect()
}

/// Field errors of a webhook configuration (empty for other kinds).
pub fn validate(ri: &ResourceInfo, obj: &Value) -> Vec<Cause> {
    let Some(kind) = config_kind(ri) else { return vec![] };
    let mut out = vec![];
    let mut names = HashSet::new();
    for (i, wh) in obj["webhooks"].as_array().into_iter().flatten().enumerate() {
        let at = format!("webhooks[{i}]");
        let name = wh["name"].as_str().unwrap_or_default();
        if !name.is_empty() && !names.insert(name.to_string()) {
            out.push((
                format!("{at}.name"),
                "FieldValueDuplicate".into(),
                format!("Duplicate value: {name:?}"),
            ));
        }
        out.extend(validate_webhook(wh, &at, kind));
    }
    out
}

fn validate_webhook(wh: &Value, at: &str, kind: ConfigKind) -> Vec<Cause> {
    let mut out = vec![];
    let name = wh["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        out.push(required(format!("{at}.name"), ""));
    } else if !is_dns_subdomain(name) || name.split('.').count() < 3 {
        let msg = if is_dns_subdomain(name) {
            "should be a domain with at least three segments separated by dots"
        } else {
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        };
        out.push(invalid(format!("{at}.name"), &wh["name"], msg));
    }
    for (j, rule) in wh["rules"].as_array().into_iter().flatten().enumerate() {
        out.extend(validate_rule(rule, &format!("{at}.rules[{j}]")));
    }
    out.extend(validate_enum(wh, at, "failurePolicy", &["Fail", "Ignore"]));
    out.extend(validate_enum(wh, at, "matchPolicy", &["Exact", "Equivalent"]));
    if kind == ConfigKind::Mutating {
        out.extend(validate_enum(wh, at, "reinvocationPolicy", &["Never", "IfNeeded"]));
    }
    match wh.get("sideEffects").and_then(Value::as_str) {
        None => out
            .push(required(format!("{at}.sideEffects"), "must specify one of None, NoneOnDryRun")),
        Some("None" | "NoneOnDryRun") => {}
        Some(_) => out.push(not_supported(
            format!("{at}.sideEffects"),
            &wh["sideEffects"],
            &["None", "NoneOnDryRun"],
        )),
    }
    if let Some(t) = wh.get("timeoutSeconds").filter(|t| !t.is_null())
        && !t.as_i64().is_some_and(|t| (1..=30).contains(&t))
    {
        out.push(invalid(
            format!("{at}.timeoutSeconds"),
            t,
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    let versions = strings(&wh["admissionReviewVersions"]);
    if versions.is_empty() {
        out.push(required(
            format!("{at}.admissionReviewVersions"),
            "must specify one of v1, v1beta1",
        ));
    } else {
        let mut seen = HashSet::new();
        for (j, v) in versions.iter().enumerate() {
            if !seen.insert(*v) {
                out.push((
                    format!("{at}.admissionReviewVersions[{j}]"),
                    "FieldValueDuplicate".into(),
                    format!("Duplicate value: {v:?}"),
                ));
            }
        }
        if !versions.iter().any(|v| SUPPORTED_REVIEW_VERSIONS.contains(v)) {
            out.push(invalid(
                format!("{at}.admissionReviewVersions"),
                &wh["admissionReviewVersions"],
                "must include at least one of v1, v1beta1",
            ));
        }
    }
    for sel in ["namespaceSelector", "objectSelector"] {
        out.extend(validate_label_selector(&wh[sel], &format!("{at}.{sel}")));
    }
    out.extend(validate_client_config(&wh["clientConfig"], &format!("{at}.clientConfig")));
    out.extend(validate_match_conditions(&wh["matchConditions"], &format!("{at}.matchConditions")));
    out
}

fn validate_enum(wh: &Value, at: &str, key: &str, allowed: &[&str]) -> Option<Cause> {
    let v = wh.get(key).filter(|v| !v.is_null())?;
    (!v.as_str().is_some_and(|s| allowed.contains(&s)))
        .then(|| not_supported(format!("{at}.{key}"), v, allowed))
}

const OPERATIONS: [&str; 5] = ["*", "CREATE", "UPDATE", "DELETE", "CONNECT"];

fn validate_rule(rule: &Value, at: &str) -> Vec<Cause> {
    let mut out = vec![];
    let ops = strings(&rule["operations"]);
    if ops.is_empty() {
        out.push(required(format!("{at}.operations"), ""));
    }
    if ops.len() > 1 && ops.contains(&"*") {
        out.push(invalid(
            format!("{at}.operations"),
            &rule["operations"],
            "if '*' is present, must not specify other operations",
        ));
    }
    for (k, op) in ops.iter().enumerate() {
        if !OPERATIONS.contains(op) {
            out.push(not_supported(format!("{at}.operations[{k}]"), &json!(op), &OPERATIONS));
        }
    }
    for key in ["apiGroups", "apiVersions"] {
        let list = strings(&rule[key]);
        if list.is_empty() {
            out.push(required(format!("{at}.{key}"), ""));
        }
        if list.len() > 1 && list.contains(&"*") {
            out.push(invalid(
                format!("{at}.{key}"),
                &rule[key],
                &format!("if '*' is present, must not specify other {key}"),
            ));
        }
        if key == "apiVersions" && list.contains(&"") {
            out.push(required(
                format!("{at}.apiVersions"),
                "resource must have non-empty apiVersions",
            ));
        }
    }
    out.extend(validate_resources(&rule["resources"], &format!("{at}.resources")));
    if let Some(scope) = rule.get("scope").filter(|s| !s.is_null())
        && !scope.as_str().is_some_and(|s| matches!(s, "*" | "Cluster" | "Namespaced"))
    {
        out.push(not_supported(format!("{at}.scope"), scope, &["Cluster", "Namespaced", "*"]));
    }
    out
}

/// Resource names: `resource`, `resource/subresource`, `*`, `*/subresource`, `resource/*`, `*/*`.
fn validate_resources(v: &Value, at: &str) -> Vec<Cause> {
    let res = strings(v);
    if res.is_empty() {
        return vec![required(at.to_string(), "")];
    }
    let mut out = vec![];
    let mut seen = HashSet::new();
    let has_all = res.contains(&"*/*");
    for (k, r) in res.iter().enumerate() {
        let field = format!("{at}[{k}]");
        if r.is_empty() {
            out.push(required(field, ""));
            continue;
        }
        if !seen.insert(*r) {
            out.push((
                field.clone(),
                "FieldValueDuplicate".into(),
                format!("Duplicate value: {r:?}"),
            ));
        }
        if r.matches('/').count() > 1 {
            out.push(invalid(
                field,
                &json!(r),
                "must be of the form 'resource', 'resource/subresource', or '*/*'",
            ));
            continue;
        }
        if has_all && *r != "*/*" {
            out.push(invalid(
                field,
                &json!(r),
                "if '*/*' is present, must not specify other resources",
            ));
        } else if res.contains(&"*") && *r != "*" && !r.contains('/') {
            out.push(invalid(
                field,
                &json!(r),
                "if '*' is present, must not specify other resources without subresources",
            ));
        }
    }
    out
}

fn validate_label_selector(sel: &Value, at: &str) -> Vec<Cause> {
    let mut out = vec![];
    if sel.is_null() {
        return out;
    }
    for (k, v) in sel["matchLabels"].as_object().into_iter().flatten() {
        for e in qualified_name_errors(k) {
            out.push(invalid(format!("{at}.matchLabels"), &json!(k), &e));
        }
        let v = v.as_str().unwrap_or_default();
        for e in label_value_errors(v) {
            out.push(invalid(format!("{at}.matchLabels"), &json!(v), &e));
        }
    }
    for (i, req) in sel["matchExpressions"].as_array().into_iter().flatten().enumerate() {
        let f = format!("{at}.matchExpressions[{i}]");
        let values = req["values"].as_array().map(Vec::len).unwrap_or_default();
        match req["operator"].as_str().unwrap_or_default() {
            "In" | "NotIn" if values == 0 => out.push(required(
                format!("{f}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if values > 0 => out.push((
                format!("{f}.values"),
                "FieldValueForbidden".into(),
                "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                    .into(),
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            _ => out.push(invalid(
                format!("{f}.operator"),
                &req["operator"],
                "not a valid selector operator",
            )),
        }
        let key = req["key"].as_str().unwrap_or_default();
        for e in qualified_name_errors(key) {
            out.push(invalid(format!("{f}.key"), &json!(key), &e));
        }
    }
    out
}

fn validate_client_config(cc: &Value, at: &str) -> Vec<Cause> {
    let url = cc.get("url").filter(|u| !u.is_null());
    let svc = cc.get("service").filter(|s| !s.is_null());
    match (url, svc) {
        (Some(_), Some(_)) | (None, None) => {
            vec![required(at.to_string(), "exactly one of url or service is required")]
        }
        (Some(u), None) => {
            let s = u.as_str().unwrap_or_default();
            if !s.starts_with("https://") {
                vec![invalid(format!("{at}.url"), u, "'https' is the only allowed URL scheme")]
            } else if s.contains('#') || s.contains('@') {
                vec![invalid(
                    format!("{at}.url"),
                    u,
                    "fragments and user information are not permitted in the URL",
                )]
            } else {
                vec![]
            }
        }
        (None, Some(s)) => {
            let mut out = vec![];
            for key in ["namespace", "name"] {
                if s[key].as_str().is_none_or(str::is_empty) {
                    out.push(required(
                        format!("{at}.service.{key}"),
                        &format!("service {key} is required"),
                    ));
                }
            }
            if let Some(p) = s.get("port").filter(|p| !p.is_null())
                && !p.as_i64().is_some_and(|p| (1..=65535).contains(&p))
            {
                out.push(invalid(
                    format!("{at}.service.port"),
                    p,
                    "port is not valid: must be between 1 and 65535, inclusive",
                ));
            }
            if let Some(path) = s["path"].as_str()
                && !path.starts_with('/')
            {
                out.push(invalid(
                    format!("{at}.service.path"),
                    &s["path"],
                    "must start with a '/'",
                ));
            }
            out
        }
    }
}

fn validate_match_conditions(v: &Value, at: &str) -> Vec<Cause> {
    let mut out = vec![];
    let list = v.as_array().cloned().unwrap_or_default();
    if list.len() > 64 {
        out.push((
            at.to_string(),
            "FieldValueTooMany".into(),
            format!("Too many: {}: must have at most 64 items", list.len()),
        ));
    }
    let mut names = HashSet::new();
    for (i, mc) in list.iter().enumerate() {
        let f = format!("{at}[{i}]");
        let name = mc["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            out.push(required(format!("{f}.name"), ""));
        } else {
            for e in qualified_name_errors(name) {
                out.push(invalid(format!("{f}.name"), &mc["name"], &e));
            }
            if !names.insert(name.to_string()) {
                out.push((
                    format!("{f}.name"),
                    "FieldValueDuplicate".into(),
                    format!("Duplicate value: {name:?}"),
                ));
            }
        }
        let expr = mc["expression"].as_str().unwrap_or_default();
        if expr.is_empty() {
            out.push(required(format!("{f}.expression"), ""));
        } else if let Err(e) = crate::matchcond::compile(expr) {
            out.push(invalid(
                format!("{f}.expression"),
                &mc["expression"],
                &format!("compilation failed: {e}"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ri(plural: &str) -> ResourceInfo {
        crate::resources::builtins().into_iter().find(|r| r.plural == plural).expect("served")
    }

    fn valid_hook() -> Value {
        json!({"name": "a.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:1/x"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]})
    }

    #[test]
    fn defaults_fill_every_unset_member() {
        let r = ri("mutatingwebhookconfigurations");
        let mut o = json!({"webhooks": [valid_hook()]});
        apply_defaults(&r, &mut o);
        let wh = &o["webhooks"][0];
        assert_eq!(wh["failurePolicy"], "Fail");
        assert_eq!(wh["matchPolicy"], "Equivalent");
        assert_eq!(wh["timeoutSeconds"], 10);
        assert_eq!(wh["namespaceSelector"], json!({}));
        assert_eq!(wh["objectSelector"], json!({}));
        assert_eq!(wh["reinvocationPolicy"], "Never");
        assert_eq!(wh["rules"][0]["scope"], "*");
        assert!(validate(&r, &o).is_empty(), "{:?}", validate(&r, &o));
    }

    #[test]
    fn validation_table() {
        let r = ri("validatingwebhookconfigurations");
        // (what, JSON merge patch on a valid webhook, the field the error names)
        let rule = |k: &str, v: Value| {
            let mut r = valid_hook()["rules"][0].clone();
            r[k] = v;
            json!({"rules": [r]})
        };
        let cases: Vec<(&str, Value, &str)> = vec![
            ("sideEffects missing", json!({"sideEffects": null}), "webhooks[0].sideEffects"),
            ("sideEffects Some", json!({"sideEffects": "Some"}), "webhooks[0].sideEffects"),
            (
                "no review versions",
                json!({"admissionReviewVersions": []}),
                "webhooks[0].admissionReviewVersions",
            ),
            (
                "unknown review version",
                json!({"admissionReviewVersions": ["v2"]}),
                "webhooks[0].admissionReviewVersions",
            ),
            ("timeout 31", json!({"timeoutSeconds": 31}), "webhooks[0].timeoutSeconds"),
            ("timeout 0", json!({"timeoutSeconds": 0}), "webhooks[0].timeoutSeconds"),
            ("short name", json!({"name": "hook"}), "webhooks[0].name"),
            (
                "bad operator",
                json!({"objectSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}),
                "webhooks[0].objectSelector.matchExpressions[0].operator",
            ),
            (
                "bad operation",
                rule("operations", json!(["MOVE"])),
                "webhooks[0].rules[0].operations[0]",
            ),
            ("no resources", rule("resources", json!([])), "webhooks[0].rules[0].resources"),
            (
                "http url",
                json!({"clientConfig": {"url": "http://x/"}}),
                "webhooks[0].clientConfig.url",
            ),
            ("bad failurePolicy", json!({"failurePolicy": "Maybe"}), "webhooks[0].failurePolicy"),
            (
                "bad matchCondition",
                json!({"matchConditions": [{"name": "c", "expression": "object.("}]}),
                "webhooks[0].matchConditions[0].expression",
            ),
        ];
        for (what, edit, field) in cases {
            let mut wh = valid_hook();
            json_patch::merge(&mut wh, &edit);
            let errs = validate(&r, &json!({"webhooks": [wh]}));
            assert!(errs.iter().any(|e| e.0 == field), "{what}: {errs:?}");
        }
        let dup = validate(&r, &json!({"webhooks": [valid_hook(), valid_hook()]}));
        assert!(
            dup.iter().any(|e| e.0 == "webhooks[1].name" && e.1 == "FieldValueDuplicate"),
            "{dup:?}"
        );
    }
}
