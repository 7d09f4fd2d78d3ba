//! The Application lifecycle where the API reference is precise about it, end to end with the
//! real controller, a real Git server and the sandbox (issue 25's numbered behaviours):
//! - a prune announced as sync state `Pruning` before it runs (4);
//! - reasons: a refused prune is `PruneFailure`, a kind the API server does not serve
//!   `PlanFailure`, a `valuesFrom` read RBAC refuses `Forbidden` (3);
//! - drift that changes health moves Ready even without selfHeal (1);
//! - a Repository's source failure reaches the Applications following it, nothing pruned (2);
//! - a failure Event for every failed attempt, `status.hooks` recording a pre-sync hook that
//!   failed during the sync, one notification per lifecycle event (7);
//! - objects of a kind the service account may not list are still observed (9);
//! - a NotificationSink or a HealthCheck changing re-checks the Applications it concerns within
//!   seconds, not at the resync, and a managed kind the controller may not watch (403) is listed
//!   every few seconds instead (8).

use anyhow::Context;
use anyhow::Result;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Patch, PatchParams, PostParams};
use kuvryn_sync_api::{Application, FailureReason, Revision, RevisionPhase, SyncState};
use kuvryn_sync_core::application::unplanned_revision_name;
use kuvryn_sync_tests::application::DEADLINE;
use kuvryn_sync_tests::application::{Env, config_map, env, env_with_workloads, ready};
use kuvryn_sync_tests::apply::apply_raw;
use kuvryn_sync_tests::cluster::wait_for;
use serde_json::json;

/// Service account `name` in the test namespace, allowed `verbs` on ConfigMaps and nothing else.
async fn account_with(env: &Env, name: &str, resources: &[&str], verbs: &[&str]) -> Result<()> {
    let kinds = kuvryn_sync_apply::kinds::Kinds::default();
    let objects = [
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": name},
               "rules": [{"apiGroups": [""], "resources": resources, "verbs": verbs}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": name,
                             "namespace": env.namespace}]}),
    ];
    for object in objects {
        apply_raw(&env.cluster.client(), &kinds, &env.namespace, &object, "test-setup").await?;
    }
    Ok(())
}

/// A delete the service account may not make fails the attempt with `PruneFailure` (not
/// `Forbidden`, which is for reading and applying), naming the object and the verb.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_prune_is_prune_failure() -> Result<()> {
    let env = env("life-prune", true).await?;
    account_with(&env, "keeper", &["configmaps"], &["get", "list", "watch", "create", "patch"])
        .await?;
    let first = env
        .push(
            &[
                ("apps/web/a.yaml", config_map("stays", "1", json!({}))),
                ("apps/web/b.yaml", config_map("goes", "1", json!({}))),
            ],
            "two ConfigMaps",
        )
        .await?;
    env.create_app("web", "apps/web", json!({"serviceAccountName": "keeper"})).await?;
    env.wait_synced("web", &first).await?;
    let second = env.push_removal(&["apps/web/b.yaml"], "one less").await?;
    // maxAttempts 1: the failure is soon RetryBlocked, which keeps it in its message.
    let app = env
        .wait_app("web", "Ready=False/PruneFailure, or RetryBlocked after it", |app| {
            ready(app).is_some_and(|(s, r, m)| {
                s == "False"
                    && (r == "PruneFailure" || (r == "RetryBlocked" && m.contains("PruneFailure")))
            })
        })
        .await?;
    let message = ready(&app).map(|(_, _, m)| m).unwrap_or_default();
    assert!(message.contains("goes") && message.contains("delete"), "{message}");
    // The Revision's status is written just after the Application's.
    wait_for("the Revision records PruneFailure", DEADLINE, || async {
        let failure = env.revision("web", &second).await?.status.and_then(|s| s.failure);
        let reason = failure.map(|f| f.reason);
        Ok(((reason == Some(FailureReason::PruneFailure)).then_some(()), format!("{reason:?}")))
    })
    .await?;
    assert!(env.api::<ConfigMap>().get_opt("goes").await?.is_some());
    Ok(())
}

