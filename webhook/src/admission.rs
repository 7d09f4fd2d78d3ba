//! The admission endpoints: parse the AdmissionReview, gather what the decision needs, call the
//! pure decision in `kuvryn-sync-core`, and wrap its verdict in a response. Nothing here decides.
//!
//! - `POST /validate/healthchecks`: every rule's CEL compiles, uses only `object`, cannot be
//!   proven to return a non-bool, and names a known state (`core::health_rules`).
//! - `POST /admit/applications` (mutating): approvals and rollback requests are checked against
//!   the Revisions they name and recorded with the requester (`core::admission`).
//!
//! A request the webhook cannot read is answered with a denial that says so (the API server would
//! otherwise apply `failurePolicy` to a transport error and hide the reason).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use kube::api::Api;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kuvryn_sync_api::{HealthCheckSpec, Revision};
use kuvryn_sync_core::admission::{
    AnnotationEdit, ApplicationRequest, RevisionFacts, Verdict, canonical_sync_and_strategy,
    review_application, revisions_to_read,
};
use kuvryn_sync_core::health_rules;
use serde_json::Value;

use crate::metrics::Outcome;
use crate::state::AppState;

/// The states a HealthCheck rule may report.
const RULE_STATES: [&str; 3] = ["Healthy", "Progressing", "Degraded"];

/// `POST /validate/healthchecks`.
pub async fn validate_health_check(Json(review): Json<AdmissionReview<DynamicObject>>) -> Response {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(request) => request,
        Err(_) => return malformed("an AdmissionReview with a request"),
    };
    let response = AdmissionResponse::from(&request);
    let Some(object) = request.object.as_ref() else {
        return answer(response.deny("the request carries no HealthCheck object"), Outcome::Denied);
    };
    match health_check_problems(object.data.get("spec").unwrap_or(&Value::Null)) {
        problems if problems.is_empty() => answer(response, Outcome::Allowed),
        problems => answer(response.deny(problems.join("; ")), Outcome::Denied),
    }
}

/// Every problem of a HealthCheck's spec, each naming its field.
pub fn health_check_problems(spec: &Value) -> Vec<String> {
    let rules = spec.get("rules").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mut problems: Vec<String> = rules
        .iter()
        .enumerate()
        .filter_map(|(index, rule)| {
            let state = rule.get("state").and_then(Value::as_str).unwrap_or_default();
            (!RULE_STATES.contains(&state)).then(|| {
                format!(
                    "spec.rules[{index}].state: {state:?} is not a state; use one of {}",
                    RULE_STATES.join(", ")
                )
            })
        })
        .collect();
    if !problems.is_empty() {
        return problems;
    }
    match serde_json::from_value::<HealthCheckSpec>(spec.clone()) {
        Ok(spec) => {
            problems.extend(health_rules::validate(&spec).iter().map(ToString::to_string));
        }
        Err(err) => problems.push(format!("spec: {err}")),
    }
    problems
}

/// `POST /admit/applications`.
pub async fn admit_application(
    State(state): State<AppState>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Response {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(request) => request,
        Err(_) => return malformed("an AdmissionReview with a request"),
    };
    let response = AdmissionResponse::from(&request);
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        return answer(response, Outcome::Allowed);
    }
    let Some(object) = request.object.as_ref() else {
        return answer(response.deny("the request carries no Application object"), Outcome::Denied);
    };
    let namespace = request.namespace.clone().unwrap_or_default();
    let new = annotations_of(Some(object));
    let old = request.old_object.as_ref().map(|o| annotations_of(Some(o)));
    let spec = object.data.get("spec").cloned().unwrap_or(Value::Null);
    let (sync, strategy) = canonical_sync_and_strategy(&spec);
    let now = now_rfc3339();
    let application = ApplicationRequest {
        application: object.metadata.name.as_deref().unwrap_or(&request.name),
        old: old.as_ref(),
        new: &new,
        username: request.user_info.username.as_deref().unwrap_or_default(),
        now: &now,
        sync: &sync,
        strategy: &strategy,
    };
    let names = revisions_to_read(&application);
    let revisions = match read_revisions(&state, &namespace, &names).await {
        Ok(revisions) => revisions,
        Err(message) => return answer(response.deny(message), Outcome::Error),
    };
    match review_application(&application, &revisions) {
        Verdict::Deny(message) => answer(response.deny(message), Outcome::Denied),
        Verdict::Allow(edits) if edits.is_empty() => answer(response, Outcome::Allowed),
        Verdict::Allow(edits) => {
            match response.clone().with_patch(annotation_patch(&new, &edits)) {
                Ok(patched) => answer(patched, Outcome::Allowed),
                Err(_) => {
                    answer(response.deny("the webhook could not encode its patch"), Outcome::Error)
                }
            }
        }
    }
}

/// The Revisions named, by name; a missing one is left out (the decision says what is wrong).
async fn read_revisions(
    state: &AppState,
    namespace: &str,
    names: &[String],
) -> Result<BTreeMap<String, RevisionFacts>, String> {
    if names.is_empty() {
        return Ok(BTreeMap::new());
    }
    let Some(client) = state.client.clone() else {
        return Err("the Kuvryn Sync webhook has no access to the API server, so it cannot check \
                    the Revision this request names; see the webhook's log"
            .to_owned());
    };
    let api: Api<Revision> = Api::namespaced(client, namespace);
    let mut found = BTreeMap::new();
    for name in names {
        match api.get_opt(name).await {
            Ok(Some(revision)) => {
                found.insert(name.clone(), facts(&revision));
            }
            Ok(None) => {}
            Err(err) => {
                tracing::warn!(%namespace, revision = %name, error = %err, "cannot read a Revision");
                return Err(format!(
                    "the Kuvryn Sync webhook cannot read Revision {name} to check this request; \
                     try again, and see the webhook's log if it persists"
                ));
            }
        }
    }
    Ok(found)
}

