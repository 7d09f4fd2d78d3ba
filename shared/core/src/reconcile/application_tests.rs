use super::*;

use std::collections::BTreeSet;

use base64::Engine as _;
use k8s_openapi::jiff::Timestamp;
use kuvryn_sync_api::{ApplicationSpec, Approval, Diagnosis, ManagedKind, ResourceCounts};
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
        health: Vec::new(),
        chart_digest: None,
        diagnosis: Vec::new(),
        rollback: None,
        fallback: None,
        live_kinds: None,
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
        failure: StepFailure::new(reason, message),
        service_account: service_account.map(str::to_owned),
        commit: commit.map(str::to_owned),
    }
}

/// `app`'s first sync of [`web`] at time 10, everything absent: the Planned and the Decision.
fn first_sync(app: &Application) -> (Planned, Decision) {
    let state = web();
    let prune = prune_for(&state, &live_before_first_sync());
    let planned_state = planned_with(&state, absent, prune, None);
    let decision = decide_rollout(app, &planned(&planned_state), &Redactor::new(), &at(10));
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

/// The Ready condition an Application had before a reconcile.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Prior {
    /// None yet.
    None,
    /// True/Healthy since 5, computed for generation 1.
    True,
    /// False/ApplyFailure since 5, computed for generation 1.
    False,
}

fn with_prior(status: &mut ApplicationStatus, prior: Prior) {
    match prior {
        Prior::None => {}
        Prior::True => set_ready(status, Status::True, "Healthy", 5),
        Prior::False => set_ready(status, Status::False, "ApplyFailure", 5),
    }
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
        let d = decide_rollout(&app, &observation, &redactor, &at(100 + n as i64));
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
        Observation::Failed { failure, .. } => failure.reason,
        Observation::Planned(_) | Observation::Planning { .. } => panic!("not a failure"),
    }
}

#[test]
fn long_failure_messages_are_truncated() {
    let message = "x".repeat(5000);
    let d = decide_rollout(
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
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(10));

    assert_eq!(d.step, Step::Sync { prune: vec![managed("v1", "ConfigMap", "old")] });
    assert_eq!(d.requeue_after, Some(rollout::OBSERVE_EVERY), "the rollout is observed next");

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
    let rollout = conditions::get(&rs.conditions, ConditionType::RolloutComplete).expect("one");
    assert_eq!(
        (
            rollout.status.as_str(),
            rollout.reason.as_str(),
            rollout.message.as_str(),
            &rollout.last_transition_time
        ),
        ("False", "RollingOut", "applying the Revision's groups", &at(10))
    );
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
        let d = decide_rollout(&automatic(), &planned(&planned_state), &Redactor::new(), &at(1));
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
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(1));
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
    let digest = planned_state.plan.digest.clone();
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
                    format!("Revision {name} waits for approval (plan digest {digest}): {counts}"),
                ),
            ],
            true,
        ),
        // The Revision exists and waits: no Event again, nothing new in the status.
        (20, vec![], false),
        (30, vec![], false),
    ];
    for (n, (now, events, written)) in rows.into_iter().enumerate() {
        let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(now));
        assert_eq!(d.events, events, "step {n}");
        assert_eq!(d.step, Step::Report, "step {n}");
        assert_eq!(d.status.is_some(), written, "step {n}");
        assert_eq!(d.requeue_after, None, "step {n}: an approval triggers the next reconcile");
        let revision = d.revision.clone().expect("the Revision waits");
        assert_eq!(revision.metadata.name.as_deref(), Some(name.as_str()));
        let rs = revision.status.as_ref().expect("status");
        assert_eq!(rs.phase, Some(RevisionPhase::AwaitingApproval), "step {n}");
        assert_eq!(rs.attempts, 0, "waiting is no attempt");
        assert_eq!(rs.started_at, None);
        assert_eq!(rs.approval, None, "step {n}");
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
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(10));
    assert_eq!(d.step, Step::Report);
    assert_eq!(d.requeue_after, Some(rollout::FIRST_BACKOFF), "look again after the backoff");
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
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(10));
    assert_eq!(d.step, Step::Sync { prune: vec![] });
    assert_eq!(d.requeue_after, Some(rollout::OBSERVE_EVERY));
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
    use HealthState::{Healthy, Progressing};
    // The first sync, applied; the status as decide left it (a crash between the apply and the
    // settled status write), as settle left it, and once the rollout completed and a later
    // reconcile found it still Healthy.
    let base = automatic();
    let (decision, settled) = applied(&base);
    let applying = decision.status.clone().expect("written before the sync");
    let (completed, watched) = completed_and_watched(&decision, &settled);

    #[derive(Clone, Copy, Debug)]
    enum Start {
        Applying,
        Settled,
        Watched,
    }
    // (phase, selfHeal, what the plan finds, starting status, health of the Deployment, step is a
    //  sync, sync state, status written, events, phase of the rewritten Revision (None: not
    //  rewritten), requeue after)
    type Row = (
        RevisionPhase,
        bool,
        fn(&DesiredObject) -> Found,
        Start,
        HealthState,
        bool,
        SyncState,
        bool,
        Vec<&'static str>,
        Option<RevisionPhase>,
        Option<u64>,
    );
    use RevisionPhase::{Applying, Healthy as Done, Observing};
    let rows: Vec<Row> = vec![
        // In sync, still Progressing: the Revision records the health counts, Ready waits.
        (
            Observing,
            false,
            unchanged,
            Start::Applying,
            Progressing,
            false,
            SyncState::Synced,
            true,
            vec![],
            Some(Observing),
            Some(5),
        ),
        (
            Observing,
            false,
            unchanged,
            Start::Settled,
            Progressing,
            false,
            SyncState::Synced,
            true,
            vec![],
            Some(Observing),
            Some(5),
        ),
        (
            Observing,
            true,
            unchanged,
            Start::Settled,
            Progressing,
            false,
            SyncState::Synced,
            true,
            vec![],
            Some(Observing),
            Some(5),
        ),
        // In sync and Healthy: the rollout completes.
        (
            Observing,
            false,
            unchanged,
            Start::Settled,
            Healthy,
            false,
            SyncState::Synced,
            true,
            vec!["DeploymentHealthy"],
            Some(Done),
            None,
        ),
        // Completed and still Healthy: nothing to write.
        (
            Done,
            false,
            unchanged,
            Start::Watched,
            Healthy,
            false,
            SyncState::Synced,
            false,
            vec![],
            None,
            None,
        ),
        (
            Done,
            true,
            unchanged,
            Start::Watched,
            Healthy,
            false,
            SyncState::Synced,
            false,
            vec![],
            None,
            None,
        ),
        // Drift without selfHeal: reported only.
        (
            Observing,
            false,
            drifted,
            Start::Settled,
            Progressing,
            false,
            SyncState::Drifted,
            true,
            vec![],
            None,
            None,
        ),
        (
            Done,
            false,
            drifted,
            Start::Watched,
            Healthy,
            false,
            SyncState::Drifted,
            true,
            vec![],
            None,
            None,
        ),
        // Drift with selfHeal: repaired, a new attempt that names the kept Secret again.
        (
            Observing,
            true,
            drifted,
            Start::Settled,
            Progressing,
            true,
            SyncState::Applying,
            true,
            vec!["DeploymentStarted", "PruneSkipped"],
            Some(Applying),
            Some(5),
        ),
        (
            Done,
            true,
            drifted,
            Start::Watched,
            Healthy,
            true,
            SyncState::Applying,
            true,
            vec!["DeploymentStarted", "PruneSkipped"],
            Some(Applying),
            Some(5),
        ),
    ];
    let state = web();
    // After the first sync: the old ConfigMap is gone, the Secret was kept.
    let live = vec![managed("v1", "ConfigMap", "settings"), managed("v1", "Secret", "old-db")];
    for (
        n,
        (
            phase,
            self_heal,
            found,
            start,
            api,
            syncs,
            sync_state,
            written,
            events,
            rewritten,
            requeue,
        ),
    ) in rows.into_iter().enumerate()
    {
        let mut app =
            application(json!({"automatic": true, "prune": true, "selfHeal": self_heal}), 1);
        let before = match start {
            Start::Applying => applying.clone(),
            Start::Settled => settled.status.clone(),
            Start::Watched => watched.clone(),
        };
        app.status = Some(before.clone());
        let revision_state = match phase {
            RevisionPhase::Healthy => completed.status.clone().expect("completed"),
            _ => settled.revision.clone(),
        };
        assert_eq!(revision_state.phase, Some(phase));
        let revision = stored(&decision, revision_state);
        let mut planned_state =
            planned_with(&state, found, prune_for(&state, &live), Some(revision.clone()));
        planned_state.health = web_health(Healthy, api);
        let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(50));
        let row = format!("row {n}: {phase:?} selfHeal={self_heal} {start:?} {api:?}");
        assert_eq!(reasons(&d.events), events, "{row}");
        assert_eq!(d.status.is_some(), written, "{row}");
        assert_eq!(d.requeue_after, requeue.map(Duration::from_secs), "{row}");
        let status = d.status.clone().unwrap_or(before.clone());
        assert_eq!(status.sync.state, sync_state, "{row}");
        if rewritten == Some(RevisionPhase::Healthy) {
            let condition = ready(&status).expect("Ready");
            assert_eq!(
                (condition.status.as_str(), condition.reason.as_str()),
                ("True", "Healthy"),
                "{row}: the rollout completed"
            );
        } else {
            assert_eq!(ready(&status), ready(&before), "{row}: Ready keeps its value");
        }
        assert_eq!(
            d.revision.as_ref().and_then(|r| r.status.as_ref()).and_then(|s| s.phase),
            rewritten,
            "{row}"
        );
        if syncs {
            assert_eq!(d.step, Step::Sync { prune: vec![] }, "{row}");
            let rs = revision_status(&d);
            assert_eq!(rs.attempts, 2, "{row}");
            assert_eq!(rs.started_at, Some(at(50)), "{row}: a repair gets its own deadline");
            assert_eq!((rs.completed_at.as_ref(), rs.failure.as_ref()), (None, None), "{row}");
        } else {
            assert_eq!(d.step, Step::Report, "{row}");
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
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(30));
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

/// What a reconcile does with a failed Revision.
#[derive(Clone, Copy, Debug)]
enum Next {
    /// Nothing written; look again after this many seconds.
    Waits(u64),
    /// A new attempt with this number.
    Attempt(i32),
    /// Ready=False/RetryBlocked, once.
    Blocked,
    /// Nothing written, nothing to look at again.
    Nothing,
}

/// How Ready reports the Revision's failure.
#[derive(Clone, Copy, Debug)]
enum Reported {
    /// False/ApplyFailure, as settle left it (since 20, generation 1).
    Failure,
    /// False/RetryBlocked (generation 1): retries stopped already.
    Blocked,
}

#[test]
fn a_failed_revision_is_retried_only_after_a_spec_change_or_while_attempts_are_left() {
    let base = automatic();
    let (first, decision) = first_sync(&base);
    let outcome = SyncOutcome::Failed(StepFailure {
        reason: FailureReason::ApplyFailure,
        message: "admission webhook denied the request".into(),
        resource: Some(Box::new(key("apps", "Deployment", "api"))),
    });
    let settled = settle(&base, &decision, &first, &outcome, &Redactor::new(), &at(20));
    assert_eq!(settled.revision.attempts, 1);
    assert_eq!(settled.revision.completed_at, Some(at(20)));
    let condition = ready(&settled.status).expect("Ready");
    assert_eq!(condition.observed_generation, Some(1));

    // Backoffs after attempt 1, 2, 3, 30: 10 s, 20 s, 40 s, 300 s; the failure completed at 20.
    // (generation, maxAttempts, failure retryable, attempts so far, Ready, now, next,
    //  a rollback from the Revision abandoned)
    type Row = (i64, i32, bool, i32, Reported, i64, Next, bool);
    use Reported::Failure as F;
    let rows: Vec<Row> = vec![
        // Attempts used up: RetryBlocked once the backoff is over, not before.
        (1, 1, true, 1, F, 21, Next::Waits(9), false),
        (1, 1, true, 1, F, 29, Next::Waits(1), false),
        (1, 1, true, 1, F, 30, Next::Blocked, false),
        (1, 1, true, 1, F, 500, Next::Blocked, false),
        // Attempts left: retried after the backoff, which doubles per attempt.
        (1, 3, true, 1, F, 25, Next::Waits(5), false),
        (1, 3, true, 1, F, 30, Next::Attempt(2), false),
        (1, 3, true, 2, F, 30, Next::Waits(10), false),
        (1, 3, true, 2, F, 39, Next::Waits(1), false),
        (1, 3, true, 2, F, 40, Next::Attempt(3), false),
        (1, 3, true, 3, F, 59, Next::Waits(1), false),
        (1, 3, true, 3, F, 60, Next::Blocked, false),
        (1, 100, true, 30, F, 319, Next::Waits(1), false),
        (1, 100, true, 30, F, 320, Next::Attempt(31), false),
        // A failure retrying cannot fix: left as it is.
        (1, 3, false, 1, F, 30, Next::Nothing, false),
        (1, 3, false, 1, F, 5000, Next::Nothing, false),
        // The spec changed since the failure was reported: at once, whatever the backoff, the
        // attempts and the failure.
        (2, 1, true, 1, F, 21, Next::Attempt(2), false),
        (2, 1, true, 1, F, 30, Next::Attempt(2), false),
        (2, 3, true, 1, F, 21, Next::Attempt(2), false),
        (2, 1, false, 1, F, 30, Next::Attempt(2), false),
        // Retries already blocked: nothing more, until the spec changes.
        (1, 1, true, 1, Reported::Blocked, 30, Next::Nothing, false),
        (1, 1, true, 1, Reported::Blocked, 5000, Next::Nothing, false),
        (2, 1, true, 1, Reported::Blocked, 21, Next::Attempt(2), false),
        // A rollback from this Revision was abandoned: its retries go on like any other's and
        // end in RetryBlocked.
        (1, 1, true, 1, F, 30, Next::Blocked, true),
        (1, 3, true, 1, F, 30, Next::Attempt(2), true),
        (1, 3, true, 3, F, 60, Next::Blocked, true),
        (1, 1, true, 1, Reported::Blocked, 500, Next::Nothing, true),
    ];
    let state = web();
    // The apply failed before the prune: the old ConfigMap is still there.
    let live = live_before_first_sync();
    for (n, (generation, max_attempts, retryable, attempts, reported, now, next, abandoned)) in
        rows.into_iter().enumerate()
    {
        let mut app = application(json!({"automatic": true, "prune": true}), max_attempts);
        app.metadata.generation = Some(generation);
        let mut before = settled.status.clone();
        if let Reported::Blocked = reported {
            set_ready(&mut before, Status::False, "RetryBlocked", 30);
        }
        app.status = Some(before.clone());
        let mut revision_state = settled.revision.clone();
        revision_state.attempts = attempts;
        if let Some(failure) = revision_state.failure.as_mut() {
            failure.retryable = retryable;
        }
        let mut revision = stored(&decision, revision_state);
        if abandoned {
            let annotations = revision.metadata.annotations.get_or_insert_with(Default::default);
            annotations.insert(rollback::ABANDONED.to_owned(), "rollback-1".to_owned());
        }
        let planned_state =
            planned_with(&state, unchanged, prune_for(&state, &live), Some(revision));
        let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(now));
        let row = format!(
            "row {n}: generation {generation}, maxAttempts {max_attempts}, retryable {retryable}, \
             attempts {attempts}, {reported:?}, at {now}, abandoned {abandoned}"
        );
        match next {
            Next::Waits(_) | Next::Nothing => {
                let wait = match next {
                    Next::Waits(seconds) => Some(Duration::from_secs(seconds)),
                    _ => None,
                };
                assert_eq!(d.requeue_after, wait, "{row}");
                assert_eq!(d.step, Step::Report, "{row}");
                assert!(d.status.is_none(), "{row}: nothing written");
                assert!(d.revision.is_none(), "{row}: nothing written");
                assert!(d.events.is_empty(), "{row}");
            }
            Next::Blocked => {
                assert_eq!(d.step, Step::Report, "{row}");
                assert_eq!(d.requeue_after, None, "{row}");
                assert!(d.revision.is_none(), "{row}: the Failed Revision is left as it is");
                let status = d.status.as_ref().expect("written");
                let condition = ready(status).expect("Ready");
                assert_eq!(
                    (condition.status.as_str(), condition.reason.as_str()),
                    ("False", "RetryBlocked"),
                    "{row}"
                );
                assert_eq!(
                    squeezed(&condition.message),
                    format!(
                        "retries stopped after {attempts} attempt(s) \
                         (spec.strategy.failurePolicy.maxAttempts); last failure: ApplyFailure: \
                         admission webhook denied the request"
                    ),
                    "{row}: the message keeps the last failure"
                );
                assert_eq!(condition.last_transition_time, at(20), "{row}: False since 20");
                assert_eq!(condition.observed_generation, Some(generation), "{row}");
                assert_eq!(
                    d.events,
                    vec![(
                        EventReason::Failure(FailureReason::RetryBlocked),
                        condition.message.clone()
                    )],
                    "{row}"
                );
                assert_eq!(status.sync.state, SyncState::OutOfSync, "{row}");
            }
            Next::Attempt(attempt) => {
                assert_eq!(
                    d.step,
                    Step::Sync { prune: vec![managed("v1", "ConfigMap", "old")] },
                    "{row}"
                );
                assert_eq!(d.requeue_after, Some(rollout::OBSERVE_EVERY), "{row}");
                let rs = revision_status(&d);
                assert_eq!(rs.phase, Some(RevisionPhase::Applying), "{row}");
                assert_eq!(rs.attempts, attempt, "{row}");
                assert_eq!((rs.failure.as_ref(), rs.completed_at.as_ref()), (None, None), "{row}");
                assert_eq!(rs.started_at, Some(at(now)), "{row}");
                // A new attempt: PruneSkipped names the kept Secret again.
                assert_eq!(
                    reasons(&d.events),
                    vec!["DeploymentStarted", "PruneSkipped"],
                    "{row}: no PlanCreated for an existing Revision"
                );
                let status = d.status.as_ref().expect("written");
                assert_eq!(status.observed_generation, Some(generation), "{row}");
                assert_eq!(status.sync.state, SyncState::Applying, "{row}");
                assert_eq!(ready(status), ready(&before), "{row}: Ready keeps its value");
            }
        }
    }
}

