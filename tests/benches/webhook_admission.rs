//! Admission latency of the real `kuvryn-sync-webhook` binary over TLS on loopback, at a fixed
//! offered load (open loop: requests start on a timer whether or not earlier ones finished, so a
//! slow server shows as latency, not as a lower rate), against a baseline measured in the same run:
//! the same server's trivial `/healthz` over the same TLS connections.
//!
//! - `/validate/healthchecks`: a HealthCheck with three CEL rules, each compiled and checked.
//! - `/admit/applications`: an Application update that touches no approval or rollback
//!   annotation (the common case: admitted without reading anything).
//!
//! Prints one JSON line per endpoint (p50, p99, max in ms, errors) and one summary line. Fails on
//! any error (a non-2xx answer, a transport error, or an admission answer that is not the expected
//! one); the p99 goal (5 ms) is printed, not enforced: absolute times depend on the machine.
//! Run with `cargo bench -p kuvryn-sync-tests --bench webhook_admission` (scripts/test runs it
//! with `--profile dev`); `KSYNC_WEBHOOK_BINARY=target/release/kuvryn-sync-webhook` measures a
//! release build of the server with the same client.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kuvryn_sync_tests::cluster::workspace_binary;
use serde_json::{Value, json};

const RATE_PER_SECOND: u64 = 500;
const SECONDS: u64 = 4;
const GOAL_P99_MS: f64 = 5.0;

fn review(resource: &str, object: Value, old: Option<Value>) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-0000-0000-000000000001",
            "kind": {"group": "sync.kuvryn.io", "version": "v1alpha1", "kind": object["kind"]},
            "resource": {"group": "sync.kuvryn.io", "version": "v1alpha1", "resource": resource},
            "name": object["metadata"]["name"], "namespace": object["metadata"]["namespace"],
            "operation": if old.is_some() { "UPDATE" } else { "CREATE" },
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": object, "oldObject": old, "dryRun": false,
        }
    })
}

fn health_check_review() -> Value {
    review(
        "healthchecks",
        json!({"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "HealthCheck",
        "metadata": {"name": "rollout"},
        "spec": {"group": "argoproj.io", "kind": "Rollout", "rules": [
            {"expression": "object.status.phase == 'Degraded'", "state": "Degraded"},
            {"expression": "has(object.status) && object.status.phase == 'Healthy'", "state": "Healthy"},
            {"expression": "object.status.conditions.exists(c, c.type == 'Paused')", "state": "Progressing"},
        ]}}),
        None,
    )
}

fn application_review() -> Value {
    let app = |team: &str| {
        json!({"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "web", "namespace": "team-a", "labels": {"team": team},
                "annotations": {"sync.kuvryn.io/approved-revision": "web-1",
                    "sync.kuvryn.io/approved-by": "alice"}},
            "spec": {"source": {"repositoryRef": {"name": "apps"}, "path": "web",
                "render": {"type": "yaml"}}, "destination": {"namespace": "team-a"}}})
    };
    review("applications", app("b"), Some(app("a")))
}

struct Measurement {
    latencies_ms: Vec<f64>,
    errors: usize,
}

impl Measurement {
    fn percentile(&self, p: f64) -> f64 {
        let mut sorted = self.latencies_ms.clone();
        sorted.sort_by(f64::total_cmp);
        if sorted.is_empty() {
            return f64::NAN;
        }
        let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
        sorted[index]
    }
}

/// Offer `RATE_PER_SECOND` requests a second for `SECONDS` seconds; `ok` judges each answer.
async fn offer(
    client: &reqwest::Client,
    url: &str,
    body: Option<Arc<Value>>,
    ok: fn(u16, &str) -> bool,
) -> Measurement {
    let total = RATE_PER_SECOND * SECONDS;
    let mut ticker = tokio::time::interval(Duration::from_micros(1_000_000 / RATE_PER_SECOND));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = Vec::with_capacity(total as usize);
    for _ in 0..total {
        ticker.tick().await;
        let client = client.clone();
        let url = url.to_owned();
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            let request = match &body {
                Some(body) => client.post(&url).json(body.as_ref()),
                None => client.get(&url),
            };
            let answer = match request.send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let text = response.text().await.unwrap_or_default();
                    ok(status, &text)
                }
                Err(_) => false,
            };
            (started.elapsed().as_secs_f64() * 1000.0, answer)
        }));
    }
    let mut measurement = Measurement { latencies_ms: Vec::new(), errors: 0 };
    for task in tasks {
        match task.await {
            Ok((ms, true)) => measurement.latencies_ms.push(ms),
            _ => measurement.errors += 1,
        }
    }
    measurement
}

