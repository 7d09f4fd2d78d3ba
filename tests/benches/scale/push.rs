//! Push → apply start through the receiver, and a monorepo commit that touches 1 of N
//! Applications.
//!
//! The Repository gets a push hook (`spec.webhook.secretRef`), the real webhook binary serves the
//! receiver, and each push is a commit that changes one Application's Deployment (an annotation),
//! announced by a GitHub-shaped push event signed with the hook's token: the path a Git host's
//! push takes. Per push:
//!
//! - **apply start**: from the receiver's request sent to the touched Application's Revision for
//!   the new commit appearing (followed with one watch of Revisions: the controller writes the
//!   Revision before it applies anything);
//! - **applied**: until that Application reports the commit deployed and `Ready=True/Healthy`;
//! - **the whole commit**: until every Application reports the commit deployed and is Ready
//!   (an untouched one too: it records the commit with nothing to apply), with the renders
//!   counted meanwhile (`kuvryn_sync_renders_total`: engine runs and cache hits)
//!   and the API requests sent. Only the touched Application's folder changed, so one engine
//!   render per commit is the goal.
//!
//! Pushes run one after another: the next starts once every Application took the previous one.
//! The controller's last writes for a commit (Revision status, Events) may follow the
//! Application's status by a moment; nothing after this phase checks for writes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kuvryn_sync_api::{Application, Repository, Revision};
use kuvryn_sync_core::receiver::github_signature;
use kuvryn_sync_tests::application::{Env, ready};
use kuvryn_sync_tests::perf::percentile;
use kuvryn_sync_tests::webhook::WebhookProcess;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{READY_DEADLINE, manifests};

const TOKEN: &str = "scale-bench-push-hook-token";
const HOOK_SECRET: &str = "apps-push-hook";

/// What one push took.
struct PushSample {
    apply_start: Duration,
    applied: Duration,
    commit_taken: Duration,
    engine_renders: u64,
    cache_hits: u64,
    requests: u64,
}

/// Run `pushes` pushes through the receiver, each touching one of `names`; prints the JSON lines
/// `scale_push_to_apply` and `scale_monorepo_commit`.
pub async fn run(env: &Env, names: &[String], pushes: usize) -> Result<()> {
    let webhook = hook_up(env).await?;
    let client = client_trusting(&webhook.ca_pem)?;
    let url = format!("{}/hooks/repositories/{}/apps", webhook.receivers, env.namespace);
    let mut started = revision_starts(env.api::<Revision>());
    let mut samples = Vec::new();
    for push in 0..pushes {
        // Spread over the Applications, never the same one twice in a row.
        let target = &names[(push * 7919 + names.len() / 2) % names.len()];
        let sample = one_push(env, &client, &url, names, target, push, &mut started)
            .await
            .with_context(|| format!("push {push} (touching {target})"))?;
        samples.push(sample);
    }
    print_lines(names.len(), &samples);
    Ok(())
}

/// A Secret with the hook's token, the Repository pointed at it, and the webhook started.
async fn hook_up(env: &Env) -> Result<WebhookProcess> {
    let mut secret = Secret::default();
    secret.metadata.name = Some(HOOK_SECRET.into());
    secret.data = Some([("token".to_owned(), ByteString(TOKEN.as_bytes().to_vec()))].into());
    env.api::<Secret>().create(&PostParams::default(), &secret).await?;
    let patch = json!({"spec": {"webhook": {"secretRef": {"name": HOOK_SECRET}}}});
    env.api::<Repository>().patch("apps", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    WebhookProcess::start(&env.cluster)
}

fn client_trusting(ca_pem: &str) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .use_preconfigured_tls(kuvryn_sync_tests::tls_trusting(ca_pem)?)
        .timeout(Duration::from_secs(10))
        .build()?)
}

