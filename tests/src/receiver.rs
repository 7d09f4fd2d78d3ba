//! A notification receiver for end-to-end tests: a real HTTPS server (axum over rustls, with a
//! serving certificate from a fresh test CA made by `kuvryn_sync_certs`) on a free loopback port,
//! that records every request and answers as scripted: 200, a number of 500s first, or never.
//!
//! The controller must trust the test CA: [`Receiver::ca_bundle`] is a file with the system
//! roots and the test CA, for the controller's `SSL_CERT_FILE`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum_server::tls_rustls::RustlsConfig;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::cluster::wait_for;

/// How the receiver answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Script {
    /// 200 to every request.
    Accept,
    /// 500 to the first `n` requests, then 200.
    FailFirst(usize),
    /// Never answers (the connection stays open until the client gives up).
    Stall,
}

/// One request the receiver got.
#[derive(Clone, Debug)]
pub struct Received {
    /// The raw body.
    pub body: Bytes,
    /// `X-Kuvryn-Signature`, if sent.
    pub signature: Option<String>,
    /// The status it was answered with (`None`: not answered).
    pub answered: Option<u16>,
}

impl Received {
    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// Whether the signature is `sha256=<hex HMAC-SHA256(key, body)>`, checked in constant time.
    pub fn signed_with(&self, key: &[u8]) -> bool {
        let Some(hex_mac) = self.signature.as_deref().and_then(|s| s.strip_prefix("sha256="))
        else {
            return false;
        };
        let Ok(mac) = hex::decode(hex_mac) else { return false };
        let Ok(mut expected) = <Hmac<Sha256> as Mac>::new_from_slice(key) else { return false };
        expected.update(&self.body);
        expected.verify_slice(&mac).is_ok()
    }
}

#[derive(Debug)]
struct Shared {
    script: Script,
    received: Mutex<Vec<Received>>,
}

/// A running receiver; stops on drop.
#[derive(Debug)]
pub struct Receiver {
    /// `https://127.0.0.1:PORT/hook/<secret path>`: what the sink's Secret holds.
    pub url: String,
    shared: Arc<Shared>,
    handle: axum_server::Handle<SocketAddr>,
    dir: tempfile::TempDir,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

impl Receiver {
    /// Start a receiver answering by `script`. The process must have a rustls provider
    /// (`kuvryn_sync_runtime::tls::install_crypto_provider`).
    pub async fn start(script: Script) -> Result<Self> {
        kuvryn_sync_runtime::tls::install_crypto_provider();
        let dir = tempfile::tempdir()?;
        let certs = crate::localhost_certs()?;
        let mut bundle =
            std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
        bundle.push('\n');
        bundle.push_str(&certs.ca_cert_pem);
        std::fs::write(dir.path().join("ca-bundle.pem"), bundle)?;
        let tls = RustlsConfig::from_pem(certs.cert_pem.into_bytes(), certs.key_pem.into_bytes())
            .await
            .context("receiver TLS config")?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared { script, received: Mutex::new(Vec::new()) });
        let router = axum::Router::new()
            .route("/hook/{secret}", post(receive))
            .with_state(Arc::clone(&shared));
        let handle = axum_server::Handle::new();
        let server = axum_server::from_tcp_rustls(listener, tls)?
            .handle(handle.clone())
            .serve(router.into_make_service());
        tokio::spawn(server);
        let secret_path = format!("s{}", std::process::id() ^ u32::from(addr.port()));
        Ok(Receiver {
            url: format!("https://127.0.0.1:{}/hook/{secret_path}-tokenpath", addr.port()),
            shared,
            handle,
            dir,
        })
    }

    /// A PEM file with the system roots and this receiver's CA, for `SSL_CERT_FILE`.
    pub fn ca_bundle(&self) -> PathBuf {
        self.dir.path().join("ca-bundle.pem")
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The requests whose JSON `field` is `value`.
    pub fn with(&self, field: &str, value: &str) -> Vec<Received> {
        self.received().into_iter().filter(|r| r.json()[field] == value).collect()
    }

    /// Wait until `count` requests have arrived; returns them all.
    pub async fn wait_count(&self, count: usize, deadline: Duration) -> Result<Vec<Received>> {
        wait_for(&format!("{count} notification request(s)"), deadline, || async {
            let received = self.received();
            let observed = format!("{} received: {:?}", received.len(), received);
            Ok(((received.len() >= count).then_some(received), observed))
        })
        .await
    }
}

async fn receive(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let signature =
        headers.get("x-kuvryn-signature").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let index = {
        let mut received = shared.received.lock().unwrap_or_else(|p| p.into_inner());
        received.push(Received { body, signature, answered: None });
        received.len() - 1
    };
    let status = match shared.script {
        Script::Accept => StatusCode::OK,
        Script::FailFirst(n) if index < n => StatusCode::INTERNAL_SERVER_ERROR,
        Script::FailFirst(_) => StatusCode::OK,
        Script::Stall => std::future::pending().await,
    };
    if let Ok(mut received) = shared.received.lock() {
        received[index].answered = Some(status.as_u16());
    }
    status
}
