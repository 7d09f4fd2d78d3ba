//! The rollout lifecycle end to end, on a cluster whose workloads run (the sandbox with
//! `--simulate-workloads`, or a real cluster through KSYNC_E2E_KUBECONFIG), with a real Git
//! server and the real controller: health observed after the apply, `kubectl wait` on Ready,
//! HealthFailure and TimeoutFailure, retries ending in RetryBlocked, manual approval with a stale
//! digest, self-heal of an imperative edit (and drift only reported without it), and suspend.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kuvryn_sync_api::{Application, FailureReason, HealthState, RevisionPhase, SyncState, keys};
use kuvryn_sync_tests::application::{Env, config_map, env_with_workloads, ready};
use kuvryn_sync_tests::cluster::skip_on_real_cluster;
use serde_json::{Value, json};

fn deployment(name: &str, image: &str, extra: Value) -> String {
    let mut container = json!({"name": "app", "image": image});
    if let (Some(c), Some(e)) = (container.as_object_mut(), extra["container"].as_object()) {
        c.extend(e.clone());
    }
    let mut spec = json!({
        "replicas": 1,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}},
                     "spec": {"containers": [container]}},
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra["spec"].as_object()) {
        s.extend(e.clone());
    }
    serde_json::to_string(&json!({"apiVersion": "apps/v1", "kind": "Deployment",
                                  "metadata": {"name": name}, "spec": spec}))
    .expect("json")
}

async fn workloads_env(prefix: &str) -> Result<Env> {
    let env = env_with_workloads(prefix, true).await?;
    env.grant("apps", &["deployments"]).await?;
    Ok(env)
}

/// A healthy rollout ends Ready=True/Healthy with its Revision Healthy, and `kubectl wait
/// --for=condition=Ready` returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_rollout_is_ready_and_kubectl_wait_returns() -> Result<()> {
    if skip_on_real_cluster(
        "a_healthy_rollout_is_ready_and_kubectl_wait_returns",
        "simulated workloads (fictional registry.example images that run)",
    ) {
        return Ok(());
    }
    let env = workloads_env("rollout-ok").await?;
    let commit = env
        .push(
            &[
                ("apps/web/deploy.yaml", deployment("web", "registry.example/web:1", json!({}))),
                ("apps/web/settings.yaml", config_map("settings", "1", json!({}))),
            ],
            "a Deployment",
        )
        .await?;
    env.create_app("web", "apps/web", json!({})).await?;
    let wait = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(env.cluster.kubeconfig())
        .args(["wait", "--for=condition=Ready", "application/web", "--timeout=60s", "-n"])
        .arg(&env.namespace)
        .output()
        .await?;
    ensure!(
        wait.status.success(),
        "kubectl wait: {}{}",
        String::from_utf8_lossy(&wait.stdout),
        String::from_utf8_lossy(&wait.stderr)
    );
    let message = env.wait_ready("web", "True", "Healthy").await?;
    assert!(message.contains(&commit), "{message}");
    let app = env.api::<Application>().get("web").await?;
    let status = app.status.context("status")?;
    assert_eq!(status.health.state, HealthState::Healthy);
    assert_eq!(status.state, HealthState::Healthy);
    assert_eq!(status.sync.state, SyncState::Synced);
    assert_eq!(status.resources.healthy, 2);
    let revision = env.revision("web", &commit).await?;
    let revision_status = revision.status.context("revision status")?;
    assert_eq!(revision_status.phase, Some(RevisionPhase::Healthy));
    assert_eq!(
        revision_status.deployed_desired_state_hash.as_deref(),
        Some(revision.spec.desired_state_hash.as_str())
    );
    assert!(revision_status.completed_at.is_some());
    let complete = revision_status
        .conditions
        .iter()
        .find(|c| c.type_ == "RolloutComplete")
        .context("RolloutComplete")?;
    assert_eq!((complete.status.as_str(), complete.reason.as_str()), ("True", "RolloutSucceeded"));
    env.wait_event("web", "DeploymentHealthy").await?;
    // Every Application Event is counted in kuvryn_sync_lifecycle_events_total.
    let metrics = scrape_metrics(&env).await?;
    for line in [
        r#"kuvryn_sync_lifecycle_events_total{reason="PlanCreated",type="Normal"} 1"#,
        r#"kuvryn_sync_lifecycle_events_total{reason="DeploymentStarted",type="Normal"} 1"#,
        r#"kuvryn_sync_lifecycle_events_total{reason="DeploymentHealthy",type="Normal"} 1"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} not in:\n{metrics}");
    }
    Ok(())
}

