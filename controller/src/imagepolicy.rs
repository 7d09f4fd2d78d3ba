//! The ImagePolicy reconciler: scan `spec.image` in its registry, select a tag, and record the
//! selection. A fixed list of steps, each failure ending the scan as `Ready=False/ScanFailed`
//! with a message that went through the scan's [`Redactor`]:
//!
//! 1. `spec.policy` compiles ([`image_policy::compile`]) and `spec.image` parses
//!    ([`ImageRef::parse`]), which gives the registry host;
//! 2. the registry login from `spec.secretRef` ([`image_policy::registry_login`]): the Secret is
//!    read in the policy's own namespace with the controller's client, as the Repository
//!    reconciler reads Git credentials. The opt-in is the `sync.kuvryn.io/registry-credentials:
//!    "true"` label plus the `kubernetes.io/dockerconfigjson` type, checked before any value is
//!    used; an unlabelled Secret or one of another type is refused with a message naming the
//!    Secret, the rule and the fix. Every value of the Secret is added to the redactor first, so
//!    no error can echo the password, whichever step fails;
//! 3. the tag list ([`RegistryClient::list_tags`]), the selection ([`image_policy::select`]) and
//!    the selected tag's manifest digest ([`RegistryClient::digest`], a `HEAD`);
//! 4. [`image_policy::decide_scan`] (pure) gives the status, the Events and the next scan;
//!    the status is written by server-side apply of the status subresource only when it
//!    changed, then the Events are published.
//!
//! One [`RegistryClient`] is shared by every scan (one connection pool; its authorization cache
//! is keyed by registry, repository and login, so tenants never share a token). Its TLS trust is
//! the system roots plus `SSL_CERT_FILE`/`SSL_CERT_DIR` plus `--registry-ca-file`.
//!
//! What starts a scan: a change of the spec (generation) or of the annotations (the ImagePolicy
//! hook of the webhook sets `sync.kuvryn.io/reconcile-requested-at`), see [`triggers`], and the
//! requeue after `spec.interval`. Scans run at most `--image-policy-concurrency` at once.

use kuvryn_sync_runtime::durations::Reconciled;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::{Resource, ResourceExt};
use kuvryn_sync_api::ImagePolicy;
use kuvryn_sync_core::credentials::secret_values;
use kuvryn_sync_core::image_policy::{self, ScanOutcome};
use kuvryn_sync_core::redact::Redactor;
use kuvryn_sync_runtime::events::EventRecorder;
use kuvryn_sync_source::registry::{ImageRef, RegistryClient, RegistryLogin};
use secrecy::ExposeSecret;

use crate::triggers;

/// What the reconciler needs.
pub struct ImagePolicyContext {
    pub client: kube::Client,
    /// The registry client every scan shares.
    pub registry: Arc<RegistryClient>,
    pub recorder: Arc<EventRecorder>,
    /// Scans at once.
    pub concurrency: u16,
    /// Reconcile durations.
    pub metrics: kuvryn_sync_runtime::metrics::ControllerMetrics,
    /// The controller's shard: which ImagePolicies it scans.
    pub shard: crate::shards::Scope,
}

/// API-server trouble: the reconcile retries with backoff. Registry, credential and policy
/// problems are scan outcomes written to status, not errors.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("the ImagePolicy has no namespace")]
    NoNamespace,
}

/// Run the ImagePolicy controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<ImagePolicyContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (reader, stream) = triggers::spec_or_annotation_changes(
        Api::<ImagePolicy>::all(ctx.client.clone()),
        ctx.shard.clone(),
    );
    Controller::for_stream(stream, reader)
        .with_config(kube::runtime::controller::Config::default().concurrency(ctx.concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move { triggers::log_failure("ImagePolicy", &result) })
        .await;
}