/// (Application, commit) of every Revision as the watch sees it appear, with when.
fn revision_starts(api: Api<Revision>) -> mpsc::UnboundedReceiver<(String, String, Instant)> {
    let (send, receive) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        let mut seen = BTreeSet::new();
        while let Some(event) = events.next().await {
            let revision = match event {
                Ok(watcher::Event::Apply(r) | watcher::Event::InitApply(r)) => r,
                _ => continue,
            };
            let key = (revision.spec.application_ref.name.clone(), revision.spec.source.revision);
            if seen.insert(key.clone()) && send.send((key.0, key.1, Instant::now())).is_err() {
                return;
            }
        }
    });
    receive
}

/// Commit a change to `target`'s Deployment, announce it through the receiver, and time what
/// follows.
async fn one_push(
    env: &Env,
    client: &reqwest::Client,
    url: &str,
    names: &[String],
    target: &str,
    push: usize,
    started: &mut mpsc::UnboundedReceiver<(String, String, Instant)>,
) -> Result<PushSample> {
    let [(file, mut deployment), ..] = manifests(target);
    deployment["metadata"]["annotations"] = json!({"bench.kuvryn.io/push": push.to_string()});
    let path = format!("apps/{target}/{file}");
    let before = env.repo.head()?;
    let commit = env.repo.commit(&[(&path, &deployment.to_string())], "touch one application")?;
    let renders = renders(env).await?;
    let requests = requests(env).await?;
    let body = json!({"ref": "refs/heads/main", "before": before, "after": commit,
                      "repository": {"clone_url": "https://git.example.invalid/apps.git"}})
    .to_string();
    let start = Instant::now();
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .header("x-github-event", "push")
        .header("x-github-delivery", format!("scale-bench-{commit}"))
        .header("x-hub-signature-256", github_signature(TOKEN.as_bytes(), body.as_bytes()))
        .body(body)
        .send()
        .await?;
    let status = response.status();
    if status != 202 {
        bail!("the receiver answered {status}: {}", response.text().await?);
    }
    let apply_start = wait_revision(started, target, &commit, start).await?;
    let (applied, commit_taken) = wait_taken(env, names, target, &commit, start).await?;
    let after = renders_after(env, renders, names.len()).await?;
    Ok(PushSample {
        apply_start,
        applied,
        commit_taken,
        engine_renders: after.0,
        cache_hits: after.1,
        requests: super::sum(&env.controller_counter("kuvryn_sync_api_requests_total").await?)
            .saturating_sub(requests),
    })
}

/// When `target`'s Revision for `commit` appeared, after `start`.
async fn wait_revision(
    started: &mut mpsc::UnboundedReceiver<(String, String, Instant)>,
    target: &str,
    commit: &str,
    start: Instant,
) -> Result<Duration> {
    let end = tokio::time::Instant::from_std(start + READY_DEADLINE);
    loop {
        match tokio::time::timeout_at(end, started.recv()).await {
            Ok(Some((app, revision, at))) if app == target && revision == commit => {
                return Ok(at.saturating_duration_since(start));
            }
            Ok(Some(_)) => {}
            Ok(None) => bail!("the watch of Revisions ended"),
            Err(_) => bail!("no Revision of {target} at {commit} within {READY_DEADLINE:?}"),
        }
    }
}

/// When `target` was deployed at `commit` and Ready, and when every Application was.
async fn wait_taken(
    env: &Env,
    names: &[String],
    target: &str,
    commit: &str,
    start: Instant,
) -> Result<(Duration, Duration)> {
    let wanted: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    let mut taken = BTreeSet::new();
    let mut applied = None;
    let api = env.api::<Application>();
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    let end = tokio::time::Instant::from_std(start + READY_DEADLINE);
    loop {
        let app = match tokio::time::timeout_at(end, events.next()).await {
            Ok(Some(Ok(watcher::Event::Apply(app) | watcher::Event::InitApply(app)))) => app,
            Ok(Some(_)) => continue,
            Ok(None) => bail!("the watch of Applications ended"),
            Err(_) => bail!(
                "after {READY_DEADLINE:?}, {} of {} Applications had taken {commit}; {target} \
                 applied: {}",
                taken.len(),
                names.len(),
                applied.is_some()
            ),
        };
        let name = app.metadata.name.clone().unwrap_or_default();
        if !wanted.contains(name.as_str()) {
            continue;
        }
        let deployed = app.status.as_ref().and_then(|s| s.deployed_revision.as_deref())
            == Some(commit)
            && ready(&app).is_some_and(|(s, r, _)| s == "True" && r == "Healthy");
        if deployed {
            taken.insert(name.clone());
        } else {
            taken.remove(&name);
        }
        if name == target && applied.is_none() && deployed {
            applied = Some(start.elapsed());
        }
        if let (Some(applied), true) = (applied, taken.len() == names.len()) {
            return Ok((applied, start.elapsed()));
        }
    }
}

