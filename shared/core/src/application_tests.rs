use super::*;

use std::collections::BTreeSet;

use base64::Engine as _;
use k8s_openapi::jiff::Timestamp;
use kuvryn_sync_api::{ApplicationSpec, Diagnosis, ManagedKind};
use serde_json::json;

use crate::desired::{DesiredObject, Rendered, Scope, Target, group_of};
use crate::plan::{self, FieldConflict, Found};
use crate::prune::plan_prune;

const NAMESPACE: &str = "team";
const APP: &str = "web";
const DESTINATION: &str = "web";
const UID: &str = "uid-web-1";
const SA: &str = "deployer";
const C1: &str = "0123456789abcdef0123456789abcdef01234567";
const C2: &str = "fedcba9876543210fedcba9876543210fedcba98";
const CANARY: &str = "canary-7c1e9b42-secret-value";
const OTHER_MANAGER: &str = "kuvryn-sync/team/other";

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

fn at(seconds: i64) -> Time {
    Time(Timestamp::from_second(seconds).expect("timestamp"))
}

/// The inventory `web` starts with: ConfigMaps and Secrets.
fn inventory() -> Vec<ManagedKind> {
    vec![kind("v1", "ConfigMap"), kind("v1", "Secret")]
}

fn kind(api_version: &str, kind: &str) -> ManagedKind {
    ManagedKind { api_version: api_version.into(), kind: kind.into(), namespaced: true }
}

/// Application `team/web` at generation 1 with `spec.sync` = `sync`, the given `maxAttempts`,
/// a uid, and a status holding only [`inventory`].
fn application(sync: Value, max_attempts: i32) -> Application {
    let spec: ApplicationSpec = serde_json::from_value(json!({
        "serviceAccountName": SA,
        "source": {
            "repositoryRef": {"name": "platform"},
            "path": "apps/web",
            "render": {"type": "yaml"},
        },
        "destination": {"namespace": DESTINATION},
        "sync": sync,
        "strategy": {"failurePolicy": {"maxAttempts": max_attempts}},
    }))
    .expect("spec");
    let mut app = Application::new(APP, spec);
    app.metadata.namespace = Some(NAMESPACE.into());
    app.metadata.uid = Some(UID.into());
    app.metadata.generation = Some(1);
    app.status = Some(ApplicationStatus { managed_kinds: inventory(), ..Default::default() });
    app
}

fn automatic() -> Application {
    application(json!({"automatic": true, "prune": true}), 1)
}

fn served(gk: &GroupKind) -> Option<Scope> {
    match (gk.group.as_str(), gk.kind.as_str()) {
        ("", "ConfigMap" | "Secret" | "Service")
        | ("apps", "Deployment")
        | ("serving.knative.dev", "Service") => Some(Scope::Namespaced),
        _ => None,
    }
}

fn desired(objects: Vec<Value>) -> DesiredState {
    let rendered: Vec<Rendered> = objects
        .into_iter()
        .enumerate()
        .map(|(n, object)| Rendered { origin: format!("apps/web/all.yaml#{n}"), object })
        .collect();
    let target = Target {
        application: APP,
        application_namespace: NAMESPACE,
        destination_namespace: DESTINATION,
    };
    crate::desired::normalise(&rendered, served, target).expect("valid desired state")
}

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}})
}

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
           "spec": {"replicas": 2}})
}

/// ConfigMap web/settings and Deployment web/api.
fn web() -> DesiredState {
    desired(vec![config_map("settings"), deployment("api")])
}

fn key(group: &str, kind: &str, name: &str) -> ObjectKey {
    ObjectKey {
        group_kind: GroupKind::new(group, kind),
        namespace: Some(DESTINATION.into()),
        name: name.into(),
    }
}

fn managed(api_version: &str, kind: &str, name: &str) -> ManagedObject {
    ManagedObject {
        key: key(group_of(api_version), kind, name),
        api_version: api_version.into(),
        prune_disabled: false,
    }
}

/// What a first sync finds live: the desired ConfigMap, a dropped ConfigMap (pruned) and a
/// dropped Secret (kept: high-risk).
fn live_before_first_sync() -> Vec<ManagedObject> {
    vec![
        managed("v1", "ConfigMap", "settings"),
        managed("v1", "ConfigMap", "old"),
        managed("v1", "Secret", "old-db"),
    ]
}

/// The prune plan of `state` against `live`, with [`inventory`] as `status.managedKinds`.
fn prune_for(state: &DesiredState, live: &[ManagedObject]) -> PrunePlan {
    let keys: BTreeSet<ObjectKey> = state.objects.iter().map(|o| o.key.clone()).collect();
    let kinds: BTreeSet<GroupKind> =
        inventory().iter().map(|k| GroupKind::new(group_of(&k.api_version), &k.kind)).collect();
    plan_prune(&keys, &kinds, live)
}

/// No live object: Create.
fn absent(_: &DesiredObject) -> Found {
    Found::Absent
}

/// Live as desired: Unchanged.
fn unchanged(object: &DesiredObject) -> Found {
    Found::Present { live: object.object.clone(), dry_run: object.object.clone(), adopted: vec![] }
}

/// Someone labelled the live object by hand; the dry run takes the label away: Update.
fn drifted(object: &DesiredObject) -> Found {
    let mut live = object.object.clone();
    live["metadata"]["labels"]["edited-by"] = json!("hand");
    Found::Present { live, dry_run: object.object.clone(), adopted: vec![] }
}

/// The ConfigMap's `.data.a` is held by another Application (a real conflict) and `.data.b` by
/// `before-first-apply` (never one); everything else is absent.
fn conflicting(object: &DesiredObject) -> Found {
    if object.key.group_kind.kind == "ConfigMap" {
        Found::Conflicts(vec![
            FieldConflict { field: ".data.a".into(), manager: OTHER_MANAGER.into() },
            FieldConflict { field: ".data.b".into(), manager: plan::BEFORE_FIRST_APPLY.into() },
        ])
    } else {
        Found::Absent
    }
}

