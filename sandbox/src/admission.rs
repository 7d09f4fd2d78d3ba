//! Dynamic admission control as kube-apiserver runs it
//! (<https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/>):
//! mutating webhooks (reinvoked once when `reinvocationPolicy: IfNeeded` asks for it), then the
//! registry's defaulting and validation (in the store), then validating webhooks. A webhook is
//! called when a rule matches the request (or, with `matchPolicy: Equivalent`, another served
//! version of the same resource, to which the object is converted), its namespace and object
//! selectors match and its `matchConditions` hold. Requests are AdmissionReview `v1` or
//! `v1beta1` (the first the webhook accepts); responses are verified (uid, apiVersion/kind,
//! patchType) and a failure follows the webhook's failurePolicy. Denials and call failures are
//! worded as kube-apiserver words them (k8s.io/apiserver webhook errors:
//! `admission webhook "NAME" denied the request: ...`).

use crate::identity::UserInfo;
use crate::matchcond::{self, Outcome};
use crate::resources::ResourceInfo;
use crate::selector::label_selector_object_matches;
use crate::status::{ApiError, ApiResult};
use crate::store::{self, Store};
use crate::webhookclient::ServiceMap;
use crate::webhookconfig::SUPPORTED_REVIEW_VERSIONS;
use base64::Engine;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// One admission call's context.
#[derive(Debug)]
pub struct Request<'a> {
    /// The resource (and version) the request was made for.
    pub ri: &'a ResourceInfo,
    /// CREATE, UPDATE or DELETE.
    pub operation: &'static str,
    /// The subresource (`status`, `scale`) or empty.
    pub subresource: &'a str,
    /// The request's namespace (empty for cluster-scoped resources).
    pub namespace: &'a str,
    /// The name from the URL or the object (empty for a create by generateName).
    pub name: &'a str,
    /// Who asks.
    pub user: &'a UserInfo,
    /// The stored object an update or delete changes.
    pub old: Option<&'a Value>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// The Create/Update/Patch/DeleteOptions object.
    pub options: Value,
}

fn has(list: &Value, want: &str) -> bool {
    list.as_array().is_some_and(|a| a.iter().any(|x| x == "*" || x == want))
}

fn rule_matches(rule: &Value, ri: &ResourceInfo, operation: &str, sub: &str) -> bool {
    if !has(&rule["operations"], operation)
        || !has(&rule["apiGroups"], &ri.group)
        || !has(&rule["apiVersions"], &ri.version)
    {
        return false;
    }
    let res_ok = rule["resources"].as_array().is_some_and(|rs| {
        rs.iter().filter_map(Value::as_str).any(|x| {
            let (xr, xs) = x.split_once('/').unwrap_or((x, ""));
            x == "*/*"
                || (xr == "*" || xr == ri.plural) && (xs == sub || xs == "*" && !sub.is_empty())
        })
    });
    let scope_ok = match rule["scope"].as_str().unwrap_or("*") {
        "Cluster" => !ri.namespaced,
        "Namespaced" => ri.namespaced,
        _ => true,
    };
    res_ok && scope_ok
}

/// The resource version a webhook's rules name for this request: the request's own, or with
/// `matchPolicy: Equivalent` another served version of the same group and resource.
fn matched_resource(store: &Store, wh: &Value, r: &Request<'_>) -> Option<ResourceInfo> {
    let rules: Vec<&Value> = wh["rules"].as_array().into_iter().flatten().collect();
    if rules.iter().any(|rule| rule_matches(rule, r.ri, r.operation, r.subresource)) {
        return Some(r.ri.clone());
    }
    if wh["matchPolicy"].as_str() == Some("Exact") {
        return None;
    }
    store
        .resources()
        .into_iter()
        .filter(|o| o.group == r.ri.group && o.plural == r.ri.plural && o.version != r.ri.version)
        .find(|o| rules.iter().any(|rule| rule_matches(rule, o, r.operation, r.subresource)))
}

