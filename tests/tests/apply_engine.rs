//! The apply engine against the API server (the sandbox, or a real cluster through
//! `KSYNC_E2E_KUBECONFIG`), acting as an Application's service account: plan with server-side
//! dry-run, apply under the Application's field manager, conflicts with another manager (and
//! adopting them), prune with high-risk kinds kept, and a service account without rights.

use kuvryn_sync_core::failure::StepFailure;
use std::collections::BTreeSet;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kuvryn_sync_api::{ManagedKind, PlanAction, keys};
use kuvryn_sync_apply::clients::ImpersonatedClients;
use kuvryn_sync_apply::engine::{Engine, EngineError};
use kuvryn_sync_apply::kinds::Kinds;
use kuvryn_sync_apply::memo::DryRunMemo;
use kuvryn_sync_core::desired::{DesiredState, GroupKind};
use kuvryn_sync_core::field_manager;
use kuvryn_sync_core::plan::plan;
use kuvryn_sync_core::prune::{KeepReason, plan_prune};
use kuvryn_sync_tests::apply::{desired_state, grant_deployer, observe};
use kuvryn_sync_tests::cluster::TestCluster;
use serde_json::{Value, json};

const CANARY: &str = "canary-secret-value-31f9";
const REVISION: &str = "web-0001";

fn config_map(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": value}})
}

fn secret() -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
           "stringData": {"password": CANARY}})
}

async fn desired(
    client: &kube::Client,
    kinds: &Kinds,
    namespace: &str,
    objects: Vec<Value>,
) -> Result<DesiredState> {
    desired_state(client, kinds, "web", namespace, objects).await
}

