//! Rollback end to end: the real controller and webhook (registered fail-closed, as the chart
//! does), the real `ksync`, a git daemon, and the sandbox with `--simulate-workloads` (or a real
//! cluster through KSYNC_E2E_KUBECONFIG).
//!
//! - `failurePolicy.action: rollback` returns to the good commit at once, holds the failed one
//!   across polls and a controller restart (no apply request for it), and a new commit ends
//!   the hold;
//! - `ksync rollback` as an impersonated user is recorded under that user; a target of another
//!   Application and hand-set audit annotations are refused; a rollback to the held commit lifts
//!   the hold;
//! - a target the service account may no longer create is abandoned; after an abandoned
//!   automatic rollback the failed commit's retries end in RetryBlocked;
//! - under manual sync a matching request is approved under the requester, and a changed
//!   `spec.strategy` waits for `ksync sync`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Patch, PatchParams};
use kuvryn_sync_api::{Application, Revision, RevisionPhase, keys};
use kuvryn_sync_core::rollback;
use kuvryn_sync_tests::application::{Env, config_map, env, env_with_workloads};
use kuvryn_sync_tests::cli::Ksync;
use kuvryn_sync_tests::cluster::skip_on_real_cluster;
use kuvryn_sync_tests::webhook::WebhookProcess;
use serde_json::{Value, json};

fn deployment(name: &str, unready: bool) -> String {
    let mut container = json!({"name": "app", "image": "registry.example/web:1"});
    if unready {
        container["env"] = json!([{"name": "KSYNC_SIMULATE", "value": "unready"}]);
        container["readinessProbe"] = json!({"httpGet": {"path": "/ready", "port": 8080}});
    }
    serde_json::to_string(&json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [container]}}},
    }))
    .expect("json")
}

async fn settings(env: &Env) -> Result<String> {
    let cm = env.api::<ConfigMap>().get("settings").await?;
    cm.data.and_then(|d| d.get("value").cloned()).context("settings has a value")
}

/// The annotations of Application `name`.
async fn annotations(env: &Env, name: &str) -> Result<std::collections::BTreeMap<String, String>> {
    Ok(env.api::<Application>().get(name).await?.metadata.annotations.unwrap_or_default())
}

/// The `RolledBack` condition of a Revision: (status, reason).
fn rolled_back(revision: &Revision) -> Option<(String, String)> {
    revision
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "RolledBack")
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// kubectl as `user`: (succeeded, output).
async fn kubectl_as(env: &Env, user: &str, args: &[&str]) -> Result<(bool, String)> {
    let output = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(env.cluster.kubeconfig())
        .args(["--as", user, "-n", &env.namespace])
        .args(args)
        .output()
        .await?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok((output.status.success(), text))
}

/// Let `user` read and annotate Applications and read Revisions in the test namespace.
async fn grant_user(env: &Env, user: &str) -> Result<()> {
    let kinds = kuvryn_sync_apply::kinds::Kinds::default();
    let name = format!("rollback-{user}");
    for object in [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": name},
               "rules": [{"apiGroups": ["sync.kuvryn.io"], "resources": ["applications", "revisions"],
                          "verbs": ["get", "list", "watch", "patch", "update"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}),
    ] {
        kuvryn_sync_tests::apply::apply_raw(
            &env.cluster.client(),
            &kinds,
            &env.namespace,
            &object,
            "test-setup",
        )
        .await?;
    }
    Ok(())
}

/// The controller's HTTP request log lines (`kube_client` debug) that write to `path_part`
/// without a dry run.
fn writes_to(log: &str, path_part: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.ends_with("requesting") && l.contains(path_part))
        .filter(|l| {
            l.contains("http.method=PATCH")
                || l.contains("http.method=PUT")
                || l.contains("http.method=POST")
        })
        .filter(|l| !l.contains("dryRun=All"))
        .map(str::to_owned)
        .collect()
}

/// Every request the controller sends, and every Application reconcile it finished, logged.
const REQUEST_LOG: (&str, &str) = (
    "RUST_LOG",
    "info,kube_client::client::builder=debug,kuvryn_sync_controller::reconciled=debug",
);