/// The controller's /metrics, from the address its log names (`ops_addr=...`).
async fn scrape_metrics(env: &Env) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let log = env.controller_log();
    let addr = log
        .split_whitespace()
        .find_map(|word| word.strip_prefix("ops_addr="))
        .context("the controller log names its ops address")?
        .to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr).await?;
    stream
        .write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response)
}

/// An image that cannot be pulled fails with HealthFailure once the Deployment is Degraded; a
/// Deployment that never becomes ready fails with TimeoutFailure, is retried, and with
/// `maxAttempts: 2` ends in RetryBlocked keeping the last failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhealthy_rollouts_fail_retry_and_block() -> Result<()> {
    if skip_on_real_cluster(
        "unhealthy_rollouts_fail_retry_and_block",
        "simulated workloads (fictional registry.example images that run)",
    ) {
        return Ok(());
    }
    let env = workloads_env("rollout-bad").await?;
    let unready = json!({
        "container": {
            "env": [{"name": "KSYNC_SIMULATE", "value": "unready"}],
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
        },
    });
    let commit = env
        .push(
            &[
                (
                    "apps/broken/deploy.yaml",
                    deployment(
                        "broken",
                        "unreachable.invalid/app:1",
                        json!({"spec": {"progressDeadlineSeconds": 2}}),
                    ),
                ),
                ("apps/slow/deploy.yaml", deployment("slow", "registry.example/slow:1", unready)),
            ],
            "two unhealthy Deployments",
        )
        .await?;
    env.create_app("broken", "apps/broken", json!({})).await?;
    env.create_app(
        "slow",
        "apps/slow",
        json!({"health": {"timeout": "2s"}, "strategy": {"failurePolicy": {"maxAttempts": 2}}}),
    )
    .await?;

    let message = env.wait_ready("broken", "False", "HealthFailure").await?;
    assert!(message.contains("Deployment") && message.contains("broken"), "{message}");
    let failed = env.revision("broken", &commit).await?;
    let failure = failed.status.and_then(|s| s.failure).context("failure")?;
    assert_eq!(failure.reason, FailureReason::HealthFailure);
    assert_eq!(failure.resource.map(|r| r.name).as_deref(), Some("broken"));

    let message = env.wait_ready("slow", "False", "TimeoutFailure").await?;
    assert!(message.contains("slow") && message.contains("Progressing"), "{message}");
    let message = env.wait_ready("slow", "False", "RetryBlocked").await?;
    assert!(message.contains("2 attempt") && message.contains("TimeoutFailure"), "{message}");
    let blocked = env.revision("slow", &commit).await?;
    assert_eq!(blocked.status.map(|s| s.attempts), Some(2));
    env.wait_event("slow", "RetryBlocked").await?;
    Ok(())
}

