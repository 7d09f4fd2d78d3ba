//! Requests on resource URLs: authorization, injected faults, then one handler per verb.

use super::request::{
    Request, Target, at_version, decode_body, field_validation, list_selectors, parse_rv,
    parse_target, partial_metadata_request, table_request, validate_list_options, verb_of,
    wait_until_fresh, write_opts,
};
use super::{error_response, json_response, with_warnings};
use crate::faults::Action;
use crate::selector::{self, FieldSelector};
use crate::status::{ApiError, ApiResult};
use crate::store::{self, WriteOpts};
use axum::body::{Body, Bytes};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::borrow::Cow;

/// `/api/v1/...` or `/apis/GROUP/VERSION/...` below the group version: `rest`.
pub(super) async fn resource_request(
    req: &Request<'_>,
    g: &str,
    v: &str,
    rest: &[&str],
) -> ApiResult<Response> {
    let t = parse_target(&req.app.store, g, v, rest)?;
    let verb = verb_of(req, &t);
    authorize(req, &t, verb)?;
    let fault = req.app.faults.decide_on(verb, req.requester, Some(&t.ri.plural)).await;
    if let Some(r) = injected_fault(fault)? {
        return Ok(r);
    }
    let ri = &t.ri;
    if crate::convert::is_events_api(&ri.group, &ri.plural)
        && matches!(*req.method, Method::POST | Method::PUT | Method::PATCH)
    {
        return super::events_api::write(req, &t).await;
    }
    if ri.create_only {
        return access_review(req, &t);
    }
    match (req.method.clone(), t.name.as_deref()) {
        (Method::GET, None) => list_or_watch(req, &t).await,
        (Method::GET, Some(name)) if t.sub == "log" => pod_log(req, &t, name),
        (Method::GET, Some(name)) => get(req, &t, name),
        (Method::POST, None) => create(req, &t).await,
        (Method::PUT, Some(name)) if t.sub == "scale" => super::scale::update(req, &t, name),
        (Method::PUT, Some(name)) => update(req, &t, name).await,
        (Method::PATCH, Some(name)) if t.sub == "scale" => super::scale::patch(req, &t, name),
        (Method::PATCH, Some(name)) => patch(req, &t, name).await,
        (Method::DELETE, Some(name)) => delete(req, &t, name).await,
        (Method::DELETE, None) => delete_collection(req, &t),
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// RBAC with the request's attributes; Forbidden worded as kube-apiserver's.
fn authorize(req: &Request, t: &Target, verb: &str) -> ApiResult<()> {
    let attrs = crate::authz::Attributes {
        verb: verb.to_string(),
        group: t.ri.group.clone(),
        resource: t.ri.plural.clone(),
        subresource: t.sub.clone(),
        namespace: t.namespace(),
        name: t.name.clone().unwrap_or_default(),
        path: None,
    };
    crate::authz::authorize(&req.app.store, req.user, &attrs)
        .map(|_| ())
        .map_err(|reason| crate::authz::forbidden(req.user, &attrs, &reason))
}

/// The response an injected fault replaces serving with, if any.
fn injected_fault(action: Action) -> ApiResult<Option<Response>> {
    match action {
        Action::Serve => Ok(None),
        Action::Error(code) => Ok(Some(injected_error(code))),
        Action::Reset => {
            // A body that fails at once makes the server abort the connection.
            let s = futures::stream::once(async {
                Err::<Bytes, std::io::Error>(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "injected reset",
                ))
            });
            Response::builder()
                .status(200)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from_stream(s))
                .map(Some)
                .map_err(|e| ApiError::internal(e.to_string()))
        }
    }
}

