//! Table tests of the Application admission rules.

use std::collections::BTreeMap;

use kuvryn_sync_api::keys;
use serde_json::{Value, json};

use super::*;

/// (annotations of the request, words the denial must hold).
type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);

const NOW: &str = "2026-12-01T10:00:00Z";
const COMMIT_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const COMMIT_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn revisions() -> BTreeMap<String, RevisionFacts> {
    let revision =
        |application: &str, commit: &str, digest: Option<&str>, deployed: Option<&str>| {
            RevisionFacts {
                application: application.into(),
                commit: commit.into(),
                plan_digest: digest.map(Into::into),
                deployed_desired_state_hash: deployed.map(Into::into),
            }
        };
    BTreeMap::from([
        ("web-a".into(), revision("web", COMMIT_A, Some("sha256:plan-a"), Some("sha256:state-a"))),
        ("web-b".into(), revision("web", COMMIT_B, Some("sha256:plan-b"), None)),
        ("web-new".into(), revision("web", COMMIT_B, None, None)),
        ("api-a".into(), revision("api", COMMIT_A, Some("sha256:plan-a"), Some("sha256:state-a"))),
    ])
}

fn review(old: Option<&[(&str, &str)]>, new: &[(&str, &str)]) -> Verdict {
    let old = old.map(annotations);
    let new = annotations(new);
    let sync = json!({"automatic": false});
    let strategy = json!({"type": "Apply"});
    let request = ApplicationRequest {
        application: "web",
        old: old.as_ref(),
        new: &new,
        username: "alice",
        now: NOW,
        sync: &sync,
        strategy: &strategy,
    };
    let known = revisions();
    let read = revisions_to_read(&request);
    let visible: BTreeMap<String, RevisionFacts> =
        known.into_iter().filter(|(name, _)| read.contains(name)).collect();
    review_application(&request, &visible)
}

fn denied(verdict: &Verdict, words: &[&str]) {
    match verdict {
        Verdict::Deny(message) => {
            for word in words {
                assert!(message.contains(word), "{message:?} lacks {word:?}");
            }
        }
        Verdict::Allow(edits) => panic!("allowed with {edits:?}, want a denial with {words:?}"),
    }
}

fn allowed(verdict: &Verdict) -> &[AnnotationEdit] {
    match verdict {
        Verdict::Allow(edits) => edits,
        Verdict::Deny(message) => panic!("denied: {message}"),
    }
}

#[test]
fn a_matching_approval_is_recorded_with_the_requester_and_the_digest_dropped() {
    let verdict = review(
        Some(&[]),
        &[(keys::APPROVED_REVISION, "web-b"), (keys::APPROVE_DIGEST, "sha256:plan-b")],
    );
    assert_eq!(
        allowed(&verdict),
        [
            AnnotationEdit::Remove(keys::APPROVE_DIGEST),
            AnnotationEdit::Set(keys::APPROVED_BY, "alice".into()),
            AnnotationEdit::Set(keys::APPROVED_AT, NOW.into()),
            AnnotationEdit::Set(keys::APPROVED_DIGEST, "sha256:plan-b".into()),
        ]
    );
}

#[test]
fn audit_annotations_riding_along_with_a_valid_approval_are_overwritten() {
    let verdict = review(
        Some(&[]),
        &[
            (keys::APPROVED_REVISION, "web-b"),
            (keys::APPROVE_DIGEST, "sha256:plan-b"),
            (keys::APPROVED_BY, "mallory"),
        ],
    );
    assert!(allowed(&verdict).contains(&AnnotationEdit::Set(keys::APPROVED_BY, "alice".into())));
}

#[test]
fn approvals_that_do_not_hold_are_denied_with_what_to_do() {
    let cases: &[Case] = &[
        (
            &[(keys::APPROVED_REVISION, "web-b"), (keys::APPROVE_DIGEST, "sha256:other")],
            &["does not match", "sha256:plan-b", "ksync sync web"],
        ),
        (
            &[(keys::APPROVED_REVISION, "gone"), (keys::APPROVE_DIGEST, "sha256:plan-b")],
            &["no Revision gone exists"],
        ),
        (
            &[(keys::APPROVED_REVISION, "api-a"), (keys::APPROVE_DIGEST, "sha256:plan-a")],
            &["belongs to Application api, not web"],
        ),
        (
            &[(keys::APPROVED_REVISION, "web-new"), (keys::APPROVE_DIGEST, "sha256:x")],
            &["has no plan yet"],
        ),
        (&[(keys::APPROVE_DIGEST, "sha256:plan-b")], &["needs sync.kuvryn.io/approved-revision"]),
        (&[(keys::APPROVED_REVISION, "web-b")], &["changed without sync.kuvryn.io/approve-digest"]),
    ];
    for (new, words) in cases {
        denied(&review(Some(&[]), new), words);
    }
}

#[test]
fn hand_set_audit_annotations_are_denied_and_removal_or_unrelated_updates_pass() {
    let approved: &[(&str, &str)] = &[
        (keys::APPROVED_REVISION, "web-b"),
        (keys::APPROVED_BY, "alice"),
        (keys::APPROVED_AT, NOW),
        (keys::APPROVED_DIGEST, "sha256:plan-b"),
    ];
    for key in APPROVAL_AUDIT.iter().chain(ROLLBACK_AUDIT.iter()) {
        denied(&review(None, &[(key, "x")]), &[key, "cannot be set or changed by hand"]);
        denied(&review(Some(&[]), &[(key, "x")]), &[key]);
    }
    let mut changed_by: Vec<(&str, &str)> = approved.to_vec();
    changed_by[1] = (keys::APPROVED_BY, "mallory");
    denied(&review(Some(approved), &changed_by), &["approved-by"]);
    // An unrelated update keeps the record; withdrawing it is allowed.
    let mut unrelated = approved.to_vec();
    unrelated.push(("team", "payments"));
    assert!(allowed(&review(Some(approved), &unrelated)).is_empty());
    assert!(allowed(&review(Some(approved), &[])).is_empty());
}