/// What `seen` makes of each update of Application `name`, in order, repeats left out; recorded
/// until the returned task is aborted.
fn record<T: PartialEq + Send + 'static>(
    env: &Env,
    name: &str,
    seen: impl Fn(Application) -> T + Send + 'static,
) -> (std::sync::Arc<std::sync::Mutex<Vec<T>>>, tokio::task::JoinHandle<()>) {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let states = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut updates = watcher(env.api::<Application>(), config).applied_objects().boxed();
    let recorded = std::sync::Arc::clone(&states);
    let watching = tokio::spawn(async move {
        while let Some(Ok(app)) = updates.next().await {
            let state = seen(app);
            let mut all = recorded.lock().expect("states");
            if all.last() != Some(&state) {
                all.push(state);
            }
        }
    });
    (states, watching)
}

/// A prune is a step of its own, announced before it runs: a watch of the Application sees sync
/// state `Pruning` between `Applying` and `Synced` (4), and the removed object is gone after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_is_announced_as_sync_state_pruning() -> Result<()> {
    let env = env("life-pruning", true).await?;
    let first = env
        .push(
            &[
                ("apps/web/a.yaml", config_map("stays", "1", json!({}))),
                ("apps/web/b.yaml", config_map("goes", "1", json!({}))),
            ],
            "two ConfigMaps",
        )
        .await?;
    env.create_app("web", "apps/web", json!({})).await?;
    env.wait_synced("web", &first).await?;
    // Every sync state the Application passes through from here on, in order.
    let (states, watching) =
        record(&env, "web", |app| app.status.map(|s| s.sync.state).unwrap_or_default());
    let second = env.push_removal(&["apps/web/b.yaml"], "one less").await?;
    env.wait_synced("web", &second).await?;
    let seen = || states.lock().expect("states").clone();
    wait_for("Pruning, then Synced, seen by the watch", DEADLINE, || async {
        let all = seen();
        let pruning = all.iter().position(|s| *s == SyncState::Pruning);
        let synced = all.iter().rposition(|s| *s == SyncState::Synced);
        let ordered = pruning.zip(synced).is_some_and(|(p, s)| p < s);
        Ok((ordered.then_some(()), format!("{all:?}")))
    })
    .await?;
    watching.abort();
    assert!(env.api::<ConfigMap>().get_opt("goes").await?.is_none(), "not pruned");
    assert!(env.api::<ConfigMap>().get_opt("stays").await?.is_some());
    Ok(())
}

/// A push is announced before its render: a watch of the Application sees sync state `Planning`
/// with the pushed commit as `desiredRevision`, Ready still True from the last rollout, before
/// the Applying of that commit (4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_is_announced_as_sync_state_planning_before_it_applies() -> Result<()> {
    let env = env("life-planning", true).await?;
    let first =
        env.push(&[("apps/web/a.yaml", config_map("cm", "1", json!({})))], "one ConfigMap").await?;
    env.create_app("web", "apps/web", json!({})).await?;
    env.wait_synced("web", &first).await?;
    env.wait_ready("web", "True", "Healthy").await?;
    // Every (sync state, desired revision, Ready status) the Application passes through.
    type Seen = (SyncState, Option<String>, Option<String>);
    let (states, watching) = record(&env, "web", |app| -> Seen {
        let ready = ready(&app).map(|(status, _, _)| status);
        let status = app.status.unwrap_or_default();
        (status.sync.state, status.desired_revision, ready)
    });
    let second = env.push(&[("apps/web/a.yaml", config_map("cm", "2", json!({})))], "two").await?;
    env.wait_synced("web", &second).await?;
    let seen = || states.lock().expect("states").clone();
    let is = |state: SyncState| {
        let second = second.clone();
        move |s: &Seen| s.0 == state && s.1.as_deref() == Some(second.as_str())
    };
    wait_for("Planning, then Applying, of the pushed commit", DEADLINE, || async {
        let all = seen();
        let planning = all.iter().position(is(SyncState::Planning));
        let applying = all.iter().position(is(SyncState::Applying));
        let ordered = planning.zip(applying).is_some_and(|(p, a)| p < a);
        Ok((ordered.then_some(()), format!("{all:?}")))
    })
    .await?;
    watching.abort();
    let all = seen();
    let announced = all.iter().find(|s| is(SyncState::Planning)(s)).cloned();
    let ready = announced.and_then(|(_, _, ready)| ready);
    assert_eq!(ready.as_deref(), Some("True"), "Ready kept while planning: {all:?}");
    Ok(())
}

