//! The webhook binary under hostile clients: hundreds of TLS connections to the admission
//! listener that announce a large body and trickle it in a byte at a time. Meanwhile `/healthz`
//! and real AdmissionReviews are answered within a second each, the process's peak RSS stays
//! under a bound, and every slow connection is answered 408 and closed by the server after the
//! request timeout. The listeners are separate (an admission path on the receivers' listener is
//! 404 and the other way round), and a replayed signed GitHub push, with its delivery id or with
//! a made-up one, is answered `duplicate` and does not request another reconcile.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kuvryn_sync_api::{Repository, keys};
use kuvryn_sync_core::receiver::github_signature;
use kuvryn_sync_tests::cluster::TestCluster;
use kuvryn_sync_tests::webhook::WebhookProcess;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Slow connections opened at once.
const SLOW_CONNECTIONS: usize = 300;
/// The request timeout given to the webhook (the default is 10 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// What each slow request announces.
const ANNOUNCED_BYTES: usize = 3_000_000;
/// The bound on the webhook's peak resident set (VmHWM).
const PEAK_RSS_BOUND_KIB: u64 = 150 * 1024;
/// How fast legitimate requests must be answered meanwhile.
const PROMPT: Duration = Duration::from_secs(1);

const TOKEN: &str = "hostile-e2e-hook-token";
const C1: &str = "fd489864e7642b48eaad6e3f155c10e46810ec72";

fn tls_config(ca_pem: &str) -> Result<Arc<rustls::ClientConfig>> {
    let mut config = kuvryn_sync_tests::tls_trusting(ca_pem)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn http_client(ca_pem: &str) -> Result<reqwest::Client> {
    let tls = (*tls_config(ca_pem)?).clone();
    Ok(reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(Duration::from_secs(10))
        .build()?)
}

/// How a slow connection ended.
#[derive(Debug)]
struct SlowEnd {
    /// From the headers sent to the server's end of stream.
    open_for: Duration,
    /// What the server wrote before closing.
    answer: String,
}

/// Open a TLS connection to `addr`, send headers announcing [`ANNOUNCED_BYTES`], and trickle a
/// byte every 700 ms until the server closes the connection (or `give_up` passes).
async fn slow_request(
    addr: std::net::SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    headers_sent: tokio::sync::mpsc::Sender<()>,
    give_up: Instant,
) -> Result<SlowEnd> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost")?.to_owned();
    let stream = tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await?;
    let (mut read, mut write) = tokio::io::split(stream);
    let head = format!(
        "POST /validate/healthchecks HTTP/1.1\r\nHost: localhost\r\nContent-Type: \
         application/json\r\nContent-Length: {ANNOUNCED_BYTES}\r\n\r\n{{"
    );
    write.write_all(head.as_bytes()).await?;
    write.flush().await?;
    let sent = Instant::now();
    headers_sent.send(()).await.ok();
    let reader = async {
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
        answer
    };
    let writer = async {
        let mut tick = tokio::time::interval(Duration::from_millis(700));
        tick.tick().await;
        while Instant::now() < give_up {
            tick.tick().await;
            if write.write_all(b" ").await.is_err() || write.flush().await.is_err() {
                break;
            }
        }
    };
    tokio::pin!(writer);
    let answer = tokio::select! {
        answer = reader => answer,
        _ = &mut writer => bail!("the server kept a slow connection open past the deadline"),
    };
    Ok(SlowEnd { open_for: sent.elapsed(), answer: String::from_utf8_lossy(&answer).into_owned() })
}

fn review(object: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "5d7f0c4e-0000-4000-8000-00000000a11c",
            "kind": {"group": "sync.kuvryn.io", "version": "v1alpha1", "kind": "HealthCheck"},
            "resource": {"group": "sync.kuvryn.io", "version": "v1alpha1", "resource": "healthchecks"},
            "name": "rollout", "operation": "CREATE",
            "userInfo": {"username": "alice"}, "object": object, "dryRun": false,
        }
    })
}

fn health_check(state: &str) -> Value {
    json!({"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "HealthCheck",
    "metadata": {"name": "rollout"},
    "spec": {"group": "argoproj.io", "kind": "Rollout", "rules": [
        {"expression": "has(object.status) && object.status.phase == 'Healthy'", "state": state},
    ]}})
}