/// `state` planned at [`C1`] with what `found` says of each object, and `prune`.
fn planned_with(
    state: &DesiredState,
    found: impl Fn(&DesiredObject) -> Found,
    prune: PrunePlan,
    revision: Option<Revision>,
) -> Planned {
    let observations: Vec<plan::Observation> = state
        .objects
        .iter()
        .map(|object| plan::Observation {
            key: object.key.clone(),
            api_version: object.object["apiVersion"].as_str().unwrap_or_default().to_owned(),
            wave: object.wave,
            found: found(object),
        })
        .collect();
    let plan = plan::plan(&state.hash, &observations, &prune);
    Planned {
        service_account: SA.into(),
        commit: C1.into(),
        desired: state.clone(),
        plan,
        prune,
        unlisted: vec![],
        revision,
    }
}

fn planned(planned: &Planned) -> Observation {
    Observation::Planned(Box::new(planned.clone()))
}

fn failed(
    reason: FailureReason,
    message: &str,
    service_account: Option<&str>,
    commit: Option<&str>,
) -> Observation {
    Observation::Failed {
        reason,
        message: message.to_owned(),
        service_account: service_account.map(str::to_owned),
        commit: commit.map(str::to_owned),
    }
}

/// `app`'s first sync of [`web`] at time 10, everything absent: the Planned and the Decision.
fn first_sync(app: &Application) -> (Planned, Decision) {
    let state = web();
    let prune = prune_for(&state, &live_before_first_sync());
    let planned_state = planned_with(&state, absent, prune, None);
    let decision = decide(app, &planned(&planned_state), &Redactor::new(), &at(10));
    assert!(matches!(decision.step, Step::Sync { .. }), "{:?}", decision.step);
    (planned_state, decision)
}

/// The Revision of `decision` with the settled `status`, as the controller stores it.
fn stored(decision: &Decision, status: RevisionStatus) -> Revision {
    let mut revision = decision.revision.clone().expect("a Revision");
    revision.status = Some(status);
    revision
}

/// The live kinds after the first sync: the desired ones and the kept Secret.
fn live_kinds_after_first_sync() -> Vec<GroupKind> {
    vec![
        GroupKind::new("", "ConfigMap"),
        GroupKind::new("apps", "Deployment"),
        GroupKind::new("", "Secret"),
    ]
}

fn reasons(events: &[(EventReason, String)]) -> Vec<&'static str> {
    events.iter().map(|(reason, _)| reason.as_str()).collect()
}

fn ready(
    status: &ApplicationStatus,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    conditions::get(&status.conditions, ConditionType::Ready)
}

fn set_ready(status: &mut ApplicationStatus, value: Status, reason: &str, since: i64) {
    conditions::set(
        &mut status.conditions,
        NewCondition {
            type_: ConditionType::Ready,
            status: value,
            reason,
            message: format!("{reason} earlier"),
            observed_generation: Some(1),
        },
        &at(since),
    );
}

fn revision_status(decision: &Decision) -> &RevisionStatus {
    decision.revision.as_ref().and_then(|r| r.status.as_ref()).expect("a Revision status")
}

fn tail(commit: &str, hash: &str) -> String {
    let hex = hash.rsplit(':').next().expect("hex");
    format!("-{}-{}", &commit[..12], &hex[..10])
}

// ---------------------------------------------------------------------------------------------
// revision_name
// ---------------------------------------------------------------------------------------------

#[test]
fn revision_names_take_12_of_the_commit_and_10_of_the_hash_and_stay_within_253() {
    let hash = "sha256:abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789";
    let upper = "sha256:ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789";
    let a = |n: usize| "a".repeat(n);
    // (application, commit, hash, expected name)
    let cases: Vec<(String, &str, &str, String)> = vec![
        ("web".into(), C1, hash, "web-0123456789ab-abcdef0123".into()),
        ("web".into(), C2, hash, "web-fedcba987654-abcdef0123".into()),
        // Upper-case hex is written in lower case: a Kubernetes name is lower case.
        ("web".into(), "0123456789ABCDEF0123", upper, "web-0123456789ab-abcdef0123".into()),
        // 253 characters: the name is shortened to keep the tail whole.
        (a(253), C1, hash, format!("{}-0123456789ab-abcdef0123", a(229))),
        // The cut lands after "-.": both are dropped, never left before the separator.
        (
            format!("{}-.{}", a(227), "b".repeat(24)),
            C1,
            hash,
            format!("{}{}", a(227), tail(C1, hash)),
        ),
        // The cut lands after ".".
        (
            format!("{}.{}", a(228), "b".repeat(30)),
            C1,
            hash,
            format!("{}{}", a(228), tail(C1, hash)),
        ),
        // A name that fits is kept whole, even one of 229 characters.
        (a(229), C1, hash, format!("{}{}", a(229), tail(C1, hash))),
    ];
    for (application, commit, hash, expected) in &cases {
        let name = revision_name(application, commit, hash);
        assert_eq!(&name, expected, "{application}");
        assert_eq!(name, revision_name(application, commit, hash), "deterministic");
        assert!(name.len() <= 253, "{} characters: {name}", name.len());
        let head = &name[..name.len() - 24];
        assert!(!head.ends_with(['-', '.']), "{name}");
    }
    // Any change of commit or desired state gives another name.
    let one = web().hash;
    let other = desired(vec![config_map("settings")]).hash;
    assert_ne!(one, other);
    let base = revision_name(APP, C1, &one);
    assert_eq!(base, format!("web{}", tail(C1, &one)));
    assert_ne!(base, revision_name(APP, C2, &one), "commit");
    assert_ne!(base, revision_name(APP, C1, &other), "hash");
    assert_ne!(revision_name(&a(253), C1, &one), revision_name(&a(253), C1, &other));
}

// ---------------------------------------------------------------------------------------------
// decide: failures before a plan
// ---------------------------------------------------------------------------------------------