/// `text` with every run of white space made one space: the RetryBlocked and ApprovalStale
/// messages carry a run of spaces (see the ignored
/// `retry_blocked_and_approval_stale_messages_have_single_spaces`).
fn squeezed(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

// ---------------------------------------------------------------------------------------------
// settle
// ---------------------------------------------------------------------------------------------

#[test]
fn a_done_sync_observes_the_revision_and_shrinks_the_inventory_to_what_is_live() {
    // (Ready before, live kinds, inventory). Ready keeps its value, with no transition, while the
    // rollout progresses: health decides it on a later reconcile.
    type Row = (Prior, Vec<GroupKind>, Vec<ManagedKind>);
    let all = || vec![kind("apps/v1", "Deployment"), kind("v1", "ConfigMap"), kind("v1", "Secret")];
    let desired_only = || vec![kind("apps/v1", "Deployment"), kind("v1", "ConfigMap")];
    let rows: Vec<Row> = vec![
        (Prior::None, live_kinds_after_first_sync(), all()),
        // The kept Secret was deleted by hand meanwhile: its kind leaves the inventory.
        (
            Prior::None,
            vec![GroupKind::new("", "ConfigMap"), GroupKind::new("apps", "Deployment")],
            desired_only(),
        ),
        // Desired kinds stay even before their objects are listed.
        (Prior::None, vec![], desired_only()),
        (Prior::True, live_kinds_after_first_sync(), all()),
        (Prior::False, live_kinds_after_first_sync(), all()),
    ];
    for (n, (prior, live_kinds, kinds)) in rows.into_iter().enumerate() {
        let mut app = automatic();
        let mut status = app.status.clone().expect("status");
        with_prior(&mut status, prior);
        app.status = Some(status.clone());
        let (first, decision) = first_sync(&app);
        let outcome = SyncOutcome::Done { live_kinds };
        let settled = settle(&app, &decision, &first, &outcome, &Redactor::new(), &at(20));
        let row = format!("row {n}: {prior:?}");
        assert!(settled.events.is_empty(), "{row}");
        assert_eq!(settled.revision.phase, Some(RevisionPhase::Observing), "{row}");
        assert_eq!(settled.revision.attempts, 1, "{row}");
        assert_eq!(settled.revision.failure, None, "{row}");
        assert_eq!(settled.revision.started_at, Some(at(10)), "{row}");
        assert_eq!(settled.revision.completed_at, None, "{row}: observed, not complete");
        let status = &settled.status;
        assert_eq!(status.sync.state, SyncState::Synced, "{row}");
        assert_eq!(status.sync.last_transition_time, Some(at(20)), "{row}");
        assert_eq!(status.deployed_revision.as_deref(), Some(C1), "{row}");
        assert_eq!(status.deployed_revision_short.as_deref(), Some("0123456789ab"), "{row}");
        assert_eq!(status.managed_kinds, kinds, "{row}");
        assert_eq!(ready(status), ready(&status_before(&app)), "{row}: Ready keeps its value");
        if prior != Prior::None {
            let condition = ready(status).expect("Ready");
            assert_eq!(condition.last_transition_time, at(5), "{row}: no transition");
            assert_eq!(condition.observed_generation, Some(1), "{row}");
        }
    }
}

fn status_before(app: &Application) -> ApplicationStatus {
    app.status.clone().expect("a status")
}

#[test]
fn a_failed_sync_fails_the_revision_with_the_resource_and_a_redacted_message() {
    let app = automatic();
    let (first, decision) = first_sync(&app);
    let mut redactor = Redactor::new();
    redactor.add_secret(CANARY);
    let outcome = SyncOutcome::Failed(StepFailure {
        reason: FailureReason::ApplyFailure,
        message: format!("Deployment web/api: admission webhook denied: env DB_PASSWORD={CANARY}"),
        resource: Some(Box::new(key("apps", "Deployment", "api"))),
    });
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
    let outcome = SyncOutcome::Failed(StepFailure {
        reason: FailureReason::PruneFailure,
        message: "prune failed".into(),
        resource: None,
    });
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
    let first = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(10));
    assert_eq!(revision_status(&first).phase, Some(RevisionPhase::Failed));
    assert_eq!(first.requeue_after, Some(rollout::backoff(1)));
    app.status = first.status.clone();
    planned_state.revision = first.revision.clone();
    // The other manager still holds the field: the same conflict, nothing new to write while the
    // backoff runs.
    let again = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(15));
    assert_eq!(again.step, Step::Report);
    assert!(again.events.is_empty(), "{:?}", again.events);
    assert!(again.status.is_none());
    assert!(
        again.revision.is_none(),
        "the Failed Revision is rewritten: {:?}",
        again.revision.and_then(|r| r.status).map(|s| (s.attempts, s.completed_at))
    );
    assert_eq!(again.requeue_after, Some(Duration::from_secs(5)));
    assert_eq!(revision_status(&first).attempts, 1, "the conflicting attempt counts");
    // The backoff is over and the one attempt is used: retries stop, once.
    let blocked = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(20));
    assert_eq!(blocked.step, Step::Report);
    assert!(blocked.revision.is_none(), "the Failed Revision is not rewritten");
    assert_eq!(reasons(&blocked.events), vec!["RetryBlocked"]);
    let status = blocked.status.clone().expect("written");
    let condition = ready(&status).expect("Ready");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str(), &condition.last_transition_time),
        ("False", "RetryBlocked", &at(10))
    );
    assert_eq!(
        squeezed(&condition.message),
        format!(
            "retries stopped after 1 attempt(s) (spec.strategy.failurePolicy.maxAttempts); last \
             failure: ConflictFailure: {}",
            revision_status(&first).failure.as_ref().expect("a failure").message
        )
    );
    assert_eq!(blocked.events[0].1, condition.message);
    app.status = Some(status);
    for now in [30, 600] {
        let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(now));
        assert_eq!(d.step, Step::Report, "at {now}");
        assert!(d.events.is_empty(), "at {now}: {:?}", d.events);
        assert!(d.status.is_none(), "at {now}");
        assert!(d.revision.is_none(), "at {now}");
        assert_eq!(d.requeue_after, None, "at {now}");
    }
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
    let decision = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(10));
    for (group, api_version) in [("", "v1"), ("serving.knative.dev", "serving.knative.dev/v1")] {
        let outcome = SyncOutcome::Failed(StepFailure {
            reason: FailureReason::ApplyFailure,
            message: "refused".into(),
            resource: Some(Box::new(key(group, "Service", "web"))),
        });
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
    let d = decide_rollout(&automatic(), &planned(&planned_state), &Redactor::new(), &at(1));
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
    let outcome = SyncOutcome::Failed(StepFailure {
        reason: FailureReason::Forbidden,
        message: "deployer may not patch deployments".into(),
        resource: Some(Box::new(key("apps", "Deployment", "api"))),
    });
    let settled = settle(&base, &decision, &first, &outcome, &Redactor::new(), &at(20));
    // The user fixes the spec (generation 2); the next reconcile hits a transient source failure.
    let mut app = automatic();
    app.metadata.generation = Some(2);
    app.status = Some(settled.status.clone());
    let transient = decide_rollout(
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
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(40));
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
    let d = decide_rollout(
        &with_diagnosis(),
        &failed(FailureReason::SourceFailure, "down", None, None),
        &Redactor::new(),
        &at(1),
    );
    assert_eq!(d.status.expect("written").diagnosis, vec![], "SourceFailure");
    // A conflict.
    let planned_state = planned_with(&web(), conflicting, PrunePlan::default(), None);
    let d = decide_rollout(&with_diagnosis(), &planned(&planned_state), &Redactor::new(), &at(1));
    assert_eq!(d.status.expect("written").diagnosis, vec![], "ConflictFailure");
    // An apply failure.
    let app = with_diagnosis();
    let (first, decision) = first_sync(&app);
    let outcome = SyncOutcome::Failed(StepFailure {
        reason: FailureReason::ApplyFailure,
        message: "refused".into(),
        resource: None,
    });
    let settled = settle(&app, &decision, &first, &outcome, &Redactor::new(), &at(20));
    assert_eq!(settled.status.diagnosis, vec![], "ApplyFailure");
}

// ---------------------------------------------------------------------------------------------
// The rollout lifecycle: observing an attempt's health
// ---------------------------------------------------------------------------------------------

fn object_health(group: &str, kind: &str, name: &str, state: HealthState) -> ObjectHealth {
    let api_version = if group.is_empty() { "v1".to_owned() } else { format!("{group}/v1") };
    ObjectHealth {
        key: key(group, kind, name),
        api_version,
        state,
        message: format!("{name} reports {}", state.as_str()),
    }
}

/// The health of [`web`]'s ConfigMap web/settings and Deployment web/api.
fn web_health(settings: HealthState, api: HealthState) -> Vec<ObjectHealth> {
    vec![
        object_health("", "ConfigMap", "settings", settings),
        object_health("apps", "Deployment", "api", api),
    ]
}

/// [`web_health`] of two states, or no health at all.
fn health_of(states: &[HealthState]) -> Vec<ObjectHealth> {
    match states {
        [settings, api] => web_health(*settings, *api),
        [] => vec![],
        _ => panic!("two states or none: {states:?}"),
    }
}

fn resource(api_version: &str, kind: &str, name: &str) -> ResourceRef {
    ResourceRef {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: DESTINATION.into(),
        name: name.into(),
    }
}

fn counts_of(healthy: i64, progressing: i64, degraded: i64, unknown: i64) -> ResourceCounts {
    ResourceCounts { healthy, progressing, degraded, unknown }
}

/// `app`'s first sync of [`web`]: decided at 10 (the attempt starts then), applied and settled
/// at 20.
fn applied(app: &Application) -> (Decision, Settled) {
    let (first, decision) = first_sync(app);
    let done = SyncOutcome::Done { live_kinds: live_kinds_after_first_sync() };
    let settled = settle(app, &decision, &first, &done, &Redactor::new(), &at(20));
    (decision, settled)
}

/// A reconcile of `app` at `now` finding [`web`] live as desired (an all-Unchanged plan), its
/// Revision `revision`, and `health`.
fn reconcile(
    app: &Application,
    revision: Revision,
    health: Vec<ObjectHealth>,
    now: i64,
) -> Decision {
    let mut planned_state = planned_with(&web(), unchanged, PrunePlan::default(), Some(revision));
    planned_state.health = health;
    decide_rollout(app, &planned(&planned_state), &Redactor::new(), &at(now))
}

/// [`reconcile`] where the controller's analysis finds [`diagnosis`] whenever a resource is not
/// Healthy.
fn reconcile_with_causes(
    app: &Application,
    revision: Revision,
    health: Vec<ObjectHealth>,
    now: i64,
) -> Decision {
    let mut planned_state = planned_with(&web(), unchanged, PrunePlan::default(), Some(revision));
    let unhealthy = health.iter().any(|h| !rollout::is_done(h.state));
    planned_state.diagnosis = if unhealthy { vec![diagnosis()] } else { Vec::new() };
    planned_state.health = health;
    decide_rollout(app, &planned(&planned_state), &Redactor::new(), &at(now))
}

/// After [`applied`]: the Revision once its rollout completed (at 30), and the Application status
/// once a later reconcile (at 40) found it still Healthy.
fn completed_and_watched(decision: &Decision, settled: &Settled) -> (Revision, ApplicationStatus) {
    let mut app = automatic();
    app.status = Some(settled.status.clone());
    let healthy = web_health(HealthState::Healthy, HealthState::Healthy);
    let completed =
        reconcile(&app, stored(decision, settled.revision.clone()), healthy.clone(), 30);
    let revision = completed.revision.expect("the Revision completes");
    app.status = completed.status;
    let watched = reconcile(&app, revision.clone(), healthy, 40);
    (revision, watched.status.or(app.status).expect("a status"))
}

type Condition = k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// A condition as (status, reason, message, lastTransitionTime, observedGeneration).
fn parts(condition: &Condition) -> (&str, &str, &str, &Time, Option<i64>) {
    (
        condition.status.as_str(),
        condition.reason.as_str(),
        condition.message.as_str(),
        &condition.last_transition_time,
        condition.observed_generation,
    )
}

fn rollout_complete(status: &RevisionStatus) -> &Condition {
    conditions::get(&status.conditions, ConditionType::RolloutComplete).expect("RolloutComplete")
}

