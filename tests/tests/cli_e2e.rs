//! The `ksync` cluster commands end to end: the real binary, run as a process with
//! `--kubeconfig`, against the sandbox with the real controller and a git daemon. Human output is
//! checked on its key lines and `-o json` output parsed; a Secret value planted in Git never
//! appears in any output.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use kuvryn_sync_api::{Application, Repository, RevisionPhase, SyncState, keys};
use kuvryn_sync_tests::application::{Env, config_map, env};
use kuvryn_sync_tests::cli::Ksync;
use kuvryn_sync_tests::cluster::wait_for;
use kuvryn_sync_tests::webhook::WebhookProcess;
use serde_json::{Value, json};

/// A Secret value that must never be printed.
const CANARY: &str = "canary-s3cr3t-value-7f2a";

fn secret(name: &str) -> String {
    serde_json::to_string(&json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "stringData": {"password": CANARY},
    }))
    .expect("json")
}

fn assert_no_canary(what: &str, text: &str) {
    assert!(!text.contains(CANARY), "{what} printed a Secret value:\n{text}");
}

/// The objects of `ksync render` output (a YAML stream).
fn yaml_objects(text: &str) -> Result<Vec<Value>> {
    Ok(kuvryn_sync_core::yaml::documents(text)?)
}

/// Write `files` into a fresh folder, as a local checkout of the same commit.
fn local_copy(files: &[(&str, String)]) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for (name, content) in files {
        std::fs::write(dir.path().join(name), content)?;
    }
    Ok(dir)
}

/// `ksync render --local` prints the objects the controller applied: same data, same labels.
async fn assert_render_matches_live(
    env: &Env,
    ksync: &Ksync,
    app: &str,
    render_type: &str,
    files: &[(&str, String)],
) -> Result<()> {
    let dir = local_copy(files)?;
    let path = dir.path().to_str().context("utf-8 path")?;
    let stdout =
        ksync.ok(&["render", "--local", path, "--type", render_type, "--app", app]).await?;
    assert_no_canary("render", &stdout);
    let objects = yaml_objects(&stdout)?;
    let config_maps: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "ConfigMap").collect();
    ensure!(!config_maps.is_empty(), "render printed no ConfigMap:\n{stdout}");
    for rendered in config_maps {
        let name = rendered["metadata"]["name"].as_str().context("name")?;
        let live = env.api::<ConfigMap>().get(name).await?;
        let live = serde_json::to_value(&live)?;
        assert_eq!(rendered["data"], live["data"], "{name}: rendered data differs from applied");
        assert_eq!(rendered["metadata"]["namespace"], json!(env.namespace));
        assert_eq!(
            rendered["metadata"]["labels"][keys::APPLICATION],
            live["metadata"]["labels"][keys::APPLICATION]
        );
    }
    for secret in objects.iter().filter(|o| o["kind"] == "Secret") {
        assert_eq!(secret["stringData"]["password"], "***", "render masks Secret values");
    }
    Ok(())
}

