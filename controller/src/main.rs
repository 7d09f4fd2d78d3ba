//! `kuvryn-sync-controller`: reconciles Repositories, Applications, Revisions and ImagePolicies.
//!
//! This binary wires things together and keeps no decisions of its own: those live in the
//! `kuvryn-sync` crate. So far it connects to the cluster, checks that every Kuvryn Sync CRD is
//! served (readiness waits for it) and serves `/healthz`, `/readyz` and `/metrics`; the
//! reconcilers register here as they arrive.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use kube::api::{Api, ListParams};
use kuvryn_sync::api::{
    Application, HealthCheck, ImagePolicy, NotificationSink, Repository, Revision,
};
use kuvryn_sync::metrics::ControllerMetrics;
use kuvryn_sync::ops::{self, LogFormat, Readiness};
use prometheus_client::registry::Registry;

/// Kuvryn Sync controller.
#[derive(Debug, Parser)]
#[command(name = "kuvryn-sync-controller", version, about, long_about = None)]
struct Args {
    /// Address serving /healthz, /readyz and /metrics over plain HTTP.
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
    metrics_bind_address: SocketAddr,
    /// Namespace of the leader-election Lease (the controller's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "kuvryn-system", value_name = "NAMESPACE")]
    leader_election_namespace: String,
    /// Directory for the Git and render caches (an emptyDir in the chart).
    #[arg(long, default_value = "/var/cache/kuvryn-sync", value_name = "DIR")]
    cache_dir: PathBuf,
    /// Service account Applications without spec.serviceAccountName run as; without it they
    /// fail with ServiceAccountRequired.
    #[arg(long, value_name = "NAME")]
    default_service_account: Option<String>,
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ops::init_logging(args.log_format);
    install_crypto_provider();

    let stop = ops::shutdown_signal().context("cannot install signal handlers")?;
    let ops_stop = tokio_util::sync::CancellationToken::new();
    let mut registry = Registry::default();
    let _metrics = ControllerMetrics::register(&mut registry);
    let readiness = Readiness::default();
    let (listener, ops_addr) = ops::bind(args.metrics_bind_address)
        .await
        .with_context(|| format!("cannot listen on {}", args.metrics_bind_address))?;
    tracing::info!(%ops_addr, namespace = %args.leader_election_namespace,
        cache_dir = %args.cache_dir.display(), "controller starting");
    let ops_server = tokio::spawn(ops::serve(
        listener,
        ops::ops_router(registry, readiness.clone()),
        ops_stop.clone().cancelled_owned(),
    ));

    let client = kube::Client::try_default()
        .await
        .context("cannot build a Kubernetes client from the in-cluster config or KUBECONFIG")?;
    tokio::spawn(wait_for_crds(client, readiness));
    stop.await;
    ops_stop.cancel();
    ops_server.await.context("ops server task")?.context("ops server")?;
    tracing::info!("controller stopped");
    Ok(())
}

fn install_crypto_provider() {
    // One process-wide rustls provider (DESIGN §3): ring. Fails only if one is already set.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Mark the controller ready once every Kuvryn Sync kind is served, retrying with backoff.
async fn wait_for_crds(client: kube::Client, readiness: Readiness) {
    let mut delay = Duration::from_millis(500);
    loop {
        match missing_kinds(&client).await {
            Ok(missing) if missing.is_empty() => {
                tracing::info!("all Kuvryn Sync CRDs are served; ready");
                readiness.set(true);
                return;
            }
            Ok(missing) => {
                tracing::warn!(?missing, "CRDs not installed yet; install the chart's crds/")
            }
            Err(err) => tracing::warn!(%err, "cannot reach the API server"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

async fn missing_kinds(client: &kube::Client) -> Result<Vec<&'static str>, kube::Error> {
    let probe = ListParams::default().limit(1);
    let mut missing = Vec::new();
    macro_rules! check {
        ($kind:ty, $name:literal) => {
            match Api::<$kind>::all(client.clone()).list_metadata(&probe).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => missing.push($name),
                Err(err) => return Err(err),
            }
        };
    }
    check!(Repository, "repositories");
    check!(Application, "applications");
    check!(Revision, "revisions");
    check!(HealthCheck, "healthchecks");
    check!(NotificationSink, "notificationsinks");
    check!(ImagePolicy, "imagepolicies");
    Ok(missing)
}