fn actions(plan: &kuvryn_sync_core::plan::Plan) -> Vec<(String, PlanAction, Vec<String>)> {
    plan.changes
        .iter()
        .map(|c| (format!("{}/{}", c.resource.kind, c.resource.name), c.action, c.fields.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_apply_conflict_adopt_prune_and_forbidden_as_the_service_account() -> Result<()> {
    let cluster = TestCluster::start().await?;
    let namespace = cluster.namespace("apply").await?;
    let admin = cluster.client();
    grant_deployer(&admin, &namespace, &["configmaps", "secrets"]).await?;
    let kubeconfig = kube::config::Kubeconfig::read_from(cluster.kubeconfig())?;
    let base = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let clients = ImpersonatedClients::new(base, 8);
    let client = clients.for_service_account(&namespace, "deployer")?;
    let kinds = Kinds::default();
    let manager = field_manager::for_application(&namespace, "web");
    let engine = Engine {
        client: &client,
        kinds: &kinds,
        field_manager: &manager,
        adopt: false,
        memo: None,
        shared: None,
    };

    // First plan: everything is created; the plan holds paths, never the Secret's value.
    let state = desired(
        &admin,
        &kinds,
        &namespace,
        vec![
            config_map("one", "1"),
            config_map("two", "2"),
            config_map("shared", "ours"),
            secret(),
        ],
    )
    .await?;
    let observations = observe(&engine, "web", &namespace, &state, REVISION).await?;
    let first = plan(&state.hash, &observations, &Default::default());
    assert!(
        actions(&first).iter().all(|(_, action, _)| *action == PlanAction::Create),
        "{:?}",
        actions(&first)
    );
    assert!(!serde_json::to_string(&first.summary())?.contains(CANARY));
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &namespace);
    assert!(cms.get_opt("one").await?.is_none(), "a plan writes nothing");

    // Apply: our labels, the revision annotation and the Application's field manager.
    let all: Vec<_> = state.objects.iter().collect();
    engine.apply(&all, REVISION).await?;
    let one = cms.get("one").await?;
    let labels = one.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(keys::APPLICATION).map(String::as_str), Some("web"));
    assert_eq!(labels.get(keys::APPLICATION_NAMESPACE), Some(&namespace));
    let annotations = one.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get(keys::REVISION).map(String::as_str), Some(REVISION));
    let managers: Vec<_> =
        one.metadata.managed_fields.iter().flatten().filter_map(|m| m.manager.clone()).collect();
    assert_eq!(managers, vec![manager.clone()]);

    // Re-plan with nothing changed: all Unchanged, and planning wrote nothing.
    let version = one.metadata.resource_version.clone();
    let again = plan(
        &state.hash,
        &observe(&engine, "web", &namespace, &state, REVISION).await?,
        &Default::default(),
    );
    assert!(
        actions(&again).iter().all(|(_, a, _)| *a == PlanAction::Unchanged),
        "{:?}",
        actions(&again)
    );
    assert_eq!(cms.get("one").await?.metadata.resource_version, version);

    // One changed field in Git: only that object is an Update, naming the field.
    let changed = desired(
        &admin,
        &kinds,
        &namespace,
        vec![
            config_map("one", "1"),
            config_map("two", "22"),
            config_map("shared", "ours"),
            secret(),
        ],
    )
    .await?;
    let update = plan(
        &changed.hash,
        &observe(&engine, "web", &namespace, &changed, REVISION).await?,
        &Default::default(),
    );
    let updates: Vec<_> =
        actions(&update).into_iter().filter(|(_, a, _)| *a != PlanAction::Unchanged).collect();
    assert_eq!(
        updates,
        vec![("ConfigMap/two".to_owned(), PlanAction::Update, vec![".data.a".to_owned()])]
    );

    // Another manager takes .data.a of "shared": our plan reports the conflict by field and manager.
    let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}, "data": {"a": "theirs"}});
    cms.patch("shared", &PatchParams::apply("other-team").force(), &Patch::Apply(&theirs)).await?;
    let observed = observe(&engine, "web", &namespace, &state, REVISION).await?;
    let conflicted = plan(&state.hash, &observed, &Default::default());
    assert_eq!(conflicted.conflicts.len(), 1, "{:?}", conflicted.conflicts);
    let (key, fields) = &conflicted.conflicts[0];
    assert_eq!(key.name, "shared");
    assert_eq!((fields[0].field.as_str(), fields[0].manager.as_str()), (".data.a", "other-team"));
    // Under adopt the dry run forces, and the plan lists the previous manager.
    let adopter = Engine {
        adopt: true,
        ..Engine {
            client: &client,
            kinds: &kinds,
            field_manager: &manager,
            adopt: false,
            memo: None,
            shared: None,
        }
    };
    let adopted = plan(
        &state.hash,
        &observe(&adopter, "web", &namespace, &state, REVISION).await?,
        &Default::default(),
    );
    let shared = adopted.changes.iter().find(|c| c.resource.name == "shared").context("shared")?;
    assert_eq!(shared.action, PlanAction::Update);
    assert_eq!(shared.adopted.first().map(|a| a.previous_manager.as_str()), Some("other-team"));
    assert!(adopted.conflicts.is_empty());
    adopter.apply(&all, REVISION).await?;
    assert_eq!(
        cms.get("shared").await?.data.unwrap_or_default().get("a").map(String::as_str),
        Some("ours")
    );

    // Prune: "two" and the Secret leave desired state; the Secret is high-risk and kept.
    let smaller = desired(
        &admin,
        &kinds,
        &namespace,
        vec![config_map("one", "1"), config_map("shared", "ours")],
    )
    .await?;
    let kinds_in_use = [("ConfigMap", true), ("Secret", true)].map(|(kind, namespaced)| {
        ManagedKind { api_version: "v1".to_owned(), kind: kind.to_owned(), namespaced }
    });
    let managed = engine.inventory(&namespace, "web", &namespace, &kinds_in_use).await?.managed();
    let wanted: BTreeSet<_> = smaller.objects.iter().map(|o| o.key.clone()).collect();
    let managed_kinds: BTreeSet<_> =
        [GroupKind::new("", "ConfigMap"), GroupKind::new("", "Secret")].into();
    let prune = plan_prune(&wanted, &managed_kinds, &managed);
    assert_eq!(prune.delete.iter().map(|o| o.key.name.as_str()).collect::<Vec<_>>(), vec!["two"]);
    assert_eq!(
        prune.keep.iter().map(|(o, r)| (o.key.name.as_str(), *r)).collect::<Vec<_>>(),
        vec![("db", KeepReason::HighRisk)]
    );
    engine.delete(&prune.delete).await?;
    assert!(cms.get_opt("two").await?.is_none(), "pruned");
    assert!(
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(admin.clone(), &namespace)
            .get_opt("db")
            .await?
            .is_some(),
        "kept"
    );

    // An object first created with a client-side `kubectl apply` is taken over without a conflict.
    let manifest = tempfile::NamedTempFile::new()?;
    std::fs::write(
        manifest.path(),
        serde_json::to_string(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "by-hand", "namespace": namespace}, "data": {"a": "by hand"}}))?,
    )?;
    let kubectl = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .args(["apply", "-f"])
        .arg(manifest.path())
        .output()
        .await?;
    assert!(kubectl.status.success(), "{}", String::from_utf8_lossy(&kubectl.stderr));
    let by_hand =
        desired(&admin, &kinds, &namespace, vec![config_map("by-hand", "from git")]).await?;
    let taken = plan(
        &by_hand.hash,
        &observe(&engine, "web", &namespace, &by_hand, REVISION).await?,
        &Default::default(),
    );
    assert!(taken.conflicts.is_empty(), "{:?}", taken.conflicts);
    // The labels are new as a whole; the field Git changes is named.
    assert_eq!(
        actions(&taken),
        vec![(
            "ConfigMap/by-hand".to_owned(),
            PlanAction::Update,
            vec![
                ".data.a".to_owned(),
                ".metadata.annotations.sync.kuvryn.io/revision".to_owned(),
                ".metadata.labels".to_owned(),
            ]
        )]
    );
    let by_hand_objects: Vec<_> = by_hand.objects.iter().collect();
    engine.apply(&by_hand_objects, REVISION).await?;
    assert_eq!(
        cms.get("by-hand").await?.data.unwrap_or_default().get("a").map(String::as_str),
        Some("from git")
    );

    // A service account without rights: Forbidden, naming the verb and the resource.
    let nobody = clients.for_service_account(&namespace, "nobody")?;
    let denied = Engine {
        client: &nobody,
        kinds: &kinds,
        field_manager: &manager,
        adopt: false,
        memo: None,
        shared: None,
    };
    let err = observe(&denied, "web", &namespace, &state, REVISION).await.expect_err("forbidden");
    let EngineError::Forbidden { verb, resource, .. } = &err else {
        panic!("Forbidden, got {err}")
    };
    assert_eq!(*verb, "patch");
    assert!(resource.contains("ConfigMap") && resource.contains(&namespace), "{resource}");
    assert_eq!(err.reason(), kuvryn_sync_api::FailureReason::Forbidden);
    Ok(())
}

