//! The Repository reconciler, a fixed list of steps:
//!
//! 1. `spec.git` is set and its URL passes the URL rules ([`source::fetch_request`]);
//! 2. the labelled Secret, parsed into Git credentials (also [`source::fetch_request`]);
//! 3. [`resolve_revision`]: list the remote's refs, fetching only when the revision moved;
//! 4. [`read_discovery_inputs`]: the configured `.ksync.yaml` files at that commit and the
//!    Applications in the namespace;
//! 5. [`decide`](kuvryn_sync_core::repository::decide): pure, from the [`Observation`] to every
//!    write;
//! 6. [`write`]: the one place that writes — discovered Applications, then the status, then the
//!    Events.
//!
//! Before step 1, the image write-back of a Repository with `spec.imageUpdate`
//! ([`image_update`]): it runs first so that a commit it pushes is resolved and discovered by this
//! same reconcile, and its `ImagesUpdated` condition is merged into the one status write of step
//! 6 ([`decide_write_back`]), which keeps this reconciler the only writer of the Repository's
//! conditions.
//!
//! Steps 1–4 return a [`Step`]: a `StepFailure` ends observation early with a failure reason the
//! status reports; API-server trouble retries with backoff.

use kuvryn_sync_runtime::durations::{GitOperation, Reconciled};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::status::apply_status;
use crate::step::{StepResult, reported};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::{Resource, ResourceExt};
use kuvryn_sync_api::{Application, CONTROLLER_NAME, FailureReason, Repository};
use kuvryn_sync_core::discovery::{self, ConfigFileRead, DeleteAction};
use kuvryn_sync_core::failure::StepFailure;
use kuvryn_sync_core::image_writeback::decide_write_back;
use kuvryn_sync_core::redact::Redactor;
use kuvryn_sync_core::repository::{Decision, Observation, decide};
use kuvryn_sync_runtime::events::EventRecorder;
use kuvryn_sync_source::git::{FetchRequest, GitCache, GitError};

use crate::{image_update, source, triggers};
use kuvryn_sync_source::tree::read_config_file;

/// What the reconciler needs.
pub struct RepositoryContext {
    pub client: kube::Client,
    pub cache: Arc<GitCache>,
    pub recorder: Arc<EventRecorder>,
    /// Poll interval when `spec.pollInterval` is unset.
    pub default_poll_interval: Duration,
    /// Upper bound for one remote interaction.
    pub git_timeout: Duration,
    /// Repositories reconciled at once (a slow Git host must not stall the others, nor may
    /// thousands of Repositories fetch at the same moment).
    pub concurrency: u16,
    /// Image write-back (`spec.imageUpdate`), on or off.
    pub image_update: Arc<image_update::ImageWriteBack>,
    /// Reconcile and Git durations.
    pub metrics: kuvryn_sync_runtime::metrics::ControllerMetrics,
    /// The controller's shard: which Repositories it reconciles.
    pub shard: crate::shards::Scope,
}

/// Errors that make the reconcile retry with backoff (API server trouble); source, credential
/// and discovery problems are observations written to status, not errors.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("the Repository has no namespace")]
    NoNamespace,
    #[error("background task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// Each configured `.ksync.yaml` path and what was found there.
type ConfigFiles = BTreeMap<String, ConfigFileRead>;

/// A step of observing a Repository: its value, a failure for status, or an error to retry.
type Step<T> = StepResult<T, ReconcileError>;

/// Run the Repository controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<RepositoryContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    // Spec changes and annotation changes (the push receivers set
    // sync.kuvryn.io/reconcile-requested-at).
    let (reader, stream) = triggers::spec_or_annotation_changes(
        Api::<Repository>::all(ctx.client.clone()),
        ctx.shard.clone(),
    );
    let mut controller = Controller::for_stream(stream, reader.clone())
        .with_config(kube::runtime::controller::Config::default().concurrency(ctx.concurrency));
    // With image write-back on, a new ImagePolicy selection reconciles the Repositories with
    // spec.imageUpdate.
    if let Some(policy_changes) = ctx.image_update.policy_changes(reader) {
        controller = controller.reconcile_on(policy_changes);
    }
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move { triggers::log_failure("Repository", &result) })
        .await;
}

