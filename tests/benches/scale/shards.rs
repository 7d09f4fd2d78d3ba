//! Time to all Ready with several controller processes (`KSYNC_SCALE_SHARDS=N`, N > 1):
//!
//! - **automatic** mode (`KSYNC_SCALE_SHARD_MODE=automatic`, the default): N replicas started
//!   with `--shards N` (and the default `--shard-lease-duration`); the benchmark waits until they
//!   hold one shard Lease each, then creates the Applications, which the replicas split by
//!   consistent hashing of `namespace/name`;
//! - **label** mode (`KSYNC_SCALE_SHARD_MODE=label`): N controllers started with
//!   `--shard s0` … `--shard s<N-1>`; Application number i carries the label
//!   `sync.kuvryn.io/shard: s<i mod N>` (round-robin) and refers to the Repository of its shard
//!   (`apps` relabelled `s0`, plus `apps-s1` … for the same Git repository), as docs/sharding.md
//!   requires.
//!
//! Each replica authenticates as its own user, so the sandbox's request log says who sent what:
//! the split (the replica that last wrote each Application), Applications written by more than
//! one replica (expected 0: nobody hands over during the run), and the requests each replica
//! sent. Requests are also summed from every replica's `kuvryn_sync_api_requests_total`; peak
//! RSS is each replica's `VmHWM`, and their sum. The line printed is `scale_apps_ready` with
//! `"shards": N`; the push, re-sync and steady-state phases run only with one controller.
//! With `KSYNC_SCALE_SHARD_KILL=SAMPLE` (automatic mode) one replica is then killed and its
//! share's takeover timed ([`kill_one`], `scale_shard_takeover`).
//! Then the replicas are stopped with SIGTERM, all at once (or one after the other with
//! `KSYNC_SCALE_SHARD_STOP=one-by-one`), and how long each took to exit is printed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use kube::api::{Patch, PatchParams, PostParams};
use kuvryn_sync_api::{Application, Repository, keys};
use kuvryn_sync_apply::engine::CONCURRENCY;
use kuvryn_sync_tests::application::{DEADLINE, Env, counter, shard_holders};
use kuvryn_sync_tests::cluster::{ControllerProcess, wait_for};
use kuvryn_sync_tests::writers::{last_writers, overlapping, writers, written_app};
use serde_json::json;

use super::{
    GOAL_RATIO, GOAL_READY_S, GOAL_RSS_MIB, all_ready, memory, problems, report_problems,
    requests_by_resource, secs, sum,
};

/// How several controllers share the Applications.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `--shards N`: per-shard Leases, consistent hashing.
    Automatic,
    /// `--shard NAME`: the `sync.kuvryn.io/shard` label, one controller per name.
    Label,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Automatic => "automatic",
            Mode::Label => "label",
        }
    }
}

/// `KSYNC_SCALE_SHARD_MODE`: `automatic` (default) or `label`.
pub fn mode_from_env() -> Result<Mode> {
    match std::env::var("KSYNC_SCALE_SHARD_MODE").as_deref().map(str::trim) {
        Err(_) | Ok("") | Ok("automatic") => Ok(Mode::Automatic),
        Ok("label") => Ok(Mode::Label),
        Ok(other) => bail!("KSYNC_SCALE_SHARD_MODE={other:?}: use automatic or label"),
    }
}

/// One controller replica: its user (as the sandbox records it), process and log.
struct Replica {
    user: String,
    process: ControllerProcess,
    log: PathBuf,
}

fn shard_name(i: usize) -> String {
    format!("s{i}")
}

/// The Repository Application `i` refers to in label mode.
fn repository_of(i: usize) -> String {
    if i == 0 { "apps".to_owned() } else { format!("apps-{}", shard_name(i)) }
}

fn start_replica(env: &Env, identity: &str, flags: &[&str], logs: &Path) -> Result<Replica> {
    let sandbox = env.cluster.sandbox().context("the sandbox")?;
    let user = format!("system:serviceaccount:kuvryn-system:{identity}");
    let kubeconfig = sandbox.user_kubeconfig(&user, &["system:masters"])?;
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    let log = logs.join(format!("{identity}.log"));
    let mut args = vec!["--default-poll-interval", "1h"];
    args.extend_from_slice(flags);
    let process = ControllerProcess::start_logged_as(
        &env.cluster,
        identity,
        &args,
        &[("KUBECONFIG", kubeconfig.as_str()), ("NO_COLOR", "1")],
        &log,
    )?;
    Ok(Replica { user, process, log })
}

