//! Dynamic admission control: Mutating then Validating webhooks from the cluster's
//! configurations, called over TLS (caBundle verified) with AdmissionReview v1
//! (<https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/>).
//! Denials and call failures are worded as kube-apiserver words them
//! (k8s.io/apiserver webhook errors: `admission webhook "NAME" denied the request: ...`).

use crate::identity::UserInfo;
use crate::resources::ResourceInfo;
use crate::selector::label_selector_object_matches;
use crate::status::{ApiError, ApiResult};
use crate::store::{self, Store};
use base64::Engine;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::RwLock;
use std::time::Duration;

/// One admission call's context.
#[derive(Debug)]
pub struct Request<'a> {
    pub ri: &'a ResourceInfo,
    pub operation: &'static str,
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub user: &'a UserInfo,
    pub old: Option<&'a Value>,
    pub dry_run: bool,
    pub options: Value,
}

/// Where `clientConfig.service` references point on this machine ("ns/name" -> address).
#[derive(Debug, Default)]
pub struct ServiceMap(pub RwLock<HashMap<String, SocketAddr>>);

impl ServiceMap {
    pub fn insert(&self, ns: &str, name: &str, addr: SocketAddr) {
        self.0.write().unwrap_or_else(|e| e.into_inner()).insert(format!("{ns}/{name}"), addr);
    }

    fn get(&self, ns: &str, name: &str) -> Option<SocketAddr> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).get(&format!("{ns}/{name}")).copied()
    }
}

fn has(list: &Value, want: &str) -> bool {
    list.as_array().is_some_and(|a| a.iter().any(|x| x == "*" || x == want))
}

fn rule_matches(rule: &Value, r: &Request<'_>) -> bool {
    if !has(&rule["operations"], r.operation)
        || !has(&rule["apiGroups"], &r.ri.group)
        || !has(&rule["apiVersions"], &r.ri.version)
    {
        return false;
    }
    let sub = r.subresource;
    let res_ok = rule["resources"].as_array().is_some_and(|rs| {
        rs.iter().filter_map(Value::as_str).any(|x| {
            let (xr, xs) = x.split_once('/').unwrap_or((x, ""));
            x == "*/*"
                || (xr == "*" || xr == r.ri.plural) && (xs == sub || xs == "*" && !sub.is_empty())
        })
    });
    let scope_ok = match rule["scope"].as_str().unwrap_or("*") {
        "Cluster" => !r.ri.namespaced,
        "Namespaced" => r.ri.namespaced,
        _ => true,
    };
    res_ok && scope_ok
}

fn webhook_applies(store: &Store, wh: &Value, r: &Request<'_>, obj: Option<&Value>) -> bool {
    if !wh["rules"].as_array().into_iter().flatten().any(|rule| rule_matches(rule, r)) {
        return false;
    }
    if let Some(sel) = wh.get("namespaceSelector").filter(|s| s.is_object()) {
        let labels = if r.ri.group.is_empty() && r.ri.plural == "namespaces" {
            obj.or(r.old).and_then(|o| o.pointer("/metadata/labels")).cloned()
        } else if r.ri.namespaced {
            let nsri = store.resource("", "v1", "namespaces");
            nsri.and_then(|ri| store.get(&ri, "", r.namespace).ok())
                .and_then(|n| n.pointer("/metadata/labels").cloned())
        } else {
            None
        };
        if (r.ri.namespaced || r.ri.plural == "namespaces")
            && !label_selector_object_matches(sel, labels.as_ref())
        {
            return false;
        }
    }
    if let Some(sel) = wh.get("objectSelector").filter(|s| s.is_object()) {
        let m = |o: Option<&Value>| {
            o.is_some_and(|o| label_selector_object_matches(sel, o.pointer("/metadata/labels")))
        };
        if !m(obj) && !m(r.old) {
            return false;
        }
    }
    true
}

