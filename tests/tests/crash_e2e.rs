//! The controller killed with SIGKILL at random points while Applications roll out, and
//! restarted, end to end: the real controller binary against the API (an in-process
//! ksync-sandbox whose workloads run, or a real cluster through KSYNC_E2E_KUBECONFIG) and a real
//! Git server (git daemon). Ten Applications follow ten commits each (100 rollouts, 45 to 70 s
//! in a debug build; `KSYNC_CRASH_APPS` and `KSYNC_CRASH_COMMITS` change the counts); every commit
//! adds, changes and removes objects of three kinds, so the inventory grows and shrinks and
//! prune runs. The kill delays come from a seeded generator: the seed is printed, and
//! `KSYNC_CRASH_SEED=<seed>` replays a run.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use kuvryn_sync_tests::application::{Env, env_with_workloads};
use kuvryn_sync_tests::cluster::{ControllerProcess, skip_on_real_cluster};
use kuvryn_sync_tests::rollouts::{
    DeletionWatch, app_name, current_version, inventory_problems, push_commit, revision_problems,
    rollout_kinds, wait_converged, wrong_prunes,
};
use serde_json::json;

/// Applications, and commits each of them rolls out, by default.
const APPS: usize = 10;
const COMMITS: usize = 10;
/// Set to change them.
const APPS_ENV: &str = "KSYNC_CRASH_APPS";
const COMMITS_ENV: &str = "KSYNC_CRASH_COMMITS";
/// Every controller of the test runs under this leader-election identity, as a container
/// restarted in its Pod does: it takes the dead one's Lease at once.
const IDENTITY: &str = "kuvryn-sync-controller-crash-test";
/// Set to replay a run with the seed it printed.
const SEED_ENV: &str = "KSYNC_CRASH_SEED";
/// Kill delays are drawn from 0 to this many milliseconds.
const MAX_KILL_DELAY_MS: u64 = 1500;

/// xorshift64: small, deterministic, enough to spread kill delays.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        // A zero state stays zero.
        Self((seed ^ 0x9e37_79b9_7f4a_7c15).max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..=max`.
    fn up_to(&mut self, max: u64) -> u64 {
        self.next() % (max + 1)
    }
}

fn seed() -> Result<u64> {
    match std::env::var(SEED_ENV) {
        Ok(text) => text.trim().parse().with_context(|| format!("{SEED_ENV}={text}")),
        Err(_) => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
            let pid = u64::from(std::process::id());
            Ok(now.as_secs() ^ u64::from(now.subsec_nanos()).rotate_left(29) ^ pid.rotate_left(47))
        }
    }
}

/// `name` from the environment, or `default`.
fn count(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Ok(text) => {
            let n: usize = text.trim().parse().with_context(|| format!("{name}={text}"))?;
            ensure!(n >= 1, "{name} must be at least 1, not {n}");
            Ok(n)
        }
        Err(_) => Ok(default),
    }
}

fn start_controller(env: &mut Env) -> Result<()> {
    let log = env.log_path();
    // The arguments of `Env::start_controller`, under a fixed identity.
    let args = ["--default-poll-interval", "1h"];
    env.controller =
        Some(ControllerProcess::start_logged_as(&env.cluster, IDENTITY, &args, &[], &log)?);
    Ok(())
}

/// A hundred rollouts (by default) with the controller SIGKILLed and restarted one to three times
/// during each commit, at seeded random delays. Once the last commit is out under a controller
/// left running, every Application is Synced at it and Ready=True/Healthy, and: one Revision per
/// (commit, desired-state hash) and Application, named as `revision_name` says; no object
/// deleted while the commit being rolled out declared it; every desired object live with the
/// last commit's content, and no object of an Application outside its last desired state
/// (labelled or not); `status.managedKinds` exactly the kinds of the last desired state; no
/// panic in the controller's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_at_random_points_loses_nothing() -> Result<()> {
    if skip_on_real_cluster(
        "a_controller_killed_at_random_points_loses_nothing",
        "simulated workloads (fictional images that run)",
    ) {
        return Ok(());
    }
    let seed = seed()?;
    let apps = count(APPS_ENV, APPS)?;
    let commits_wanted = count(COMMITS_ENV, COMMITS)?;
    println!(
        "crash seed {seed} (replay: {SEED_ENV}={seed}); {apps} Applications x {commits_wanted} \
         commits"
    );
    let mut rng = XorShift::new(seed);
    let began = Instant::now();
    let mut env = env_with_workloads("crash", false).await?;
    env.grant("apps", &["deployments"]).await?;
    let names: Vec<String> = (0..apps).map(app_name).collect();
    let kinds = rollout_kinds();
    let deletions = DeletionWatch::start(&env.cluster.client(), &env.namespace, &kinds).await?;
    start_controller(&mut env)?;

    let mut commits = Vec::new();
    let mut round_ends = Vec::new();
    let mut kills = 0;
    for round in 1..=commits_wanted {
        let commit = push_commit(&env, apps, round).await?;
        if round == 1 {
            for name in &names {
                env.create_app(name, &format!("apps/{name}"), json!({})).await?;
            }
        }
        let round_began = Instant::now();
        for _ in 0..=rng.up_to(2) {
            let delay = Duration::from_millis(rng.up_to(MAX_KILL_DELAY_MS));
            // The random point of the kill: this sleep is the test, not a synchronisation.
            tokio::time::sleep(delay).await;
            let controller = env.controller.as_mut().context("controller")?;
            let pid = controller.pid();
            let status = controller.kill(Duration::from_secs(10)).await?;
            kills += 1;
            println!(
                "commit {round} ({}): killed controller {pid} {delay:?} after the previous \
                 start or push ({status})",
                &commit[..12]
            );
            start_controller(&mut env)?;
        }
        for name in &names {
            env.wait_synced(name, &commit).await?;
        }
        round_ends.push(current_version(&env).await?);
        println!("commit {round}: all Synced {:?} after the push", round_began.elapsed());
        commits.push(commit);
    }
    let last = commits.last().context("commits")?.clone();

    // Converged: Synced at the last commit, Ready=True/Healthy, its Revision Healthy.
    wait_converged(&env, &names, &last).await?;
    println!("{kills} kills; converged {:?} after the start", began.elapsed());

    // No duplicate Revision, no wrong prune, the exact inventory. Every problem of every
    // Application is reported.
    let mut problems = revision_problems(&env, &names, &commits).await?;
    let end = current_version(&env).await?;
    let deleted = deletions.deletions_up_to(end, kinds.len()).await?;
    problems.extend(wrong_prunes(apps, &deleted, &round_ends));
    problems.extend(inventory_problems(&env, apps, commits_wanted).await?);
    println!("{} objects deleted during the run", deleted.len());
    ensure!(problems.is_empty(), "seed {seed}:\n{}", problems.join("\n"));

    let log = env.controller_log();
    let panics: Vec<&str> =
        log.lines().filter(|line| line.to_lowercase().contains("panic")).collect();
    ensure!(panics.is_empty(), "seed {seed}: the controller panicked:\n{}", panics.join("\n"));
    let leaders = env.log_count("became the leader");
    println!(
        "{leaders} of {} controllers became the leader; done in {:?}",
        kills + 1,
        began.elapsed()
    );
    Ok(())
}