/// An injected error Status, worded as kube-apiserver's for the code.
fn injected_error(code: u16) -> Response {
    let (reason, message): (&'static str, String) = match code {
        429 => ("TooManyRequests", "the server has received too many requests and has asked us to try again later".into()),
        503 => ("ServiceUnavailable", "the server is currently unable to handle the request".into()),
        504 => ("Timeout", "the server was unable to return a response in the time allotted, but may still be processing the request".into()),
        403 => ("Forbidden", "the requester may not do this (injected fault)".into()),
        _ => ("InternalError", "Internal error occurred: injected fault".into()),
    };
    let e = ApiError { code, reason, message, details: Some(json!({"retryAfterSeconds": 1})) };
    let mut r = error_response(&e);
    if code == 429 {
        r.headers_mut().insert(header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
    }
    r
}

/// Create-only review resources (SubjectAccessReview and friends): answered, never stored.
fn access_review(req: &Request, t: &Target) -> ApiResult<Response> {
    let ri = &t.ri;
    if *req.method != Method::POST || t.name.is_some() {
        return Err(ApiError::method_not_allowed());
    }
    let body = decode_body(req.headers, &req.body)?;
    let mut out = crate::authz::review(&req.app.store, req.user, &ri.plural, body)?;
    out["apiVersion"] = json!(ri.api_version());
    out["kind"] = json!(ri.kind);
    Ok(json_response(201, &out))
}

/// `list` (optionally paged, or as a Table) or `watch` on a collection.
async fn list_or_watch(req: &Request<'_>, t: &Target) -> ApiResult<Response> {
    let ri = &t.ri;
    let (labels, fsel) = list_selectors(req, ri)?;
    validate_list_options(req.q, req.is_watch())?;
    if req.is_watch() {
        // A streaming list (sendInitialEvents and allowWatchBookmarks: the cacher's
        // isListWatchRequest) waits until the state is at least as new as its resourceVersion
        // (waitUntilWatchCacheFreshAndForceAllEvents): 504 if it never gets there.
        let rv = req.q.get("resourceVersion").map(String::as_str).unwrap_or_default();
        let on = |k: &str| req.q.get(k).is_some_and(|s| s == "true");
        if on("sendInitialEvents") && on("allowWatchBookmarks") && !rv.is_empty() {
            wait_until_fresh(&req.app.store, parse_rv(rv)?).await?;
        }
        let table = table_request(req.headers, req.q);
        let partial = partial_metadata_request(req.headers);
        if let Some(p) = &partial {
            p.check(false)?;
        }
        let resuming = !rv.is_empty() && rv != "0";
        let faults = req.app.faults.watch_plan(req.requester, resuming);
        let watch = super::watch::Watch { labels, fsel, table, partial, faults };
        return super::watch::watch(req.app, ri.clone(), t.ns.clone(), watch, req.q);
    }
    let q = req.q;
    let partial = partial_metadata_request(req.headers);
    if let Some(p) = &partial {
        p.check(true)?;
    }
    let limit = q.get("limit").and_then(|l| l.parse::<usize>().ok()).filter(|l| *l > 0);
    let cont = q.get("continue").map(String::as_str).filter(|c| !c.is_empty());
    let rv = q.get("resourceVersion").map(String::as_str).unwrap_or_default();
    let rv_match = q.get("resourceVersionMatch").map(String::as_str).unwrap_or_default();
    // The resourceVersion semantics of a list (API concepts, "Semantics for get and list").
    let at = if cont.is_some() {
        if !rv.is_empty() && rv != "0" {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        store::ReadAt::Latest
    } else if rv.is_empty() || rv == "0" {
        // Most recent (consistent read) or any version: the newest.
        store::ReadAt::Latest
    } else {
        let n = parse_rv(rv)?;
        wait_until_fresh(&req.app.store, n).await?;
        // Exact, or unset match with a limit (legacy exact for paged lists): that snapshot;
        // otherwise NotOlderThan: the newest, which is not older.
        if rv_match == "Exact" || rv_match.is_empty() && limit.is_some() {
            store::ReadAt::Exact(n)
        } else {
            store::ReadAt::Latest
        }
    };
    let (items, rv, cont, remaining) =
        req.app.store.list(ri, t.ns.as_deref(), &labels, &fsel, limit, cont, at)?;
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    if let Some(r) = remaining {
        meta["remainingItemCount"] = json!(r);
    }
    let items: Vec<Cow<'_, Value>> = items.iter().map(|o| at_version(ri, o)).collect();
    if let Some(include) = table_request(req.headers, q) {
        let items: Vec<Value> = items.into_iter().map(Cow::into_owned).collect();
        let t = crate::table::table(ri, &items, meta, &include, true);
        return Ok(json_response(200, &t));
    }
    if let Some(p) = partial {
        let items: Vec<Value> = items.iter().map(|o| p.of(o)).collect();
        let list = json!({"kind": "PartialObjectMetadataList", "apiVersion": p.api_version, "metadata": meta, "items": items});
        return Ok(json_response(200, &list));
    }
    Ok(json_response(200, &List::new(ri, meta, items)))
}

/// A list body serialised from the stored objects as they are (copying none of them); its
/// members in the order `json!` gives them (sorted keys), so the bytes are the same.
#[derive(serde::Serialize)]
struct List<'a> {
    #[serde(rename = "apiVersion")]
    api_version: String,
    items: Vec<Cow<'a, Value>>,
    kind: String,
    metadata: Value,
}

impl<'a> List<'a> {
    fn new(
        ri: &crate::resources::ResourceInfo,
        metadata: Value,
        items: Vec<Cow<'a, Value>>,
    ) -> Self {
        List { api_version: ri.api_version(), items, kind: format!("{}List", ri.kind), metadata }
    }
}

/// `pods/log`: the simulated container's log as plain text.
fn pod_log(req: &Request, t: &Target, name: &str) -> ApiResult<Response> {
    let o = req.app.store.get(&t.ri, &t.namespace(), name)?;
    let text = crate::simulator::logs::pod_log(
        &o,
        req.q.get("container").map(String::as_str),
        req.q.get("previous").is_some_and(|p| p == "true"),
    )?;
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], text).into_response())
}