#[test]
fn failures_before_a_plan_set_ready_false_once_with_a_redacted_message() {
    let mut redactor = Redactor::new();
    redactor.add_secret(CANARY);
    let source = format!("fetch https://git.example.com/r.git failed: token {CANARY} rejected");
    let render = format!("helm: value password={CANARY} is not a string");
    let source_masked = "fetch https://git.example.com/r.git failed: token *** rejected";
    let render_masked = "helm: value password=*** is not a string";
    // (observation, events, status written, Ready reason, Ready message, serviceAccountName,
    //  desiredRevision)
    type Row = (
        Observation,
        Vec<&'static str>,
        bool,
        &'static str,
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
    );
    let rows: Vec<Row> = vec![
        (
            failed(FailureReason::SourceFailure, &source, None, None),
            vec!["SourceFailure"],
            true,
            "SourceFailure",
            source_masked,
            None,
            None,
        ),
        // The same failure again: no Event, nothing to write.
        (
            failed(FailureReason::SourceFailure, &source, None, None),
            vec![],
            false,
            "SourceFailure",
            source_masked,
            None,
            None,
        ),
        // Further along: another reason, with what was resolved so far.
        (
            failed(FailureReason::RenderFailure, &render, Some(SA), Some(C1)),
            vec!["RenderFailure"],
            true,
            "RenderFailure",
            render_masked,
            Some(SA),
            Some(C1),
        ),
        (
            failed(FailureReason::RenderFailure, &render, Some(SA), Some(C1)),
            vec![],
            false,
            "RenderFailure",
            render_masked,
            Some(SA),
            Some(C1),
        ),
    ];
    let mut app = automatic();
    for (n, (observation, events, written, reason, message, sa, commit)) in
        rows.into_iter().enumerate()
    {
        let d = decide(&app, &observation, &redactor, &at(100 + n as i64));
        assert_eq!(reasons(&d.events), events, "step {n}");
        assert_eq!(d.status.is_some(), written, "step {n}");
        assert_eq!(d.step, Step::Report, "step {n}");
        assert!(d.revision.is_none(), "no Revision before a plan (step {n})");
        for (reason_of_event, text) in &d.events {
            assert_eq!(*reason_of_event, EventReason::Failure(observation_reason(&observation)));
            assert_eq!(text, message, "step {n}");
            assert!(!text.contains(CANARY), "step {n}: {text}");
        }
        let status = d.status.or(app.status.clone()).expect("a status");
        let condition = ready(&status).expect("Ready");
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str(), condition.message.as_str()),
            ("False", reason, message),
            "step {n}"
        );
        assert!(!condition.message.contains(CANARY));
        assert_eq!(condition.observed_generation, Some(1));
        assert_eq!(condition.last_transition_time, at(100), "False since the first failure");
        assert_eq!(status.sync.state, SyncState::OutOfSync, "step {n}");
        assert_eq!(status.sync.last_transition_time, Some(at(100)), "step {n}");
        assert_eq!(status.observed_generation, Some(1));
        assert_eq!(status.service_account_name.as_deref(), sa, "step {n}");
        assert_eq!(status.desired_revision.as_deref(), commit, "step {n}");
        assert_eq!(status.managed_kinds, inventory(), "a failure never touches the inventory");
        app.status = Some(status);
    }
}

fn observation_reason(observation: &Observation) -> FailureReason {
    match observation {
        Observation::Failed { reason, .. } => *reason,
        Observation::Planned(_) => panic!("not a failure"),
    }
}

#[test]
fn long_failure_messages_are_truncated() {
    let message = "x".repeat(5000);
    let d = decide(
        &automatic(),
        &failed(FailureReason::PlanFailure, &message, None, None),
        &Redactor::new(),
        &at(1),
    );
    let status = d.status.expect("written");
    let condition = ready(&status).expect("Ready");
    assert_eq!(condition.message.chars().count(), MAX_MESSAGE);
    assert!(condition.message.ends_with('…'));
    assert_eq!(d.events[0].1, condition.message);
}

// ---------------------------------------------------------------------------------------------
// decide: a new desired state
// ---------------------------------------------------------------------------------------------

#[test]
fn a_new_desired_state_under_automatic_sync_records_the_inventory_then_syncs() {
    let app = automatic();
    let state = web();
    let prune = prune_for(&state, &live_before_first_sync());
    assert_eq!(prune.delete, vec![managed("v1", "ConfigMap", "old")]);
    let mut planned_state = planned_with(&state, absent, prune, None);
    planned_state.unlisted = vec![GroupKind::new("batch", "Job")];
    let d = decide(&app, &planned(&planned_state), &Redactor::new(), &at(10));

    assert_eq!(d.step, Step::Sync { prune: vec![managed("v1", "ConfigMap", "old")] });

    let revision = d.revision.as_ref().expect("a Revision");
    let name = revision_name(APP, C1, &state.hash);
    assert_eq!(revision.metadata.name.as_deref(), Some(name.as_str()));
    assert_eq!(revision.metadata.namespace.as_deref(), Some(NAMESPACE));
    assert_eq!(
        revision.metadata.labels,
        Some([(keys::APPLICATION.to_owned(), APP.to_owned())].into())
    );
    let owners = revision.metadata.owner_references.as_deref().expect("an owner");
    assert_eq!(owners.len(), 1);
    assert_eq!(
        (
            owners[0].api_version.as_str(),
            owners[0].kind.as_str(),
            owners[0].name.as_str(),
            owners[0].uid.as_str(),
            owners[0].controller
        ),
        ("sync.kuvryn.io/v1alpha1", "Application", APP, UID, Some(true))
    );
    assert_eq!(
        revision.spec,
        RevisionSpec {
            application_ref: LocalObjectReference { name: APP.into() },
            source: RevisionSource {
                repository_ref: LocalObjectReference { name: "platform".into() },
                revision: C1.into(),
                path: "apps/web".into(),
                render: app.spec.source.render.clone(),
            },
            desired_state_hash: state.hash.clone(),
        }
    );
    let rs = revision_status(&d);
    assert_eq!(rs.phase, Some(RevisionPhase::Applying));
    assert_eq!(rs.attempts, 1);
    assert_eq!(rs.started_at, Some(at(10)));
    assert_eq!((rs.completed_at.as_ref(), rs.failure.as_ref()), (None, None));
    let summary = rs.plan.as_ref().expect("a plan summary");
    assert_eq!(
        (summary.create, summary.update, summary.delete, summary.unchanged),
        (2, 0, 1, 1),
        "two desired objects to create, one to prune, one kept"
    );
    assert_eq!(summary.digest, planned_state.plan.digest);

    let status = d.status.as_ref().expect("the inventory is written before the sync");
    assert_eq!(
        status.managed_kinds,
        vec![kind("apps/v1", "Deployment"), kind("v1", "ConfigMap"), kind("v1", "Secret")]
    );
    assert_eq!(status.sync.state, SyncState::Applying);
    assert_eq!(status.sync.last_transition_time, Some(at(10)));
    assert_eq!(status.service_account_name.as_deref(), Some(SA));
    assert_eq!(status.desired_revision.as_deref(), Some(C1));
    assert_eq!(status.deployed_revision, None, "nothing is deployed before the sync");
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(ready(status), None, "Ready is left alone while a rollout starts");

    let counts = "2 to create, 0 to update, 1 to delete, 1 unchanged";
    assert_eq!(
        d.events,
        vec![
            (EventReason::PlanCreated, format!("Revision {name} planned: {counts}")),
            (
                EventReason::DeploymentStarted,
                format!("applying Revision {name} (commit {C1}): {counts}")
            ),
            (
                EventReason::PruneSkipped,
                "kept 1 object(s) removed from desired state: Secret web/old-db".to_owned()
            ),
            (
                EventReason::PruneInventoryIncomplete,
                "service account deployer may not list Job.batch; objects of these kinds are not \
                 pruned"
                    .to_owned()
            ),
        ]
    );
}