/// A kind the API server does not serve (and no CRD in Git defines) is a plan that cannot be
/// built: `PlanFailure`, naming the kind, with nothing applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_the_server_does_not_serve_is_plan_failure() -> Result<()> {
    let env = env("life-plan", true).await?;
    let gadget = serde_json::to_string(&json!({
        "apiVersion": "nowhere.example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}}))?;
    env.push(
        &[("apps/web/cm.yaml", config_map("beside", "1", json!({}))), ("apps/web/g.yaml", gadget)],
        "an unknown kind",
    )
    .await?;
    env.create_app("web", "apps/web", json!({})).await?;
    let message = env.wait_failed("web", "PlanFailure").await?;
    assert!(message.contains("Gadget"), "{message}");
    assert!(env.api::<ConfigMap>().get_opt("beside").await?.is_none(), "applied anyway");
    Ok(())
}

/// A commit no desired state can be made of leaves a record from its first attempt on: its
/// Revision (named for the commit and an empty desired-state hash), `Failed` with
/// `RenderFailure`, written once however often the failure repeats; the next commit deploys as
/// usual and the record stays (4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_cannot_be_rendered_is_recorded_on_a_failed_revision() -> Result<()> {
    let env = env("life-unrendered", true).await?;
    let broken =
        env.push(&[("apps/web/cm.yaml", "data: [unclosed\n".to_owned())], "not YAML").await?;
    env.create_app("web", "apps/web", json!({})).await?;
    let message = env.wait_failed("web", "RenderFailure").await?;
    let record = env.revision("web", &broken).await?;
    let name = record.metadata.name.clone().unwrap_or_default();
    assert_eq!(name, unplanned_revision_name("web", &broken));
    assert_eq!(record.spec.desired_state_hash, "", "no desired state existed");
    let status = record.status.clone().unwrap_or_default();
    assert_eq!(status.phase, Some(RevisionPhase::Failed));
    assert_eq!(status.attempts, 1);
    let failure = status.failure.context("the failure")?;
    assert_eq!(failure.reason, FailureReason::RenderFailure);
    assert_eq!(failure.message, message, "the Revision says what Ready says");

    // Asked again, the same failure is not written again.
    let written = record.metadata.resource_version.clone();
    for _ in 0..2 {
        let asked = application_reconciles(&env).await?;
        env.api::<Application>()
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"annotations": {
                    "sync.kuvryn.io/reconcile-requested-at": format!("{:?}", std::time::SystemTime::now())}}})),
            )
            .await?;
        wait_for("web reconciled again", DEADLINE, || async {
            let count = application_reconciles(&env).await?;
            Ok(((count > asked).then_some(()), format!("{count} reconciles")))
        })
        .await?;
    }
    let again = env.api::<Revision>().get(&name).await?;
    assert_eq!(again.metadata.resource_version, written, "the same failure was written again");

    // The next commit deploys, and the record stays.
    let fixed =
        env.push(&[("apps/web/cm.yaml", config_map("web", "1", json!({})))], "fixed").await?;
    env.announce().await?;
    env.wait_synced("web", &fixed).await?;
    let kept = env.api::<Revision>().get(&name).await?;
    assert_eq!(kept.status.and_then(|s| s.phase), Some(RevisionPhase::Failed));
    Ok(())
}