/// status, plan, history, wait, diagnose, sync (automatic), rollback and render on real
/// Applications, and a wait on a failing Application that ends at once with exit code 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_commands_show_and_change_real_applications() -> Result<()> {
    let env = env("cli", true).await?;
    let ksync = Ksync::new(&env)?;
    let web_v1 =
        [("settings.yaml", config_map("settings", "1", json!({}))), ("db.yaml", secret("db"))];
    let files: Vec<(String, String)> =
        web_v1.iter().map(|(n, c)| (format!("apps/web/{n}"), c.clone())).collect();
    let files: Vec<(&str, String)> = files.iter().map(|(n, c)| (n.as_str(), c.clone())).collect();
    let commit1 = env.push(&files, "web v1").await?;
    env.create_app("web", "apps/web", json!({})).await?;
    env.wait_synced("web", &commit1).await?;

    // wait --for healthy returns 0 once Ready=True/Healthy.
    let waited = ksync.ok(&["wait", "web", "--for", "healthy", "--timeout", "60s"]).await?;
    assert!(waited.contains("web is healthy"), "{waited}");

    // status: the list and one Application, human and JSON.
    let list = ksync.ok(&["status"]).await?;
    let row = list.lines().find(|l| l.starts_with("web ")).context("a row for web")?;
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[1..3], ["Synced", "Healthy"], "{list}");
    assert_eq!(cells[4], &commit1[..12], "{list}");
    let listed = ksync.json(&["status"]).await?;
    assert_eq!(listed[0]["metadata"]["name"], "web", "{listed}");
    let detail = ksync.ok(&["status", "web"]).await?;
    assert!(detail.contains("Revisions (newest first):"), "{detail}");
    assert!(detail.contains(&commit1[..12]), "{detail}");
    assert!(detail.contains("Ready True Healthy"), "{detail}");
    let one = ksync.json(&["status", "web"]).await?;
    assert_eq!(one["status"]["deployedRevision"], json!(commit1));

    // plan: counts and actions; the Secret's value is never printed.
    let plan = ksync.ok(&["plan", "web"]).await?;
    assert!(plan.contains(&format!("+ create v1 ConfigMap {}/settings", env.namespace)), "{plan}");
    assert!(plan.contains("Plan: 2 to create, 0 to update, 0 to delete"), "{plan}");
    assert!(plan.contains("Digest: sha256:"), "{plan}");
    assert_no_canary("plan", &plan);
    let plan_json = ksync.json(&["plan", "web"]).await?;
    assert_eq!(plan_json["create"], 2, "{plan_json}");
    assert_no_canary("plan -o json", &plan_json.to_string());

    // A second commit: an update with its field path, and history newest first.
    let mut v2 = files.clone();
    v2[0].1 = config_map("settings", "2", json!({}));
    let commit2 = env.push(&v2, "web v2").await?;
    // wait --for healthy after a push: Ready stays True from commit1 while commit2 rolls out,
    // so the wait lasts until commit2's own Revision is Healthy, not only until Ready is.
    env.wait_app("web", "commit2 desired", |app| {
        app.status.as_ref().and_then(|s| s.desired_revision.as_deref()) == Some(commit2.as_str())
    })
    .await?;
    let waited = ksync.ok(&["wait", "web", "--for", "healthy", "--timeout", "60s"]).await?;
    assert!(waited.contains("web is healthy"), "{waited}");
    let rolled_out = env.revision("web", &commit2).await?;
    assert_eq!(
        rolled_out.status.as_ref().and_then(|s| s.phase),
        Some(RevisionPhase::Healthy),
        "ksync wait returned before commit2's rollout finished: {:?}",
        rolled_out.status
    );
    env.wait_synced("web", &commit2).await?;
    let plan = ksync.ok(&["plan", "web"]).await?;
    assert!(plan.contains(&format!("~ update v1 ConfigMap {}/settings", env.namespace)), "{plan}");
    assert!(plan.lines().any(|l| l.trim() == ".data.value"), "{plan}");
    assert!(plan.contains("0 to create, 1 to update"), "{plan}");
    assert_no_canary("plan", &plan);
    let history = ksync.ok(&["history", "web"]).await?;
    let rows: Vec<&str> = history.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{history}");
    assert!(rows[0].contains(&commit2[..12]) && rows[1].contains(&commit1[..12]), "{history}");
    let history_json = ksync.json(&["history", "web"]).await?;
    assert_eq!(history_json[0]["spec"]["source"]["revision"], json!(commit2));
    assert_eq!(history_json[1]["spec"]["source"]["revision"], json!(commit1));

    // diagnose on a healthy Application.
    let diagnosis = ksync.ok(&["diagnose", "web"]).await?;
    assert_eq!(diagnosis, "web is healthy, nothing to diagnose\n");
    assert_eq!(ksync.json(&["diagnose", "web"]).await?, json!([]));

    // sync on an automatic Application requests a fetch of its Repository.
    let before = repository_annotation(&env).await?;
    let synced = ksync.ok(&["sync", "web"]).await?;
    assert!(synced.contains("requested an immediate fetch of Repository apps"), "{synced}");
    let after = repository_annotation(&env).await?.context("reconcile-requested-at set")?;
    assert_ne!(Some(&after), before.as_ref());
    after.parse::<k8s_openapi::jiff::Timestamp>().context("an RFC 3339 time")?;

    // render --local gives what the controller applied.
    let web_v2 =
        [("settings.yaml", config_map("settings", "2", json!({}))), ("db.yaml", secret("db"))];
    assert_render_matches_live(&env, &ksync, "web", "yaml", &web_v2).await?;

    // A kustomize Application, rendered locally the same way.
    let kustomization = "resources:\n- cm.yaml\n".to_owned();
    let kust_cm = config_map("kust-settings", "k", json!({}));
    let commit3 = env
        .push(
            &[
                ("apps/kust/kustomization.yaml", kustomization.clone()),
                ("apps/kust/cm.yaml", kust_cm.clone()),
            ],
            "kustomize",
        )
        .await?;
    env.create_app("kust", "apps/kust", json!({"source": {"render": {"type": "kustomize"}}}))
        .await?;
    env.wait_synced("kust", &commit3).await?;
    let kust_files = [("kustomization.yaml", kustomization), ("cm.yaml", kust_cm)];
    assert_render_matches_live(&env, &ksync, "kust", "kustomize", &kust_files).await?;

    // A duplicate object: render refuses it with exit 1, and a wait on the Application that
    // deploys it fails fast with exit 1.
    let duplicate = config_map("twice", "1", json!({}));
    let dup_files = [("a.yaml", duplicate.clone()), ("b.yaml", duplicate.clone())];
    let dir = local_copy(&dup_files)?;
    let refused = ksync.run(&["render", "--local", dir.path().to_str().context("path")?]).await?;
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stderr.contains("declared twice"), "{}", refused.stderr);
    let commit4 = env
        .push(&[("apps/bad/a.yaml", duplicate.clone()), ("apps/bad/b.yaml", duplicate)], "dup")
        .await?;
    // The Repository has the commit before the Application exists: otherwise its first render
    // would be of the previous commit, where apps/bad does not exist (a RenderFailure).
    wait_fetched(&env, &commit4).await?;
    env.create_app("bad", "apps/bad", json!({})).await?;
    let started = Instant::now();
    let failed = ksync.run(&["wait", "bad", "--for", "healthy", "--timeout", "2m"]).await?;
    assert_eq!(failed.code, 1, "{failed:?}");
    assert!(failed.stdout.contains("ValidationFailure"), "{}", failed.stdout);
    assert!(started.elapsed() < Duration::from_secs(60), "the wait did not fail fast");

    // rollback shows the target's plan and needs --yes off a terminal; with it, the controller
    // returns to the chosen Revision and holds the commit the spec resolves to (the latest).
    let rev1 = env.revision("web", &commit1).await?.metadata.name.context("name")?;
    let refused = ksync.run(&["rollback", "web", "--to", &rev1]).await?;
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(refused.stderr.contains("pass --yes"), "{}", refused.stderr);
    assert!(
        refused.stdout.contains("Plan: 2 to create"),
        "the target's plan is shown first: {}",
        refused.stdout
    );
    let rolled = ksync.ok(&["rollback", "web", "--to", &rev1, "--yes"]).await?;
    assert!(rolled.contains(&format!("to Revision {rev1}")), "{rolled}");
    env.wait_ready("web", "False", "RolledBack").await?;
    env.wait_app("web", "rollback request removed", |app| {
        !app.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(keys::ROLLBACK_REVISION))
    })
    .await?;
    let app = env.api::<Application>().get("web").await?;
    let annotations = app.metadata.annotations.unwrap_or_default();
    assert_eq!(annotations.get(keys::ROLLBACK_FROM), Some(&commit4));
    let status = ksync.ok(&["status", "web"]).await?;
    assert!(status.contains(&format!("commit {} is held", &commit4[..12])), "{status}");
    let history = ksync.ok(&["history", "web"]).await?;
    assert!(history.contains("rollback target (by"), "{history}");

    // A missing Application says how to list them.
    let missing = ksync.run(&["status", "nope"]).await?;
    assert_eq!(missing.code, 1);
    assert!(missing.stderr.contains("ksync status -A"), "{}", missing.stderr);
    Ok(())
}