#[test]
fn prune_events_go_out_only_when_prune_keeps_something_or_cannot_list_a_kind() {
    let kept = || vec![managed("v1", "ConfigMap", "settings"), managed("v1", "Secret", "old-db")];
    let pruned_only = || vec![managed("v1", "ConfigMap", "old")];
    let unlisted = || vec![GroupKind::new("batch", "Job"), GroupKind::new("", "Service")];
    // (live objects, unlisted kinds, expected Events)
    type Row = (Vec<ManagedObject>, Vec<GroupKind>, Vec<&'static str>);
    let rows: Vec<Row> = vec![
        (pruned_only(), vec![], vec!["PlanCreated", "DeploymentStarted"]),
        (kept(), vec![], vec!["PlanCreated", "DeploymentStarted", "PruneSkipped"]),
        (
            pruned_only(),
            unlisted(),
            vec!["PlanCreated", "DeploymentStarted", "PruneInventoryIncomplete"],
        ),
        (
            kept(),
            unlisted(),
            vec!["PlanCreated", "DeploymentStarted", "PruneSkipped", "PruneInventoryIncomplete"],
        ),
    ];
    for (n, (live, unlisted, expected)) in rows.into_iter().enumerate() {
        let state = web();
        let mut planned_state = planned_with(&state, absent, prune_for(&state, &live), None);
        planned_state.unlisted = unlisted;
        let d = decide(&automatic(), &planned(&planned_state), &Redactor::new(), &at(1));
        assert_eq!(reasons(&d.events), expected, "row {n}");
        assert_eq!(d.step, Step::Sync { prune: planned_state.prune.delete.clone() }, "row {n}");
        if let Some((_, message)) =
            d.events.iter().find(|(r, _)| *r == EventReason::PruneInventoryIncomplete)
        {
            assert_eq!(
                message,
                "service account deployer may not list Job.batch, Service; objects of these \
                 kinds are not pruned"
            );
        }
    }
}

#[test]
fn a_known_inventory_is_kept_and_still_written_before_the_sync() {
    let mut app = automatic();
    let known = vec![kind("apps/v1", "Deployment"), kind("v1", "ConfigMap"), kind("v1", "Secret")];
    app.status = Some(ApplicationStatus { managed_kinds: known.clone(), ..Default::default() });
    let state = web();
    let planned_state = planned_with(&state, absent, PrunePlan::default(), None);
    let d = decide(&app, &planned(&planned_state), &Redactor::new(), &at(1));
    let status = d.status.expect("written: it carries the sync state");
    assert_eq!(status.managed_kinds, known);
    assert_eq!(status.sync.state, SyncState::Applying);
    assert_eq!(d.step, Step::Sync { prune: vec![] });
}

// ---------------------------------------------------------------------------------------------
// decide: manual sync
// ---------------------------------------------------------------------------------------------

#[test]
fn manual_sync_plans_and_waits_for_approval_once() {
    let mut app = application(json!({"automatic": false, "prune": true}), 1);
    let state = web();
    let mut planned_state =
        planned_with(&state, absent, prune_for(&state, &live_before_first_sync()), None);
    let name = revision_name(APP, C1, &state.hash);
    let counts = "2 to create, 0 to update, 1 to delete, 1 unchanged";
    // (time, events, status written)
    type Row = (i64, Vec<(EventReason, String)>, bool);
    let rows: [Row; 3] = [
        (
            10,
            vec![
                (EventReason::PlanCreated, format!("Revision {name} planned: {counts}")),
                (
                    EventReason::ApprovalRequired,
                    format!("Revision {name} waits for approval: {counts}"),
                ),
            ],
            true,
        ),
        // The Revision exists and waits: no Event again, nothing new in the status.
        (20, vec![], false),
        (30, vec![], false),
    ];
    for (n, (now, events, written)) in rows.into_iter().enumerate() {
        let d = decide(&app, &planned(&planned_state), &Redactor::new(), &at(now));
        assert_eq!(d.events, events, "step {n}");
        assert_eq!(d.step, Step::Report, "step {n}");
        assert_eq!(d.status.is_some(), written, "step {n}");
        let revision = d.revision.clone().expect("the Revision waits");
        assert_eq!(revision.metadata.name.as_deref(), Some(name.as_str()));
        let rs = revision.status.as_ref().expect("status");
        assert_eq!(rs.phase, Some(RevisionPhase::AwaitingApproval), "step {n}");
        assert_eq!(rs.attempts, 0, "waiting is no attempt");
        assert_eq!(rs.started_at, None);
        assert_eq!(
            rs.plan.as_ref().map(|p| p.digest.as_str()),
            Some(planned_state.plan.digest.as_str())
        );
        let status = d.status.or(app.status.clone()).expect("status");
        assert_eq!(status.sync.state, SyncState::AwaitingApproval);
        assert_eq!(status.sync.last_transition_time, Some(at(10)));
        assert_eq!(status.managed_kinds, inventory(), "nothing is applied while waiting");
        assert_eq!(ready(&status), None, "Ready keeps its value while awaiting approval");
        app.status = Some(status);
        planned_state.revision = Some(revision);
    }
}

// ---------------------------------------------------------------------------------------------
// decide: conflicts
// ---------------------------------------------------------------------------------------------

#[test]
fn conflicts_fail_the_revision_under_fail_and_are_taken_over_under_adopt() {
    let state = web();
    let planned_state = planned_with(&state, conflicting, PrunePlan::default(), None);
    assert_eq!(planned_state.plan.conflicts.len(), 1, "{:?}", planned_state.plan.conflicts);
    let message = format!(
        "server-side apply conflicts with other field managers under conflictPolicy: fail: \
         ConfigMap web/settings: .data.a (held by \"{OTHER_MANAGER}\"); remove the fields from \
         the other manager, or set spec.sync.conflictPolicy: adopt to take them over"
    );

    // conflictPolicy: fail (the default).
    let app = application(json!({"automatic": true}), 1);
    let d = decide(&app, &planned(&planned_state), &Redactor::new(), &at(10));
    assert_eq!(d.step, Step::Report);
    assert_eq!(reasons(&d.events), vec!["PlanCreated", "ConflictFailure"]);
    assert_eq!(
        d.events[1],
        (EventReason::Failure(FailureReason::ConflictFailure), message.clone())
    );
    let rs = revision_status(&d);
    assert_eq!(rs.phase, Some(RevisionPhase::Failed));
    assert_eq!(rs.completed_at, Some(at(10)));
    assert_eq!(
        rs.failure,
        Some(Failure {
            reason: FailureReason::ConflictFailure,
            message: message.clone(),
            resource: Some(ResourceRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: "web".into(),
                name: "settings".into(),
            }),
            retryable: true,
        })
    );
    let status = d.status.as_ref().expect("written");
    let condition = ready(status).expect("Ready");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str(), condition.message.as_str()),
        ("False", "ConflictFailure", message.as_str())
    );
    assert_eq!(status.sync.state, SyncState::OutOfSync);
    assert_eq!(status.managed_kinds, inventory(), "nothing was applied");

    // conflictPolicy: adopt.
    let app = application(json!({"automatic": true, "conflictPolicy": "adopt"}), 1);
    let d = decide(&app, &planned(&planned_state), &Redactor::new(), &at(10));
    assert_eq!(d.step, Step::Sync { prune: vec![] });
    assert_eq!(reasons(&d.events), vec!["PlanCreated", "DeploymentStarted"]);
    let rs = revision_status(&d);
    assert_eq!(
        (rs.phase, rs.attempts, rs.failure.as_ref()),
        (Some(RevisionPhase::Applying), 1, None)
    );
    let status = d.status.as_ref().expect("written");
    assert_eq!(status.sync.state, SyncState::Applying);
    assert_eq!(ready(status), None);
}