/// A failed rollout under `action: rollback` returns to the good commit, holds the failed one
/// across polls and a restart, a new commit ends the hold, and a force-push back to the failed
/// commit holds it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rollout_rolls_back_and_the_failed_commit_stays_held() -> Result<()> {
    if skip_on_real_cluster(
        "a_failed_rollout_rolls_back_and_the_failed_commit_stays_held",
        "simulated workloads (fictional registry.example images that run)",
    ) {
        return Ok(());
    }
    let mut env = env_with_workloads("rollback-auto", false).await?;
    env.grant("apps", &["deployments"]).await?;
    let webhook = WebhookProcess::start(&env.cluster)?;
    webhook.register(&env.cluster, &env.namespace).await?;
    env.start_controller(&[REQUEST_LOG])?;
    let good = env
        .push(
            &[
                ("apps/web/deploy.yaml", deployment("web", false)),
                ("apps/web/settings.yaml", config_map("settings", "good", json!({}))),
            ],
            "good",
        )
        .await?;
    env.create_app(
        "web",
        "apps/web",
        json!({"health": {"timeout": "4s"}, "strategy": {"failurePolicy": {"action": "rollback"}}}),
    )
    .await?;
    env.wait_ready("web", "True", "Healthy").await?;
    let good_revision = env.revision("web", &good).await?.metadata.name.context("name")?;

    let bad = env
        .push(
            &[
                ("apps/web/deploy.yaml", deployment("web", true)),
                ("apps/web/settings.yaml", config_map("settings", "bad", json!({}))),
            ],
            "a Deployment that never becomes ready",
        )
        .await?;
    let message = env.wait_ready("web", "False", "RolledBack").await?;
    assert!(message.contains(&good_revision) && message.contains(&bad[..12]), "{message}");
    wait_request_removed(&env, "web").await?;
    assert_eq!(settings(&env).await?, "good", "the good commit's objects are back");
    let app = env.api::<Application>().get("web").await?;
    let status = app.status.clone().context("status")?;
    assert_eq!(status.deployed_revision.as_deref(), Some(good.as_str()));
    let held = app.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(held.get(keys::ROLLBACK_FROM), Some(&bad), "the failed commit is held");
    assert!(!held.contains_key(keys::ROLLBACK_REVISION), "the request is removed");
    let failed = env.revision("web", &bad).await?;
    assert_eq!(
        rolled_back(&failed),
        Some(("True".to_owned(), "RollbackCompleted".to_owned())),
        "{:?}",
        failed.status
    );
    let target = env.api::<Revision>().get(&good_revision).await?;
    assert_eq!(
        target.status.and_then(|s| s.phase).map(|p| p.to_string()).as_deref(),
        Some("RolledBack")
    );
    let events = env.wait_event("web", "RollbackCompleted").await?;
    let started = events
        .iter()
        .find(|(_, reason, _)| reason == "RollbackStarted")
        .context("RollbackStarted")?;
    assert_eq!(started.0, "Warning", "an automatic rollback starts with a Warning (ruling 3)");
    assert!(
        events.iter().any(|(kind, reason, _)| reason == "RollbackCompleted" && kind == "Normal")
    );

    // Several polls, a reconcile request and a restart: the held commit is not applied again.
    let deployment_version =
        env.api::<Deployment>().get("web").await?.metadata.resource_version.context("rv")?;
    let bad_revision = failed.metadata.name.clone().context("name")?;
    for _ in 0..3 {
        env.announce().await?;
    }
    // The first controller applied the Deployment three times: the good rollout, the bad one
    // and the rollback.
    let first_log = env.controller_log();
    let first = writes_to(&first_log, "/deployments/web");
    assert_eq!(first.len(), 3, "apply requests for the Deployment:\n{}", first.join("\n"));
    env.controller.as_mut().context("controller")?.kill(Duration::from_secs(10)).await?;
    env.start_controller(&[REQUEST_LOG])?;
    let reconciled_web = "kuvryn_sync_controller::reconciled: reconciled application=web ";
    let since_restart = || {
        let log = env.controller_log();
        log.strip_prefix(first_log.as_str()).map_or(log.clone(), str::to_owned)
    };
    // Two rounds of a reconcile request and polls; each ends once the restarted controller
    // reconciled web again (planned it: with nothing to apply, a plan may send no request).
    for round in 1..=2 {
        let now = format!("{:?}", std::time::SystemTime::now());
        let poke = json!({"metadata": {"annotations": {keys::RECONCILE_REQUESTED_AT: now}}});
        env.api::<Application>()
            .patch("web", &PatchParams::default(), &Patch::Merge(&poke))
            .await?;
        env.announce().await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while since_restart().lines().filter(|l| l.contains(reconciled_web)).count() < round {
            ensure!(
                Instant::now() < deadline,
                "the restarted controller did not reconcile web (round {round}):\n{}",
                env.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let applied = writes_to(&since_restart(), "/deployments/web");
    assert!(applied.is_empty(), "the held commit was applied again:\n{}", applied.join("\n"));
    assert_eq!(
        env.api::<Deployment>().get("web").await?.metadata.resource_version.as_deref(),
        Some(deployment_version.as_str()),
        "the held commit was applied again"
    );
    assert_eq!(settings(&env).await?, "good");
    let still = env.api::<Revision>().get(&bad_revision).await?;
    assert_eq!(still.status.map(|s| s.attempts), failed.status.map(|s| s.attempts));

    // A new commit is deployed normally and ends the hold.
    let fixed = env
        .push(
            &[
                ("apps/web/deploy.yaml", deployment("web", false)),
                ("apps/web/settings.yaml", config_map("settings", "fixed", json!({}))),
            ],
            "fixed",
        )
        .await?;
    env.wait_synced("web", &fixed).await?;
    env.wait_ready("web", "True", "Healthy").await?;
    assert_eq!(settings(&env).await?, "fixed");
    let after = annotations(&env, "web").await?;
    assert!(!after.contains_key(keys::ROLLBACK_FROM), "a new commit ends the hold: {after:?}");

    // A force-push back to the commit the rollback replaced: it still carries RolledBack=True,
    // so automatic sync does not deploy it again; "fixed" keeps running, held again.
    env.repo.git(&["reset", "--quiet", "--hard", &bad])?;
    env.repo.push("HEAD:refs/heads/main")?;
    env.announce().await?;
    let message = env.wait_ready("web", "False", "RolledBack").await?;
    assert!(message.contains(&bad[..12]), "{message}");
    assert_eq!(settings(&env).await?, "fixed", "the held commit is not deployed again");
    let app = env.api::<Application>().get("web").await?;
    let status = app.status.context("status")?;
    assert_eq!(status.deployed_revision.as_deref(), Some(fixed.as_str()));
    env.wait_app("web", "rollback-from naming the held commit again", |app| {
        app.metadata.annotations.as_ref().and_then(|a| a.get(keys::ROLLBACK_FROM)) == Some(&bad)
    })
    .await?;
    Ok(())
}

/// `ksync rollback` as an impersonated user; refusals by the webhook; lifting a hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_rollback_is_recorded_under_its_requester_and_a_rollback_to_the_held_commit_lifts_it()
-> Result<()> {
    let env = env("rollback-manual", true).await?;
    let webhook = WebhookProcess::start(&env.cluster)?;
    webhook.register(&env.cluster, &env.namespace).await?;
    grant_user(&env, "alice").await?;
    let ksync = Ksync::new(&env)?;
    let one = env
        .push(&[("apps/web/settings.yaml", config_map("settings", "1", json!({})))], "1")
        .await?;
    env.create_app("web", "apps/web", json!({})).await?;
    env.wait_synced("web", &one).await?;
    env.wait_ready("web", "True", "Healthy").await?;
    let other =
        env.push(&[("apps/other/cm.yaml", config_map("other", "1", json!({})))], "other").await?;
    env.create_app("other", "apps/other", json!({})).await?;
    env.wait_synced("web", &other).await?;
    let two = env
        .push(&[("apps/web/settings.yaml", config_map("settings", "2", json!({})))], "2")
        .await?;
    env.wait_synced("web", &two).await?;
    // Ready stays True from commit one while two rolls out: wait for two's own Revision, or
    // the rollback below would cancel it and leave nothing to roll back to later.
    let rev_two = env.wait_revision_healthy("web", &two).await?.metadata.name.context("name")?;
    env.wait_ready("web", "True", "Healthy").await?;
    env.wait_ready("other", "True", "Healthy").await?;
    let rev_one = env.revision("web", &one).await?.metadata.name.context("name")?;
    let other_revision = env.revision("other", &two).await?.metadata.name.context("name")?;

    // Refused by the webhook: another Application's Revision, and a hand-set audit record.
    let (ok, out) = kubectl_as(
        &env,
        "alice",
        &[
            "annotate",
            "application",
            "web",
            &format!("{}={two}", keys::ROLLBACK_REVISION),
            &format!("{}={other_revision}", keys::ROLLBACK_TARGET_REVISION),
        ],
    )
    .await?;
    assert!(!ok && out.contains("belongs to Application other"), "{out}");
    let (ok, out) = kubectl_as(
        &env,
        "alice",
        &["annotate", "application", "web", &format!("{}=mallory", keys::ROLLBACK_REQUESTED_BY)],
    )
    .await?;
    assert!(!ok && out.contains("cannot be set or changed by hand"), "{out}");

    // ksync rollback as alice: recorded under alice, held commit two.
    let rolled = ksync.ok(&["--as", "alice", "rollback", "web", "--to", &rev_one, "--yes"]).await?;
    assert!(rolled.contains(&rev_one), "{rolled}");
    env.wait_ready("web", "False", "RolledBack").await?;
    wait_request_removed(&env, "web").await?;
    assert_eq!(settings(&env).await?, "1");
    let after = annotations(&env, "web").await?;
    assert_eq!(after.get(keys::ROLLBACK_REQUESTED_BY).map(String::as_str), Some("alice"));
    assert_eq!(after.get(keys::ROLLBACK_FROM), Some(&two));
    let replaced = env.api::<Revision>().get(&rev_two).await?;
    assert_eq!(rolled_back(&replaced), Some(("True".to_owned(), "ManualRollback".to_owned())));
    // A manual rollback starts like any deployment; RollbackStarted is a failure's rollback.
    let events = env.events_for("web").await?;
    assert!(
        events.iter().any(|(kind, reason, note)| kind == "Normal"
            && reason == "DeploymentStarted"
            && note.contains("manual rollback")),
        "{events:?}"
    );
    assert!(!events.iter().any(|(_, r, _)| r == "RollbackStarted"), "{events:?}");
    let history = ksync.ok(&["history", "web"]).await?;
    assert!(history.contains("held (by alice)"), "{history}");
    let status = ksync.ok(&["status", "web"]).await?;
    assert!(status.contains(&format!("--to {rev_two}")), "{status}");

    // A rollback to the held commit lifts the hold.
    ksync.ok(&["rollback", "web", "--to", &rev_two, "--yes"]).await?;
    let lifted = event_message(&env, "web", "RollbackHoldLifted").await?;
    assert!(lifted.contains(&two[..12]), "{lifted}");
    env.wait_ready("web", "True", "Healthy").await?;
    assert_eq!(settings(&env).await?, "2");
    let after = annotations(&env, "web").await?;
    assert!(!after.contains_key(keys::ROLLBACK_FROM), "{after:?}");
    assert!(!after.contains_key(keys::ROLLBACK_REVISION), "{after:?}");
    // Lifting removes RolledBack=True: the commit is an ordinary deployable one again.
    let unheld = env.api::<Revision>().get(&rev_two).await?;
    assert_eq!(rolled_back(&unheld), None, "{:?}", unheld.status);
    Ok(())
}

/// A target the service account may no longer create: the request is removed with
/// RollbackAbandoned and the Application is left failed with that reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_whose_target_cannot_be_applied_is_abandoned() -> Result<()> {
    if skip_on_real_cluster(
        "a_rollback_whose_target_cannot_be_applied_is_abandoned",
        "simulated workloads (fictional registry.example images that run)",
    ) {
        return Ok(());
    }
    let env = env_with_workloads("rollback-abandon", true).await?;
    env.grant("apps", &["deployments"]).await?;
    let ksync = Ksync::new(&env)?;
    let one = env
        .push(
            &[
                ("apps/web/deploy.yaml", deployment("web", false)),
                ("apps/web/settings.yaml", config_map("settings", "1", json!({}))),
            ],
            "with a Deployment",
        )
        .await?;
    env.create_app("web", "apps/web", json!({})).await?;
    env.wait_synced("web", &one).await?;
    env.wait_ready("web", "True", "Healthy").await?;
    env.push_removal(&["apps/web/deploy.yaml"], "no Deployment").await?;
    let two = env
        .push(&[("apps/web/settings.yaml", config_map("settings", "2", json!({})))], "2")
        .await?;
    env.wait_synced("web", &two).await?;
    env.wait_ready("web", "True", "Healthy").await?;
    // The service account loses its rights on Deployments.
    let revoked = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(env.cluster.kubeconfig())
        .args(["delete", "rolebinding", "deployer-apps", "-n", &env.namespace])
        .output()
        .await?;
    ensure!(revoked.status.success(), "{}", String::from_utf8_lossy(&revoked.stderr));

    ksync.ok(&["rollback", "web", "--yes"]).await?;
    let abandoned = event_message(&env, "web", "RollbackAbandoned").await?;
    assert!(abandoned.contains("abandoned"), "{abandoned}");
    let message = env.wait_ready("web", "False", "Forbidden").await?;
    assert!(message.contains("abandoned"), "{message}");
    let after = annotations(&env, "web").await?;
    assert!(!after.contains_key(keys::ROLLBACK_REVISION), "the request is removed: {after:?}");
    assert!(!after.contains_key(keys::ROLLBACK_FROM), "nothing is held: {after:?}");
    assert_eq!(settings(&env).await?, "2", "nothing of the target was applied");
    Ok(())
}

/// An automatic rollback whose target cannot be planned is abandoned, and the failed commit is
/// then retried like any other Revision until its attempts are used up, ending in RetryBlocked
/// (once), with no second rollback.
///
/// The good commit carries a PodDisruptionBudget the bad commit removes (pruned: the service
/// account may delete it); before the bad commit the service account loses every right on
/// PodDisruptionBudgets but read and delete, so the rollback cannot create it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_abandoned_rollback_the_failed_commit_retries_end_in_retry_blocked() -> Result<()>
{
    if skip_on_real_cluster(
        "after_an_abandoned_rollback_the_failed_commit_retries_end_in_retry_blocked",
        "simulated workloads (fictional registry.example images that run)",
    ) {
        return Ok(());
    }
    let env = env_with_workloads("rollback-retry", true).await?;
    env.grant("apps", &["deployments"]).await?;
    env.grant(POLICY, &["poddisruptionbudgets"]).await?;
    let good = env
        .push(
            &[
                ("apps/web/deploy.yaml", deployment("web", false)),
                ("apps/web/budget.yaml", disruption_budget("web")),
                ("apps/web/settings.yaml", config_map("settings", "good", json!({}))),
            ],
            "good",
        )
        .await?;
    // Two attempts per commit; a short health timeout (the backoffs are 10 s then 20 s).
    env.create_app(
        "web",
        "apps/web",
        json!({"health": {"timeout": "3s"},
               "strategy": {"failurePolicy": {"action": "rollback", "maxAttempts": 2}}}),
    )
    .await?;
    env.wait_synced("web", &good).await?;
    env.wait_ready("web", "True", "Healthy").await?;
    let good_revision = env.revision("web", &good).await?.metadata.name.context("name")?;

    // PodDisruptionBudgets: read and delete only, so the prune works and a re-create is refused.
    restrict_disruption_budgets(&env, &["get", "list", "watch", "delete"]).await?;
    // One commit removes the PodDisruptionBudget and breaks the Deployment.
    env.repo.git(&["rm", "--quiet", "apps/web/budget.yaml"])?;
    let bad = env
        .push(
            &[
                ("apps/web/deploy.yaml", deployment("web", true)),
                ("apps/web/settings.yaml", config_map("settings", "bad", json!({}))),
            ],
            "a Deployment that never becomes ready",
        )
        .await?;

    // The failure rolls back at once to the good Revision; the rollback cannot be planned and
    // is abandoned, leaving the Application failed with the rollback's reason.
    let abandoned = event_message(&env, "web", "RollbackAbandoned").await?;
    assert!(
        abandoned.contains(&format!("the rollback to {good_revision} was abandoned")),
        "{abandoned}"
    );
    let message = env.wait_failed("web", "Forbidden").await?;
    assert!(message.contains("abandoned"), "{message}");
    wait_request_removed(&env, "web").await?;

    // The failed commit is deployed again, retried once, and its retries end in RetryBlocked.
    let message = env.wait_ready("web", "False", "RetryBlocked").await?;
    assert!(
        message.contains("retries stopped after 2 attempt(s)")
            && message.contains("last failure: TimeoutFailure"),
        "{message}"
    );
    let app = env.api::<Application>().get("web").await?;
    let status = app.status.context("status")?;
    assert_eq!(status.desired_revision.as_deref(), Some(bad.as_str()), "the failed commit");
    assert_eq!(status.deployed_revision.as_deref(), Some(bad.as_str()));
    let after = app.metadata.annotations.unwrap_or_default();
    assert!(!after.contains_key(keys::ROLLBACK_REVISION), "no new request: {after:?}");
    assert!(!after.contains_key(keys::ROLLBACK_FROM), "nothing is held: {after:?}");
    assert_eq!(settings(&env).await?, "bad", "the failed commit's objects stay applied");
    let failed = env.revision("web", &bad).await?;
    let marked = failed.metadata.annotations.clone().unwrap_or_default();
    assert!(marked.contains_key(rollback::ABANDONED), "{marked:?}");
    let failed = failed.status.context("the failed Revision's status")?;
    assert_eq!(failed.attempts, 2, "one retry after the abandoned rollback");
    assert_eq!(failed.phase, Some(RevisionPhase::Failed));
    assert_eq!(rolled_back(&env.revision("web", &bad).await?), None, "nothing rolled back");
    let budget = env.api::<PodDisruptionBudget>().get_opt("web").await?;
    assert!(budget.is_none(), "nothing of the rollback's target was applied: {budget:?}");

    // Each once: no second rollback, and RetryBlocked is not repeated.
    let events = env.events_for("web").await?;
    let count = |reason: &str| events.iter().filter(|(_, r, _)| r == reason).count();
    assert_eq!(count("RollbackAbandoned"), 1, "{events:?}");
    assert_eq!(count("RetryBlocked"), 1, "{events:?}");
    assert!(
        events.iter().any(|(kind, r, _)| kind == "Warning" && r == "RetryBlocked"),
        "{events:?}"
    );
    Ok(())
}

const POLICY: &str = "policy";

/// A PodDisruptionBudget for the pods of `app`.
fn disruption_budget(app: &str) -> String {
    serde_json::to_string(&json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": app},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}},
    }))
    .expect("json")
}

