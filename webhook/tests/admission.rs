//! The admission routes on untrusted input: malformed, wrong-typed, empty and oversize bodies get
//! a 4xx and never a panic; AdmissionReviews get the uid back; an approval the webhook cannot check
//! (no API access) is denied with a message that says why.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use kuvryn_sync_webhook::routes::{
    ADMIT_APPLICATIONS, AppState, MAX_ADMISSION_BODY_BYTES, RequestLimits, VALIDATE_HEALTHCHECKS,
    admission_router,
};
use serde_json::{Value, json};
use tower::ServiceExt;

async fn post(path: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("request");
    let response = admission_router(AppState::default(), RequestLimits::default())
        .oneshot(request)
        .await
        .expect("router answers");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("body");
    (status, bytes.to_vec())
}

fn review(resource: &str, object: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "7f0b2c1e-0000-4000-8000-000000000042",
            "kind": {"group": "sync.kuvryn.io", "version": "v1alpha1", "kind": "X"},
            "resource": {"group": "sync.kuvryn.io", "version": "v1alpha1", "resource": resource},
            "name": "x", "namespace": "team-a", "operation": "CREATE",
            "userInfo": {"username": "alice"}, "object": object, "dryRun": false,
        }
    })
}

#[tokio::test]
async fn malformed_wrong_typed_and_oversize_bodies_get_a_4xx() {
    let bad_bodies: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"null".to_vec(),
        b"{".to_vec(),
        b"[]".to_vec(),
        b"{\"request\": 5}".to_vec(),
        b"{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"AdmissionReview\"}".to_vec(),
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}"#
            .to_vec(),
        vec![0xff, 0xfe, 0x00, 0x01],
    ];
    for path in [VALIDATE_HEALTHCHECKS, ADMIT_APPLICATIONS] {
        for body in &bad_bodies {
            let (status, _) = post(path, body.clone()).await;
            assert!(
                status.is_client_error(),
                "{path} {:?}: {status}",
                String::from_utf8_lossy(body)
            );
        }
        let huge = vec![b' '; MAX_ADMISSION_BODY_BYTES + 1];
        assert_eq!(post(path, huge).await.0, StatusCode::PAYLOAD_TOO_LARGE, "{path}");
    }
}

#[tokio::test]
async fn the_largest_legitimate_update_review_is_read() {
    // An UPDATE of an Application at etcd's 1.5 MiB: old and new object in one review.
    let big = "x".repeat(1536 * 1024);
    let object = json!({"metadata": {"name": "x", "annotations": {"note": big}}, "spec": {}});
    let mut review = review("healthchecks", object.clone());
    review["request"]["operation"] = json!("UPDATE");
    review["request"]["oldObject"] = object;
    let body = review.to_string().into_bytes();
    assert!(body.len() > 3 * 1024 * 1024, "{} bytes", body.len());
    let (status, answer) = post(VALIDATE_HEALTHCHECKS, body).await;
    assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_slice(&answer).expect("json");
    assert_eq!(answer["response"]["uid"], "7f0b2c1e-0000-4000-8000-000000000042");
}

#[tokio::test]
async fn wrong_typed_objects_are_denied_not_crashed_on() {
    let objects = [
        json!({"metadata": {"name": "x"}, "spec": {"rules": "everything"}}),
        json!({"metadata": {"name": "x"}, "spec": {"rules": [{"expression": 5, "state": "Healthy"}]}}),
        json!({"metadata": {"name": "x"}, "spec": null}),
        json!({"metadata": {"name": "x"}, "spec": {"kind": "Rollout", "rules": [null]}}),
    ];
    for object in objects {
        let (status, body) = post(
            VALIDATE_HEALTHCHECKS,
            review("healthchecks", object.clone()).to_string().into_bytes(),
        )
        .await;
        if status == StatusCode::OK {
            let answer: Value = serde_json::from_slice(&body).expect("json");
            assert_eq!(answer["response"]["allowed"], false, "{object}: {answer}");
            assert_eq!(answer["response"]["uid"], "7f0b2c1e-0000-4000-8000-000000000042");
        } else {
            assert!(status.is_client_error(), "{object}: {status}");
        }
    }
}

#[tokio::test]
async fn an_answer_carries_the_request_uid_and_the_admission_review_type() {
    let object = json!({"metadata": {"name": "ok"}, "spec": {"kind": "Rollout", "rules": [
        {"expression": "true", "state": "Healthy"}]}});
    let (status, body) =
        post(VALIDATE_HEALTHCHECKS, review("healthchecks", object).to_string().into_bytes()).await;
    assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    assert_eq!(answer["response"]["uid"], "7f0b2c1e-0000-4000-8000-000000000042");
    assert_eq!(answer["response"]["allowed"], true);
}

#[tokio::test]
async fn an_approval_the_webhook_cannot_check_is_denied_saying_why() {
    let object = json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "web", "namespace": "team-a", "annotations": {
            "sync.kuvryn.io/approved-revision": "web-1",
            "sync.kuvryn.io/approve-digest": "sha256:abc"}},
        "spec": {},
    });
    let (status, body) =
        post(ADMIT_APPLICATIONS, review("applications", object).to_string().into_bytes()).await;
    assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let message = answer["response"]["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no access to the API server"), "{message}");
}