// ---------------------------------------------------------------------------------------------
// decide: an applied Revision
// ---------------------------------------------------------------------------------------------

#[test]
fn an_applied_revision_is_in_sync_drifted_or_healed() {
    // The first sync, applied; the status as settle left it, and as decide left it (a crash
    // between the apply and the settled status write).
    let base = automatic();
    let (first, decision) = first_sync(&base);
    let done = SyncOutcome::Done { live_kinds: live_kinds_after_first_sync() };
    let settled = settle(&base, &decision, &first, &done, &Redactor::new(), &at(20));
    let applying = decision.status.clone().expect("written before the sync");

    #[derive(Clone, Copy, Debug)]
    enum Start {
        Applying,
        Settled,
    }
    // (phase, selfHeal, what the plan finds, starting status, step is a sync, sync state, status
    //  written, events)
    type Row = (
        RevisionPhase,
        bool,
        fn(&DesiredObject) -> Found,
        Start,
        bool,
        SyncState,
        bool,
        Vec<&'static str>,
    );
    let rows: Vec<Row> = vec![
        (
            RevisionPhase::Observing,
            false,
            unchanged,
            Start::Applying,
            false,
            SyncState::Synced,
            true,
            vec![],
        ),
        (
            RevisionPhase::Observing,
            false,
            unchanged,
            Start::Settled,
            false,
            SyncState::Synced,
            false,
            vec![],
        ),
        (
            RevisionPhase::Healthy,
            false,
            unchanged,
            Start::Settled,
            false,
            SyncState::Synced,
            false,
            vec![],
        ),
        (
            RevisionPhase::Observing,
            true,
            unchanged,
            Start::Settled,
            false,
            SyncState::Synced,
            false,
            vec![],
        ),
        (
            RevisionPhase::Observing,
            false,
            drifted,
            Start::Settled,
            false,
            SyncState::Drifted,
            true,
            vec![],
        ),
        (
            RevisionPhase::Healthy,
            false,
            drifted,
            Start::Settled,
            false,
            SyncState::Drifted,
            true,
            vec![],
        ),
        (
            RevisionPhase::Observing,
            true,
            drifted,
            Start::Settled,
            true,
            SyncState::Applying,
            true,
            // A repair is an attempt: the kept Secret is named again.
            vec!["DeploymentStarted", "PruneSkipped"],
        ),
    ];
    let state = web();
    // After the first sync: the old ConfigMap is gone, the Secret was kept.
    let live = vec![managed("v1", "ConfigMap", "settings"), managed("v1", "Secret", "old-db")];
    for (n, (phase, self_heal, found, start, syncs, sync_state, written, events)) in
        rows.into_iter().enumerate()
    {
        let mut app =
            application(json!({"automatic": true, "prune": true, "selfHeal": self_heal}), 1);
        let before = match start {
            Start::Applying => applying.clone(),
            Start::Settled => settled.status.clone(),
        };
        app.status = Some(before.clone());
        let mut revision_state = settled.revision.clone();
        revision_state.phase = Some(phase);
        let revision = stored(&decision, revision_state);
        let planned_state =
            planned_with(&state, found, prune_for(&state, &live), Some(revision.clone()));
        let d = decide(&app, &planned(&planned_state), &Redactor::new(), &at(30));
        let row = format!("row {n}: {phase:?} selfHeal={self_heal} {start:?}");
        assert_eq!(reasons(&d.events), events, "{row}");
        assert_eq!(d.status.is_some(), written, "{row}");
        let status = d.status.clone().unwrap_or(before.clone());
        assert_eq!(status.sync.state, sync_state, "{row}");
        assert_eq!(ready(&status), ready(&before), "{row}: Ready keeps its value");
        if syncs {
            assert_eq!(d.step, Step::Sync { prune: vec![] }, "{row}");
            let rs = revision_status(&d);
            assert_eq!((rs.phase, rs.attempts), (Some(RevisionPhase::Applying), 2), "{row}");
            assert_eq!(rs.started_at, Some(at(30)), "{row}");
        } else {
            assert_eq!(d.step, Step::Report, "{row}");
            assert!(d.revision.is_none(), "{row}: the applied Revision is not rewritten");
        }
        if sync_state == SyncState::Synced {
            assert_eq!(status.deployed_revision.as_deref(), Some(C1), "{row}");
            assert_eq!(status.deployed_revision_short.as_deref(), Some(&C1[..12]), "{row}");
        }
    }
}

