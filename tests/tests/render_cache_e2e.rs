//! The render cache end to end: the real controller binary, a real git daemon and the sandbox API
//! server. A monorepo holds [`APPS`] Applications, each in its own folder: plain YAML apps with
//! one ConfigMap, kustomize overlays sharing one base, and one kustomize app of its own. Once all
//! are synced, a commit that changes one application's folder renders that application alone
//! (counted by `kuvryn_sync_renders_total{outcome="rendered"}` on the controller's `/metrics`,
//! read after every Application has planned the new commit), while the others are served from
//! the cache; a commit that changes the shared base renders exactly the overlays that use it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use futures::{TryStreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kuvryn_sync_api::{Application, SyncState};
use kuvryn_sync_tests::application::{Env, config_map, env};
use kuvryn_sync_tests::cluster::{ControllerProcess, wait_for};
use serde_json::json;

/// Applications in the monorepo.
const APPS: usize = 200;
/// Kustomize overlays of the shared base among them.
const OVERLAYS: usize = 5;
/// How long the first sync of every Application may take.
const FIRST_SYNC_DEADLINE: Duration = Duration::from_secs(300);
/// How long every Application may take to plan a new commit.
const COMMIT_DEADLINE: Duration = Duration::from_secs(180);

/// The Applications: (name, path, render type).
fn applications() -> Vec<(String, String, &'static str)> {
    let mut apps: Vec<(String, String, &'static str)> =
        (0..OVERLAYS).map(|n| (format!("k-{n}"), format!("overlays/k-{n}"), "kustomize")).collect();
    apps.push(("solo".into(), "overlays/solo".into(), "kustomize"));
    let yaml = APPS - apps.len();
    apps.extend((0..yaml).map(|n| (format!("app-{n:03}"), format!("apps/app-{n:03}"), "yaml")));
    apps
}

/// The monorepo's files.
fn files() -> Vec<(String, String)> {
    let mut files = vec![
        ("kbase/kustomization.yaml".to_owned(), "resources:\n- cm.yaml\n".to_owned()),
        ("kbase/cm.yaml".to_owned(), config_map("shared", "base-1", json!({}))),
        (
            "overlays/solo/kustomization.yaml".to_owned(),
            "resources:\n- cm.yaml\nnamePrefix: solo-\n".to_owned(),
        ),
        ("overlays/solo/cm.yaml".to_owned(), config_map("own", "solo-1", json!({}))),
    ];
    for n in 0..OVERLAYS {
        files.push((
            format!("overlays/k-{n}/kustomization.yaml"),
            format!("resources:\n- ../../kbase\nnamePrefix: k{n}-\n"),
        ));
    }
    for (name, path, render) in applications() {
        if render == "yaml" {
            files.push((format!("{path}/cm.yaml"), config_map(&name, "v1", json!({}))));
        }
    }
    files
}

/// `kuvryn_sync_renders_total` by (type, outcome), from the controller's `/metrics`.
async fn renders(env: &Env) -> Result<BTreeMap<(String, String), u64>> {
    let samples = env.controller_counter("kuvryn_sync_renders_total").await?;
    let label = |labels: &[String], name: &str| {
        labels
            .iter()
            .find_map(|pair| pair.strip_prefix(&format!("{name}=\"")))
            .map(|v| v.trim_end_matches('"').to_owned())
            .unwrap_or_default()
    };
    Ok(samples
        .into_iter()
        .map(|(labels, value)| ((label(&labels, "type"), label(&labels, "outcome")), value))
        .collect())
}

/// Engine renders (not cache hits) of `render_type`, or of every type for `None`.
fn rendered(counts: &BTreeMap<(String, String), u64>, render_type: Option<&str>) -> u64 {
    counts
        .iter()
        .filter(|((kind, outcome), _)| {
            outcome == "rendered" && render_type.is_none_or(|wanted| wanted == kind)
        })
        .map(|(_, n)| n)
        .sum()
}

/// Wait until every Application satisfies `done`; returns how long it took.
async fn wait_all(
    env: &Env,
    what: &str,
    deadline: Duration,
    done: impl Fn(&Application) -> bool,
) -> Result<Duration> {
    let start = Instant::now();
    let api = env.api::<Application>();
    wait_for(what, deadline, || async {
        let listed = api.list(&ListParams::default()).await?;
        let pending: Vec<String> = listed
            .items
            .iter()
            .filter(|app| !done(app))
            .filter_map(|app| app.metadata.name.clone())
            .collect();
        let all = listed.items.len() == APPS && pending.is_empty();
        let observed = format!("{} listed, {} pending: {:?}", listed.items.len(), pending.len(), {
            pending.iter().take(5).collect::<Vec<_>>()
        });
        Ok((all.then_some(()), observed))
    })
    .await
    .with_context(|| format!("controller log, last lines:\n{}", env.log_tail(40)))?;
    Ok(start.elapsed())
}

fn synced_at(app: &Application, commit: &str) -> bool {
    app.status.as_ref().is_some_and(|s| {
        s.deployed_revision.as_deref() == Some(commit) && s.sync.state == SyncState::Synced
    })
}

/// Whether `app` has planned `commit`: it is the desired revision, and no longer only announced
/// (sync state `Planning` is written before the render).
fn planned_at(app: &Application, commit: &str) -> bool {
    app.status.as_ref().is_some_and(|s| {
        s.desired_revision.as_deref() == Some(commit) && s.sync.state != SyncState::Planning
    })
}

async fn config_map_value(env: &Env, name: &str) -> Result<Option<String>> {
    let cm = env.api::<ConfigMap>().get(name).await?;
    Ok(cm.data.and_then(|data| data.get("value").cloned()))
}

/// One commit touching one folder renders one Application; one touching the shared kustomize
/// base renders exactly the overlays of that base. Every other Application plans the new commit
/// from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_applications_whose_inputs_changed_are_rendered_again() -> Result<()> {
    let mut env = env("render-cache", false).await?;
    let args = ["--default-poll-interval", "1h", "--application-concurrency", "16"];
    env.controller =
        Some(ControllerProcess::start_logged(&env.cluster, &args, &[], &env.log_path())?);
    let files = files();
    let first = env
        .push(&files.iter().map(|(p, c)| (p.as_str(), c.clone())).collect::<Vec<_>>(), "apps")
        .await?;
    let apps = applications();
    stream::iter(apps.iter().map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(16, |(name, path, render)| {
            let env = &env;
            async move {
                env.create_app(name, path, json!({"source": {"render": {"type": render}}})).await
            }
        })
        .await?;
    let took = wait_all(
        &env,
        "every Application Synced at the first commit",
        FIRST_SYNC_DEADLINE,
        |app| synced_at(app, &first),
    )
    .await?;
    println!("{{\"apps\": {APPS}, \"first_sync_seconds\": {:.1}}}", took.as_secs_f64());
    let before = renders(&env).await?;
    ensure!(
        rendered(&before, None) >= APPS as u64,
        "every Application was rendered once at least: {before:?}"
    );

    // One application's folder changes: that application alone is rendered.
    let second = env
        .push(&[("apps/app-007/cm.yaml", config_map("app-007", "v2", json!({})))], "app-007 v2")
        .await?;
    env.wait_synced("app-007", &second).await?;
    let took =
        wait_all(&env, "every Application planned the second commit", COMMIT_DEADLINE, |app| {
            planned_at(app, &second)
        })
        .await?;
    println!("{{\"apps\": {APPS}, \"one_folder_commit_seconds\": {:.1}}}", took.as_secs_f64());
    let after = renders(&env).await?;
    ensure!(
        rendered(&after, None) - rendered(&before, None) == 1,
        "one folder changed, so exactly one render: before {before:?}, after {after:?}"
    );
    let hits = |counts: &BTreeMap<(String, String), u64>| -> u64 {
        counts.iter().filter(|((_, outcome), _)| outcome == "cache_hit").map(|(_, n)| n).sum()
    };
    ensure!(
        hits(&after) - hits(&before) >= (APPS - 1) as u64,
        "every other Application was served from the cache: before {before:?}, after {after:?}"
    );
    ensure!(config_map_value(&env, "app-007").await?.as_deref() == Some("v2"));
    ensure!(config_map_value(&env, "app-008").await?.as_deref() == Some("v1"));

    // The shared base changes: exactly its overlays are rendered, not the other kustomize app.
    let third =
        env.push(&[("kbase/cm.yaml", config_map("shared", "base-2", json!({})))], "base-2").await?;
    env.wait_synced("k-0", &third).await?;
    wait_all(&env, "every Application planned the third commit", COMMIT_DEADLINE, |app| {
        planned_at(app, &third)
    })
    .await?;
    let last = renders(&env).await?;
    ensure!(
        rendered(&last, Some("kustomize")) - rendered(&after, Some("kustomize")) == OVERLAYS as u64,
        "the base's {OVERLAYS} overlays, and only they, were rendered: before {after:?}, after {last:?}"
    );
    ensure!(
        rendered(&last, Some("yaml")) == rendered(&after, Some("yaml")),
        "no YAML Application was rendered: before {after:?}, after {last:?}"
    );
    for n in 0..OVERLAYS {
        env.wait_synced(&format!("k-{n}"), &third).await?;
        ensure!(
            config_map_value(&env, &format!("k{n}-shared")).await?.as_deref() == Some("base-2")
        );
    }
    ensure!(config_map_value(&env, "solo-own").await?.as_deref() == Some("solo-1"));
    Ok(())
}