/// Application reconciles the controller finished, from its `/metrics`.
async fn application_reconciles(env: &Env) -> Result<u64> {
    let series = r#"kuvryn_sync_reconcile_duration_seconds_count{kind="Application"}"#;
    let text = env.controller_metrics_text().await?;
    Ok(text
        .lines()
        .find_map(|line| line.strip_prefix(series))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0))
}

/// A `valuesFrom` Secret the service account may not read is `Forbidden`, not `RenderFailure`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_values_from_read_refused_by_rbac_is_forbidden() -> Result<()> {
    let mut env = env("life-values", false).await?;
    account_with(&env, "nosecrets", &["configmaps"], &["*"]).await?;
    let library = kuvryn_sync_tests::helm::libhelm();
    env.start_controller_with(&["--helm-library", &library.to_string_lossy()], &[])?;
    let chart = [
        ("apps/chart/Chart.yaml", "apiVersion: v2\nname: tiny\nversion: 0.1.0\n".to_owned()),
        (
            "apps/chart/templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tiny\ndata:\n  v: {{ .Values.v | quote }}\n"
                .to_owned(),
        ),
        ("apps/chart/values.yaml", "v: one\n".to_owned()),
    ];
    env.push(&chart, "a tiny chart").await?;
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "values"},
        "stringData": {"values.yaml": "v: two\n"}}))?;
    env.api::<Secret>().create(&PostParams::default(), &secret).await?;
    let helm = json!({"serviceAccountName": "nosecrets", "source": {"render": {"type": "helm",
        "helm": {"valuesFrom": [{"kind": "Secret", "name": "values"}]}}}});
    env.create_app("web", "apps/chart", helm).await?;
    let message = env.wait_failed("web", "Forbidden").await?;
    assert!(message.contains("valuesFrom") && message.contains("values"), "{message}");
    Ok(())
}

fn deployment(name: &str, image: &str) -> String {
    serde_json::to_string(&json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "progressDeadlineSeconds": 2,
                 "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "app", "image": image}]}}}}))
    .expect("json")
}

async fn kubectl(env: &Env, args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(env.cluster.kubeconfig())
        .args(["-n", &env.namespace])
        .args(args)
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Without selfHeal, drift that changes health is not hidden: after `kubectl set image` to an
/// image that never pulls, the Application reports Drifted and Ready follows the health
/// (False/Degraded once the Deployment's progress deadline passes), and nothing is repaired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_that_changes_health_changes_ready() -> Result<()> {
    let env = env_with_workloads("life-drift", true).await?;
    env.grant("apps", &["deployments"]).await?;
    env.push(&[("apps/web/d.yaml", deployment("web", "registry.example/web:1"))], "web").await?;
    env.create_app("web", "apps/web", json!({})).await?;
    env.wait_ready("web", "True", "Healthy").await?;
    kubectl(&env, &["set", "image", "deployment/web", "app=unreachable.invalid/web:2"]).await?;
    let app = env
        .wait_app("web", "Drifted and Ready=False/Degraded", |app| {
            app.status.as_ref().is_some_and(|s| s.sync.state == SyncState::Drifted)
                && ready(app).is_some_and(|(s, r, _)| s == "False" && r == "Degraded")
        })
        .await?;
    let message = ready(&app).map(|(_, _, m)| m).unwrap_or_default();
    assert!(message.contains("web"), "{message}");
    let image = kubectl(
        &env,
        &["get", "deployment/web", "-o", "jsonpath={.spec.template.spec.containers[0].image}"],
    )
    .await?;
    assert_eq!(image, "unreachable.invalid/web:2", "drift was repaired without selfHeal");
    env.wait_event("web", "HealthDegraded").await?;
    Ok(())
}

/// A synced Application whose branch is deleted at the Git server reports its Repository's
/// failure (`Ready=False/SourceFailure`) instead of staying Ready on the cached commit, and
/// nothing is pruned while the source fails; the branch back, it is Ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_source_reaches_the_application_and_prunes_nothing() -> Result<()> {
    let env = env("life-source", true).await?;
    let commit =
        env.push(&[("apps/web/cm.yaml", config_map("kept", "1", json!({})))], "one").await?;
    env.create_app("web", "apps/web", json!({})).await?;
    env.wait_ready("web", "True", "Healthy").await?;
    // Git refuses to push the deletion of a bare repository's HEAD branch: delete it there.
    let deleted = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&env.repo.path)
        .args(["update-ref", "-d", "refs/heads/main"])
        .status()?;
    anyhow::ensure!(deleted.success(), "git update-ref -d refs/heads/main");
    env.announce().await?;
    let message = env.wait_failed("web", "SourceFailure").await?;
    assert!(message.contains("main"), "{message}");
    assert!(env.api::<ConfigMap>().get_opt("kept").await?.is_some(), "pruned on a source failure");
    env.repo.push(&format!("{commit}:refs/heads/main"))?;
    env.announce().await?;
    env.wait_ready("web", "True", "Healthy").await?;
    let apps = env.api::<Application>();
    let app = apps.get("web").await?;
    assert_eq!(app.status.and_then(|s| s.deployed_revision), Some(commit));
    Ok(())
}

