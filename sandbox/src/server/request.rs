//! Reading a resource request: the target URL, the verb, options, body and selectors.

use super::{App, Query};
use crate::identity::UserInfo;
use crate::resources::ResourceInfo;
use crate::selector::{self, FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult};
use crate::store::{self, Store, WriteOpts};
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, header};
use serde_json::{Value, json};
use std::borrow::Cow;
use std::sync::Arc;

/// An authenticated request.
#[derive(Debug)]
pub(super) struct Request<'a> {
    pub app: &'a Arc<App>,
    pub method: &'a Method,
    pub q: &'a Query,
    pub headers: &'a HeaderMap,
    pub body: Bytes,
    pub user: &'a UserInfo,
    /// The authenticated user before any impersonation (whom injected faults may target).
    pub requester: &'a str,
}

impl Request<'_> {
    /// `?watch=true` (or `1`).
    pub fn is_watch(&self) -> bool {
        self.q.get("watch").is_some_and(|w| w == "true" || w == "1")
    }

    /// The media type of the body, parameters included (empty when absent).
    pub fn content_type(&self) -> String {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    }

    /// The DeleteOptions of a delete: the body (if any), `?propagationPolicy=` winning.
    pub fn delete_options(&self) -> Value {
        let mut opts: Value = if self.body.is_empty() {
            json!({})
        } else {
            serde_json::from_slice(&self.body).unwrap_or(json!({}))
        };
        if let Some(p) = self.q.get("propagationPolicy") {
            opts["propagationPolicy"] = json!(p);
        }
        opts
    }

    /// `?labelSelector=`.
    pub fn label_selector(&self) -> ApiResult<LabelSelector> {
        LabelSelector::parse(self.q.get("labelSelector").map(String::as_str).unwrap_or_default())
    }
}

/// A parsed resource URL.
#[derive(Debug)]
pub(super) struct Target {
    pub ri: ResourceInfo,
    pub ns: Option<String>,
    pub name: Option<String>,
    pub sub: String,
}

impl Target {
    /// The namespace, empty for cluster-scoped requests.
    pub fn namespace(&self) -> String {
        self.ns.clone().unwrap_or_default()
    }
}

pub(super) fn parse_target(store: &Store, g: &str, v: &str, rest: &[&str]) -> ApiResult<Target> {
    let (ns, rest) = if rest.len() >= 3
        && rest[0] == "namespaces"
        && !(g.is_empty() && rest.len() == 3 && (rest[2] == "status" || rest[2] == "finalize"))
    {
        (Some(rest[1].to_string()), &rest[2..])
    } else {
        (None, rest)
    };
    let (plural, name, sub) = match rest {
        [p] => (*p, None, ""),
        [p, n] => (*p, Some(n.to_string()), ""),
        [p, n, s] => (*p, Some(n.to_string()), *s),
        _ => return Err(ApiError::path_not_found()),
    };
    let ri = store.resource(g, v, plural).ok_or_else(ApiError::path_not_found)?;
    if ns.is_some() && !ri.namespaced {
        return Err(ApiError::path_not_found());
    }
    if ri.namespaced && ns.is_none() && name.is_some() {
        return Err(ApiError::path_not_found());
    }
    let sub_ok = sub.is_empty()
        || sub == "status" && ri.status
        || sub == "scale" && ri.scale.is_some()
        || sub == "finalize" && ri.plural == "namespaces"
        || sub == "log" && ri.group.is_empty() && ri.plural == "pods";
    if !sub_ok {
        return Err(ApiError::path_not_found());
    }
    Ok(Target { ri, ns, name, sub: sub.to_string() })
}

pub(super) fn write_opts(q: &Query, headers: &HeaderMap) -> ApiResult<WriteOpts> {
    let dry = q.get("dryRun").map(String::as_str);
    if let Some(d) = dry
        && d != "All"
        && !d.is_empty()
    {
        return Err(ApiError::bad_request(format!(
            "Invalid dry run value: \"{d}\"; supported values are All"
        )));
    }
    let manager = match q.get("fieldManager") {
        Some(m) if !m.is_empty() => m.clone(),
        _ => headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(|ua| ua.split('/').next().unwrap_or_default().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown".into()),
    };
    Ok(WriteOpts {
        dry_run: dry == Some("All"),
        field_manager: manager,
        force: q.get("force").is_some_and(|f| f == "true"),
    })
}

pub(super) fn decode_body(headers: &HeaderMap, body: &[u8]) -> ApiResult<Value> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let ct = ct.split(';').next().unwrap_or_default().trim();
    match ct {
        "application/json" | "" => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding JSON: {e}"))),
        "application/vnd.kubernetes.protobuf" => crate::protobuf::decode(body),
        "application/yaml" => crate::decode_yaml(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}"))),
        other => Err(ApiError::unsupported_media_type(other)),
    }
}

