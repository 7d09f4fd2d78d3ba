//! Hostile YAML end to end: the real controller binary, real git daemons. One tenant's namespace
//! holds a Repository whose `.ksync.yaml` is an alias bomb (billion laughs) and an Application
//! whose manifest is one; the controller process survives them (same PID, bounded peak memory),
//! reports each failure naming the budget, and another tenant's Application in another namespace
//! keeps syncing new commits meanwhile.

use std::time::Duration;

use anyhow::{Context, Result};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kuvryn_sync_api::{Application, Repository, keys};
use kuvryn_sync_tests::application::{config_map, env};
use kuvryn_sync_tests::apply::grant_deployer;
use kuvryn_sync_tests::cluster::wait_for;
use kuvryn_sync_tests::servers::{BareRepo, GitDaemon};
use kuvryn_sync_tests::{alive, proc_status_kib};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(60);

/// The controller's peak resident memory must stay under this (its baseline in a debug build is
/// well under 100 MiB; one bomb parse stops after at most a million nodes, about 75 MB).
const MAX_PEAK_RSS_KIB: u64 = 300 * 1024;

/// What the budget errors say.
const NODE_LIMIT: &str = "YAML budget exceeded: more than 1000000 nodes (aliases included)";

/// Billion laughs: nine levels, each a list of ten aliases of the level below (10^9 leaves),
/// under `key` of a mapping that otherwise looks like `head`.
fn bomb(head: &str, key: &str) -> String {
    let mut text = format!("{head}{key}:\n  l0: &l0 [lol]\n");
    for level in 1..10 {
        let refs = vec![format!("*l{}", level - 1); 10].join(", ");
        text.push_str(&format!("  l{level}: &l{level} [{refs}]\n"));
    }
    text
}