/// A remembered dry run is not sent again while the object's fields under our manager are
/// untouched, and is sent again once an edit takes one of them. "Not sent" is shown by taking
/// the service account's right to patch: a dry run would be refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_dry_run_is_skipped_until_an_edit_takes_a_managed_field() -> Result<()> {
    let cluster = TestCluster::start().await?;
    let namespace = cluster.namespace("memo").await?;
    let admin = cluster.client();
    grant_deployer(&admin, &namespace, &["configmaps"]).await?;
    let kubeconfig = kube::config::Kubeconfig::read_from(cluster.kubeconfig())?;
    let base = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let client = ImpersonatedClients::new(base, 8).for_service_account(&namespace, "deployer")?;
    let kinds = Kinds::default();
    let manager = field_manager::for_application(&namespace, "web");
    let memo = DryRunMemo::new(std::time::Duration::from_secs(600));
    let engine = Engine {
        client: &client,
        kinds: &kinds,
        field_manager: &manager,
        adopt: false,
        memo: Some(&memo),
        shared: None,
    };
    let state =
        desired(&admin, &kinds, &namespace, vec![config_map("one", "1"), config_map("two", "2")])
            .await?;
    let all: Vec<_> = state.objects.iter().collect();
    engine.apply(&all, REVISION).await?;
    assert_eq!(memo.len(), 2, "each apply is remembered");

    // Read-only now: a dry run would be Forbidden.
    let read_only = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "deployer"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]});
    kuvryn_sync_tests::apply::apply_raw(&admin, &kinds, &namespace, &read_only, "test-setup")
        .await?;
    // A status-like write by another manager to a field we do not hold changes nothing for us.
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &namespace);
    let other = PatchParams { field_manager: Some("other-writer".into()), ..Default::default() };
    cms.patch("one", &other, &Patch::Merge(json!({"data": {"b": "theirs"}}))).await?;
    let observations = observe(&engine, "web", &namespace, &state, REVISION).await?;
    let unchanged = plan(&state.hash, &observations, &Default::default());
    assert!(
        actions(&unchanged).iter().all(|(_, a, _)| *a == PlanAction::Unchanged),
        "{:?}",
        actions(&unchanged)
    );

    // An edit of a field we hold moves it to the editor: the dry run is sent (and refused).
    let edit = PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() };
    cms.patch("two", &edit, &Patch::Merge(json!({"data": {"a": "edited"}}))).await?;
    let err = observe(&engine, "web", &namespace, &state, REVISION).await.expect_err("dry run");
    assert!(
        matches!(&err, EngineError::Forbidden { verb: "patch", resource, .. }
        if resource.contains("two")),
        "{err}"
    );

    // With the right back, the plan names the edited field.
    grant_deployer(&admin, &namespace, &["configmaps"]).await?;
    let observations = observe(&engine, "web", &namespace, &state, REVISION).await?;
    let drift = plan(&state.hash, &observations, &Default::default());
    let changes: Vec<_> =
        actions(&drift).into_iter().filter(|(_, a, _)| *a != PlanAction::Unchanged).collect();
    assert_eq!(
        changes,
        vec![("ConfigMap/two".to_owned(), PlanAction::Update, vec![".data.a".to_owned()])]
    );
    Ok(())
}

