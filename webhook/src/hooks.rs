//! The push and image hook receivers: `POST /hooks/repositories/{namespace}/{name}` (GitHub and
//! GitLab push hooks) and `POST /hooks/imagepolicies/{namespace}/{name}` (registry
//! notifications). The handlers only read, call the decisions in
//! `kuvryn_sync_core::receiver`, and write one annotation.
//!
//! Every request goes through the same steps, in the threat model's order:
//! 1. **Size.** The body is read with axum's [`DefaultBodyLimit`] at
//!    [`MAX_BODY_BYTES`](kuvryn_sync_core::receiver::MAX_BODY_BYTES); a larger body (by
//!    `Content-Length` or while streaming) is 413 before any lookup.
//! 2. **Lookup.** The namespace and name must be valid Kubernetes names; then the object, its
//!    `spec.webhook.secretRef` and that Secret's `token` are read with the webhook's own service
//!    account.
//! 3. **Authentication** (constant time), then 4. **parsing**, then 5. **the decision** and at
//!    most one merge patch of `metadata.annotations["sync.kuvryn.io/reconcile-requested-at"]`
//!    (RFC 3339, now) on the Repository or ImagePolicy.
//!
//! **Replays.** An authenticated push is claimed in a [`ReplayCache`] by its delivery id
//! (`X-GitHub-Delivery`, `X-Gitlab-Event-UUID`) and its body's digest before anything is read
//! for it; a push already claimed is answered 200 `duplicate` and changes nothing. A claim whose
//! request then fails (503) is released, so the sender's retry is acted on.
//!
//! **Existence is not revealed.** An invalid or unknown namespace or name, an object without
//! `spec.webhook`, a missing Secret, a Secret without a non-empty `token`, and a missing or wrong
//! signature or token all get the same 401 with the same body. When there is no token to check
//! against, the signature is still computed against a stand-in token, so each of those paths
//! does the same hashing work; they differ only by whether one Secret read happened, which is a
//! small fraction of a request's time on the network. Only an authenticated caller learns more
//! (400 for a malformed payload, 200 or 202).
//!
//! **Answers.** 202 when a reconcile (Repository) or rescan (ImagePolicy) was requested; 200 for
//! an authenticated call that asks for nothing: a GitHub `ping`, any other event, a push to a ref
//! nothing follows, a registry notification without pushes. The sender sees a success either way,
//! as it should: its delivery was valid. 503 when the Kubernetes API fails, so that a sender
//! that retries can. Responses are JSON `{"outcome": ..., "message": ...}`.
//!
//! **What a push must match.** The Repository's `spec.git.revision` (its remote `HEAD` when
//! unset) and the `spec.source.revision` of every Application in its namespace sourced from it
//! (`spec.source.repositoryRef.name`, or for a discovered Application the
//! `sync.kuvryn.io/repository` label), compared exactly (see `receiver::push_matches`).
//! Hand-made Applications count as well as discovered ones: both deploy from the Repository's
//! fetch.
//!
//! **What a registry notification rescans.** The ImagePolicy the hook was called for, whenever
//! the notification reports a push (its token binds the call to it), and every other ImagePolicy
//! of the same namespace whose `spec.image` is the pushed repository, compared exactly
//! (`receiver::policies_to_rescan`): one registry webhook serves all the policies that follow an
//! image. Nothing from the payload reaches a selection: a rescan reads the registry itself, so
//! the payload can at most cause a scan, and only in the namespace whose token was presented.
//!
//! **Metrics.** Every response carries a [`HookReport`] extension (endpoint and outcome) for the
//! server's metrics layer to count; nothing here touches a metrics registry.
//!
//! **Logs.** One line per request: endpoint, namespace, name and outcome. Bodies, headers and the
//! query string (which carries a Docker Hub token) are never logged.
//!
//! The webhook's service account needs: `get` on `repositories` and `imagepolicies`, `get` on
//! `secrets` (the names come from `spec.webhook.secretRef`, so they cannot be listed in advance),
//! `list` on `applications` and `imagepolicies`, and `patch` on `repositories` and
//! `imagepolicies`.

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kuvryn_sync_api::{Application, ImagePolicy, Repository, SecretReference, keys};
use std::sync::{Arc, Mutex};