/// Every failed Revision attempt is a failure Event, not only the one that changed Ready: a
/// Deployment that never becomes ready under `maxAttempts: 2` fails twice with TimeoutFailure
/// (two Events, counted in kuvryn_sync_lifecycle_events_total) before RetryBlocked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failed_attempt_is_a_failure_event() -> Result<()> {
    let env = env_with_workloads("life-events", true).await?;
    env.grant("apps", &["deployments"]).await?;
    let unready = serde_json::to_string(&json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "slow"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "slow"}},
                 "template": {"metadata": {"labels": {"app": "slow"}},
                              "spec": {"containers": [{"name": "app",
                                  "image": "registry.example/slow:1",
                                  "env": [{"name": "KSYNC_SIMULATE", "value": "unready"}],
                                  "readinessProbe": {"httpGet": {"path": "/ready",
                                                                 "port": 8080}}}]}}}}))?;
    env.push(&[("apps/slow/d.yaml", unready)], "never ready").await?;
    let policy = json!({"health": {"timeout": "2s"},
                        "strategy": {"failurePolicy": {"maxAttempts": 2}}});
    env.create_app("slow", "apps/slow", policy).await?;
    env.wait_ready("slow", "False", "RetryBlocked").await?;
    let count = |samples: &[(Vec<String>, u64)], reason: &str| {
        let label = format!("reason=\"{reason}\"");
        samples.iter().filter(|(labels, _)| labels.contains(&label)).map(|(_, n)| n).sum::<u64>()
    };
    // The Events (and their counts) follow the status write that made Ready RetryBlocked.
    let samples = wait_for("the RetryBlocked Event", DEADLINE, || async {
        let samples = env.controller_counter("kuvryn_sync_lifecycle_events_total").await?;
        let seen = count(&samples, "RetryBlocked") > 0;
        Ok((seen.then(|| samples.clone()), format!("{samples:?}")))
    })
    .await?;
    let count = |reason: &str| count(&samples, reason);
    assert_eq!(count("TimeoutFailure"), 2, "{samples:?}");
    assert_eq!(count("RetryBlocked"), 1, "{samples:?}");
    // The same Event recorded again is aggregated as Kubernetes' recorders do: one object per
    // distinct note, its series counting the recordings.
    let events: Vec<k8s_openapi::api::events::v1::Event> =
        env.api::<k8s_openapi::api::events::v1::Event>().list(&Default::default()).await?.items;
    let timeouts: Vec<_> = events
        .iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("slow"))
        .filter(|e| e.reason.as_deref() == Some("TimeoutFailure"))
        .collect();
    let notes: std::collections::BTreeSet<_> = timeouts.iter().map(|e| e.note.clone()).collect();
    assert_eq!(timeouts.len(), notes.len(), "one Event per distinct note: {timeouts:#?}");
    let recorded: i32 = timeouts.iter().map(|e| e.series.as_ref().map_or(1, |s| s.count)).sum();
    println!("TimeoutFailure: {} Event object(s) for {recorded} recordings", timeouts.len());
    assert_eq!(recorded, 2, "{timeouts:#?}");
    Ok(())
}