/// The rollout runner takes one step per call and never waits: wave 0 applied, then (wave 0
/// Progressing by the injected health) a requeue with wave 1 untouched, a TimeoutFailure once the
/// injected clock passes the deadline, and (wave 0 Healthy) wave 1 applied as the last group,
/// which ends the rollout with the prune.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_takes_one_step_per_call_with_the_clock_and_health_it_is_given() -> Result<()> {
    use std::sync::Mutex;
    use std::time::Duration;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kuvryn_sync_api::{FailureReason, HealthState};
    use kuvryn_sync_apply::runner::{Outcome, Rollout, Runner};
    use kuvryn_sync_core::advance;
    use kuvryn_sync_core::desired::ObjectKey;

    let cluster = TestCluster::start().await?;
    let namespace = cluster.namespace("runner").await?;
    let admin = cluster.client();
    grant_deployer(&admin, &namespace, &["configmaps"]).await?;
    let kubeconfig = kube::config::Kubeconfig::read_from(cluster.kubeconfig())?;
    let base = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let clients = ImpersonatedClients::new(base, 8);
    let client = clients.for_service_account(&namespace, "deployer")?;
    let kinds = Kinds::default();
    let manager = field_manager::for_application(&namespace, "web");
    let engine = Engine {
        client: &client,
        kinds: &kinds,
        field_manager: &manager,
        adopt: false,
        memo: None,
        shared: None,
    };
    let mut second = config_map("second", "2");
    second["metadata"]["annotations"] = json!({keys::SYNC_WAVE: "1"});
    let state = desired(&admin, &kinds, &namespace, vec![config_map("first", "1"), second]).await?;
    let key = |name: &str| {
        state
            .objects
            .iter()
            .find(|o| o.key.name == name)
            .map(|o| o.key.clone())
            .with_context(|| name.to_owned())
    };
    let (first_key, second_key) = (key("first")?, key("second")?);

    let start = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000)?;
    let clock_at = Mutex::new(Time(start));
    let first_state = Mutex::new(HealthState::Progressing);
    let clock = || clock_at.lock().expect("clock").clone();
    let health = |key: &ObjectKey| {
        let state = if key.name == "first" {
            *first_state.lock().expect("health")
        } else {
            HealthState::Progressing
        };
        Some((state, format!("{} is {}", key.name, state.as_str())))
    };
    let timer = || Box::new(()) as Box<dyn Send>;
    let runner = Runner { engine: &engine, health: &health, clock: &clock, timer: &timer };
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), &namespace);
    let started = Time(start);
    let step = |changed: BTreeSet<ObjectKey>| {
        let (runner, state, started) = (&runner, &state, &started);
        async move {
            let rollout = Rollout {
                objects: &state.objects,
                changed: &changed,
                hooks: &[],
                revision: REVISION,
                prune: &[],
                started,
                timeout: Duration::from_secs(60),
                crd_timeout: Duration::from_secs(30),
                pruning: false,
            };
            runner.step(&rollout).await
        }
    };

    // Both absent: wave 0 is applied, and the caller looks again shortly.
    let outcome = step(BTreeSet::from([first_key.clone(), second_key.clone()])).await;
    assert_eq!(outcome, Outcome::Requeue(advance::AFTER_APPLY));
    assert!(configmaps.get_opt("first").await?.is_some(), "wave 0 applied");
    assert!(configmaps.get_opt("second").await?.is_none(), "wave 1 waits");

    // Wave 0 still Progressing: look again, nothing applied.
    *clock_at.lock().expect("clock") = Time(start + Duration::from_secs(10));
    let outcome = step(BTreeSet::from([second_key.clone()])).await;
    assert_eq!(outcome, Outcome::Requeue(advance::WAIT_EVERY));
    assert!(configmaps.get_opt("second").await?.is_none(), "wave 1 waits");

    // Past the deadline: TimeoutFailure on wave 0's object.
    *clock_at.lock().expect("clock") = Time(start + Duration::from_secs(61));
    let Outcome::Failed(StepFailure { reason, message, resource }) =
        step(BTreeSet::from([second_key.clone()])).await
    else {
        anyhow::bail!("expected a failure");
    };
    assert_eq!((reason, resource.as_deref()), (FailureReason::TimeoutFailure, Some(&first_key)));
    assert!(message.contains("later groups were not applied"), "{message}");

    // Wave 0 Healthy in time: wave 1, the last group, is applied and the rollout is done.
    *clock_at.lock().expect("clock") = Time(start + Duration::from_secs(20));
    *first_state.lock().expect("health") = HealthState::Healthy;
    assert_eq!(step(BTreeSet::from([second_key])).await, Outcome::Done);
    assert!(configmaps.get_opt("second").await?.is_some(), "wave 1 applied");
    Ok(())
}