/// Engine renders and cache hits counted so far.
pub(super) async fn renders(env: &Env) -> Result<(u64, u64)> {
    let mut counts = (0, 0);
    for (labels, count) in env.controller_counter("kuvryn_sync_renders_total").await? {
        if labels.iter().any(|l| l == "outcome=\"rendered\"") {
            counts.0 += count;
        } else if labels.iter().any(|l| l == "outcome=\"cache_hit\"") {
            counts.1 += count;
        }
    }
    Ok(counts)
}

/// The renders since `before`, once at least one per Application was counted (each takes the
/// commit through a render or a cache hit; its status may be written before the counter moves).
async fn renders_after(env: &Env, before: (u64, u64), apps: usize) -> Result<(u64, u64)> {
    let what = format!("{apps} renders or cache hits");
    kuvryn_sync_tests::cluster::wait_for(&what, Duration::from_secs(60), || async {
        let now = renders(env).await?;
        let delta = (now.0.saturating_sub(before.0), now.1.saturating_sub(before.1));
        let done = delta.0 + delta.1 >= apps as u64;
        Ok((done.then_some(delta), format!("{delta:?}")))
    })
    .await
}

async fn requests(env: &Env) -> Result<u64> {
    Ok(super::sum(&env.controller_counter("kuvryn_sync_api_requests_total").await?))
}

fn print_lines(apps: usize, samples: &[PushSample]) {
    let ms = |pick: fn(&PushSample) -> Duration| -> Vec<f64> {
        samples.iter().map(|s| (pick(s).as_secs_f64() * 1e4).round() / 10.0).collect()
    };
    let (starts, applied, taken) =
        (ms(|s| s.apply_start), ms(|s| s.applied), ms(|s| s.commit_taken));
    println!(
        "{}",
        json!({"bench": "scale_push_to_apply", "apps": apps, "pushes": samples.len(),
               "apply_start_p50_ms": percentile(&starts, 0.5),
               "apply_start_p99_ms": percentile(&starts, 0.99),
               "applied_p50_ms": percentile(&applied, 0.5),
               "applied_p99_ms": percentile(&applied, 0.99),
               "apply_start_ms": starts, "applied_ms": applied})
    );
    let per_commit =
        |pick: fn(&PushSample) -> u64| -> Vec<u64> { samples.iter().map(pick).collect::<Vec<_>>() };
    let taken_s: Vec<f64> = taken.iter().map(|ms| ms / 1000.0).collect();
    let requests = per_commit(|s| s.requests);
    let mut by_commit: BTreeMap<&str, Value> = BTreeMap::new();
    by_commit.insert("engine_renders", json!(per_commit(|s| s.engine_renders)));
    by_commit.insert("cache_hits", json!(per_commit(|s| s.cache_hits)));
    by_commit.insert("api_requests", json!(requests));
    by_commit.insert("all_taken_s", json!(taken_s));
    let median =
        |values: Vec<u64>| percentile(&values.iter().map(|v| *v as f64).collect::<Vec<_>>(), 0.5);
    println!(
        "{}",
        json!({"bench": "scale_monorepo_commit", "apps": apps, "touched": 1,
               "commits": samples.len(),
               "engine_renders": median(per_commit(|s| s.engine_renders)),
               "cache_hits": median(per_commit(|s| s.cache_hits)),
               "api_requests": median(requests.clone()),
               "api_requests_per_app": median(requests) / apps as f64,
               "all_taken_s": (percentile(&taken_s, 0.5) * 1000.0).round() / 1000.0,
               "per_commit": by_commit, "goal_engine_renders": 1})
    );
}
