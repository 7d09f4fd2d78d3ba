//! docs/getting-started.md, followed step by step against the test cluster with the real binaries
//! standing in for the chart's Pods: the chart installed (objects rendered by the real Helm
//! engine, the webhook behind its Service; controller and webhook authenticated as the chart's
//! ServiceAccounts, so only the chart's RBAC lets them act), every manifest of the guide applied from
//! `docs/examples/` (the Repository's URL pointed at a local git daemon serving a copy of
//! `docs/examples/platform/`), then the guide's `ksync` commands: `status` lists both
//! Applications, `sync --yes` approves `web`, which becomes Synced and Healthy; the discovered
//! `broken` is diagnosed (ImagePullBackOff); a second commit is approved and `rollback` returns to
//! the first. So the guide cannot rot.
//!
//! Needs the sandbox: the binaries stand in for the chart's Pods through the sandbox's Service
//! map, and its simulated workloads make `web` Healthy and `broken` ImagePullBackOff. Against a
//! real cluster (`KSYNC_E2E_KUBECONFIG`) it skips saying so; there the kind workflow
//! (.github/workflows/e2e-kind.yml) applies the same files with the chart's own Pods.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use kuvryn_sync_tests::cluster::{
    ControllerProcess, TestCluster, skip_on_real_cluster, wait_for, workspace_binary,
};
use kuvryn_sync_tests::helm::{chart_dir, render_chart_in, workspace_root};
use kuvryn_sync_tests::install::{apply, kubectl, start_webhook};
use kuvryn_sync_tests::servers::{BareRepo, GitDaemon};
use serde_json::{Value, json};

const EXAMPLE_URL: &str = "https://git.example.com/you/platform.git";
const NS: &str = "team-a";
const DEADLINE: Duration = Duration::from_secs(90);

fn examples() -> PathBuf {
    workspace_root().join("docs/examples")
}

/// `ksync --kubeconfig K -n team-a ARGS`, off the runtime; (exit code, stdout + stderr).
async fn ksync(cluster: &TestCluster, args: &[&str]) -> Result<(i32, String)> {
    let mut cmd = Command::new(workspace_binary("ksync")?);
    cmd.arg("--kubeconfig").arg(cluster.kubeconfig()).args(["-n", NS]).args(args);
    cmd.stdin(Stdio::null());
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Ok((out.status.code().unwrap_or(-1), text))
}

/// Retry `ksync ARGS` until it exits 0 and its output contains `expect`.
async fn ksync_until(cluster: &TestCluster, args: &[&str], expect: &str) -> Result<String> {
    let start = std::time::Instant::now();
    loop {
        let (code, out) = ksync(cluster, args).await?;
        if code == 0 && out.contains(expect) {
            return Ok(out);
        }
        if start.elapsed() > DEADLINE {
            bail!("`ksync {}` never printed {expect:?} within {DEADLINE:?}: {out}", args.join(" "));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn application(cluster: &TestCluster, name: &str) -> Result<Value> {
    let (ok, out) = kubectl(
        cluster,
        &["get", "applications.sync.kuvryn.io", name, "-n", NS, "-o", "json"],
        None,
    )
    .await?;
    ensure!(ok, "kubectl get application {name}: {out}");
    Ok(serde_json::from_str(&out)?)
}

/// The files of `docs/examples/platform/`, relative to it.
fn platform_files(root: &Path) -> Result<Vec<(String, String)>> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let relative = path.strip_prefix(root)?.to_string_lossy().into_owned();
                files.push((relative, std::fs::read_to_string(&path)?));
            }
        }
    }
    Ok(files)
}