use kuvryn_sync_core::receiver::{
    self, ApplicationSourceRef, BadPayload, GitHookEvent, HookOutcome, PushAction, ReplayCache,
    Unauthorized,
};
use kuvryn_sync_core::redact;

/// The Repository push hook, as axum writes the path.
pub const REPOSITORY_HOOK_PATH: &str = "/hooks/repositories/{namespace}/{name}";
/// The ImagePolicy hook, as axum writes the path.
pub const IMAGE_POLICY_HOOK_PATH: &str = "/hooks/imagepolicies/{namespace}/{name}";
/// Every path [`router`] serves.
pub const HOOK_PATHS: &[&str] = &[REPOSITORY_HOOK_PATH, IMAGE_POLICY_HOOK_PATH];

/// The field manager of the annotation patches.
pub const FIELD_MANAGER: &str = "kuvryn-sync-webhook";

/// Checked in place of a token when there is none, so an unknown hook costs the same hashing.
const STAND_IN_TOKEN: &[u8] = b"kuvryn-sync: no hook token here";

/// What the receivers need: a client acting as the webhook's own service account.
#[derive(Clone)]
pub struct HookState {
    client: kube::Client,
    replays: Arc<Mutex<ReplayCache>>,
}

impl HookState {
    /// Receivers that read and annotate through `client`, remembering deliveries for
    /// [`receiver::REPLAY_TTL`].
    pub fn new(client: kube::Client) -> Self {
        HookState::with_replay_cache(client, ReplayCache::default())
    }

    /// Receivers with a replay cache of their own sizing.
    pub fn with_replay_cache(client: kube::Client, replays: ReplayCache) -> Self {
        HookState { client, replays: Arc::new(Mutex::new(replays)) }
    }
}

impl std::fmt::Debug for HookState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookState").finish_non_exhaustive()
    }
}

/// Which receiver answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HookEndpoint {
    /// `/hooks/repositories/...`.
    Repository,
    /// `/hooks/imagepolicies/...`.
    ImagePolicy,
}

impl HookEndpoint {
    /// A stable label, for metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            HookEndpoint::Repository => "repositories",
            HookEndpoint::ImagePolicy => "imagepolicies",
        }
    }
}

/// The response extension every receiver answer carries, for counting requests by endpoint and
/// outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HookReport {
    /// Which receiver.
    pub endpoint: HookEndpoint,
    /// How the call ended.
    pub outcome: HookOutcome,
}

/// The receivers' router, with its state; merge it into the HTTPS router.
pub fn router(state: HookState) -> Router {
    Router::new()
        .route(REPOSITORY_HOOK_PATH, post(repository_hook))
        .route(IMAGE_POLICY_HOOK_PATH, post(image_policy_hook))
        .layer(DefaultBodyLimit::max(receiver::MAX_BODY_BYTES))
        .with_state(state)
}

/// Why a request ended before it was acted on.
#[derive(Debug)]
enum Refusal {
    TooLarge,
    Unreadable,
    Unauthorized,
    BadPayload(BadPayload),
    Api(kube::Error),
}

impl From<Unauthorized> for Refusal {
    fn from(_: Unauthorized) -> Self {
        Refusal::Unauthorized
    }
}

impl From<BadPayload> for Refusal {
    fn from(err: BadPayload) -> Self {
        Refusal::BadPayload(err)
    }
}

impl From<kube::Error> for Refusal {
    fn from(err: kube::Error) -> Self {
        Refusal::Api(err)
    }
}

async fn repository_hook(
    State(state): State<HookState>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = handle_repository_hook(&state, &namespace, &name, &headers, body).await;
    answer(HookEndpoint::Repository, &namespace, &name, result)
}

async fn image_policy_hook(
    State(state): State<HookState>,
    Path((namespace, name)): Path<(String, String)>,
    uri: Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result =
        handle_image_policy_hook(&state.client, &namespace, &name, &uri, &headers, body).await;
    answer(HookEndpoint::ImagePolicy, &namespace, &name, result)
}