fn facts(revision: &Revision) -> RevisionFacts {
    let status = revision.status.as_ref();
    RevisionFacts {
        application: revision.spec.application_ref.name.clone(),
        commit: revision.spec.source.revision.clone(),
        plan_digest: status.and_then(|s| s.plan.as_ref()).map(|p| p.digest.clone()),
        deployed_desired_state_hash: status.and_then(|s| s.deployed_desired_state_hash.clone()),
    }
}

fn annotations_of(object: Option<&DynamicObject>) -> BTreeMap<String, String> {
    object.and_then(|o| o.metadata.annotations.clone()).unwrap_or_default()
}

/// A JSON patch applying `edits` to the stored annotations (`present`).
pub fn annotation_patch(
    present: &BTreeMap<String, String>,
    edits: &[AnnotationEdit],
) -> json_patch::Patch {
    let path =
        |key: &str| format!("/metadata/annotations/{}", key.replace('~', "~0").replace('/', "~1"));
    let mut operations = Vec::new();
    if present.is_empty() {
        operations
            .push(serde_json::json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
    }
    for edit in edits {
        match edit {
            AnnotationEdit::Set(key, value) => {
                operations
                    .push(serde_json::json!({"op": "add", "path": path(key), "value": value}));
            }
            AnnotationEdit::Remove(key) if present.contains_key(*key) => {
                operations.push(serde_json::json!({"op": "remove", "path": path(key)}));
            }
            AnnotationEdit::Remove(_) => {}
        }
    }
    serde_json::from_value(Value::Array(operations)).expect("a JSON patch of add and remove")
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| jiff::Timestamp::now().to_string())
}

fn answer(response: AdmissionResponse, outcome: Outcome) -> Response {
    let mut http = Json(review_json(response)).into_response();
    http.extensions_mut().insert(outcome);
    http
}

/// The AdmissionReview to send back, with the patch base64-encoded as Go encodes `[]byte` and as
/// the Kubernetes documentation shows it (kube-core serializes it as an array of numbers).
fn review_json(response: AdmissionResponse) -> Value {
    use base64::Engine;
    let mut review = serde_json::to_value(response.into_review()).unwrap_or(Value::Null);
    if let Some(patch) = review.pointer_mut("/response/patch")
        && let Some(bytes) = patch.as_array().map(|items| {
            items.iter().filter_map(Value::as_u64).map(|b| b as u8).collect::<Vec<u8>>()
        })
    {
        *patch = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    review
}

fn malformed(what: &str) -> Response {
    let mut http =
        (axum::http::StatusCode::BAD_REQUEST, format!("the body must be {what}")).into_response();
    http.extensions_mut().insert(Outcome::BadRequest);
    http
}

#[cfg(test)]
mod tests {
    use super::*;
    use kuvryn_sync_api::keys;
    use serde_json::json;

    #[test]
    fn rule_states_and_expressions_are_named_by_index() {
        let problems = health_check_problems(&json!({"kind": "Rollout", "rules": [
            {"expression": "true", "state": "Fine"},
        ]}));
        assert_eq!(problems.len(), 1);
        assert!(problems[0].starts_with("spec.rules[0].state: \"Fine\""), "{problems:?}");
        let problems = health_check_problems(&json!({"kind": "Rollout", "rules": [
            {"expression": "true", "state": "Healthy"},
            {"expression": "object.status.phase", "state": "Degraded"},
        ]}));
        assert_eq!(problems.len(), 1);
        assert!(problems[0].starts_with("spec.rules[1].expression:"), "{problems:?}");
        assert!(
            health_check_problems(&json!({"kind": "Rollout", "rules": [
                {"expression": "object.status.phase == 'Healthy'", "state": "Healthy"},
            ]}))
            .is_empty()
        );
    }

    #[test]
    fn the_patch_escapes_keys_adds_a_missing_map_and_skips_absent_removals() {
        let present = BTreeMap::from([(keys::APPROVE_DIGEST.to_owned(), "d".to_owned())]);
        let edits = [
            AnnotationEdit::Remove(keys::APPROVE_DIGEST),
            AnnotationEdit::Remove(keys::ROLLBACK_TARGET_HASH),
            AnnotationEdit::Set(keys::APPROVED_BY, "alice".into()),
        ];
        let mut object = json!({"metadata": {"annotations": {keys::APPROVE_DIGEST: "d"}}});
        json_patch::patch(&mut object, &annotation_patch(&present, &edits)).expect("applies");
        assert_eq!(object, json!({"metadata": {"annotations": {keys::APPROVED_BY: "alice"}}}));

        let mut bare = json!({"metadata": {}});
        let set = [AnnotationEdit::Set(keys::APPROVED_BY, "bob".into())];
        json_patch::patch(&mut bare, &annotation_patch(&BTreeMap::new(), &set)).expect("applies");
        assert_eq!(bare, json!({"metadata": {"annotations": {keys::APPROVED_BY: "bob"}}}));
    }
}