/// Replace the verbs of the Role [`Env::grant`] made for PodDisruptionBudgets with `verbs`.
async fn restrict_disruption_budgets(env: &Env, verbs: &[&str]) -> Result<()> {
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                      "metadata": {"name": format!("deployer-{POLICY}")},
                      "rules": [{"apiGroups": [POLICY], "resources": ["poddisruptionbudgets"],
                                 "verbs": verbs}]});
    kuvryn_sync_tests::apply::apply_raw(
        &env.cluster.client(),
        &kuvryn_sync_apply::kinds::Kinds::default(),
        &env.namespace,
        &role,
        "test-setup",
    )
    .await
}

/// Manual sync: a matching request is approved under the requester; a `spec.strategy` changed
/// after the request waits with RollbackTargetChanged until `ksync sync`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_manual_sync_a_rollback_is_approved_only_while_its_target_is_unchanged() -> Result<()>
{
    let mut env = env("rollback-approve", true).await?;
    let webhook = WebhookProcess::start(&env.cluster)?;
    webhook.register(&env.cluster, &env.namespace).await?;
    grant_user(&env, "bob").await?;
    let ksync = Ksync::new(&env)?;
    let one = env
        .push(&[("apps/web/settings.yaml", config_map("settings", "1", json!({})))], "1")
        .await?;
    env.create_app("web", "apps/web", json!({"sync": {"automatic": false}})).await?;
    env.wait_event("web", "ApprovalRequired").await?;
    ksync.ok(&["sync", "web", "--yes"]).await?;
    env.wait_synced("web", &one).await?;
    env.wait_ready("web", "True", "Healthy").await?;
    env.wait_revision_healthy("web", &one).await?;
    let two = env
        .push(&[("apps/web/settings.yaml", config_map("settings", "2", json!({})))], "2")
        .await?;
    wait_awaiting(&env, &two).await?;
    ksync.ok(&["sync", "web", "--yes"]).await?;
    env.wait_synced("web", &two).await?;
    env.wait_revision_healthy("web", &two).await?;
    let rev_one = env.revision("web", &one).await?.metadata.name.context("name")?;

    ksync.ok(&["--as", "bob", "rollback", "web", "--yes"]).await?;
    let approved = event_message(&env, "web", "RollbackApproved").await?;
    assert!(approved.contains("bob"), "{approved}");
    env.wait_ready("web", "False", "RolledBack").await?;
    assert_eq!(settings(&env).await?, "1");
    let target = env.api::<Revision>().get(&rev_one).await?;
    let approval = target.status.and_then(|s| s.approval).context("approval")?;
    assert_eq!(approval.approved_by, "bob");

    // Lift the hold, then request again with the controller stopped and change the strategy.
    let rev_two = env.revision("web", &two).await?.metadata.name.context("name")?;
    ksync.ok(&["rollback", "web", "--to", &rev_two, "--yes"]).await?;
    event_message(&env, "web", "RollbackHoldLifted").await?;
    wait_awaiting_or_ready(&env, &ksync).await?;
    env.controller.as_mut().context("controller")?.kill(Duration::from_secs(10)).await?;
    ksync.ok(&["--as", "bob", "rollback", "web", "--to", &rev_one, "--yes"]).await?;
    let strategy = json!({"spec": {"strategy": {"failurePolicy": {"maxAttempts": 3}}}});
    env.api::<Application>()
        .patch("web", &PatchParams::default(), &Patch::Merge(&strategy))
        .await?;
    env.start_controller(&[])?;
    let changed = event_message(&env, "web", "RollbackTargetChanged").await?;
    assert!(changed.contains("ksync sync"), "{changed}");
    assert_eq!(settings(&env).await?, "2", "nothing is applied before ksync sync");
    ksync.ok(&["sync", "web", "--yes"]).await?;
    env.wait_ready("web", "False", "RolledBack").await?;
    assert_eq!(settings(&env).await?, "1");
    Ok(())
}

