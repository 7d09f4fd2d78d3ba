//! Custom resource validation as kube-apiserver does it for structural schemas
//! (<https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#validation>):
//! defaulting, pruning of unknown fields, OpenAPI value validation (type, enum, pattern,
//! maxLength, required, ...) and `x-kubernetes-validations` CEL rules (kube's `cel` support).
//! Messages follow kube-openapi's validation errors as field errors.
//!
//! Updates and status writes ratchet, as kube-apiserver does from 1.30 (CRDValidationRatcheting,
//! GA in 1.33, <https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#validation-ratcheting>):
//! a value that deep-equals the old object's value at the same place is not validated again, so
//! a CRD whose schema tightened does not refuse writes that leave its invalid values alone. The
//! old value is found through object properties and, in lists, by the map keys of
//! `x-kubernetes-list-type: map` or the value itself for `set`; items of other (atomic) lists
//! have no old counterpart once the list changed. A CEL rule's error is ratcheted when the value
//! the rule is declared on is unchanged (a rule's `fieldPath` only moves where the error is
//! reported), except for transition rules (those that read `oldSelf`), which kube-apiserver
//! never ratchets.

use crate::resources::ResourceInfo;
use crate::status::{ApiError, ApiResult};
use serde_json::Value;

type Cause = (String, String, String);

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn preserves(s: &Value) -> bool {
    s.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true)
}

/// Drop fields the schema does not know and nulls it does not allow.
fn prune(v: &mut Value, s: &Value, root: bool) {
    match v {
        Value::Object(m) => {
            let props = s.get("properties").and_then(Value::as_object);
            let addl = s.get("additionalProperties").filter(|a| a.is_object());
            let keep_unknown = preserves(s)
                || s.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true);
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                if root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let child = props.and_then(|p| p.get(&k)).or(addl);
                match child {
                    Some(cs) => {
                        if m.get(&k).is_some_and(Value::is_null)
                            && cs.get("nullable").and_then(Value::as_bool) != Some(true)
                        {
                            m.remove(&k);
                            continue;
                        }
                        if let Some(c) = m.get_mut(&k) {
                            prune(c, cs, false);
                        }
                    }
                    None if keep_unknown
                        || (props.is_none()
                            && addl.is_none()
                            && s.get("additionalProperties") == Some(&Value::Bool(true))) => {}
                    None => {
                        m.remove(&k);
                    }
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.get("items") {
                for it in a {
                    prune(it, items, false);
                }
            }
        }
        _ => {}
    }
}

/// The item of `old` (a list) that an item of the new list is compared with for ratcheting.
fn correlated<'a>(s: &Value, old: &'a [Value], item: &Value) -> Option<&'a Value> {
    match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("map") => {
            let keys: Vec<&str> = s
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)?
                .iter()
                .filter_map(Value::as_str)
                .collect();
            old.iter().find(|o| keys.iter().all(|k| o.get(k) == item.get(k)))
        }
        Some("set") => old.iter().find(|o| *o == item),
        _ => None,
    }
}