/// A pre-sync hook that fails during the sync step is recorded in the Revision's
/// `status.hooks` as Failed, with the attempt's HookFailed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_sync_hook_that_fails_is_recorded_in_status_hooks() -> Result<()> {
    let env = env_with_workloads("life-hooks", true).await?;
    env.grant("batch", &["jobs"]).await?;
    let job = serde_json::to_string(&json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "migrate", "annotations": {kuvryn_sync_api::keys::HOOK: "pre-sync"}},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "run", "image": "registry.example/tools:1",
                            "env": [{"name": "KSYNC_SIMULATE", "value": "crash"}]}]}}}}))?;
    let commit = env
        .push(
            &[
                ("apps/bad/job.yaml", job),
                ("apps/bad/cm.yaml", config_map("after", "1", json!({}))),
            ],
            "a failing hook",
        )
        .await?;
    env.create_app("bad", "apps/bad", json!({})).await?;
    env.wait_failed("bad", "HookFailed").await?;
    let hooks = wait_for("status.hooks records the failed hook", DEADLINE, || async {
        let hooks = env.revision("bad", &commit).await?.status.map(|s| s.hooks).unwrap_or_default();
        let failed = hooks
            .iter()
            .any(|h| h.resource.name == "migrate" && h.state == kuvryn_sync_api::HookState::Failed);
        Ok((failed.then(|| hooks.clone()), format!("{hooks:?}")))
    })
    .await?;
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0].stage, kuvryn_sync_api::HookStage::PreSync);
    Ok(())
}

/// Exactly one notification per lifecycle event: a rollout that times out under the default
/// `pause` policy (one attempt) sends one Failed, not a second one when retries stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_under_pause_sends_one_failed_notification() -> Result<()> {
    use kuvryn_sync_tests::receiver::{Receiver, Script};
    let mut env = env_with_workloads("life-notify", false).await?;
    env.grant("apps", &["deployments"]).await?;
    let receiver = Receiver::start(Script::Accept).await?;
    let bundle = receiver.ca_bundle();
    let bundle = bundle.to_str().unwrap_or_default().to_owned();
    env.start_controller(&[("SSL_CERT_FILE", &bundle)])?;
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "audit-secret"},
        "stringData": {"url": receiver.url, "hmacKey": "lifecycle-e2e-hmac"}}))?;
    env.api::<Secret>().create(&PostParams::default(), &secret).await?;
    let sink: kuvryn_sync_api::NotificationSink = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "NotificationSink",
        "metadata": {"name": "audit"},
        "spec": {"type": "webhook", "secretRef": {"name": "audit-secret"}}}))?;
    env.api::<kuvryn_sync_api::NotificationSink>().create(&PostParams::default(), &sink).await?;
    let unready = serde_json::to_string(&json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "slow"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "slow"}},
                 "template": {"metadata": {"labels": {"app": "slow"}},
                              "spec": {"containers": [{"name": "app",
                                  "image": "registry.example/slow:1",
                                  "env": [{"name": "KSYNC_SIMULATE", "value": "unready"}],
                                  "readinessProbe": {"httpGet": {"path": "/ready",
                                                                 "port": 8080}}}]}}}}))?;
    env.push(&[("apps/slow/d.yaml", unready)], "never ready").await?;
    let spec = json!({"health": {"timeout": "2s"},
        "notifications": [{"sinkRef": {"name": "audit"}, "events": ["Healthy", "Failed"]}]});
    env.create_app("slow", "apps/slow", spec).await?;
    env.wait_ready("slow", "False", "RetryBlocked").await?;
    env.wait_event("slow", "RetryBlocked").await?;
    // A sink receives its notifications in order: once a fixed commit's Healthy arrives, any
    // second Failed would have arrived before it.
    let ready = serde_json::to_string(&json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "slow"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "slow"}},
                 "template": {"metadata": {"labels": {"app": "slow"}},
                              "spec": {"containers": [{"name": "app",
                                  "image": "registry.example/slow:2"}]}}}}))?;
    env.push(&[("apps/slow/d.yaml", ready)], "ready").await?;
    env.wait_ready("slow", "True", "Healthy").await?;
    wait_for("the Healthy notification", DEADLINE, || async {
        let healthy = receiver.with("event", "Healthy");
        Ok(((!healthy.is_empty()).then_some(()), format!("{:?}", receiver.received())))
    })
    .await?;
    let failed = receiver.with("event", "Failed");
    assert_eq!(failed.len(), 1, "{:?}", receiver.received());
    assert!(failed[0].json()["message"].as_str().is_some_and(|m| m.contains("slow")));
    Ok(())
}

