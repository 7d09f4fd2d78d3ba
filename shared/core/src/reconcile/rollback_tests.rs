//! One test per rule of the module documentation.

use super::*;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kuvryn_sync_api::{ApplicationSpec, ApplicationStatus, RevisionSpec, RevisionStatus};
use serde_json::json;

use crate::conditions::NewCondition;

const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const C: &str = "cccccccccccccccccccccccccccccccccccccccc";

fn app(annotations: &[(&str, &str)], action: &str) -> Application {
    let spec: ApplicationSpec = serde_json::from_value(json!({
        "source": {"repositoryRef": {"name": "apps"}, "path": "web", "render": {"type": "yaml"}},
        "destination": {"namespace": "web"},
        "strategy": {"failurePolicy": {"action": action}},
    }))
    .expect("spec");
    let mut app = Application::new("web", spec);
    app.metadata.namespace = Some("team".into());
    app.metadata.annotations =
        Some(annotations.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
    app.status =
        Some(ApplicationStatus { deployed_revision: Some(A.into()), ..Default::default() });
    app
}

fn at(seconds: i64) -> Time {
    Time(Timestamp::from_second(seconds).expect("time"))
}

/// Revision `name` of `web` at `commit`, created at `created`, in `phase`; `deployed` gives it a
/// deployed desired state; `rolled_back` marks it `RolledBack=True`.
fn rev(name: &str, commit: &str, created: i64, phase: RevisionPhase, deployed: bool) -> Revision {
    let spec: RevisionSpec = serde_json::from_value(json!({
        "applicationRef": {"name": "web"},
        "source": {"repositoryRef": {"name": "apps"}, "revision": commit, "path": "web", "render": {"type": "yaml"}},
        "desiredStateHash": format!("sha256:{name}"),
    }))
    .expect("spec");
    let mut revision = Revision::new(name, spec);
    revision.metadata.creation_timestamp = Some(at(created));
    revision.status = Some(RevisionStatus {
        phase: Some(phase),
        deployed_desired_state_hash: deployed.then(|| format!("sha256:{name}")),
        ..Default::default()
    });
    revision
}

fn rolled_back(mut revision: Revision) -> Revision {
    let status = revision.status.get_or_insert_with(Default::default);
    conditions::set(
        &mut status.conditions,
        NewCondition {
            type_: ConditionType::RolledBack,
            status: Status::True,
            reason: "RollbackCompleted",
            message: "rolled back".into(),
            observed_generation: None,
        },
        &at(100),
    );
    revision
}

fn bare(commit: &str) -> Request {
    Request::from_annotations(&[(keys::ROLLBACK_REVISION.to_owned(), commit.to_owned())].into())
        .expect("a request")
}

/// One row: the rule, the annotations, the commit the spec resolves to, the Revisions, the
/// expected course.
type Case = (&'static str, Vec<(&'static str, String)>, &'static str, Vec<Revision>, Course);

fn request(commit: &str) -> Vec<(&'static str, String)> {
    vec![(keys::ROLLBACK_REVISION, commit.to_owned())]
}

fn with<'a>(pairs: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    pairs.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[test]
fn lifting_a_hold_removes_rolled_back_from_the_held_commits_revisions_only() {
    let revisions = vec![
        rolled_back(rev("web-a", A, 10, RevisionPhase::RolledBack, true)),
        rolled_back(rev("web-b", B, 20, RevisionPhase::Failed, false)),
        rolled_back(rev("web-b2", B, 30, RevisionPhase::Cancelled, false)),
        rev("web-b3", B, 40, RevisionPhase::Failed, false),
    ];
    let lifted = lifted(&revisions, B);
    let names: Vec<&str> = lifted.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["web-b", "web-b2"], "only B's Revisions that carry RolledBack=True");
    for ((name, status), original) in lifted.iter().zip([&revisions[1], &revisions[2]]) {
        assert!(
            conditions::get(&status.conditions, ConditionType::RolledBack).is_none(),
            "{name}: RolledBack removed"
        );
        let phase = original.status.as_ref().and_then(|s| s.phase);
        assert_eq!(status.phase, phase, "{name}: everything else kept");
    }
    assert!(super::lifted(&revisions, C).is_empty(), "nothing of a commit never held");
}

#[test]
fn a_request_is_read_from_the_annotations_and_manual_when_the_kind_is_missing() {
    let annotations = BTreeMap::from([
        (keys::ROLLBACK_REVISION.to_owned(), A.to_owned()),
        (keys::ROLLBACK_TARGET_REVISION.to_owned(), "web-a".to_owned()),
        (keys::ROLLBACK_REQUESTED_BY.to_owned(), "alice".to_owned()),
    ]);
    let request = Request::from_annotations(&annotations).expect("a request");
    assert_eq!(request.kind, Kind::Manual);
    assert_eq!(request.target_revision.as_deref(), Some("web-a"));
    assert_eq!(request.requester(), "alice");
    assert!(Request::from_annotations(&BTreeMap::new()).is_none(), "no rollback-revision");
    let automatic = BTreeMap::from([
        (keys::ROLLBACK_REVISION.to_owned(), A.to_owned()),
        (keys::ROLLBACK_KIND.to_owned(), "automatic".to_owned()),
    ]);
    assert_eq!(Request::from_annotations(&automatic).map(|r| r.kind), Some(Kind::Automatic));
}

