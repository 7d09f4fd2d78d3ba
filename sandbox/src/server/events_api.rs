//! Writes through `events.k8s.io/v1`, stored as core/v1 Events.

use super::json_response;
use super::request::{Request, Target, decode_body, write_opts};
use crate::convert::{core_to_events, events_to_core};
use crate::status::{ApiError, ApiResult};
use crate::store;
use axum::http::Method;
use axum::response::Response;
use serde_json::{Value, json};

/// Writes through `events.k8s.io/v1`: converted to core Events and stored as such.
pub(super) async fn write(req: &Request<'_>, t: &Target) -> ApiResult<Response> {
    let (store, headers, body) = (&req.app.store, req.headers, &req.body);
    let core = store.resource("", "v1", "events").ok_or_else(ApiError::path_not_found)?;
    let ns = t.ns.clone().unwrap_or_default();
    let o = write_opts(req.q, headers)?;
    match (req.method.clone(), &t.name) {
        (Method::POST, None) => {
            let obj = events_to_core(&decode_body(headers, body)?);
            let p = store.prepare_create(&core, &ns, obj, &o)?;
            let v = store.commit(p, o.dry_run)?;
            Ok(json_response(201, &core_to_events(&v)))
        }
        (Method::PUT, Some(name)) => {
            let obj = events_to_core(&decode_body(headers, body)?);
            let p = store.prepare_update(&core, &ns, name, obj, "", &o)?;
            let v = store.commit(p, o.dry_run)?;
            Ok(json_response(200, &core_to_events(&v)))
        }
        (Method::PATCH, Some(name)) => {
            let ct = req.content_type();
            let cur = store.get(&core, &ns, name)?;
            let mut doc = core_to_events(&cur);
            if ct.starts_with("application/json-patch+json") {
                let jp: json_patch::Patch = serde_json::from_slice(body)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                json_patch::patch(&mut doc, &jp)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
            } else {
                let p: Value = crate::decode_yaml(body).map_err(ApiError::bad_request)?;
                json_patch::merge(&mut doc, &p);
            }
            let mut obj = events_to_core(&doc);
            obj["metadata"]["resourceVersion"] = json!(store::rv_of(&cur));
            let p = store.prepare_update(&core, &ns, name, obj, "", &o)?;
            let v = store.commit(p, o.dry_run)?;
            Ok(json_response(200, &core_to_events(&v)))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}
