//! Custom resource validation as kube-apiserver does it for structural schemas
//! (<https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#validation>):
//! defaulting, pruning of unknown fields, OpenAPI value validation (type, enum, pattern,
//! maxLength, required, ...) and `x-kubernetes-validations` CEL rules (kube's `cel` support).
//! Messages follow kube-openapi's validation errors as field errors.

use crate::resources::ResourceInfo;
use crate::status::{ApiError, ApiResult};
use kube::core::cel::CompiledSchema;
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

fn check(v: &Value, s: &Value, path: &str, errs: &mut Vec<Cause>) {
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
                for (i, it) in a.iter().enumerate() {
                    check(it, items, &format!("{path}[{i}]"), errs);
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
                    check(c, cs, &p, errs);
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

/// The `x-kubernetes-validations` rules of a CRD version's schema, compiled once when the CRD
/// is read (as kube-apiserver compiles them when it loads the CRD), not on every write; `None`
/// when the schema has no rule, so writes skip CEL altogether.
pub fn compile_rules(schema: &Value) -> Option<std::sync::Arc<CompiledSchema>> {
    fn has_rules(c: &CompiledSchema) -> bool {
        // A rule that failed to compile (or a schema too deep) counts: it reports an error.
        !c.validations.is_empty()
            || c.properties.values().any(has_rules)
            || c.items.as_deref().is_some_and(has_rules)
            || c.additional_properties.as_deref().is_some_and(has_rules)
            || c.all_of.iter().chain(&c.one_of).chain(&c.any_of).any(has_rules)
    }
    let compiled = kube::core::cel::compile_schema(schema);
    has_rules(&compiled).then(|| std::sync::Arc::new(compiled))
}

/// Default, prune and validate a custom resource; `Err` is the 422 Invalid Status.
pub fn validate(ri: &ResourceInfo, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
    let Some(schema) = &ri.schema else {
        return Ok(());
    };
    default_and_prune(ri, obj);
    let mut errs: Vec<Cause> = vec![];
    check(obj, schema, "", &mut errs);
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