/// `get` of one object (its Scale view for `/scale`, or as a Table).
fn get(req: &Request, t: &Target, name: &str) -> ApiResult<Response> {
    let ri = &t.ri;
    let o = req.app.store.get(ri, &t.namespace(), name)?;
    if t.sub == "scale" {
        return Ok(json_response(200, &super::scale::scale_of(ri, &o)));
    }
    if let Some(p) = partial_metadata_request(req.headers) {
        p.check(false)?;
        return Ok(json_response(200, &p.of(&o)));
    }
    if let Some(include) = table_request(req.headers, req.q) {
        let meta = json!({"resourceVersion": store::rv_of(&o)});
        let t = crate::table::table(ri, &[at_version(ri, &o).into_owned()], meta, &include, true);
        return Ok(json_response(200, &t));
    }
    Ok(json_response(200, &at_version(ri, &o)))
}

/// `create` (POST to the collection), through field validation and admission.
async fn create(req: &Request<'_>, t: &Target) -> ApiResult<Response> {
    let (ri, store) = (&t.ri, &req.app.store);
    let o = write_opts(req.q, req.headers)?;
    let obj = decode_body(req.headers, &req.body)?;
    let mut warnings = field_validation(ri, &obj, req.q)?;
    let mut p = store.begin_create(ri, &t.namespace(), obj, &o)?;
    warnings.extend(admit(req, &mut p, "CREATE", &o).await?);
    let created = store.commit(p, o.dry_run)?;
    Ok(with_warnings(json_response(201, &created), &warnings))
}

/// `update` (PUT) of an object or its `/status`, through field validation and admission.
async fn update(req: &Request<'_>, t: &Target, name: &str) -> ApiResult<Response> {
    let (ri, store) = (&t.ri, &req.app.store);
    let o = write_opts(req.q, req.headers)?;
    let obj = decode_body(req.headers, &req.body)?;
    let mut warnings = field_validation(ri, &obj, req.q)?;
    let mut p = store.begin_update(ri, &t.namespace(), name, obj, &t.sub, &o)?;
    warnings.extend(admit(req, &mut p, "UPDATE", &o).await?);
    let updated = store.commit(p, o.dry_run)?;
    Ok(with_warnings(json_response(200, &updated), &warnings))
}