fn error_policy(
    _policy: Arc<ImagePolicy>,
    err: &ReconcileError,
    _ctx: Arc<ImagePolicyContext>,
) -> Action {
    tracing::warn!(%err, "image policy reconcile will be retried");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(
    policy: Arc<ImagePolicy>,
    ctx: Arc<ImagePolicyContext>,
) -> Result<Action, ReconcileError> {
    let _timer = ctx.metrics.durations.reconcile(Reconciled::ImagePolicy);
    let namespace = policy.namespace().ok_or(ReconcileError::NoNamespace)?;
    let name = policy.name_any();
    let mut redactor = Redactor::new();
    let outcome = match scan(&policy, &namespace, &ctx, &mut redactor).await? {
        Ok(outcome) => outcome,
        Err(message) => ScanOutcome::Failed { message: redactor.redact(&message) },
    };
    match &outcome {
        ScanOutcome::Selected { tag, digest } => {
            tracing::debug!(namespace, policy = name, tag, digest, "image scan selected")
        }
        ScanOutcome::Failed { message } => {
            tracing::info!(namespace, policy = name, error = %message, "image scan failed")
        }
    }
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let decision = image_policy::decide_scan(&policy, &outcome, &now);
    if let Some(status) = &decision.status {
        crate::status::apply_status::<ImagePolicy>(&ctx.client, &namespace, &name, status).await?;
    }
    let reference = policy.object_ref(&());
    ctx.recorder.publish(&reference, &decision.events, &redactor).await;
    Ok(Action::requeue(decision.requeue_after))
}

/// Steps 1–3: the selection, or why there is none (not yet redacted; `redactor` knows every
/// credential value the scan touched).
async fn scan(
    policy: &ImagePolicy,
    namespace: &str,
    ctx: &ImagePolicyContext,
    redactor: &mut Redactor,
) -> Result<Result<ScanOutcome, String>, ReconcileError> {
    let spec = &policy.spec;
    let compiled = match image_policy::compile(&spec.policy) {
        Ok(compiled) => compiled,
        Err(err) => return Ok(Err(err.to_string())),
    };
    let image = match ImageRef::parse(&spec.image) {
        Ok(image) => image,
        Err(err) => return Ok(Err(err.to_string())),
    };
    let login = match registry_login(policy, namespace, &image, ctx, redactor).await? {
        Ok(login) => login,
        Err(message) => return Ok(Err(message)),
    };
    let tags = match ctx.registry.list_tags(&spec.image, login.as_ref()).await {
        Ok(tags) => tags,
        Err(err) => return Ok(Err(err.to_string())),
    };
    let tag = match image_policy::select(&compiled, &tags) {
        Ok(tag) => tag,
        Err(err) => return Ok(Err(err.to_string())),
    };
    match ctx.registry.digest(&spec.image, &tag, login.as_ref()).await {
        Ok(digest) => Ok(Ok(ScanOutcome::Selected { tag, digest })),
        Err(err) => Ok(Err(err.to_string())),
    }
}

/// Step 2: the login of `spec.secretRef` for the image's registry, `None` for anonymous access.
async fn registry_login(
    policy: &ImagePolicy,
    namespace: &str,
    image: &ImageRef,
    ctx: &ImagePolicyContext,
    redactor: &mut Redactor,
) -> Result<Result<Option<RegistryLogin>, String>, ReconcileError> {
    let Some(reference) = &policy.spec.secret_ref else { return Ok(Ok(None)) };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let Some(secret) = secrets.get_opt(&reference.name).await? else {
        return Ok(Err(format!(
            "spec.secretRef: Secret {namespace}/{} not found; create a kubernetes.io/dockerconfigjson Secret labelled sync.kuvryn.io/registry-credentials: \"true\" (kubectl create secret docker-registry), or remove spec.secretRef for a public image",
            reference.name
        )));
    };
    // Every value first, so that no later message can echo one, usable or not.
    redactor.add_secret_data(secret_values(&secret).values().map(Vec::as_slice));
    match image_policy::registry_login(&secret, &image.registry) {
        Ok(Some(login)) => {
            let password = login.password.expose_secret();
            redactor.add_secret(password);
            redactor.add_secret(&format!("{}:{password}", login.username));
            Ok(Ok(Some(RegistryLogin { username: login.username, password: login.password })))
        }
        Ok(None) => Ok(Ok(None)),
        Err(err) => Ok(Err(format!("spec.secretRef: {err}"))),
    }
}