/// Manual sync: the plan waits; an approval with another digest is stale and waits again; the
/// right digest applies and is recorded on the Revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_approval_applies_only_the_approved_plan() -> Result<()> {
    if skip_on_real_cluster(
        "manual_approval_applies_only_the_approved_plan",
        "simulated workloads (fictional registry.example images that run)",
    ) {
        return Ok(());
    }
    let env = workloads_env("rollout-approve").await?;
    let commit = env
        .push(&[("apps/manual/cm.yaml", config_map("approved", "1", json!({})))], "manual")
        .await?;
    env.create_app("manual", "apps/manual", json!({"sync": {"automatic": false}})).await?;
    env.wait_app("manual", "AwaitingApproval", |app| {
        app.status.as_ref().is_some_and(|s| s.sync.state == SyncState::AwaitingApproval)
    })
    .await?;
    let revision = env.revision("manual", &commit).await?;
    let name = revision.metadata.name.clone().context("name")?;
    let digest = revision.status.and_then(|s| s.plan).map(|p| p.digest).context("digest")?;
    let approve = |digest: &str| {
        json!({"metadata": {"annotations": {
            keys::APPROVED_REVISION: name, keys::APPROVED_DIGEST: digest,
            keys::APPROVED_BY: "alice", keys::APPROVED_AT: "2026-12-01T10:00:00Z"}}})
    };
    let apps = env.api::<Application>();
    let stale = approve("sha256:0000");
    apps.patch("manual", &PatchParams::default(), &Patch::Merge(&stale)).await?;
    env.wait_event("manual", "ApprovalStale").await?;
    let cms = env.api::<ConfigMap>();
    assert!(cms.get_opt("approved").await?.is_none(), "a stale approval applied the plan");

    apps.patch("manual", &PatchParams::default(), &Patch::Merge(&approve(&digest))).await?;
    env.wait_ready("manual", "True", "Healthy").await?;
    assert!(cms.get_opt("approved").await?.is_some());
    let approval = env
        .revision("manual", &commit)
        .await?
        .status
        .and_then(|s| s.approval)
        .context("approval")?;
    assert_eq!(
        (approval.approved_by.as_str(), approval.plan_digest.as_str()),
        ("alice", digest.as_str())
    );
    Ok(())
}

/// A `kubectl patch` of a managed field is repaired within 5 seconds under selfHeal, and only
/// reported (sync state Drifted) without it; a field we do not manage is not drift.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_heal_repairs_an_edit_and_drift_is_otherwise_reported() -> Result<()> {
    if skip_on_real_cluster(
        "self_heal_repairs_an_edit_and_drift_is_otherwise_reported",
        "simulated workloads (fictional registry.example images that run)",
    ) {
        return Ok(());
    }
    let env = workloads_env("rollout-heal").await?;
    env.push(
        &[
            ("apps/heal/cm.yaml", config_map("healed", "git", json!({}))),
            ("apps/drift/cm.yaml", config_map("drifted", "git", json!({}))),
        ],
        "two ConfigMaps",
    )
    .await?;
    env.create_app("heal", "apps/heal", json!({"sync": {"selfHeal": true}})).await?;
    env.create_app("drift", "apps/drift", json!({})).await?;
    env.wait_ready("heal", "True", "Healthy").await?;
    env.wait_ready("drift", "True", "Healthy").await?;

    let kubectl_patch = |name: &str, patch: Value| {
        let kubeconfig = env.cluster.kubeconfig().to_owned();
        let namespace = env.namespace.clone();
        let name = name.to_owned();
        async move {
            let out = tokio::process::Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(["patch", "configmap", &name, "--type", "merge", "-n", &namespace, "-p"])
                .arg(patch.to_string())
                .output()
                .await?;
            ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            Ok(())
        }
    };
    // A label nobody declared is not drift.
    kubectl_patch("drifted", json!({"metadata": {"labels": {"team": "ops"}}})).await?;
    kubectl_patch("healed", json!({"data": {"value": "edited"}})).await?;
    kubectl_patch("drifted", json!({"data": {"value": "edited"}})).await?;

    let cms = env.api::<ConfigMap>();
    let start = std::time::Instant::now();
    kuvryn_sync_tests::cluster::wait_for(
        "the edit is repaired",
        std::time::Duration::from_secs(5),
        || async {
            let value = cms.get("healed").await?.data.unwrap_or_default().get("value").cloned();
            Ok(((value.as_deref() == Some("git")).then_some(()), format!("value {value:?}")))
        },
    )
    .await?;
    println!("repaired in {:?}", start.elapsed());
    env.wait_app("drift", "Drifted", |app| {
        app.status.as_ref().is_some_and(|s| s.sync.state == SyncState::Drifted)
    })
    .await?;
    let drifted = cms.get("drifted").await?;
    assert_eq!(drifted.data.unwrap_or_default().get("value").map(String::as_str), Some("edited"));
    let healed = env.api::<Application>().get("heal").await?;
    assert_eq!(healed.status.map(|s| s.sync.state), Some(SyncState::Synced));
    Ok(())
}