#[test]
fn diagnosis_is_kept_while_drift_is_reported() {
    let base = automatic();
    let (first, decision) = first_sync(&base);
    let done = SyncOutcome::Done { live_kinds: live_kinds_after_first_sync() };
    let settled = settle(&base, &decision, &first, &done, &Redactor::new(), &at(20));
    let mut app = automatic();
    let mut status = settled.status.clone();
    status.diagnosis = vec![diagnosis()];
    app.status = Some(status);
    let state = web();
    let revision = stored(&decision, settled.revision.clone());
    let planned_state = planned_with(&state, drifted, PrunePlan::default(), Some(revision));
    let d = decide(&app, &planned(&planned_state), &Redactor::new(), &at(30));
    let status = d.status.expect("written");
    assert_eq!(status.sync.state, SyncState::Drifted);
    assert_eq!(status.diagnosis, vec![diagnosis()]);
}

fn diagnosis() -> Diagnosis {
    Diagnosis {
        resource: ResourceRef {
            api_version: "v1".into(),
            kind: "Secret".into(),
            namespace: "web".into(),
            name: "db".into(),
        },
        reason: "MissingSecret".into(),
        message: "Secret web/db does not exist".into(),
        chain: vec![],
    }
}

// ---------------------------------------------------------------------------------------------
// decide: a failed Revision
// ---------------------------------------------------------------------------------------------