/// Install the chart (as `helm install` would) and start the controller and the webhook as the
/// chart's ServiceAccounts, so that the chart's RBAC is what they can do.
async fn install(
    cluster: &TestCluster,
    dir: &Path,
) -> Result<(Option<kuvryn_sync_tests::servers::ServerProcess>, ControllerProcess)> {
    let system = cluster.namespace("kuvryn-system").await?;
    let render = render_chart_in(&chart_dir(), &system, json!({}))?;
    let objects: Vec<&Value> = render.docs.iter().map(|d| &d.object).collect();
    apply(cluster, dir, "chart", &objects).await?;
    let sandbox = cluster.sandbox().context("the guide's test runs on the sandbox")?;
    let identity = |name: &str| {
        let user = format!("system:serviceaccount:{system}:{name}");
        sandbox.user_kubeconfig(&user, &["system:authenticated"])
    };
    let (controller_kc, webhook_kc) =
        (identity("kuvryn-sync-controller")?, identity("kuvryn-sync-webhook")?);
    let webhook = start_webhook(cluster, &render, &system, dir, &webhook_kc)?;
    let flags = ["--leader-election-namespace", &system, "--default-poll-interval", "1h"];
    let env = [("KUBECONFIG", controller_kc.to_str().context("kubeconfig path")?)];
    let controller =
        ControllerProcess::start_logged(cluster, &flags, &env, &dir.join("controller.log"))?;
    Ok((webhook, controller))
}

/// Apply one example file (with `from` replaced by `to` when given).
async fn apply_example(
    cluster: &TestCluster,
    dir: &Path,
    name: &str,
    replace: Option<(&str, &str)>,
) -> Result<()> {
    let mut text = std::fs::read_to_string(examples().join(name))?;
    if let Some((from, to)) = replace {
        ensure!(text.contains(from), "docs/examples/{name} no longer holds {from}");
        text = text.replace(from, to);
    }
    let file = dir.join(name);
    std::fs::write(&file, text)?;
    let (ok, out) = kubectl(cluster, &["apply"], Some(&file)).await?;
    ensure!(ok, "kubectl apply -f docs/examples/{name}: {out}");
    Ok(())
}

