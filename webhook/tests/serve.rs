//! The webhook binary serves TLS with the given certificate, reports health and metrics on its
//! plain port, picks up a rotated certificate, and stops cleanly on SIGTERM.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kuvryn_sync_certs::{CertRequest, generate};

struct Webhook {
    child: Child,
    https: String,
    metrics: String,
    receivers: String,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path) -> Webhook {
    start_with(dir, &[])
}

fn start_with(dir: &Path, extra: &[&str]) -> Webhook {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kuvryn-sync-webhook"))
        .args(["--listen", "127.0.0.1:0", "--receiver-listen", "127.0.0.1:0"])
        .args(["--metrics-bind-address", "127.0.0.1:0"])
        .arg("--tls-cert-file")
        .arg(dir.join("tls.crt"))
        .arg("--tls-key-file")
        .arg(dir.join("tls.key"))
        .args(["--cert-check-interval", "100ms"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start webhook");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read ready line");
    // "ready https://ADMISSION metrics http://ADDR receivers https://RECEIVERS"
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"ready"), "unexpected first line {line:?}");
    assert_eq!(words.get(4), Some(&"receivers"), "unexpected first line {line:?}");
    Webhook {
        child,
        https: words[1].to_owned(),
        metrics: words[3].to_owned(),
        receivers: words[5].to_owned(),
    }
}

fn client_trusting(ca_pem: &str) -> reqwest::Client {
    client_with(ca_pem, None)
}

/// A client trusting `ca_pem`, presenting `identity` (certificate PEM, key PEM) if given.
fn client_with(ca_pem: &str, identity: Option<(&str, &str)>) -> reqwest::Client {
    kuvryn_sync_runtime::tls::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
        roots.add(cert.expect("pem")).expect("add root");
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let tls = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain: Vec<_> =
                rustls_pemfile::certs(&mut cert.as_bytes()).map(|c| c.expect("pem")).collect();
            let key = rustls_pemfile::private_key(&mut key.as_bytes()).expect("pem").expect("key");
            builder.with_client_auth_cert(chain, key).expect("client identity")
        }
    };
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client")
}

fn certs(dir: &Path) -> String {
    let request = CertRequest {
        dns_names: vec!["localhost".into()],
        ip_addresses: vec!["127.0.0.1".parse().expect("ip")],
        validity_days: 1,
    };
    let certs = generate(&request).expect("certs");
    certs.write_to(dir).expect("write");
    certs.ca_cert_pem
}

#[tokio::test]
async fn serves_tls_health_and_metrics_and_reloads_a_rotated_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first_ca = certs(dir.path());
    let webhook = start(dir.path());

    let first = client_trusting(&first_ca);
    let health = first.get(format!("{}/healthz", webhook.https)).send().await.expect("https");
    assert_eq!(health.status(), 200);
    let plain = reqwest::Client::new();
    let ready = plain.get(format!("{}/readyz", webhook.metrics)).send().await.expect("readyz");
    assert_eq!(ready.status(), 200);
    let metrics = plain.get(format!("{}/metrics", webhook.metrics)).send().await.expect("metrics");
    assert_eq!(metrics.status(), 200);
    assert!(metrics.text().await.expect("body").ends_with("# EOF\n"));

    // Rotate to a certificate from a new CA: the server must pick it up without a restart.
    let second_ca = certs(dir.path());
    let second = client_trusting(&second_ca);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if second.get(format!("{}/healthz", webhook.https)).send().await.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "rotated certificate not served within 10s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        client_trusting(&first_ca).get(format!("{}/healthz", webhook.https)).send().await.is_err(),
        "the old CA must no longer verify the served certificate"
    );
}

/// A CA (PEM) and a client certificate and key it signed, as for the API server.
fn client_identity() -> (String, String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair,
    };
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, "front-proxy-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("key")).expect("ca");
    let mut client = CertificateParams::default();
    client.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().expect("key");
    let cert = client.signed_by(&key, &ca).expect("client certificate");
    (ca.pem(), cert.pem(), key.serialize_pem())
}

#[tokio::test]
async fn the_admission_listener_can_require_a_client_certificate_of_a_given_ca() {
    let dir = tempfile::tempdir().expect("tempdir");
    let serving_ca = certs(dir.path());
    let (client_ca, cert, key) = client_identity();
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, &client_ca).expect("write CA");
    let webhook =
        start_with(dir.path(), &["--admission-client-ca", ca_file.to_str().expect("path")]);

    let with_cert = client_with(&serving_ca, Some((&cert, &key)));
    let health = with_cert.get(format!("{}/healthz", webhook.https)).send().await;
    assert_eq!(health.expect("a verified client is served").status(), 200);
    let anonymous = client_trusting(&serving_ca);
    assert!(
        anonymous.get(format!("{}/healthz", webhook.https)).send().await.is_err(),
        "admission without a client certificate must fail the handshake"
    );
    // A certificate from another CA is refused too.
    let (_, other_cert, other_key) = client_identity();
    let other = client_with(&serving_ca, Some((&other_cert, &other_key)));
    assert!(other.get(format!("{}/healthz", webhook.https)).send().await.is_err());
    // The receivers' listener asks for none: Git hosts have no client certificate.
    let receivers = anonymous.get(format!("{}/healthz", webhook.receivers)).send().await;
    assert_eq!(receivers.expect("receivers without a client certificate").status(), 200);
}

#[test]
fn an_unreadable_client_ca_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    certs(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_kuvryn-sync-webhook"))
        .args(["--listen", "127.0.0.1:0", "--receiver-listen", "127.0.0.1:0"])
        .args(["--metrics-bind-address", "127.0.0.1:0"])
        .arg("--tls-cert-file")
        .arg(dir.path().join("tls.crt"))
        .arg("--tls-key-file")
        .arg(dir.path().join("tls.key"))
        .arg("--admission-client-ca")
        .arg(dir.path().join("no-such-ca.crt"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--admission-client-ca"), "{stderr}");
    assert!(stderr.contains("no-such-ca.crt"), "{stderr}");
}

#[test]
fn zero_limits_are_refused_naming_the_flag() {
    for (flag, value) in [
        ("--max-connections", "0"),
        ("--max-in-flight", "0"),
        ("--request-timeout", "0s"),
        ("--header-read-timeout", "0s"),
        ("--idle-timeout", "0s"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kuvryn-sync-webhook"))
            .args([flag, value])
            .output()
            .expect("run");
        assert!(!out.status.success(), "{flag} {value}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
    }
}

#[test]
fn stops_with_exit_code_zero_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    certs(dir.path());
    let mut webhook = start(dir.path());
    let pid = nix::unistd::Pid::from_raw(i32::try_from(webhook.child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signal");
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = webhook.child.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "webhook did not stop within 15s of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status}");
}

#[test]
fn a_missing_certificate_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_kuvryn-sync-webhook"))
        .args(["--listen", "127.0.0.1:0", "--receiver-listen", "127.0.0.1:0"])
        .args(["--metrics-bind-address", "127.0.0.1:0"])
        .arg("--tls-cert-file")
        .arg(dir.path().join("missing.crt"))
        .arg("--tls-key-file")
        .arg(dir.path().join("missing.key"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot load the serving certificate"), "{stderr}");
    assert!(stderr.contains("missing.crt"), "{stderr}");
}