/// Wait until Repository `apps` has fetched `commit`.
async fn wait_fetched(env: &Env, commit: &str) -> Result<()> {
    wait_for(
        &format!("the Repository to fetch {commit}"),
        kuvryn_sync_tests::application::DEADLINE,
        || async {
            let repo = env.api::<Repository>().get("apps").await?;
            let observed = repo.status.and_then(|s| s.observed_revision);
            Ok(((observed.as_deref() == Some(commit)).then_some(()), format!("{observed:?}")))
        },
    )
    .await
}

async fn repository_annotation(env: &Env) -> Result<Option<String>> {
    let repository = env.api::<Repository>().get("apps").await?;
    Ok(repository
        .metadata
        .annotations
        .unwrap_or_default()
        .get(keys::RECONCILE_REQUESTED_AT)
        .cloned())
}

/// A manual Application: `ksync sync` without --yes and without a terminal refuses with exit
/// code 2 and changes nothing; with --yes it approves, the webhook records who, and the plan is
/// applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_approves_a_manual_application_only_with_yes_when_not_on_a_terminal() -> Result<()> {
    let env = env("cli-sync", true).await?;
    let webhook = WebhookProcess::start(&env.cluster)?;
    webhook.register(&env.cluster, &env.namespace).await?;
    let ksync = Ksync::new(&env)?;
    let commit = env
        .push(&[("apps/manual/cm.yaml", config_map("approved", "1", json!({})))], "manual")
        .await?;
    env.create_app("manual", "apps/manual", json!({"sync": {"automatic": false}})).await?;
    env.wait_app("manual", "AwaitingApproval", |app| {
        app.status.as_ref().is_some_and(|s| s.sync.state == SyncState::AwaitingApproval)
    })
    .await?;

    let refused = ksync.run(&["sync", "manual"]).await?;
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(refused.stderr.contains("pass --yes"), "{}", refused.stderr);
    assert!(refused.stdout.contains("+ create v1 ConfigMap"), "the plan is shown first");
    let app = env.api::<Application>().get("manual").await?;
    assert!(
        !app.metadata.annotations.unwrap_or_default().contains_key(keys::APPROVED_REVISION),
        "a refused sync approved anyway"
    );

    let approved = ksync.ok(&["sync", "manual", "--yes"]).await?;
    assert!(approved.contains("approved Revision"), "{approved}");
    env.wait_ready("manual", "True", "Healthy").await?;
    assert!(env.api::<ConfigMap>().get_opt("approved").await?.is_some());
    let revision = env.revision("manual", &commit).await?;
    let approval = revision.status.and_then(|s| s.approval).context("approval recorded")?;
    assert!(!approval.approved_by.is_empty());
    let history = ksync.ok(&["history", "manual"]).await?;
    assert!(history.contains(&approval.approved_by), "{history}");

    // check: with the webhook registered every check passes (exit 0). The test certificates
    // live one day, so their expiry is the one warning.
    let check = ksync.run(&["check", "--install-namespace", "default"]).await?;
    assert_eq!(check.code, 0, "{check:?}");
    assert!(!check.stdout.contains("FAIL"), "{}", check.stdout);
    let hook =
        check.stdout.lines().find(|l| l.contains("admit.applications.sync.kuvryn.io -> https://"));
    assert!(hook.is_some_and(|l| l.contains("certificate expires soon")), "{}", check.stdout);
    Ok(())
}

