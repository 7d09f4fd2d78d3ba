use super::*;
use crate::failure::StepFailure;
use HealthState::{Degraded, Healthy, Progressing, Suspended, Unknown};
use k8s_openapi::jiff::Timestamp;

fn at(seconds: i64) -> Time {
    Time(Timestamp::from_second(seconds).expect("time"))
}

fn key(kind: &str, name: &str) -> ObjectKey {
    let group = match kind {
        "CustomResourceDefinition" => "apiextensions.k8s.io",
        "Deployment" => "apps",
        "Job" => "batch",
        "Widget" => "example.com",
        _ => "",
    };
    let namespace = (kind != "CustomResourceDefinition").then(|| "web".to_owned());
    ObjectKey { group_kind: GroupKind::new(group, kind), namespace, name: name.into() }
}

/// A member: `kind/name`, whether the plan changes it, its health.
fn member(kind_name: &str, changed: bool, state: HealthState) -> Member {
    let (kind, name) = kind_name.split_once('/').expect("kind/name");
    Member {
        key: key(kind, name),
        changed,
        state,
        message: format!("{name} is {}", state.as_str()),
        crd: None,
        succeeded: false,
    }
}

/// A CRD member: whether it is changed and Established, waited for since `since`.
fn crd(name: &str, changed: bool, established: bool, since: i64) -> Member {
    let state = if established { Healthy } else { Progressing };
    Member {
        crd: Some(Crd { established, since: at(since) }),
        ..member(&format!("CustomResourceDefinition/{name}"), changed, state)
    }
}

fn succeeded(mut member: Member) -> Member {
    member.succeeded = true;
    member
}

fn group(stage: Stage, members: Vec<Member>) -> Group {
    Group { stage, members }
}

/// Started at 1000 with a 60 s deadline and a 30 s CRD timeout; `now` is 1000 + `elapsed`.
fn attempt(elapsed: i64) -> Attempt {
    Attempt {
        started: at(1000),
        timeout: Duration::from_secs(60),
        crd_timeout: Duration::from_secs(30),
        now: at(1000 + elapsed),
    }
}

fn apply(group: usize, objects: &[ObjectKey], finishes: bool) -> Next {
    Next::Apply { group, objects: objects.to_vec(), finishes }
}

fn wait(group: usize, on: ObjectKey, seconds: u64) -> Next {
    Next::Wait { group, on, after: Duration::from_secs(seconds) }
}

fn fail(reason: FailureReason, message: &str, resource: ObjectKey) -> Next {
    Next::Fail(StepFailure::new(reason, message).on(resource))
}

/// A pre-sync hook, wave 0 (a CRD, a Deployment, a custom resource), wave 1 (a ConfigMap) and a
/// post-sync hook, with `pre`, `wave0`, `wave1` and `post` as their members.
fn rollout(
    pre: Vec<Member>,
    wave0: Vec<Member>,
    wave1: Vec<Member>,
    post: Vec<Member>,
) -> Vec<Group> {
    vec![
        group(Stage::PreSync, pre),
        group(Stage::Main, wave0),
        group(Stage::Main, wave1),
        group(Stage::PostSync, post),
    ]
}