/// `patch` (JSON, merge, strategic merge or server-side apply); an apply may create.
/// Patches are retried on conflicts with concurrent writers, as kube-apiserver does.
async fn patch(req: &Request<'_>, t: &Target, name: &str) -> ApiResult<Response> {
    let (ri, store, ns) = (&t.ri, &req.app.store, t.namespace());
    let o = write_opts(req.q, req.headers)?;
    let ct = req.content_type();
    let is_apply = ct.starts_with("application/apply-patch");
    validate_patch_options(req, is_apply)?;
    let mut warnings = vec![];
    if is_apply && ri.custom {
        let applied: Value = crate::decode_yaml(&req.body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        warnings = field_validation(ri, &applied, req.q)?;
    } else if !is_apply && !ri.custom {
        warnings = patch_field_validation(req, t, name, &ct)?;
    }
    let mut last = None;
    for _ in 0..5 {
        let mut p = store.begin_patch(ri, &ns, name, &ct, &req.body, &t.sub, &o)?;
        let created = p.old.is_none();
        let op = if created { "CREATE" } else { "UPDATE" };
        warnings.extend(admit(req, &mut p, op, &o).await?);
        match store.commit(p, o.dry_run) {
            Ok(v) => {
                let code = if created { 201 } else { 200 };
                return Ok(with_warnings(json_response(code, &v), &warnings));
            }
            Err(e) if e.code == 409 && e.reason == "Conflict" => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| ApiError::internal("patch retries exhausted")))
}

/// kube-apiserver's `ValidatePatchOptions`: an apply names its field manager, only an apply may
/// force.
fn validate_patch_options(req: &Request, is_apply: bool) -> ApiResult<()> {
    let invalid = |field: &str, reason: &str, msg: &str| {
        let mut e = ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions.meta.k8s.io",
            "",
            vec![(field.into(), reason.into(), msg.into())],
        );
        if let Some(d) = e.details.as_mut() {
            d["kind"] = json!("PatchOptions");
        }
        e
    };
    if is_apply && req.q.get("fieldManager").is_none_or(|m| m.is_empty()) {
        return Err(invalid(
            "fieldManager",
            "FieldValueRequired",
            "Required value: is required for apply patch",
        ));
    }
    if !is_apply && req.q.contains_key("force") {
        return Err(invalid(
            "force",
            "FieldValueForbidden",
            "Forbidden: may not be specified for non-apply patch",
        ));
    }
    Ok(())
}

/// `fieldValidation` of a JSON, merge or strategic merge patch on a built-in kind: the patched
/// object is checked as kube-apiserver decodes it (Strict: 422 naming the unknown fields; Warn,
/// the default: warnings; Ignore: nothing). Unknown fields are dropped when stored.
fn patch_field_validation(
    req: &Request,
    t: &Target,
    name: &str,
    ct: &str,
) -> ApiResult<Vec<String>> {
    let mode = req.q.get("fieldValidation").map(String::as_str).unwrap_or("Warn");
    if mode == "Ignore" {
        return Ok(vec![]);
    }
    let Ok(old) = req.app.store.get(&t.ri, &t.namespace(), name) else {
        return Ok(vec![]);
    };
    let doc = req.app.store.patched(&t.ri, &old, ct, &req.body)?;
    let mut unknown = vec![];
    crate::openapi::unknown_fields(&doc, store::schema_node(&t.ri), "", &mut unknown);
    let msgs: Vec<String> = unknown.iter().map(|f| format!("unknown field \"{f}\"")).collect();
    if mode == "Strict" && !msgs.is_empty() {
        let value = serde_json::to_string(&serde_json::to_string(&doc).unwrap_or_default())
            .unwrap_or_default();
        return Err(ApiError {
            code: 422,
            reason: "Invalid",
            message: format!(
                " \"\" is invalid: patch: Invalid value: {value}: strict decoding error: {}",
                msgs.join(", ")
            ),
            details: Some(
                json!({"causes": [{"reason": "FieldValueInvalid", "message": format!("Invalid value: {value}: strict decoding error: {}", msgs.join(", ")), "field": "patch"}]}),
            ),
        });
    }
    Ok(msgs)
}