/// While suspended nothing is written to managed objects; once resumed the new commit applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_blocks_every_write_until_resumed() -> Result<()> {
    if skip_on_real_cluster(
        "suspend_blocks_every_write_until_resumed",
        "simulated workloads (fictional registry.example images that run)",
    ) {
        return Ok(());
    }
    let env = workloads_env("rollout-suspend").await?;
    let first =
        env.push(&[("apps/web/cm.yaml", config_map("held", "one", json!({})))], "one").await?;
    env.create_app("web", "apps/web", json!({})).await?;
    env.wait_synced("web", &first).await?;
    let apps = env.api::<Application>();
    let suspend = |on: bool| json!({"spec": {"suspend": on}});
    apps.patch("web", &PatchParams::default(), &Patch::Merge(&suspend(true))).await?;
    env.wait_app("web", "observedGeneration 2", |app| {
        app.status.as_ref().and_then(|s| s.observed_generation) == Some(2)
    })
    .await?;
    let seen = env.log_count("suspended: nothing is applied");
    let second =
        env.push(&[("apps/web/cm.yaml", config_map("held", "two", json!({})))], "two").await?;
    // The new commit reaches the suspended Application, which writes nothing.
    kuvryn_sync_tests::cluster::wait_for(
        "a reconcile while suspended",
        kuvryn_sync_tests::application::DEADLINE,
        || async {
            let now = env.log_count("suspended: nothing is applied");
            Ok(((now > seen).then_some(()), format!("{now} suspended reconciles")))
        },
    )
    .await?;
    let cms = env.api::<ConfigMap>();
    let held = cms.get("held").await?;
    assert_eq!(held.data.unwrap_or_default().get("value").map(String::as_str), Some("one"));
    let app = apps.get("web").await?;
    assert_eq!(app.status.and_then(|s| s.deployed_revision).as_deref(), Some(first.as_str()));

    apps.patch("web", &PatchParams::default(), &Patch::Merge(&suspend(false))).await?;
    env.wait_synced("web", &second).await?;
    let held = cms.get("held").await?;
    assert_eq!(held.data.unwrap_or_default().get("value").map(String::as_str), Some("two"));
    Ok(())
}