/// `Some(includeObject)` when the client asked for a Table (`Accept: ...;as=Table;...`).
pub(super) fn table_request(headers: &HeaderMap, q: &Query) -> Option<String> {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !crate::table::wants_table(accept) {
        return None;
    }
    Some(q.get("includeObject").cloned().unwrap_or_else(|| "Metadata".into()))
}

/// `fieldValidation` (<https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation>):
/// Strict fails with kube-apiserver's strict decoding error, Warn (the default) returns warnings.
pub(super) fn field_validation(
    ri: &ResourceInfo,
    obj: &Value,
    q: &Query,
) -> ApiResult<Vec<String>> {
    let mode = q.get("fieldValidation").map(String::as_str).unwrap_or("Warn");
    if mode == "Ignore" || ri.custom && ri.schema.is_none() {
        return Ok(vec![]);
    }
    let mut unknown = vec![];
    crate::openapi::unknown_fields(obj, store::schema_node(ri), "", &mut unknown);
    if unknown.is_empty() {
        return Ok(vec![]);
    }
    let msgs: Vec<String> = unknown.iter().map(|f| format!("unknown field \"{f}\"")).collect();
    if mode == "Strict" {
        return Err(ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
            ri.kind,
            ri.version,
            ri.kind,
            msgs.join(", ")
        )));
    }
    Ok(msgs)
}

/// Objects served at the version the client asked for (no conversion: same schema); borrowed
/// when the stored object is already at that version, so serving it copies nothing.
pub(super) fn at_version<'a>(ri: &ResourceInfo, v: &'a Value) -> Cow<'a, Value> {
    if crate::convert::is_events_api(&ri.group, &ri.plural) {
        return Cow::Owned(crate::convert::core_to_events(v));
    }
    let api_version = ri.api_version();
    if v.get("apiVersion").and_then(Value::as_str) == Some(api_version.as_str()) {
        return Cow::Borrowed(v);
    }
    let mut o = v.clone();
    o["apiVersion"] = json!(api_version);
    Cow::Owned(o)
}

