//! The controller's command line: every flag, with its default and what it does.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use kuvryn_sync_runtime::flags;
use kuvryn_sync_runtime::logging::{self, LogFormat};

/// Kuvryn Sync controller.
#[derive(Debug, Parser)]
#[command(name = "kuvryn-sync-controller", version, about, long_about = None)]
pub struct Args {
    /// Address serving /healthz, /readyz and /metrics over plain HTTP.
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
    pub metrics_bind_address: SocketAddr,
    /// Namespace of the leader-election Lease (the controller's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "kuvryn-system", value_name = "NAMESPACE")]
    pub leader_election_namespace: String,
    /// Directory for the Git and render caches (an emptyDir in the chart).
    #[arg(long, default_value = "/var/cache/kuvryn-sync", value_name = "DIR")]
    pub cache_dir: PathBuf,
    /// Service account Applications without spec.serviceAccountName run as; without it they
    /// fail with ServiceAccountRequired.
    #[arg(long, value_name = "NAME")]
    pub default_service_account: Option<String>,
    /// Poll interval of Repositories without spec.pollInterval.
    #[arg(long, default_value = "60s", value_parser = flags::duration, value_name = "DURATION")]
    pub default_poll_interval: Duration,
    /// Upper bound for one Git remote interaction (ref listing, fetch).
    #[arg(long, default_value = "60s", value_parser = flags::duration, value_name = "DURATION")]
    pub git_timeout: Duration,
    /// Largest size of the Git cache under --cache-dir; least recently used data is evicted.
    #[arg(long, default_value_t = 2 * 1024 * 1024 * 1024, value_name = "BYTES")]
    pub git_cache_max_bytes: u64,
    /// Most paths (files, directories, links) one Git checkout may hold, counted in the object
    /// database before anything is written; above it the Repository is Ready=False
    /// (SourceFailure) and its Applications keep their last state.
    #[arg(long, default_value_t = kuvryn_sync_core::checkout::DEFAULT_MAX_FILES, value_name = "N")]
    pub checkout_max_files: u64,
    /// Most bytes all files of one Git checkout may hold (sizes from the object headers).
    #[arg(long, default_value_t = kuvryn_sync_core::checkout::DEFAULT_MAX_TOTAL_BYTES, value_name = "BYTES")]
    pub checkout_max_bytes: u64,
    /// Most bytes one file of a Git checkout may hold.
    #[arg(long, default_value_t = kuvryn_sync_core::checkout::DEFAULT_MAX_FILE_BYTES, value_name = "BYTES")]
    pub checkout_max_file_bytes: u64,
    /// Deepest directory nesting of a Git checkout.
    #[arg(long, default_value_t = kuvryn_sync_core::checkout::DEFAULT_MAX_DEPTH, value_name = "N")]
    pub checkout_max_depth: usize,
    /// Repositories reconciled (resolved, fetched, discovered) at once.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub repository_concurrency: u16,
    /// Applications reconciled (rendered, planned, applied) at once.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub application_concurrency: u16,
    /// How often an Application is planned again without a trigger, to notice drift a watch
    /// missed (kinds the controller may not watch).
    #[arg(long, default_value = "5m", value_parser = flags::duration, value_name = "DURATION")]
    pub application_resync_interval: Duration,
    /// How long a CustomResourceDefinition an Application applies may take to be Established.
    #[arg(long, default_value = "60s", value_parser = flags::duration, value_name = "DURATION")]
    pub crd_establish_timeout: Duration,
    /// Impersonating clients kept, one per service account (least recently used evicted).
    ///
    /// There is no client-side QPS or burst limit (client-go's default of 5/10 is what slows
    /// Argo CD at scale): requests in flight are bounded instead, by --application-concurrency
    /// times the apply engine's per-Application concurrency (8), and the API server's priority
    /// and fairness does the rest.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub impersonation_cache_size: usize,
    /// The kustomize engine: a `kustomize` binary, or `kubectl` (run as `kubectl kustomize`).
    /// Default: `kustomize` on PATH, else `kubectl`.
    #[arg(long, value_name = "PATH")]
    pub kustomize_binary: Option<std::path::PathBuf>,
    /// Let kustomizations name remote bases, resources and components (Git or HTTP URLs).
    /// Off by default: a remote base is content nobody reviewed in this repository.
    #[arg(long)]
    pub allow_remote_bases: bool,
    /// `libhelm_c.so` (Helm's engine, from the `helm-python-sdk` wheel). Default: `$KSYNC_LIBHELM`.
    /// Without it, `render.type: helm` Applications fail with a RenderFailure saying so.
    #[arg(long, value_name = "FILE")]
    pub helm_library: Option<std::path::PathBuf>,
    /// The `ksync-helm-render` helper. Default: beside this binary.
    #[arg(long, value_name = "FILE")]
    pub helm_helper: Option<std::path::PathBuf>,
    /// PEM CA certificates trusted, besides the system's, for Helm chart repositories and OCI
    /// registries (and by the Helm engine).
    #[arg(long, value_name = "FILE")]
    pub registry_ca_file: Option<std::path::PathBuf>,
    /// ImagePolicies scanned (tags listed, digest read) at once.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub image_policy_concurrency: u16,
    /// Commit ImagePolicy selections to Git for Repositories with spec.imageUpdate (clone,
    /// edit the marked YAML fields, commit, push). Off by default: without it those Repositories
    /// report ImagesUpdated=False/Disabled and nothing is pushed.
    #[arg(long)]
    pub image_write_back: bool,
    /// Time limit of one render (kustomize or Helm).
    #[arg(long, default_value = "60s", value_parser = flags::duration, value_name = "DURATION")]
    pub render_timeout: Duration,
    /// Run the render helpers (kustomize, the Helm engine) in their own empty network namespace:
    /// `auto` when the kernel allows it (logged once at start-up when not), `required` (refuse to
    /// start, and to render, without it), or `off`. With --allow-remote-bases kustomize runs
    /// without it (it fetches the bases), and `required` refuses to start.
    #[arg(long, default_value = "auto", value_name = "auto|required|off")]
    pub render_network_isolation: kuvryn_sync_render::sandbox::NetworkIsolation,
    /// Address-space limit of each render helper process, in bytes.
    #[arg(long, default_value_t = kuvryn_sync_render::sandbox::DEFAULT_MAX_MEMORY_BYTES, value_name = "BYTES")]
    pub render_max_memory: u64,
    /// CPU-time limit of each render helper process, in seconds.
    #[arg(long, default_value_t = kuvryn_sync_render::sandbox::DEFAULT_MAX_CPU_SECONDS, value_name = "SECONDS")]
    pub render_max_cpu_seconds: u64,
    /// Largest file a render helper process may write, in bytes.
    #[arg(long, default_value_t = kuvryn_sync_render::sandbox::DEFAULT_MAX_FILE_BYTES, value_name = "BYTES")]
    pub render_max_file_bytes: u64,
    /// Files a render helper process may have open at once.
    #[arg(long, default_value_t = kuvryn_sync_render::sandbox::DEFAULT_MAX_OPEN_FILES, value_name = "N")]
    pub render_max_open_files: u64,
    /// Directory of every render's temporary files (workspaces with decrypted SOPS files, engine
    /// homes, chart copies); emptied at start-up. Default: `render-tmp` under --cache-dir.
    #[arg(long, value_name = "DIR")]
    pub render_temp_dir: Option<PathBuf>,
    /// Rendered outputs kept in memory, keyed by everything that shaped them (the Git trees
    /// read, values sources, keys, render config); least recently used evicted. 0 disables it.
    #[arg(long, default_value_t = kuvryn_sync_render::cache::DEFAULT_CAPACITY, value_name = "N")]
    pub render_cache_size: usize,
    /// Notifications pending delivery at once; when full, a new one is dropped with a
    /// NotificationDropped Event.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub notification_queue_size: usize,
    /// Time limit of one notification delivery attempt.
    #[arg(long, default_value = "10s", value_parser = flags::duration, value_name = "DURATION")]
    pub notification_timeout: Duration,

