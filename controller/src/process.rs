//! One run of the controller process, in named steps: serve `/healthz`, `/readyz` (ready once
//! every Kuvryn Sync CRD is served) and `/metrics`; connect to the API server; then lead (or
//! claim shards) and run the reconcilers until told to stop.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kuvryn_sync_api::{CONTROLLER_NAME, crds};
use kuvryn_sync_apply::clients::{RequestObserver, observed_client};
use kuvryn_sync_runtime::metrics::ControllerMetrics;
use kuvryn_sync_runtime::ops::{self, Readiness};
use kuvryn_sync_runtime::tls;
use kuvryn_sync_source::git::GitCache;
use prometheus_client::registry::Registry;

use crate::args::Args;
use crate::engines::{prepare_render_sandbox, registry_client};
use crate::leadership::{self, Sharding};
use crate::metrics;
use crate::reconcilers::{GaugeWriters, Parts};

/// Run the controller with `args` until `stop` resolves (Ok) or it fails. `config` is where the
/// API server is (the binary infers it from the in-cluster config or `KUBECONFIG`); it is
/// awaited once the ops server listens, so `/healthz` answers while the API server is found.
/// Logging is the caller's (the binary sets it up from `--log-format` and `--log-level`).
pub async fn run(
    args: Args,
    stop: impl std::future::Future<Output = ()>,
    config: impl std::future::Future<Output = anyhow::Result<kube::Config>>,
) -> anyhow::Result<()> {
    tls::install_crypto_provider();
    let sharding = leadership::sharding(&args)?;
    let (ops, gauges) = Ops::start(&args, &sharding).await?;
    let config = config.await?;
    let parts = connect(args, config, &ops, gauges)?;
    let identity = std::env::var("POD_NAME")
        .unwrap_or_else(|_| format!("{CONTROLLER_NAME}-{}", std::process::id()));
    let outcome = match sharding {
        Sharding::Automatic { shards } => {
            leadership::run_automatic(&parts, shards, &identity, stop).await
        }
        Sharding::Leader { lease, scope } => {
            leadership::run_leader(&parts, &lease, scope, &identity, stop).await
        }
    };
    ops.stop().await?;
    outcome?;
    tracing::info!("controller stopped");
    Ok(())
}

/// The ops server (health, readiness, metrics) and what it reports on.
struct Ops {
    stop: tokio_util::sync::CancellationToken,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    metrics: ControllerMetrics,
    readiness: Readiness,
}

impl Ops {
    /// Register the metrics, listen on `--metrics-bind-address`, prepare the render sandbox and
    /// serve. Also the writers of the state gauges' stores, for the reconcilers to fill.
    async fn start(args: &Args, sharding: &Sharding) -> anyhow::Result<(Self, GaugeWriters)> {
        let mut registry = Registry::default();
        let metrics = ControllerMetrics::register(&mut registry);
        let (app_states, app_state_writer) = kube::runtime::reflector::store();
        let (repo_states, repo_state_writer) = kube::runtime::reflector::store();
        registry.register_collector(Box::new(metrics::StateGauges {
            applications: app_states,
            repositories: repo_states,
        }));
        let readiness = Readiness::default();
        let (listener, ops_addr) = ops::bind(args.metrics_bind_address)
            .await
            .with_context(|| format!("cannot listen on {}", args.metrics_bind_address))?;
        tracing::info!(%ops_addr, namespace = %args.leader_election_namespace,
            cache_dir = %args.cache_dir.display(), ?sharding, "controller starting");
        prepare_render_sandbox(args)?;
        let stop = tokio_util::sync::CancellationToken::new();
        let server = tokio::spawn(ops::serve(
            listener,
            ops::ops_router(registry, readiness.clone()),
            stop.clone().cancelled_owned(),
        ));
        let ops = Ops { stop, server, metrics, readiness };
        Ok((ops, (app_state_writer, repo_state_writer)))
    }

    /// Stop serving and wait for the server to end.
    async fn stop(self) -> anyhow::Result<()> {
        self.stop.cancel();
        self.server.await.context("ops server task")?.context("ops server")?;
        Ok(())
    }
}

/// The client (counting its requests), the Git cache and the registry client; starts marking
/// the controller ready once the CRDs are served.
fn connect(
    args: Args,
    config: kube::Config,
    ops: &Ops,
    gauges: GaugeWriters,
) -> anyhow::Result<Parts> {
    let count_request: RequestObserver = {
        let metrics = ops.metrics.clone();
        Arc::new(move |method: &http::Method| metrics.count_api_request(method.as_str()))
    };
    let client = observed_client(config.clone(), Some(&count_request))
        .context("cannot build a Kubernetes client from the in-cluster config or KUBECONFIG")?;
    let cache = Arc::new(
        GitCache::new(args.cache_dir.join("git"), args.git_cache_max_bytes)
            .with_context(|| {
                format!("cannot use the Git cache under {}", args.cache_dir.display())
            })?
            .with_limits(kuvryn_sync_core::checkout::CheckoutLimits {
                max_files: args.checkout_max_files,
                max_total_bytes: args.checkout_max_bytes,
                max_file_bytes: args.checkout_max_file_bytes,
                max_depth: args.checkout_max_depth,
            }),
    );
    let registry = registry_client(&args)?;
    tokio::spawn(wait_for_crds(client.clone(), ops.readiness.clone()));
    let recorder = Arc::new(kuvryn_sync_runtime::events::EventRecorder::controller(&client));
    Ok(Parts {
        recorder,
        args,
        client,
        config,
        count_request,
        cache,
        registry,
        metrics: ops.metrics.clone(),
        gauges: std::sync::Mutex::new(Some(gauges)),
    })
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

/// The Kuvryn Sync kinds (from the CRDs this build defines) the API server does not serve.
async fn missing_kinds(client: &kube::Client) -> Result<Vec<String>, kube::Error> {
    let probe = ListParams::default().limit(1);
    let mut missing = Vec::new();
    for crd in crds() {
        let version = &crd.spec.versions[0].name;
        let resource = ApiResource {
            group: crd.spec.group.clone(),
            version: version.clone(),
            api_version: format!("{}/{version}", crd.spec.group),
            kind: crd.spec.names.kind.clone(),
            plural: crd.spec.names.plural.clone(),
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        match api.list_metadata(&probe).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => missing.push(resource.plural),
            Err(err) => return Err(err),
        }
    }
    Ok(missing)
}