/// How an observed attempt ends up.
#[derive(Clone, Debug)]
enum Outcome {
    /// Still observing; look again after this many seconds.
    Waits(u64),
    /// Healthy: the rollout completes.
    Completes,
    /// Failed for this reason, on this resource, with this message.
    Fails(FailureReason, ResourceRef, String),
}

#[test]
fn an_observed_attempt_completes_fails_or_waits_on_its_health() {
    use HealthState::{Degraded, Healthy, Progressing, Suspended, Unknown};
    struct Row {
        what: &'static str,
        /// spec.health.timeout and spec.strategy.failurePolicy.timeout.
        timeouts: (Option<&'static str>, Option<&'static str>),
        /// The attempt's startedAt.
        started: i64,
        health: Vec<ObjectHealth>,
        now: i64,
        prior: Prior,
        /// The aggregate health and the counts.
        state: HealthState,
        counts: ResourceCounts,
        outcome: Outcome,
    }
    let api = || resource("apps/v1", "Deployment", "api");
    let settings = || resource("v1", "ConfigMap", "settings");
    let still = |object: &str, state: &str, after: &str, tally: &str| {
        format!("{object} is still {state} after {after}: {tally}")
    };
    let api_progressing =
        "api reports Progressing (1 healthy, 1 progressing, 0 degraded, 0 unknown)";
    let timeout = |after: &str| {
        Outcome::Fails(
            FailureReason::TimeoutFailure,
            api(),
            still("Deployment.apps web/api", "Progressing", after, api_progressing),
        )
    };
    let mut rows = Vec::new();
    // Every object Healthy or Suspended, or none at all: the rollout completes.
    // (what, health of settings and api, aggregate, Ready before, now)
    let done: [(&str, &[HealthState], HealthState, Prior, i64); 7] = [
        ("Healthy", &[Healthy, Healthy], Healthy, Prior::None, 30),
        ("Healthy, Ready True before", &[Healthy, Healthy], Healthy, Prior::True, 30),
        ("Healthy, Ready False before", &[Healthy, Healthy], Healthy, Prior::False, 30),
        ("a Suspended workload counts as done", &[Healthy, Suspended], Suspended, Prior::None, 30),
        ("all Suspended", &[Suspended, Suspended], Suspended, Prior::True, 30),
        ("nothing to observe", &[], Healthy, Prior::None, 30),
        ("Healthy at the very deadline", &[Healthy, Healthy], Healthy, Prior::None, 310),
    ];
    for (what, states, state, prior, now) in done {
        let counts = counts_of(states.len() as i64, 0, 0, 0);
        let health = health_of(states);
        let outcome = Outcome::Completes;
        rows.push(Row {
            what,
            timeouts: (None, None),
            started: 10,
            health,
            now,
            prior,
            state,
            counts,
            outcome,
        });
    }
    // settings Healthy, api Progressing: wait, looking again every 5 s or at the deadline, and
    // fail with TimeoutFailure from the deadline on. The deadline is startedAt plus the smaller of
    // spec.health.timeout and spec.strategy.failurePolicy.timeout ("": unset), 5 min when neither
    // is set (ruling 4); each attempt gets the whole time from its own startedAt.
    enum Then {
        Waits(u64),
        TimesOut(&'static str),
    }
    use Then::{TimesOut, Waits};
    // (what, (health.timeout, failurePolicy.timeout), startedAt, now, Ready before, then)
    type Waiting = (&'static str, (&'static str, &'static str), i64, i64, Prior, Then);
    let progressing: [Waiting; 18] = [
        ("Progressing", ("", ""), 10, 30, Prior::True, Waits(5)),
        ("Progressing, Ready False before", ("", ""), 10, 30, Prior::False, Waits(5)),
        ("Progressing, no Ready yet", ("", ""), 10, 30, Prior::None, Waits(5)),
        ("3 s left", ("", ""), 10, 307, Prior::True, Waits(3)),
        ("just before the deadline", ("", ""), 10, 309, Prior::True, Waits(1)),
        ("at the deadline", ("", ""), 10, 310, Prior::True, TimesOut("300s")),
        ("at the deadline, no Ready yet", ("", ""), 10, 310, Prior::None, TimesOut("300s")),
        ("long after the deadline", ("", ""), 10, 900, Prior::False, TimesOut("300s")),
        ("90s of 90s and 2m", ("90s", "2m"), 10, 99, Prior::True, Waits(1)),
        ("90s of 90s and 2m", ("90s", "2m"), 10, 100, Prior::True, TimesOut("90s")),
        ("1m of 3m and 1m", ("3m", "1m"), 10, 69, Prior::True, Waits(1)),
        ("1m of 3m and 1m", ("3m", "1m"), 10, 70, Prior::True, TimesOut("60s")),
        ("failurePolicy 2m alone", ("", "2m"), 10, 129, Prior::True, Waits(1)),
        ("failurePolicy 2m alone", ("", "2m"), 10, 130, Prior::True, TimesOut("120s")),
        ("health 90s alone", ("90s", ""), 10, 100, Prior::True, TimesOut("90s")),
        ("a later attempt", ("", ""), 200, 400, Prior::True, Waits(5)),
        ("a later attempt, just before", ("", ""), 200, 499, Prior::True, Waits(1)),
        ("a later attempt, at its deadline", ("", ""), 200, 500, Prior::True, TimesOut("300s")),
    ];
    let set = |text: &'static str| (!text.is_empty()).then_some(text);
    for (what, (health, policy), started, now, prior, then) in progressing {
        let outcome = match then {
            Waits(seconds) => Outcome::Waits(seconds),
            TimesOut(after) => timeout(after),
        };
        rows.push(Row {
            what,
            timeouts: (set(health), set(policy)),
            started,
            health: web_health(Healthy, Progressing),
            now,
            prior,
            state: Progressing,
            counts: counts_of(1, 1, 0, 0),
            outcome,
        });
    }
    let row = |what, health, now, prior, state, counts, outcome| Row {
        what,
        timeouts: (None, None),
        started: 10,
        health,
        now,
        prior,
        state,
        counts,
        outcome,
    };
    rows.extend([
        // Unknown is waited for like Progressing.
        row(
            "Unknown, just before the deadline",
            web_health(Unknown, Healthy),
            309,
            Prior::True,
            Unknown,
            counts_of(1, 0, 0, 1),
            Outcome::Waits(1),
        ),
        row(
            "Unknown at the deadline",
            web_health(Unknown, Healthy),
            310,
            Prior::True,
            Unknown,
            counts_of(1, 0, 0, 1),
            Outcome::Fails(
                FailureReason::TimeoutFailure,
                settings(),
                still(
                    "ConfigMap web/settings",
                    "Unknown",
                    "300s",
                    "settings reports Unknown (1 healthy, 0 progressing, 0 degraded, 1 unknown)",
                ),
            ),
        ),
        // Degraded fails at once, long before the deadline, and wins over it.
        row(
            "Degraded",
            web_health(Healthy, Degraded),
            21,
            Prior::True,
            Degraded,
            counts_of(1, 0, 1, 0),
            Outcome::Fails(
                FailureReason::HealthFailure,
                api(),
                "Deployment.apps web/api is Degraded: api reports Degraded (1 healthy, 0 \
                 progressing, 1 degraded, 0 unknown)"
                    .into(),
            ),
        ),
        row(
            "Degraded and Progressing",
            web_health(Degraded, Progressing),
            30,
            Prior::None,
            Degraded,
            counts_of(0, 1, 1, 0),
            Outcome::Fails(
                FailureReason::HealthFailure,
                settings(),
                "ConfigMap web/settings is Degraded: settings reports Degraded (0 healthy, 1 \
                 progressing, 1 degraded, 0 unknown)"
                    .into(),
            ),
        ),
        row(
            "Degraded at the deadline",
            web_health(Progressing, Degraded),
            310,
            Prior::False,
            Degraded,
            counts_of(0, 1, 1, 0),
            Outcome::Fails(
                FailureReason::HealthFailure,
                api(),
                "Deployment.apps web/api is Degraded: api reports Degraded (0 healthy, 1 \
                 progressing, 1 degraded, 0 unknown)"
                    .into(),
            ),
        ),
    ]);
    let (decision, settled) = applied(&automatic());
    let hash = web().hash;
    let name = revision_name(APP, C1, &hash);
    for Row { what, timeouts, started, health, now, prior, state, counts, outcome } in rows {
        let row = format!("{what} at {now} ({prior:?})");
        let mut app = automatic();
        // The spec changed since Ready was last computed (generation 1).
        app.metadata.generation = Some(3);
        if let Some(timeout) = timeouts.0 {
            app.spec.health = Some(serde_json::from_value(json!({"timeout": timeout})).expect("h"));
        }
        app.spec.strategy.failure_policy.timeout = timeouts.1.map(str::to_owned);
        let mut before = settled.status.clone();
        with_prior(&mut before, prior);
        app.status = Some(before.clone());
        let mut revision_state = settled.revision.clone();
        revision_state.started_at = Some(at(started));
        let d = reconcile(&app, stored(&decision, revision_state), health, now);

        assert_eq!(d.step, Step::Report, "{row}");
        let status = d.status.as_ref().expect("the health is written");
        assert_eq!(status.sync.state, SyncState::Synced, "{row}");
        assert_eq!(status.deployed_revision.as_deref(), Some(C1), "{row}");
        assert_eq!(status.observed_generation, Some(3), "{row}");
        assert_eq!(status.state, state, "{row}");
        assert_eq!(status.health.state, state, "{row}");
        let moved = (state != HealthState::Unknown).then(|| at(now));
        assert_eq!(status.health.last_transition_time, moved, "{row}");
        assert_eq!(status.resources, counts, "{row}");
        let rs = revision_status(&d);
        assert_eq!(rs.health.as_ref(), Some(&counts), "{row}");
        assert_eq!((rs.attempts, &rs.started_at), (1, &Some(at(started))), "{row}");
        let condition = ready(status);
        // A condition that changes status moves lastTransitionTime; one that keeps it does not.
        let since = |value: &str| {
            let kept = ready(&before).is_some_and(|c| c.status == value);
            if kept { at(5) } else { at(now) }
        };
        match outcome {
            Outcome::Waits(seconds) => {
                assert_eq!(d.requeue_after, Some(Duration::from_secs(seconds)), "{row}");
                assert!(d.events.is_empty(), "{row}: {:?}", d.events);
                assert_eq!(condition, ready(&before), "{row}: Ready keeps its value");
                assert_eq!(rs.phase, Some(RevisionPhase::Observing), "{row}");
                assert_eq!((&rs.completed_at, &rs.failure), (&None, &None), "{row}");
                assert_eq!(rs.deployed_desired_state_hash, None, "{row}");
                assert_eq!(
                    parts(rollout_complete(rs)),
                    ("False", "RollingOut", "applying the Revision's groups", &at(10), None),
                    "{row}"
                );
            }
            Outcome::Completes => {
                assert_eq!(d.requeue_after, None, "{row}");
                assert_eq!(
                    d.events,
                    vec![(
                        EventReason::DeploymentHealthy,
                        format!("Revision {name}: every managed resource is Healthy")
                    )],
                    "{row}"
                );
                let message = format!("Revision {name} (commit {C1}) is Healthy");
                assert_eq!(
                    parts(condition.expect("Ready")),
                    ("True", "Healthy", message.as_str(), &since("True"), Some(3)),
                    "{row}"
                );
                assert_eq!(rs.phase, Some(RevisionPhase::Healthy), "{row}");
                assert_eq!((&rs.completed_at, &rs.failure), (&Some(at(now)), &None), "{row}");
                assert_eq!(rs.deployed_desired_state_hash.as_deref(), Some(hash.as_str()), "{row}");
                assert_eq!(
                    parts(rollout_complete(rs)),
                    (
                        "True",
                        "RolloutSucceeded",
                        "every group is applied and Healthy",
                        &at(now),
                        None
                    ),
                    "{row}"
                );
            }
            Outcome::Fails(reason, resource, message) => {
                assert_eq!(d.requeue_after, Some(rollout::backoff(1)), "{row}");
                assert_eq!(
                    d.events,
                    vec![(EventReason::Failure(reason), message.clone())],
                    "{row}"
                );
                assert_eq!(
                    parts(condition.expect("Ready")),
                    ("False", reason.as_str(), message.as_str(), &since("False"), Some(3)),
                    "{row}"
                );
                assert_eq!(rs.phase, Some(RevisionPhase::Failed), "{row}");
                assert_eq!(rs.completed_at, Some(at(now)), "{row}");
                assert_eq!(
                    rs.failure,
                    Some(Failure { reason, message, resource: Some(resource), retryable: true }),
                    "{row}"
                );
                assert_eq!(rs.deployed_desired_state_hash, None, "{row}");
                assert_eq!(
                    parts(rollout_complete(rs)),
                    ("False", "RollingOut", "applying the Revision's groups", &at(10), None),
                    "{row}"
                );
            }
        }
    }
}

#[test]
fn an_attempt_still_progressing_is_not_rewritten_once_its_health_is_recorded() {
    let (decision, settled) = applied(&automatic());
    let mut app = automatic();
    app.status = Some(settled.status.clone());
    let progressing = web_health(HealthState::Healthy, HealthState::Progressing);
    let first =
        reconcile(&app, stored(&decision, settled.revision.clone()), progressing.clone(), 30);
    let revision = first.revision.clone().expect("the health counts are recorded");
    app.status = first.status.clone();
    let again = reconcile(&app, revision, progressing, 35);
    assert!(again.revision.is_none(), "{:?}", again.revision);
    assert!(again.status.is_none(), "{:?}", again.status);
    assert!(again.events.is_empty());
    assert_eq!(again.requeue_after, Some(rollout::OBSERVE_EVERY));
}

// ---------------------------------------------------------------------------------------------
// The rollout lifecycle: a finished rollout
// ---------------------------------------------------------------------------------------------

#[test]
fn a_finished_rollout_follows_its_health_with_one_health_degraded_event() {
    use HealthState::{Degraded, Healthy, Progressing, Suspended, Unknown};
    let (decision, settled) = applied(&automatic());
    let mut app = automatic();
    app.status = Some(settled.status.clone());
    let completed = reconcile(
        &app,
        stored(&decision, settled.revision.clone()),
        web_health(Healthy, Healthy),
        30,
    );
    let revision = completed.revision.clone().expect("completed");
    app.status = completed.status.clone();
    let name = revision_name(APP, C1, &web().hash);
    assert_eq!(
        parts(ready(app.status.as_ref().expect("status")).expect("Ready")),
        (
            "True",
            "Healthy",
            format!("Revision {name} (commit {C1}) is Healthy").as_str(),
            &at(30),
            Some(1)
        )
    );

    let healthy = format!("Revision {name} (commit {C1}) is Healthy");
    let api_degraded = "Deployment.apps web/api is Degraded: api reports Degraded (1 healthy, 0 \
                        progressing, 1 degraded, 0 unknown)";
    let api_progressing = "Deployment.apps web/api is Progressing: api reports Progressing (1 \
                           healthy, 1 progressing, 0 degraded, 0 unknown)";
    let settings_progressing = "ConfigMap web/settings is Progressing: settings reports \
                                Progressing (1 healthy, 1 progressing, 0 degraded, 0 unknown)";
    let api_unknown = "Deployment.apps web/api is Unknown: api reports Unknown (1 healthy, 0 \
                       progressing, 0 degraded, 1 unknown)";
    let healthy = healthy.as_str();
    // (now, health of settings and api, Ready reason (True with Healthy, False otherwise) and
    //  message, its lastTransitionTime, status written, HealthDegraded Event, aggregate health).
    // While not Healthy, the decision looks again every 5 s.
    type Row<'a> = (i64, [HealthState; 2], &'a str, &'a str, i64, bool, bool, HealthState);
    let steps: Vec<Row> = vec![
        // Still Healthy: nothing to write (the message is the one the completion wrote).
        (40, [Healthy, Healthy], "Healthy", healthy, 30, false, false, Healthy),
        (45, [Healthy, Healthy], "Healthy", healthy, 30, false, false, Healthy),
        // A resource stops being Healthy while nothing changed in Git: one HealthDegraded.
        (50, [Healthy, Degraded], "Degraded", api_degraded, 50, true, true, Degraded),
        (55, [Healthy, Degraded], "Degraded", api_degraded, 50, false, false, Degraded),
        (60, [Healthy, Progressing], "Progressing", api_progressing, 50, true, false, Progressing),
        // Recovered: True again, with a transition.
        (70, [Healthy, Healthy], "Healthy", healthy, 70, true, false, Healthy),
        (
            80,
            [Progressing, Healthy],
            "Progressing",
            settings_progressing,
            80,
            true,
            true,
            Progressing,
        ),
        // A Suspended workload is done.
        (90, [Healthy, Suspended], "Healthy", healthy, 90, true, false, Suspended),
        // Unknown is not done: Progressing.
        (100, [Healthy, Unknown], "Progressing", api_unknown, 100, true, true, Unknown),
        (110, [Healthy, Degraded], "Degraded", api_degraded, 100, true, false, Degraded),
        (120, [Healthy, Healthy], "Healthy", healthy, 120, true, false, Healthy),
    ];
    for (now, [settings, api], reason, message, since, written, degraded, state) in steps {
        let value = if reason == "Healthy" { "True" } else { "False" };
        let again = value == "False";
        let before = app.status.clone().expect("status");
        let d = reconcile(&app, revision.clone(), web_health(settings, api), now);
        let row = format!("at {now}: {settings:?}, {api:?}");
        assert_eq!(d.step, Step::Report, "{row}");
        assert!(d.revision.is_none(), "{row}: the Healthy Revision is not rewritten");
        assert_eq!(d.status.is_some(), written, "{row}");
        let events =
            if degraded { vec![(EventReason::HealthDegraded, message.to_owned())] } else { vec![] };
        assert_eq!(d.events, events, "{row}");
        assert_eq!(d.requeue_after, again.then_some(rollout::OBSERVE_EVERY), "{row}");
        let status = d.status.unwrap_or(before);
        assert_eq!(
            parts(ready(&status).expect("Ready")),
            (value, reason, message, &at(since), Some(1)),
            "{row}"
        );
        assert_eq!((status.state, status.health.state), (state, state), "{row}");
        assert_eq!(status.sync.state, SyncState::Synced, "{row}");
        assert_eq!(status.deployed_revision.as_deref(), Some(C1), "{row}");
        app.status = Some(status);
    }
}

// ---------------------------------------------------------------------------------------------
// The rollout lifecycle: Ready keeps its value while a rollout runs
// ---------------------------------------------------------------------------------------------

#[test]
fn ready_keeps_its_value_while_a_rollout_is_planned_applied_awaits_approval_or_progresses() {
    #[derive(Clone, Copy, Debug)]
    enum Moment {
        /// A new desired state, planned and applying.
        Planned,
        /// Its sync done.
        Applied,
        /// Applied and still Progressing.
        Progressing,
        /// Manual sync: waiting for an approval.
        AwaitingApproval,
        /// Manual sync: the approval is for another plan digest.
        ApprovalStale,
        /// Manual sync: approved, applying.
        Approved,
        /// Drift reported without selfHeal, while the rollout is observed.
        DriftWhileObserving,
        /// Drift reported without selfHeal after the rollout completed (health unchanged).
        DriftWhenFinished,
        /// A selfHeal repair applying.
        Repair,
    }
    let moments = [
        Moment::Planned,
        Moment::Applied,
        Moment::Progressing,
        Moment::AwaitingApproval,
        Moment::ApprovalStale,
        Moment::Approved,
        Moment::DriftWhileObserving,
        Moment::DriftWhenFinished,
        Moment::Repair,
    ];
    let (decision, settled) = applied(&automatic());
    let (completed, watched) = completed_and_watched(&decision, &settled);
    let state = web();
    let name = revision_name(APP, C1, &state.hash);
    for moment in moments {
        for prior in [Prior::True, Prior::False] {
            let row = format!("{moment:?}, {prior:?}");
            let sync = match moment {
                Moment::AwaitingApproval | Moment::ApprovalStale | Moment::Approved => {
                    json!({"automatic": false, "prune": true})
                }
                Moment::Repair => json!({"automatic": true, "prune": true, "selfHeal": true}),
                _ => json!({"automatic": true, "prune": true}),
            };
            let mut app = application(sync, 1);
            // Ready was computed for generation 1; the spec moved since.
            app.metadata.generation = Some(2);
            let mut before = match moment {
                Moment::Applied | Moment::Progressing | Moment::DriftWhileObserving => {
                    settled.status.clone()
                }
                Moment::DriftWhenFinished | Moment::Repair => watched.clone(),
                _ => app.status.clone().expect("status"),
            };
            before.conditions.clear();
            with_prior(&mut before, prior);
            app.status = Some(before.clone());
            let digest = || planned_with(&state, absent, PrunePlan::default(), None).plan.digest;
            let fresh = |app: &Application| {
                let planned_state = planned_with(&state, absent, PrunePlan::default(), None);
                decide_rollout(app, &planned(&planned_state), &Redactor::new(), &at(30))
            };
            let drift = |app: &Application, revision: Revision| {
                let mut planned_state =
                    planned_with(&state, drifted, PrunePlan::default(), Some(revision));
                planned_state.health = web_health(HealthState::Healthy, HealthState::Healthy);
                decide_rollout(app, &planned(&planned_state), &Redactor::new(), &at(50))
            };
            let observing = || stored(&decision, settled.revision.clone());
            // (the decision, or the settled status of a sync)
            let (d, after) = match moment {
                Moment::Planned | Moment::AwaitingApproval => (Some(fresh(&app)), None),
                Moment::ApprovalStale => {
                    approve(&mut app, &name, "sha256:another-plan", None);
                    (Some(fresh(&app)), None)
                }
                Moment::Approved => {
                    approve(&mut app, &name, &digest(), None);
                    (Some(fresh(&app)), None)
                }
                Moment::Applied => {
                    let (first, d) = first_sync(&app);
                    let done = SyncOutcome::Done { live_kinds: live_kinds_after_first_sync() };
                    let settled = settle(&app, &d, &first, &done, &Redactor::new(), &at(20));
                    assert!(settled.events.is_empty(), "{row}");
                    (None, Some(settled.status))
                }
                Moment::Progressing => {
                    let health = web_health(HealthState::Healthy, HealthState::Progressing);
                    (Some(reconcile(&app, observing(), health, 30)), None)
                }
                Moment::DriftWhileObserving => (Some(drift(&app, observing())), None),
                Moment::DriftWhenFinished | Moment::Repair => {
                    (Some(drift(&app, completed.clone())), None)
                }
            };
            let after = match d {
                Some(d) => {
                    let (step, sync, events): (bool, SyncState, Vec<&str>) = match moment {
                        Moment::Planned | Moment::Approved => {
                            (true, SyncState::Applying, vec!["PlanCreated", "DeploymentStarted"])
                        }
                        Moment::AwaitingApproval => (
                            false,
                            SyncState::AwaitingApproval,
                            vec!["PlanCreated", "ApprovalRequired"],
                        ),
                        Moment::ApprovalStale => (
                            false,
                            SyncState::AwaitingApproval,
                            vec!["PlanCreated", "ApprovalStale"],
                        ),
                        Moment::Progressing => (false, SyncState::Synced, vec![]),
                        Moment::DriftWhileObserving | Moment::DriftWhenFinished => {
                            (false, SyncState::Drifted, vec![])
                        }
                        Moment::Repair => (true, SyncState::Applying, vec!["DeploymentStarted"]),
                        Moment::Applied => unreachable!(),
                    };
                    assert_eq!(matches!(d.step, Step::Sync { .. }), step, "{row}");
                    assert_eq!(reasons(&d.events), events, "{row}");
                    let status = d.status.expect("written");
                    assert_eq!(status.sync.state, sync, "{row}");
                    status
                }
                None => after.expect("settled"),
            };
            assert_eq!(ready(&after), ready(&before), "{row}: Ready keeps its value");
            let condition = ready(&after).expect("Ready");
            assert_eq!(
                (&condition.last_transition_time, condition.observed_generation),
                (&at(5), Some(1)),
                "{row}: no transition, and the generation it was computed for"
            );
        }
    }
}

#[test]
fn every_ready_the_decision_computes_carries_the_generation_it_was_computed_for() {
    use HealthState::{Degraded, Healthy, Progressing};
    let (decision, settled) = applied(&automatic());
    let (completed, watched) = completed_and_watched(&decision, &settled);
    // Each case runs at generation 3 with a Ready computed for generation 1 before.
    let app_with = |status: &ApplicationStatus, prior: Prior| {
        let mut app = automatic();
        app.metadata.generation = Some(3);
        let mut status = status.clone();
        status.conditions.clear();
        with_prior(&mut status, prior);
        app.status = Some(status);
        app
    };
    let fresh = app_with(&automatic().status.expect("status"), Prior::True);
    let observing = app_with(&settled.status, Prior::True);
    let finished = app_with(&watched, Prior::True);
    let degraded = {
        let mut status = watched.clone();
        status.conditions.clear();
        set_ready(&mut status, Status::False, "Degraded", 5);
        let mut app = automatic();
        app.metadata.generation = Some(3);
        app.status = Some(status);
        app
    };
    let observing_revision = || stored(&decision, settled.revision.clone());
    // (case, the written status, Ready status and reason)
    type Case = (&'static str, ApplicationStatus, (&'static str, &'static str));
    let written = |d: Decision| d.status.expect("written");
    let mut cases: Vec<Case> = vec![
        (
            "a failure before the plan",
            written(decide_rollout(
                &fresh,
                &failed(FailureReason::SourceFailure, "down", None, None),
                &Redactor::new(),
                &at(30),
            )),
            ("False", "SourceFailure"),
        ),
        (
            "a conflict",
            written(decide_rollout(
                &fresh,
                &planned(&planned_with(&web(), conflicting, PrunePlan::default(), None)),
                &Redactor::new(),
                &at(30),
            )),
            ("False", "ConflictFailure"),
        ),
        (
            "completion",
            written(reconcile(&observing, observing_revision(), web_health(Healthy, Healthy), 30)),
            ("True", "Healthy"),
        ),
        (
            "a health failure",
            written(reconcile(&observing, observing_revision(), web_health(Healthy, Degraded), 30)),
            ("False", "HealthFailure"),
        ),
        (
            "a timeout",
            written(reconcile(
                &observing,
                observing_revision(),
                web_health(Healthy, Progressing),
                400,
            )),
            ("False", "TimeoutFailure"),
        ),
        (
            "a finished rollout Degraded",
            written(reconcile(&finished, completed.clone(), web_health(Healthy, Degraded), 50)),
            ("False", "Degraded"),
        ),
        (
            "a finished rollout Progressing",
            written(reconcile(&finished, completed.clone(), web_health(Progressing, Healthy), 50)),
            ("False", "Progressing"),
        ),
        (
            "a finished rollout recovered",
            written(reconcile(&degraded, completed.clone(), web_health(Healthy, Healthy), 50)),
            ("True", "Healthy"),
        ),
    ];
    // A failed sync step.
    let (first, d) = first_sync(&fresh);
    let outcome = SyncOutcome::Failed(StepFailure {
        reason: FailureReason::ApplyFailure,
        message: "no".into(),
        resource: None,
    });
    let failed_sync = settle(&fresh, &d, &first, &outcome, &Redactor::new(), &at(20));
    cases.push(("a failed sync", failed_sync.status.clone(), ("False", "ApplyFailure")));
    // Retries blocked: the failure was reported for generation 3 too.
    let mut blocked_app = fresh.clone();
    blocked_app.status = Some(failed_sync.status.clone());
    let failed_revision = stored(&d, failed_sync.revision.clone());
    let planned_state =
        planned_with(&web(), unchanged, PrunePlan::default(), Some(failed_revision));
    cases.push((
        "retries blocked",
        written(decide_rollout(&blocked_app, &planned(&planned_state), &Redactor::new(), &at(30))),
        ("False", "RetryBlocked"),
    ));
    for (case, status, (value, reason)) in cases {
        let condition = ready(&status).expect("Ready");
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str(), condition.observed_generation),
            (value, reason, Some(3)),
            "{case}"
        );
        assert_eq!(status.observed_generation, Some(3), "{case}");
    }
}

// ---------------------------------------------------------------------------------------------
// The rollout lifecycle: manual approval
// ---------------------------------------------------------------------------------------------

fn approve(app: &mut Application, revision: &str, digest: &str, approved_at: Option<&str>) {
    let mut annotations: std::collections::BTreeMap<String, String> = [
        (keys::APPROVED_REVISION.to_owned(), revision.to_owned()),
        (keys::APPROVED_DIGEST.to_owned(), digest.to_owned()),
        (keys::APPROVED_BY.to_owned(), "alice".to_owned()),
    ]
    .into();
    // As the webhook records it; the default is an approval at the start of the day.
    let approved_at = approved_at.unwrap_or("2026-12-01T00:00:00Z");
    annotations.insert(keys::APPROVED_AT.to_owned(), approved_at.to_owned());
    app.metadata.annotations = Some(annotations);
}

#[test]
fn an_approval_of_the_plan_digest_syncs_and_covers_the_retries() {
    let mut app = application(json!({"automatic": false, "prune": true}), 2);
    let state = web();
    let mut planned_state =
        planned_with(&state, absent, prune_for(&state, &live_before_first_sync()), None);
    let name = revision_name(APP, C1, &state.hash);
    let digest = planned_state.plan.digest.clone();
    let counts = "2 to create, 0 to update, 1 to delete, 1 unchanged";
    let feed = |app: &mut Application, planned_state: &mut Planned, d: &Decision| {
        if let Some(status) = &d.status {
            app.status = Some(status.clone());
        }
        if let Some(revision) = &d.revision {
            planned_state.revision = Some(revision.clone());
        }
    };

    // Planned: waits, naming the digest to approve.
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(10));
    assert_eq!(
        d.events[1],
        (
            EventReason::ApprovalRequired,
            format!("Revision {name} waits for approval (plan digest {digest}): {counts}")
        )
    );
    feed(&mut app, &mut planned_state, &d);

    // An approval of another plan digest: stale, and the Revision waits again.
    approve(&mut app, &name, "sha256:0000", None);
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(20));
    assert_eq!(d.step, Step::Report);
    assert_eq!(reasons(&d.events), vec!["ApprovalStale"]);
    assert_eq!(
        squeezed(&d.events[0].1),
        format!(
            "Revision {name} was approved with plan digest sha256:0000, but its plan is now \
             {digest}; review it and approve again"
        )
    );
    let rs = revision_status(&d);
    assert_eq!(
        (rs.phase, rs.attempts, &rs.approval),
        (Some(RevisionPhase::AwaitingApproval), 0, &None)
    );
    assert!(d.status.is_none(), "still AwaitingApproval: {:?}", d.status);
    feed(&mut app, &mut planned_state, &d);

    // An approval of another Revision does not cover this one.
    approve(&mut app, "web-another-revision", &digest, None);
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(25));
    assert_eq!((d.step.clone(), d.events.len()), (Step::Report, 0));
    assert_eq!(revision_status(&d).phase, Some(RevisionPhase::AwaitingApproval));

    // Approved: the audit record goes to the Revision, and the attempt starts.
    approve(&mut app, &name, &digest, Some("2026-01-02T03:04:05Z"));
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(30));
    assert_eq!(d.step, Step::Sync { prune: vec![managed("v1", "ConfigMap", "old")] });
    assert_eq!(reasons(&d.events), vec!["DeploymentStarted", "PruneSkipped"]);
    let record = Approval {
        approved_by: "alice".into(),
        approved_at: Time("2026-01-02T03:04:05Z".parse::<Timestamp>().expect("time")),
        plan_digest: digest.clone(),
        desired_state_hash: state.hash.clone(),
        note: None,
    };
    let rs = revision_status(&d);
    assert_eq!(rs.approval.as_ref(), Some(&record));
    assert_eq!(
        (rs.phase, rs.attempts, &rs.started_at),
        (Some(RevisionPhase::Applying), 1, &Some(at(30)))
    );
    assert_eq!(d.status.as_ref().map(|s| s.sync.state), Some(SyncState::Applying));
    let applying = d.clone();
    feed(&mut app, &mut planned_state, &d);

    // The attempt fails; the approval stays on the Revision.
    let outcome = SyncOutcome::Failed(StepFailure {
        reason: FailureReason::ApplyFailure,
        message: "refused".into(),
        resource: None,
    });
    let settled = settle(&app, &applying, &planned_state, &outcome, &Redactor::new(), &at(40));
    assert_eq!(settled.revision.approval.as_ref(), Some(&record));
    app.status = Some(settled.status.clone());
    planned_state.revision = Some(stored(&applying, settled.revision.clone()));
    // The annotations are gone (or name another plan): the recorded approval covers the retry of
    // the same desired state, after the backoff.
    for annotations in
        [None, Some(("web-another-revision", "sha256:0000")), Some((name.as_str(), "sha256:0000"))]
    {
        let mut app = app.clone();
        match annotations {
            None => app.metadata.annotations = None,
            Some((revision, digest)) => approve(&mut app, revision, digest, None),
        }
        let row = format!("{annotations:?}");
        let waits = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(45));
        assert_eq!(waits.step, Step::Report, "{row}");
        assert_eq!(waits.requeue_after, Some(Duration::from_secs(5)), "{row}");
        assert!(waits.events.is_empty() && waits.revision.is_none(), "{row}");
        let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(50));
        assert_eq!(d.step, Step::Sync { prune: vec![managed("v1", "ConfigMap", "old")] }, "{row}");
        assert_eq!(reasons(&d.events), vec!["DeploymentStarted", "PruneSkipped"], "{row}");
        let rs = revision_status(&d);
        assert_eq!((rs.phase, rs.attempts), (Some(RevisionPhase::Applying), 2), "{row}");
        assert_eq!(rs.approval.as_ref(), Some(&record), "{row}");
    }
}