/// `allowed` of a HealthCheck validation, checked to answer within [`PROMPT`] with the uid.
async fn validate(client: &reqwest::Client, https: &str, state: &str) -> Result<bool> {
    let started = Instant::now();
    let response = client
        .post(format!("{https}/validate/healthchecks"))
        .json(&review(health_check(state)))
        .send()
        .await?;
    let status = response.status();
    let answer: Value = response.json().await?;
    let took = started.elapsed();
    assert_eq!(status, 200, "{answer}");
    assert!(took < PROMPT, "an AdmissionReview took {took:?} under the slow clients");
    assert_eq!(answer["response"]["uid"], "5d7f0c4e-0000-4000-8000-00000000a11c", "{answer}");
    answer["response"]["allowed"].as_bool().context("allowed")
}

fn peak_rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).context("VmHWM")?;
    Ok(line.split_whitespace().nth(1).context("VmHWM value")?.parse()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_do_not_starve_admission_and_are_cut_off_at_the_request_timeout() -> Result<()>
{
    let cluster = TestCluster::start().await?;
    let timeout = format!("{}s", REQUEST_TIMEOUT.as_secs());
    let webhook = WebhookProcess::start_with_args(&cluster, &["--request-timeout", &timeout])?;
    let client = http_client(&webhook.ca_pem)?;
    let tls = tls_config(&webhook.ca_pem)?;
    let addr: std::net::SocketAddr = webhook.https.trim_start_matches("https://").parse()?;
    let rss_before = peak_rss_kib(webhook.pid())?;

    let give_up = Instant::now() + Duration::from_secs(60);
    let (sent_tx, mut sent_rx) = tokio::sync::mpsc::channel(SLOW_CONNECTIONS);
    let opening = Instant::now();
    let slow: Vec<_> = (0..SLOW_CONNECTIONS)
        .map(|_| tokio::spawn(slow_request(addr, tls.clone(), sent_tx.clone(), give_up)))
        .collect();
    drop(sent_tx);
    for opened in 0..SLOW_CONNECTIONS {
        let sent = tokio::time::timeout(Duration::from_secs(30), sent_rx.recv()).await;
        if !matches!(sent, Ok(Some(()))) {
            bail!("only {opened} of {SLOW_CONNECTIONS} slow connections sent their headers");
        }
    }
    let opened_in = opening.elapsed();
    assert!(
        opened_in < REQUEST_TIMEOUT,
        "opening took {opened_in:?}: the first slow connections may already be closed"
    );

    // All slow requests are in flight: the listener still answers promptly.
    let started = Instant::now();
    let health = client.get(format!("{}/healthz", webhook.https)).send().await?;
    let health_took = started.elapsed();
    assert_eq!(health.status(), 200);
    assert!(health_took < PROMPT, "/healthz took {health_took:?} under the slow clients");
    assert!(validate(&client, &webhook.https, "Healthy").await?, "a valid HealthCheck is allowed");
    assert!(
        !validate(&client, &webhook.https, "Sideways").await?,
        "an invalid HealthCheck is denied"
    );
    let still_open = slow.iter().filter(|task| !task.is_finished()).count();
    assert_eq!(still_open, SLOW_CONNECTIONS, "the checks ran while every slow request was open");

    // Every slow connection is answered 408 and closed after the request timeout, not before.
    let mut longest = Duration::ZERO;
    for task in slow {
        let end = task.await??;
        assert!(end.answer.starts_with("HTTP/1.1 408"), "answer {:?}", end.answer);
        assert!(
            end.open_for >= REQUEST_TIMEOUT - Duration::from_millis(100),
            "closed after {:?}, before the request timeout",
            end.open_for
        );
        longest = longest.max(end.open_for);
    }
    let peak = peak_rss_kib(webhook.pid())?;
    eprintln!(
        "{SLOW_CONNECTIONS} slow connections opened in {opened_in:?}; /healthz in {health_took:?}; \
         slowest close after {longest:?}; peak RSS {} KiB before, {peak} KiB after",
        rss_before
    );
    assert!(longest < REQUEST_TIMEOUT + Duration::from_secs(5), "slowest close {longest:?}");
    assert!(peak < PEAK_RSS_BOUND_KIB, "peak RSS {peak} KiB over {PEAK_RSS_BOUND_KIB} KiB");

    // After them, the listener is as before.
    assert!(validate(&client, &webhook.https, "Healthy").await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_are_separate_and_a_replayed_push_is_ignored() -> Result<()> {
    let cluster = TestCluster::start().await?;
    let ns = cluster.namespace("replay").await?;
    let webhook = WebhookProcess::start(&cluster)?;
    let client = http_client(&webhook.ca_pem)?;

    // Each listener serves its own paths only; /healthz is on both.
    let hook_path = format!("/hooks/repositories/{ns}/platform");
    for (base, path, expected) in [
        (&webhook.receivers, "/validate/healthchecks", 404),
        (&webhook.receivers, "/admit/applications", 404),
        (&webhook.https, hook_path.as_str(), 404),
        (&webhook.https, "/hooks/imagepolicies/default/x", 404),
        (&webhook.receivers, hook_path.as_str(), 401),
    ] {
        let body = review(health_check("Healthy")).to_string();
        let status = client.post(format!("{base}{path}")).body(body).send().await?.status();
        assert_eq!(status.as_u16(), expected, "POST {base}{path}");
    }
    for base in [&webhook.https, &webhook.receivers] {
        let status = client.get(format!("{base}/healthz")).send().await?.status();
        assert_eq!(status, 200, "{base}/healthz");
    }

    // A Repository with a push hook.
    let mut secret = Secret::default();
    secret.metadata.name = Some("platform-hook".into());
    secret.data = Some([("token".to_owned(), ByteString(TOKEN.as_bytes().to_vec()))].into());
    Api::<Secret>::namespaced(cluster.client(), &ns)
        .create(&PostParams::default(), &secret)
        .await?;
    let repository: Repository = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
        "metadata": {"name": "platform"},
        "spec": {"git": {"url": "https://git.example.invalid/platform.git", "revision": "main"},
                 "webhook": {"secretRef": {"name": "platform-hook"}}},
    }))?;
    let repositories = Api::<Repository>::namespaced(cluster.client(), &ns);
    repositories.create(&PostParams::default(), &repository).await?;
    let requested_at = || async {
        let repository = repositories.get("platform").await?;
        anyhow::Ok(
            repository
                .metadata
                .annotations
                .and_then(|mut a| a.remove(keys::RECONCILE_REQUESTED_AT)),
        )
    };

    let body = json!({"ref": "refs/heads/main", "before": "0".repeat(40), "after": C1,
                      "repository": {"clone_url": "https://git.example.invalid/platform.git"}})
    .to_string();
    let signature = github_signature(TOKEN.as_bytes(), body.as_bytes());
    let push = |delivery: &'static str| {
        client
            .post(format!("{}{hook_path}", webhook.receivers))
            .header("content-type", "application/json")
            .header("x-github-event", "push")
            .header("x-github-delivery", delivery)
            .header("x-hub-signature-256", &signature)
            .body(body.clone())
            .send()
    };
    let first = push("9b2f6c1a-0001-11ef-8000-000000000001").await?;
    assert_eq!(first.status(), 202, "{}", first.text().await?);
    let stamped = requested_at().await?.context("the first push requests a reconcile")?;

    // The same delivery again, and the same signed body under a made-up delivery id.
    for delivery in ["9b2f6c1a-0001-11ef-8000-000000000001", "00000000-replayed-with-a-new-id"] {
        let again = push(delivery).await?;
        let status = again.status();
        let answer: Value = again.json().await?;
        assert_eq!(status, 200, "{delivery}: {answer}");
        assert_eq!(answer["outcome"], "duplicate", "{delivery}: {answer}");
        assert_eq!(
            requested_at().await?.as_deref(),
            Some(stamped.as_str()),
            "{delivery}: a replay requested another reconcile"
        );
    }

    // A new push (another commit) is acted on.
    let next = body.replace(C1, "0123456789abcdef0123456789abcdef01234567");
    let response = client
        .post(format!("{}{hook_path}", webhook.receivers))
        .header("content-type", "application/json")
        .header("x-github-event", "push")
        .header("x-github-delivery", "9b2f6c1a-0002-11ef-8000-000000000002")
        .header("x-hub-signature-256", github_signature(TOKEN.as_bytes(), next.as_bytes()))
        .body(next)
        .send()
        .await?;
    assert_eq!(response.status(), 202);
    assert_ne!(requested_at().await?.as_deref(), Some(stamped.as_str()), "a new push is acted on");
    Ok(())
}