#[test]
fn a_failed_revision_is_retried_only_after_a_spec_change_or_while_attempts_are_left() {
    let base = automatic();
    let (first, decision) = first_sync(&base);
    let outcome = SyncOutcome::Failed {
        reason: FailureReason::ApplyFailure,
        message: "admission webhook denied the request".into(),
        resource: Some(key("apps", "Deployment", "api")),
    };
    let settled = settle(&base, &decision, &first, &outcome, &Redactor::new(), &at(20));
    assert_eq!(settled.revision.attempts, 1);
    let condition = ready(&settled.status).expect("Ready");
    assert_eq!(condition.observed_generation, Some(1));

    // (generation, maxAttempts, failure retryable, expected attempt number or None for no write)
    let rows: [(i64, i32, bool, Option<i32>); 5] = [
        (1, 1, true, None),
        (2, 1, true, Some(2)),
        (1, 3, true, Some(2)),
        (1, 3, false, None),
        (2, 1, false, Some(2)),
    ];
    let state = web();
    // The apply failed before the prune: the old ConfigMap is still there.
    let live = live_before_first_sync();
    for (n, (generation, max_attempts, retryable, attempt)) in rows.into_iter().enumerate() {
        let mut app = application(json!({"automatic": true, "prune": true}), max_attempts);
        app.metadata.generation = Some(generation);
        app.status = Some(settled.status.clone());
        let mut revision_state = settled.revision.clone();
        if let Some(failure) = revision_state.failure.as_mut() {
            failure.retryable = retryable;
        }
        let revision = stored(&decision, revision_state);
        let planned_state =
            planned_with(&state, unchanged, prune_for(&state, &live), Some(revision));
        let d = decide(&app, &planned(&planned_state), &Redactor::new(), &at(30));
        let row = format!(
            "row {n}: generation {generation}, maxAttempts {max_attempts}, retryable {retryable}"
        );
        match attempt {
            None => {
                assert_eq!(d.step, Step::Report, "{row}");
                assert!(d.status.is_none(), "{row}: nothing written");
                assert!(d.revision.is_none(), "{row}: nothing written");
                assert!(d.events.is_empty(), "{row}");
            }
            Some(attempt) => {
                assert_eq!(
                    d.step,
                    Step::Sync { prune: vec![managed("v1", "ConfigMap", "old")] },
                    "{row}"
                );
                let rs = revision_status(&d);
                assert_eq!(rs.phase, Some(RevisionPhase::Applying), "{row}");
                assert_eq!(rs.attempts, attempt, "{row}");
                assert_eq!((rs.failure.as_ref(), rs.completed_at.as_ref()), (None, None), "{row}");
                assert_eq!(rs.started_at, Some(at(30)), "{row}");
                // A new attempt: PruneSkipped names the kept Secret again.
                assert_eq!(
                    reasons(&d.events),
                    vec!["DeploymentStarted", "PruneSkipped"],
                    "{row}: no PlanCreated for an existing Revision"
                );
                let status = d.status.as_ref().expect("written");
                assert_eq!(status.observed_generation, Some(generation), "{row}");
                assert_eq!(status.sync.state, SyncState::Applying, "{row}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// settle
// ---------------------------------------------------------------------------------------------

#[test]
fn a_done_sync_observes_the_revision_and_shrinks_the_inventory_to_what_is_live() {
    #[derive(Clone, Copy, Debug)]
    enum Prior {
        None,
        True,
        False,
    }
    // (Ready before, live kinds, Ready after (status, reason), its lastTransitionTime, inventory)
    type Row = (Prior, Vec<GroupKind>, (&'static str, &'static str), i64, Vec<ManagedKind>);
    let all = || vec![kind("apps/v1", "Deployment"), kind("v1", "ConfigMap"), kind("v1", "Secret")];
    let desired_only = || vec![kind("apps/v1", "Deployment"), kind("v1", "ConfigMap")];
    let rows: Vec<Row> = vec![
        (Prior::None, live_kinds_after_first_sync(), ("Unknown", "Progressing"), 20, all()),
        // The kept Secret was deleted by hand meanwhile: its kind leaves the inventory.
        (
            Prior::None,
            vec![GroupKind::new("", "ConfigMap"), GroupKind::new("apps", "Deployment")],
            ("Unknown", "Progressing"),
            20,
            desired_only(),
        ),
        // Desired kinds stay even before their objects are listed.
        (Prior::None, vec![], ("Unknown", "Progressing"), 20, desired_only()),
        (Prior::True, live_kinds_after_first_sync(), ("True", "Healthy"), 5, all()),
        (Prior::False, live_kinds_after_first_sync(), ("False", "Progressing"), 5, all()),
    ];
    for (n, (prior, live_kinds, (after, reason), since, kinds)) in rows.into_iter().enumerate() {
        let mut app = automatic();
        let mut status = app.status.clone().expect("status");
        match prior {
            Prior::None => {}
            Prior::True => set_ready(&mut status, Status::True, "Healthy", 5),
            Prior::False => set_ready(&mut status, Status::False, "ApplyFailure", 5),
        }
        app.status = Some(status);
        let (first, decision) = first_sync(&app);
        let outcome = SyncOutcome::Done { live_kinds };
        let settled = settle(&app, &decision, &first, &outcome, &Redactor::new(), &at(20));
        let row = format!("row {n}: {prior:?}");
        assert!(settled.events.is_empty(), "{row}");
        assert_eq!(settled.revision.phase, Some(RevisionPhase::Observing), "{row}");
        assert_eq!(settled.revision.attempts, 1, "{row}");
        assert_eq!(settled.revision.failure, None, "{row}");
        assert_eq!(settled.revision.started_at, Some(at(10)), "{row}");
        let status = &settled.status;
        assert_eq!(status.sync.state, SyncState::Synced, "{row}");
        assert_eq!(status.sync.last_transition_time, Some(at(20)), "{row}");
        assert_eq!(status.deployed_revision.as_deref(), Some(C1), "{row}");
        assert_eq!(status.deployed_revision_short.as_deref(), Some("0123456789ab"), "{row}");
        assert_eq!(status.managed_kinds, kinds, "{row}");
        let condition = ready(status).expect("Ready");
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            (after, reason),
            "{row}"
        );
        assert_eq!(condition.last_transition_time, at(since), "{row}");
        if reason == "Progressing" {
            assert_eq!(
                condition.message,
                format!("commit {C1} applied; waiting for its resources to become Healthy")
            );
        }
    }
}

#[test]
fn a_failed_sync_fails_the_revision_with_the_resource_and_a_redacted_message() {
    let app = automatic();
    let (first, decision) = first_sync(&app);
    let mut redactor = Redactor::new();
    redactor.add_secret(CANARY);
    let outcome = SyncOutcome::Failed {
        reason: FailureReason::ApplyFailure,
        message: format!("Deployment web/api: admission webhook denied: env DB_PASSWORD={CANARY}"),
        resource: Some(key("apps", "Deployment", "api")),
    };
    let settled = settle(&app, &decision, &first, &outcome, &redactor, &at(20));
    let masked = "Deployment web/api: admission webhook denied: env DB_PASSWORD=***";
    assert_eq!(settled.revision.phase, Some(RevisionPhase::Failed));
    assert_eq!(settled.revision.completed_at, Some(at(20)));
    assert_eq!(settled.revision.attempts, 1);
    assert_eq!(
        settled.revision.failure,
        Some(Failure {
            reason: FailureReason::ApplyFailure,
            message: masked.into(),
            resource: Some(ResourceRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: "web".into(),
                name: "api".into(),
            }),
            retryable: true,
        })
    );
    let condition = ready(&settled.status).expect("Ready");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str(), condition.message.as_str()),
        ("False", "ApplyFailure", masked)
    );
    assert_eq!(condition.observed_generation, Some(1));
    assert_eq!(
        settled.events,
        vec![(EventReason::Failure(FailureReason::ApplyFailure), masked.to_owned())]
    );
    for text in std::iter::once(&condition.message)
        .chain(settled.events.iter().map(|(_, m)| m))
        .chain(settled.revision.failure.iter().map(|f| &f.message))
    {
        assert!(!text.contains(CANARY), "{text}");
    }
    assert_eq!(settled.status.sync.state, SyncState::OutOfSync);
    assert_eq!(settled.status.deployed_revision, None);
    assert_eq!(
        settled.status.managed_kinds,
        vec![kind("apps/v1", "Deployment"), kind("v1", "ConfigMap"), kind("v1", "Secret")],
        "the inventory recorded before the apply stays: objects may have been created"
    );

    // A failure without a known resource names none.
    let outcome = SyncOutcome::Failed {
        reason: FailureReason::PruneFailure,
        message: "prune failed".into(),
        resource: None,
    };
    let settled = settle(&app, &decision, &first, &outcome, &redactor, &at(20));
    let failure = settled.revision.failure.expect("failure");
    assert_eq!(
        (failure.reason, failure.resource, failure.retryable),
        (FailureReason::PruneFailure, None, true)
    );
}

// ---------------------------------------------------------------------------------------------
// learn_secret_values
// ---------------------------------------------------------------------------------------------

#[test]
fn desired_secret_values_are_learnt_plain_and_base64() {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let plain = "canary-string-data-4d2f";
    let token = "canary-data-value-9a8b";
    let binary: &[u8] = &[0xff, 0xfe, 0x00, 0x01, 0x80, 0x7f];
    let state = desired(vec![
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
               "stringData": {"password": plain},
               "data": {"token": b64(token.as_bytes()), "blob": b64(binary)}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
               "data": {"note": "configmap-value-visible"}}),
    ]);
    let texts = [
        (format!("password {plain} rejected"), "password *** rejected"),
        (format!("password {} rejected", b64(plain.as_bytes())), "password *** rejected"),
        (format!("token {token} rejected"), "token *** rejected"),
        (format!("token {} rejected", b64(token.as_bytes())), "token *** rejected"),
        (format!("blob {} rejected", b64(binary)), "blob *** rejected"),
        ("note configmap-value-visible".to_owned(), "note configmap-value-visible"),
    ];
    let mut redactor = Redactor::new();
    for (text, _) in &texts {
        assert_eq!(&redactor.redact(text), text, "nothing is known before learning");
    }
    learn_secret_values(&mut redactor, &state);
    for (text, expected) in &texts {
        assert_eq!(redactor.redact(text), *expected, "{text}");
    }
}