/// Deleting an Application: `Orphan` leaves its objects; `DeleteManagedResources` deletes them,
/// except high-risk kinds, which it names in a `ManagedResourcesOrphaned` Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_policies_do_what_they_say() -> Result<()> {
    if skip_on_real_cluster(
        "deletion_policies_do_what_they_say",
        "simulated workloads (fictional registry.example images that run)",
    ) {
        return Ok(());
    }
    let env = workloads_env("rollout-delete").await?;
    let commit = env
        .push(
            &[
                ("apps/orphan/cm.yaml", config_map("orphaned", "1", json!({}))),
                ("apps/purge/cm.yaml", config_map("purged", "1", json!({}))),
                (
                    "apps/purge/secret.yaml",
                    "apiVersion: v1\nkind: Secret\nmetadata:\n  name: kept\nstringData:\n  a: b\n"
                        .to_owned(),
                ),
            ],
            "two Applications",
        )
        .await?;
    env.create_app("orphan", "apps/orphan", json!({})).await?;
    env.create_app("purge", "apps/purge", json!({"deletionPolicy": "DeleteManagedResources"}))
        .await?;
    env.wait_synced("orphan", &commit).await?;
    env.wait_synced("purge", &commit).await?;
    let apps = env.api::<Application>();
    for name in ["orphan", "purge"] {
        apps.delete(name, &Default::default()).await?;
    }
    for name in ["orphan", "purge"] {
        kuvryn_sync_tests::cluster::wait_for(
            &format!("Application {name} is gone"),
            kuvryn_sync_tests::application::DEADLINE,
            || async {
                let found = apps.get_opt(name).await?;
                Ok((
                    found.is_none().then_some(()),
                    format!("{:?}", found.map(|a| a.metadata.finalizers)),
                ))
            },
        )
        .await?;
    }
    let cms = env.api::<ConfigMap>();
    assert!(cms.get_opt("orphaned").await?.is_some(), "Orphan deleted its ConfigMap");
    assert!(cms.get_opt("purged").await?.is_none(), "DeleteManagedResources left its ConfigMap");
    let secrets = env.api::<k8s_openapi::api::core::v1::Secret>();
    assert!(secrets.get_opt("kept").await?.is_some(), "a high-risk Secret was deleted");
    let events = env.wait_event("purge", "ManagedResourcesOrphaned").await?;
    let orphaned: Vec<_> =
        events.iter().filter(|(_, r, _)| r == "ManagedResourcesOrphaned").collect();
    assert!(orphaned[0].2.contains("Secret") && orphaned[0].2.contains("kept"), "{orphaned:?}");
    Ok(())
}

/// A dependsOn chain deploys in order: nothing of a dependent is applied before its dependency
/// is Healthy at its desired revision; a cycle is reported as DependencyCycle naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn depends_on_orders_rollouts_and_reports_cycles() -> Result<()> {
    if skip_on_real_cluster(
        "depends_on_orders_rollouts_and_reports_cycles",
        "simulated workloads (fictional registry.example images that run)",
    ) {
        return Ok(());
    }
    let env = workloads_env("rollout-deps").await?;
    let commit = env
        .push(
            &[
                ("apps/db/cm.yaml", config_map("db", "1", json!({}))),
                ("apps/api/cm.yaml", config_map("api", "1", json!({}))),
                ("apps/web/cm.yaml", config_map("web", "1", json!({}))),
                ("apps/x/cm.yaml", config_map("x", "1", json!({}))),
                ("apps/y/cm.yaml", config_map("y", "1", json!({}))),
            ],
            "a chain and a cycle",
        )
        .await?;
    let on = |name: &str| json!({"dependsOn": [{"name": name}]});
    env.create_app("web", "apps/web", on("api")).await?;
    env.create_app("api", "apps/api", on("db")).await?;
    let message = env
        .wait_app("api", "DependenciesReady=False/DependencyNotReady", |app| {
            condition(app, "DependenciesReady")
                == Some(("False".into(), "DependencyNotReady".into()))
        })
        .await?;
    let text = message.status.map(|s| s.conditions).unwrap_or_default();
    assert!(format!("{text:?}").contains("db"), "{text:?}");
    let cms = env.api::<ConfigMap>();
    assert!(cms.get_opt("api").await?.is_none() && cms.get_opt("web").await?.is_none());

    env.create_app("db", "apps/db", json!({})).await?;
    for name in ["db", "api", "web"] {
        env.wait_ready(name, "True", "Healthy").await?;
    }
    let web = env.api::<Application>().get("web").await?;
    assert_eq!(
        condition(&web, "DependenciesReady"),
        Some(("True".into(), "DependenciesHealthy".into()))
    );
    assert_eq!(web.status.and_then(|s| s.deployed_revision).as_deref(), Some(commit.as_str()));

    env.create_app("x", "apps/x", on("y")).await?;
    env.create_app("y", "apps/y", on("x")).await?;
    let x = env
        .wait_app("x", "DependencyCycle", |app| {
            condition(app, "DependenciesReady") == Some(("False".into(), "DependencyCycle".into()))
        })
        .await?;
    let message = x
        .status
        .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "DependenciesReady"))
        .map(|c| c.message)
        .unwrap_or_default();
    assert!(message.contains("x -> y -> x"), "{message}");
    assert!(cms.get_opt("x").await?.is_none());
    Ok(())
}

