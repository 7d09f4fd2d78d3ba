//! Automatic controller shards (`--shards 3`) on the sandbox: three controller replicas split 30
//! Applications; one is killed with SIGKILL (no chance to release its shard Leases); the two left
//! take over its share only, which deploys the next commit within a deadline; and no Application
//! was ever written by two replicas at once. Who wrote what is read from the sandbox's request
//! log (the API server's side), not from the controllers' logs: each replica authenticates as
//! its own user.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, ensure};
use ksync_sandbox::RequestRecord;
use kube::api::ListParams;
use kuvryn_sync_api::{Application, SyncState};
use kuvryn_sync_tests::application::{self, config_map, shard_holders};
use kuvryn_sync_tests::cluster::{ControllerProcess, skip_on_real_cluster, wait_for};
use kuvryn_sync_tests::writers::{Writers, last_writers, overlapping, writers};
use serde_json::json;

const APPS: usize = 30;
const REPLICAS: [&str; 3] = ["shard-replica-a", "shard-replica-b", "shard-replica-c"];
/// Short Leases keep the test fast; replicas renew every quarter of it.
const LEASE: &str = "8s";
/// How long the killed replica's share may take to deploy the next commit.
const TAKEOVER_DEADLINE: Duration = Duration::from_secs(60);

fn app_name(i: usize) -> String {
    format!("app-{i:02}")
}

/// One commit with a ConfigMap per Application, all carrying `value`.
fn files(value: &str) -> Vec<(String, String)> {
    (0..APPS)
        .map(|i| {
            (format!("apps/{}/cm.yaml", app_name(i)), config_map(&app_name(i), value, json!({})))
        })
        .collect()
}

/// No Application has two writers at any instant, nor writers taking turns back and forth:
/// each replica's writes of one Application form one interval, and intervals do not overlap.
/// The number of handovers.
fn assert_one_writer_at_a_time(writers: &Writers) -> Result<usize> {
    let overlaps = overlapping(writers);
    ensure!(
        overlaps.is_empty(),
        "Applications written by two replicas at once or taking turns (application, first, \
         second): {overlaps:?}"
    );
    Ok(writers.values().map(|by_user| by_user.len().saturating_sub(1)).sum())
}

async fn wait_all_synced(env: &application::Env, commit: &str, deadline: Duration) -> Result<()> {
    let api = env.api::<Application>();
    wait_for(&format!("all {APPS} Applications Synced at {commit}"), deadline, || async {
        let apps = api.list(&ListParams::default()).await?.items;
        let synced = apps
            .iter()
            .filter(|app| {
                app.status.as_ref().is_some_and(|s| {
                    s.deployed_revision.as_deref() == Some(commit)
                        && s.sync.state == SyncState::Synced
                })
            })
            .count();
        Ok(((synced == APPS).then_some(()), format!("{synced} of {APPS} synced")))
    })
    .await
}