// ---------------------------------------------------------------------------------------------
// Bugs the first version of application.rs had
// ---------------------------------------------------------------------------------------------

#[test]
fn a_persisting_conflict_is_not_rewritten_on_every_reconcile() {
    let mut app = application(json!({"automatic": true}), 1);
    let state = web();
    let mut planned_state = planned_with(&state, conflicting, PrunePlan::default(), None);
    let first = decide(&app, &planned(&planned_state), &Redactor::new(), &at(10));
    assert_eq!(revision_status(&first).phase, Some(RevisionPhase::Failed));
    app.status = first.status.clone();
    planned_state.revision = first.revision.clone();
    // The other manager still holds the field: the same conflict, nothing new to write.
    let again = decide(&app, &planned(&planned_state), &Redactor::new(), &at(20));
    assert_eq!(again.step, Step::Report);
    assert!(again.events.is_empty(), "{:?}", again.events);
    assert!(again.status.is_none());
    assert!(
        again.revision.is_none(),
        "the Failed Revision is rewritten: {:?}",
        again.revision.and_then(|r| r.status).map(|s| (s.attempts, s.completed_at))
    );
    assert_eq!(revision_status(&first).attempts, 1, "the conflicting attempt counts");
}

#[test]
fn a_failure_resource_takes_the_api_version_of_its_own_group() {
    let state = desired(vec![
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}),
        json!({"apiVersion": "serving.knative.dev/v1", "kind": "Service",
               "metadata": {"name": "web"}}),
    ]);
    let app = automatic();
    let planned_state = planned_with(&state, absent, PrunePlan::default(), None);
    let decision = decide(&app, &planned(&planned_state), &Redactor::new(), &at(10));
    for (group, api_version) in [("", "v1"), ("serving.knative.dev", "serving.knative.dev/v1")] {
        let outcome = SyncOutcome::Failed {
            reason: FailureReason::ApplyFailure,
            message: "refused".into(),
            resource: Some(key(group, "Service", "web")),
        };
        let settled = settle(&app, &decision, &planned_state, &outcome, &Redactor::new(), &at(20));
        let resource = settled.revision.failure.and_then(|f| f.resource).expect("a resource");
        assert_eq!(resource.api_version, api_version, "{group}");
    }
}

#[test]
fn every_event_message_is_bounded() {
    let state = web();
    let mut planned_state = planned_with(&state, absent, PrunePlan::default(), None);
    planned_state.unlisted = (0..80)
        .map(|n| GroupKind::new("monitoring.example-platform.io", &format!("ServiceMonitor{n}")))
        .collect();
    let d = decide(&automatic(), &planned(&planned_state), &Redactor::new(), &at(1));
    assert_eq!(
        reasons(&d.events),
        vec!["PlanCreated", "DeploymentStarted", "PruneInventoryIncomplete"]
    );
    for (reason, message) in &d.events {
        assert!(
            message.chars().count() <= MAX_MESSAGE,
            "{}: {} characters",
            reason.as_str(),
            message.chars().count()
        );
    }
}

#[test]
fn a_spec_change_after_the_failure_allows_a_retry_even_after_a_failure_before_the_plan() {
    let base = automatic();
    let (first, decision) = first_sync(&base);
    let outcome = SyncOutcome::Failed {
        reason: FailureReason::Forbidden,
        message: "deployer may not patch deployments".into(),
        resource: Some(key("apps", "Deployment", "api")),
    };
    let settled = settle(&base, &decision, &first, &outcome, &Redactor::new(), &at(20));
    // The user fixes the spec (generation 2); the next reconcile hits a transient source failure.
    let mut app = automatic();
    app.metadata.generation = Some(2);
    app.status = Some(settled.status.clone());
    let transient = decide(
        &app,
        &failed(FailureReason::SourceFailure, "connection reset", None, None),
        &Redactor::new(),
        &at(30),
    );
    app.status = transient.status.clone();
    // The source is back: the same desired state, its Revision failed before the spec changed.
    let state = web();
    let revision = stored(&decision, settled.revision.clone());
    let planned_state = planned_with(&state, unchanged, PrunePlan::default(), Some(revision));
    let d = decide(&app, &planned(&planned_state), &Redactor::new(), &at(40));
    assert_eq!(d.step, Step::Sync { prune: vec![] });
    assert_eq!(revision_status(&d).attempts, 2);
}

#[test]
fn diagnosis_is_cleared_when_a_reconcile_fails_before_health_is_observed() {
    let with_diagnosis = || {
        let mut app = automatic();
        if let Some(status) = app.status.as_mut() {
            status.diagnosis = vec![diagnosis()];
        }
        app
    };
    // A failure before the plan.
    let d = decide(
        &with_diagnosis(),
        &failed(FailureReason::SourceFailure, "down", None, None),
        &Redactor::new(),
        &at(1),
    );
    assert_eq!(d.status.expect("written").diagnosis, vec![], "SourceFailure");
    // A conflict.
    let planned_state = planned_with(&web(), conflicting, PrunePlan::default(), None);
    let d = decide(&with_diagnosis(), &planned(&planned_state), &Redactor::new(), &at(1));
    assert_eq!(d.status.expect("written").diagnosis, vec![], "ConflictFailure");
    // An apply failure.
    let app = with_diagnosis();
    let (first, decision) = first_sync(&app);
    let outcome = SyncOutcome::Failed {
        reason: FailureReason::ApplyFailure,
        message: "refused".into(),
        resource: None,
    };
    let settled = settle(&app, &decision, &first, &outcome, &Redactor::new(), &at(20));
    assert_eq!(settled.status.diagnosis, vec![], "ApplyFailure");
}