    /// Label-mode shard (Flux's model): reconcile only the Applications, Repositories and
    /// ImagePolicies labelled `sync.kuvryn.io/shard=NAME`, and read only that shard's Revisions.
    /// The replicas of one shard elect their leader on the Lease
    /// `kuvryn-sync-controller-shard-NAME`. Run one controller with --shard-unlabelled beside
    /// the shards, or unlabelled objects are reconciled by nobody.
    #[arg(long, value_name = "NAME", value_parser = shard_name,
        conflicts_with_all = ["shard_unlabelled", "shards"])]
    pub shard: Option<String>,
    /// Label mode's main controller: reconcile only the objects without the
    /// `sync.kuvryn.io/shard` label (it keeps the unsharded controller's Lease).
    #[arg(long, conflicts_with = "shards")]
    pub shard_unlabelled: bool,
    /// Automatic sharding: Applications, Repositories and ImagePolicies are split into N shards
    /// by a consistent hash of namespace/name; every replica claims shards through one Lease per
    /// shard, at most ceil(N / live replicas) each, and reconciles only the objects of the
    /// shards it holds. Every replica must be started with the same N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub shards: Option<u32>,
    /// Duration of the shard Leases (--shards): a failed replica's shards are taken over within
    /// it (plus a quarter of it to notice); replicas renew every quarter of it and stop
    /// reconciling a shard they could not renew a quarter before it ends. At least 4s.
    #[arg(long, default_value = "15s", value_parser = flags::duration, value_name = "DURATION")]
    pub shard_lease_duration: Duration,

    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log level (error, warn, info, debug, trace) or tracing directives such as
    /// `info,kube=debug`; RUST_LOG, when set, wins.
    #[arg(long, value_parser = logging::level, value_name = "LEVEL")]
    pub log_level: Option<String>,
}

/// `--shard`'s value parser.
fn shard_name(value: &str) -> Result<String, String> {
    kuvryn_sync_core::shards::check_shard_name(value).map(|()| value.to_owned())
}