/// A running `ksync … -w` and the lines of its standard output.
struct Watch {
    _child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

fn start_watch(ksync: &Ksync, args: &[&str]) -> Result<Watch> {
    use tokio::io::AsyncBufReadExt;
    let mut child = ksync.spawn(args)?;
    let stdout = child.stdout.take().context("piped stdout")?;
    Ok(Watch { _child: child, lines: tokio::io::BufReader::new(stdout).lines() })
}

/// The lines a watching `ksync … -w` prints, until one satisfies `found` (or the deadline).
async fn read_until(
    watch: &mut Watch,
    what: &str,
    found: impl Fn(&str) -> bool,
) -> Result<Vec<String>> {
    let lines = &mut watch.lines;
    let mut seen = Vec::new();
    let deadline = kuvryn_sync_tests::application::DEADLINE;
    let reading = async {
        while let Some(line) = lines.next_line().await? {
            let done = found(&line);
            seen.push(line);
            if done {
                return Ok::<_, anyhow::Error>(true);
            }
        }
        Ok(false)
    };
    let done = tokio::time::timeout(deadline, reading).await;
    ensure!(matches!(done, Ok(Ok(true))), "no line for {what} within {deadline:?}: {done:?}");
    Ok(seen)
}

/// suspend stops a rollout (a commit pushed while suspended deploys nothing; resume deploys it),
/// and tree, events (with -w), get, status -l/-o name/wide, diff --exit-code, version and check
/// read the same Application.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_stops_a_rollout_and_the_new_read_commands_show_the_application() -> Result<()> {
    let env = env("cli-ops", true).await?;
    let ksync = Ksync::new(&env)?;
    let ns = env.namespace.clone();
    let v1 = [("settings.yaml", config_map("settings", "1", json!({}))), ("db.yaml", secret("db"))];
    let in_git = |files: &[(&str, String)]| -> Vec<(String, String)> {
        files.iter().map(|(n, c)| (format!("apps/web/{n}"), c.clone())).collect()
    };
    let git_v1 = in_git(&v1);
    let git_v1: Vec<(&str, String)> = git_v1.iter().map(|(n, c)| (n.as_str(), c.clone())).collect();
    let commit1 = env.push(&git_v1, "web v1").await?;
    env.create_app("web", "apps/web", json!({})).await?;
    env.wait_synced("web", &commit1).await?;