#[test]
fn an_approval_whose_audit_record_was_removed_is_no_approval() {
    // The webhook writes approved-by and approved-at with the digest it checked; without them
    // nobody is on record as approving, so the plan waits, with nothing applied.
    let state = web();
    let planned_state = planned_with(&state, absent, PrunePlan::default(), None);
    let name = revision_name(APP, C1, &state.hash);
    let mut app = application(json!({"automatic": false}), 1);
    approve(&mut app, &name, &planned_state.plan.digest, None);
    app.metadata.annotations.as_mut().expect("annotations").remove(keys::APPROVED_AT);
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(30));
    assert_eq!(d.step, Step::Report);
    assert_eq!(reasons(&d.events), vec!["PlanCreated", "ApprovalRequired"]);
    let rs = revision_status(&d);
    assert_eq!((rs.phase, &rs.approval), (Some(RevisionPhase::AwaitingApproval), &None));

    // With the record, the same approval syncs and is recorded as the webhook wrote it.
    approve(&mut app, &name, &planned_state.plan.digest, Some("2026-12-01T10:00:00Z"));
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(30));
    assert_eq!(d.step, Step::Sync { prune: vec![] });
    assert_eq!(reasons(&d.events), vec!["PlanCreated", "DeploymentStarted"]);
    let approval = revision_status(&d).approval.clone().expect("recorded");
    assert_eq!(
        (approval.approved_by.as_str(), approval.approved_at.0.to_string()),
        ("alice", "2026-12-01T10:00:00Z".to_owned())
    );

    // approved-by removed: no approval either.
    let annotations = app.metadata.annotations.as_mut().expect("annotations");
    annotations.remove(keys::APPROVED_BY);
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(30));
    assert_eq!(d.step, Step::Report);
}