fn allowed(status: u16, text: &str) -> bool {
    status == 200
        && serde_json::from_str::<Value>(text)
            .is_ok_and(|v| v["response"]["allowed"] == json!(true))
}

fn healthy(status: u16, text: &str) -> bool {
    status == 200 && text == "ok"
}

fn client_trusting(ca_pem: &str) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .use_preconfigured_tls(kuvryn_sync_tests::tls_trusting(ca_pem)?)
        .timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(64)
        .build()?)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let certs = kuvryn_sync_tests::localhost_certs()?;
    certs.write_to(dir.path())?;
    // KSYNC_WEBHOOK_BINARY picks another build (e.g. target/release/kuvryn-sync-webhook).
    let binary = match std::env::var_os("KSYNC_WEBHOOK_BINARY") {
        Some(path) => std::path::PathBuf::from(path),
        None => workspace_binary("kuvryn-sync-webhook")?,
    };
    let mut child = Command::new(&binary)
        .args(["--listen", "127.0.0.1:0", "--receiver-listen", "127.0.0.1:0"])
        .args(["--metrics-bind-address", "127.0.0.1:0"])
        .arg("--tls-cert-file")
        .arg(dir.path().join("tls.crt"))
        .arg("--tls-key-file")
        .arg(dir.path().join("tls.key"))
        // No API server: neither measured request reads one.
        .env("KUBECONFIG", dir.path().join("absent"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("start kuvryn-sync-webhook")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
    let https = line.split_whitespace().nth(1).context("ready line")?.to_owned();
    let client = client_trusting(&certs.ca_cert_pem)?;

    // Warm the connection pool and the server.
    offer_warmup(&client, &https).await;
    let baseline = offer(&client, &format!("{https}/healthz"), None, healthy).await;
    let health_checks = offer(
        &client,
        &format!("{https}/validate/healthchecks"),
        Some(Arc::new(health_check_review())),
        allowed,
    )
    .await;
    let applications = offer(
        &client,
        &format!("{https}/admit/applications"),
        Some(Arc::new(application_review())),
        allowed,
    )
    .await;
    let _ = child.kill();
    let _ = child.wait();

    let report = |endpoint: &str, m: &Measurement| {
        println!(
            "{}",
            json!({
                "bench": "webhook_admission", "endpoint": endpoint,
                "rate_per_second": RATE_PER_SECOND, "requests": m.latencies_ms.len() + m.errors,
                "p50_ms": m.percentile(0.50), "p99_ms": m.percentile(0.99),
                "max_ms": m.percentile(1.0), "errors": m.errors,
            })
        );
    };
    report("/healthz (baseline)", &baseline);
    report("/validate/healthchecks", &health_checks);
    report("/admit/applications", &applications);
    let worst_p99 = health_checks.percentile(0.99).max(applications.percentile(0.99));
    let errors = baseline.errors + health_checks.errors + applications.errors;
    println!(
        "{}",
        json!({
            "bench": "webhook_admission", "summary": true,
            "admission_p99_ms": worst_p99, "baseline_p99_ms": baseline.percentile(0.99),
            "p99_ratio_to_baseline": worst_p99 / baseline.percentile(0.99),
            "goal_p99_ms": GOAL_P99_MS, "goal_met": worst_p99 <= GOAL_P99_MS, "errors": errors,
        })
    );
    if errors > 0 {
        bail!("{errors} request(s) failed or were answered wrongly");
    }
    Ok(())
}

async fn offer_warmup(client: &reqwest::Client, https: &str) {
    for _ in 0..50 {
        let _ = client.get(format!("{https}/healthz")).send().await;
    }
}
