//! `/openapi/v3` documents (<https://kubernetes.io/docs/concepts/overview/kubernetes-api/#openapi-v3>):
//! a root listing one document per group/version, and per-group/version documents whose PATCH
//! operations carry `x-kubernetes-group-version-kind` and the `fieldValidation` parameter, which is
//! what kubectl checks before it sends `fieldValidation=Strict`. Built-in schemas are Kubernetes'
//! own (see `data/PROVENANCE.md`); CRD schemas come from their `openAPIV3Schema`.

use crate::resources::ResourceInfo;
use crate::schema;
use serde_json::{Map, Value, json};
use std::sync::OnceLock;

/// Rewrite `#/$defs/X` references and JSON-schema `type: [t, "null"]` into OpenAPI 3.0 form.
fn to_openapi3(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, x) in m {
                if k == "$ref"
                    && let Some(r) = x.as_str()
                {
                    out.insert(k.clone(), json!(r.replace("#/$defs/", "#/components/schemas/")));
                    continue;
                }
                if k == "type"
                    && let Some(a) = x.as_array()
                {
                    if let Some(t) = a.iter().find(|t| *t != "null") {
                        out.insert(k.clone(), t.clone());
                    }
                    continue;
                }
                out.insert(k.clone(), to_openapi3(x));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(to_openapi3).collect()),
        other => other.clone(),
    }
}

fn builtin_components() -> &'static Value {
    static C: OnceLock<Value> = OnceLock::new();
    C.get_or_init(|| {
        let d = schema::defs();
        let mut m = Map::new();
        for (k, v) in &d.defs {
            m.insert(k.clone(), to_openapi3(v));
        }
        Value::Object(m)
    })
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

/// The `/openapi/v3` root.
pub fn root(resources: &[ResourceInfo]) -> Value {
    let mut paths = Map::new();
    for r in resources {
        let p = gv_path(&r.group, &r.version);
        let hash = format!("{:016X}", fxhash(&format!("{p}{}", resources.len())));
        paths.entry(p.clone()).or_insert_with(
            || json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}")}),
        );
    }
    json!({"paths": paths})
}

fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

fn crd_schema_name(r: &ResourceInfo) -> String {
    let rev: Vec<&str> = r.group.split('.').rev().collect();
    format!("{}.{}.{}", rev.join("."), r.version, r.kind)
}

/// The document for one group/version.
pub fn gv_document(resources: &[ResourceInfo], group: &str, version: &str) -> Option<Value> {
    let rs: Vec<&ResourceInfo> =
        resources.iter().filter(|r| r.group == group && r.version == version).collect();
    if rs.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    let mut components = if rs.iter().any(|r| r.custom) {
        Map::new()
    } else {
        builtin_components().as_object().cloned().unwrap_or_default()
    };
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    for r in rs {
        let gvk = json!([{"group": r.group, "version": r.version, "kind": r.kind}]);
        let schema_ref = if r.custom {
            let name = crd_schema_name(r);
            let mut s = r.schema.as_deref().cloned().unwrap_or_else(
                || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            );
            if let Some(props) = s.get_mut("properties").and_then(Value::as_object_mut) {
                // As the API server publishes it: ObjectMeta under `allOf`, so the property
                // keeps a description (the CRD's own, when it has one).
                let description = props
                    .get("metadata")
                    .and_then(|m| m["description"].as_str())
                    .unwrap_or("Standard object metadata: name, namespace, labels, annotations and the fields the API server maintains.")
                    .to_owned();
                props.insert("metadata".into(), json!({
                    "description": description,
                    "allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}],
                }));
                props.entry("apiVersion").or_insert(json!({"type": "string"}));
                props.entry("kind").or_insert(json!({"type": "string"}));
            }
            s["x-kubernetes-group-version-kind"] = gvk.clone();
            components.insert(name.clone(), s);
            for dep in [
                schema::OBJECT_META,
                "io.k8s.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry",
                "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference",
                "io.k8s.apimachinery.pkg.apis.meta.v1.Time",
                "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
            ] {
                if let Some(d) = builtin_components().get(dep) {
                    components.insert(dep.to_string(), d.clone());
                }
            }
            format!("#/components/schemas/{name}")
        } else {
            let name = schema::defs()
                .by_gvk
                .get(&(r.group.clone(), r.version.clone(), r.kind.clone()))
                .cloned()
                .unwrap_or_default();
            format!("#/components/schemas/{name}")
        };
        let body = json!({"content": {"application/json": {"schema": {"$ref": schema_ref}}}});
        let params = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        ]);
        let ok = json!({"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": schema_ref}}}}});
        let item = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{prefix}/{}/{{name}}", r.plural)
        };
        let coll = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{prefix}/{}", r.plural)
        };
        let op = |action: &str, with_body: bool| {
            let mut o = json!({
                "operationId": format!("{action}{}", r.kind),
                "parameters": params,
                "responses": ok,
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk[0],
            });
            if with_body {
                o["requestBody"] = body.clone();
            }
            o
        };
        if r.create_only {
            paths.insert(coll, json!({"post": op("post", true)}));
            continue;
        }
        paths.insert(item, json!({"get": op("get", false), "put": op("put", true), "patch": op("patch", true), "delete": op("delete", false)}));
        paths.insert(coll, json!({"get": op("list", false), "post": op("post", true)}));
        if r.status {
            let p = if r.namespaced {
                format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}/status", r.plural)
            } else {
                format!("{prefix}/{}/{{name}}/status", r.plural)
            };
            paths.insert(p, json!({"get": op("get", false), "put": op("put", true), "patch": op("patch", true)}));
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": components},
    }))
}

/// Field paths of `obj` its schema does not know (`fieldValidation=Strict|Warn`).
pub fn unknown_fields(obj: &Value, node: schema::Node<'_>, path: &str, out: &mut Vec<String>) {
    let Some(s) = node.s else { return };
    if s.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true)
        && s.get("properties").is_none()
    {
        return;
    }
    match obj {
        Value::Object(m) => {
            let props = s.get("properties").and_then(Value::as_object);
            let addl = s
                .get("additionalProperties")
                .is_some_and(|a| a.is_object() || a == &Value::Bool(true));
            for (k, v) in m {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                let known = props.is_some_and(|pp| pp.contains_key(k))
                    || addl
                    || (node.root && (k == "metadata" || k == "apiVersion" || k == "kind"));
                if !known {
                    if props.is_some() {
                        out.push(p);
                    }
                    continue;
                }
                unknown_fields(v, node.prop(k), &p, out);
            }
        }
        Value::Array(a) => {
            for (i, it) in a.iter().enumerate() {
                unknown_fields(it, node.items(), &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}