/// Validate `v` against `s`; `old` is the old object's value at the same place on an update,
/// and an unchanged value is not validated again (ratcheting, see the module doc).
fn check(v: &Value, s: &Value, old: Option<&Value>, path: &str, errs: &mut Vec<Cause>) {
    if old == Some(v) {
        return;
    }
    let invalid = |errs: &mut Vec<Cause>, msg: String| {
        let shown = match v {
            Value::String(x) => format!("{x:?}"),
            Value::Object(_) | Value::Array(_) => format!("{:?}", type_name(v)),
            other => other.to_string(),
        };
        errs.push((
            path.to_string(),
            "FieldValueInvalid".into(),
            format!("Invalid value: {shown}: {msg}"),
        ));
    };
    let int_or_string = s.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true);
    if let Some(t) = s.get("type").and_then(Value::as_str) {
        let actual = type_name(v);
        let ok = actual == t
            || (t == "number" && actual == "integer")
            || (v.is_null() && s.get("nullable").and_then(Value::as_bool) == Some(true));
        if !ok && !int_or_string {
            errs.push((
                path.to_string(),
                "FieldValueTypeInvalid".into(),
                format!(
                    "Invalid value: {:?}: {path} in body must be of type {t}: {:?}",
                    actual, actual
                ),
            ));
            return;
        }
    }
    if let Some(en) = s.get("enum").and_then(Value::as_array)
        && !en.contains(v)
    {
        let vals: Vec<String> = en.iter().map(|x| x.to_string()).collect();
        errs.push((
            path.to_string(),
            "FieldValueNotSupported".into(),
            format!("Unsupported value: {v}: supported values: {}", vals.join(", ")),
        ));
    }
    match v {
        Value::String(st) => {
            if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
                && st.chars().count() as u64 > max
            {
                errs.push((
                    path.to_string(),
                    "FieldValueTooLong".into(),
                    format!("Too long: may not be more than {max} bytes"),
                ));
            }
            if let Some(min) = s.get("minLength").and_then(Value::as_u64)
                && (st.chars().count() as u64) < min
            {
                invalid(errs, format!("{path} in body should be at least {min} chars long"));
            }
            if let Some(p) = s.get("pattern").and_then(Value::as_str)
                && regex::Regex::new(p).is_ok_and(|re| !re.is_match(st))
            {
                invalid(errs, format!("{path} in body should match '{p}'"));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if let Some(max) = s.get("maximum").and_then(Value::as_f64)
                && x > max
            {
                invalid(errs, format!("{path} in body should be less than or equal to {max}"));
            }
            if let Some(min) = s.get("minimum").and_then(Value::as_f64)
                && x < min
            {
                invalid(errs, format!("{path} in body should be greater than or equal to {min}"));
            }
        }
        Value::Array(a) => {
            if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
                && a.len() as u64 > max
            {
                errs.push((
                    path.to_string(),
                    "FieldValueTooMany".into(),
                    format!("Too many: {}: must have at most {max} items", a.len()),
                ));
            }
            if let Some(items) = s.get("items") {
                let old_items = old.and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
                for (i, it) in a.iter().enumerate() {
                    let was = correlated(s, old_items, it);
                    check(it, items, was, &format!("{path}[{i}]"), errs);
                }
            }
        }
        Value::Object(m) => {
            for r in s
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !m.contains_key(r) {
                    let p = if path.is_empty() { r.to_string() } else { format!("{path}.{r}") };
                    errs.push((p, "FieldValueRequired".into(), "Required value".into()));
                }
            }
            let props = s.get("properties").and_then(Value::as_object);
            let addl = s.get("additionalProperties").filter(|a| a.is_object());
            for (k, c) in m {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(cs) = props.and_then(|p| p.get(k)).or(addl) {
                    let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    check(c, cs, old.and_then(|o| o.get(k)), &p, errs);
                }
            }
        }
        _ => {}
    }
}

/// Structural-schema defaulting and pruning, as kube-apiserver applies them when it decodes a
/// request and again after mutating admission.
pub fn default_and_prune(ri: &ResourceInfo, obj: &mut Value) {
    let Some(schema) = &ri.schema else {
        return;
    };
    let mut defaulted = kube::core::cel::apply_defaults(schema, obj);
    if let (Some(m), Some(orig)) = (defaulted.as_object_mut(), obj.get("metadata")) {
        m.insert("metadata".into(), orig.clone());
    }
    *obj = defaulted;
    prune(obj, schema, true);
}

thread_local! {
    /// The CEL environment with Kubernetes' libraries, built once per thread (building it
    /// registers every function).
    static CEL: kube::core::cel::Validator = kube::core::cel::Validator::new();
}

/// One step of a CEL error's path (`spec.items[1].name`).
enum Step<'a> {
    Name(&'a str),
    Index(usize),
}

/// The steps of a CEL error's path (a leading `.`, as a rule's `fieldPath` gives it, is
/// dropped); `None` when an index is not a number.
fn steps(path: &str) -> Option<Vec<Step<'_>>> {
    let mut out = vec![];
    for seg in path.trim_start_matches('.').split('.').filter(|s| !s.is_empty()) {
        let (name, indexes) = seg.split_once('[').unwrap_or((seg, ""));
        if !name.is_empty() {
            out.push(Step::Name(name));
        }
        for index in indexes.split('[').filter(|i| !i.is_empty()) {
            out.push(Step::Index(index.trim_end_matches(']').parse().ok()?));
        }
    }
    Some(out)
}

/// The new and old values a failed CEL rule was evaluated on: the error's path is followed
/// through the schema and both objects (old list items correlated as for the schema checks) to
/// the deepest node that declares the rule, as a rule's `fieldPath` reports below the node it
/// is declared on; the path's end when no node on it declares the rule.
fn rule_values<'a>(
    schema: &Value,
    rule: &str,
    path: &str,
    new: &'a Value,
    old: &'a Value,
) -> Option<(&'a Value, Option<&'a Value>)> {
    let declares = |s: &Value| {
        s.get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .is_some_and(|rules| rules.iter().any(|r| r["rule"] == rule))
    };
    let (mut s, mut n, mut o) = (schema, new, Some(old));
    let mut found = declares(s).then_some((n, o));
    for step in steps(path)? {
        match step {
            Step::Name(k) => {
                let props = s.get("properties").and_then(|p| p.get(k));
                s = props.or_else(|| s.get("additionalProperties")).unwrap_or(&Value::Null);
                n = n.get(k)?;
                o = o.and_then(|o| o.get(k));
            }
            Step::Index(i) => {
                let item = n.get(i)?;
                o = o.and_then(Value::as_array).and_then(|a| correlated(s, a, item));
                s = s.get("items").unwrap_or(&Value::Null);
                n = item;
            }
        }
        if declares(s) {
            found = Some((n, o));
        }
    }
    Some(found.unwrap_or((n, o)))
}

