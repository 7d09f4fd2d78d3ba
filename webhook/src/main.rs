//! `kuvryn-sync-webhook`: the TLS server for admission (HealthCheck validation, Application
//! approval and rollback audit) and for Git push and ImagePolicy receivers.
//!
//! Handlers only parse and wrap; decisions live in `kuvryn-sync-core`. Two HTTPS listeners:
//! `--listen` serves admission (only the API server needs to reach it; `--admission-client-ca`
//! makes it require the API server's client certificate) and `--receiver-listen` serves the
//! receivers (what Git hosts and registries reach, possibly from the internet); each serves the
//! route table of `kuvryn_sync_webhook::routes` for its listener, and `/healthz`. Both serve TLS
//! with certificate rotation (the files are re-read when they change, as cert-manager renews
//! them). `/healthz`, `/readyz`, `/metrics` are also on a plain-HTTP port.
//!
//! Each listener has its own limits, so that hostile clients cannot exhaust the process: a cap
//! on open connections (over it, accepted and closed: `connections`), a TLS handshake and header
//! read timeout, an idle timeout, a deadline for the whole request, body included, a cap on
//! requests in flight (503) and per-endpoint body limits (413) (`routes`).

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use clap::Parser;
use kuvryn_sync_runtime::logging::{self, LogFormat};
use kuvryn_sync_runtime::ops::{self, Readiness};
use kuvryn_sync_runtime::{flags, signals, tls};
use kuvryn_sync_webhook::connections::LimitedAcceptor;
use kuvryn_sync_webhook::metrics::WebhookMetrics;
use kuvryn_sync_webhook::routes::{self, AppState, Listener, RequestLimits};
use prometheus_client::registry::Registry;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Kuvryn Sync admission webhook and push receivers.
#[derive(Debug, Parser)]
#[command(name = "kuvryn-sync-webhook", version, about, long_about = None)]
struct Args {
    /// Address of the admission HTTPS listener (what the API server calls).
    #[arg(long, default_value = "0.0.0.0:9443", value_name = "ADDR")]
    listen: SocketAddr,
    /// Address of the receivers' HTTPS listener (Git push and registry hooks).
    #[arg(long, default_value = "0.0.0.0:9444", value_name = "ADDR")]
    receiver_listen: SocketAddr,
    /// PEM serving certificate (chain); re-read when it changes.
    #[arg(long, default_value = "/tls/tls.crt", value_name = "FILE")]
    tls_cert_file: PathBuf,
    /// PEM private key of the serving certificate.
    #[arg(long, default_value = "/tls/tls.key", value_name = "FILE")]
    tls_key_file: PathBuf,
    /// PEM CA bundle: when set, the admission listener requires a client certificate verified
    /// against it (the API server's, from its admission control configuration).
    #[arg(long, value_name = "FILE")]
    admission_client_ca: Option<PathBuf>,
    /// Address serving /healthz, /readyz and /metrics over plain HTTP.
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
    metrics_bind_address: SocketAddr,
    /// How often the certificate files are checked for changes.
    #[arg(long, default_value = "30s", value_parser = flags::duration, value_name = "DURATION")]
    cert_check_interval: Duration,
    /// Time for a connection's TLS handshake, and for each request's headers (HTTP/1.1: also how
    /// long a keep-alive connection may wait for its next request).
    #[arg(long, default_value = "10s", value_parser = positive_duration, value_name = "DURATION")]
    header_read_timeout: Duration,
    /// Time for a whole request, body included, and its answer (408 past it; the connection is
    /// then closed).
    #[arg(long, default_value = "10s", value_parser = positive_duration, value_name = "DURATION")]
    request_timeout: Duration,
    /// A connection without a byte read or written for this long is closed.
    #[arg(long, default_value = "60s", value_parser = positive_duration, value_name = "DURATION")]
    idle_timeout: Duration,
    /// Open connections per listener; more are accepted and closed at once.
    #[arg(long, default_value = "1024", value_name = "N")]
    max_connections: NonZeroUsize,
    /// Requests handled at once per listener; more are answered 503.
    #[arg(long, default_value = "512", value_name = "N")]
    max_in_flight: NonZeroUsize,
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Log level (error, warn, info, debug, trace) or tracing directives such as
    /// `info,kube=debug`; RUST_LOG, when set, wins.
    #[arg(long, value_parser = logging::level, value_name = "LEVEL")]
    log_level: Option<String>,
}

/// A duration flag that must be more than zero (a zero timeout would refuse every request).
fn positive_duration(text: &str) -> Result<Duration, String> {
    match flags::duration(text)? {
        zero if zero.is_zero() => Err("must be more than zero, such as 10s".to_owned()),
        duration => Ok(duration),
    }
}