/// Start `shards` replicas in `mode` and wait until they share the work: one shard Lease each
/// (automatic), or each leading its shard (label).
async fn start_replicas(env: &Env, shards: usize, mode: Mode, logs: &Path) -> Result<Vec<Replica>> {
    let count = shards.to_string();
    let mut replicas = Vec::new();
    for i in 0..shards {
        let shard = shard_name(i);
        let (identity, flags) = match mode {
            Mode::Automatic => (format!("scale-replica-{i}"), vec!["--shards", count.as_str()]),
            Mode::Label => (format!("scale-shard-{shard}"), vec!["--shard", shard.as_str()]),
        };
        replicas.push(start_replica(env, &identity, &flags, logs)?);
    }
    match mode {
        Mode::Automatic => {
            wait_for("one shard Lease held by each replica", DEADLINE, || async {
                let holders = shard_holders(env).await?;
                let distinct: BTreeSet<&String> = holders.values().collect();
                let done = holders.len() == shards && distinct.len() == shards;
                Ok((done.then_some(()), format!("{holders:?}")))
            })
            .await
            .with_context(|| logs_tail(&replicas))?;
        }
        Mode::Label => {
            wait_for("every shard's controller to lead", DEADLINE, || async {
                let leading = replicas
                    .iter()
                    .filter(|r| log_text(&r.log).contains("became the leader"))
                    .count();
                Ok(((leading == shards).then_some(()), format!("{leading} of {shards} lead")))
            })
            .await
            .with_context(|| logs_tail(&replicas))?;
        }
    }
    Ok(replicas)
}