/// Ask the Repository to fetch now (instead of waiting for its poll interval).
async fn fetch_now(cluster: &TestCluster) -> Result<()> {
    let now = format!("{:?}", std::time::SystemTime::now());
    let patch =
        json!({"metadata": {"annotations": {"sync.kuvryn.io/reconcile-requested-at": now}}})
            .to_string();
    let (ok, out) = kubectl(
        cluster,
        &[
            "patch",
            "repositories.sync.kuvryn.io",
            "platform",
            "-n",
            NS,
            "--type",
            "merge",
            "-p",
            &patch,
        ],
        None,
    )
    .await?;
    ensure!(ok, "{out}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_getting_started_guide_reaches_a_healthy_application() -> Result<()> {
    let test = "the_getting_started_guide_reaches_a_healthy_application";
    if skip_on_real_cluster(test, "the sandbox's Service map (the binaries stand in for the Pods)")
    {
        return Ok(());
    }
    let cluster = TestCluster::start_with_workloads().await?;
    let dir = tempfile::tempdir()?;
    let (_webhook, _controller) = install(&cluster, dir.path()).await?;
    let git_root = tempfile::tempdir()?;
    let repo = BareRepo::create(git_root.path(), "platform")?;
    let daemon = GitDaemon::start(git_root.path())?;
    let files = platform_files(&examples().join("platform"))?;
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    let first = repo.commit(&refs, "platform from docs/examples")?;

    apply_example(&cluster, dir.path(), "team-a.yaml", None).await?;
    let url = daemon.url(&repo.name);
    apply_example(&cluster, dir.path(), "repository.yaml", Some((EXAMPLE_URL, &url))).await?;
    apply_example(&cluster, dir.path(), "application.yaml", None).await?;

    // ksync status: both Applications, the discovered one included.
    let status = ksync_until(&cluster, &["status"], "broken").await?;
    ensure!(status.contains("web"), "{status}");
    // ksync sync web: approve the waiting Revision, then Synced and Healthy.
    if let Err(e) = approve(&cluster, "web", &first).await {
        let status = application(&cluster, "web").await?["status"].clone();
        bail!("{e:#}\nweb: {status}\ncontroller log:\n{}", controller_log(dir.path()));
    }
    let (code, out) =
        ksync(&cluster, &["wait", "web", "--for", "healthy", "--timeout", "90s"]).await?;
    ensure!(code == 0, "ksync wait web --for healthy: {out}\n{}", controller_log(dir.path()));
    let app = application(&cluster, "web").await?;
    assert_eq!(app["status"]["sync"]["state"], "Synced");
    assert_eq!(app["status"]["deployedRevision"], first.as_str());

    // ksync diagnose broken: approved, it never becomes ready, and the diagnosis says why.
    approve(&cluster, "broken", &first).await?;
    ksync_until(&cluster, &["diagnose", "broken"], "ImagePullBackOff").await?;

    // A second commit, approved, then ksync rollback returns to the first.
    let kustomization = files
        .iter()
        .find(|(p, _)| p == "apps/web/kustomization.yaml")
        .context("apps/web/kustomization.yaml")?
        .1
        .replace("greeting=hello", "greeting=hi");
    let second = repo.commit(&[("apps/web/kustomization.yaml", &kustomization)], "say hi")?;
    fetch_now(&cluster).await?;
    approve(&cluster, "web", &second).await?;
    wait_deployed(&cluster, "web", &second).await?;
    wait_healthy(&cluster, "web").await?;
    let (code, out) = ksync(&cluster, &["rollback", "web", "--yes"]).await?;
    ensure!(code == 0, "ksync rollback web --yes: {out}");
    wait_deployed(&cluster, "web", &first).await?;
    wait_healthy(&cluster, "web").await
}

/// Wait for the Revision of `commit` to await approval (`ksync plan`), then `ksync sync --yes`.
async fn approve(cluster: &TestCluster, app: &str, commit: &str) -> Result<()> {
    let waiting = format!("commit {}, AwaitingApproval", &commit[..12]);
    ksync_until(cluster, &["plan", app], &waiting).await?;
    let (code, out) = ksync(cluster, &["sync", app, "--yes"]).await?;
    ensure!(code == 0, "ksync sync {app} --yes: {out}");
    Ok(())
}

async fn wait_healthy(cluster: &TestCluster, app: &str) -> Result<()> {
    let (code, out) =
        ksync(cluster, &["wait", app, "--for", "healthy", "--timeout", "90s"]).await?;
    ensure!(code == 0, "ksync wait {app} --for healthy: {out}");
    Ok(())
}

async fn wait_deployed(cluster: &TestCluster, name: &str, commit: &str) -> Result<()> {
    wait_for(&format!("{name} deployed at {commit}"), DEADLINE, || async {
        let status = application(cluster, name).await?["status"].take();
        Ok(((status["deployedRevision"] == commit).then_some(()), status.to_string()))
    })
    .await
}

fn controller_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("controller.log")).unwrap_or_default()
}

/// Every example file the guide names exists, and every file under `docs/examples/` is named by
/// the guide (directly, or as part of `examples/platform/`), so nothing there is left unexplained.
#[test]
fn the_guide_names_exactly_the_example_files() -> Result<()> {
    let guide = std::fs::read_to_string(workspace_root().join("docs/getting-started.md"))?;
    let named: std::collections::BTreeSet<String> = guide
        .split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | '`' | '[' | ']'))
        .filter_map(|w| w.find("examples/").map(|at| w[at + "examples/".len()..].to_owned()))
        .map(|w| w.trim_end_matches(['.', ',', ':']).trim_end_matches('/').to_owned())
        .filter(|w| !w.is_empty())
        .collect();
    for name in &named {
        ensure!(examples().join(name).exists(), "the guide names docs/examples/{name}, missing");
    }
    let mut pending = vec![examples()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let relative = path.strip_prefix(examples())?.to_string_lossy().into_owned();
            if path.is_dir() {
                pending.push(path);
            } else if !named
                .iter()
                .any(|n| relative == *n || relative.starts_with(&format!("{n}/")))
            {
                bail!("docs/examples/{relative} is not named by docs/getting-started.md");
            }
        }
    }
    Ok(())
}