    // tree: each managed object with its health and sync state.
    let tree = ksync.ok(&["tree", "web"]).await?;
    assert!(tree.starts_with(&format!("Application {ns}/web")), "{tree}");
    let line = |kind_name: &str| {
        tree.lines()
            .find(|l| l.contains(kind_name))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
    };
    let settings = line("ConfigMap settings").context("a ConfigMap line")?;
    assert_eq!(settings[settings.len() - 2..], ["Healthy", "Synced"], "{tree}");
    assert!(line("Secret db").is_some(), "{tree}");
    assert_no_canary("tree", &tree);
    let nodes = ksync.json(&["tree", "web"]).await?;
    assert_eq!(nodes.as_array().map(Vec::len), Some(2), "{nodes}");

    // events: the rollout's Events, oldest first.
    env.wait_event("web", "DeploymentHealthy").await?;
    let events = ksync.ok(&["events", "web"]).await?;
    assert!(events.starts_with("LAST-SEEN"), "{events}");
    assert!(events.contains("DeploymentHealthy"), "{events}");
    assert!(events.contains("application/web"), "{events}");

    // get repositories and imagepolicies; -o name; -l; -o wide.
    let repos = ksync.ok(&["get", "repositories"]).await?;
    let row = repos.lines().nth(1).context("a Repository row")?;
    assert!(row.starts_with("apps ") && row.contains(&commit1[..12]), "{repos}");
    assert!(row.contains("True/"), "{repos}");
    assert_eq!(
        ksync.ok(&["get", "repos", "-o", "name"]).await?,
        "repository.sync.kuvryn.io/apps\n"
    );
    assert_eq!(
        ksync.ok(&["get", "imagepolicies"]).await?,
        format!("No ImagePolicies in namespace {ns}.\n")
    );
    assert_eq!(ksync.ok(&["status", "-o", "name"]).await?, "application.sync.kuvryn.io/web\n");
    let none = ksync.ok(&["status", "-l", "team=nobody"]).await?;
    assert_eq!(none, format!("No Applications in namespace {ns}.\n"));
    let wide = ksync.ok(&["status", "-o", "wide"]).await?;
    assert!(wide.lines().next().is_some_and(|h| h.ends_with("RESOURCES")), "{wide}");
    assert!(wide.contains("automatic") && wide.contains("deployer"), "{wide}");

    // -A is honoured by the list views and refused by the others.
    let everywhere = ksync.ok(&["status", "-A"]).await?;
    assert!(everywhere.starts_with("NAMESPACE"), "{everywhere}");
    let refused = ksync.run(&["-A", "tree", "web"]).await?;
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(refused.stderr.contains("-A/--all-namespaces applies to"), "{}", refused.stderr);