fn log_text(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

fn logs_tail(replicas: &[Replica]) -> String {
    replicas
        .iter()
        .map(|r| {
            let text = log_text(&r.log);
            let lines: Vec<&str> = text.lines().collect();
            format!("--- {}\n{}", r.user, lines[lines.len().saturating_sub(15)..].join("\n"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Label mode: the `apps` Repository in shard s0, and one more Repository for the same Git
/// repository in each other shard.
async fn label_repositories(env: &Env, shards: usize) -> Result<()> {
    let repositories = env.api::<Repository>();
    let label = json!({"metadata": {"labels": {keys::SHARD: shard_name(0)}}});
    repositories.patch("apps", &PatchParams::default(), &Patch::Merge(&label)).await?;
    let plain = repositories.get("apps").await?;
    for i in 1..shards {
        let repository: Repository = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
            "metadata": {"name": repository_of(i), "labels": {keys::SHARD: shard_name(i)}},
            "spec": plain.spec,
        }))?;
        repositories.create(&PostParams::default(), &repository).await?;
    }
    Ok(())
}

/// Announce the commit to every Repository and wait until each has fetched it.
async fn wait_repositories(env: &Env, count: usize, commit: &str) -> Result<()> {
    let repositories = env.api::<Repository>();
    let now = format!("{:?}", SystemTime::now());
    let patch = json!({"metadata": {"annotations": {keys::RECONCILE_REQUESTED_AT: now}}});
    for i in 0..count {
        repositories
            .patch(&repository_of(i), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    wait_for(&format!("{count} Repositories at {commit}"), DEADLINE, || async {
        let mut at = Vec::new();
        for i in 0..count {
            let repo = repositories.get(&repository_of(i)).await?;
            at.push(repo.status.and_then(|s| s.observed_revision));
        }
        let done = at.iter().all(|o| o.as_deref() == Some(commit));
        Ok((done.then_some(()), format!("{at:?}")))
    })
    .await
}

/// Create the Applications (labelled round-robin in label mode), `CONCURRENCY` at a time.
async fn create_apps(env: &Env, names: &[String], shards: usize, mode: Mode) -> Result<()> {
    stream::iter(names.iter().enumerate())
        .map(|(i, name)| async move {
            let path = format!("apps/{name}");
            match mode {
                Mode::Automatic => env.create_app(name, &path, json!({})).await,
                Mode::Label => {
                    let shard = i % shards;
                    let overrides =
                        json!({"source": {"repositoryRef": {"name": repository_of(shard)}}});
                    let labels = json!({keys::SHARD: shard_name(shard)});
                    env.create_app_labelled(name, &path, overrides, labels).await
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// From the sandbox's request log: per replica user, the Applications it was the last to write,
/// and the Applications written by more than one replica.
fn split(
    records: &[ksync_sandbox::RequestRecord],
    namespace: &str,
    users: &BTreeSet<&str>,
) -> (BTreeMap<String, usize>, usize) {
    let mut last: BTreeMap<&str, &str> = BTreeMap::new();
    let mut writers: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for record in records.iter().filter(|r| users.contains(r.user.as_str())) {
        if let Some(name) = written_app(record, namespace) {
            last.insert(name, &record.user);
            writers.entry(name).or_default().insert(&record.user);
        }
    }
    let mut shares: BTreeMap<String, usize> =
        users.iter().map(|user| (short(user).to_owned(), 0)).collect();
    for user in last.values() {
        *shares.entry(short(user).to_owned()).or_default() += 1;
    }
    (shares, writers.values().filter(|w| w.len() > 1).count())
}

/// A replica's identity: the last part of its user name.
fn short(user: &str) -> &str {
    user.rsplit(':').next().unwrap_or(user)
}

/// Run the all-Ready phase with `shards` controllers in `mode` and print `scale_apps_ready`.
pub async fn run(
    env: &Env,
    names: &[String],
    commit: &str,
    floor: Duration,
    shards: usize,
    mode: Mode,
) -> Result<()> {
    let apps = names.len();
    let sandbox = env.cluster.sandbox().context("several shards need the sandbox's request log")?;
    if mode == Mode::Label {
        label_repositories(env, shards).await?;
    }
    let logs = tempfile::tempdir()?;
    let settle_start = Instant::now();
    let replicas = start_replicas(env, shards, mode, logs.path()).await?;
    let settle = settle_start.elapsed();
    let repositories = if mode == Mode::Label { shards } else { 1 };
    wait_repositories(env, repositories, commit).await.with_context(|| logs_tail(&replicas))?;

    let applications = env.api::<Application>();
    sandbox.record_requests();
    let start = Instant::now();
    create_apps(env, names, shards, mode).await?;
    let created = start.elapsed();
    let progress = all_ready(&applications, names, commit, start)
        .await
        .with_context(|| logs_tail(&replicas))?;
    let report = Figures::collect(&replicas, env, sandbox).await?;
    let ratio = progress.ready.as_secs_f64() / floor.as_secs_f64();
    println!(
        "{}",
        json!({"bench": "scale_apps_ready", "apps": apps, "objects": 4 * apps,
               "shards": shards, "shard_mode": mode.name(), "phases": ["ready"],
               "settle_s": secs(settle),
               "created_s": secs(created), "applied_s": secs(progress.applied),
               "ready_s": secs(progress.ready), "floor_s": secs(floor),
               "ratio": (ratio * 100.0).round() / 100.0,
               "api_requests": report.sent, "api_requests_by_method": report.by_method,
               "api_requests_per_replica": report.sent_per_replica,
               "server_requests_per_replica": report.seen_per_replica,
               "api_requests_by_resource": report.by_resource,
               "floor_requests": 4 * apps,
               "request_ratio": ((report.sent as f64 / (4 * apps) as f64) * 100.0).round() / 100.0,
               "peak_rss_mib": report.peak_sum, "peak_rss_mib_per_replica": report.peaks,
               "rss_mib": report.rss_sum,
               "apps_per_replica": report.shares, "apps_written_by_two": report.two_writers,
               "log_warnings": report.warnings.len(),
               "goal_ready_s": GOAL_READY_S, "goal_rss_mib": GOAL_RSS_MIB,
               "goal_ratio": GOAL_RATIO})
    );
    let warnings: Vec<&str> = report.warnings.iter().map(String::as_str).collect();
    report_problems("while syncing", &warnings);
    eprintln!(
        "KSYNC_SCALE_SHARDS={shards}: only the all-Ready phase runs with several controllers \
         (push, re-sync and steady-state run with one)"
    );
    let mut replicas = replicas;
    let sample = super::number_from_env(KILL_ENV, 0)? as usize;
    if sample > 0 && mode == Mode::Automatic {
        kill_one(env, &mut replicas, sandbox, sample).await?;
    }
    stop(replicas).await
}

const KILL_ENV: &str = "KSYNC_SCALE_SHARD_KILL";

/// `KSYNC_SCALE_SHARD_KILL=SAMPLE` (automatic mode), once all are Ready: SIGKILL the replica with
/// the largest share (no chance to release its Leases), wait until a survivor holds its shard
/// Lease, then commit a change to SAMPLE Applications of its share and time until every one of
/// them is Ready at that commit, from the kill. Prints `scale_shard_takeover` with what the API
/// server's request log says: requests the killed replica sent after the kill, Applications
/// outside its share whose writer changed, and Applications two replicas wrote at overlapping
/// times (each expected 0).
async fn kill_one(
    env: &Env,
    replicas: &mut Vec<Replica>,
    sandbox: &ksync_sandbox::Sandbox,
    sample: usize,
) -> Result<()> {
    let users: BTreeSet<String> = replicas.iter().map(|r| r.user.clone()).collect();
    let before = last_writers(&sandbox.requests(), &env.namespace, &users);
    let mut shares: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (app, user) in &before {
        shares.entry(user.as_str()).or_default().push(app.as_str());
    }
    let (victim, share) = shares
        .iter()
        .max_by_key(|(_, apps)| apps.len())
        .map(|(user, apps)| ((*user).to_owned(), apps.clone()))
        .context("a replica with a share")?;
    let index = replicas.iter().position(|r| r.user == victim).context("the victim replica")?;
    let mut killed = replicas.remove(index);
    let killed_wall = SystemTime::now();
    let killed_at = Instant::now();
    killed.process.kill(Duration::from_secs(10)).await?;
    let identity = short(&victim).to_owned();
    let shards = replicas.len() + 1;
    wait_for("the killed replica's shard Lease taken over", DEADLINE, || async {
        let holders = shard_holders(env).await?;
        let done = holders.len() == shards && !holders.values().any(|h| *h == identity);
        Ok((done.then_some(()), format!("{holders:?}")))
    })
    .await
    .with_context(|| logs_tail(replicas))?;
    let lease_takeover = killed_at.elapsed();

    let chosen: Vec<String> = share.iter().take(sample).map(|name| (*name).to_owned()).collect();
    let files: Vec<(String, String)> = chosen
        .iter()
        .map(|name| {
            let [(file, mut deployment), ..] = super::manifests(name);
            deployment["metadata"]["annotations"] = json!({"bench.kuvryn.io/takeover": "1"});
            (format!("apps/{name}/{file}"), deployment.to_string())
        })
        .collect();
    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    let commit = env.repo.commit(&files, "change the killed replica's Applications")?;
    wait_repositories(env, 1, &commit).await.with_context(|| logs_tail(replicas))?;
    let applications = env.api::<Application>();
    all_ready(&applications, &chosen, &commit, killed_at)
        .await
        .with_context(|| logs_tail(replicas))?;
    let sample_ready = killed_at.elapsed();

    let records = sandbox.requests();
    let after = last_writers(&records, &env.namespace, &users);
    let moved_outside = before
        .iter()
        .filter(|(app, owner)| **owner != victim && after.get(*app) != Some(*owner))
        .count();
    let late = records.iter().filter(|r| r.user == victim && r.started > killed_wall).count();
    let overlapping = overlapping(&writers(&records, &env.namespace, &users)).len();
    println!(
        "{}",
        json!({"bench": "scale_shard_takeover", "apps": before.len(), "shards": shards,
               "killed_share": share.len(), "sample": chosen.len(),
               "lease_takeover_s": secs(lease_takeover), "sample_ready_s": secs(sample_ready),
               "goal_ready_s": 60, "moved_outside_share": moved_outside,
               "requests_after_kill": late, "apps_with_overlapping_writers": overlapping})
    );
    Ok(())
}

/// What the replicas and the API server say once all are Ready.
struct Figures {
    sent: u64,
    by_method: BTreeMap<String, u64>,
    sent_per_replica: BTreeMap<String, u64>,
    seen_per_replica: BTreeMap<String, usize>,
    by_resource: BTreeMap<String, u64>,
    peaks: BTreeMap<String, f64>,
    peak_sum: f64,
    rss_sum: f64,
    shares: BTreeMap<String, usize>,
    two_writers: usize,
    warnings: Vec<String>,
}

impl Figures {
    async fn collect(
        replicas: &[Replica],
        env: &Env,
        sandbox: &ksync_sandbox::Sandbox,
    ) -> Result<Self> {
        let mut figures = Figures {
            sent: 0,
            by_method: BTreeMap::new(),
            sent_per_replica: BTreeMap::new(),
            seen_per_replica: BTreeMap::new(),
            by_resource: BTreeMap::new(),
            peaks: BTreeMap::new(),
            peak_sum: 0.0,
            rss_sum: 0.0,
            shares: BTreeMap::new(),
            two_writers: 0,
            warnings: Vec::new(),
        };
        for replica in replicas {
            let name = short(&replica.user).to_owned();
            let memory = memory(replica.process.pid())?;
            figures.peaks.insert(name.clone(), memory.peak_mib);
            figures.peak_sum += memory.peak_mib;
            figures.rss_sum += memory.rss_mib;
            let samples = counter(&replica.log, "kuvryn_sync_api_requests_total").await?;
            figures.sent += sum(&samples);
            figures.sent_per_replica.insert(name, sum(&samples));
            for (labels, count) in samples {
                *figures.by_method.entry(labels.join(",")).or_default() += count;
            }
            let log = log_text(&replica.log);
            figures.warnings.extend(problems(&log).into_iter().map(str::to_owned));
        }
        figures.peak_sum = (figures.peak_sum * 10.0).round() / 10.0;
        figures.rss_sum = (figures.rss_sum * 10.0).round() / 10.0;
        let records = sandbox.requests();
        let users: BTreeSet<&str> = replicas.iter().map(|r| r.user.as_str()).collect();
        for record in records.iter().filter(|r| users.contains(r.user.as_str())) {
            *figures.seen_per_replica.entry(short(&record.user).to_owned()).or_default() += 1;
        }
        figures.by_resource = requests_by_resource(&records);
        (figures.shares, figures.two_writers) = split(&records, &env.namespace, &users);
        Ok(figures)
    }
}

/// Stop the replicas with SIGTERM: all at once, as deleting their Deployment would, or with
/// `KSYNC_SCALE_SHARD_STOP=one-by-one` one after the other (each stop then hands its shards to
/// the others first). Prints how long each took to exit. A replica still running after
/// [`DEADLINE`] is reported with its log's last lines and killed (on drop); the figures are
/// printed already, so this does not fail the benchmark.
async fn stop(replicas: Vec<Replica>) -> Result<()> {
    let one_by_one = std::env::var("KSYNC_SCALE_SHARD_STOP").as_deref() == Ok("one-by-one");
    let start = Instant::now();
    if !one_by_one {
        for replica in &replicas {
            sigterm(replica)?;
        }
    }
    for mut replica in replicas {
        if one_by_one {
            sigterm(&replica)?;
        }
        let name = short(&replica.user).to_owned();
        match replica.process.wait_exit(DEADLINE).await {
            Ok(status) => eprintln!(
                "replica {name} exited ({status}) {:.1} s after the first SIGTERM",
                start.elapsed().as_secs_f64()
            ),
            Err(err) => {
                let text = log_text(&replica.log);
                let lines: Vec<&str> = text.lines().collect();
                eprintln!(
                    "WARNING: replica {name} {err:#} after SIGTERM; killed. Its log, last lines:\n{}",
                    lines[lines.len().saturating_sub(30)..].join("\n")
                );
            }
        }
    }
    Ok(())
}

fn sigterm(replica: &Replica) -> Result<()> {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let pid = i32::try_from(replica.process.pid()).context("pid")?;
    kill(Pid::from_raw(pid), Signal::SIGTERM)?;
    Ok(())
}
