//! `kuvryn-sync-webhook`: the TLS server for admission (HealthCheck validation, Application
//! approval and rollback audit) and for Git push and ImagePolicy receivers.
//!
//! Handlers only parse and wrap; decisions live in `kuvryn-sync-core`. It serves TLS with
//! certificate rotation (the files are re-read when they change, as cert-manager renews them) and
//! `/healthz`, `/readyz`, `/metrics` on a plain-HTTP port. What the HTTPS listener serves is the
//! route table in `kuvryn_sync_webhook::routes` (the chart registers only admission paths that
//! table serves, and a chart test holds it to that).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use axum_server::tls_rustls::RustlsConfig;
use clap::Parser;
use kuvryn_sync_runtime::logging::{self, LogFormat};
use kuvryn_sync_runtime::ops::{self, Readiness};
use kuvryn_sync_runtime::{flags, signals, tls};
use kuvryn_sync_webhook::metrics::WebhookMetrics;
use kuvryn_sync_webhook::routes::{self, AppState};
use prometheus_client::registry::Registry;

/// Kuvryn Sync admission webhook and push receivers.
#[derive(Debug, Parser)]
#[command(name = "kuvryn-sync-webhook", version, about, long_about = None)]
struct Args {
    /// Address of the HTTPS listener (admission and receivers).
    #[arg(long, default_value = "0.0.0.0:9443", value_name = "ADDR")]
    listen: SocketAddr,
    /// PEM serving certificate (chain); re-read when it changes.
    #[arg(long, default_value = "/tls/tls.crt", value_name = "FILE")]
    tls_cert_file: PathBuf,
    /// PEM private key of the serving certificate.
    #[arg(long, default_value = "/tls/tls.key", value_name = "FILE")]
    tls_key_file: PathBuf,
    /// Address serving /healthz, /readyz and /metrics over plain HTTP.
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
    metrics_bind_address: SocketAddr,
    /// How often the certificate files are checked for changes.
    #[arg(long, default_value = "30s", value_parser = flags::duration, value_name = "DURATION")]
    cert_check_interval: Duration,
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    logging::init(args.log_format);
    tls::install_crypto_provider();

    let tls = RustlsConfig::from_pem_file(&args.tls_cert_file, &args.tls_key_file)
        .await
        .with_context(|| {
            format!(
                "cannot load the serving certificate {} and key {}",
                args.tls_cert_file.display(),
                args.tls_key_file.display()
            )
        })?;
    let listener = std::net::TcpListener::bind(args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    listener.set_nonblocking(true)?;
    let https_addr = listener.local_addr()?;

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

    tokio::spawn(watch_certificates(
        tls.clone(),
        args.tls_cert_file.clone(),
        args.tls_key_file.clone(),
        args.cert_check_interval,
    ));

    let handle = axum_server::Handle::new();
    let server = axum_server::from_tcp_rustls(listener, tls)?
        .handle(handle.clone())
        .serve(routes::router(state).into_make_service());
    let server = tokio::spawn(server);
    readiness.set(true);
    tracing::info!(%https_addr, %ops_addr, "webhook serving");
    // One line on stdout for whoever started us (tests, the demo) to learn the real ports.
    println!("ready https://{https_addr} metrics http://{ops_addr}");

    stop.await;
    readiness.set(false);
    ops_stop.cancel();
    handle.graceful_shutdown(Some(Duration::from_secs(10)));
    server.await.context("https server task")?.context("https server")?;
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

/// Reload the serving certificate when either file's modification time changes.
async fn watch_certificates(tls: RustlsConfig, cert: PathBuf, key: PathBuf, every: Duration) {
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
        match tls.reload_from_pem_file(&cert, &key).await {
            Ok(()) => {
                tracing::info!(cert = %cert.display(), "serving certificate reloaded");
                last = now;
            }
            // A half-written pair is retried on the next tick; the old certificate stays.
            Err(err) => tracing::warn!(%err, "cannot reload the serving certificate yet"),
        }
    }
}