/// `spec.history.limit` counts every Revision a rollback does not hold: six good commits under
/// limit 3 keep the newest three (never deleting the deployed one, its rollback target or one in
/// progress); lowering the limit to 1 trims at once, without a new commit, down to the deployed
/// Revision and its rollback target, which are never deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_limit_keeps_the_newest_and_the_protected_revisions() -> Result<()> {
    if skip_on_real_cluster(
        "history_limit_keeps_the_newest_and_the_protected_revisions",
        "simulated workloads (fictional registry.example images that run)",
    ) {
        return Ok(());
    }
    let env = workloads_env("rollout-history").await?;
    env.create_app("web", "apps/web", json!({"history": {"limit": 3}})).await?;
    let mut commits = Vec::new();
    for n in 1..=6 {
        let commit = env
            .push(&[("apps/web/cm.yaml", config_map("web", &n.to_string(), json!({})))], "next")
            .await?;
        env.wait_synced("web", &commit).await?;
        // Ready stays True from the first rollout on: wait for this commit's Revision instead.
        kuvryn_sync_tests::cluster::wait_for(
            &format!("the Revision of {commit} is Healthy"),
            kuvryn_sync_tests::application::DEADLINE,
            || async {
                let phase = env.revision("web", &commit).await?.status.and_then(|s| s.phase);
                Ok(((phase == Some(RevisionPhase::Healthy)).then_some(()), format!("{phase:?}")))
            },
        )
        .await?;
        commits.push(commit);
    }
    let kept = || async {
        let selector = format!("{}=web", keys::APPLICATION);
        let revisions = env
            .api::<kuvryn_sync_api::Revision>()
            .list(&kube::api::ListParams::default().labels(&selector))
            .await?;
        let mut kept: Vec<String> =
            revisions.items.iter().map(|r| r.spec.source.revision.clone()).collect();
        kept.sort();
        Ok::<_, anyhow::Error>((kept, revisions.items))
    };
    let (_, revisions) = kept().await?;
    // Each Revision names the one Healthy before it, the target of a rollback.
    let sixth = revisions.iter().find(|r| r.spec.source.revision == commits[5]);
    let fifth = revisions.iter().find(|r| r.spec.source.revision == commits[4]);
    assert_eq!(
        sixth.and_then(|r| r.status.as_ref()).and_then(|s| s.previous_revision.clone()),
        fifth.and_then(|r| r.metadata.name.clone())
    );
    let sorted = |mut list: Vec<String>| {
        list.sort();
        list
    };
    let newest_three = sorted(commits[3..].to_vec());
    kuvryn_sync_tests::cluster::wait_for(
        "limit 3 keeps the newest three",
        kuvryn_sync_tests::application::DEADLINE,
        || async {
            let (now, _) = kept().await?;
            Ok(((now == newest_three).then_some(()), format!("{now:?}")))
        },
    )
    .await
    .with_context(|| env.log_tail(40))?;

    let limit_one = json!({"spec": {"history": {"limit": 1}}});
    env.api::<Application>()
        .patch("web", &PatchParams::default(), &Patch::Merge(&limit_one))
        .await?;
    let protected = sorted(commits[4..].to_vec());
    kuvryn_sync_tests::cluster::wait_for(
        "limit 1 keeps only the deployed Revision and its rollback target",
        kuvryn_sync_tests::application::DEADLINE,
        || async {
            let (now, _) = kept().await?;
            Ok(((now == protected).then_some(()), format!("{now:?}")))
        },
    )
    .await
    .with_context(|| env.log_tail(40))?;
    Ok(())
}