/// (status, reason, message) of the Ready condition of any object's JSON.
fn ready_of(object: &Value) -> Option<(String, String, String)> {
    let conditions = object["status"]["conditions"].as_array()?;
    let ready = conditions.iter().find(|c| c["type"] == "Ready")?;
    let text = |k: &str| ready[k].as_str().unwrap_or_default().to_owned();
    Some((text("status"), text("reason"), text("message")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alias_bombs_fail_their_own_objects_and_the_controller_keeps_serving_others() -> Result<()>
{
    // The steady tenant: the Env's namespace, Repository `apps`, one Application.
    let env = env("steady", true).await?;
    let first = env
        .push(&[("steady/cm.yaml", config_map("steady", "one", json!({})))], "steady one")
        .await?;
    env.create_app("steady", "steady", json!({})).await?;
    env.wait_synced("steady", &first).await?;
    let pid = env.controller.as_ref().context("the controller runs")?.pid();
    let baseline = proc_status_kib(pid, "VmHWM").context("the controller's VmHWM")?;

    // The hostile tenant: its own namespace, Git repositories and Repositories.
    let admin = env.cluster.client();
    let hostile = env.cluster.namespace("hostile").await?;
    grant_deployer(&admin, &hostile, &["configmaps"]).await?;
    let root = tempfile::tempdir()?;
    let manifests = BareRepo::create(root.path(), "manifests")?;
    let manifest_bomb = bomb("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\n", "data");
    manifests.commit(&[("bomb/app.yaml", &manifest_bomb)], "a manifest alias bomb")?;
    let config = BareRepo::create(root.path(), "config")?;
    config.commit(&[(".ksync.yaml", &bomb("", "applications"))], "a .ksync.yaml alias bomb")?;
    let daemon = GitDaemon::start(root.path())?;
    let repositories = Api::<Repository>::namespaced(admin.clone(), &hostile);
    for (name, repo) in [("manifests", &manifests), ("config", &config)] {
        let repository: Repository = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
            "metadata": {"name": name},
            "spec": {"type": "git", "git": {"url": daemon.url(&repo.name), "revision": "main"},
                     "applicationServiceAccountName": "deployer"},
        }))?;
        repositories.create(&PostParams::default(), &repository).await?;
    }
    let applications = Api::<Application>::namespaced(admin.clone(), &hostile);
    let app: Application = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "bomb"},
        "spec": {"serviceAccountName": "deployer",
                 "source": {"repositoryRef": {"name": "manifests"}, "path": "bomb",
                            "render": {"type": "yaml"}},
                 "destination": {"namespace": hostile},
                 "sync": {"automatic": true, "prune": true}},
    }))?;
    applications.create(&PostParams::default(), &app).await?;

    // Meanwhile the steady tenant pushes a new commit.
    let second = env
        .push(&[("steady/cm.yaml", config_map("steady", "two", json!({})))], "steady two")
        .await?;

    // The bomb Application fails its render, naming the file and the limit.
    let failed = wait_for("Application bomb: Ready=False/RenderFailure", DEADLINE, || async {
        let app = serde_json::to_value(applications.get("bomb").await?)?;
        let ready = ready_of(&app);
        let done = ready.as_ref().is_some_and(|(s, r, _)| s == "False" && r == "RenderFailure");
        Ok((done.then(|| ready.clone()).flatten(), format!("{ready:?}")))
    })
    .await
    .with_context(|| format!("controller log:\n{}", env.log_tail(40)))?;
    assert!(failed.2.contains("bomb/app.yaml"), "{}", failed.2);
    assert!(failed.2.contains(NODE_LIMIT), "{}", failed.2);

    // The `.ksync.yaml` bomb is the Repository's discovery failure, naming the limit.
    let refused =
        wait_for("Repository config: Ready=False/ValidationFailure", DEADLINE, || async {
            let repo = serde_json::to_value(repositories.get("config").await?)?;
            let ready = ready_of(&repo);
            let done =
                ready.as_ref().is_some_and(|(s, r, _)| s == "False" && r == "ValidationFailure");
            Ok((done.then(|| ready.clone()).flatten(), format!("{ready:?}")))
        })
        .await
        .with_context(|| format!("controller log:\n{}", env.log_tail(40)))?;
    assert!(refused.2.contains(".ksync.yaml"), "{}", refused.2);
    assert!(refused.2.contains(NODE_LIMIT), "{}", refused.2);
    assert!(
        applications
            .list(&Default::default())
            .await?
            .items
            .iter()
            .all(|a| a.metadata.name == Some("bomb".into())),
        "the bomb discovered no Application"
    );

    // The other tenant synced its new commit, and nothing of the bomb reached the cluster.
    env.wait_synced("steady", &second).await?;
    let configmaps = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(admin, &hostile);
    assert!(configmaps.get_opt("bomb").await?.is_none(), "the bomb was applied");

    // Again after a refresh of the bomb's Repository (the same commit read once more), and a
    // third steady commit: still the same process.
    let now = format!("{:?}", std::time::SystemTime::now());
    let patch = json!({"metadata": {"annotations": {keys::RECONCILE_REQUESTED_AT: now}}});
    repositories.patch("config", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    repositories.patch("manifests", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let third = env
        .push(&[("steady/cm.yaml", config_map("steady", "three", json!({})))], "steady three")
        .await?;
    env.wait_synced("steady", &third).await?;
    // Synced is written when the apply ends; Ready once health is observed after it.
    env.wait_ready("steady", "True", "Healthy").await?;

    assert!(alive(pid), "the controller process {pid} exited");
    assert_eq!(env.controller.as_ref().map(|c| c.pid()), Some(pid));
    let peak = proc_status_kib(pid, "VmHWM").context("the controller's VmHWM")?;
    println!("controller peak RSS: {baseline} KiB before the bombs, {peak} KiB after");
    assert!(peak < MAX_PEAK_RSS_KIB, "peak RSS {peak} KiB (before the bombs {baseline} KiB)");
    Ok(())
}