/// A metadata-only response asked for with `Accept: ...;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`
/// (or `PartialObjectMetadataList` for a list), as kube-rs' `*_metadata` calls and client-go's
/// metadata client ask (kube-apiserver's `transformResponseObject`).
#[derive(Debug, Clone)]
pub(super) struct PartialMetadata {
    /// `PartialObjectMetadataList` was asked for.
    pub list: bool,
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`.
    pub api_version: String,
}

impl PartialMetadata {
    /// The object as `PartialObjectMetadata`: its metadata only.
    pub fn of(&self, o: &Value) -> Value {
        json!({"kind": "PartialObjectMetadata", "apiVersion": self.api_version,
               "metadata": o.get("metadata").cloned().unwrap_or_else(|| json!({}))})
    }

    /// 406 for the wrong one of the two kinds (a list asked for as an object or the reverse),
    /// worded as kube-apiserver's `errNotAcceptable`.
    pub fn check(&self, list: bool) -> ApiResult<()> {
        if self.list == list {
            return Ok(());
        }
        let message = if list {
            "you requested PartialObjectMetadata, but the requested object is a list (*v1.PartialObjectMetadataList)"
        } else {
            "you requested PartialObjectMetadataList, but the requested object is not a list (*v1.PartialObjectMetadata)"
        };
        Err(ApiError { code: 406, reason: "NotAcceptable", message: message.into(), details: None })
    }
}

/// The [`PartialMetadata`] the first media type of `Accept` asks for, if any.
pub(super) fn partial_metadata_request(headers: &HeaderMap) -> Option<PartialMetadata> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
    let first = accept.split(',').next()?;
    let param = |name: &str| {
        first.split(';').skip(1).find_map(|p| {
            let (k, v) = p.split_once('=')?;
            (k.trim() == name).then(|| v.trim())
        })
    };
    let list = match param("as")? {
        "PartialObjectMetadata" => false,
        "PartialObjectMetadataList" => true,
        _ => return None,
    };
    let version = param("v").filter(|v| matches!(*v, "v1" | "v1beta1"))?;
    (param("g")? == "meta.k8s.io")
        .then(|| PartialMetadata { list, api_version: format!("meta.k8s.io/{version}") })
}

/// The RBAC verb of a request on `t`.
pub(super) fn verb_of(req: &Request, t: &Target) -> &'static str {
    match (req.method.clone(), &t.name) {
        (Method::GET, None) if req.is_watch() => "watch",
        (Method::GET, None) => "list",
        (Method::GET, Some(_)) => "get",
        (Method::POST, _) => "create",
        (Method::PUT, _) => "update",
        (Method::PATCH, _) => "patch",
        (Method::DELETE, None) => "deletecollection",
        (Method::DELETE, Some(_)) => "delete",
        _ => "",
    }
}

/// The label and field selectors of a list or watch (`events.k8s.io` selects on `regarding.*`,
/// stored as core Events' `involvedObject.*`).
pub(super) fn list_selectors(
    req: &Request,
    ri: &ResourceInfo,
) -> ApiResult<(LabelSelector, FieldSelector)> {
    let labels = req.label_selector()?;
    let mut allowed = selector::builtin_field_labels(&ri.group, &ri.plural);
    allowed.extend(ri.selectable_fields.iter().cloned());
    let mut fs = req.q.get("fieldSelector").cloned().unwrap_or_default();
    if crate::convert::is_events_api(&ri.group, &ri.plural) {
        // Stored as core Events: regarding.* is involvedObject.*.
        fs = fs.replace("regarding.", "involvedObject.");
        allowed = selector::builtin_field_labels("", "events");
    }
    let fsel = FieldSelector::parse(&fs, &allowed)?;
    Ok((labels, fsel))
}

/// ListOptions validation of a list or watch, answered as kube-apiserver's 422
/// (`k8s.io/apimachinery/pkg/apis/meta/internalversion/validation`: `ValidateListOptions`,
/// WatchList enabled as in v1.33).
pub(super) fn validate_list_options(q: &Query, watch: bool) -> ApiResult<()> {
    let rv = q.get("resourceVersion").map(String::as_str).unwrap_or_default();
    let m = q.get("resourceVersionMatch").map(String::as_str).unwrap_or_default();
    let cont = q.get("continue").is_some_and(|c| !c.is_empty());
    let initial = q.contains_key("sendInitialEvents");
    let forbidden = |field: &str, detail: &str| {
        (field.to_string(), "FieldValueForbidden".to_string(), format!("Forbidden: {detail}"))
    };
    let unsupported = |value: &str, allowed: &[&str]| {
        let allowed: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
        (
            "resourceVersionMatch".to_string(),
            "FieldValueNotSupported".to_string(),
            format!("Unsupported value: {value:?}: supported values: {}", allowed.join(", ")),
        )
    };
    let mut errs = vec![];
    if watch {
        if initial && m != "NotOlderThan" {
            errs.push(forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !m.is_empty() {
            if !initial {
                errs.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if m != "NotOlderThan" {
                errs.push(unsupported(m, &["NotOlderThan"]));
            }
            if cont {
                errs.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
    } else {
        if !m.is_empty() {
            if rv.is_empty() {
                errs.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if cont {
                errs.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if m != "Exact" && m != "NotOlderThan" {
                errs.push(unsupported(m, &["Exact", "NotOlderThan", ""]));
            }
            if m == "Exact" && rv == "0" {
                errs.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if initial {
            errs.push(forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"));
        }
    }
    if errs.is_empty() {
        return Ok(());
    }
    // errors.NewInvalid(GroupKind{meta.k8s.io, ListOptions}, "", errs).
    let mut e = ApiError::invalid("meta.k8s.io", "ListOptions", "", errs);
    e.message = e.message.replacen("ListOptions", "ListOptions.meta.k8s.io", 1);
    if let Some(d) = e.details.as_mut().and_then(Value::as_object_mut) {
        d.remove("name");
    }
    Err(e)
}

/// A resourceVersion parameter as a number (`invalid resource version` otherwise).
pub(super) fn parse_rv(rv: &str) -> ApiResult<u64> {
    rv.parse().map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))
}

/// Wait up to 3 s for the store to reach `rv`, then answer 504 "Too large resource version"
/// (the watch cache's `waitUntilFreshAndBlock`).
pub(super) async fn wait_until_fresh(store: &Store, rv: u64) -> ApiResult<()> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let cur = store.current_rv();
        if cur >= rv {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(store::too_large_rv(rv, cur));
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