async fn handle_repository_hook(
    state: &HookState,
    namespace: &str,
    name: &str,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<HookOutcome, Refusal> {
    let client = &state.client;
    let body = within_size_limit(body)?;
    let repository = lookup::<Repository>(client, namespace, name).await?;
    let token = match &repository {
        Some(repo) => webhook_token(client, namespace, repo.spec.webhook.as_ref()).await?,
        None => None,
    };
    let credential = receiver::git_credential(
        header(headers, "x-hub-signature-256"),
        header(headers, "x-gitlab-token"),
    );
    let verified = receiver::verify_git(token_or_stand_in(&token), &body, credential);
    let (Some(repository), Some(_), Ok(provider)) = (repository, token, verified) else {
        return Err(Refusal::Unauthorized);
    };
    let event_header = match provider {
        receiver::GitProvider::GitHub => "x-github-event",
        receiver::GitProvider::GitLab => "x-gitlab-event",
    };
    let event = receiver::parse_push(provider, header(headers, event_header), &body)?;
    if !matches!(event, GitHookEvent::Push(_)) {
        return Ok(HookOutcome::Acknowledged);
    }
    let delivery_header = match provider {
        receiver::GitProvider::GitHub => "x-github-delivery",
        receiver::GitProvider::GitLab => "x-gitlab-event-uuid",
    };
    let keys = receiver::delivery_keys(header(headers, delivery_header), &body);
    let claimed = lock(&state.replays).claim(&keys, std::time::Instant::now());
    if !claimed {
        return Ok(HookOutcome::Duplicate);
    }
    let result = act_on_push(client, namespace, name, &repository, &event).await;
    if result.is_err() {
        lock(&state.replays).release(&keys);
    }
    result
}

/// Request a reconcile when the push is to a ref the Repository or its Applications follow.
async fn act_on_push(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    repository: &Repository,
    event: &GitHookEvent,
) -> Result<HookOutcome, Refusal> {
    let applications = applications_in(client, namespace).await?;
    let sources: Vec<ApplicationSourceRef<'_>> =
        applications.iter().filter_map(|app| source_of(app, name)).collect();
    let repository_revision = repository.spec.git.as_ref().and_then(|g| g.revision.as_deref());
    let watched = receiver::watched_revisions(name, repository_revision, &sources);
    let action = receiver::push_action(event, &watched);
    if action == PushAction::RequestReconcile {
        request_reconcile::<Repository>(client, namespace, name).await?;
    }
    Ok(action.outcome())
}

async fn handle_image_policy_hook(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    uri: &Uri,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<HookOutcome, Refusal> {
    let body = within_size_limit(body)?;
    let policy = lookup::<ImagePolicy>(client, namespace, name).await?;
    let token = match &policy {
        Some(policy) => webhook_token(client, namespace, policy.spec.webhook.as_ref()).await?,
        None => None,
    };
    let verified = receiver::verify_image_hook(
        token_or_stand_in(&token),
        header(headers, "authorization"),
        uri.query(),
    );
    let (Some(_), Some(_), Ok(())) = (policy, token, verified) else {
        return Err(Refusal::Unauthorized);
    };
    let events = receiver::parse_registry_notification(&body)?;
    let outcome = receiver::image_hook_outcome(&events);
    if outcome == HookOutcome::Accepted {
        let policies = Api::<ImagePolicy>::namespaced(client.clone(), namespace)
            .list(&ListParams::default())
            .await?
            .items;
        let images: Vec<(String, String)> =
            policies.iter().map(|p| (p.name_any(), p.spec.image.clone())).collect();
        let images: Vec<(&str, &str)> =
            images.iter().map(|(n, i)| (n.as_str(), i.as_str())).collect();
        for policy in receiver::policies_to_rescan(name, &events, &images) {
            request_reconcile::<ImagePolicy>(client, namespace, policy).await?;
        }
    }
    Ok(outcome)
}

fn within_size_limit(body: Result<Bytes, BytesRejection>) -> Result<Bytes, Refusal> {
    body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => Refusal::TooLarge,
        _ => Refusal::Unreadable,
    })
}

