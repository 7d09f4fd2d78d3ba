//! Applications roll out while the API misbehaves, end to end: the real controller binary
//! against an in-process ksync-sandbox that injects, for every request of the controller's own
//! identity over the whole run, server errors (500, 503), 429 TooManyRequests with
//! Retry-After, added latency, connection resets, watch streams cut (cleanly or by a reset)
//! and `410 Gone` on resumed watches (rates in [`faults`]); a real Git server (git daemon). The test's own client is
//! spared, so what it observes is the truth. Every Application converges to its last commit;
//! one Revision per (commit, desired state); nothing pruned that the desired state of the time
//! declared; the live objects and the inventory exactly the last desired state; the controller
//! survives (faults are not crashes) and keeps asking.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use ksync_sandbox::Fault;
use kuvryn_sync_tests::application::env_with_workloads;
use kuvryn_sync_tests::rollouts::{
    DeletionWatch, app_name, current_version, inventory_problems, push_commit, revision_problems,
    rollout_kinds, wait_converged, wrong_prunes,
};
use serde_json::json;

/// Applications, and commits each of them rolls out.
const APPS: usize = 3;
const COMMITS: usize = 5;
/// The controller's identity at the sandbox: only its requests get faults.
const CONTROLLER_USER: &str = "kuvryn-sync-controller-faults";

/// The fault model of the run, per verb, for the controller's requests: 15 ms more on every
/// request; reads (get, list) fail with 500 or 503 and have their connections reset; writes get
/// 429 TooManyRequests (Retry-After: 1), 503 (both retried by the Kubernetes client), 500 (retried
/// by our client for everything but a create, `apply::clients::TransientRetry`) and connection
/// resets; watches are refused with 503 (2 %), cut after 3 to 9 s (half of the cuts reset the
/// connection) and get 410 Gone on 10 % of resumptions.
///
/// Watch faults are rarer than request faults: kube-runtime's watcher backs off exponentially
/// (up to 30 s) on every watch error and only forgets after two quiet minutes, so a watch that
/// fails every few seconds delays every change by half a minute.
///
/// Creates get no 500 and no reset: a create is never repeated (one that reached the server
/// would fail again as AlreadyExists), so such a failure fails its attempt, and with the API's
/// default `failurePolicy.maxAttempts` of 1 the Revision stops with RetryBlocked until the next
/// commit. Every apply is a server-side apply `PATCH`, which is retried.
fn faults() -> Vec<(&'static str, Fault)> {
    let base = Fault {
        latency: Duration::from_millis(15),
        only_user: Some(CONTROLLER_USER.to_owned()),
        ..Fault::default()
    };
    let read = |rate: f64, code: u16| Fault {
        error_rate: rate,
        error_code: code,
        reset_rate: 0.03,
        ..base.clone()
    };
    let write = |rate: f64, code: u16| Fault { error_rate: rate, error_code: code, ..base.clone() };
    let repeatable = |rate: f64, code: u16| Fault { reset_rate: 0.03, ..write(rate, code) };
    vec![
        ("get", read(0.08, 503)),
        ("list", read(0.08, 500)),
        ("create", write(0.08, 429)),
        ("update", repeatable(0.08, 503)),
        ("patch", repeatable(0.10, 500)),
        ("delete", repeatable(0.10, 500)),
        ("deletecollection", write(0.10, 503)),
        (
            "watch",
            Fault {
                watch_cut_after: Duration::from_secs(6),
                watch_gone_rate: 0.1,
                ..write(0.02, 503)
            },
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollouts_converge_exactly_while_the_api_fails() -> Result<()> {
    let began = Instant::now();
    let mut env = env_with_workloads("faults", false).await?;
    let Some(sandbox) = env.cluster.sandbox() else {
        eprintln!(
            "SKIPPED rollouts_converge_exactly_while_the_api_fails: it injects API faults, which \
             only the in-process sandbox can (KSYNC_E2E_KUBECONFIG names a real cluster)"
        );
        return Ok(());
    };
    env.grant("apps", &["deployments"]).await?;
    let kubeconfig = sandbox.user_kubeconfig(CONTROLLER_USER, &["system:masters"])?;
    let kubeconfig = kubeconfig.to_str().context("kubeconfig path")?.to_owned();
    let kinds = rollout_kinds();
    let deletions = DeletionWatch::start(&env.cluster.client(), &env.namespace, &kinds).await?;
    for (verb, fault) in faults() {
        sandbox.set_fault(verb, fault);
    }
    env.start_controller(&[("KUBECONFIG", kubeconfig.as_str())])?;
    let pid = env.controller.as_ref().context("controller")?.pid();
    let names: Vec<String> = (0..APPS).map(app_name).collect();

    let mut commits = Vec::new();
    let mut round_ends = Vec::new();
    for round in 1..=COMMITS {
        let commit = push_commit(&env, APPS, round).await?;
        if round == 1 {
            for name in &names {
                env.create_app(name, &format!("apps/{name}"), json!({})).await?;
            }
        }
        let round_began = Instant::now();
        for name in &names {
            env.wait_synced(name, &commit).await?;
        }
        round_ends.push(current_version(&env).await?);
        println!("commit {round}: all Synced {:?} after the push", round_began.elapsed());
        commits.push(commit);
    }
    let last = commits.last().context("commits")?.clone();
    wait_converged(&env, &names, &last).await?;
    let injected = env.cluster.sandbox().context("sandbox")?.injected_faults();
    println!("converged {:?} after the start; injected {injected:?}", began.elapsed());

    let mut problems = revision_problems(&env, &names, &commits).await?;
    problems.extend(inventory_problems(&env, APPS, COMMITS).await?);
    let end = current_version(&env).await?;
    let deleted = deletions.deletions_up_to(end, kinds.len()).await?;
    problems.extend(wrong_prunes(APPS, &deleted, &round_ends));
    println!("{} objects deleted during the run", deleted.len());
    ensure!(deleted.len() >= APPS * (COMMITS - 1), "prune ran: deleted {deleted:?}");
    ensure!(problems.is_empty(), "{}", problems.join("\n"));

    // Faults of every kind were injected, and the controller rode them out in one process.
    ensure!(
        injected.errors > 0
            && injected.resets > 0
            && injected.delayed > 0
            && injected.watch_cuts > 0
            && injected.watch_gone > 0,
        "every kind of fault was injected: {injected:?}"
    );
    let controller = env.controller.as_mut().context("controller")?;
    ensure!(!controller.has_exited(), "the controller exited under faults:\n{}", env.log_tail(40));
    ensure!(controller.pid() == pid, "the controller was restarted");
    let log = env.controller_log();
    let panics: Vec<&str> =
        log.lines().filter(|line| line.to_lowercase().contains("panic")).collect();
    ensure!(panics.is_empty(), "the controller panicked:\n{}", panics.join("\n"));
    // It kept asking: every faulted request was one it sent, and it sent more to converge.
    let sent: u64 = env
        .controller_counter("kuvryn_sync_api_requests_total")
        .await?
        .iter()
        .map(|(_, v)| v)
        .sum();
    let faulted = injected.errors + injected.resets + injected.watch_gone;
    println!("the controller sent {sent} API requests; {faulted} of them met an injected fault");
    ensure!(sent > faulted, "the controller sent {sent} requests, {faulted} faulted");
    println!("done in {:?}", began.elapsed());
    Ok(())
}