/// `delete` of one object, through admission.
async fn delete(req: &Request<'_>, t: &Target, name: &str) -> ApiResult<Response> {
    let (ri, store, ns) = (&t.ri, &req.app.store, t.namespace());
    let opts = req.delete_options();
    let dry = req.q.get("dryRun").is_some_and(|d| d == "All")
        || opts["dryRun"].as_array().is_some_and(|a| a.iter().any(|x| x == "All"));
    let cur = store.get(ri, &ns, name)?;
    let areq = crate::admission::Request {
        ri,
        operation: "DELETE",
        subresource: "",
        namespace: &ns,
        name,
        user: req.user,
        old: Some(&cur),
        dry_run: dry,
        options: options_object("DeleteOptions", dry, |o| {
            if let Some(pp) = opts.get("propagationPolicy").filter(|p| !p.is_null()) {
                o["propagationPolicy"] = pp.clone();
            }
        }),
    };
    crate::admission::mutate(store, &req.app.services, &areq, &mut None).await?;
    crate::admission::validate(store, &req.app.services, &areq, None).await?;
    let (resp, _) = store.delete(ri, &ns, name, &opts, dry)?;
    Ok(json_response(200, &resp))
}

/// `deletecollection`: delete what the selectors match; answers with the deleted objects.
fn delete_collection(req: &Request, t: &Target) -> ApiResult<Response> {
    let (ri, store, q) = (&t.ri, &req.app.store, req.q);
    let labels = req.label_selector()?;
    let fsel = FieldSelector::parse(
        q.get("fieldSelector").map(String::as_str).unwrap_or_default(),
        &selector::builtin_field_labels(&ri.group, &ri.plural),
    )?;
    let opts = req.delete_options();
    let dry = q.get("dryRun").is_some_and(|d| d == "All");
    let (items, _, _, _) =
        store.list(ri, t.ns.as_deref(), &labels, &fsel, None, None, store::ReadAt::Latest)?;
    let mut deleted = vec![];
    for o in items {
        if let Ok((_, _)) = store.delete(ri, store::ns_of(&o), store::name_of(&o), &opts, dry) {
            deleted.push(at_version(ri, &o).into_owned());
        }
    }
    let list = json!({"kind": format!("{}List", ri.kind), "apiVersion": ri.api_version(), "metadata": {"resourceVersion": store.current_rv().to_string()}, "items": deleted});
    Ok(json_response(200, &list))
}

/// The `request.options` object of an AdmissionReview: `dryRun: ["All"]` on a dry run.
fn options_object(kind: &str, dry_run: bool, extra: impl FnOnce(&mut Value)) -> Value {
    let mut o = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if dry_run {
        o["dryRun"] = json!(["All"]);
    }
    extra(&mut o);
    o
}

/// Admission of a prepared write as kube-apiserver orders it: mutating webhooks, then the
/// registry's defaulting and validation ([`store::Store::complete`]), then validating webhooks.
async fn admit(
    req: &Request<'_>,
    p: &mut store::Pending,
    operation: &'static str,
    o: &WriteOpts,
) -> ApiResult<Vec<String>> {
    let name = store::name_of(&p.obj).to_string();
    let ns = store::ns_of(&p.obj).to_string();
    let kind = if operation == "CREATE" {
        "CreateOptions"
    } else if *req.method == Method::PUT {
        "UpdateOptions"
    } else {
        "PatchOptions"
    };
    let old = p.old.clone();
    let ri = p.ri.clone();
    let sub = p.subresource.clone();
    let areq = crate::admission::Request {
        ri: &ri,
        operation,
        subresource: &sub,
        namespace: &ns,
        name: &name,
        user: req.user,
        old: old.as_deref(),
        dry_run: o.dry_run,
        options: options_object(kind, o.dry_run, |opts| {
            if !o.field_manager.is_empty() {
                opts["fieldManager"] = json!(o.field_manager);
            }
            if kind == "PatchOptions" && o.force {
                opts["force"] = json!(true);
            }
        }),
    };
    let (store, services) = (&req.app.store, &req.app.services);
    let mut obj = Some(p.obj.clone());
    let mut warnings = crate::admission::mutate(store, services, &areq, &mut obj).await?;
    if let Some(mut obj) = obj {
        if let Some(w) = crate::admission::restore_invalid_managed_fields(&p.obj, &mut obj) {
            warnings.push(w);
        }
        p.obj = obj;
    }
    store.complete(p)?;
    warnings.extend(crate::admission::validate(store, services, &areq, Some(&p.obj)).await?);
    Ok(warnings)
}