// ---------------------------------------------------------------------------------------------
// The rollout lifecycle: diagnosis
// ---------------------------------------------------------------------------------------------

#[test]
fn diagnosis_is_cleared_when_the_rollout_completes_healthy_and_kept_while_it_is_observed() {
    use HealthState::{Degraded, Healthy, Progressing, Suspended};
    let (decision, settled) = applied(&automatic());
    let (completed, watched) = completed_and_watched(&decision, &settled);
    let with_diagnosis = |status: &ApplicationStatus| {
        let mut app = automatic();
        let mut status = status.clone();
        status.diagnosis = vec![diagnosis()];
        app.status = Some(status);
        app
    };
    let observing = with_diagnosis(&settled.status);
    let observing_revision = || stored(&decision, settled.revision.clone());
    // (case, decision, diagnosis after)
    let cases: Vec<(&str, Decision, Vec<Diagnosis>)> = vec![
        (
            "completes Healthy",
            reconcile_with_causes(
                &observing,
                observing_revision(),
                web_health(Healthy, Healthy),
                30,
            ),
            vec![],
        ),
        (
            "completes with a Suspended workload",
            reconcile_with_causes(
                &observing,
                observing_revision(),
                web_health(Healthy, Suspended),
                30,
            ),
            vec![],
        ),
        (
            "still Progressing",
            reconcile_with_causes(
                &observing,
                observing_revision(),
                web_health(Healthy, Progressing),
                30,
            ),
            vec![diagnosis()],
        ),
        (
            "a finished rollout Degraded",
            reconcile_with_causes(
                &with_diagnosis(&watched),
                completed.clone(),
                web_health(Degraded, Healthy),
                50,
            ),
            vec![diagnosis()],
        ),
    ];
    for (case, d, expected) in cases {
        let status = d.status.expect("written");
        assert_eq!(status.diagnosis, expected, "{case}");
    }
}

#[test]
fn diagnosis_is_cleared_when_retries_are_blocked_after_an_apply_failure() {
    let base = automatic();
    let (first, decision) = first_sync(&base);
    let outcome = SyncOutcome::Failed(StepFailure {
        reason: FailureReason::ApplyFailure,
        message: "refused".into(),
        resource: None,
    });
    let settled = settle(&base, &decision, &first, &outcome, &Redactor::new(), &at(20));
    let mut app = automatic();
    let mut status = settled.status.clone();
    status.diagnosis = vec![diagnosis()];
    app.status = Some(status);
    let planned_state = planned_with(
        &web(),
        unchanged,
        PrunePlan::default(),
        Some(stored(&decision, settled.revision.clone())),
    );
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(30));
    let status = d.status.expect("written");
    assert_eq!(ready(&status).map(|c| c.reason.as_str()), Some("RetryBlocked"));
    assert_eq!(status.diagnosis, vec![]);
}

// ---------------------------------------------------------------------------------------------
// Bugs of the rollout lifecycle (application.rs contradicts the reference; see each reason)
// ---------------------------------------------------------------------------------------------

/// `app` after an attempt failed with `reason` (observed at 30 from Observing, or settled at 20),
/// with a diagnosis in its status; and the Revision.
fn failed_with_diagnosis(reason: FailureReason) -> (Application, Revision) {
    let (decision, settled) = applied(&automatic());
    let mut app = automatic();
    app.status = Some(settled.status.clone());
    let health = match reason {
        FailureReason::HealthFailure => web_health(HealthState::Healthy, HealthState::Degraded),
        _ => web_health(HealthState::Healthy, HealthState::Progressing),
    };
    let now = if reason == FailureReason::TimeoutFailure { 400 } else { 30 };
    let d = reconcile(&app, stored(&decision, settled.revision.clone()), health, now);
    let revision = d.revision.expect("failed");
    assert_eq!(
        revision.status.as_ref().and_then(|s| s.failure.as_ref()).map(|f| f.reason),
        Some(reason)
    );
    let mut status = d.status.expect("written");
    status.diagnosis = vec![diagnosis()];
    app.status = Some(status);
    (app, revision)
}

#[test]
fn diagnosis_is_kept_when_retries_are_blocked_after_a_health_failure() {
    for reason in [FailureReason::HealthFailure, FailureReason::TimeoutFailure] {
        let (app, revision) = failed_with_diagnosis(reason);
        let d = reconcile(
            &app,
            revision,
            web_health(HealthState::Healthy, HealthState::Degraded),
            1000,
        );
        let status = d.status.expect("written");
        assert_eq!(ready(&status).map(|c| c.reason.as_str()), Some("RetryBlocked"), "{reason:?}");
        assert_eq!(
            status.diagnosis,
            vec![diagnosis()],
            "{reason:?}: it still explains the failure"
        );
    }
}

#[test]
fn a_health_failure_does_not_clear_the_diagnosis() {
    let (decision, settled) = applied(&automatic());
    for (health, now) in [
        (web_health(HealthState::Healthy, HealthState::Degraded), 30),
        (web_health(HealthState::Healthy, HealthState::Progressing), 400),
    ] {
        let mut app = automatic();
        let mut status = settled.status.clone();
        status.diagnosis = vec![diagnosis()];
        app.status = Some(status);
        let d =
            reconcile_with_causes(&app, stored(&decision, settled.revision.clone()), health, now);
        let status = d.status.expect("written");
        assert_eq!(status.diagnosis, vec![diagnosis()], "at {now}");
    }
}

#[test]
fn diagnosis_is_cleared_when_a_finished_rollout_recovers() {
    let (decision, settled) = applied(&automatic());
    let (completed, watched) = completed_and_watched(&decision, &settled);
    let mut app = automatic();
    let mut status = watched.clone();
    set_ready(&mut status, Status::False, "Degraded", 45);
    status.diagnosis = vec![diagnosis()];
    app.status = Some(status);
    let d = reconcile(&app, completed, web_health(HealthState::Healthy, HealthState::Healthy), 50);
    let status = d.status.expect("written");
    assert_eq!(ready(&status).map(|c| c.status.as_str()), Some("True"));
    assert_eq!(status.diagnosis, vec![]);
}

#[test]
fn a_failure_before_the_plan_does_not_reset_the_backoff_or_the_attempts() {
    let base = automatic(); // maxAttempts 1
    let (first, decision) = first_sync(&base);
    let outcome = SyncOutcome::Failed(StepFailure {
        reason: FailureReason::ApplyFailure,
        message: "admission webhook denied the request".into(),
        resource: None,
    });
    let settled = settle(&base, &decision, &first, &outcome, &Redactor::new(), &at(20));
    let mut app = automatic();
    app.status = Some(settled.status.clone());
    // A transient source failure at the same generation, then the source is back.
    let transient = decide_rollout(
        &app,
        &failed(FailureReason::SourceFailure, "connection reset", None, None),
        &Redactor::new(),
        &at(22),
    );
    app.status = transient.status.clone();
    let revision = stored(&decision, settled.revision.clone());
    let planned_state = planned_with(&web(), unchanged, PrunePlan::default(), Some(revision));
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(25));
    assert_eq!(d.step, Step::Report, "the one attempt is used, and the backoff runs until 30");
    assert!(d.revision.is_none(), "{:?}", d.revision.and_then(|r| r.status).map(|s| s.attempts));
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(30));
    assert_eq!(d.step, Step::Report, "retries stop with RetryBlocked");
    let status = d.status.expect("written");
    assert_eq!(ready(&status).map(|c| c.reason.as_str()), Some("RetryBlocked"));
}

#[test]
fn a_stale_approval_is_reported_once() {
    let mut app = application(json!({"automatic": false}), 1);
    let state = web();
    let mut planned_state = planned_with(&state, absent, PrunePlan::default(), None);
    let name = revision_name(APP, C1, &state.hash);
    approve(&mut app, &name, "sha256:0000", None);
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(10));
    assert_eq!(reasons(&d.events), vec!["PlanCreated", "ApprovalStale"]);
    app.status = d.status.clone();
    planned_state.revision = d.revision.clone();
    let again = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(20));
    assert_eq!(again.step, Step::Report);
    assert!(again.events.is_empty(), "{:?}", again.events);
}

#[test]
fn retry_blocked_and_approval_stale_messages_have_single_spaces() {
    // RetryBlocked.
    let base = automatic();
    let (first, decision) = first_sync(&base);
    let outcome = SyncOutcome::Failed(StepFailure {
        reason: FailureReason::ApplyFailure,
        message: "refused".into(),
        resource: None,
    });
    let settled = settle(&base, &decision, &first, &outcome, &Redactor::new(), &at(20));
    let mut app = automatic();
    app.status = Some(settled.status.clone());
    let planned_state = planned_with(
        &web(),
        unchanged,
        PrunePlan::default(),
        Some(stored(&decision, settled.revision.clone())),
    );
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(30));
    assert_eq!(
        d.events,
        vec![(
            EventReason::Failure(FailureReason::RetryBlocked),
            "retries stopped after 1 attempt(s) (spec.strategy.failurePolicy.maxAttempts); last \
             failure: ApplyFailure: refused"
                .to_owned()
        )]
    );
    // ApprovalStale.
    let mut app = application(json!({"automatic": false}), 1);
    let planned_state = planned_with(&web(), absent, PrunePlan::default(), None);
    let name = revision_name(APP, C1, &web().hash);
    approve(&mut app, &name, "sha256:0000", None);
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(10));
    assert_eq!(
        d.events[1].1,
        format!(
            "Revision {name} was approved with plan digest sha256:0000, but its plan is now {}; \
             review it and approve again",
            planned_state.plan.digest
        )
    );
}

#[test]
fn diagnosed_is_recorded_when_the_root_causes_change_and_not_again_while_they_hold() {
    let (decision, settled) = applied(&automatic());
    let mut app = automatic();
    app.status = Some(settled.status.clone());
    let revision = || stored(&decision, settled.revision.clone());
    let progressing = web_health(HealthState::Healthy, HealthState::Progressing);
    let first = reconcile_with_causes(&app, revision(), progressing.clone(), 10);
    let diagnosed = |d: &Decision| {
        d.events.iter().filter(|(reason, _)| *reason == EventReason::Diagnosed).count()
    };
    assert_eq!(diagnosed(&first), 1, "{:?}", first.events);
    let message =
        &first.events.iter().find(|(r, _)| *r == EventReason::Diagnosed).expect("event").1;
    assert_eq!(message, "1 root cause(s): MissingSecret (Secret web/db)");
    // The same cause with other words (counts, ages): no Event, and the stored words stay.
    app.status = first.status.clone();
    let mut planned_state = planned_with(&web(), unchanged, PrunePlan::default(), Some(revision()));
    planned_state.health = progressing;
    let mut reworded = diagnosis();
    reworded.message = "Secret web/db does not exist; 3 Pods wait for it".into();
    planned_state.diagnosis = vec![reworded];
    let again = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(20));
    assert_eq!(diagnosed(&again), 0, "{:?}", again.events);
    let status = again.status.clone().or(app.status.clone()).expect("a status");
    assert_eq!(status.diagnosis, vec![diagnosis()]);
}