/// The replay cache, even if a panicking request poisoned its lock (its state is a set of keys,
/// valid after any partial update).
fn lock(cache: &Mutex<ReplayCache>) -> std::sync::MutexGuard<'_, ReplayCache> {
    cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

fn token_or_stand_in(token: &Option<Vec<u8>>) -> &[u8] {
    token.as_deref().unwrap_or(STAND_IN_TOKEN)
}

/// The object, or `None` when the URL cannot name one, it does not exist or it does not decode.
async fn lookup<K>(client: &kube::Client, namespace: &str, name: &str) -> Result<Option<K>, Refusal>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    if !receiver::is_hook_target(namespace, name) {
        return Ok(None);
    }
    match Api::<K>::namespaced(client.clone(), namespace).get_opt(name).await {
        // An object that does not decode has no usable webhook; answering 503 for it alone
        // would tell a caller it exists.
        Err(kube::Error::SerdeError(_)) => {
            tracing::warn!(?namespace, ?name, kind = %K::kind(&()), "hook target does not decode; refusing");
            Ok(None)
        }
        other => Ok(other?),
    }
}

/// The non-empty `token` of the Secret `webhook` names, or `None`.
async fn webhook_token(
    client: &kube::Client,
    namespace: &str,
    webhook: Option<&SecretReference>,
) -> Result<Option<Vec<u8>>, Refusal> {
    let Some(reference) = webhook else { return Ok(None) };
    let secret_name = reference.secret_ref.name.as_str();
    if !receiver::is_hook_target(namespace, secret_name) {
        return Ok(None);
    }
    let secret = Api::<Secret>::namespaced(client.clone(), namespace).get_opt(secret_name).await?;
    Ok(secret
        .and_then(|secret| secret.data)
        .and_then(|mut data| data.remove(receiver::TOKEN_KEY))
        .map(|token| token.0)
        .filter(|token| !token.is_empty()))
}

/// The Applications of a namespace, read loosely (an Application that would not decode into the
/// current types still names its Repository and revision).
async fn applications_in(
    client: &kube::Client,
    namespace: &str,
) -> Result<Vec<DynamicObject>, Refusal> {
    let resource = ApiResource::erase::<Application>(&());
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource);
    Ok(api.list(&ListParams::default()).await?.items)
}

/// An Application's source if it is sourced from `repository`.
fn source_of<'a>(app: &'a DynamicObject, repository: &str) -> Option<ApplicationSourceRef<'a>> {
    let source = app.data.get("spec")?.get("source")?;
    let named = source.get("repositoryRef").and_then(|r| r.get("name")).and_then(|n| n.as_str());
    let labelled = app.metadata.labels.as_ref().and_then(|l| l.get(keys::REPOSITORY));
    let from = named.or(labelled.map(String::as_str)).filter(|from| *from == repository)?;
    let revision = source.get("revision").and_then(|r| r.as_str());
    Some(ApplicationSourceRef { repository: from, revision })
}