#[test]
fn each_rule_in_order() {
    let job = |changed, state| member("Job/migrate", changed, state);
    let smoke = |changed, state| member("Job/smoke", changed, state);
    let deploy = |changed, state| member("Deployment/api", changed, state);
    let widget = |changed| member("Widget/w", changed, Progressing);
    let cm = |changed, state| member("ConfigMap/after", changed, state);
    let crd0 =
        |changed, established, since| crd("widgets.example.com", changed, established, since);
    let crd_key = key("CustomResourceDefinition", "widgets.example.com");
    // (what the rule is, the groups, seconds since the attempt started, the next step)
    let rows: Vec<(&str, Vec<Group>, i64, Next)> = vec![
        (
            "a changed pre-sync hook is applied first",
            rollout(vec![job(true, Progressing)], vec![deploy(true, Progressing)], vec![], vec![]),
            0,
            apply(0, &[key("Job", "migrate")], false),
        ),
        (
            "a running hook is waited for",
            rollout(vec![job(false, Progressing)], vec![deploy(true, Progressing)], vec![], vec![]),
            5,
            wait(0, key("Job", "migrate"), 1),
        ),
        (
            "a failed pre-sync hook is HookFailed",
            rollout(vec![job(false, Degraded)], vec![deploy(true, Progressing)], vec![], vec![]),
            5,
            fail(
                FailureReason::HookFailed,
                "Job.batch web/migrate is Degraded: migrate is Degraded",
                key("Job", "migrate"),
            ),
        ),
        (
            "a hook that succeeded and was removed is not run again",
            rollout(
                vec![succeeded(job(true, Progressing))],
                vec![deploy(true, Progressing)],
                vec![cm(true, Progressing)],
                vec![],
            ),
            5,
            apply(1, &[key("Deployment", "api")], false),
        ),
        (
            "changed CRDs go before the rest of their group",
            rollout(
                vec![job(false, Healthy)],
                vec![crd0(true, false, 1000), deploy(true, Progressing), widget(true)],
                vec![cm(true, Progressing)],
                vec![],
            ),
            5,
            apply(1, std::slice::from_ref(&crd_key), false),
        ),
        (
            "a CRD not Established yet is waited for",
            rollout(
                vec![],
                vec![crd0(false, false, 1010), deploy(true, Progressing), widget(true)],
                vec![],
                vec![],
            ),
            20,
            wait(0, crd_key.clone(), 1),
        ),
        (
            "a CRD not Established within the CRD timeout is an ApplyFailure",
            rollout(
                vec![],
                vec![crd0(false, false, 1010), deploy(true, Progressing), widget(true)],
                vec![],
                vec![],
            ),
            40,
            fail(
                FailureReason::ApplyFailure,
                "CustomResourceDefinition widgets.example.com did not become Established within 30s",
                crd_key.clone(),
            ),
        ),
        (
            "an Established CRD lets the rest of its group go",
            rollout(
                vec![],
                vec![crd0(false, true, 1010), deploy(true, Progressing), widget(true)],
                vec![cm(true, Progressing)],
                vec![],
            ),
            20,
            apply(0, &[key("Deployment", "api"), key("Widget", "w")], false),
        ),
        (
            "a wave still Progressing holds the next wave",
            rollout(vec![], vec![deploy(false, Progressing)], vec![cm(true, Progressing)], vec![]),
            30,
            wait(0, key("Deployment", "api"), 1),
        ),
        (
            "an Unknown object holds the next wave too",
            rollout(vec![], vec![deploy(false, Unknown)], vec![cm(true, Progressing)], vec![]),
            30,
            wait(0, key("Deployment", "api"), 1),
        ),
        (
            "a Degraded object of a wave is a HealthFailure",
            rollout(vec![], vec![deploy(false, Degraded)], vec![cm(true, Progressing)], vec![]),
            30,
            fail(
                FailureReason::HealthFailure,
                "Deployment.apps web/api is Degraded: api is Degraded",
                key("Deployment", "api"),
            ),
        ),
        (
            "still Progressing at the deadline is a TimeoutFailure",
            rollout(vec![], vec![deploy(false, Progressing)], vec![cm(true, Progressing)], vec![]),
            60,
            fail(
                FailureReason::TimeoutFailure,
                "Deployment.apps web/api is still Progressing at the attempt's deadline, so later \
                 groups were not applied: api is Progressing",
                key("Deployment", "api"),
            ),
        ),
        (
            "the wait ends at the deadline, not after it",
            rollout(vec![], vec![deploy(false, Progressing)], vec![cm(true, Progressing)], vec![]),
            59,
            wait(0, key("Deployment", "api"), 1),
        ),
        (
            "a Healthy or Suspended wave lets the next one go",
            rollout(
                vec![],
                vec![deploy(false, Suspended), cm(false, Healthy)],
                vec![member("Secret/late", true, Progressing)],
                vec![smoke(true, Progressing)],
            ),
            30,
            apply(1, &[key("Secret", "late")], false),
        ),
        (
            "the last group's apply finishes the rollout",
            rollout(
                vec![job(false, Healthy)],
                vec![deploy(false, Healthy)],
                vec![cm(false, Healthy)],
                vec![smoke(true, Progressing)],
            ),
            30,
            apply(3, &[key("Job", "smoke")], true),
        ),
        (
            "nothing left to apply: done, the last group's health is observed later",
            rollout(
                vec![job(false, Healthy)],
                vec![deploy(false, Healthy)],
                vec![cm(false, Healthy)],
                vec![smoke(false, Progressing)],
            ),
            90,
            Next::Done,
        ),
        ("no groups at all: done", vec![], 0, Next::Done),
    ];
    for (rule, groups, elapsed, expected) in rows {
        // Empty groups (a rollout without hooks, say) do not exist: apply_groups makes none.
        let groups: Vec<Group> = groups.into_iter().filter(|g| !g.members.is_empty()).collect();
        // Positions in the expectation count the groups that exist.
        assert_eq!(next(&groups, &attempt(elapsed)), expected, "{rule}");
    }
}

#[test]
fn a_single_group_is_applied_and_finished_in_one_step() {
    let groups = vec![group(
        Stage::Main,
        vec![member("Deployment/api", true, Progressing), member("ConfigMap/c", false, Healthy)],
    )];
    assert_eq!(next(&groups, &attempt(0)), apply(0, &[key("Deployment", "api")], true));
    // A CRD in the only group still goes first, and is Established before the rest.
    let groups = vec![group(
        Stage::Main,
        vec![crd("widgets.example.com", true, false, 1000), member("Widget/w", true, Progressing)],
    )];
    assert_eq!(
        next(&groups, &attempt(0)),
        apply(0, &[key("CustomResourceDefinition", "widgets.example.com")], false)
    );
}