// ---------------------------------------------------------------------------------------------
// Rollback runs and holds (docs/decisions.md#rollback)
// ---------------------------------------------------------------------------------------------

/// The Revision of [`web`] at [`C1`] once its rollout completed Healthy: the rollback target.
fn healthy_target() -> Revision {
    let (decision, settled) = applied(&automatic());
    let mut status = settled.revision;
    status.phase = Some(RevisionPhase::Healthy);
    status.deployed_desired_state_hash = Some(web().hash);
    stored(&decision, status)
}

/// A Revision of the held commit [`C2`], Healthy before the rollback.
fn held_revision() -> Revision {
    let mut revision = healthy_target();
    revision.metadata.name = Some(format!("{APP}-held"));
    revision.spec.source.revision = C2.into();
    revision
}

fn request(kind: &str, by: &str, hash: Option<String>) -> rollback::Request {
    let mut annotations = BTreeMap::from([
        (keys::ROLLBACK_REVISION.to_owned(), C1.to_owned()),
        (keys::ROLLBACK_KIND.to_owned(), kind.to_owned()),
        (keys::ROLLBACK_REQUESTED_BY.to_owned(), by.to_owned()),
        (keys::ROLLBACK_REQUESTED_AT.to_owned(), "2026-12-01T10:00:00Z".to_owned()),
        (keys::ROLLBACK_TARGET_REVISION.to_owned(), healthy_target().metadata.name.expect("name")),
    ]);
    if let Some(hash) = hash {
        annotations.insert(keys::ROLLBACK_TARGET_HASH.to_owned(), hash);
    }
    rollback::Request::from_annotations(&annotations).expect("a request")
}

/// A pending manual run by alice from [`C2`] back to [`C1`], nothing held yet.
fn run(request: rollback::Request) -> Run {
    Run {
        held: C2.into(),
        request: Some(request),
        target_state: Some(web().hash),
        replaced: vec![held_revision()],
        established: false,
        record_from: true,
    }
}

/// `app` (deployed at [`C2`]) reconciled with the run, [`web`] found as `found` says and the
/// target Revision `revision`, at 50.
fn run_reconcile(
    app: &Application,
    run: Run,
    found: impl Fn(&DesiredObject) -> Found,
    revision: Revision,
    health: Vec<ObjectHealth>,
) -> (Planned, Decision) {
    let mut state = planned_with(&web(), found, PrunePlan::default(), Some(revision));
    state.rollback = Some(run);
    state.health = health;
    let decision = decide_rollout(app, &planned(&state), &Redactor::new(), &at(50));
    (state, decision)
}

fn deployed_at_c2(mut app: Application) -> Application {
    let status = app.status.get_or_insert_with(Default::default);
    status.deployed_revision = Some(C2.into());
    app
}

fn healthy_web() -> Vec<ObjectHealth> {
    web_health(HealthState::Healthy, HealthState::Healthy)
}

#[test]
fn a_rollback_run_applies_rolls_back_and_holds_the_commit_it_left() {
    let app = deployed_at_c2(automatic());
    let (state, started) = run_reconcile(
        &app,
        run(request("manual", "alice", None)),
        drifted,
        healthy_target(),
        Vec::new(),
    );
    // Started: the target's Revision RollingBack, attempts from 0, the request recorded,
    // rollback-from recorded, desiredRevision the held commit.
    assert!(matches!(started.step, Step::Sync { .. }), "{:?}", started.step);
    let revision = started.revision.clone().expect("the run's Revision");
    let status = revision.status.clone().expect("status");
    assert_eq!(status.phase, Some(RevisionPhase::RollingBack));
    assert_eq!(status.attempts, 1, "a new run counts its attempts from 0");
    let annotations = revision.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get(rollback::RUN), Some(&request("manual", "alice", None).id()));
    assert_eq!(annotations.get(keys::ROLLBACK_REQUESTED_BY).map(String::as_str), Some("alice"));
    // A manual rollback starts like any deployment; RollbackStarted is a failure's rollback.
    assert_eq!(reasons(&started.events), ["DeploymentStarted"]);
    assert!(started.events[0].1.starts_with("manual rollback: "), "{:?}", started.events);
    assert_eq!(started.annotations.get(keys::ROLLBACK_FROM), Some(&Some(C2.to_owned())));
    let app_status = started.status.clone().expect("status");
    assert_eq!(app_status.desired_revision.as_deref(), Some(C2));

    // A reconcile while the run's sync step is under way (the Application Applying, groups left
    // to apply): the run goes on, nothing new is counted or announced.
    let mut going = app.clone();
    going.status = started.status.clone();
    let request_again = request("manual", "alice", None);
    let (_, step) = run_reconcile(&going, run(request_again), drifted, revision.clone(), vec![]);
    assert!(matches!(step.step, Step::Sync { .. }), "{:?}", step.step);
    assert!(step.events.is_empty() && step.revision.is_none(), "{:?}", step.events);

    // Applied: still RollingBack, then Healthy completes it.
    let done = SyncOutcome::Done { live_kinds: live_kinds_after_first_sync() };
    let settled = settle(&app, &started, &state, &done, &Redactor::new(), &at(55));
    assert_eq!(settled.revision.phase, Some(RevisionPhase::RollingBack));
    let mut app = app.clone();
    app.status = Some(settled.status.clone());
    let mut applied_revision = revision.clone();
    applied_revision.status = Some(settled.revision);
    let (_, completed) = run_reconcile(
        &app,
        run(request("manual", "alice", None)),
        unchanged,
        applied_revision,
        healthy_web(),
    );
    let finished = revision_status(&completed);
    assert_eq!(finished.phase, Some(RevisionPhase::RolledBack));
    assert_eq!(finished.deployed_desired_state_hash.as_deref(), Some(web().hash.as_str()));
    let app_status = completed.status.clone().expect("status");
    let (status, reason, message, _, _) = parts(ready(&app_status).expect("Ready"));
    assert_eq!((status, reason), ("False", "RolledBack"));
    assert!(message.contains(&C2[..12]) && message.contains("held"), "{message}");
    assert_eq!(app_status.deployed_revision.as_deref(), Some(C1));
    assert_eq!(reasons(&completed.events), ["DeploymentHealthy", "RollbackCompleted"]);
    // The request goes, who asked stays; rollback-from is still recorded.
    assert_eq!(completed.annotations.get(keys::ROLLBACK_REVISION), Some(&None));
    assert_eq!(completed.annotations.get(keys::ROLLBACK_TARGET_HASH), Some(&None));
    assert!(!completed.annotations.contains_key(keys::ROLLBACK_REQUESTED_BY));
    assert_eq!(completed.annotations.get(keys::ROLLBACK_FROM), Some(&Some(C2.to_owned())));
    // Every Revision of the held commit: RolledBack=True/ManualRollback, with who asked.
    assert_eq!(completed.others.len(), 1);
    let marked = &completed.others[0];
    let condition = conditions::get(
        &marked.status.as_ref().expect("status").conditions,
        ConditionType::RolledBack,
    )
    .expect("RolledBack");
    assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("True", "ManualRollback"));
    assert!(condition.message.contains("alice"), "{}", condition.message);
    assert_eq!(
        marked.annotations.get(keys::ROLLBACK_REQUESTED_BY),
        Some(&Some("alice".to_owned()))
    );
}

#[test]
fn an_automatic_run_starts_with_a_warning_and_completes_as_rollback_completed() {
    let app = deployed_at_c2(automatic());
    let (_, started) = run_reconcile(
        &app,
        run(request("automatic", "system:serviceaccount:kuvryn:controller", None)),
        drifted,
        healthy_target(),
        Vec::new(),
    );
    assert_eq!(started.events[0].0, EventReason::RollbackStarted { automatic: true });
    assert_eq!(started.events[0].0.event_type(), kuvryn_sync_api::EventType::Warning, "ruling 3");
}

#[test]
fn a_hold_keeps_ready_rolled_back_whatever_the_health_and_writes_nothing_when_unchanged() {
    let mut app = deployed_at_c2(automatic());
    let mut target = healthy_target();
    target.status.as_mut().expect("status").phase = Some(RevisionPhase::RolledBack);
    let mut hold = run(request("manual", "alice", None));
    hold.request = None;
    hold.record_from = false;
    hold.established = true;
    let (_, first) = run_reconcile(&app, hold.clone(), unchanged, target.clone(), healthy_web());
    let status = first.status.clone().expect("Ready set to RolledBack");
    assert_eq!(parts(ready(&status).expect("Ready")).1, "RolledBack");
    app.status = Some(status);
    let degraded = web_health(HealthState::Healthy, HealthState::Degraded);
    let (_, second) = run_reconcile(&app, hold.clone(), unchanged, target.clone(), degraded);
    let status = second.status.clone().unwrap_or_else(|| app.status.clone().expect("status"));
    assert_eq!(parts(ready(&status).expect("Ready")).1, "RolledBack", "held stays RolledBack");
    assert!(!reasons(&second.events).contains(&"HealthDegraded"));
    app.status = Some(status);
    let (_, third) = run_reconcile(&app, hold, unchanged, target, healthy_web());
    let unchanged_ready = third.status.as_ref().map(|s| ready(s).cloned());
    if let Some(Some(condition)) = unchanged_ready {
        assert_eq!(condition.reason, "RolledBack");
    }
    assert!(third.revision.is_none(), "keeping the hold does not rewrite the Revision");
    assert!(third.annotations.is_empty());
}

#[test]
fn a_run_that_used_up_its_attempts_is_abandoned_and_marks_the_commit_it_left() {
    let app = deployed_at_c2(automatic());
    let request = request("manual", "alice", None);
    let mut target = healthy_target();
    target
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(rollback::RUN.to_owned(), request.id());
    target
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ATTEMPTED_GENERATION.to_owned(), "1".to_owned());
    let status = target.status.as_mut().expect("status");
    status.phase = Some(RevisionPhase::Failed);
    status.attempts = 1;
    status.completed_at = Some(at(10));
    status.failure = Some(Failure {
        reason: FailureReason::Forbidden,
        message: "deployments.apps is forbidden".into(),
        resource: None,
        retryable: true,
    });
    let (_, decision) = run_reconcile(&app, run(request), drifted, target, Vec::new());
    assert_eq!(reasons(&decision.events), ["RollbackAbandoned", "Forbidden"]);
    let status = decision.status.clone().expect("status");
    let (value, reason, message, _, _) = parts(ready(&status).expect("Ready"));
    assert_eq!((value, reason), ("False", "Forbidden"), "failed with the target's reason");
    assert!(message.contains("abandoned") && message.contains("forbidden"), "{message}");
    assert_eq!(decision.annotations.get(keys::ROLLBACK_REVISION), Some(&None));
    assert_eq!(
        decision.annotations.get(keys::ROLLBACK_FROM),
        Some(&None),
        "nothing held before: rollback-from goes too"
    );
    assert!(matches!(decision.step, Step::Report));
    let marked = &decision.others[0];
    assert_eq!(marked.name, format!("{APP}-held"));
    assert!(marked.annotations.contains_key(rollback::ABANDONED));
}

#[test]
fn under_automatic_sync_a_target_that_renders_another_state_is_abandoned_unapplied() {
    let app = deployed_at_c2(automatic());
    let mut changed = run(request("manual", "alice", None));
    changed.target_state = Some("sha256:another".into());
    let (_, decision) = run_reconcile(&app, changed, drifted, healthy_target(), Vec::new());
    assert!(matches!(decision.step, Step::Report), "never applied");
    assert!(decision.revision.is_none());
    assert_eq!(reasons(&decision.events), ["RollbackAbandoned", "ValidationFailure"]);
}

#[test]
fn under_manual_sync_a_rollback_is_approved_under_its_requester_only_while_its_fingerprint_matches()
{
    let app = deployed_at_c2(application(json!({"automatic": false, "prune": true}), 1));
    let spec = json!({"sync": app.spec.sync, "strategy": app.spec.strategy});
    let (sync, strategy) = crate::admission::canonical_sync_and_strategy(&spec);
    let good = crate::admission::rollback_target_hash(&web().hash, &sync, &strategy);
    let (_, approved) = run_reconcile(
        &app,
        run(request("manual", "alice", Some(good))),
        drifted,
        healthy_target(),
        Vec::new(),
    );
    assert!(matches!(approved.step, Step::Sync { .. }), "{:?}", approved.step);
    assert_eq!(reasons(&approved.events), ["RollbackApproved", "DeploymentStarted"]);
    let record = revision_status(&approved).approval.clone().expect("an approval record");
    assert_eq!(record.approved_by, "alice");
    assert!(record.note.is_some_and(|n| n.contains("alice")));

    for (rule, hash) in [
        ("no fingerprint: never auto-approved", None),
        ("spec.strategy changed since the request", Some("sha256:other".to_owned())),
    ] {
        let (_, waiting) = run_reconcile(
            &app,
            run(request("manual", "alice", hash)),
            drifted,
            healthy_target(),
            Vec::new(),
        );
        assert!(matches!(waiting.step, Step::Report), "{rule}");
        assert_eq!(
            revision_status(&waiting).phase,
            Some(RevisionPhase::AwaitingApproval),
            "{rule}"
        );
        assert_eq!(reasons(&waiting.events), ["RollbackTargetChanged"], "{rule}");
        assert_eq!(
            waiting.status.expect("status").sync.state,
            SyncState::AwaitingApproval,
            "{rule}"
        );
    }
}

#[test]
fn a_failure_under_action_rollback_requests_the_rollback_at_once() {
    let mut app = application(json!({"automatic": true, "prune": true}), 3);
    app.spec.strategy.failure_policy.action = kuvryn_sync_api::FailureAction::Rollback;
    let mut failed = healthy_target();
    failed.metadata.annotations = Some([(ATTEMPTED_GENERATION.to_owned(), "1".to_owned())].into());
    let status = failed.status.as_mut().expect("status");
    status.phase = Some(RevisionPhase::Failed);
    status.attempts = 1;
    status.completed_at = Some(at(49));
    status.failure = Some(Failure {
        reason: FailureReason::HealthFailure,
        message: "Deployment web/api is Degraded".into(),
        resource: None,
        retryable: true,
    });
    let mut state = planned_with(&web(), unchanged, PrunePlan::default(), Some(failed));
    state.fallback = Some(rollback::Fallback { revision: "web-good".into(), commit: C2.into() });
    let decision = decide_rollout(&app, &planned(&state), &Redactor::new(), &at(50));
    assert!(decision.revision.is_none() && matches!(decision.step, Step::Report));
    assert_eq!(
        decision.annotations.get(keys::ROLLBACK_KIND),
        Some(&Some("automatic".to_owned())),
        "rolls back without waiting for the attempts left (maxAttempts 3)"
    );
    assert_eq!(decision.annotations.get(keys::ROLLBACK_REVISION), Some(&Some(C2.to_owned())));
    assert_eq!(decision.annotations.get(keys::ROLLBACK_FROM), Some(&Some(C1.to_owned())));
}