/// A condition's (status, reason).
fn condition(app: &Application, type_: &str) -> Option<(String, String)> {
    app.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

fn job(name: &str, hook: &str, wave: i32, crash: bool) -> String {
    let env = if crash { json!([{"name": "KSYNC_SIMULATE", "value": "crash"}]) } else { json!([]) };
    serde_json::to_string(&json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "annotations": {keys::HOOK: hook, keys::SYNC_WAVE: wave.to_string()}},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "run", "image": "registry.example/tools:1", "env": env}]}}},
    }))
    .expect("json")
}

/// Hooks and waves: a pre-sync hook completes before the resources are applied, wave 1 waits for
/// wave 0 to be Healthy, a post-sync hook runs last, and `Revision.status.hooks` records them; a
/// failing pre-sync hook fails the attempt with HookFailed and nothing else is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_and_waves_run_in_order_and_a_failed_hook_stops_the_rollout() -> Result<()> {
    if skip_on_real_cluster(
        "hooks_and_waves_run_in_order_and_a_failed_hook_stops_the_rollout",
        "simulated workloads (fictional registry.example images that run)",
    ) {
        return Ok(());
    }
    let env = workloads_env("rollout-hooks").await?;
    env.grant("batch", &["jobs"]).await?;
    let wave = |name: &str, n: i32| {
        serde_json::to_string(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "annotations": {keys::SYNC_WAVE: n.to_string()}},
            "data": {"value": "1"}}))
        .expect("json")
    };
    let commit = env
        .push(
            &[
                ("apps/ok/migrate.yaml", job("migrate", "pre-sync", 0, false)),
                ("apps/ok/db.yaml", deployment("db", "registry.example/db:1", json!({}))),
                ("apps/ok/after-db.yaml", wave("after-db", 1)),
                ("apps/ok/smoke.yaml", job("smoke", "post-sync", 0, false)),
                ("apps/bad/migrate.yaml", job("broken-migrate", "pre-sync", 0, true)),
                ("apps/bad/cm.yaml", wave("never", 0)),
            ],
            "hooks and waves",
        )
        .await?;
    env.create_app("ok", "apps/ok", json!({})).await?;
    env.create_app("bad", "apps/bad", json!({})).await?;

    env.wait_ready("ok", "True", "Healthy").await?;
    let revision = env.revision("ok", &commit).await?;
    let hooks = revision.status.map(|s| s.hooks).unwrap_or_default();
    let recorded: Vec<(String, String)> = hooks
        .iter()
        .map(|h| {
            (
                h.resource.name.clone(),
                serde_json::to_value(h.state).map(|v| v.to_string()).unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        recorded,
        vec![
            ("migrate".to_owned(), "\"Succeeded\"".to_owned()),
            ("smoke".to_owned(), "\"Succeeded\"".to_owned())
        ]
    );
    // Order: the migration finished before the Deployment was created; wave 1 after the
    // Deployment was available; the post-sync hook after wave 1.
    let jobs = env.api::<k8s_openapi::api::batch::v1::Job>();
    let migrate = jobs.get("migrate").await?;
    let finished = migrate.status.and_then(|s| s.completion_time).context("completion")?;
    let db = env.api::<k8s_openapi::api::apps::v1::Deployment>().get("db").await?;
    let created = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        meta.creation_timestamp.clone().map(|t| t.0).context("creationTimestamp")
    };
    ensure!(
        created(&db.metadata)? >= finished.0,
        "db was created before the pre-sync hook finished"
    );
    let after = env.api::<ConfigMap>().get("after-db").await?;
    let smoke = jobs.get("smoke").await?;
    ensure!(created(&after.metadata)? >= created(&db.metadata)?, "wave 1 before wave 0");
    ensure!(created(&smoke.metadata)? >= created(&after.metadata)?, "post-sync before wave 1");

    let message = env.wait_ready("bad", "False", "HookFailed").await?;
    assert!(message.contains("broken-migrate"), "{message}");
    assert!(
        env.api::<ConfigMap>().get_opt("never").await?.is_none(),
        "applied after a failed hook"
    );
    Ok(())
}