/// Merge-patch `sync.kuvryn.io/reconcile-requested-at: <now>` onto the object.
async fn request_reconcile<K>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<(), Refusal>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let now = jiff::Timestamp::now().to_string();
    let patch = serde_json::json!({
        "metadata": {"annotations": {keys::RECONCILE_REQUESTED_AT: now}}
    });
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    Api::<K>::namespaced(client.clone(), namespace)
        .patch(name, &params, &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The response for a result, with its [`HookReport`], and the request's one log line.
fn answer(
    endpoint: HookEndpoint,
    namespace: &str,
    name: &str,
    result: Result<HookOutcome, Refusal>,
) -> Response {
    let (outcome, message) = match result {
        Ok(outcome) => (outcome, outcome_message(endpoint, outcome).to_owned()),
        Err(Refusal::TooLarge) => (
            HookOutcome::TooLarge,
            format!("the body is over the {} byte limit", receiver::MAX_BODY_BYTES),
        ),
        Err(Refusal::Unreadable) => {
            (HookOutcome::BadRequest, "the request body could not be read".to_owned())
        }
        Err(Refusal::Unauthorized) => (HookOutcome::Unauthorized, Unauthorized.to_string()),
        Err(Refusal::BadPayload(err)) => (HookOutcome::BadRequest, err.to_string()),
        Err(Refusal::Api(err)) => {
            let detail = redact::redact_shapes(&err.to_string());
            tracing::warn!(endpoint = endpoint.as_str(), ?namespace, ?name, error = %detail, "hook lookup or annotation failed");
            (HookOutcome::Unavailable, "the Kubernetes API is unavailable; retry later".to_owned())
        }
    };
    tracing::info!(
        endpoint = endpoint.as_str(),
        ?namespace,
        ?name,
        outcome = outcome.as_str(),
        "hook"
    );
    let status =
        StatusCode::from_u16(outcome.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = serde_json::json!({
        "outcome": outcome.as_str(),
        "message": redact::redact_shapes(&message),
    });
    let mut response = (status, axum::Json(body)).into_response();
    response.extensions_mut().insert(HookReport { endpoint, outcome });
    response
}

fn outcome_message(endpoint: HookEndpoint, outcome: HookOutcome) -> &'static str {
    match (outcome, endpoint) {
        (HookOutcome::Accepted, HookEndpoint::Repository) => "fetch requested",
        (HookOutcome::Accepted, HookEndpoint::ImagePolicy) => "rescan requested",
        (HookOutcome::Acknowledged, _) => "acknowledged; nothing to do",
        (HookOutcome::Unauthorized, _) => "unauthorized",
        (HookOutcome::BadRequest, _) => "bad request",
        (HookOutcome::TooLarge, _) => "too large",
        (HookOutcome::Unavailable, _) => "unavailable",
        (HookOutcome::Duplicate, _) => "already delivered; ignored",
    }
}

#[cfg(test)]
mod tests {
    //! The router's own behaviour before any API call: with a client whose API server does not
    //! answer, a request that reached the API would be 503, so 401 and 413 here prove those
    //! answers came first.

    use super::*;
    use axum::body::Body;
    use axum::http::{Method, Request};
    use tower::ServiceExt;

    fn unreachable_api() -> kube::Client {
        let url = "http://127.0.0.1:9".parse().expect("url");
        kube::Client::try_from(kube::Config::new(url)).expect("client")
    }

    async fn call(method: Method, path: &str, body: Vec<u8>) -> (StatusCode, Option<HookReport>) {
        let request = Request::builder().method(method).uri(path).body(Body::from(body));
        let response = router(HookState::new(unreachable_api()))
            .oneshot(request.expect("request"))
            .await
            .expect("router answers");
        (response.status(), response.extensions().get::<HookReport>().copied())
    }

    fn concrete(pattern: &str, namespace: &str, name: &str) -> String {
        pattern.replace("{namespace}", namespace).replace("{name}", name)
    }

    #[tokio::test]
    async fn every_hook_path_is_served_for_post_only() {
        for pattern in HOOK_PATHS {
            let path = concrete(pattern, "Not_A_Namespace", "x");
            let (status, report) = call(Method::POST, &path, b"{}".to_vec()).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
            assert_eq!(report.map(|r| r.outcome), Some(HookOutcome::Unauthorized), "{path}");
            let (status, _) = call(Method::GET, &path, Vec::new()).await;
            assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{path}");
        }
    }

    #[tokio::test]
    async fn an_oversize_body_is_refused_before_any_lookup() {
        let endpoints = [
            (REPOSITORY_HOOK_PATH, HookEndpoint::Repository),
            (IMAGE_POLICY_HOOK_PATH, HookEndpoint::ImagePolicy),
        ];
        for (pattern, endpoint) in endpoints {
            let path = concrete(pattern, "default", "platform");
            let body = vec![b'x'; receiver::MAX_BODY_BYTES + 1];
            let (status, report) = call(Method::POST, &path, body).await;
            assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{path}");
            assert_eq!(report, Some(HookReport { endpoint, outcome: HookOutcome::TooLarge }));
        }
    }

    #[tokio::test]
    async fn an_api_failure_is_unavailable() {
        let path = concrete(REPOSITORY_HOOK_PATH, "default", "platform");
        let (status, report) = call(Method::POST, &path, b"{}".to_vec()).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(report.map(|r| r.outcome), Some(HookOutcome::Unavailable));
    }
}