fn review(r: &Request<'_>, obj: Option<&Value>, uid: &str) -> Value {
    let mut user = json!({"username": r.user.username, "groups": r.user.groups});
    if !r.user.uid.is_empty() {
        user["uid"] = json!(r.user.uid);
    }
    if !r.user.extra.is_empty() {
        user["extra"] = json!(r.user.extra);
    }
    let kind = json!({"group": r.ri.group, "version": r.ri.version, "kind": r.ri.kind});
    let resource = json!({"group": r.ri.group, "version": r.ri.version, "resource": r.ri.plural});
    let mut req = json!({
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": r.name,
        "operation": r.operation,
        "userInfo": user,
        "object": obj.cloned().unwrap_or(Value::Null),
        "oldObject": r.old.cloned().unwrap_or(Value::Null),
        "dryRun": r.dry_run,
        "options": r.options,
    });
    if !r.subresource.is_empty() {
        req["subResource"] = json!(r.subresource);
        req["requestSubResource"] = json!(r.subresource);
    }
    if !r.namespace.is_empty() {
        req["namespace"] = json!(r.namespace);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

fn client_for(wh: &Value, services: &ServiceMap) -> Result<(reqwest::Client, String), String> {
    let cc = &wh["clientConfig"];
    let timeout = wh["timeoutSeconds"].as_u64().unwrap_or(10);
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = cc["caBundle"].as_str() {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(ca)
            .map_err(|e| format!("invalid caBundle: {e}"))?;
        use rustls::pki_types::{CertificateDer, pem::PemObject};
        for c in CertificateDer::pem_slice_iter(&pem) {
            let c = c.map_err(|e| format!("invalid caBundle: {e}"))?;
            roots.add(c).map_err(|e| format!("invalid caBundle: {e}"))?;
        }
    }
    let tls = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    let mut b = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(Duration::from_secs(timeout))
        .no_proxy();
    let url = if let Some(u) = cc["url"].as_str() {
        u.to_string()
    } else if let Some(svc) = cc.get("service").filter(|s| s.is_object()) {
        let ns = svc["namespace"].as_str().unwrap_or_default();
        let name = svc["name"].as_str().unwrap_or_default();
        let port = svc["port"].as_u64().unwrap_or(443);
        let path = svc["path"].as_str().unwrap_or("");
        let host = format!("{name}.{ns}.svc");
        let addr = services
            .get(ns, name)
            .ok_or_else(|| format!("service \"{ns}/{name}\" has no endpoints"))?;
        b = b.resolve(&host, addr);
        format!("https://{host}:{port}{path}")
    } else {
        return Err("no clientConfig".into());
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{sep}timeout={timeout}s");
    Ok((b.build().map_err(|e| e.to_string())?, url))
}

/// Result of one webhook call: the response object.
async fn call(wh: &Value, services: &ServiceMap, body: &Value) -> Result<Value, String> {
    let (client, url) = client_for(wh, services)?;
    let bytes = serde_json::to_vec(body).map_err(|e| e.to_string())?;
    let resp = client
        .post(&url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json")
        .body(bytes)
        .send()
        .await
        .map_err(|e| format!("failed to call webhook: Post \"{url}\": {}", error_chain(&e)))?;
    let status = resp.status();
    let data = resp.bytes().await.map_err(|e| format!("failed to call webhook: {e}"))?;
    if !status.is_success() {
        return Err(format!(
            "received invalid webhook response: the server responded with status {}",
            status.as_u16()
        ));
    }
    let v: Value = serde_json::from_slice(&data)
        .map_err(|e| format!("received invalid webhook response: {e}"))?;
    v.get("response")
        .cloned()
        .ok_or_else(|| "received invalid webhook response: missing response".to_string())
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// `admission webhook "NAME" denied the request: ...` (webhook errors.ToStatusErr).
fn denied(name: &str, resp: &Value) -> ApiError {
    let st = &resp["status"];
    let code = st["code"].as_u64().filter(|c| *c >= 400).unwrap_or(400) as u16;
    let by = format!("admission webhook \"{name}\" denied the request");
    let message = match (
        st["message"].as_str().filter(|m| !m.is_empty()),
        st["reason"].as_str().filter(|m| !m.is_empty()),
    ) {
        (Some(m), _) => format!("{by}: {m}"),
        (None, Some(r)) => format!("{by}: {r}"),
        _ => format!("{by} without explanation"),
    };
    let reason: &'static str = match st["reason"].as_str().unwrap_or_default() {
        "Forbidden" => "Forbidden",
        "Invalid" => "Invalid",
        "BadRequest" => "BadRequest",
        "Conflict" => "Conflict",
        "NotFound" => "NotFound",
        "AlreadyExists" => "AlreadyExists",
        _ => "",
    };
    ApiError { code, reason, message, details: st.get("details").cloned() }
}

/// Run mutating then validating webhooks on `obj` (None for DELETE). Returns warnings.
pub async fn admit(
    store: &Store,
    services: &ServiceMap,
    r: &Request<'_>,
    obj: &mut Option<Value>,
) -> ApiResult<Vec<String>> {
    if r.ri.group == "admissionregistration.k8s.io" {
        // Webhook configurations are never subject to webhooks.
        return Ok(vec![]);
    }
    let mut warnings = vec![];
    for (plural, mutating) in
        [("mutatingwebhookconfigurations", true), ("validatingwebhookconfigurations", false)]
    {
        let key = format!("admissionregistration.k8s.io/{plural}");
        let mut hooks: Vec<(String, Value)> = vec![];
        for cfg in store.list_all(&key, None) {
            for wh in cfg["webhooks"].as_array().into_iter().flatten() {
                hooks.push((store::name_of(&cfg).to_string(), wh.clone()));
            }
        }
        for (_, wh) in hooks {
            if !webhook_applies(store, &wh, r, obj.as_ref()) {
                continue;
            }
            let name = wh["name"].as_str().unwrap_or_default().to_string();
            if r.dry_run
                && !matches!(wh["sideEffects"].as_str(), Some("None") | Some("NoneOnDryRun"))
            {
                return Err(ApiError::bad_request(format!(
                    "admission webhook \"{name}\" does not support dry run"
                )));
            }
            let uid = uuid::Uuid::new_v4().to_string();
            let body = review(r, obj.as_ref(), &uid);
            let fail_open = wh["failurePolicy"].as_str() == Some("Ignore");
            let resp = match call(&wh, services, &body).await {
                Ok(resp) => resp,
                Err(e) if fail_open => {
                    tracing::warn!("webhook {name} failed (ignored): {e}");
                    continue;
                }
                Err(e) => {
                    return Err(ApiError::internal(format!(
                        "Internal error occurred: failed calling webhook \"{name}\": {e}"
                    )));
                }
            };
            for w in resp["warnings"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                warnings.push(w.to_string());
            }
            if resp["allowed"].as_bool() != Some(true) {
                return Err(denied(&name, &resp));
            }
            if mutating && let (Some(p), Some(o)) = (resp["patch"].as_str(), obj.as_mut()) {
                let raw = base64::engine::general_purpose::STANDARD
                        .decode(p)
                        .map_err(|e| ApiError::internal(format!("Internal error occurred: failed calling webhook \"{name}\": invalid patch: {e}")))?;
                let patch: json_patch::Patch = serde_json::from_slice(&raw)
                        .map_err(|e| ApiError::internal(format!("Internal error occurred: failed calling webhook \"{name}\": invalid patch: {e}")))?;
                json_patch::patch(o, &patch).map_err(|e| {
                    ApiError::internal(format!(
                        "Internal error occurred: failed calling webhook \"{name}\": {e}"
                    ))
                })?;
            }
        }
    }
    Ok(warnings)
}
