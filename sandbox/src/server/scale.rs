//! The `/scale` subresource: an `autoscaling/v1` Scale view of objects with a replica count.

use super::json_response;
use super::request::{Request, Target, decode_body, write_opts};
use crate::resources::ResourceInfo;
use crate::status::{ApiError, ApiResult};
use crate::store;
use axum::response::Response;
use serde_json::{Value, json};

/// `update` of `/scale`: writes the requested replicas into the object.
pub(super) fn update(req: &Request, t: &Target, name: &str) -> ApiResult<Response> {
    let (ri, store) = (&t.ri, &req.app.store);
    let o = write_opts(req.q, req.headers)?;
    let obj = decode_body(req.headers, &req.body)?;
    let ns = t.namespace();
    let cur = store.get(ri, &ns, name)?;
    let want = obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
    let rv = obj.pointer("/metadata/resourceVersion").cloned();
    let mut obj = (*cur).clone();
    set_path(&mut obj, replicas_path(ri), want);
    if let Some(rv) = rv {
        obj["metadata"]["resourceVersion"] = rv;
    }
    let p = store.prepare_update(ri, &ns, name, obj, "scale", &o)?;
    let done = store.commit(p, o.dry_run)?;
    Ok(json_response(200, &scale_of(ri, &done)))
}

/// `patch` of `/scale`: patch the Scale view, then write `spec.replicas` back.
pub(super) fn patch(req: &Request, t: &Target, name: &str) -> ApiResult<Response> {
    let (ri, store) = (&t.ri, &req.app.store);
    let o = write_opts(req.q, req.headers)?;
    let ct = req.content_type();
    let ns = t.namespace();
    if ct.starts_with("application/apply-patch") {
        return apply(req, t, name);
    }
    let cur = store.get(ri, &ns, name)?;
    let mut sc = scale_of(ri, &cur);
    let p: Value =
        serde_json::from_slice(&req.body).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if ct.starts_with("application/json-patch+json") {
        let jp: json_patch::Patch =
            serde_json::from_value(p).map_err(|e| ApiError::bad_request(e.to_string()))?;
        json_patch::patch(&mut sc, &jp).map_err(|e| ApiError::bad_request(e.to_string()))?;
    } else {
        json_patch::merge(&mut sc, &p);
    }
    let mut obj = (*cur).clone();
    set_path(
        &mut obj,
        replicas_path(ri),
        sc.pointer("/spec/replicas").cloned().unwrap_or(json!(0)),
    );
    let p = store.prepare_update(ri, &ns, name, obj, "scale", &o)?;
    let done = store.commit(p, o.dry_run)?;
    Ok(json_response(200, &scale_of(ri, &done)))
}

/// Server-side apply of a Scale: the applier owns the object's replicas field, recorded with
/// `subresource: scale` (kube-apiserver's scale field-manager mapping).
fn apply(req: &Request, t: &Target, name: &str) -> ApiResult<Response> {
    let (ri, store) = (&t.ri, &req.app.store);
    let o = write_opts(req.q, req.headers)?;
    if req.q.get("fieldManager").is_none_or(|m| m.is_empty()) {
        let mut e = ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions.meta.k8s.io",
            "",
            vec![(
                "fieldManager".into(),
                "FieldValueRequired".into(),
                "Required value: is required for apply patch".into(),
            )],
        );
        if let Some(d) = e.details.as_mut() {
            d["kind"] = json!("PatchOptions");
        }
        return Err(e);
    }
    let scale: Value = crate::decode_yaml(&req.body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    let mut applied =
        json!({"apiVersion": ri.api_version(), "kind": ri.kind, "metadata": {"name": name}});
    if let Some(r) = scale.pointer("/spec/replicas") {
        set_path(&mut applied, replicas_path(ri), r.clone());
    }
    let body = serde_json::to_vec(&applied).map_err(|e| ApiError::internal(e.to_string()))?;
    let ns = t.namespace();
    let p =
        store.prepare_patch(ri, &ns, name, "application/apply-patch+yaml", &body, "scale", &o)?;
    let done = store.commit(p, o.dry_run)?;
    Ok(json_response(200, &scale_of(ri, &done)))
}

/// Where the object keeps its desired replicas.
fn replicas_path(ri: &ResourceInfo) -> &str {
    ri.scale.as_ref().map(|s| s.0.as_str()).unwrap_or(".spec.replicas")
}

fn get_path<'a>(o: &'a Value, p: &str) -> Option<&'a Value> {
    let mut cur = o;
    for s in p.trim_start_matches('.').split('.') {
        cur = cur.get(s)?;
    }
    Some(cur)
}

fn set_path(o: &mut Value, p: &str, v: Value) {
    let parts: Vec<&str> = p.trim_start_matches('.').split('.').collect();
    let mut cur = o;
    for s in &parts[..parts.len() - 1] {
        if !cur.get(*s).is_some_and(Value::is_object) {
            cur[*s] = json!({});
        }
        cur = &mut cur[*s];
    }
    cur[parts[parts.len() - 1]] = v;
}

/// The `autoscaling/v1` Scale view of an object.
pub(super) fn scale_of(ri: &ResourceInfo, o: &Value) -> Value {
    let (spec_p, status_p, sel_p) =
        ri.scale.clone().unwrap_or((".spec.replicas".into(), ".status.replicas".into(), None));
    let mut selector = sel_p.and_then(|p| get_path(o, &p).cloned()).unwrap_or(json!(""));
    if !selector.is_string() || selector == "" {
        // Built-ins publish the selector from spec.selector.matchLabels.
        if let Some(ml) = o.pointer("/spec/selector/matchLabels").and_then(Value::as_object) {
            selector = json!(
                ml.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join(",")
            );
        }
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": store::name_of(o),
            "namespace": store::ns_of(o),
            "uid": o.pointer("/metadata/uid"),
            "resourceVersion": store::rv_of(o),
            "creationTimestamp": o.pointer("/metadata/creationTimestamp"),
        },
        "spec": {"replicas": get_path(o, &spec_p).cloned().unwrap_or(json!(0))},
        "status": {"replicas": get_path(o, &status_p).cloned().unwrap_or(json!(0)), "selector": selector},
    })
}