/// Whether a CEL rule's error is ratcheted: the value the rule was declared on is unchanged
/// from the old object, and the rule is not a transition rule.
fn ratchets(
    e: &kube::core::cel::ValidationError,
    schema: &Value,
    body: &Value,
    old: Option<&Value>,
) -> bool {
    let Some(old) = old else { return false };
    if e.rule.contains("oldSelf") {
        return false;
    }
    rule_values(schema, &e.rule, &e.field_path, body, old).is_some_and(|(n, o)| o == Some(n))
}

/// Default, prune and validate a custom resource; `Err` is the 422 Invalid Status.
pub fn validate(ri: &ResourceInfo, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
    let Some(schema) = &ri.schema else {
        return Ok(());
    };
    default_and_prune(ri, obj);
    let mut errs: Vec<Cause> = vec![];
    check(obj, schema, old, "", &mut errs);
    if errs.is_empty()
        && let Some(rules) = &ri.cel
    {
        let mut body = obj.clone();
        if let Some(m) = body.as_object_mut() {
            m.remove("metadata");
        }
        let old_body = old.map(|o| {
            let mut b = o.clone();
            if let Some(m) = b.as_object_mut() {
                m.remove("metadata");
            }
            b
        });
        if let Err(cel_errs) = CEL.with(|v| v.validate_compiled(rules, &body, old_body.as_ref())) {
            for e in cel_errs.into_vec() {
                if ratchets(&e, schema, &body, old_body.as_ref()) {
                    continue;
                }
                let at = if e.field_path.is_empty() {
                    "<nil>".to_string()
                } else {
                    e.field_path.clone()
                };
                let value = crate::fields::path_value_type(&body, &e.field_path);
                errs.push((
                    at,
                    e.reason.clone().unwrap_or_else(|| "FieldValueInvalid".into()),
                    format!("Invalid value: {value:?}: {}", e.message),
                ));
            }
        }
    }
    if errs.is_empty() {
        return Ok(());
    }
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let mut e = ApiError::invalid(&ri.group, &format!("{}.{}", ri.kind, ri.group), name, errs);
    if let Some(d) = e.details.as_mut() {
        d["kind"] = Value::String(ri.kind.clone());
    }
    Err(e)
}

#[cfg(test)]
mod ratcheting_tests {
    //! Validation ratcheting, scenario by scenario (in the spirit of kube-apiserver's ratcheting
    //! tests): values the schema refuses that an update leaves as they were are accepted.
    use super::*;
    use serde_json::json;

    /// A CRD whose schema is stricter than objects written before it: `name` at most 5 chars,
    /// `size` at most 10 (CEL), `ports` a map-list keyed by `name` of ports <= 1000, `tags` an
    /// atomic list of lowercase words, and `count` that may not shrink (a transition rule).
    fn widgets() -> ResourceInfo {
        let crd = json!({"spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object",
                        "x-kubernetes-validations": [{
                            "rule": "!has(self.min) || !has(self.max) || self.min <= self.max",
                            "fieldPath": ".min", "message": "min above max"}],
                        "properties": {
                        "min": {"type": "integer"},
                        "max": {"type": "integer"},
                        "name": {"type": "string", "maxLength": 5},
                        "size": {"type": "integer",
                            "x-kubernetes-validations": [{"rule": "self <= 10", "message": "at most 10"}]},
                        "count": {"type": "integer",
                            "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "may not shrink"}]},
                        "ports": {"type": "array", "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {"type": "object", "properties": {
                                "name": {"type": "string"},
                                "port": {"type": "integer", "maximum": 1000}}}},
                        "tags": {"type": "array",
                            "items": {"type": "string", "pattern": "^[a-z]+$"}}}},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string", "enum": ["Ready", "Failed"]}}}}}}}]}});
        crate::resources::from_crd(&crd).remove(0)
    }