#[test]
fn the_course_lifts_a_hold_removes_a_pointless_request_and_ends_a_hold_on_a_new_commit() {
    let mut app = automatic();
    app.metadata.annotations = Some(
        [
            (keys::ROLLBACK_REVISION.to_owned(), C2.to_owned()),
            (keys::ROLLBACK_FROM.to_owned(), C2.to_owned()),
        ]
        .into(),
    );
    let empty = || {
        finish(
            ApplicationStatus::default(),
            ApplicationStatus::default(),
            None,
            Vec::new(),
            Step::Report,
        )
    };
    let lift =
        rollback::Course::LiftHold { request: request("manual", "alice", None), held: C2.into() };
    let mut held = held_revision();
    conditions::set(
        &mut held.status.get_or_insert_with(Default::default).conditions,
        NewCondition {
            type_: ConditionType::RolledBack,
            status: Status::True,
            reason: "ManualRollback",
            message: "rolled back".into(),
            observed_generation: None,
        },
        &at(5),
    );
    let revisions = [healthy_target(), held];
    let lifted = with_course(empty(), &app, &lift, &revisions);
    assert_eq!(reasons(&lifted.events), ["RollbackHoldLifted"]);
    assert_eq!(lifted.annotations.get(keys::ROLLBACK_FROM), Some(&None));
    assert_eq!(lifted.annotations.get(keys::ROLLBACK_REVISION), Some(&None));
    let [unheld] = lifted.others.as_slice() else { panic!("{:?}", lifted.others) };
    assert_eq!(unheld.name, format!("{APP}-held"), "only the held commit's Revision");
    let status = unheld.status.as_ref().expect("status");
    assert!(
        conditions::get(&status.conditions, ConditionType::RolledBack).is_none(),
        "lifting removes RolledBack=True"
    );
    let pointless = rollback::Course::Pointless { request: request("manual", "alice", None) };
    assert_eq!(
        reasons(&with_course(empty(), &app, &pointless, &revisions).events),
        ["RollbackAbandoned"]
    );
    let ended = with_course(
        empty(),
        &app,
        &rollback::Course::Follow { end_hold: Some(C2.into()) },
        &revisions,
    );
    assert!(ended.others.is_empty(), "a new commit keeps RolledBack=True (ruling 10)");
    assert!(ended.events.is_empty());
    assert_eq!(ended.annotations.get(keys::ROLLBACK_FROM), Some(&None));
    let mut plain = automatic();
    plain.metadata.annotations = None;
    let nothing = with_course(
        empty(),
        &plain,
        &rollback::Course::Follow { end_hold: Some(C2.into()) },
        &revisions,
    );
    assert!(nothing.annotations.is_empty(), "nothing to remove writes nothing");
}

/// A reconcile that stops before a plan on a retryable failure (an API error while listing
/// managed objects, a source fetch) looks again after the first backoff; one that needs a
/// change of Git or of the Application waits for it.
#[test]
fn a_failed_observation_is_retried_only_when_retryable() {
    let app = automatic();
    for (reason, requeue) in [
        (FailureReason::PruneFailure, Some(rollout::FIRST_BACKOFF)),
        (FailureReason::PlanFailure, Some(rollout::FIRST_BACKOFF)),
        (FailureReason::SourceFailure, Some(rollout::FIRST_BACKOFF)),
        (FailureReason::Forbidden, Some(rollout::FIRST_BACKOFF)),
        (FailureReason::RenderFailure, None),
        (FailureReason::ServiceAccountRequired, None),
    ] {
        let observation = failed(
            reason,
            "cannot list Deployment.apps to find managed objects: Internal error occurred",
            Some(SA),
            Some("abc123"),
        );
        let d = decide_rollout(&app, &observation, &Redactor::new(), &at(10));
        assert!(matches!(d.step, Step::Report), "{reason:?}: {:?}", d.step);
        assert_eq!(d.requeue_after, requeue, "{reason:?}");
        assert_eq!(failed_observation_requeue(reason), requeue, "{reason:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Drift that changes health, and a failing source
// ---------------------------------------------------------------------------------------------

/// The health of every object of [`web`] as `state`.
fn health_of_web(state: HealthState) -> Vec<ObjectHealth> {
    web()
        .objects
        .iter()
        .map(|o| ObjectHealth {
            key: o.key.clone(),
            api_version: o.object["apiVersion"].as_str().unwrap_or_default().to_owned(),
            state,
            message: format!("is {}", state.as_str()),
        })
        .collect()
}

#[test]
fn drift_without_self_heal_keeps_ready_only_while_health_is_unchanged() {
    let base = automatic();
    let (first, decision) = first_sync(&base);
    let done = SyncOutcome::Done { live_kinds: live_kinds_after_first_sync() };
    let settled = settle(&base, &decision, &first, &done, &Redactor::new(), &at(20));
    let mut revision_status = settled.revision.clone();
    revision_status.phase = Some(RevisionPhase::Healthy);
    let revision = stored(&decision, revision_status);
    let mut status = settled.status.clone();
    status.health.state = HealthState::Healthy;
    set_ready(&mut status, Status::True, "Healthy", 20);
    // (health now, Ready after, sync after, HealthDegraded sent)
    let rows = [
        (HealthState::Healthy, ("True", "Healthy"), false),
        (HealthState::Degraded, ("False", "Degraded"), true),
        (HealthState::Progressing, ("False", "Progressing"), true),
    ];
    for (health, (ready_status, ready_reason), degraded_event) in rows {
        let mut app = automatic();
        app.status = Some(status.clone());
        let mut planned_state =
            planned_with(&web(), drifted, PrunePlan::default(), Some(revision.clone()));
        planned_state.health = health_of_web(health);
        let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(30));
        let after = d.status.expect("Drifted is written");
        assert_eq!(after.sync.state, SyncState::Drifted, "{health:?}");
        let condition = ready(&after).expect("Ready");
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            (ready_status, ready_reason),
            "{health:?}"
        );
        assert_eq!(
            reasons(&d.events).contains(&"HealthDegraded"),
            degraded_event,
            "{health:?}: {:?}",
            d.events
        );
        assert_eq!(d.step, Step::Report, "drift is not repaired without selfHeal");
    }
}

#[test]
fn a_repository_whose_source_fails_fails_the_applications_that_follow_it() {
    let condition = |status: &str, reason: &str| {
        vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message: "revision main not found".into(),
            last_transition_time: at(1),
            observed_generation: Some(1),
        }]
    };
    let rows = [
        (condition("False", "SourceFailure"), Some(FailureReason::SourceFailure)),
        (condition("False", "AuthenticationFailure"), Some(FailureReason::AuthenticationFailure)),
        // A discovery refusal does not stop the Applications already syncing.
        (condition("False", "ValidationFailure"), None),
        (condition("True", "FetchSucceeded"), None),
        (Vec::new(), None),
    ];
    for (conditions, expected) in rows {
        let found = failing_source("team/apps", &conditions);
        assert_eq!(found.as_ref().map(|f| f.reason), expected, "{conditions:?}");
        if let Some(failure) = found {
            assert_eq!(failure.message, "Repository team/apps: revision main not found");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// decide: an attempt whose sync step is under way (one step per reconcile)
// ---------------------------------------------------------------------------------------------

#[test]
fn an_attempt_under_way_goes_on_without_counting_a_new_one() {
    let app = automatic();
    let (first, decision) = first_sync(&app);
    let revision = stored(&decision, revision_status(&decision).clone());
    let applying = decision.status.clone().expect("written before the sync");
    // (the Application's sync state, what the plan finds, whether the attempt goes on)
    type Row = (SyncState, fn(&DesiredObject) -> Found, bool);
    let rows: Vec<Row> = vec![
        // Groups left to apply, or all applied and the prune not done yet (a restart between).
        (SyncState::Applying, absent, true),
        (SyncState::Applying, unchanged, true),
        // The Application no longer says Applying (its status write was lost): a new attempt.
        (SyncState::Synced, absent, false),
        // A conflict appeared under conflictPolicy: fail: a new attempt, which fails on it.
        (SyncState::Applying, conflicting, false),
        (SyncState::OutOfSync, absent, false),
    ];
    for (n, (sync_state, found, goes_on)) in rows.into_iter().enumerate() {
        let mut app = app.clone();
        let mut status = applying.clone();
        status.sync.state = sync_state;
        app.status = Some(status.clone());
        let planned_state =
            planned_with(&web(), found, first.prune.clone(), Some(revision.clone()));
        let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(30));
        let row = format!("row {n}: {sync_state:?}");
        let syncs = Step::Sync { prune: first.prune.delete.clone() };
        let conflicts = !planned_state.plan.conflicts.is_empty();
        assert_eq!(d.step == syncs, !conflicts, "{row}: {:?}", d.step);
        if goes_on {
            assert_eq!(d.requeue_after, Some(rollout::OBSERVE_EVERY), "{row}");
            assert!(d.events.is_empty(), "{row}: {:?}", d.events);
            assert!(d.revision.is_none(), "{row}: nothing new on the Revision");
            assert!(d.status.is_none(), "{row}: the status stays Applying, Ready unchanged");
            // The step settles on the stored statuses: the attempt's own start and count.
            let done = SyncOutcome::Done { live_kinds: live_kinds_after_first_sync() };
            let settled = settle(&app, &d, &planned_state, &done, &Redactor::new(), &at(40));
            assert_eq!(
                (settled.revision.phase, settled.revision.attempts, settled.revision.started_at),
                (Some(RevisionPhase::Observing), 1, Some(at(10))),
                "{row}"
            );
            assert_eq!(settled.status.sync.state, SyncState::Synced, "{row}");
            assert_eq!(settled.status.managed_kinds, status.managed_kinds, "{row}");
        } else if !conflicts {
            assert_eq!(reasons(&d.events), vec!["DeploymentStarted", "PruneSkipped"], "{row}");
            let rs = revision_status(&d);
            assert_eq!((rs.attempts, rs.started_at.clone()), (2, Some(at(30))), "{row}");
        } else {
            let rs = revision_status(&d);
            let reason = rs.failure.as_ref().map(|f| f.reason);
            assert_eq!((rs.attempts, reason), (2, Some(FailureReason::ConflictFailure)), "{row}");
        }
    }
}

#[test]
fn hooks_are_recorded_as_the_attempt_goes_on_and_a_removed_success_is_kept() {
    let hook = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "annotations": {keys::HOOK: keys::HOOK_PRE_SYNC}},
               "data": {"a": "1"}})
    };
    let state = desired(vec![hook("migrate"), hook("seed"), hook("later"), deployment("api")]);
    let mut app = automatic();
    let prune = prune_for(&state, &[]);
    let first = planned_with(&state, absent, prune.clone(), None);
    let decision = decide_rollout(&app, &planned(&first), &Redactor::new(), &at(10));
    app.status = decision.status.clone();
    let mut revision = stored(&decision, revision_status(&decision).clone());
    let succeeded = |name: &str| HookStatus {
        resource: resource("v1", "ConfigMap", name),
        stage: HookStage::PreSync,
        state: HookState::Succeeded,
        message: "done earlier".into(),
    };
    // `seed` ran and was removed since; `migrate` runs; `later` was never created.
    revision.status.as_mut().expect("status").hooks = vec![succeeded("seed")];
    let found = |object: &DesiredObject| match object.key.name.as_str() {
        "migrate" => unchanged(object),
        _ => Found::Absent,
    };
    let mut planned_state = planned_with(&state, found, prune, Some(revision));
    planned_state.health = vec![
        object_health("", "ConfigMap", "migrate", HealthState::Progressing),
        object_health("", "ConfigMap", "seed", HealthState::Progressing),
        object_health("", "ConfigMap", "later", HealthState::Progressing),
        object_health("apps", "Deployment", "api", HealthState::Progressing),
    ];
    let d = decide_rollout(&app, &planned(&planned_state), &Redactor::new(), &at(20));
    let recorded: Vec<(&str, HookState)> =
        revision_status(&d).hooks.iter().map(|h| (h.resource.name.as_str(), h.state)).collect();
    assert_eq!(recorded, vec![("migrate", HookState::Running), ("seed", HookState::Succeeded)]);
    assert!(d.events.is_empty() && d.status.is_none(), "{:?}", d.events);
}

// ---------------------------------------------------------------------------------------------
// A Revision from the first attempt on: failures before a plan existed
// ---------------------------------------------------------------------------------------------

/// `decide` then [`with_unplanned_revision`] for `observation`, with `existing` found.
fn unplanned(
    observation: &Observation,
    existing: Option<&Revision>,
    redactor: &Redactor,
) -> Decision {
    let app = automatic();
    let decision = decide_rollout(&app, observation, redactor, &at(20));
    with_unplanned_revision(decision, &app, observation, existing, redactor, &at(20))
}

#[test]
fn a_failure_before_the_plan_at_a_commit_is_recorded_on_its_revision() {
    // (reason, commit known, records a Revision)
    let rows = [
        (FailureReason::RenderFailure, true, true),
        (FailureReason::DecryptionFailure, true, true),
        (FailureReason::ValidationFailure, true, true),
        (FailureReason::RenderFailure, false, false),
        (FailureReason::PlanFailure, true, false),
        (FailureReason::Forbidden, true, false),
        (FailureReason::SourceFailure, true, false),
        (FailureReason::SourceFailure, false, false),
        (FailureReason::ServiceAccountFailure, false, false),
    ];
    for (reason, known, records) in rows {
        let observation = failed(reason, "it broke", Some(SA), known.then_some(C1));
        let decision = unplanned(&observation, None, &Redactor::new());
        assert_eq!(decision.revision.is_some(), records, "{reason:?}");
        let Some(revision) = decision.revision else { continue };
        assert_eq!(
            revision.metadata.name.as_deref(),
            Some(unplanned_revision_name(APP, C1).as_str())
        );
        assert_eq!(revision.spec.source.revision, C1);
        assert_eq!(revision.spec.desired_state_hash, "", "no desired state existed");
        let labels = revision.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get(keys::APPLICATION).map(String::as_str), Some(APP));
        let status = revision.status.expect("status");
        assert_eq!(status.phase, Some(RevisionPhase::Failed));
        assert_eq!(status.attempts, 1);
        let failure = status.failure.expect("failure");
        assert_eq!((failure.reason, failure.message.as_str()), (reason, "it broke"));
        assert_eq!(failure.retryable, reason.retryable());
        // The Application reports it as before.
        let status = decision.status.expect("application status");
        assert_eq!(ready(&status).map(|c| c.reason.as_str()), Some(reason.as_str()));
    }
}

#[test]
fn the_same_failure_again_writes_nothing_and_another_counts_an_attempt() {
    let observation = failed(FailureReason::RenderFailure, "bad yaml", Some(SA), Some(C1));
    let first = unplanned(&observation, None, &Redactor::new()).revision.expect("revision");
    assert!(unplanned(&observation, Some(&first), &Redactor::new()).revision.is_none());
    let other = failed(FailureReason::DecryptionFailure, "no key", Some(SA), Some(C1));
    let second = unplanned(&other, Some(&first), &Redactor::new()).revision.expect("revision");
    let status = second.status.expect("status");
    assert_eq!(status.attempts, 2);
    assert_eq!(status.failure.map(|f| f.reason), Some(FailureReason::DecryptionFailure));
}