#[test]
fn the_course_follows_rolls_back_holds_lifts_or_drops() {
    let held_b = vec![
        rev("web-a", A, 10, RevisionPhase::RolledBack, true),
        rolled_back(rev("web-b", B, 20, RevisionPhase::Failed, false)),
    ];
    let pending_from_b =
        [(keys::ROLLBACK_REVISION, A.to_owned()), (keys::ROLLBACK_FROM, B.to_owned())];
    let from_b = [(keys::ROLLBACK_FROM, B.to_owned())];
    let to_b = [(keys::ROLLBACK_REVISION, B.to_owned()), (keys::ROLLBACK_FROM, B.to_owned())];
    let cases: Vec<Case> = vec![
        ("no annotations: follow the spec", vec![], B, vec![], Course::Follow { end_hold: None }),
        (
            "a request without rollback-from holds the commit the spec resolves to",
            request(A),
            B,
            vec![],
            Course::RollBack { request: bare(A), from: B.into() },
        ),
        (
            "a new request while one is pending keeps rollback-from",
            pending_from_b.to_vec(),
            C,
            vec![],
            Course::RollBack { request: bare(A), from: B.into() },
        ),
        (
            "a completed rollback holds the commit the spec resolves to",
            from_b.to_vec(),
            B,
            held_b.clone(),
            Course::Hold { held: B.into(), deployed: A.into() },
        ),
        (
            "a new commit ends the hold (ruling 10)",
            from_b.to_vec(),
            C,
            held_b.clone(),
            Course::Follow { end_hold: Some(B.into()) },
        ),
        (
            "a force-push back to a commit a completed rollback replaced holds it again, keeping \
             the commit deployed now",
            vec![],
            B,
            held_b.clone(),
            Course::Hold { held: B.into(), deployed: A.into() },
        ),
        (
            "rollback-from without a completed rollback holds nothing",
            from_b.to_vec(),
            B,
            vec![rev("web-b", B, 20, RevisionPhase::Failed, false)],
            Course::Follow { end_hold: Some(B.into()) },
        ),
        (
            "an explicit rollback to the held commit lifts the hold",
            to_b.to_vec(),
            B,
            held_b.clone(),
            Course::LiftHold { request: bare(B), held: B.into() },
        ),
        (
            "a request to the desired commit with nothing held is pointless",
            request(B),
            B,
            vec![],
            Course::Pointless { request: bare(B) },
        ),
    ];
    for (rule, annotations, resolved, revisions, expected) in cases {
        let app = app(&with(&annotations), "rollback");
        assert_eq!(course(&app, resolved, &revisions), expected, "{rule}");
    }
}

#[test]
fn a_failure_rolls_back_to_the_previous_healthy_revision_of_another_commit() {
    let mut failed = rev("web-c", C, 30, RevisionPhase::Failed, false);
    failed.status.as_mut().expect("status").previous_revision = Some("web-a".into());
    let all = vec![
        rev("web-a", A, 10, RevisionPhase::Healthy, true),
        rev("web-b", B, 20, RevisionPhase::Healthy, true),
        rev("web-c2", C, 25, RevisionPhase::Healthy, true),
        failed.clone(),
    ];
    let rollback_app = app(&[], "rollback");
    assert_eq!(
        fallback(&rollback_app, &failed, &all),
        Some(Fallback { revision: "web-a".into(), commit: A.into() }),
        "status.previousRevision first"
    );
    failed.status.as_mut().expect("status").previous_revision = None;
    assert_eq!(
        fallback(&rollback_app, &failed, &all).map(|f| f.revision),
        Some("web-b".into()),
        "else the newest healthy Revision of another commit (never one of the failed commit)"
    );
    assert_eq!(fallback(&app(&[], "pause"), &failed, &all), None, "only under action: rollback");
    let never_healthy = vec![rev("web-a", A, 10, RevisionPhase::Failed, false), failed.clone()];
    assert_eq!(
        fallback(&rollback_app, &failed, &never_healthy),
        None,
        "nothing healthy to return to"
    );
    let mut abandoned = failed.clone();
    abandoned.metadata.annotations = Some([(ABANDONED.to_owned(), "web-b".to_owned())].into());
    assert_eq!(
        fallback(&rollback_app, &abandoned, &all),
        None,
        "once abandoned, retries like pause"
    );
    let rolled = vec![rev("web-a", A, 10, RevisionPhase::RolledBack, true), failed.clone()];
    assert_eq!(
        fallback(&rollback_app, &failed, &rolled).map(|f| f.revision),
        Some("web-a".into()),
        "a Revision a rollback completed to is healthy too"
    );
}

#[test]
fn an_automatic_request_records_the_held_commit_only_when_missing() {
    let target = Fallback { revision: "web-a".into(), commit: A.into() };
    let patch = automatic_request(&app(&[], "rollback"), &target, C);
    assert_eq!(patch.get(keys::ROLLBACK_REVISION), Some(&Some(A.to_owned())));
    assert_eq!(patch.get(keys::ROLLBACK_TARGET_REVISION), Some(&Some("web-a".to_owned())));
    assert_eq!(patch.get(keys::ROLLBACK_KIND), Some(&Some("automatic".to_owned())));
    assert_eq!(patch.get(keys::ROLLBACK_FROM), Some(&Some(C.to_owned())));
    let held = app(&[(keys::ROLLBACK_FROM, B)], "rollback");
    assert!(!automatic_request(&held, &target, C).contains_key(keys::ROLLBACK_FROM));
}

#[test]
fn removing_a_request_keeps_rollback_from() {
    let patch = remove_request();
    assert!(patch.values().all(Option::is_none));
    assert!(patch.contains_key(keys::ROLLBACK_REVISION));
    assert!(patch.contains_key(keys::ROLLBACK_TARGET_HASH));
    assert!(!patch.contains_key(keys::ROLLBACK_FROM));
    let app = app(&[(keys::ROLLBACK_FROM, B)], "rollback");
    assert!(!changes(&app, &patch), "nothing to remove writes nothing");
}