    // diff: an unchanged working copy exits 0, a changed one exits 1 naming the change, and
    // neither prints the Secret value.
    let same = local_copy(&v1)?;
    let same_path = same.path().to_str().context("utf-8")?;
    let unchanged = ksync.run(&["diff", "web", "--path", same_path, "--exit-code"]).await?;
    assert_eq!(unchanged.code, 0, "{unchanged:?}");
    assert!(
        unchanged.stdout.contains("Plan: 0 to create, 0 to update, 0 to delete"),
        "{unchanged:?}"
    );
    assert!(unchanged.stdout.contains(&format!("as {ns}/deployer")), "{}", unchanged.stdout);
    let v2 = [
        ("settings.yaml", config_map("settings", "2", json!({}))),
        ("db.yaml", secret("db")),
        ("extra.yaml", config_map("extra", "x", json!({}))),
    ];
    let changed = local_copy(&v2)?;
    let changed_path = changed.path().to_str().context("utf-8")?;
    let differs = ksync.run(&["diff", "web", "--path", changed_path, "--exit-code"]).await?;
    assert_eq!(differs.code, 1, "{differs:?}");
    assert!(
        differs.stdout.contains(&format!("~ update v1 ConfigMap {ns}/settings")),
        "{}",
        differs.stdout
    );
    assert!(differs.stdout.lines().any(|l| l.trim() == ".data.value"), "{}", differs.stdout);
    assert!(
        differs.stdout.contains(&format!("+ create v1 ConfigMap {ns}/extra")),
        "{}",
        differs.stdout
    );
    assert!(
        !differs.stdout.contains("\"2\"") && !differs.stdout.contains(": 2"),
        "values are not printed"
    );
    assert_no_canary("diff", &differs.stdout);
    let plain = ksync.run(&["diff", "web", "--path", changed_path]).await?;
    assert_eq!(plain.code, 0, "without --exit-code a diff that ran exits 0: {plain:?}");
    assert_eq!(
        env.api::<ConfigMap>().get("settings").await?.data.and_then(|d| d.get("value").cloned()),
        Some("1".into()),
        "diff changed nothing"
    );