/// A service account that may not list a managed kind (`PruneInventoryIncomplete`) still has
/// its desired objects of that kind read one by one, so their health is observed and the
/// rollout ends Healthy instead of a false TimeoutFailure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_of_a_kind_the_account_may_not_list_are_still_observed() -> Result<()> {
    let env = env("life-unlisted", true).await?;
    account_with(&env, "nolist", &["configmaps"], &["get", "create", "patch", "update"]).await?;
    let commit =
        env.push(&[("apps/web/cm.yaml", config_map("seen", "1", json!({})))], "one").await?;
    env.create_app(
        "web",
        "apps/web",
        json!({"serviceAccountName": "nolist",
                                            "health": {"timeout": "3s"}}),
    )
    .await?;
    env.wait_event("web", "PruneInventoryIncomplete").await?;
    let message = env.wait_ready("web", "True", "Healthy").await?;
    assert!(message.contains(&commit), "{message}");
    Ok(())
}

/// An Application reacts within seconds, not at the resync, to the NotificationSink it
/// subscribes to: missing, it is NotificationsReady=False/SinkInvalid; created (its Secret
/// first), NotificationsReady=True/SinksReady follows at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_created_later_is_seen_within_seconds() -> Result<()> {
    let env = env("life-sink", true).await?;
    env.push(&[("apps/web/cm.yaml", config_map("web", "1", json!({})))], "one").await?;
    let spec = json!({"notifications": [{"sinkRef": {"name": "audit"}, "events": ["Failed"]}]});
    env.create_app("web", "apps/web", spec).await?;
    let notifications = |app: &Application| {
        app.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "NotificationsReady")
            .map(|c| (c.status.clone(), c.reason.clone()))
    };
    env.wait_app("web", "NotificationsReady=False/SinkInvalid", |app| {
        notifications(app) == Some(("False".into(), "SinkInvalid".into()))
    })
    .await?;
    env.wait_ready("web", "True", "Healthy").await?;
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "audit-secret"},
        "stringData": {"url": "https://127.0.0.1:9/hook", "hmacKey": "lifecycle-e2e-hmac"}}))?;
    env.api::<Secret>().create(&PostParams::default(), &secret).await?;
    let sink: kuvryn_sync_api::NotificationSink = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "NotificationSink",
        "metadata": {"name": "audit"},
        "spec": {"type": "webhook", "secretRef": {"name": "audit-secret"}}}))?;
    env.api::<kuvryn_sync_api::NotificationSink>().create(&PostParams::default(), &sink).await?;
    let start = std::time::Instant::now();
    wait_for("NotificationsReady=True within 10 s", std::time::Duration::from_secs(10), || async {
        let app = env.api::<Application>().get("web").await?;
        let seen = notifications(&app);
        Ok((
            (seen == Some(("True".into(), "SinksReady".into()))).then_some(()),
            format!("{seen:?}"),
        ))
    })
    .await?;
    println!("sink seen in {:?}", start.elapsed());
    Ok(())
}