    fn widget(spec: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "default"}, "spec": spec})
    }

    /// The invalid fields an update of `old` to `new` is refused for (empty: accepted).
    fn refused(old: Option<&Value>, new: &Value) -> Vec<String> {
        let mut obj = new.clone();
        match validate(&widgets(), &mut obj, old) {
            Ok(()) => vec![],
            Err(e) => e
                .details
                .and_then(|d| d.get("causes").cloned())
                .and_then(|c| c.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .map(|c| c["field"].as_str().unwrap_or_default().to_string())
                .collect(),
        }
    }

    #[test]
    fn unchanged_values_are_not_validated_again() {
        let long = json!({"name": "toolongname", "size": 50, "tags": ["UPPER"],
            "ports": [{"name": "a", "port": 5000}, {"name": "b", "port": 80}]});
        let old = widget(long.clone());
        let with = |patch: Value| {
            let mut spec = long.clone();
            for (k, v) in patch.as_object().cloned().unwrap_or_default() {
                spec[k] = v;
            }
            widget(spec)
        };
        // (what, old object, new object, fields refused)
        let cases: Vec<(&str, Option<&Value>, Value, Vec<&str>)> = vec![
            // (CEL runs once the schema's own checks pass, so `size` is not reported here.)
            (
                "a create validates everything",
                None,
                old.clone(),
                vec!["spec.name", "spec.ports[0].port", "spec.tags[0]"],
            ),
            ("a no-op update", Some(&old), old.clone(), vec![]),
            (
                "unchanged invalid fields beside a changed valid one",
                Some(&old),
                with(json!({"count": 3})),
                vec![],
            ),
            (
                "a changed invalid field is refused",
                Some(&old),
                with(json!({"name": "stilltoolong"})),
                vec!["spec.name"],
            ),
            ("a changed field made valid", Some(&old), with(json!({"name": "ok"})), vec![]),
            (
                "an unchanged CEL failure beside a change",
                Some(&old),
                with(json!({"name": "short"})),
                vec![],
            ),
            (
                "a changed CEL failure is refused",
                Some(&old),
                with(json!({"size": 60})),
                vec!["spec.size"],
            ),
            (
                "a map-list item found by its key, moved and unchanged",
                Some(&old),
                with(json!({"ports": [{"name": "b", "port": 80}, {"name": "a", "port": 5000}]})),
                vec![],
            ),
            (
                "a new invalid map-list item is refused",
                Some(&old),
                with(json!({"ports": [{"name": "a", "port": 5000}, {"name": "b", "port": 80},
                    {"name": "c", "port": 7000}]})),
                vec!["spec.ports[2].port"],
            ),
            (
                "a changed invalid map-list item is refused",
                Some(&old),
                with(json!({"ports": [{"name": "a", "port": 6000}, {"name": "b", "port": 80}]})),
                vec!["spec.ports[0].port"],
            ),
            (
                "a new invalid item in an atomic list is refused, and the old one with it",
                Some(&old),
                with(json!({"tags": ["UPPER", "AGAIN"]})),
                vec!["spec.tags[0]", "spec.tags[1]"],
            ),
        ];
        for (what, old, new, want) in cases {
            let mut got = refused(old, &new);
            let mut want: Vec<String> = want.into_iter().map(str::to_string).collect();
            got.sort();
            want.sort();
            assert_eq!(got, want, "{what}");
        }
    }

    /// A transition rule is never ratcheted: it is evaluated only on updates, against the old
    /// value, so an unchanged value passes it anyway; a shrinking one is refused.
    #[test]
    fn transition_rules_still_apply() {
        let old = widget(json!({"count": 5}));
        assert_eq!(refused(Some(&old), &widget(json!({"count": 4}))), vec!["spec.count"]);
        assert!(refused(Some(&old), &widget(json!({"count": 5}))).is_empty());
    }

    /// A rule reported at its `fieldPath` ratchets on the value it is declared on: `min` is
    /// unchanged but `spec` is not, so the rule is evaluated again.
    #[test]
    fn a_rule_with_a_field_path_ratchets_on_its_own_node() {
        let old = widget(json!({"min": 5, "max": 3}));
        assert_eq!(refused(Some(&old), &widget(json!({"min": 5, "max": 2}))), vec!["spec.min"]);
        let mut status = old.clone();
        status["status"] = json!({"phase": "Ready"});
        assert!(refused(Some(&old), &status).is_empty());
        assert!(refused(Some(&old), &widget(json!({"min": 1, "max": 3}))).is_empty());
    }

    /// A status write (the old object with a new status) with an invalid spec it does not
    /// touch is accepted; an invalid status is not.
    #[test]
    fn status_write_with_unchanged_invalid_spec_is_accepted() {
        let old = widget(json!({"name": "toolongname", "size": 50}));
        let mut ready = old.clone();
        ready["status"] = json!({"phase": "Ready"});
        assert!(refused(Some(&old), &ready).is_empty());
        let mut bad = old.clone();
        bad["status"] = json!({"phase": "Sideways"});
        assert_eq!(refused(Some(&old), &bad), vec!["status.phase"]);
    }
}