    // version: the client's, and the running controller's from its Lease.
    let version = ksync.ok(&["version", "--install-namespace", "default"]).await?;
    assert!(
        version.contains(&format!("Client:     ksync {}", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    assert!(
        version.contains(&format!("Controller: {} (leader ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    assert!(version.contains("Webhook:    no Deployment"), "{version}");

    // check: CRDs and controller pass; no webhook registered is a failure, exit 1.
    let check = ksync.run(&["check", "--install-namespace", "default"]).await?;
    assert_eq!(check.code, 1, "{check:?}");
    assert!(check.stdout.contains("CRDs         ok"), "{}", check.stdout);
    assert!(check.stdout.contains("controller   ok"), "{}", check.stdout);
    assert!(
        check
            .stdout
            .contains("webhook      FAIL   admit.applications.sync.kuvryn.io is not registered"),
        "{}",
        check.stdout
    );
    assert!(check.stdout.contains("rbac         ok"), "{}", check.stdout);

    // events -w: a watch started now prints the suspension's absence and the next rollout's Events.
    let mut watch = start_watch(&ksync, &["events", "web", "-w"])?;
    read_until(&mut watch, "the Events table", |l| l.starts_with("LAST-SEEN")).await?;

    // status -w prints the table, then a row per change; suspend: a commit pushed while
    // suspended is not rolled out.
    let mut status_watch = start_watch(&ksync, &["status", "-w", "-o", "wide"])?;
    read_until(&mut status_watch, "the status table", |l| l.starts_with("NAME")).await?;
    read_until(&mut status_watch, "the first row", |l| l.starts_with("web ")).await?;
    let suspended = ksync.ok(&["suspend", "web"]).await?;
    let row = read_until(&mut status_watch, "a row after suspend", |l| {
        l.starts_with("web ") && l.split_whitespace().nth(8) == Some("true")
    })
    .await?;
    assert!(row.iter().all(|l| !l.starts_with("NAME")), "rows only: {row:?}");
    drop(status_watch);
    assert!(suspended.contains("web suspended"), "{suspended}");
    assert!(ksync.ok(&["suspend", "web"]).await?.contains("already suspended"));
    let generation = env.api::<Application>().get("web").await?.metadata.generation;
    env.wait_app("web", "the suspension observed", |app| {
        app.status.as_ref().and_then(|s| s.observed_generation) == generation
    })
    .await?;
    let v2_git = in_git(&v2);
    let v2_git: Vec<(&str, String)> = v2_git.iter().map(|(n, c)| (n.as_str(), c.clone())).collect();
    let commit2 = env.push(&v2_git, "web v2").await?;
    wait_fetched(&env, &commit2).await?;
    // One more reconcile after the fetch: touching the Application triggers it, and the
    // controller logs each suspended reconcile.
    let before = env.log_count("suspended: nothing is applied");
    let touch = json!({"metadata": {"annotations": {"test.kuvryn.io/touch": "1"}}});
    env.api::<Application>()
        .patch("web", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&touch))
        .await?;
    wait_for(
        "a suspended reconcile after the fetch",
        kuvryn_sync_tests::application::DEADLINE,
        || async {
            let now = env.log_count("suspended: nothing is applied");
            Ok(((now > before).then_some(()), format!("{now} suspended reconciles")))
        },
    )
    .await?;
    let settings = env.api::<ConfigMap>().get("settings").await?;
    assert_eq!(
        settings.data.and_then(|d| d.get("value").cloned()),
        Some("1".into()),
        "suspended, yet rolled out"
    );
    assert!(env.api::<ConfigMap>().get_opt("extra").await?.is_none(), "suspended, yet created");
    let app = env.api::<Application>().get("web").await?;
    assert_eq!(app.status.and_then(|s| s.deployed_revision), Some(commit1.clone()));

    // resume: the held commit is rolled out, and the watching `events -w` prints its Events.
    let resumed = ksync.ok(&["resume", "web"]).await?;
    assert!(resumed.contains("web resumed"), "{resumed}");
    env.wait_synced("web", &commit2).await?;
    assert!(env.api::<ConfigMap>().get_opt("extra").await?.is_some());
    let printed =
        read_until(&mut watch, "a new DeploymentHealthy", |l| l.contains("DeploymentHealthy"))
            .await?;
    assert!(printed.iter().all(|l| !l.starts_with("LAST-SEEN")), "one header only: {printed:?}");
    drop(watch);

    // After the rollout the working copy of v2 no longer differs.
    let now_same = ksync.run(&["diff", "web", "--path", changed_path, "--exit-code"]).await?;
    assert_eq!(now_same.code, 0, "{now_same:?}");
    Ok(())
}

/// A Deployment's Pods: `tree` hangs its ReplicaSet and Pod under it, and `logs` prints each
/// container's log through pods/log with a [pod/container] prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_and_logs_reach_the_pods_of_an_applications_workloads() -> Result<()> {
    let env = kuvryn_sync_tests::application::env_with_workloads("cli-logs", true).await?;
    env.grant("apps", &["deployments", "replicasets"]).await?;
    let ksync = Ksync::new(&env)?;
    let deployment = serde_json::to_string(&json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "api"}},
                 "template": {"metadata": {"labels": {"app": "api"}},
                              "spec": {"containers": [{"name": "server", "image": "registry.example/api:7"}]}}},
    }))?;
    let commit = env.push(&[("apps/api/deployment.yaml", deployment)], "api").await?;
    env.create_app("api", "apps/api", json!({})).await?;
    env.wait_synced("api", &commit).await?;
    env.wait_ready("api", "True", "Healthy").await?;

    let tree = ksync.ok(&["tree", "api"]).await?;
    assert!(tree.contains("└── Deployment api"), "{tree}");
    assert!(tree.lines().any(|l| l.contains("└── ReplicaSet api-")), "{tree}");
    assert!(tree.lines().any(|l| l.contains("└── Pod api-") && l.contains("Healthy")), "{tree}");

    let logs = ksync.ok(&["logs", "api"]).await?;
    let line = logs.lines().next().context("a log line")?;
    assert!(
        line.starts_with("[api-") && line.contains("/server] starting registry.example/api:7"),
        "{logs}"
    );
    let missing = ksync.run(&["logs", "api", "--previous"]).await?;
    assert!(missing.stderr.contains("previous terminated container"), "{missing:?}");
    Ok(())
}
