//! Checkout limits end to end: the real controller binary, real git daemons, the sandbox API.
//! A tenant pushes a "git bomb" (10^10 paths in a few kilobytes); the controller refuses it while
//! walking the object database, before writing anything, and carries on: same process, bounded
//! memory and cache growth, the Repository and its Application reporting the limit and its flag
//! (`SourceFailure`), the Application keeping its last good state (nothing pruned), and another
//! tenant's Application still following its pushes.

use std::path::Path;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kuvryn_sync_api::{Application, Repository, SyncState, keys};
use kuvryn_sync_tests::application::{DEADLINE, config_map, env};
use kuvryn_sync_tests::apply::{DEPLOYER, grant_deployer};
use kuvryn_sync_tests::cluster::wait_for;
use kuvryn_sync_tests::servers::{BareRepo, GitDaemon};
use serde_json::json;

/// The controller's peak resident memory may not pass this while it refuses the bomb.
const MAX_VM_HWM_KIB: u64 = 256 * 1024;
/// The cache directory may grow by at most this while the bomb is fetched and refused (the
/// bomb's pack is a few kilobytes; its checkout would be 10^10 files).
const MAX_CACHE_GROWTH_BYTES: u64 = 1 << 20;

/// `VmHWM` (peak resident set) of `pid`, in KiB.
fn vm_hwm_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).context("VmHWM in status")?;
    Ok(line.split_whitespace().nth(1).context("VmHWM value")?.parse()?)
}

/// Bytes of the files below `dir` (symlinks not followed).
fn du(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}

fn ready(repo: &Repository) -> Option<(String, String, String)> {
    repo.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_bomb_is_refused_and_the_controller_and_the_other_tenant_carry_on() -> Result<()> {
    // Tenant A: the Env's namespace, Repository `apps` and Application `web`.
    let env = env("bomb-a", true).await?;
    let a1 = env.push(&[("apps/web/cm.yaml", config_map("web", "1", json!({})))], "a1").await?;
    env.create_app("web", "apps/web", json!({})).await?;
    env.wait_synced("web", &a1).await?;

    // Tenant B: its own namespace, Git server, Repository `bomb` and Application `victim`.
    let admin = env.cluster.client();
    let ns_b = env.cluster.namespace("bomb-b").await?;
    grant_deployer(&admin, &ns_b, &["configmaps"]).await?;
    let root = tempfile::tempdir()?;
    let repo_b = BareRepo::create(root.path(), "bomb")?;
    let _daemon = GitDaemon::start(root.path())?;
    let good = repo_b.commit(&[("app/cm.yaml", &config_map("victim", "1", json!({})))], "good")?;
    let repositories: Api<Repository> = Api::namespaced(admin.clone(), &ns_b);
    let repository: Repository = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
        "metadata": {"name": "bomb"},
        "spec": {"type": "git", "git": {"url": _daemon.url(&repo_b.name), "revision": "main"}},
    }))?;
    repositories.create(&PostParams::default(), &repository).await?;
    let applications: Api<Application> = Api::namespaced(admin.clone(), &ns_b);
    let app: Application = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "victim"},
        "spec": {
            "serviceAccountName": DEPLOYER,
            "source": {"repositoryRef": {"name": "bomb"}, "path": "app", "render": {"type": "yaml"}},
            "destination": {"namespace": ns_b},
            "sync": {"automatic": true, "prune": true},
        },
    }))?;
    applications.create(&PostParams::default(), &app).await?;
    let deployed = |app: &Application| {
        app.status.as_ref().and_then(|s| {
            (s.sync.state == SyncState::Synced).then(|| s.deployed_revision.clone()).flatten()
        })
    };
    wait_for("victim Synced at the good commit", DEADLINE, || async {
        let app = applications.get("victim").await?;
        let at = deployed(&app);
        Ok(((at.as_deref() == Some(good.as_str())).then_some(()), format!("{at:?}")))
    })
    .await?;

    let controller = env.controller.as_ref().context("controller")?;
    let pid = controller.pid();
    let cache_before = du(controller.cache_dir());
    let hwm_before = vm_hwm_kib(pid)?;

    // 10 levels of 10 entries: 10^10 paths.
    let bomb = repo_b.push_bomb(9, 10)?;
    let now = format!("{:?}", std::time::SystemTime::now());
    let patch = json!({"metadata": {"annotations": {keys::RECONCILE_REQUESTED_AT: now}}});
    repositories.patch("bomb", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let message = wait_for("Repository bomb refuses the bomb", DEADLINE, || async {
        let repo = repositories.get("bomb").await?;
        let ready = ready(&repo);
        let refused = ready.as_ref().filter(|(status, reason, message)| {
            status == "False" && reason == "SourceFailure" && message.contains(&bomb)
        });
        Ok((refused.map(|(_, _, m)| m.clone()), format!("{ready:?}")))
    })
    .await
    .with_context(|| env.log_tail(40))?;
    ensure!(message.contains("more than 100000 paths"), "the limit: {message}");
    ensure!(message.contains("--checkout-max-files"), "the flag: {message}");

    // Tenant A carries on: a new commit syncs.
    let a2 = env.push(&[("apps/web/cm.yaml", config_map("web", "2", json!({})))], "a2").await?;
    env.wait_synced("web", &a2).await?;

    // Tenant B's Application reports the source failure naming the limit, and keeps its last
    // good state: nothing pruned, still deployed at the good commit.
    let victim = wait_for("victim reports the refused checkout", DEADLINE, || async {
        let app = applications.get("victim").await?;
        let ready =
            app.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
        let failed = ready.is_some_and(|c| {
            c.status == "False"
                && c.reason == "SourceFailure"
                && c.message.contains("--checkout-max-files")
        });
        Ok((failed.then_some(app.clone()), format!("{ready:?}")))
    })
    .await?;
    let at = victim.status.as_ref().and_then(|s| s.deployed_revision.clone());
    ensure!(at.as_deref() == Some(good.as_str()), "{:?}", victim.status);
    Api::<ConfigMap>::namespaced(admin.clone(), &ns_b).get("victim").await?;
    let repo = repositories.get("bomb").await?;
    let observed = repo.status.as_ref().and_then(|s| s.observed_revision.clone());
    ensure!(observed.as_deref() == Some(good.as_str()), "observed {observed:?}");

    // The same process, with bounded memory and cache growth.
    let mut env = env;
    let controller = env.controller.as_mut().context("controller")?;
    ensure!(!controller.has_exited() && controller.pid() == pid, "the controller restarted");
    let hwm_after = vm_hwm_kib(pid)?;
    let cache_after = du(controller.cache_dir());
    let growth = cache_after.saturating_sub(cache_before);
    println!(
        "controller VmHWM {hwm_before} KiB before the bomb, {hwm_after} KiB after; cache \
         {cache_before} bytes before, {cache_after} after (+{growth})"
    );
    ensure!(hwm_after < MAX_VM_HWM_KIB, "VmHWM {hwm_after} KiB");
    ensure!(growth < MAX_CACHE_GROWTH_BYTES, "the cache grew by {growth} bytes");
    Ok(())
}