fn selectors_match(store: &Store, wh: &Value, r: &Request<'_>, obj: Option<&Value>) -> bool {
    let is_ns = r.ri.group.is_empty() && r.ri.plural == "namespaces";
    if let Some(sel) = wh.get("namespaceSelector").filter(|s| s.is_object())
        && (r.ri.namespaced || is_ns)
    {
        let labels = if is_ns {
            obj.or(r.old).and_then(|o| o.pointer("/metadata/labels")).cloned()
        } else {
            let nsri = store.resource("", "v1", "namespaces");
            nsri.and_then(|ri| store.get(&ri, "", r.namespace).ok())
                .and_then(|n| n.pointer("/metadata/labels").cloned())
        };
        if !label_selector_object_matches(sel, labels.as_ref()) {
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

/// An object as the webhook's version sees it (CRD versions convert with strategy None:
/// only `apiVersion` changes).
fn at_version(o: &Value, ri: &ResourceInfo) -> Value {
    let mut o = o.clone();
    if o.is_object() {
        o["apiVersion"] = json!(ri.api_version());
    }
    o
}

fn review(
    r: &Request<'_>,
    target: &ResourceInfo,
    obj: Option<&Value>,
    uid: &str,
    version: &str,
) -> Value {
    let mut user = json!({"username": r.user.username, "groups": r.user.groups});
    if !r.user.uid.is_empty() {
        user["uid"] = json!(r.user.uid);
    }
    if !r.user.extra.is_empty() {
        user["extra"] = json!(r.user.extra);
    }
    let gvk =
        |ri: &ResourceInfo| json!({"group": ri.group, "version": ri.version, "kind": ri.kind});
    let gvr = |ri: &ResourceInfo| json!({"group": ri.group, "version": ri.version, "resource": ri.plural});
    let mut req = json!({
        "uid": uid,
        "kind": gvk(target),
        "resource": gvr(target),
        "requestKind": gvk(r.ri),
        "requestResource": gvr(r.ri),
        "name": r.name,
        "operation": r.operation,
        "userInfo": user,
        "object": obj.map(|o| at_version(o, target)).unwrap_or(Value::Null),
        "oldObject": r.old.map(|o| at_version(o, target)).unwrap_or(Value::Null),
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
    json!({"apiVersion": format!("admission.k8s.io/{version}"), "kind": "AdmissionReview", "request": req})
}

/// The AdmissionReview version to send: the first of the webhook's `admissionReviewVersions`
/// the sandbox speaks.
pub fn review_version(wh: &Value) -> Result<&'static str, String> {
    wh["admissionReviewVersions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find_map(|v| SUPPORTED_REVIEW_VERSIONS.iter().find(|s| **s == v).copied())
        .ok_or_else(|| {
            "webhook does not accept v1 or v1beta1 AdmissionReview (admissionReviewVersions)"
                .to_string()
        })
}

/// Check a webhook's reply as kube-apiserver's `VerifyAdmissionResponse` does; returns the
/// `response`. `v1` checks the uid, apiVersion/kind and patchType; `v1beta1` only that a
/// patch, if typed, is a JSONPatch.
pub fn verify_response(
    reply: &Value,
    version: &str,
    uid: &str,
    mutating: bool,
) -> Result<Value, String> {
    let resp =
        reply.get("response").filter(|r| r.is_object()).ok_or("webhook response was absent")?;
    let patch = resp["patch"].as_str().unwrap_or_default();
    let patch_type = resp["patchType"].as_str().unwrap_or_default();
    if version == "v1" {
        let got_uid = resp["uid"].as_str().unwrap_or_default();
        if got_uid != uid {
            return Err(format!("expected response.uid={uid:?}, got {got_uid:?}"));
        }
        let api_version = reply["apiVersion"].as_str().unwrap_or_default();
        let kind = reply["kind"].as_str().unwrap_or_default();
        if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
            let shown = if api_version.contains('/') {
                api_version.to_string()
            } else {
                format!("/{api_version}")
            };
            return Err(format!(
                "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {shown}, Kind={kind}"
            ));
        }
        if !mutating && (!patch.is_empty() || !patch_type.is_empty()) {
            return Err("validating webhooks may not return patches".into());
        }
        if !patch.is_empty() && patch_type.is_empty() {
            return Err("webhook returned response.patch but not response.patchType".into());
        }
        if patch.is_empty() && !patch_type.is_empty() {
            return Err("webhook returned response.patchType but not response.patch".into());
        }
    }
    if !patch_type.is_empty() && patch_type != "JSONPatch" {
        return Err(format!("webhook returned invalid response.patchType of {patch_type:?}"));
    }
    Ok(resp.clone())
}

/// POST the review; the verified `response`.
async fn call(
    wh: &Value,
    services: &ServiceMap,
    body: &Value,
    version: &str,
    uid: &str,
    mutating: bool,
) -> Result<Value, String> {
    let (client, url) = crate::webhookclient::client_for(wh, services)?;
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
    verify_response(&v, version, uid, mutating)
        .map_err(|e| format!("received invalid webhook response: {e}"))
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

/// Which configurations a phase reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Mutating,
    Validating,
}

/// The webhooks of every configuration of a phase, configurations in name order.
fn webhooks(store: &Store, phase: Phase) -> Vec<Value> {
    let plural = match phase {
        Phase::Mutating => "mutatingwebhookconfigurations",
        Phase::Validating => "validatingwebhookconfigurations",
    };
    let mut cfgs = store.list_all(&format!("admissionregistration.k8s.io/{plural}"), None);
    cfgs.sort_by(|a, b| store::name_of(a).cmp(store::name_of(b)));
    cfgs.iter().flat_map(|c| c["webhooks"].as_array().cloned().unwrap_or_default()).collect()
}

/// What one webhook did.
#[derive(Debug, PartialEq, Eq)]
enum Called {
    /// It did not apply (rules, selectors, conditions) or failed open.
    Skipped,
    /// It was called and allowed; `changed` says whether its patch changed the object.
    Allowed { changed: bool },
}

fn call_failed(name: &str, e: &str) -> ApiError {
    ApiError::internal(format!("Internal error occurred: failed calling webhook \"{name}\": {e}"))
}

/// Match, call and apply one webhook.
async fn run_hook(
    store: &Store,
    services: &ServiceMap,
    wh: &Value,
    phase: Phase,
    r: &Request<'_>,
    obj: &mut Option<Value>,
    warnings: &mut Vec<String>,
) -> ApiResult<Called> {
    let Some(target) = matched_resource(store, wh, r) else {
        return Ok(Called::Skipped);
    };
    if !selectors_match(store, wh, r, obj.as_ref()) {
        return Ok(Called::Skipped);
    }
    let name = wh["name"].as_str().unwrap_or_default().to_string();
    let fail_open = wh["failurePolicy"].as_str() == Some("Ignore");
    let fail = |e: String| {
        if fail_open {
            tracing::warn!("webhook {name} failed (ignored): {e}");
            Ok(Called::Skipped)
        } else {
            Err(call_failed(&name, &e))
        }
    };
    let version = match review_version(wh) {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let uid = uuid::Uuid::new_v4().to_string();
    let body = review(r, &target, obj.as_ref(), &uid, version);
    let vars = matchcond::Vars {
        object: &body["request"]["object"],
        old_object: &body["request"]["oldObject"],
        request: &body["request"],
    };
    match matchcond::evaluate(&wh["matchConditions"], vars) {
        Outcome::Match => {}
        Outcome::NoMatch(_) => return Ok(Called::Skipped),
        Outcome::Error(cond, e) => {
            return fail(format!("failed to evaluate matchCondition {cond:?}: {e}"));
        }
    }
    if r.dry_run && !matches!(wh["sideEffects"].as_str(), Some("None") | Some("NoneOnDryRun")) {
        return Err(ApiError::bad_request(format!(
            "admission webhook \"{name}\" does not support dry run"
        )));
    }
    let resp = match call(wh, services, &body, version, &uid, phase == Phase::Mutating).await {
        Ok(resp) => resp,
        Err(e) => return fail(e),
    };
    for w in resp["warnings"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        warnings.push(w.to_string());
    }
    if resp["allowed"].as_bool() != Some(true) {
        return Err(denied(&name, &resp));
    }
    let (Some(p), Some(o)) = (resp["patch"].as_str(), obj.as_mut()) else {
        return Ok(Called::Allowed { changed: false });
    };
    let patched = apply_patch(p, &at_version(o, &target)).map_err(|e| call_failed(&name, &e))?;
    let patched = at_version(&patched, r.ri);
    let changed = patched != *o;
    *o = patched;
    Ok(Called::Allowed { changed })
}

/// Apply a base64 JSONPatch to `o`.
fn apply_patch(b64: &str, o: &Value) -> Result<Value, String> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| format!("invalid patch: {e}"))?;
    let patch: json_patch::Patch =
        serde_json::from_slice(&raw).map_err(|e| format!("invalid patch: {e}"))?;
    let mut out = o.clone();
    json_patch::patch(&mut out, &patch).map_err(|e| e.to_string())?;
    Ok(out)
}

fn exempt(r: &Request<'_>) -> bool {
    // Webhook configurations are never subject to webhooks.
    r.ri.group == "admissionregistration.k8s.io"
}

/// Mutating webhooks on `obj`, in order; when a webhook changes the object, the earlier
/// webhooks with `reinvocationPolicy: IfNeeded` run once more afterwards (at most once), as
/// kube-apiserver's mutating dispatcher does. Returns warnings.
pub async fn mutate(
    store: &Store,
    services: &ServiceMap,
    r: &Request<'_>,
    obj: &mut Option<Value>,
) -> ApiResult<Vec<String>> {
    let mut warnings = vec![];
    if exempt(r) {
        return Ok(warnings);
    }
    let hooks = webhooks(store, Phase::Mutating);
    // kube-apiserver's webhookReinvokeContext: IfNeeded webhooks invoked before a change are
    // reinvoked; a change during the reinvocation pass adds the ones invoked before it in that
    // pass too, but there is no third pass.
    let mut invoked_if_needed: Vec<usize> = vec![];
    let mut reinvoke: BTreeSet<usize> = BTreeSet::new();
    for pass in 0..2 {
        if pass == 1 && reinvoke.is_empty() {
            break;
        }
        for (i, wh) in hooks.iter().enumerate() {
            if pass == 1 && !reinvoke.contains(&i) {
                continue;
            }
            let called =
                run_hook(store, services, wh, Phase::Mutating, r, obj, &mut warnings).await?;
            let Called::Allowed { changed } = called else { continue };
            if changed {
                reinvoke.extend(invoked_if_needed.drain(..));
            }
            if wh["reinvocationPolicy"].as_str() == Some("IfNeeded") {
                invoked_if_needed.push(i);
            }
        }
    }
    Ok(warnings)
}

/// What is wrong with a `metadata.managedFields` value, as apimachinery's
/// `ValidateManagedFields` decodes it (an operation of Apply or Update, `fieldsType: FieldsV1`
/// with an object `fieldsV1`).
pub fn managed_fields_error(mf: &Value) -> Option<String> {
    let entries = match mf {
        Value::Null => return None,
        Value::Array(a) => a,
        _ => return Some("managedFields must be a list".into()),
    };
    entries.iter().enumerate().find_map(|(i, e)| {
        let why = match (e["operation"].as_str(), e["fieldsType"].as_str()) {
            (Some("Apply" | "Update"), Some("FieldsV1")) if e["fieldsV1"].is_object() => {
                return None;
            }
            (Some("Apply" | "Update"), Some("FieldsV1")) => "fieldsV1 is not an object".into(),
            (Some("Apply" | "Update"), t) => {
                format!("found unknown field type {}", t.unwrap_or_default())
            }
            (op, _) => format!("unexpected operation: {}", op.unwrap_or_default()),
        };
        Some(format!("error decoding versioned set from managed field at index {i}: {why}"))
    })
}

/// kube-apiserver's managedFields check around mutating admission
/// (`NewManagedFieldsValidatingAdmissionController`): managedFields a webhook left invalid are
/// put back as they were before admission, with a warning.
pub fn restore_invalid_managed_fields(before: &Value, after: &mut Value) -> Option<String> {
    let err = managed_fields_error(after.pointer("/metadata/managedFields")?)?;
    match before.pointer("/metadata/managedFields") {
        Some(mf) => after["metadata"]["managedFields"] = mf.clone(),
        None => {
            if let Some(m) = after["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
        }
    }
    Some(format!(
        ".metadata.managedFields was in an invalid state after admission; this could be caused by an outdated mutating admission controller; please fix your requests: {err}"
    ))
}

/// Validating webhooks on the final object (None for DELETE). Returns warnings.
pub async fn validate(
    store: &Store,
    services: &ServiceMap,
    r: &Request<'_>,
    obj: Option<&Value>,
) -> ApiResult<Vec<String>> {
    let mut warnings = vec![];
    if exempt(r) {
        return Ok(warnings);
    }
    let mut obj = obj.cloned();
    for wh in webhooks(store, Phase::Validating) {
        run_hook(store, services, &wh, Phase::Validating, r, &mut obj, &mut warnings).await?;
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_fields_validity_table() {
        let entry = |op: &str, ty: &str, f: Value| json!([{"manager": "m", "operation": op, "fieldsType": ty, "fieldsV1": f}]);
        let cases = [
            (Value::Null, None),
            (json!([]), None),
            (entry("Update", "FieldsV1", json!({"f:data": {}})), None),
            (entry("Apply", "FieldsV1", json!({})), None),
            (entry("Bogus", "FieldsV1", json!({})), Some("unexpected operation: Bogus")),
            (entry("Update", "FieldsV2", json!({})), Some("found unknown field type FieldsV2")),
            (entry("Update", "FieldsV1", json!("x")), Some("fieldsV1 is not an object")),
            (json!("x"), Some("managedFields must be a list")),
        ];
        for (mf, want) in cases {
            let got = managed_fields_error(&mf);
            match want {
                None => assert_eq!(got, None, "{mf}"),
                Some(w) => assert!(got.as_deref().is_some_and(|g| g.ends_with(w)), "{mf}: {got:?}"),
            }
        }
    }

    #[test]
    fn review_version_is_the_first_supported() {
        let cases = [
            (json!(["v1", "v1beta1"]), Some("v1")),
            (json!(["v1beta1", "v1"]), Some("v1beta1")),
            (json!(["v2", "v1beta1"]), Some("v1beta1")),
            (json!(["v2"]), None),
            (Value::Null, None),
        ];
        for (versions, want) in cases {
            let wh = json!({"admissionReviewVersions": versions});
            assert_eq!(review_version(&wh).ok(), want, "{versions}");
        }
    }

    #[test]
    fn response_verification_table() {
        let ok = |resp: Value| json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp});
        let cases: Vec<(Value, &str, bool, Option<&str>)> = vec![
            (ok(json!({"uid": "u", "allowed": true})), "v1", true, None),
            (
                ok(json!({"uid": "x", "allowed": true})),
                "v1",
                true,
                Some("expected response.uid=\"u\", got \"x\""),
            ),
            (
                json!({"response": {"uid": "u", "allowed": true}}),
                "v1",
                true,
                Some(
                    "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got /, Kind=",
                ),
            ),
            (
                ok(
                    json!({"uid": "u", "allowed": true, "patch": "W10=", "patchType": "MergePatch"}),
                ),
                "v1",
                true,
                Some("webhook returned invalid response.patchType of \"MergePatch\""),
            ),
            (
                ok(json!({"uid": "u", "allowed": true, "patch": "W10="})),
                "v1",
                true,
                Some("webhook returned response.patch but not response.patchType"),
            ),
            (
                ok(json!({"uid": "u", "allowed": true, "patch": "W10=", "patchType": "JSONPatch"})),
                "v1",
                false,
                Some("validating webhooks may not return patches"),
            ),
            (
                json!({"apiVersion": "admission.k8s.io/v1"}),
                "v1",
                true,
                Some("webhook response was absent"),
            ),
            (json!({"response": {"allowed": true, "patch": "W10="}}), "v1beta1", true, None),
        ];
        for (reply, version, mutating, want) in cases {
            let got = verify_response(&reply, version, "u", mutating).err();
            assert_eq!(got.as_deref(), want, "{reply}");
        }
    }
}