/// Where the TLS configuration of a listener comes from.
#[derive(Clone, Debug)]
struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// The rustls configuration (HTTP/2 and HTTP/1.1 by ALPN).
    fn server_config(&self) -> anyhow::Result<Arc<rustls::ServerConfig>> {
        let serving = || {
            format!(
                "cannot load the serving certificate {} and key {}",
                self.cert.display(),
                self.key.display()
            )
        };
        let chain = CertificateDer::pem_file_iter(&self.cert)
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .with_context(serving)?;
        let key = PrivateKeyDer::from_pem_file(&self.key).with_context(serving)?;
        let builder = rustls::ServerConfig::builder();
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                let certs = CertificateDer::pem_file_iter(ca)
                    .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                    .with_context(|| {
                        format!("--admission-client-ca: cannot read {}", ca.display())
                    })?;
                for cert in certs {
                    roots.add(cert).with_context(|| {
                        format!("--admission-client-ca: {} holds an unusable CA", ca.display())
                    })?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
                    .build()
                    .with_context(|| {
                        format!("--admission-client-ca: {} holds no usable CA", ca.display())
                    })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .with_context(|| format!("{}: they do not form a usable pair", serving()))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    logging::init(args.log_format, args.log_level.as_deref());
    tls::install_crypto_provider();

    let admission_tls = TlsFiles {
        cert: args.tls_cert_file.clone(),
        key: args.tls_key_file.clone(),
        client_ca: args.admission_client_ca.clone(),
    };
    let receiver_tls = TlsFiles { client_ca: None, ..admission_tls.clone() };
    let load = |files: &TlsFiles| files.server_config().map(RustlsConfig::from_config);
    let tls_configs =
        [(load(&admission_tls)?, admission_tls), (load(&receiver_tls)?, receiver_tls)];
    let bind = |addr: SocketAddr| -> anyhow::Result<std::net::TcpListener> {
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("cannot listen on {addr}"))?;
        listener.set_nonblocking(true)?;
        Ok(listener)
    };
    let admission_listener = bind(args.listen)?;
    let receiver_listener = bind(args.receiver_listen)?;
    let admission_addr = admission_listener.local_addr()?;
    let receiver_addr = receiver_listener.local_addr()?;

    let stop = signals::shutdown_signal().context("cannot install signal handlers")?;
    let ops_stop = tokio_util::sync::CancellationToken::new();
    let mut registry = Registry::default();
    let metrics = WebhookMetrics::register(&mut registry);
    let state = AppState { client: api_client().await, metrics };
    let readiness = Readiness::default();
    let (ops_listener, ops_addr) = ops::bind(args.metrics_bind_address)
        .await
        .with_context(|| format!("cannot listen on {}", args.metrics_bind_address))?;
    let ops_server = tokio::spawn(ops::serve(
        ops_listener,
        ops::ops_router(registry, readiness.clone()),
        ops_stop.clone().cancelled_owned(),
    ));

    tokio::spawn(watch_certificates(tls_configs.to_vec(), args.cert_check_interval));

    let limits = RequestLimits {
        request_timeout: args.request_timeout,
        max_in_flight: args.max_in_flight.get(),
    };
    let handle = axum_server::Handle::new();
    let listeners = [
        (Listener::Admission, admission_listener, tls_configs[0].0.clone()),
        (Listener::Receivers, receiver_listener, tls_configs[1].0.clone()),
    ];
    let mut servers = Vec::new();
    for (listener, socket, tls) in listeners {
        let acceptor = RustlsAcceptor::new(tls)
            .handshake_timeout(args.header_read_timeout)
            .acceptor(LimitedAcceptor::new(args.max_connections.get(), args.idle_timeout));
        let mut server = axum_server::from_tcp(socket)?
            .acceptor(acceptor)
            .first_request_timeout(args.header_read_timeout)
            .handle(handle.clone());
        let http = server.http_builder();
        http.http1()
            .header_read_timeout(args.header_read_timeout)
            // Headers and read buffer per connection: 64 KiB, not hyper's 400 KiB.
            .max_buf_size(64 * 1024);
        http.http2().max_concurrent_streams(100).max_header_list_size(64 * 1024);
        let router = routes::router(listener, state.clone(), limits);
        servers.push(tokio::spawn(server.serve(router.into_make_service())));
    }
    readiness.set(true);
    tracing::info!(%admission_addr, %receiver_addr, %ops_addr, "webhook serving");
    // One line on stdout for whoever started us (tests, the demo) to learn the real ports.
    println!(
        "ready https://{admission_addr} metrics http://{ops_addr} receivers https://{receiver_addr}"
    );

    stop.await;
    readiness.set(false);
    ops_stop.cancel();
    handle.graceful_shutdown(Some(Duration::from_secs(10)));
    for server in servers {
        server.await.context("https server task")?.context("https server")?;
    }
    ops_server.await.context("ops server task")?.context("ops server")?;
    tracing::info!("webhook stopped");
    Ok(())
}

/// The webhook's API client (in-cluster, or `KUBECONFIG`). Without one the webhook still serves:
/// HealthCheck validation needs no API access, and an Application request that must read a
/// Revision is denied with a message that points here.
async fn api_client() -> Option<kube::Client> {
    match kube::Client::try_default().await {
        Ok(client) => Some(client),
        Err(err) => {
            tracing::warn!(error = %err, "no API server access: approvals and rollback requests \
                will be denied until the webhook can read Revisions");
            None
        }
    }
}

/// Reload the serving certificate of every listener when either file's modification time
/// changes.
async fn watch_certificates(listeners: Vec<(RustlsConfig, TlsFiles)>, every: Duration) {
    let Some((_, files)) = listeners.first() else { return };
    let (cert, key) = (files.cert.clone(), files.key.clone());
    let stamp = |cert: &Path, key: &Path| -> Option<(SystemTime, SystemTime)> {
        Some((
            std::fs::metadata(cert).ok()?.modified().ok()?,
            std::fs::metadata(key).ok()?.modified().ok()?,
        ))
    };
    let mut last = stamp(&cert, &key);
    let mut ticker = tokio::time::interval(every);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let now = stamp(&cert, &key);
        if now.is_none() || now == last {
            continue;
        }
        let configs: Result<Vec<_>, _> =
            listeners.iter().map(|(_, files)| files.server_config()).collect();
        match configs {
            Ok(configs) => {
                for ((tls, _), config) in listeners.iter().zip(configs) {
                    tls.reload_from_config(config);
                }
                tracing::info!(cert = %cert.display(), "serving certificate reloaded");
                last = now;
            }
            // A half-written pair is retried on the next tick; the old certificate stays.
            Err(err) => {
                tracing::warn!(err = %format!("{err:#}"), "cannot reload the serving certificate yet")
            }
        }
    }
}