/// Wait until `web`'s Revision at `commit` awaits approval.
async fn wait_awaiting(env: &Env, commit: &str) -> Result<()> {
    env.wait_app("web", "AwaitingApproval", |app| {
        app.status.as_ref().is_some_and(|s| {
            s.desired_revision.as_deref() == Some(commit)
                && s.sync.state == kuvryn_sync_api::SyncState::AwaitingApproval
        })
    })
    .await?;
    Ok(())
}

/// After a hold is lifted under manual sync the held commit's Revision may need approval
/// again: approve it if so, then wait until Healthy.
async fn wait_awaiting_or_ready(env: &Env, ksync: &Ksync) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let app = env.api::<Application>().get("web").await?;
        let status = app.status.unwrap_or_default();
        if status.sync.state == kuvryn_sync_api::SyncState::AwaitingApproval {
            ksync.ok(&["sync", "web", "--yes"]).await?;
        }
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| (c.status.clone(), c.reason.clone()));
        if ready == Some(("True".to_owned(), "Healthy".to_owned())) && settings(env).await? == "2" {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "web never returned to commit two: {:?}", ready);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Wait until the controller removed `name`'s rollback request (it writes the status first).
async fn wait_request_removed(env: &Env, name: &str) -> Result<()> {
    env.wait_app(name, "rollback request removed", |app| {
        !app.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(keys::ROLLBACK_REVISION))
    })
    .await?;
    Ok(())
}

/// The message of the newest Event `reason` on `name`, waiting for one.
async fn event_message(env: &Env, name: &str, reason: &str) -> Result<String> {
    let events = env.wait_event(name, reason).await?;
    let found = events.iter().rev().find(|(_, r, _)| r == reason).context("the Event")?;
    Ok(found.2.clone())
}

#[allow(dead_code)]
fn unused(_: Value) {}
