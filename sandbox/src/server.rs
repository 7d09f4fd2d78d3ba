//! The HTTP layer: routing of Kubernetes API paths, authentication, discovery, verbs and watch
//! streams (<https://kubernetes.io/docs/reference/using-api/api-concepts/>).

use crate::resources::ResourceInfo;
use crate::selector::{self, FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult};
use crate::store::{self, EventType, Store, WriteOpts};
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Who is calling.
#[derive(Debug, Clone)]
pub struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Shared server state.
#[derive(Debug)]
pub struct App {
    pub store: Arc<Store>,
    pub admin_token: String,
    pub addr: std::net::SocketAddr,
    pub bookmark_interval: Duration,
    pub services: crate::admission::ServiceMap,
    pub faults: crate::faults::Faults,
    /// Bearer tokens of further identities (see `Sandbox::user_kubeconfig`).
    pub tokens: std::sync::RwLock<HashMap<String, UserInfo>>,
}

pub type Query = HashMap<String, String>;

fn json_response(code: u16, v: &Value) -> Response {
    let body = serde_json::to_vec(v).unwrap_or_default();
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::OK),
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

pub fn error_response(e: &ApiError) -> Response {
    json_response(e.code, &e.to_status())
}

fn parse_query(q: Option<&str>) -> Query {
    let mut out = HashMap::new();
    if let Some(q) = q {
        for part in q.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            out.insert(pct_decode(k), pct_decode(v));
        }
    }
    out
}

fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let h = std::str::from_utf8(&b[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match h {
                    Some(c) => {
                        out.push(c);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Entry point for every request.
pub async fn handle(
    app: Arc<App>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let q = parse_query(uri.query());
    let path = uri.path().to_string();
    match route(&app, &method, &path, &q, &headers, body).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

fn authenticate(app: &App, headers: &HeaderMap) -> ApiResult<UserInfo> {
    let auth = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let token = auth.strip_prefix("Bearer ").unwrap_or_default().trim();
    if !token.is_empty() && token == app.admin_token {
        return Ok(UserInfo {
            username: "kubernetes-admin".into(),
            uid: String::new(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
            extra: BTreeMap::new(),
        });
    }
    if !token.is_empty()
        && let Some(u) = app.tokens.read().unwrap_or_else(|e| e.into_inner()).get(token)
    {
        return Ok(u.clone());
    }
    Err(ApiError::unauthorized())
}

async fn route(
    app: &Arc<App>,
    method: &Method,
    path: &str,
    q: &Query,
    headers: &HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    if matches!(segs.as_slice(), ["healthz"] | ["livez"] | ["readyz"]) {
        return Ok((StatusCode::OK, "ok").into_response());
    }
    let user = authenticate(app, headers)?;
    let user = crate::authz::impersonate(&app.store, user, headers)?;
    match segs.as_slice() {
        ["version"] => Ok(json_response(200, &version())),
        ["api"] => Ok(json_response(
            200,
            &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": app.addr.to_string()}]}),
        )),
        ["apis"] => Ok(json_response(200, &api_group_list(&app.store))),
        ["api", "v1"] => Ok(json_response(200, &resource_list(&app.store, "", "v1")?)),
        ["apis", g] => {
            let list = api_group_list(&app.store);
            let grp =
                list["groups"].as_array().into_iter().flatten().find(|x| x["name"] == *g).cloned();
            match grp {
                Some(mut grp) => {
                    grp["kind"] = json!("APIGroup");
                    grp["apiVersion"] = json!("v1");
                    Ok(json_response(200, &grp))
                }
                None => Err(ApiError::path_not_found()),
            }
        }
        ["apis", g, v] => Ok(json_response(200, &resource_list(&app.store, g, v)?)),
        ["openapi", "v3"] => Ok(json_response(200, &crate::openapi::root(&app.store.resources()))),
        ["openapi", "v3", "api", v] => crate::openapi::gv_document(&app.store.resources(), "", v)
            .map(|d| json_response(200, &d))
            .ok_or_else(ApiError::path_not_found),
        ["openapi", "v3", "apis", g, v] => {
            crate::openapi::gv_document(&app.store.resources(), g, v)
                .map(|d| json_response(200, &d))
                .ok_or_else(ApiError::path_not_found)
        }
        ["api", "v1", rest @ ..] => {
            resource_request(app, method, "", "v1", rest, q, headers, body, &user).await
        }
        ["apis", g, v, rest @ ..] => {
            resource_request(app, method, g, v, rest, q, headers, body, &user).await
        }
        _ => Err(ApiError::path_not_found()),
    }
}

fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": "v1.33.0",
        "gitCommit": "ksync-sandbox",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

fn api_group_list(store: &Store) -> Value {
    let mut groups: Vec<(String, Vec<String>, String)> = vec![];
    for r in store.resources() {
        if r.group.is_empty() {
            continue;
        }
        match groups.iter_mut().find(|g| g.0 == r.group) {
            Some(g) => {
                if !g.1.contains(&r.version) {
                    g.1.push(r.version.clone());
                }
                if r.storage {
                    g.2 = r.version.clone();
                }
            }
            None => groups.push((r.group.clone(), vec![r.version.clone()], r.version.clone())),
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(name, versions, preferred)| {
            json!({
                "name": name,
                "versions": versions.iter().map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v})).collect::<Vec<_>>(),
                "preferredVersion": {"groupVersion": format!("{name}/{preferred}"), "version": preferred},
            })
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn resource_list(store: &Store, g: &str, v: &str) -> ApiResult<Value> {
    let rs: Vec<ResourceInfo> =
        store.resources().into_iter().filter(|r| r.group == g && r.version == v).collect();
    if rs.is_empty() {
        return Err(ApiError::path_not_found());
    }
    let gv = if g.is_empty() { v.to_string() } else { format!("{g}/{v}") };
    let resources: Vec<Value> = rs.iter().flat_map(|r| r.discovery_entries()).collect();
    Ok(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// A parsed resource URL.
#[derive(Debug)]
struct Target {
    ri: ResourceInfo,
    ns: Option<String>,
    name: Option<String>,
    sub: String,
}

fn parse_target(store: &Store, g: &str, v: &str, rest: &[&str]) -> ApiResult<Target> {
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

fn write_opts(q: &Query, headers: &HeaderMap) -> ApiResult<WriteOpts> {
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

fn decode_body(headers: &HeaderMap, body: &[u8]) -> ApiResult<Value> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let ct = ct.split(';').next().unwrap_or_default().trim();
    match ct {
        "application/json" | "" => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding JSON: {e}"))),
        "application/vnd.kubernetes.protobuf" => crate::protobuf::decode(body),
        "application/yaml" => serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}"))),
        other => Err(ApiError::unsupported_media_type(other)),
    }
}

/// Run admission webhooks on a prepared write, mutating it in place.
async fn admit(
    app: &App,
    user: &UserInfo,
    p: &mut store::Pending,
    operation: &'static str,
    o: &WriteOpts,
    q: &Query,
) -> ApiResult<Vec<String>> {
    let name = store::name_of(&p.obj).to_string();
    let ns = store::ns_of(&p.obj).to_string();
    let kind = if operation == "CREATE" {
        "CreateOptions"
    } else if q.contains_key("force") || p.subresource.is_empty() && p.old.is_some() {
        "UpdateOptions"
    } else {
        "PatchOptions"
    };
    let old = p.old.clone();
    let req = crate::admission::Request {
        ri: &p.ri,
        operation,
        subresource: &p.subresource,
        namespace: &ns,
        name: &name,
        user,
        old: old.as_deref(),
        dry_run: o.dry_run,
        options: json!({"kind": kind, "apiVersion": "meta.k8s.io/v1", "fieldManager": o.field_manager}),
    };
    let mut obj = Some(p.obj.clone());
    let warnings = crate::admission::admit(&app.store, &app.services, &req, &mut obj).await?;
    if let Some(obj) = obj {
        p.obj = obj;
    }
    Ok(warnings)
}

/// `Some(includeObject)` when the client asked for a Table (`Accept: ...;as=Table;...`).
fn table_request(headers: &HeaderMap, q: &Query) -> Option<String> {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !crate::table::wants_table(accept) {
        return None;
    }
    Some(q.get("includeObject").cloned().unwrap_or_else(|| "Metadata".into()))
}

/// `fieldValidation` (<https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation>):
/// Strict fails with kube-apiserver's strict decoding error, Warn (the default) returns warnings.
fn field_validation(ri: &ResourceInfo, obj: &Value, q: &Query) -> ApiResult<Vec<String>> {
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

fn with_warnings(mut r: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let v = format!("299 - {:?}", w);
        if let Ok(h) = axum::http::HeaderValue::from_str(&v) {
            r.headers_mut().append(header::WARNING, h);
        }
    }
    r
}

/// Objects served at the version the client asked for (no conversion: same schema).
fn at_version(ri: &ResourceInfo, v: &Value) -> Value {
    if crate::convert::is_events_api(&ri.group, &ri.plural) {
        return crate::convert::core_to_events(v);
    }
    let mut o = v.clone();
    if o.get("apiVersion").and_then(Value::as_str) != Some(&ri.api_version()) {
        o["apiVersion"] = json!(ri.api_version());
    }
    o
}

#[allow(clippy::too_many_arguments)]
async fn resource_request(
    app: &Arc<App>,
    method: &Method,
    g: &str,
    v: &str,
    rest: &[&str],
    q: &Query,
    headers: &HeaderMap,
    body: Bytes,
    user: &UserInfo,
) -> ApiResult<Response> {
    let t = parse_target(&app.store, g, v, rest)?;
    let store = &app.store;
    let ns = t.ns.clone().unwrap_or_default();
    let ri = &t.ri;
    // Authorization (RBAC) with the request's attributes.
    let verb = match (method.clone(), &t.name) {
        (Method::GET, None) if q.get("watch").is_some_and(|w| w == "true" || w == "1") => "watch",
        (Method::GET, None) => "list",
        (Method::GET, Some(_)) => "get",
        (Method::POST, _) => "create",
        (Method::PUT, _) => "update",
        (Method::PATCH, _) => "patch",
        (Method::DELETE, None) => "deletecollection",
        (Method::DELETE, Some(_)) => "delete",
        _ => "",
    };
    let attrs = crate::authz::Attributes {
        verb: verb.to_string(),
        group: ri.group.clone(),
        resource: ri.plural.clone(),
        subresource: t.sub.clone(),
        namespace: ns.clone(),
        name: t.name.clone().unwrap_or_default(),
        path: None,
    };
    if let Err(reason) = crate::authz::authorize(store, user, &attrs) {
        return Err(crate::authz::forbidden(user, &attrs, &reason));
    }
    match app.faults.decide(verb).await {
        crate::faults::Action::Serve => {}
        crate::faults::Action::Error(code) => {
            let (reason, message): (&'static str, String) = match code {
                429 => ("TooManyRequests", "the server has received too many requests and has asked us to try again later".into()),
                503 => ("ServiceUnavailable", "the server is currently unable to handle the request".into()),
                504 => ("Timeout", "the server was unable to return a response in the time allotted, but may still be processing the request".into()),
                _ => ("InternalError", "Internal error occurred: injected fault".into()),
            };
            let e =
                ApiError { code, reason, message, details: Some(json!({"retryAfterSeconds": 1})) };
            let mut r = error_response(&e);
            if code == 429 {
                r.headers_mut()
                    .insert(header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
            }
            return Ok(r);
        }
        crate::faults::Action::Reset => {
            // A body that fails at once makes the server abort the connection.
            let s = futures::stream::once(async {
                Err::<Bytes, std::io::Error>(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "injected reset",
                ))
            });
            return Response::builder()
                .status(200)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from_stream(s))
                .map_err(|e| ApiError::internal(e.to_string()));
        }
    }
    if crate::convert::is_events_api(&ri.group, &ri.plural)
        && matches!(*method, Method::POST | Method::PUT | Method::PATCH)
    {
        return events_api_write(app, method, &t, q, headers, body).await;
    }
    if ri.create_only {
        if *method != Method::POST || t.name.is_some() {
            return Err(ApiError::method_not_allowed());
        }
        let body = decode_body(headers, &body)?;
        let mut out = crate::authz::review(store, user, &ri.plural, body)?;
        out["apiVersion"] = json!(ri.api_version());
        out["kind"] = json!(ri.kind);
        return Ok(json_response(201, &out));
    }
    match (method.clone(), &t.name) {
        (Method::GET, None) => {
            let labels = LabelSelector::parse(
                q.get("labelSelector").map(String::as_str).unwrap_or_default(),
            )?;
            let mut allowed = selector::builtin_field_labels(&ri.group, &ri.plural);
            allowed.extend(ri.selectable_fields.iter().cloned());
            let mut fs = q.get("fieldSelector").cloned().unwrap_or_default();
            if crate::convert::is_events_api(&ri.group, &ri.plural) {
                // Stored as core Events: regarding.* is involvedObject.*.
                fs = fs.replace("regarding.", "involvedObject.");
                allowed = selector::builtin_field_labels("", "events");
            }
            let fsel = FieldSelector::parse(&fs, &allowed)?;
            if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
                let table = table_request(headers, q);
                return watch(app, ri.clone(), t.ns.clone(), labels, fsel, q, table);
            }
            let limit = q.get("limit").and_then(|l| l.parse::<usize>().ok()).filter(|l| *l > 0);
            let (items, rv, cont, remaining) = store.list(
                ri,
                t.ns.as_deref(),
                &labels,
                &fsel,
                limit,
                q.get("continue").map(String::as_str),
            )?;
            let mut meta = json!({"resourceVersion": rv.to_string()});
            if let Some(c) = cont {
                meta["continue"] = json!(c);
            }
            if let Some(r) = remaining {
                meta["remainingItemCount"] = json!(r);
            }
            let items: Vec<Value> = items.iter().map(|o| at_version(ri, o)).collect();
            if let Some(include) = table_request(headers, q) {
                let t = crate::table::table(ri, &items, meta, &include, true);
                return Ok(json_response(200, &t));
            }
            let list = json!({"kind": format!("{}List", ri.kind), "apiVersion": ri.api_version(), "metadata": meta, "items": items});
            Ok(json_response(200, &list))
        }
        (Method::GET, Some(name)) if t.sub == "log" => {
            let o = store.get(ri, &ns, name)?;
            let text = crate::simulator::logs::pod_log(
                &o,
                q.get("container").map(String::as_str),
                q.get("previous").is_some_and(|p| p == "true"),
            )?;
            Ok((StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], text).into_response())
        }
        (Method::GET, Some(name)) => {
            let o = store.get(ri, &ns, name)?;
            if t.sub == "scale" {
                return Ok(json_response(200, &scale_of(ri, &o)));
            }
            if let Some(include) = table_request(headers, q) {
                let meta = json!({"resourceVersion": store::rv_of(&o)});
                let t = crate::table::table(ri, &[at_version(ri, &o)], meta, &include, true);
                return Ok(json_response(200, &t));
            }
            Ok(json_response(200, &at_version(ri, &o)))
        }
        (Method::POST, None) => {
            let o = write_opts(q, headers)?;
            let obj = decode_body(headers, &body)?;
            let warnings = field_validation(ri, &obj, q)?;
            let mut p = store.prepare_create(ri, &ns, obj, &o)?;
            let mut warnings = warnings;
            warnings.extend(admit(app, user, &mut p, "CREATE", &o, q).await?);
            let created = store.commit(p, o.dry_run)?;
            Ok(with_warnings(json_response(201, &created), &warnings))
        }
        (Method::PUT, Some(name)) => {
            let o = write_opts(q, headers)?;
            let mut obj = decode_body(headers, &body)?;
            if t.sub == "scale" {
                let cur = store.get(ri, &ns, name)?;
                let want = obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
                let rv = obj.pointer("/metadata/resourceVersion").cloned();
                obj = (*cur).clone();
                set_path(
                    &mut obj,
                    ri.scale.as_ref().map(|s| s.0.as_str()).unwrap_or(".spec.replicas"),
                    want,
                );
                if let Some(rv) = rv {
                    obj["metadata"]["resourceVersion"] = rv;
                }
                let p = store.prepare_update(ri, &ns, name, obj, "", &o)?;
                let done = store.commit(p, o.dry_run)?;
                return Ok(json_response(200, &scale_of(ri, &done)));
            }
            let warnings = field_validation(ri, &obj, q)?;
            let mut p = store.prepare_update(ri, &ns, name, obj, &t.sub, &o)?;
            let mut warnings = warnings;
            warnings.extend(admit(app, user, &mut p, "UPDATE", &o, q).await?);
            let updated = store.commit(p, o.dry_run)?;
            Ok(with_warnings(json_response(200, &updated), &warnings))
        }
        (Method::PATCH, Some(name)) => {
            let o = write_opts(q, headers)?;
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            if t.sub == "scale" {
                // Patch the Scale view, then write spec.replicas back.
                let cur = store.get(ri, &ns, name)?;
                let mut sc = scale_of(ri, &cur);
                let p: Value = serde_json::from_slice(&body)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                if ct.starts_with("application/json-patch+json") {
                    let jp: json_patch::Patch = serde_json::from_value(p)
                        .map_err(|e| ApiError::bad_request(e.to_string()))?;
                    json_patch::patch(&mut sc, &jp)
                        .map_err(|e| ApiError::bad_request(e.to_string()))?;
                } else {
                    json_patch::merge(&mut sc, &p);
                }
                let mut obj = (*cur).clone();
                set_path(
                    &mut obj,
                    ri.scale.as_ref().map(|s| s.0.as_str()).unwrap_or(".spec.replicas"),
                    sc.pointer("/spec/replicas").cloned().unwrap_or(json!(0)),
                );
                let p = store.prepare_update(ri, &ns, name, obj, "", &o)?;
                let done = store.commit(p, o.dry_run)?;
                return Ok(json_response(200, &scale_of(ri, &done)));
            }
            // Patches are retried on conflicts with concurrent writers, as kube-apiserver does.
            let mut warnings = vec![];
            if ct.starts_with("application/apply-patch") {
                let applied: Value = serde_yaml::from_slice(&body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
                warnings = field_validation(ri, &applied, q)?;
            }
            let mut last = None;
            for _ in 0..5 {
                let mut p = store.prepare_patch(ri, &ns, name, &ct, &body, &t.sub, &o)?;
                let created = p.old.is_none();
                let op = if created { "CREATE" } else { "UPDATE" };
                warnings.extend(admit(app, user, &mut p, op, &o, q).await?);
                match store.commit(p, o.dry_run) {
                    Ok(v) => {
                        return Ok(with_warnings(
                            json_response(if created { 201 } else { 200 }, &v),
                            &warnings,
                        ));
                    }
                    Err(e) if e.code == 409 && e.reason == "Conflict" => last = Some(e),
                    Err(e) => return Err(e),
                }
            }
            Err(last.unwrap_or_else(|| ApiError::internal("patch retries exhausted")))
        }
        (Method::DELETE, Some(name)) => {
            let mut opts: Value = if body.is_empty() {
                json!({})
            } else {
                serde_json::from_slice(&body).unwrap_or(json!({}))
            };
            if let Some(p) = q.get("propagationPolicy") {
                opts["propagationPolicy"] = json!(p);
            }
            let dry = q.get("dryRun").is_some_and(|d| d == "All")
                || opts["dryRun"].as_array().is_some_and(|a| a.iter().any(|x| x == "All"));
            let cur = store.get(ri, &ns, name)?;
            let req = crate::admission::Request {
                ri,
                operation: "DELETE",
                subresource: "",
                namespace: &ns,
                name,
                user,
                old: Some(&cur),
                dry_run: dry,
                options: json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", "propagationPolicy": opts.get("propagationPolicy")}),
            };
            crate::admission::admit(store, &app.services, &req, &mut None).await?;
            let (resp, _) = store.delete(ri, &ns, name, &opts, dry)?;
            Ok(json_response(200, &resp))
        }
        (Method::DELETE, None) => {
            let labels = LabelSelector::parse(
                q.get("labelSelector").map(String::as_str).unwrap_or_default(),
            )?;
            let fsel = FieldSelector::parse(
                q.get("fieldSelector").map(String::as_str).unwrap_or_default(),
                &selector::builtin_field_labels(&ri.group, &ri.plural),
            )?;
            let mut opts: Value = if body.is_empty() {
                json!({})
            } else {
                serde_json::from_slice(&body).unwrap_or(json!({}))
            };
            if let Some(p) = q.get("propagationPolicy") {
                opts["propagationPolicy"] = json!(p);
            }
            let dry = q.get("dryRun").is_some_and(|d| d == "All");
            let (items, _, _, _) = store.list(ri, t.ns.as_deref(), &labels, &fsel, None, None)?;
            let mut deleted = vec![];
            for o in items {
                if let Ok((_, _)) =
                    store.delete(ri, store::ns_of(&o), store::name_of(&o), &opts, dry)
                {
                    deleted.push(at_version(ri, &o));
                }
            }
            let list = json!({"kind": format!("{}List", ri.kind), "apiVersion": ri.api_version(), "metadata": {"resourceVersion": store.current_rv().to_string()}, "items": deleted});
            Ok(json_response(200, &list))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// Writes through `events.k8s.io/v1`: converted to core Events and stored as such.
async fn events_api_write(
    app: &Arc<App>,
    method: &Method,
    t: &Target,
    q: &Query,
    headers: &HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    use crate::convert::{core_to_events, events_to_core};
    let store = &app.store;
    let core = store.resource("", "v1", "events").ok_or_else(ApiError::path_not_found)?;
    let ns = t.ns.clone().unwrap_or_default();
    let o = write_opts(q, headers)?;
    match (method.clone(), &t.name) {
        (Method::POST, None) => {
            let obj = events_to_core(&decode_body(headers, &body)?);
            let p = store.prepare_create(&core, &ns, obj, &o)?;
            let v = store.commit(p, o.dry_run)?;
            Ok(json_response(201, &core_to_events(&v)))
        }
        (Method::PUT, Some(name)) => {
            let obj = events_to_core(&decode_body(headers, &body)?);
            let p = store.prepare_update(&core, &ns, name, obj, "", &o)?;
            let v = store.commit(p, o.dry_run)?;
            Ok(json_response(200, &core_to_events(&v)))
        }
        (Method::PATCH, Some(name)) => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let cur = store.get(&core, &ns, name)?;
            let mut doc = core_to_events(&cur);
            if ct.starts_with("application/json-patch+json") {
                let jp: json_patch::Patch = serde_json::from_slice(&body)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                json_patch::patch(&mut doc, &jp)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
            } else {
                let p: Value = serde_yaml::from_slice(&body)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
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
fn scale_of(ri: &ResourceInfo, o: &Value) -> Value {
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

fn watch_line(etype: &str, obj: &Value) -> Bytes {
    let mut s = serde_json::to_vec(&json!({"type": etype, "object": obj})).unwrap_or_default();
    s.push(b'\n');
    Bytes::from(s)
}

/// A watch stream (<https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes>):
/// newline-delimited `{"type","object"}` events, bookmarks on request, `410 Gone` as an ERROR event.
fn watch(
    app: &Arc<App>,
    ri: ResourceInfo,
    ns: Option<String>,
    labels: LabelSelector,
    fsel: FieldSelector,
    q: &Query,
    table: Option<String>,
) -> ApiResult<Response> {
    let store = app.store.clone();
    let rv_param = q.get("resourceVersion").cloned().unwrap_or_default();
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|b| b == "true");
    let initial_events = q.get("sendInitialEvents").is_some_and(|b| b == "true");
    let timeout =
        q.get("timeoutSeconds").and_then(|t| t.parse::<u64>().ok()).map(Duration::from_secs);
    let interval = app.bookmark_interval;
    let sk = ri.store_key();
    let ns_filter = ns.clone().filter(|n| !n.is_empty());
    let matches = move |o: &Value| labels.matches(o) && fsel.matches(o);
    // Start: synthetic ADDED for the current state ("" / "0" or sendInitialEvents), or replay after N.
    let (initial, replay, mut rx, start_rv, gone) = {
        let from_state = rv_param.is_empty() || rv_param == "0" || initial_events;
        if from_state {
            let (evs, rx, rv) = store.watch_from(store.current_rv())?;
            let _ = evs;
            let objs = store.list_all(&sk, ns_filter.as_deref());
            (objs, vec![], rx, rv, None)
        } else {
            let n: u64 = rv_param.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version: {rv_param}"))
            })?;
            match store.watch_from(n) {
                Ok((evs, rx, rv)) => (vec![], evs, rx, rv.max(n), None),
                Err(e) => {
                    let rx = store.subscribe();
                    (vec![], vec![], rx, 0, Some(e))
                }
            }
        }
    };
    let mut expire = store.expire_watches.subscribe();
    // Table watches: one-row Tables, column definitions only in the first event (as kube-apiserver).
    let first = std::sync::atomic::AtomicBool::new(true);
    let ri_t = ri.clone();
    let present = move |o: &Value| -> Value {
        match &table {
            None => o.clone(),
            Some(include) => {
                let cols = first.swap(false, std::sync::atomic::Ordering::Relaxed);
                let meta = json!({"resourceVersion": store::rv_of(o)});
                let mut t =
                    crate::table::table(&ri_t, std::slice::from_ref(o), meta, include, cols);
                if !cols && let Some(m) = t.as_object_mut() {
                    m.remove("columnDefinitions");
                }
                t
            }
        }
    };
    let kind = ri.kind.clone();
    let api_version = ri.api_version();
    let stream = async_stream::stream! {
        if let Some(e) = gone {
            yield Ok::<Bytes, std::convert::Infallible>(watch_line("ERROR", &e.to_status()));
            return;
        }
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let mut last = start_rv;
        for o in &initial {
            if matches(o) {
                yield Ok(watch_line("ADDED", &present(&at_version(&ri, o))));
            }
        }
        if initial_events {
            let bm = json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": last.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}});
            yield Ok(watch_line("BOOKMARK", &bm));
        }
        let relevant = |ev: &store::Event| ev.store_key == sk && ns_filter.as_deref().is_none_or(|n| n == ev.ns);
        let render = |ev: &store::Event| -> Option<Bytes> {
            let now_m = matches(&ev.obj);
            let prev_m = ev.prev.as_ref().map(|p| matches(p));
            let t = match (ev.etype, now_m, prev_m) {
                (EventType::Deleted, _, Some(true)) | (EventType::Deleted, true, None) => "DELETED",
                (EventType::Deleted, _, _) => return None,
                (_, true, Some(true)) => ev.etype.as_str(),
                (_, true, _) => "ADDED",
                (EventType::Modified, false, Some(true)) => "DELETED",
                _ => return None,
            };
            Some(watch_line(t, &present(&at_version(&ri, &ev.obj))))
        };
        for ev in &replay {
            last = last.max(ev.rv);
            if relevant(ev)
                && let Some(b) = render(ev) { yield Ok(b); }
        }
        let mut tick = tokio::time::interval(interval);
        tick.tick().await;
        loop {
            let sleep_deadline = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                r = rx.recv() => match r {
                    Ok(ev) => {
                        if ev.rv <= last { continue; }
                        last = ev.rv;
                        if relevant(&ev)
                            && let Some(b) = render(&ev) { yield Ok(b); }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        let e = ApiError::gone(format!("too old resource version: {last} ({})", last + 1));
                        yield Ok(watch_line("ERROR", &e.to_status()));
                        return;
                    }
                    Err(_) => return,
                },
                r = expire.recv() => {
                    if let Ok(at) = r {
                        let e = ApiError::gone(format!("too old resource version: {last} ({})", at + 1));
                        yield Ok(watch_line("ERROR", &e.to_status()));
                    }
                    return;
                }
                _ = tick.tick() => {
                    if bookmarks {
                        let bm = json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": last.to_string()}});
                        yield Ok(watch_line("BOOKMARK", &bm));
                    }
                }
                _ = sleep_deadline => return,
            }
        }
    };
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(stream))
        .map_err(|e| ApiError::internal(e.to_string()))
}
