//! The reconcilers of one scope (everything, a label shard, or the hashed shards held), started
//! together from the flags and stopped together.

use std::sync::Arc;

use anyhow::Context;
use kube::api::Api;
use kuvryn_sync_apply::clients::{ImpersonatedClients, RequestObserver};
use kuvryn_sync_apply::kinds::Kinds;
use kuvryn_sync_apply::shared_inventory::SharedInventory;
use kuvryn_sync_runtime::metrics::ControllerMetrics;
use kuvryn_sync_source::git::GitCache;

use crate::args::Args;
use crate::engines::renderers;
use crate::watches;
use crate::{
    application, context, fault, health, image_update, imagepolicy, notify, repository, shards,
};

/// What every start of the reconcilers shares.
pub(crate) struct Parts {
    pub(crate) args: Args,
    pub(crate) client: kube::Client,
    pub(crate) config: kube::Config,
    pub(crate) count_request: RequestObserver,
    pub(crate) cache: Arc<GitCache>,
    pub(crate) registry: Arc<kuvryn_sync_source::registry::RegistryClient>,
    pub(crate) metrics: ControllerMetrics,
    /// One Event recorder for every reconciler, so a repeated Event becomes a series.
    pub(crate) recorder: Arc<kuvryn_sync_runtime::events::EventRecorder>,
    /// The state gauges' store writers, taken by the first start.
    pub(crate) gauges: std::sync::Mutex<Option<GaugeWriters>>,
}

pub(crate) type GaugeWriters = (
    kube::runtime::reflector::store::Writer<kuvryn_sync_api::Application>,
    kube::runtime::reflector::store::Writer<kuvryn_sync_api::Repository>,
);

/// The running reconcilers of one scope.
pub(crate) struct Reconcilers {
    stop: tokio_util::sync::CancellationToken,
    tasks: Vec<(&'static str, tokio::task::JoinHandle<()>)>,
}

impl Reconcilers {
    /// Start the Repository, Application and ImagePolicy reconcilers for `scope`.
    pub(crate) fn start(parts: &Parts, scope: shards::Scope) -> anyhow::Result<Self> {
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
            recorder: parts.recorder.clone(),
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
            recorder: parts.recorder.clone(),
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
        let applications = Arc::new(context::ApplicationContext {
            client: client.clone(),
            clients: ImpersonatedClients::new(parts.config.clone(), args.impersonation_cache_size)
                .observed(Arc::clone(&parts.count_request)),
            kinds: Kinds::default(),
            cache: Arc::clone(&parts.cache),
            recorder: parts.recorder.clone(),
            default_service_account: args.default_service_account.clone(),
            git_timeout: args.git_timeout,
            concurrency: args.application_concurrency.max(1),
            resync: args.application_resync_interval,
            crd_timeout: args.crd_establish_timeout,
            watches: Arc::new(watches),
            inventory,
            revision_writes: Arc::default(),
            announcements: Arc::default(),
            fault: fault::FaultPoint::from_env(),
            metrics: metrics.clone(),
            health_rules: health::HealthRules::watch(client.clone(), stop.clone()),
            renderers: renderers(args, metrics),
            notifier: Arc::new(notify::Notifier::new(
                client.clone(),
                parts.recorder.clone(),
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
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
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
    use crate::triggers::trim_metadata;
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let apps = watcher(Api::all(client.clone()), config.clone()).modify(trim_metadata);
    let apps = reflector(applications, apps).default_backoff().for_each(|_| async {});
    let repos = watcher(Api::all(client), config).modify(trim_metadata);
    let repos = reflector(repositories, repos).default_backoff().for_each(|_| async {});
    futures::future::join(apps, repos).await;
}
