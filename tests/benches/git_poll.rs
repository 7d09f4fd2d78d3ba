//! Benchmark: how fast the Git cache notices and fetches a new commit, against `git fetch` in an
//! existing clone of the same repository, and proof that a poll with nothing new makes one ref
//! listing and no fetch. Runs against a real `git daemon` and lighttpd + `git http-backend` over
//! https. Prints one JSON line per measurement; medians over `KSYNC_BENCH_ITERATIONS`
//! (default 7) rounds. Exits non-zero when the cheap-polling property does not hold.
//!
//! Run: `cargo bench -p kuvryn-sync-tests --bench git_poll`

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use kuvryn_sync_source::git::{BasicAuth, FetchRequest, GitAuth, GitCache};
use kuvryn_sync_tests::servers::{BareRepo, GitDaemon, HttpsGit, git, run};
use secrecy::SecretString;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A `git` command for the baseline clone; `extra` adds transport settings (CA, credentials).
fn baseline_git(home: &Path, extra: &[(&str, String)]) -> Command {
    let mut cmd = git(home);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd
}

struct Measured {
    ours_ms: f64,
    git_fetch_ms: f64,
    poll_ms: f64,
    poll_refs_listed: u32,
    poll_fetches: u64,
}

fn measure(
    label: &str,
    repo: &BareRepo,
    req: &FetchRequest,
    clone_url: &str,
    git_env: &[(&str, String)],
    iterations: usize,
) -> Result<Measured> {
    let work = tempfile::tempdir()?;
    kuvryn_sync_runtime::tls::install_crypto_provider();
    let cache = GitCache::new(work.path().join("cache"), 1 << 30)?;
    // Warm both sides: the cache holds the current tip, the clone exists (shallow like ours).
    cache.resolve(req).context("warming the cache")?;
    let clone_dir = work.path().join("clone");
    let mut clone = baseline_git(repo.home(), git_env);
    clone.args(["clone", "--quiet", "--bare", "--depth=1", clone_url]).arg(&clone_dir);
    run(clone).context("baseline clone")?;

    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let mut polls = Vec::new();
    let mut poll_refs = 0;
    let mut poll_fetches = 0;
    for i in 0..iterations {
        let commit = repo.commit(&[("bench.txt", &format!("{label} {i}\n"))], "bench")?;

        let start = Instant::now();
        let resolved = cache.resolve(req)?;
        ours.push(ms(start.elapsed()));
        ensure!(resolved.commit == commit && resolved.fetched, "the cache missed the new commit");

        let start = Instant::now();
        let mut fetch = baseline_git(repo.home(), git_env);
        fetch.arg("-C").arg(&clone_dir).args([
            "fetch",
            "--quiet",
            "--depth=1",
            "origin",
            "+refs/heads/main:refs/heads/main",
        ]);
        run(fetch).context("baseline git fetch")?;
        theirs.push(ms(start.elapsed()));

        // Nothing new: one ref listing, no fetch.
        let before = cache.stats();
        let start = Instant::now();
        let poll = cache.resolve(req)?;
        polls.push(ms(start.elapsed()));
        let after = cache.stats();
        ensure!(poll.commit == commit, "poll returned another commit");
        poll_refs = poll_refs.max(poll.refs_listed);
        poll_fetches += after.fetches - before.fetches;
        if poll.fetched || poll.refs_listed != 1 || after.ref_listings - before.ref_listings != 1 {
            bail!("a poll with nothing new did more than one ref listing or fetched: {poll:?}");
        }
    }
    Ok(Measured {
        ours_ms: median(ours),
        git_fetch_ms: median(theirs),
        poll_ms: median(polls),
        poll_refs_listed: poll_refs,
        poll_fetches,
    })
}

fn report(transport: &str, m: &Measured, iterations: usize) {
    println!(
        "{}",
        serde_json::json!({
            "bench": "git_notice_and_fetch",
            "transport": transport,
            "ours_ms": (m.ours_ms * 100.0).round() / 100.0,
            "git_fetch_ms": (m.git_fetch_ms * 100.0).round() / 100.0,
            "ratio": ((m.ours_ms / m.git_fetch_ms) * 1000.0).round() / 1000.0,
            "iterations": iterations,
        })
    );
    println!(
        "{}",
        serde_json::json!({
            "bench": "git_poll_nothing_new",
            "transport": transport,
            "poll_ms": (m.poll_ms * 100.0).round() / 100.0,
            "refs_listed_per_poll": m.poll_refs_listed,
            "fetches": m.poll_fetches,
            "iterations": iterations,
        })
    );
}

fn main() -> Result<()> {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let iterations: usize = std::env::var("KSYNC_BENCH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7)
        .max(1);
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("srv");
    std::fs::create_dir_all(&root)?;
    let repo = BareRepo::create(&root, "bench")?;
    // Some content so a fetch carries a real tree.
    let files: Vec<(String, String)> = (0..200)
        .map(|i| {
            (format!("apps/app-{i}/deploy.yaml"), format!("kind: Deployment\nname: app-{i}\n"))
        })
        .collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    repo.commit(&refs, "content")?;

    let daemon = GitDaemon::start(&root)?;
    let url = daemon.url(&repo.name);
    let mut req = FetchRequest::new(&url, "main");
    req.timeout = Duration::from_secs(30);
    let m = measure("daemon", &repo, &req, &url, &[], iterations)?;
    report("git", &m, iterations);

    {
        let server = HttpsGit::start(&root, "bench", "bench-password-1")?;
        {
            let url = server.url(&repo.name);
            let mut req = FetchRequest::new(&url, "main");
            req.timeout = Duration::from_secs(30);
            req.credentials = Some(GitAuth::Basic(BasicAuth {
                username: "bench".into(),
                password: SecretString::from("bench-password-1"),
                ca_bundle: None,
            }));
            req.ca_certs_pem = Some(server.ca_pem.clone());
            let env = [
                ("GIT_SSL_CAINFO", server.ca_file.display().to_string()),
                ("GIT_TERMINAL_PROMPT", "0".to_owned()),
            ];
            let authed = format!(
                "https://bench:bench-password-1@127.0.0.1:{}/git/{}",
                server.port, repo.name
            );
            let m = measure("https", &repo, &req, &authed, &env, iterations)?;
            report("https", &m, iterations);
        }
    }
    Ok(())
}