fn error_policy(
    _repo: Arc<Repository>,
    err: &ReconcileError,
    _ctx: Arc<RepositoryContext>,
) -> Action {
    tracing::warn!(%err, "repository reconcile will be retried");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(
    repo: Arc<Repository>,
    ctx: Arc<RepositoryContext>,
) -> Result<Action, ReconcileError> {
    let _timer = ctx.metrics.durations.reconcile(Reconciled::Repository);
    let namespace = repo.namespace().ok_or(ReconcileError::NoNamespace)?;
    let mut redactor = Redactor::new();
    let write_back = ctx.image_update.run(&repo, &namespace, &mut redactor).await?;
    let observed = observe(&repo, &namespace, &ctx, &mut redactor).await;
    let observation = reported(observed, Observation::Failed)?;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut decision = decide(&repo, &observation, &redactor, &now);
    let images = decide_write_back(&repo, decision.status.take(), write_back.as_ref(), &now);
    decision.status = images.status;
    decision.events.extend(images.events);
    write(&repo, &namespace, &decision, &redactor, &ctx).await?;
    Ok(Action::requeue(poll_interval(&repo, ctx.default_poll_interval)))
}

/// Steps 1–4. `redactor` learns every credential value this reconcile touches.
async fn observe(
    repo: &Repository,
    namespace: &str,
    ctx: &RepositoryContext,
    redactor: &mut Redactor,
) -> Step<Observation> {
    // Steps 1 and 2: the URL checks and the credentials.
    let request =
        source::fetch_request(&ctx.client, repo, namespace, None, ctx.git_timeout, redactor)
            .await?;
    let commit = resolve_revision(&request, ctx).await?;
    read_discovery_inputs(repo, namespace, &request, commit, ctx).await
}

/// Step 3: the commit `request` resolves to.
async fn resolve_revision(request: &FetchRequest, ctx: &RepositoryContext) -> Step<String> {
    let cache = Arc::clone(&ctx.cache);
    let request = request.clone();
    let _timer = ctx.metrics.durations.git(GitOperation::Resolve);
    let resolved = tokio::task::spawn_blocking(move || cache.resolve(&request)).await?;
    let resolved = resolved.map_err(|err| StepFailure::new(err.reason(), err.to_string()))?;
    Ok(resolved.commit)
}

/// Step 4: the configured `.ksync.yaml` files at `commit` and the namespace's Applications. Paths
/// that break the path rules are not read; discovery reports them.
async fn read_discovery_inputs(
    repo: &Repository,
    namespace: &str,
    request: &FetchRequest,
    commit: String,
    ctx: &RepositoryContext,
) -> Step<Observation> {
    let paths =
        discovery::validate_config_paths(&repo.spec.application_config_paths).unwrap_or_default();
    let cache = Arc::clone(&ctx.cache);
    let (request, tree_commit) = (request.clone(), commit.clone());
    let timer = ctx.metrics.durations.git(GitOperation::Checkout);
    let files = tokio::task::spawn_blocking(move || -> Result<ConfigFiles, GitError> {
        let tree = cache.tree(&request, &tree_commit)?;
        Ok(paths.iter().map(|p| (p.clone(), read_config_file(tree.path(), p))).collect())
    })
    .await?;
    drop(timer);
    let config_files =
        files.map_err(|err| StepFailure::new(FailureReason::SourceFailure, err.to_string()))?;
    let applications: Api<Application> = Api::namespaced(ctx.client.clone(), namespace);
    let applications = applications.list(&ListParams::default()).await?.items;
    Ok(Observation::Resolved { commit, config_files, applications })
}

/// Step 6, the one place that writes: discovered Applications by server-side apply, then the
/// status by server-side apply of the status subresource (both under [`CONTROLLER_NAME`]), then
/// the Events.
async fn write(
    repo: &Repository,
    namespace: &str,
    decision: &Decision,
    redactor: &Redactor,
    ctx: &RepositoryContext,
) -> Result<(), kube::Error> {
    let applications: Api<Application> = Api::namespaced(ctx.client.clone(), namespace);
    let apply = PatchParams::apply(CONTROLLER_NAME).force();
    for app in &decision.apply {
        let name = app.name_any();
        applications.patch(&name, &apply, &Patch::Apply(app)).await?;
        tracing::info!(application = %name, "discovered Application applied");
    }
    for delete in &decision.delete {
        delete_application(&applications, delete).await?;
    }
    if let Some(status) = &decision.status {
        let name = repo.name_any();
        apply_status::<Repository>(&ctx.client, namespace, &name, status).await?;
    }
    let reference = repo.object_ref(&());
    ctx.recorder.publish(&reference, &decision.events, redactor).await;
    Ok(())
}

/// Delete an Application removed from `.ksync.yaml`, with the deletion policy discovery chose.
/// The policy goes out as a JSON merge patch of that one field: a server-side apply of a partial
/// object would release every other field our manager owns.
async fn delete_application(
    api: &Api<Application>,
    delete: &DeleteAction,
) -> Result<(), kube::Error> {
    if delete.needs_orphan_patch() {
        let patch = serde_json::json!({"spec": {"deletionPolicy": delete.deletion_policy}});
        api.patch(&delete.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions { uid: delete.uid.clone(), resource_version: None }),
        ..DeleteParams::default()
    };
    match api.delete(&delete.name, &params).await {
        Ok(_) => {
            tracing::info!(application = %delete.name, "Application removed from .ksync.yaml deleted");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(err),
    }
}

/// `spec.pollInterval`, or the default when unset. The CRD refuses a value outside the duration
/// grammar; one stored before that rule existed falls back to the default.
fn poll_interval(repo: &Repository, default: Duration) -> Duration {
    repo.spec
        .poll_interval
        .as_deref()
        .and_then(|text| kuvryn_sync_core::duration::parse(text).ok())
        .unwrap_or(default)
}
