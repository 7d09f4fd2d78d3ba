//! The admission webhook end to end: the real `kuvryn-sync-webhook` binary registered with the
//! API server (fail closed, as the chart registers it), driven with the real kubectl as an
//! impersonated user. Approvals are recorded under the requester, hand-made audit records and
//! approvals or rollbacks that do not hold are denied with what to do, and HealthChecks whose
//! rules cannot return a bool never get stored.
//!
//! Against a real cluster (`KSYNC_E2E_KUBECONFIG`) the API server must be able to reach
//! 127.0.0.1 on this machine (a kind or minikube node cannot), so run it on the sandbox.

use std::process::Command;

use anyhow::{Context, Result, bail};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kuvryn_sync_api::{Application, Revision, keys};
use kuvryn_sync_tests::cluster::TestCluster;
use kuvryn_sync_tests::webhook::WebhookProcess;
use serde_json::{Value, json};

const COMMIT_A: &str = "0123456789abcdef0123456789abcdef01234567";
const COMMIT_B: &str = "89abcdef0123456789abcdef0123456789abcdef";
const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

/// kubectl against `cluster`, impersonating `user`; (succeeded, stdout + stderr).
async fn kubectl_as(
    cluster: &TestCluster,
    user: &str,
    args: &[&str],
    stdin: Option<String>,
) -> Result<(bool, String)> {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(cluster.kubeconfig()).arg("--as").arg(user).args(args);
    let output = tokio::task::spawn_blocking(move || -> Result<std::process::Output> {
        use std::io::Write;
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn()?;
        if let Some(text) = stdin {
            child.stdin.take().context("stdin")?.write_all(text.as_bytes())?;
        }
        drop(child.stdin.take());
        Ok(child.wait_with_output()?)
    })
    .await??;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok((output.status.success(), text))
}

/// Let `user` manage Applications and HealthChecks, and nothing else.
async fn grant(cluster: &TestCluster, user: &str, suffix: &str) -> Result<()> {
    let rbac = format!(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: e2e-approver-{suffix}}}
rules:
- apiGroups: [sync.kuvryn.io]
  resources: [applications, healthchecks]
  verbs: [get, list, create, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: e2e-approver-{suffix}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-approver-{suffix}}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}]
"
    );
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(cluster.kubeconfig()).args(["apply", "-f", "-"]);
    let (ok, out) = {
        let mut child = cmd
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        use std::io::Write;
        child.stdin.take().context("stdin")?.write_all(rbac.as_bytes())?;
        let output = tokio::task::spawn_blocking(move || child.wait_with_output()).await??;
        (output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    if !ok {
        bail!("granting {user}: {out}");
    }
    Ok(())
}

async fn create_application(cluster: &TestCluster, ns: &str, name: &str) -> Result<()> {
    let app: Application = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name},
        "spec": {
            "source": {"repositoryRef": {"name": "apps"}, "path": name, "render": {"type": "yaml"}},
            "destination": {"namespace": ns},
            "sync": {"automatic": false},
        },
    }))?;
    Api::<Application>::namespaced(cluster.client(), ns)
        .create(&PostParams::default(), &app)
        .await?;
    Ok(())
}

/// A Revision of `application` at `commit` with a plan `digest`; `deployed` when a rollout of
/// it completed Healthy.
async fn create_revision(
    cluster: &TestCluster,
    ns: &str,
    name: &str,
    application: &str,
    commit: &str,
    deployed: bool,
) -> Result<()> {
    let api = Api::<Revision>::namespaced(cluster.client(), ns);
    let revision: Revision = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Revision",
        "metadata": {"name": name, "labels": {keys::APPLICATION: application}},
        "spec": {
            "applicationRef": {"name": application},
            "source": {"repositoryRef": {"name": "apps"}, "revision": commit, "path": application,
                       "render": {"type": "yaml"}},
            "desiredStateHash": "sha256:state",
        },
    }))?;
    api.create(&PostParams::default(), &revision).await?;
    let mut status = json!({
        "phase": if deployed { "Healthy" } else { "AwaitingApproval" },
        "plan": {"create": 1, "update": 0, "delete": 0, "unchanged": 0, "digest": DIGEST},
    });
    if deployed {
        status["deployedDesiredStateHash"] = json!("sha256:state");
    }
    let body = json!({"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Revision",
        "metadata": {"name": name}, "status": status});
    api.patch_status(name, &PatchParams::apply("e2e").force(), &Patch::Apply(&body)).await?;
    Ok(())
}

