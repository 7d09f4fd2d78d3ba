//! The controller killed with SIGKILL at random points while Applications roll out, and
//! restarted, end to end: the real controller binary against the API (an in-process
//! ksync-sandbox whose workloads run, or a real cluster through KSYNC_E2E_KUBECONFIG) and a real
//! Git server (git daemon). Four Applications follow five commits each (20 rollouts); every
//! commit adds, changes and removes objects of three kinds, so the inventory grows and shrinks
//! and prune runs. The kill delays come from a seeded generator: the seed is printed, and
//! `KSYNC_CRASH_SEED=<seed>` replays a run.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::ResourceExt;
use kube::api::ListParams;
use kuvryn_sync_api::{Application, HealthState, Revision, RevisionPhase, SyncState, keys};
use kuvryn_sync_core::application::revision_name;
use kuvryn_sync_tests::application::{DEADLINE, Env, config_map, env_with_workloads, ready};
use kuvryn_sync_tests::cluster::{ControllerProcess, wait_for};
use serde_json::json;

/// Applications, and commits each of them rolls out.
const APPS: usize = 4;
const COMMITS: usize = 5;
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

/// One object of an Application's desired state.
struct Object {
    kind: &'static str,
    api_version: &'static str,
    name: String,
    manifest: String,
}

fn app_name(app: usize) -> String {
    format!("app-{app}")
}

/// What Application `app` deploys at commit `commit` (1-based). A window of three ConfigMaps
/// slides by one each commit (one added, two changed, one removed); the Service and the
/// Deployment come and go on different beats, so the kinds in use grow and shrink.
fn desired(app: usize, commit: usize) -> Vec<Object> {
    let prefix = app_name(app);
    let mut objects: Vec<Object> = (commit - 1..=commit + 1)
        .map(|n| {
            let name = format!("{prefix}-cm-{n}");
            Object {
                kind: "ConfigMap",
                api_version: "v1",
                manifest: config_map(&name, &commit.to_string(), json!({})),
                name,
            }
        })
        .collect();
    if !(commit + app).is_multiple_of(3) {
        let name = format!("{prefix}-svc");
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": prefix}, "ports": [{"port": 8000 + commit}]}});
        objects.push(Object {
            kind: "Service",
            api_version: "v1",
            manifest: serde_json::to_string(&service).expect("json"),
            name,
        });
    }
    if (commit + app) % 2 == 1 {
        let name = format!("{prefix}-web");
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": prefix}},
                     "template": {"metadata": {"labels": {"app": prefix}},
                                  "spec": {"containers": [{"name": "web",
                                      "image": format!("registry.example/web:{commit}")}]}}}});
        objects.push(Object {
            kind: "Deployment",
            api_version: "apps/v1",
            manifest: serde_json::to_string(&deployment).expect("json"),
            name,
        });
    }
    objects
}

/// Replace everything under `apps/` with every Application's desired state at `commit`, in one
/// Git commit, and announce it.
async fn push_commit(env: &Env, commit: usize) -> Result<String> {
    env.repo.git(&["rm", "-r", "-q", "--ignore-unmatch", "apps"])?;
    let files: Vec<(String, String)> = (0..APPS)
        .flat_map(|app| {
            desired(app, commit).into_iter().map(move |o| {
                let path = format!("apps/{}/{}-{}.yaml", app_name(app), o.kind, o.name);
                (path.to_lowercase(), o.manifest)
            })
        })
        .collect();
    let refs: Vec<(&str, String)> = files.iter().map(|(p, c)| (p.as_str(), c.clone())).collect();
    env.push(&refs, &format!("commit {commit}")).await
}

/// The names of the objects `api` lists with Application `name`'s label.
async fn labelled<K>(api: &kube::Api<K>, name: &str) -> Result<BTreeSet<String>>
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    let selector = format!("{}={name}", keys::APPLICATION);
    Ok(api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .iter()
        .map(|o| o.name_any())
        .collect())
}

fn start_controller(env: &mut Env) -> Result<()> {
    let log = env.log_path();
    // The arguments of `Env::start_controller`, under a fixed identity.
    let args = ["--default-poll-interval", "1h"];
    env.controller =
        Some(ControllerProcess::start_logged_as(&env.cluster, IDENTITY, &args, &[], &log)?);
    Ok(())
}