/// A HealthCheck created for a kind an Application already manages re-observes that
/// Application within seconds: a rule marking its ConfigMaps Degraded turns a Healthy
/// Application Ready=False/Degraded without a new commit or the resync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_change_is_seen_within_seconds() -> Result<()> {
    let env = env("life-check", true).await?;
    let ns = env.namespace.clone();
    env.push(&[("apps/web/cm.yaml", config_map("marked", "1", json!({})))], "one").await?;
    env.create_app("web", "apps/web", json!({})).await?;
    env.wait_ready("web", "True", "Healthy").await?;
    let check: kuvryn_sync_api::HealthCheck = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "HealthCheck",
        "metadata": {"name": format!("{ns}-configmaps")},
        "spec": {"group": "", "kind": "ConfigMap", "rules": [
            {"expression": format!("object.metadata.namespace == '{ns}'"),
             "state": "Degraded", "message": "marked by the test"}]}}))?;
    let checks = kube::Api::<kuvryn_sync_api::HealthCheck>::all(env.cluster.client());
    checks.create(&PostParams::default(), &check).await?;
    let seen = wait_for(
        "Ready=False/Degraded within 10 s",
        std::time::Duration::from_secs(10),
        || async {
            let app = env.api::<Application>().get("web").await?;
            let now = ready(&app);
            let degraded = now.as_ref().is_some_and(|(s, r, _)| s == "False" && r == "Degraded");
            Ok((degraded.then(|| now.clone()), format!("{now:?}")))
        },
    )
    .await;
    checks.delete(&format!("{ns}-configmaps"), &Default::default()).await?;
    let message = seen?.map(|(_, _, m)| m).unwrap_or_default();
    assert!(message.contains("marked by the test"), "{message}");
    Ok(())
}

/// A managed kind the controller may not watch (the API server answers 403) is listed every few
/// seconds instead: drift of a managed ConfigMap under selfHeal is repaired within seconds, not
/// at the five-minute resync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_the_controller_may_not_watch_is_listed_instead() -> Result<()> {
    use anyhow::Context as _;
    if kuvryn_sync_tests::cluster::skip_on_real_cluster(
        "a_kind_the_controller_may_not_watch_is_listed_instead",
        "a 403 the sandbox injects on the controller's watches of one resource",
    ) {
        return Ok(());
    }
    const CONTROLLER_USER: &str = "kuvryn-sync-controller-no-watch";
    let mut env = env("life-nowatch", false).await?;
    let sandbox = env.cluster.sandbox().context("sandbox")?;
    let kubeconfig = sandbox.user_kubeconfig(CONTROLLER_USER, &["system:masters"])?;
    let kubeconfig = kubeconfig.to_str().context("kubeconfig path")?.to_owned();
    sandbox.set_fault(
        "watch",
        ksync_sandbox::Fault {
            error_rate: 1.0,
            error_code: 403,
            only_user: Some(CONTROLLER_USER.to_owned()),
            only_resource: Some("configmaps".to_owned()),
            ..ksync_sandbox::Fault::default()
        },
    );
    env.start_controller(&[("KUBECONFIG", kubeconfig.as_str())])?;
    env.push(&[("apps/web/cm.yaml", config_map("web", "1", json!({})))], "one").await?;
    env.create_app("web", "apps/web", json!({"sync": {"selfHeal": true}})).await?;
    env.wait_ready("web", "True", "Healthy").await?;
    let drift = json!({"data": {"value": "drifted"}});
    env.api::<ConfigMap>()
        .patch("web", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&drift))
        .await?;
    wait_for("the drift repaired within 30 s", std::time::Duration::from_secs(30), || async {
        let cm = env.api::<ConfigMap>().get("web").await?;
        let value = cm.data.and_then(|d| d.get("value").cloned());
        Ok(((value.as_deref() == Some("1")).then_some(()), format!("{value:?}")))
    })
    .await?;
    let log = env.controller_log();
    assert!(log.contains("may not watch this managed kind"), "the fallback was not taken");
    Ok(())
}