async fn annotations(cluster: &TestCluster, ns: &str, name: &str) -> Result<Value> {
    let app = Api::<Application>::namespaced(cluster.client(), ns).get(name).await?;
    Ok(serde_json::to_value(app.metadata.annotations.unwrap_or_default())?)
}

fn denied(ok: bool, out: &str, words: &[&str]) {
    assert!(!ok, "the request was admitted; want a denial with {words:?}: {out}");
    assert!(out.contains("denied the request"), "not an admission denial: {out}");
    for word in words {
        assert!(out.contains(word), "the denial lacks {word:?}: {out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_and_rollbacks_are_recorded_under_the_requester_and_forgeries_denied()
-> Result<()> {
    let cluster = TestCluster::start().await?;
    let ns = cluster.namespace("webhook").await?;
    let webhook = WebhookProcess::start(&cluster)?;
    webhook.register(&cluster, &ns).await?;
    grant(&cluster, "alice", &ns).await?;
    create_application(&cluster, &ns, "web").await?;
    create_application(&cluster, &ns, "api").await?;
    create_revision(&cluster, &ns, "web-1", "web", COMMIT_A, true).await?;
    create_revision(&cluster, &ns, "web-2", "web", COMMIT_B, false).await?;
    create_revision(&cluster, &ns, "api-1", "api", COMMIT_A, true).await?;
    let annotate = |args: &[&str]| {
        let mut all = vec!["annotate", "--overwrite", "-n", ns.as_str(), "application", "web"];
        all.extend_from_slice(args);
        all.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| {
        let cluster = &cluster;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            kubectl_as(cluster, "alice", &args, None).await
        }
    };

    // A wrong digest is denied and nothing is recorded.
    let (ok, out) = run(annotate(&[
        &format!("{}=web-2", keys::APPROVED_REVISION),
        &format!("{}=sha256:0000", keys::APPROVE_DIGEST),
    ]))
    .await?;
    denied(ok, &out, &["does not match", DIGEST, "ksync sync web"]);
    assert!(annotations(&cluster, &ns, "web").await?.get(keys::APPROVED_REVISION).is_none());

    // The right digest: recorded under alice, the digest checked and dropped.
    let (ok, out) = run(annotate(&[
        &format!("{}=web-2", keys::APPROVED_REVISION),
        &format!("{}={DIGEST}", keys::APPROVE_DIGEST),
    ]))
    .await?;
    assert!(ok, "approving: {out}");
    let recorded = annotations(&cluster, &ns, "web").await?;
    assert_eq!(recorded[keys::APPROVED_BY], "alice", "{recorded}");
    assert_eq!(recorded[keys::APPROVED_DIGEST], DIGEST, "{recorded}");
    assert!(recorded[keys::APPROVED_AT].as_str().is_some_and(|t| t.ends_with('Z')), "{recorded}");
    assert!(recorded.get(keys::APPROVE_DIGEST).is_none(), "approve-digest was stored: {recorded}");

    // Audit annotations cannot be set by hand; the record stays.
    let (ok, out) = run(annotate(&[&format!("{}=mallory", keys::APPROVED_BY)])).await?;
    denied(ok, &out, &[keys::APPROVED_BY, "cannot be set or changed by hand"]);
    let (ok, out) = kubectl_as(
        &cluster,
        "alice",
        &["annotate", "-n", &ns, "application", "api", &format!("{}=alice", keys::APPROVED_BY)],
        None,
    )
    .await?;
    denied(ok, &out, &["cannot be set or changed by hand"]);
    // An unrelated update keeps the record.
    let (ok, out) =
        kubectl_as(&cluster, "alice", &["label", "-n", &ns, "application", "web", "team=a"], None)
            .await?;
    assert!(ok, "labelling: {out}");
    assert_eq!(annotations(&cluster, &ns, "web").await?[keys::APPROVED_BY], "alice");

    // A rollback to another Application's Revision, or to one of another commit, is denied.
    let (ok, out) = run(annotate(&[
        &format!("{}={COMMIT_A}", keys::ROLLBACK_REVISION),
        &format!("{}=api-1", keys::ROLLBACK_TARGET_REVISION),
    ]))
    .await?;
    denied(ok, &out, &["Revision api-1 belongs to Application api, not web"]);
    let (ok, out) = run(annotate(&[
        &format!("{}={COMMIT_B}", keys::ROLLBACK_REVISION),
        &format!("{}=web-1", keys::ROLLBACK_TARGET_REVISION),
    ]))
    .await?;
    denied(ok, &out, &["Revision web-1 is of commit 0123456789ab"]);
    // A valid one is recorded under alice with the target's fingerprint.
    let (ok, out) = run(annotate(&[
        &format!("{}={COMMIT_A}", keys::ROLLBACK_REVISION),
        &format!("{}=web-1", keys::ROLLBACK_TARGET_REVISION),
    ]))
    .await?;
    assert!(ok, "requesting a rollback: {out}");
    let recorded = annotations(&cluster, &ns, "web").await?;
    assert_eq!(recorded[keys::ROLLBACK_REQUESTED_BY], "alice", "{recorded}");
    let hash = recorded[keys::ROLLBACK_TARGET_HASH].as_str().unwrap_or_default();
    assert!(hash.starts_with("sha256:") && hash.len() == 71, "{recorded}");

    // Every call was counted by endpoint and outcome, and admission was timed.
    let metrics = webhook.metrics_text().await?;
    for line in [
        r#"kuvryn_sync_webhook_requests_total{endpoint="/admit/applications",outcome="denied"}"#,
        r#"kuvryn_sync_webhook_requests_total{endpoint="/admit/applications",outcome="allowed"}"#,
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }
    assert!(
        metrics.contains(
            r#"kuvryn_sync_webhook_admission_duration_seconds_count{endpoint="/admit/applications"}"#
        ),
        "{metrics}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_whose_rules_cannot_return_a_bool_are_denied_by_rule_index() -> Result<()> {
    let cluster = TestCluster::start().await?;
    let suffix = cluster.namespace("hc").await?;
    let webhook = WebhookProcess::start(&cluster)?;
    webhook.register(&cluster, &suffix).await?;
    grant(&cluster, "bob", &suffix).await?;
    let health_check = |name: &str, rules: &str| {
        format!(
            "apiVersion: sync.kuvryn.io/v1alpha1\nkind: HealthCheck\nmetadata: {{name: {name}}}\n\
             spec:\n  group: argoproj.io\n  kind: Rollout\n  rules:\n{rules}"
        )
    };
    let apply = |text: String| {
        let cluster = &cluster;
        async move { kubectl_as(cluster, "bob", &["apply", "-f", "-"], Some(text)).await }
    };
    let valid = "    - {expression: 'object.status.phase == \"Degraded\"', state: Degraded}\n";

    let (ok, out) = apply(health_check(
        &format!("{suffix}-field"),
        &format!("{valid}    - {{expression: object.status.phase, state: Healthy}}\n"),
    ))
    .await?;
    denied(ok, &out, &["spec.rules[1].expression", "not a bool"]);
    let (ok, out) = apply(health_check(
        &format!("{suffix}-syntax"),
        "    - {expression: 'object.(', state: Healthy}\n",
    ))
    .await?;
    denied(ok, &out, &["spec.rules[0].expression", "does not compile"]);
    let (ok, out) = apply(health_check(
        &format!("{suffix}-scope"),
        "    - {expression: 'self.status.ready == true', state: Healthy}\n",
    ))
    .await?;
    denied(ok, &out, &["spec.rules[0].expression", "`self`"]);

    let name = format!("{suffix}-valid");
    let (ok, out) = apply(health_check(
        &name,
        &format!("{valid}    - {{expression: 'has(object.status) && object.status.phase == \"Healthy\"', state: Healthy}}\n"),
    ))
    .await?;
    assert!(ok, "a valid HealthCheck was refused: {out}");
    let stored = Api::<kuvryn_sync_api::HealthCheck>::all(cluster.client()).get_opt(&name).await?;
    assert!(stored.is_some(), "the valid HealthCheck was not stored");
    for refused in ["field", "syntax", "scope"] {
        let name = format!("{suffix}-{refused}");
        let found =
            Api::<kuvryn_sync_api::HealthCheck>::all(cluster.client()).get_opt(&name).await?;
        assert!(found.is_none(), "{name} was stored");
    }
    let metrics = webhook.metrics_text().await?;
    assert!(
        metrics.contains(
            r#"kuvryn_sync_webhook_requests_total{endpoint="/validate/healthchecks",outcome="denied"} 3"#
        ),
        "{metrics}"
    );
    Ok(())
}
