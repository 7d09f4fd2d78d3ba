//! The HTTP layer: routing of Kubernetes API paths, authentication, discovery, verbs and watch
//! streams (<https://kubernetes.io/docs/reference/using-api/api-concepts/>).

mod discovery;
mod events_api;
mod request;
mod resource;
mod scale;
mod watch;

use crate::identity::UserInfo;
use crate::status::{ApiError, ApiResult};
use crate::store::Store;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Shared server state.
#[derive(Debug)]
pub struct App {
    pub store: Arc<Store>,
    pub admin_token: String,
    pub addr: std::net::SocketAddr,
    pub bookmark_interval: Duration,
    pub services: crate::webhookclient::ServiceMap,
    pub faults: crate::faults::Faults,
    /// Bearer tokens of further identities (see `Sandbox::user_kubeconfig`).
    pub tokens: std::sync::RwLock<HashMap<String, UserInfo>>,
    /// The opt-in request log (`Sandbox::record_requests`).
    pub requests: crate::requestlog::RequestLog,
}

pub type Query = HashMap<String, String>;

fn json_response<T: serde::Serialize + ?Sized>(code: u16, v: &T) -> Response {
    let body = serde_json::to_vec(v).unwrap_or_default();
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::OK),
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// An error Status; `Retry-After` when the Status asks for a delay (as kube-apiserver's
/// `responsewriters.ErrorNegotiated`).
pub fn error_response(e: &ApiError) -> Response {
    let mut r = json_response(e.code, &e.to_status());
    if let Some(s) = e.details.as_ref().and_then(|d| d["retryAfterSeconds"].as_u64())
        && s > 0
        && let Ok(v) = axum::http::HeaderValue::from_str(&s.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
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
    let started = std::time::SystemTime::now();
    let response = match route(&app, &method, &path, &q, &headers, body).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    };
    if app.requests.enabled() {
        app.requests.push(crate::requestlog::RequestRecord {
            method: method.to_string(),
            path,
            query: uri.query().unwrap_or_default().to_owned(),
            user: authenticate(&app, &headers).map(|u| u.username).unwrap_or_default(),
            impersonated: headers
                .get("impersonate-user")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            started,
            finished: std::time::SystemTime::now(),
            code: response.status().as_u16(),
        });
    }
    response
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
    let requester = user.username.clone();
    let user = crate::authz::impersonate(&app.store, user, headers)?;
    let req =
        request::Request { app, method, q, headers, body, user: &user, requester: &requester };
    match segs.as_slice() {
        ["version"] => Ok(json_response(200, &discovery::version())),
        ["api"] => Ok(json_response(
            200,
            &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": app.addr.to_string()}]}),
        )),
        ["apis"] => Ok(json_response(200, &discovery::api_group_list(&app.store))),
        ["api", "v1"] => Ok(json_response(200, &discovery::resource_list(&app.store, "", "v1")?)),
        ["apis", g] => discovery::api_group(&app.store, g).map(|grp| json_response(200, &grp)),
        ["apis", g, v] => Ok(json_response(200, &discovery::resource_list(&app.store, g, v)?)),
        ["openapi", "v3"] => Ok(json_response(200, &crate::openapi::root(&app.store.resources()))),
        ["openapi", "v3", "api", v] => crate::openapi::gv_document(&app.store.resources(), "", v)
            .map(|d| json_response(200, &d))
            .ok_or_else(ApiError::path_not_found),
        ["openapi", "v3", "apis", g, v] => {
            crate::openapi::gv_document(&app.store.resources(), g, v)
                .map(|d| json_response(200, &d))
                .ok_or_else(ApiError::path_not_found)
        }
        ["api", "v1", rest @ ..] => resource::resource_request(&req, "", "v1", rest).await,
        ["apis", g, v, rest @ ..] => resource::resource_request(&req, g, v, rest).await,
        _ => Err(ApiError::path_not_found()),
    }
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