/// A rollout waiting for a wave holds no worker: with one Application reconciled at a time
/// (`--application-concurrency 1`), while the first wave of `slow` stays Progressing (a
/// Deployment whose pod never gets ready) another Application, `quick`, still syncs to Ready
/// within seconds; `slow` meanwhile stays `Applying` with its Revision `Applying` and its second
/// wave not applied, and fails with TimeoutFailure at its deadline, naming the Deployment.
/// Before the runner, `slow`'s reconcile polled its wave until the deadline and `quick` waited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_waited_for_does_not_hold_the_only_worker() -> Result<()> {
    if skip_on_real_cluster(
        "a_wave_waited_for_does_not_hold_the_only_worker",
        "simulated workloads (a fictional image whose readiness probe fails)",
    ) {
        return Ok(());
    }
    let mut env = env_with_workloads("rollout-worker", false).await?;
    env.grant("apps", &["deployments"]).await?;
    env.start_controller_with(&["--application-concurrency", "1"], &[])?;
    let unready = json!({"container": {"env": [{"name": "KSYNC_SIMULATE", "value": "unready"}]}});
    let commit = env
        .push(
            &[
                ("apps/slow/held.yaml", deployment("held", "registry.example/held:1", unready)),
                ("apps/slow/late.yaml", config_map("late", "1", json!({keys::SYNC_WAVE: "1"}))),
                ("apps/quick/settings.yaml", config_map("quick", "1", json!({}))),
            ],
            "a wave that never gets ready, and another Application",
        )
        .await?;
    env.create_app("slow", "apps/slow", json!({"health": {"timeout": "20s"}})).await?;
    let deployments = env.api::<k8s_openapi::api::apps::v1::Deployment>();
    kuvryn_sync_tests::cluster::wait_for(
        "wave 0 of slow applied",
        Duration::from_secs(30),
        || async { Ok((deployments.get_opt("held").await?.map(|_| ()), "absent".to_owned())) },
    )
    .await?;

    let started = Instant::now();
    env.create_app("quick", "apps/quick", json!({})).await?;
    env.wait_app("quick", "Ready=True/Healthy", |app| {
        ready(app).is_some_and(|(s, r, _)| s == "True" && r == "Healthy")
    })
    .await?;
    let took = started.elapsed();
    println!("quick became Ready {took:?} after it was created, while slow waited for wave 0");
    ensure!(took < Duration::from_secs(10), "quick waited {took:?} for slow's wave");

    let slow = env.api::<Application>().get("slow").await?;
    let status = slow.status.clone().context("slow's status")?;
    assert_eq!(status.sync.state, SyncState::Applying, "{status:?}");
    assert_eq!(ready(&slow), None, "Ready keeps its value (none yet) while the rollout goes on");
    let revision = env.revision("slow", &commit).await?;
    let revision_status = revision.status.context("revision status")?;
    assert_eq!(revision_status.phase, Some(RevisionPhase::Applying));
    assert_eq!(revision_status.attempts, 1, "the reconciles after the first continue its attempt");
    assert!(env.api::<ConfigMap>().get_opt("late").await?.is_none(), "wave 1 before wave 0");

    let message = env.wait_ready("slow", "False", "TimeoutFailure").await?;
    assert!(
        message.contains("held") && message.contains("later groups were not applied"),
        "{message}"
    );
    let revision = env.revision("slow", &commit).await?;
    let revision_status = revision.status.context("revision status")?;
    assert_eq!((revision_status.phase, revision_status.attempts), (Some(RevisionPhase::Failed), 1));
    assert!(env.api::<ConfigMap>().get_opt("late").await?.is_none(), "applied after a timeout");
    Ok(())
}