/// Start a `--shards 3` replica authenticating as its own user: (user, process, log file).
fn start_replica(
    env: &application::Env,
    identity: &str,
    logs: &std::path::Path,
) -> Result<(String, ControllerProcess, std::path::PathBuf)> {
    let sandbox = env.cluster.sandbox().context("the sandbox")?;
    let user = format!("system:serviceaccount:kuvryn-system:{identity}");
    let kubeconfig = sandbox.user_kubeconfig(&user, &["system:masters"])?;
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    let log = logs.join(format!("{identity}.log"));
    let args = ["--shards", "3", "--shard-lease-duration", LEASE, "--default-poll-interval", "1h"];
    let process = ControllerProcess::start_logged_as(
        &env.cluster,
        identity,
        &args,
        &[("KUBECONFIG", kubeconfig.as_str())],
        &log,
    )?;
    Ok((user, process, log))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_split_applications_and_take_over_a_killed_ones_share() -> Result<()> {
    if skip_on_real_cluster(
        "three_replicas_split_applications_and_take_over_a_killed_ones_share",
        "the API server's request log (the sandbox records who sent each request)",
    ) {
        return Ok(());
    }
    let env = application::env("shards", false).await?;
    let sandbox = env.cluster.sandbox().context("the sandbox")?;
    sandbox.record_requests();
    let logs = tempfile::tempdir()?;
    let mut replicas = Vec::new();
    let mut users = BTreeSet::new();
    for identity in REPLICAS {
        let replica = start_replica(&env, identity, logs.path())?;
        users.insert(replica.0.clone());
        replicas.push(replica);
    }
    let logs_tail = |replicas: &[(String, ControllerProcess, std::path::PathBuf)]| {
        replicas
            .iter()
            .map(|(user, _, log)| {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                format!("--- {user}\n{}", lines[lines.len().saturating_sub(15)..].join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    // The replicas settle on one shard each before there is work (a replica alone at first
    // would take all three and hand two over: correct, but the split below assumes it is done).
    let holders =
        wait_for("three shard Leases held by three replicas", Duration::from_secs(60), || async {
            let holders = shard_holders(&env).await?;
            let distinct: BTreeSet<&String> = holders.values().collect();
            Ok((
                (holders.len() == 3 && distinct.len() == 3).then(|| holders.clone()),
                format!("{holders:?}"),
            ))
        })
        .await
        .with_context(|| logs_tail(&replicas))?;
    eprintln!("shard Leases: {holders:?}");
    let first = files("one");
    let first: Vec<(&str, String)> = first.iter().map(|(p, c)| (p.as_str(), c.clone())).collect();
    let commit = env.push(&first, "thirty apps").await?;
    let started = Instant::now();
    for i in 0..APPS {
        env.create_app(&app_name(i), &format!("apps/{}", app_name(i)), json!({})).await?;
    }
    wait_all_synced(&env, &commit, Duration::from_secs(120))
        .await
        .with_context(|| logs_tail(&replicas))?;
    eprintln!("all {APPS} Applications synced in {:?} by three replicas", started.elapsed());

    // The split, from the request log: every replica writes its share.
    let before = last_writers(&sandbox.requests(), &env.namespace, &users);
    ensure!(before.len() == APPS, "writes seen for {} of {APPS} Applications", before.len());
    let mut shares: BTreeMap<&str, usize> = BTreeMap::new();
    for user in before.values() {
        *shares.entry(user).or_default() += 1;
    }
    eprintln!("shares before the kill: {shares:?}");
    ensure!(
        shares.len() == 3,
        "the Applications are not split across three replicas: {shares:?}\n{}",
        logs_tail(&replicas)
    );

    // Kill the replica with the largest share; the next commit must deploy everywhere.
    let victim = shares
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(user, _)| (*user).to_owned())
        .context("a replica with a share")?;
    let index = replicas.iter().position(|(user, _, _)| *user == victim).context("victim")?;
    replicas[index].1.kill(Duration::from_secs(10)).await?;
    let killed_at = Instant::now();
    let killed_wall = SystemTime::now();
    // Its shard Lease passes to a survivor within one Lease duration (8s) of its last renewal,
    // plus a quarter of it to notice; the deadline leaves room for a loaded machine.
    let victim_identity = victim.rsplit(':').next().unwrap_or_default().to_owned();
    let leases_moved = wait_for(
        "the killed replica's shard Lease taken over",
        Duration::from_secs(30),
        || async {
            let holders = shard_holders(&env).await?;
            let done = holders.len() == 3 && !holders.values().any(|h| *h == victim_identity);
            Ok((done.then_some(()), format!("{holders:?}")))
        },
    )
    .await
    .with_context(|| logs_tail(&replicas));
    let lease_takeover = killed_at.elapsed();
    leases_moved?;
    eprintln!("shard Lease of the killed replica taken over {lease_takeover:?} after the kill");
    // One Lease duration (8s) since its last renewal, itself at most 2s before the kill; the
    // survivors look again just after the Lease expires.
    ensure!(
        lease_takeover < Duration::from_secs(10),
        "the killed replica's shard was taken over only after {lease_takeover:?}"
    );
    let second = files("two");
    let second: Vec<(&str, String)> = second.iter().map(|(p, c)| (p.as_str(), c.clone())).collect();
    let next = env.push(&second, "every app changes").await?;
    wait_all_synced(&env, &next, TAKEOVER_DEADLINE).await.with_context(|| logs_tail(&replicas))?;
    let takeover = killed_at.elapsed();
    let holders = shard_holders(&env).await?;
    eprintln!("shard Leases after the kill: {holders:?}");
    ensure!(
        holders.len() == 3 && !holders.values().any(|h| victim.ends_with(&format!(":{h}"))),
        "the killed replica still holds a shard: {holders:?}"
    );
    eprintln!(
        "after SIGKILL of {victim}: all {APPS} Applications synced at the next commit in {takeover:?}"
    );

    let records = sandbox.requests();
    let after = last_writers(&records, &env.namespace, &users);
    let mut moved = 0;
    for (app, owner) in &before {
        let now = &after[app];
        if *owner == victim {
            ensure!(*now != victim, "{app} is still last written by the killed replica");
            moved += 1;
        } else {
            ensure!(now == owner, "{app} moved from {owner} to {now} though {owner} lives");
        }
    }
    let late: Vec<&RequestRecord> =
        records.iter().filter(|r| r.user == victim && r.started > killed_wall).collect();
    ensure!(late.is_empty(), "requests from the killed replica after the kill: {late:?}");
    eprintln!("moved {moved} Applications (the killed replica's share only)");

    // A new replica joins (as a restarted Pod would, under a new name): the survivor holding
    // two shards stops reconciling one, releases its Lease, and the newcomer takes it — a
    // handover between two live writers. The next commit deploys everywhere.
    let joined_at = Instant::now();
    let newcomer = start_replica(&env, "shard-replica-d", logs.path())?;
    users.insert(newcomer.0.clone());
    replicas.push(newcomer);
    let holders = wait_for(
        "one shard each again, one of them the newcomer's",
        Duration::from_secs(60),
        || async {
            let holders = shard_holders(&env).await?;
            let distinct: BTreeSet<&String> = holders.values().collect();
            let done = distinct.len() == 3 && distinct.contains(&"shard-replica-d".to_owned());
            Ok((done.then(|| holders.clone()), format!("{holders:?}")))
        },
    )
    .await
    .with_context(|| logs_tail(&replicas))?;
    eprintln!("rebalanced in {:?}: {holders:?}", joined_at.elapsed());
    let third = files("three");
    let third: Vec<(&str, String)> = third.iter().map(|(p, c)| (p.as_str(), c.clone())).collect();
    let last = env.push(&third, "every app changes again").await?;
    wait_all_synced(&env, &last, TAKEOVER_DEADLINE).await.with_context(|| logs_tail(&replicas))?;
    let records = sandbox.requests();
    let newcomer_share = last_writers(&records, &env.namespace, &users)
        .values()
        .filter(|user| user.ends_with(":shard-replica-d"))
        .count();
    ensure!(newcomer_share > 0, "the newcomer wrote no Application");
    let handovers = assert_one_writer_at_a_time(&writers(&records, &env.namespace, &users))?;

    // A replica stopped with SIGTERM releases its shard and withdraws its presence: the others
    // take the shard without waiting for a Lease to expire.
    let index = replicas.len() - 1;
    let terminated_at = Instant::now();
    let status = replicas[index].1.terminate(Duration::from_secs(30)).await?;
    ensure!(status.success(), "the stopped replica exited with {status}");
    wait_for("the stopped replica's shard taken over", Duration::from_secs(30), || async {
        let holders = shard_holders(&env).await?;
        let done = holders.len() == 3 && !holders.values().any(|h| h == "shard-replica-d");
        Ok((done.then_some(()), format!("{holders:?}")))
    })
    .await
    .with_context(|| logs_tail(&replicas))?;
    let graceful = terminated_at.elapsed();
    eprintln!("after SIGTERM, the stopped replica's shard was taken over in {graceful:?}");
    ensure!(
        graceful < Duration::from_secs(8),
        "a stopped replica's shard waited {graceful:?}, as long as an expiry (8s)"
    );
    eprintln!(
        "the newcomer took {newcomer_share} Applications; {handovers} handovers in all (the kill \
         and the rebalance), none with two writers at once ({} requests checked)",
        records.len()
    );
    Ok(())
}

/// Label mode: a `--shard eu` controller and a `--shard-unlabelled` one. Each writes only its
/// own Applications and Repository (from the request log), lists and watches Applications with
/// its label selector (so it never receives the other's), and elects its leader on its own
/// Lease; the eu Applications' Revisions carry the shard label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_shards_reconcile_only_their_own_objects() -> Result<()> {
    use kube::api::PostParams;
    use kuvryn_sync_api::{Repository, Revision, keys};
    if skip_on_real_cluster(
        "label_shards_reconcile_only_their_own_objects",
        "the API server's request log (the sandbox records who sent each request)",
    ) {
        return Ok(());
    }
    let env = application::env("label-shards", false).await?;
    let sandbox = env.cluster.sandbox().context("the sandbox")?;
    sandbox.record_requests();
    // A second Repository for the same Git repository, in shard eu.
    let plain = env.api::<Repository>().get("apps").await?;
    let eu_repo: Repository = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
        "metadata": {"name": "apps-eu", "labels": {keys::SHARD: "eu"}},
        "spec": plain.spec,
    }))?;
    env.api::<Repository>().create(&PostParams::default(), &eu_repo).await?;
    let files = files("one");
    let files: Vec<(&str, String)> = files.iter().map(|(p, c)| (p.as_str(), c.clone())).collect();
    let commit = env.push(&files[..8], "eight apps").await?;
    let eu: Vec<String> = (0..4).map(app_name).collect();
    let unlabelled: Vec<String> = (4..8).map(app_name).collect();
    for name in &eu {
        let overrides = json!({"source": {"repositoryRef": {"name": "apps-eu"}}});
        env.create_app(name, &format!("apps/{name}"), overrides).await?;
        let label = json!({"metadata": {"labels": {keys::SHARD: "eu"}}});
        env.api::<Application>()
            .patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&label))
            .await?;
    }
    for name in &unlabelled {
        env.create_app(name, &format!("apps/{name}"), json!({})).await?;
    }
    let logs = tempfile::tempdir()?;
    let mut users = BTreeMap::new();
    let mut controllers = Vec::new();
    for (identity, flags) in
        [("label-shard-eu", &["--shard", "eu"][..]), ("label-main", &["--shard-unlabelled"][..])]
    {
        let user = format!("system:serviceaccount:kuvryn-system:{identity}");
        let kubeconfig = sandbox.user_kubeconfig(&user, &["system:masters"])?;
        let kubeconfig = kubeconfig.to_string_lossy().into_owned();
        let mut args = vec!["--default-poll-interval", "1h"];
        args.extend_from_slice(flags);
        let log = logs.path().join(format!("{identity}.log"));
        controllers.push(ControllerProcess::start_logged_as(
            &env.cluster,
            identity,
            &args,
            &[("KUBECONFIG", kubeconfig.as_str())],
            &log,
        )?);
        users.insert(identity, user);
    }
    let api = env.api::<Application>();
    wait_for(&format!("8 Applications Synced at {commit}"), Duration::from_secs(90), || async {
        let apps = api.list(&ListParams::default()).await?.items;
        let synced = apps
            .iter()
            .filter(|app| {
                app.status.as_ref().is_some_and(|s| {
                    s.deployed_revision.as_deref() == Some(commit.as_str())
                        && s.sync.state == SyncState::Synced
                })
            })
            .count();
        Ok(((synced == 8).then_some(()), format!("{synced} of 8 synced")))
    })
    .await?;

    let records = sandbox.requests();
    let all_users: BTreeSet<String> = users.values().cloned().collect();
    let last = last_writers(&records, &env.namespace, &all_users);
    for name in &eu {
        ensure!(last.get(name) == Some(&users["label-shard-eu"]), "{name}: {:?}", last.get(name));
    }
    for name in &unlabelled {
        ensure!(last.get(name) == Some(&users["label-main"]), "{name}: {:?}", last.get(name));
    }
    let spans = writers(&records, &env.namespace, &all_users);
    ensure!(spans.values().all(|by| by.len() == 1), "an Application with two writers: {spans:?}");
    // Repositories: each written by its shard's controller only.
    let repo_prefix =
        format!("/apis/sync.kuvryn.io/v1alpha1/namespaces/{}/repositories/", env.namespace);
    for record in records.iter().filter(|r| r.is_write() && all_users.contains(&r.user)) {
        if let Some(rest) = record.path.strip_prefix(&repo_prefix) {
            let repo = rest.trim_end_matches("/status");
            let owner =
                if repo == "apps-eu" { &users["label-shard-eu"] } else { &users["label-main"] };
            ensure!(record.user == *owner, "{} written by {}", record.path, record.user);
        }
    }
    // The eu controller lists and watches Applications only with its selector.
    let selector = "labelSelector=sync.kuvryn.io%2Fshard%3Deu";
    let app_reads: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| r.user == users["label-shard-eu"] && r.method == "GET")
        .filter(|r| r.path == "/apis/sync.kuvryn.io/v1alpha1/applications")
        .collect();
    ensure!(!app_reads.is_empty(), "the eu controller never listed Applications");
    // The one read without it is the start-up probe that the CRDs are served (`limit=1`).
    let unfiltered: Vec<&str> = app_reads
        .iter()
        .map(|r| r.query.as_str())
        .filter(|query| !query.contains(selector) && query.trim_start_matches('&') != "limit=1")
        .collect();
    ensure!(unfiltered.is_empty(), "Application reads without the shard selector: {unfiltered:?}");
    // Revisions of eu Applications carry the shard label.
    let revisions = env.api::<Revision>().list(&ListParams::default()).await?.items;
    for revision in &revisions {
        let app = revision.spec.application_ref.name.clone();
        let label = revision.metadata.labels.as_ref().and_then(|l| l.get(keys::SHARD)).cloned();
        let expected = eu.contains(&app).then(|| "eu".to_owned());
        ensure!(label == expected, "Revision of {app}: shard label {label:?}");
    }
    // Each elected its leader on its own Lease.
    use k8s_openapi::api::coordination::v1::Lease;
    let leases: kube::Api<Lease> = kube::Api::namespaced(env.cluster.client(), "default");
    let holder = |lease: Lease| lease.spec.and_then(|s| s.holder_identity);
    ensure!(
        holder(leases.get("kuvryn-sync-controller-shard-eu").await?).as_deref()
            == Some("label-shard-eu")
    );
    ensure!(holder(leases.get("kuvryn-sync-controller").await?).as_deref() == Some("label-main"));
    eprintln!(
        "label shards: eu wrote {eu:?}, unlabelled wrote {unlabelled:?}; {} Application reads by eu, \
         {} without its selector",
        app_reads.len(),
        unfiltered.len()
    );
    Ok(())
}
