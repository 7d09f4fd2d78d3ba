//! What the Application reconciler ([`crate::application`]) and an Application's deletion
//! ([`crate::deletion`]) share: the context, the error that retries, and publishing an
//! Application's Events (with their notifications). Its own module so that neither of the two
//! imports the other's internals.

use crate::step::StepError;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;
use kuvryn_sync_api::{Application, Repository, Revision};
use kuvryn_sync_apply::clients::ImpersonatedClients;
use kuvryn_sync_apply::kinds::Kinds;
use kuvryn_sync_apply::memo::DryRunMemo;
use kuvryn_sync_apply::shared_inventory::SharedInventory;
use kuvryn_sync_core::redact::Redactor;
use kuvryn_sync_runtime::events::EventRecorder;
use kuvryn_sync_runtime::metrics::ControllerMetrics;
use kuvryn_sync_source::git::GitCache;

use crate::fault::FaultPoint;
use crate::watches::ManagedWatches;

/// What the reconciler needs.
pub struct ApplicationContext {
    /// The controller's own client: Applications, Revisions, Repositories, service accounts.
    pub client: kube::Client,
    /// Clients acting as Applications' service accounts: everything done to managed objects.
    pub clients: ImpersonatedClients,
    pub kinds: Kinds,
    pub cache: Arc<GitCache>,
    pub recorder: Arc<EventRecorder>,
    /// `--default-service-account`.
    pub default_service_account: Option<String>,
    pub git_timeout: Duration,
    /// Applications reconciled at once.
    pub concurrency: u16,
    /// How often an Application is planned again without a trigger (drift, lost events).
    pub resync: Duration,
    /// How long a CustomResourceDefinition may take to become Established.
    pub crd_timeout: Duration,
    pub watches: Arc<ManagedWatches>,
    /// A test-only point where the process dies (`KSYNC_TEST_FAULT_POINT`).
    pub fault: Option<FaultPoint>,
    /// Counts every Application Event.
    pub metrics: ControllerMetrics,
    /// The HealthCheck rules, watched.
    pub health_rules: crate::health::HealthRules,
    /// The render engines and their limits.
    pub renderers: crate::render::Renderers,
    /// Notification delivery (`spec.notifications`).
    pub notifier: Arc<crate::notify::Notifier>,
    /// Every Repository, kept by the watch the Application controller already keeps for its triggers: a reconcile
    /// reads its Repository here, and from the API server only when the store has none.
    pub repositories: Store<Repository>,
    /// Dry runs known to change nothing, trusted for one resync interval.
    pub dry_runs: DryRunMemo,
    /// The managed objects the shared watches ([`ManagedWatches`]) keep, by Application: a
    /// plan's inventory without a list per kind when they are as good as one.
    pub inventory: Arc<SharedInventory>,
    /// Every ServiceAccount's name (metadata only, kept by the Application controller's watch): step 1 checks the
    /// Application's account here, and asks the API server only when the store has none.
    pub service_accounts: Store<PartialObjectMeta<ServiceAccount>>,
    /// Every Revision (without managed fields), kept by the Application controller's watch: the history of a new
    /// Revision and `spec.history.limit` read it here, never with a list per reconcile.
    pub revisions: Store<Revision>,
    /// The controller's shard: which Applications (and Repositories, Revisions) it watches.
    pub shard: crate::shards::Scope,
    /// Revisions written and not yet in [`Self::revisions`]: read from the API server meanwhile.
    pub revision_writes: Arc<crate::revision_writes::RevisionWrites>,
    /// New commits announced as sync state `Planning` and not rendered yet.
    pub announcements: Arc<crate::announcements::Announcements>,
}

/// Errors that make the reconcile retry with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("the Application has no namespace")]
    NoNamespace,
    #[error("background task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<ReconcileError>>),
}

impl From<ReconcileError> for StepError<ReconcileError> {
    fn from(err: ReconcileError) -> Self {
        Self::Retry(err)
    }
}

/// Publish `events_to_send` about `app` (redacted), count them, and hand them to the
/// notifier.
pub(crate) async fn publish(
    app: &Application,
    events_to_send: &[(kuvryn_sync_api::EventReason, String)],
    redactor: &Redactor,
    ctx: &ApplicationContext,
) {
    let reference = app.object_ref(&());
    ctx.recorder.publish(&reference, events_to_send, redactor).await;
    for (reason, _) in events_to_send {
        ctx.metrics.count_event(*reason);
    }
    let identity = (&ctx.clients, service_account_of(app, ctx));
    ctx.notifier.notify(app, events_to_send, redactor, identity).await;
}

/// The service account `app` acts as, if any (the Secrets of its sinks are read as it).
pub(crate) fn service_account_of<'a>(
    app: &'a Application,
    ctx: &'a ApplicationContext,
) -> Option<&'a str> {
    app.spec.service_account_name.as_deref().or(ctx.default_service_account.as_deref())
}