#[test]
fn a_recorded_failure_message_is_redacted_and_a_planned_reconcile_records_nothing_more() {
    let mut redactor = Redactor::new();
    redactor.add_secret(CANARY);
    let observation =
        failed(FailureReason::RenderFailure, &format!("value {CANARY} is bad"), Some(SA), Some(C1));
    let revision = unplanned(&observation, None, &redactor).revision.expect("revision");
    let message = revision.status.and_then(|s| s.failure).map(|f| f.message).unwrap_or_default();
    assert!(!message.contains(CANARY), "{message}");
    // A planned reconcile keeps its own Revision.
    let app = automatic();
    let (planned_state, decision) = first_sync(&app);
    let name = |d: &Decision| d.revision.as_ref().and_then(|r| r.metadata.name.clone());
    let before = name(&decision);
    let after =
        with_unplanned_revision(decision, &app, &planned(&planned_state), None, &redactor, &at(10));
    assert_eq!(name(&after), before);
    assert_ne!(before, Some(unplanned_revision_name(APP, C1)));
}

#[test]
fn a_reconcile_that_syncs_nothing_forgets_recorded_kinds_with_nothing_left() {
    let mut app = automatic();
    let status = ApplicationStatus {
        managed_kinds: vec![
            kind("apps/v1", "Deployment"),
            kind("v1", "ConfigMap"),
            kind("v1", "Service"),
        ],
        ..Default::default()
    };
    app.status = Some(status.clone());
    let state = desired(vec![config_map("web")]);
    let mut planned = planned_with(&state, unchanged, PrunePlan::default(), None);
    let names = |d: &Decision| -> Vec<String> {
        let kinds = d.status.as_ref().map(|s| s.managed_kinds.clone()).unwrap_or_default();
        kinds.into_iter().map(|k| k.kind).collect()
    };
    // (live kinds, step, managedKinds written)
    type Row = (Option<BTreeSet<GroupKind>>, Step, Option<Vec<&'static str>>);
    let service = GroupKind::new("", "Service");
    let rows: [Row; 4] = [
        (Some(BTreeSet::new()), Step::Report, Some(vec!["ConfigMap"])),
        (Some(BTreeSet::from([service.clone()])), Step::Report, Some(vec!["ConfigMap", "Service"])),
        (Some(BTreeSet::new()), Step::Sync { prune: Vec::new() }, None),
        (None, Step::Report, None),
    ];
    for (live, step, expected) in rows {
        planned.live_kinds = live.clone();
        let mut decision = finish(status.clone(), status.clone(), None, Vec::new(), step.clone());
        forget_empty_kinds(&mut decision, &app, &planned);
        let written = decision.status.is_some().then(|| names(&decision));
        let expected = expected.map(|e| e.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        assert_eq!(written, expected, "live {live:?}, step {step:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// decide: the rule order over everything a reconcile observed
// ---------------------------------------------------------------------------------------------

/// `decide` for `app` after `observed`, at time 10.
fn decide_all(app: &Application, observed: &Observed) -> Decision {
    let (redactor, now) = (Redactor::new(), at(10));
    decide(&Inputs { app, observed, redactor: &redactor, now: &now })
}

fn depending(app: &Application) -> Application {
    let mut app = app.clone();
    app.spec.depends_on = vec![LocalObjectReference { name: "db".into() }];
    app
}

fn not_ready() -> Option<(dependencies::Verdict, Vec<Diagnosis>)> {
    let verdict = dependencies::Verdict::NotReady { message: "db is Progressing".into() };
    Some((verdict, vec![diagnosis()]))
}

fn sinks_ready() -> Option<NewCondition<'static>> {
    Some(NewCondition {
        type_: ConditionType::NotificationsReady,
        status: Status::True,
        reason: ConditionReason::SinksReady.as_str(),
        message: "1 notification sink(s) ready".into(),
        observed_generation: Some(1),
    })
}

fn invalid_rule(health_check: &str) -> InvalidRule {
    InvalidRule {
        health_check: health_check.into(),
        denial: crate::health_rules::RuleDenial {
            index: 0,
            error: crate::health_rules::RuleError::Empty,
        },
    }
}

fn condition_of(decision: &Decision, type_: ConditionType) -> Option<(String, String)> {
    let status = decision.status.as_ref()?;
    let condition = conditions::get(&status.conditions, type_)?;
    Some((condition.status.clone(), condition.reason.clone()))
}

#[test]
fn rule_1_a_suspended_application_records_only_its_generation() {
    let mut app = depending(&automatic());
    app.spec.suspend = true;
    app.metadata.generation = Some(4);
    let (planned_state, _) = first_sync(&automatic());
    let observed = Observed {
        sinks: sinks_ready(),
        dependencies: not_ready(),
        observation: Some(planned(&planned_state)),
        ..Observed::default()
    };
    let decision = decide_all(&app, &observed);
    assert_eq!(decision.step, Step::Report);
    assert!(decision.revision.is_none() && decision.events.is_empty());
    let status = decision.status.expect("the generation is recorded");
    assert_eq!(status.observed_generation, Some(4));
    assert!(status.conditions.is_empty(), "{:?}", status.conditions);
    // Seen already: nothing to write.
    app.status = Some(status);
    assert!(decide_all(&app, &observed).status.is_none());
}

#[test]
fn rule_2_dependencies_that_hold_back_wait_with_ready_unchanged_and_sinks_still_read() {
    let mut app = depending(&automatic());
    let mut status = app.status.clone().unwrap_or_default();
    set_ready(&mut status, Status::True, "Healthy", 1);
    app.status = Some(status);
    let observed =
        Observed { sinks: sinks_ready(), dependencies: not_ready(), ..Observed::default() };
    assert!(held_back(&app, observed.dependencies.as_ref()).is_some());
    let decision = decide_all(&app, &observed);
    assert_eq!(decision.step, Step::Report);
    assert!(decision.revision.is_none());
    let waiting = condition_of(&decision, ConditionType::DependenciesReady);
    assert_eq!(waiting.map(|(s, _)| s).as_deref(), Some("False"));
    let ready = condition_of(&decision, ConditionType::Ready);
    assert_eq!(ready, Some(("True".into(), "Healthy".into())), "Ready is left as it was");
    let sinks = condition_of(&decision, ConditionType::NotificationsReady);
    assert_eq!(sinks.map(|(s, _)| s).as_deref(), Some("True"));
    assert_eq!(reasons(&decision.events), ["Diagnosed"]);
    assert_eq!(decision.status.expect("status").diagnosis, vec![diagnosis()]);
}

#[test]
fn rule_2_ready_dependencies_let_the_rollout_decide_and_are_recorded() {
    let app = depending(&automatic());
    let (planned_state, _) = first_sync(&automatic());
    let observed = Observed {
        dependencies: Some((dependencies::Verdict::Ready, Vec::new())),
        observation: Some(planned(&planned_state)),
        ..Observed::default()
    };
    assert!(held_back(&app, observed.dependencies.as_ref()).is_none());
    let decision = decide_all(&app, &observed);
    assert!(matches!(decision.step, Step::Sync { .. }));
    let condition = condition_of(&decision, ConditionType::DependenciesReady);
    assert_eq!(condition.map(|(s, _)| s).as_deref(), Some("True"));
}

#[test]
fn rule_3_a_rollback_whose_commit_cannot_be_planned_is_abandoned_not_failed_as_a_rollout() {
    let app = automatic();
    let request = rollback::Request::from_annotations(&BTreeMap::from([
        (keys::ROLLBACK_REVISION.to_owned(), C2.to_owned()),
        (keys::ROLLBACK_KIND.to_owned(), "manual".to_owned()),
    ]));
    let run = Run { held: C1.into(), request, ..Run::default() };
    let failure = failed(FailureReason::RenderFailure, "bad yaml", Some(SA), Some(C2));
    let observed =
        Observed { observation: Some(failure.clone()), run: Some(run), ..Observed::default() };
    let decision = decide_all(&app, &observed);
    assert!(reasons(&decision.events).contains(&"RollbackAbandoned"), "{:?}", decision.events);
    assert!(decision.annotations.contains_key(keys::ROLLBACK_REVISION));
    // Without the run, the same failure is the rollout's own.
    let alone = decide_all(&app, &Observed { observation: Some(failure), ..Observed::default() });
    assert!(!reasons(&alone.events).contains(&"RollbackAbandoned"));
    assert_eq!(
        condition_of(&alone, ConditionType::Ready).map(|(_, r)| r).as_deref(),
        Some("RenderFailure")
    );
}

#[test]
fn rule_3_a_new_commit_not_rendered_yet_is_announced_as_planning_with_ready_unchanged() {
    let mut app = automatic();
    let mut status = app.status.clone().unwrap_or_default();
    status.desired_revision = Some(C1.into());
    status.sync.state = SyncState::Synced;
    set_ready(&mut status, Status::True, "Healthy", 1);
    app.status = Some(status);
    let observation = Observation::Planning { service_account: SA.into(), commit: C2.into() };
    let observed = Observed { observation: Some(observation), ..Observed::default() };
    let decision = decide_all(&app, &observed);
    assert_eq!(decision.step, Step::Report);
    assert_eq!(decision.requeue_after, Some(Duration::ZERO), "rendered at once");
    assert!(decision.revision.is_none() && decision.events.is_empty(), "{:?}", decision.events);
    let status = decision.status.clone().expect("the announcement is written");
    assert_eq!(status.sync.state, SyncState::Planning);
    assert_eq!(status.desired_revision.as_deref(), Some(C2));
    assert_eq!(status.service_account_name.as_deref(), Some(SA));
    let ready = condition_of(&decision, ConditionType::Ready);
    assert_eq!(ready, Some(("True".into(), "Healthy".into())), "Ready is left as it was");
}

/// Which commits are announced before their render: only one that replaces the desired
/// revision, outside any rollback.
#[test]
fn only_a_commit_replacing_the_desired_one_outside_a_rollback_announces_planning() {
    let follow = rollback::Course::Follow { end_hold: None };
    let run = Run { held: C1.into(), ..Run::default() };
    let mut at_c1 = automatic();
    at_c1.status.get_or_insert_with(Default::default).desired_revision = Some(C1.into());
    let mut fresh = automatic();
    fresh.status = None;
    let hold = rollback::Course::Hold { held: C2.into(), deployed: C1.into() };
    let ended = rollback::Course::Follow { end_hold: Some(C1.into()) };
    type Row<'a> = (&'a str, &'a Application, &'a str, &'a rollback::Course, Option<&'a Run>, bool);
    let rows: [Row<'_>; 6] = [
        ("a new Application's first commit", &fresh, C1, &follow, None, false),
        ("a push", &at_c1, C2, &follow, None, true),
        ("the desired commit again (a retry, a resync)", &at_c1, C1, &follow, None, false),
        ("a rollback run", &at_c1, C2, &follow, Some(&run), false),
        ("a hold", &at_c1, C2, &hold, None, false),
        ("a new commit ending a hold", &at_c1, C2, &ended, None, false),
    ];
    for (row, app, commit, course, run, expected) in rows {
        assert_eq!(announces_planning(app, commit, course, run), expected, "{row}");
    }
}

#[test]
fn rule_4_a_new_commit_that_ended_a_hold_removes_rollback_from() {
    let mut app = automatic();
    app.metadata.annotations =
        Some(BTreeMap::from([(keys::ROLLBACK_FROM.to_owned(), C2.to_owned())]));
    let (planned_state, _) = first_sync(&automatic());
    let observed = Observed {
        observation: Some(planned(&planned_state)),
        course: rollback::Course::Follow { end_hold: Some(C2.into()) },
        ..Observed::default()
    };
    let decision = decide_all(&app, &observed);
    assert_eq!(decision.annotations.get(keys::ROLLBACK_FROM), Some(&None));
    assert!(matches!(decision.step, Step::Sync { .. }));
}

#[test]
fn rule_5_optional_conditions_are_removed_when_the_spec_no_longer_asks_for_them() {
    let mut app = automatic();
    let mut status = app.status.clone().unwrap_or_default();
    for type_ in [ConditionType::DependenciesReady, ConditionType::NotificationsReady] {
        let condition = NewCondition {
            type_,
            status: Status::True,
            reason: "Ready",
            message: String::new(),
            observed_generation: Some(1),
        };
        conditions::set(&mut status.conditions, condition, &at(1));
    }
    app.status = Some(status);
    let (planned_state, _) = first_sync(&automatic());
    let observed = Observed { observation: Some(planned(&planned_state)), ..Observed::default() };
    let decision = decide_all(&app, &observed);
    assert_eq!(condition_of(&decision, ConditionType::DependenciesReady), None);
    assert_eq!(condition_of(&decision, ConditionType::NotificationsReady), None);
}

#[test]
fn rule_6_a_health_check_turned_invalid_is_warned_of_once_by_a_reconcile_that_only_reports() {
    // A synced Application: its rollout completed, the plan all Unchanged.
    let (decision, settled) = applied(&automatic());
    let (revision, status) = completed_and_watched(&decision, &settled);
    let mut app = automatic();
    app.status = Some(status);
    let mut in_sync = planned_with(&web(), unchanged, PrunePlan::default(), Some(revision));
    in_sync.health = web_health(HealthState::Healthy, HealthState::Healthy);
    let observed = Observed {
        observation: Some(planned(&in_sync)),
        invalid_rules: vec![invalid_rule("deployments")],
        ..Observed::default()
    };
    let decision = decide_all(&app, &observed);
    assert_eq!(decision.step, Step::Report);
    assert_eq!(reasons(&decision.events), ["InvalidHealthCheck"]);
    // Once Ready names it, it is not repeated.
    let mut named = app.clone();
    let mut status = named.status.clone().unwrap_or_default();
    set_ready(&mut status, Status::False, "Progressing", 5);
    if let Some(ready) = status.conditions.iter_mut().find(|c| c.type_ == "Ready") {
        ready.message = "Deployment web: HealthCheck deployments failed".into();
    }
    named.status = Some(status);
    assert!(!reasons(&decide_all(&named, &observed).events).contains(&"InvalidHealthCheck"));
    // A sync does not warn here: its sync step does, once per attempt.
    let (sync_state, _) = first_sync(&automatic());
    let syncing = Observed {
        observation: Some(planned(&sync_state)),
        invalid_rules: vec![invalid_rule("deployments")],
        ..Observed::default()
    };
    let decision = decide_all(&automatic(), &syncing);
    assert!(!reasons(&decision.events).contains(&"InvalidHealthCheck"));
}

#[test]
fn rule_7_a_commit_that_cannot_be_rendered_is_recorded_on_its_own_revision_once() {
    let app = automatic();
    let failure = failed(FailureReason::RenderFailure, "bad yaml", Some(SA), Some(C2));
    let observed = Observed { observation: Some(failure), ..Observed::default() };
    let decision = decide_all(&app, &observed);
    let revision = decision.revision.clone().expect("the commit's failure is recorded");
    assert_eq!(revision.metadata.name.as_deref(), Some(unplanned_revision_name(APP, C2).as_str()));
    let status = revision.status.clone().expect("status");
    assert_eq!(status.phase, Some(RevisionPhase::Failed));
    assert_eq!(status.failure.map(|f| f.reason), Some(FailureReason::RenderFailure));
    let again = Observed { unplanned: Some(revision), ..observed };
    assert!(decide_all(&app, &again).revision.is_none(), "the same failure is not rewritten");
}