#[test]
fn a_rollback_request_is_checked_and_recorded_with_its_target_hash() {
    let verdict = review(
        Some(&[]),
        &[(keys::ROLLBACK_REVISION, COMMIT_A), (keys::ROLLBACK_TARGET_REVISION, "web-a")],
    );
    let edits = allowed(&verdict);
    let expected_hash = rollback_target_hash(
        "sha256:state-a",
        &json!({"automatic": false}),
        &json!({"type": "Apply"}),
    );
    assert_eq!(
        edits,
        [
            AnnotationEdit::Set(keys::ROLLBACK_REQUESTED_BY, "alice".into()),
            AnnotationEdit::Set(keys::ROLLBACK_REQUESTED_AT, NOW.into()),
            AnnotationEdit::Set(keys::ROLLBACK_TARGET_HASH, expected_hash),
        ]
    );
}

#[test]
fn rollback_requests_that_do_not_hold_are_denied() {
    let cases: &[Case] = &[
        (
            &[(keys::ROLLBACK_REVISION, COMMIT_A), (keys::ROLLBACK_TARGET_REVISION, "api-a")],
            &["belongs to Application api, not web"],
        ),
        (
            &[(keys::ROLLBACK_REVISION, COMMIT_A), (keys::ROLLBACK_TARGET_REVISION, "nope")],
            &["no Revision nope exists"],
        ),
        (
            &[(keys::ROLLBACK_REVISION, COMMIT_B), (keys::ROLLBACK_TARGET_REVISION, "web-a")],
            &["is of commit aaaaaaaaaaaa", "ksync rollback web --to web-a"],
        ),
        (
            &[(keys::ROLLBACK_REVISION, COMMIT_B), (keys::ROLLBACK_TARGET_REVISION, "web-b")],
            &["never completed a healthy rollout"],
        ),
        (
            &[(keys::ROLLBACK_REVISION, COMMIT_A), (keys::ROLLBACK_KIND, "sometimes")],
            &["rollback-kind", "manual or automatic"],
        ),
    ];
    for (new, words) in cases {
        denied(&review(Some(&[]), new), words);
    }
}

#[test]
fn a_rollback_without_a_chosen_revision_is_recorded_without_a_hash() {
    let verdict = review(
        Some(&[(keys::ROLLBACK_TARGET_HASH, "sha256:old")]),
        &[
            (keys::ROLLBACK_REVISION, COMMIT_A),
            (keys::ROLLBACK_KIND, "automatic"),
            (keys::ROLLBACK_TARGET_HASH, "sha256:old"),
        ],
    );
    assert!(allowed(&verdict).contains(&AnnotationEdit::Remove(keys::ROLLBACK_TARGET_HASH)));
}

#[test]
fn an_unchanged_rollback_request_keeps_its_record_and_its_removal_passes() {
    let pending: &[(&str, &str)] = &[
        (keys::ROLLBACK_REVISION, COMMIT_A),
        (keys::ROLLBACK_TARGET_REVISION, "web-a"),
        (keys::ROLLBACK_REQUESTED_BY, "alice"),
        (keys::ROLLBACK_REQUESTED_AT, NOW),
        (keys::ROLLBACK_TARGET_HASH, "sha256:h"),
    ];
    assert!(allowed(&review(Some(pending), pending)).is_empty());
    assert!(allowed(&review(Some(pending), &[(keys::ROLLBACK_FROM, COMMIT_B)])).is_empty());
    let mut forged = pending.to_vec();
    forged[4] = (keys::ROLLBACK_TARGET_HASH, "sha256:forged");
    denied(&review(Some(pending), &forged), &["rollback-target-hash"]);
}

#[test]
fn the_target_hash_changes_with_sync_and_strategy_but_not_with_key_order() {
    let a =
        rollback_target_hash("sha256:s", &json!({"automatic": false, "prune": true}), &Value::Null);
    let b =
        rollback_target_hash("sha256:s", &json!({"prune": true, "automatic": false}), &Value::Null);
    let c =
        rollback_target_hash("sha256:s", &json!({"automatic": true, "prune": true}), &Value::Null);
    let d =
        rollback_target_hash("sha256:t", &json!({"automatic": false, "prune": true}), &Value::Null);
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_ne!(a, d);
    assert!(a.starts_with("sha256:") && a.len() == 71, "{a}");
}

#[test]
fn only_revisions_an_approval_or_a_changed_rollback_names_are_read() {
    let new = annotations(&[
        (keys::APPROVED_REVISION, "web-b"),
        (keys::ROLLBACK_REVISION, COMMIT_A),
        (keys::ROLLBACK_TARGET_REVISION, "web-a"),
    ]);
    let request = ApplicationRequest {
        application: "web",
        old: Some(&new),
        new: &new,
        username: "u",
        now: NOW,
        sync: &Value::Null,
        strategy: &Value::Null,
    };
    assert!(revisions_to_read(&request).is_empty());
    let mut approving = new.clone();
    approving.insert(keys::APPROVE_DIGEST.into(), "sha256:d".into());
    let old = BTreeMap::new();
    let request = ApplicationRequest { old: Some(&old), new: &approving, ..request };
    assert_eq!(revisions_to_read(&request), ["web-b", "web-a"]);
}