/// Twenty rollouts with the controller SIGKILLed and restarted one to three times during each
/// commit, at seeded random delays. Once the last commit is out under a controller left running,
/// every Application is Synced at it and Ready=True/Healthy, and: one Revision per (commit,
/// desired-state hash) and Application, named as `revision_name` says; every desired object live
/// with the last commit's content, and no object of an Application outside its last desired
/// state (labelled or not); `status.managedKinds` exactly the kinds of the last desired state;
/// no panic in the controller's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_at_random_points_loses_nothing() -> Result<()> {
    let seed = seed()?;
    println!("crash seed {seed} (replay: {SEED_ENV}={seed})");
    let mut rng = XorShift::new(seed);
    let began = Instant::now();
    let mut env = env_with_workloads("crash", false).await?;
    env.grant("apps", &["deployments"]).await?;
    let names: Vec<String> = (0..APPS).map(app_name).collect();
    start_controller(&mut env)?;

    let mut commits = Vec::new();
    let mut kills = 0;
    for round in 1..=COMMITS {
        let commit = push_commit(&env, round).await?;
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
        println!("commit {round}: all Synced {:?} after the push", round_began.elapsed());
        commits.push(commit);
    }
    let last = commits.last().context("commits")?.clone();

    // Converged: Synced at the last commit, Ready=True/Healthy, its Revision Healthy.
    for name in &names {
        env.wait_app(name, &format!("Synced at {last}, Ready=True/Healthy"), |app| {
            app.status.as_ref().is_some_and(|s| {
                s.deployed_revision.as_deref() == Some(last.as_str())
                    && s.sync.state == SyncState::Synced
                    && s.health.state == HealthState::Healthy
            }) && ready(app).is_some_and(|(s, r, _)| s == "True" && r == "Healthy")
        })
        .await?;
        wait_for(&format!("the Revision of {name} at {last} is Healthy"), DEADLINE, || async {
            let phase = env.revision(name, &last).await?.status.and_then(|s| s.phase);
            Ok(((phase == Some(RevisionPhase::Healthy)).then_some(()), format!("{phase:?}")))
        })
        .await
        .with_context(|| format!("controller log, last lines:\n{}", env.log_tail(40)))?;
    }
    println!("{kills} kills; converged {:?} after the start", began.elapsed());

    // No duplicate Revision: one per (Application, commit, desired-state hash), under the
    // deterministic name; and, as every commit was rolled out, one per commit.
    let revisions = env.api::<Revision>().list(&ListParams::default()).await?.items;
    let mut per_pair: BTreeMap<(String, String, String), Vec<String>> = BTreeMap::new();
    for revision in &revisions {
        let app = revision.labels().get(keys::APPLICATION).cloned().unwrap_or_default();
        ensure!(
            app == revision.spec.application_ref.name,
            "Revision {} is labelled for {app:?} but belongs to {}",
            revision.name_any(),
            revision.spec.application_ref.name
        );
        let key =
            (app, revision.spec.source.revision.clone(), revision.spec.desired_state_hash.clone());
        per_pair.entry(key).or_default().push(revision.name_any());
    }
    let listing: Vec<String> = revisions
        .iter()
        .map(|r| {
            format!(
                "{} commit={} hash={} phase={:?} attempts={}",
                r.name_any(),
                r.spec.source.revision,
                r.spec.desired_state_hash,
                r.status.as_ref().and_then(|s| s.phase),
                r.status.as_ref().map_or(0, |s| s.attempts)
            )
        })
        .collect();
    for ((app, commit, hash), found) in &per_pair {
        ensure!(
            found.len() == 1,
            "seed {seed}: {} Revisions of {app} at commit {commit}, hash {hash}: {found:?}",
            found.len()
        );
        let expected = revision_name(app, commit, hash);
        ensure!(
            found[0] == expected,
            "seed {seed}: Revision {} of {app} at {commit} should be named {expected}",
            found[0]
        );
    }
    for name in &names {
        let of_app: Vec<&String> = per_pair.keys().filter(|k| &k.0 == name).map(|k| &k.1).collect();
        let mut at: Vec<&String> = of_app.clone();
        at.sort();
        at.dedup();
        ensure!(
            of_app.len() == at.len(),
            "seed {seed}: {name} has two desired-state hashes for one commit: {listing:#?}"
        );
        let mut expected: Vec<&String> = commits.iter().collect();
        expected.sort();
        ensure!(
            at == expected,
            "seed {seed}: {name} should have one Revision per commit {commits:?}: {listing:#?}"
        );
    }

    // No orphan, nothing missing, every object at the last commit's content, and the inventory
    // exactly the last desired state's kinds. Every problem of every Application is reported.
    let cms = env.api::<ConfigMap>();
    let services = env.api::<Service>();
    let deployments = env.api::<Deployment>();
    let mut problems = Vec::new();
    for (app, name) in names.iter().enumerate() {
        let wanted = desired(app, COMMITS);
        let wanted_of = |kind: &str| -> BTreeSet<String> {
            wanted.iter().filter(|o| o.kind == kind).map(|o| o.name.clone()).collect()
        };
        let live = [
            ("ConfigMap", labelled(&cms, name).await?),
            ("Service", labelled(&services, name).await?),
            ("Deployment", labelled(&deployments, name).await?),
        ];
        for (kind, found) in live {
            let expected = wanted_of(kind);
            let orphans: Vec<&String> = found.difference(&expected).collect();
            let missing: Vec<&String> = expected.difference(&found).collect();
            if !orphans.is_empty() || !missing.is_empty() {
                problems
                    .push(format!("{name}'s {kind}s: orphaned {orphans:?}, missing {missing:?}"));
            }
        }
        // Objects of earlier commits are gone, even ones that lost their labels.
        let removed: BTreeSet<(&str, String)> = (1..COMMITS)
            .flat_map(|c| desired(app, c))
            .map(|o| (o.kind, o.name))
            .filter(|(kind, object)| !wanted_of(kind).contains(object))
            .collect();
        for (kind, object) in &removed {
            let present = match *kind {
                "ConfigMap" => cms.get_opt(object).await?.is_some(),
                "Service" => services.get_opt(object).await?.is_some(),
                _ => deployments.get_opt(object).await?.is_some(),
            };
            if present {
                problems.push(format!("{kind} {object} of {name} was removed from Git but lives"));
            }
        }
        for object in &wanted {
            let (content, expected) = match object.kind {
                "ConfigMap" => (
                    cms.get_opt(&object.name).await?.and_then(|cm| cm.data?.get("value").cloned()),
                    COMMITS.to_string(),
                ),
                "Service" => (
                    services
                        .get_opt(&object.name)
                        .await?
                        .and_then(|s| s.spec?.ports?.first().map(|p| p.port.to_string())),
                    (8000 + COMMITS).to_string(),
                ),
                _ => (
                    deployments
                        .get_opt(&object.name)
                        .await?
                        .and_then(|d| d.spec?.template.spec?.containers.first()?.image.clone()),
                    format!("registry.example/web:{COMMITS}"),
                ),
            };
            if content.as_deref() != Some(expected.as_str()) {
                problems.push(format!(
                    "{} {} of {name}: {content:?} instead of the last commit's {expected:?}",
                    object.kind, object.name
                ));
            }
        }
        let status = env.api::<Application>().get(name).await?.status.context("status")?;
        let kinds: BTreeSet<(String, String)> =
            status.managed_kinds.iter().map(|k| (k.api_version.clone(), k.kind.clone())).collect();
        let expected: BTreeSet<(String, String)> =
            wanted.iter().map(|o| (o.api_version.to_owned(), o.kind.to_owned())).collect();
        if kinds != expected {
            let field = format!("application={name}");
            let log = env.controller_log();
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| {
                    l.split_whitespace().any(|w| w == field)
                        || l.contains("controller starting")
                        || l.contains("became the leader")
                })
                .collect();
            let of_app: Vec<&String> =
                listing.iter().filter(|l| l.starts_with(&format!("{name}-"))).collect();
            problems.push(format!(
                "{name}'s status.managedKinds is {kinds:?}, the kinds of its last desired state \
                 {expected:?}\n  its Revisions: {of_app:#?}\n  the controller's lines about it:\n{}",
                lines.join("\n")
            ));
        }
    }
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
