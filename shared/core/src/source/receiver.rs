//! Push and image hook receivers: who may call a hook, what a call says, and what it asks for.
//! Pure: the webhook server reads the body (capped at [`MAX_BODY_BYTES`]), the object and its
//! token Secret, and performs what these functions decide.
//!
//! Order of checks (size, then authentication, then parsing) follows the threat model: nothing in
//! an unauthenticated body is ever parsed, and nothing in an authenticated one is trusted beyond
//! matching it exactly.
//!
//! # Authentication
//! The token is the `token` key ([`TOKEN_KEY`]) of the Secret named by the object's
//! `spec.webhook.secretRef`. An empty token authenticates nothing.
//! - **GitHub** signs the raw body: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(token, body)>`
//!   ([`verify_github`]); the MAC is checked by `hmac`'s constant-time `verify_slice`.
//! - **GitLab** sends the token verbatim in `X-Gitlab-Token` ([`verify_gitlab`]).
//! - **Registries** (ImagePolicy hooks, [`verify_image_hook`]) send `Authorization: Bearer
//!   <token>`: distribution's `notifications.endpoints[].headers` and Harbor's "Auth Header"
//!   field (which Harbor sends verbatim as the `Authorization` header, so set it to
//!   `Bearer <token>`). **Docker Hub** cannot send headers, so its hook URL carries the token as a
//!   query parameter, `?token=<url-encoded token>`, compared the same way. A URL token can end up
//!   in proxy access logs: prefer the header wherever the sender can set one, and give a Docker
//!   Hub hook a token of its own. No third header (such as a custom `X-Kuvryn-Token`) is
//!   accepted: two ways are enough to cover every sender, and each extra one is one more place a
//!   token can leak from.
//!
//! Tokens are compared in constant time over their SHA-256 digests (`subtle`), so neither the
//! position of the first differing byte nor the token's length shows in the timing.
//! [`Unauthorized`] carries no detail on purpose: which check failed is not told to the caller.
//!
//! # Parsing
//! Payloads are read as `serde_json::Value` (whose nesting limit bounds recursion) and picked
//! apart field by field, so a null, a wrong type or an empty string is a [`BadPayload`] that names
//! the field and the rule, never a panic and never an echo of the payload's values. Typed serde
//! structs would do the same work but report errors with payload positions and values; the field
//! walk here is small and says exactly what to fix.
//!
//! # Matching
//! A push asks for a fetch only when its ref is one the Repository or one of its Applications
//! follows ([`push_matches`]): exact ref comparison, never a pattern, and the payload's repository
//! identity is not consulted (the signature already binds the call to this Repository's token;
//! comparing URLs would turn every mirror or URL spelling into a silently dead hook).
//!
//! # Replays
//! A signed GitHub push stays valid forever: whoever captured one could send it again. After
//! authentication, a push is named by its delivery id (`X-GitHub-Delivery`, or GitLab's
//! `X-Gitlab-Event-UUID`) and by the SHA-256 of its body ([`delivery_keys`]); a push sharing
//! either with one acted on within [`REPLAY_TTL`] is a [`HookOutcome::Duplicate`] (200, no
//! effect). The body digest is needed because the delivery header is not signed: a replay with a
//! made-up id still carries the same signed body. [`ReplayCache`] holds at most
//! [`REPLAY_CACHE_CAPACITY`] keys, oldest out first; it is per process, so a replay that reaches
//! another replica, or arrives after the TTL or after eviction, is acted on again (its effect is
//! one more fetch of the same Repository).

use hmac::{Hmac, Mac};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The largest hook body read; a larger one is refused with 413 before anything else happens.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The key of the token in a hook's Secret (`spec.webhook.secretRef`).
pub const TOKEN_KEY: &str = "token";

/// The query parameter that carries a Docker Hub hook's token.
pub const QUERY_TOKEN: &str = "token";

/// The revision that names the remote's default branch; a Repository without `spec.git.revision`
/// follows it.
pub const REMOTE_HEAD: &str = "HEAD";

/// A commit id whose every digit is zero: the "before" of a created ref, the "after" of a deleted
/// one.
const NULL_COMMIT_DIGIT: char = '0';

/// The caller did not prove it knows the hook's token. Deliberately without detail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the request is not authorized for this hook: check the hook URL and its secret token")]
pub struct Unauthorized;

/// An authenticated payload that breaks a rule: `field` names where, `rule` what was expected and
/// what was found (a type, never a value).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid hook payload: `{field}` {rule}")]
pub struct BadPayload {
    /// Where, as a path into the payload (`ref`, `events[0].target.repository`) or a header name.
    pub field: String,
    /// The rule broken, and what to do where it is not obvious.
    pub rule: String,
}

impl BadPayload {
    fn new(field: impl Into<String>, rule: impl Into<String>) -> Self {
        BadPayload { field: field.into(), rule: rule.into() }
    }
}

/// What a hook call ended as; each maps to one HTTP status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HookOutcome {
    /// Authenticated and acted on: a reconcile or rescan was requested (202).
    Accepted,
    /// Authenticated and understood, but nothing to do: a ping, another event, an unwatched ref,
    /// a notification without pushes (200).
    Acknowledged,
    /// Unknown object, no webhook configured, missing Secret or token, bad signature (401, one
    /// response for all of them).
    Unauthorized,
    /// Authenticated, but the payload is malformed (400).
    BadRequest,
    /// The body is over [`MAX_BODY_BYTES`] (413).
    TooLarge,
    /// The Kubernetes API failed while looking up or annotating the object (503; the sender may
    /// retry).
    Unavailable,
    /// Authenticated, but a delivery already acted on ([`ReplayCache`]): ignored, answered 200 so
    /// that the sender does not retry it.
    Duplicate,
}

impl HookOutcome {
    /// Every outcome, for metric registration and tests.
    pub const ALL: [HookOutcome; 7] = [
        HookOutcome::Accepted,
        HookOutcome::Acknowledged,
        HookOutcome::Unauthorized,
        HookOutcome::BadRequest,
        HookOutcome::TooLarge,
        HookOutcome::Unavailable,
        HookOutcome::Duplicate,
    ];

    /// The HTTP status code answered.
    pub fn status(self) -> u16 {
        match self {
            HookOutcome::Accepted => 202,
            HookOutcome::Acknowledged => 200,
            HookOutcome::Unauthorized => 401,
            HookOutcome::BadRequest => 400,
            HookOutcome::TooLarge => 413,
            HookOutcome::Unavailable => 503,
            HookOutcome::Duplicate => 200,
        }
    }

    /// A stable lowercase label, for metrics and response bodies.
    pub fn as_str(self) -> &'static str {
        match self {
            HookOutcome::Accepted => "accepted",
            HookOutcome::Acknowledged => "acknowledged",
            HookOutcome::Unauthorized => "unauthorized",
            HookOutcome::BadRequest => "bad_request",
            HookOutcome::TooLarge => "too_large",
            HookOutcome::Unavailable => "unavailable",
            HookOutcome::Duplicate => "duplicate",
        }
    }
}

/// Which Git host sent a push hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GitProvider {
    /// GitHub (and GitHub Enterprise): `X-GitHub-Event`, `X-Hub-Signature-256`.
    GitHub,
    /// GitLab: `X-Gitlab-Event`, `X-Gitlab-Token`.
    GitLab,
}

/// The credential a push hook call presented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GitCredential<'a> {
    /// The value of `X-Hub-Signature-256`.
    GitHubSignature(&'a str),
    /// The value of `X-Gitlab-Token`.
    GitLabToken(&'a str),
}

impl GitCredential<'_> {
    /// The provider whose credential this is; its event header is the one read.
    pub fn provider(self) -> GitProvider {
        match self {
            GitCredential::GitHubSignature(_) => GitProvider::GitHub,
            GitCredential::GitLabToken(_) => GitProvider::GitLab,
        }
    }
}

/// The credential of a push hook call from its headers: a GitHub signature when present (it
/// covers the body, so it is preferred), else a GitLab token, else none.
pub fn git_credential<'a>(
    hub_signature_256: Option<&'a str>,
    gitlab_token: Option<&'a str>,
) -> Option<GitCredential<'a>> {
    hub_signature_256
        .map(GitCredential::GitHubSignature)
        .or(gitlab_token.map(GitCredential::GitLabToken))
}

/// Check a push hook call's credential against the Repository's token.
pub fn verify_git(
    token: &[u8],
    body: &[u8],
    credential: Option<GitCredential<'_>>,
) -> Result<GitProvider, Unauthorized> {
    match credential {
        Some(GitCredential::GitHubSignature(header)) => {
            verify_github(token, body, Some(header)).map(|()| GitProvider::GitHub)
        }
        Some(GitCredential::GitLabToken(header)) => {
            verify_gitlab(token, Some(header)).map(|()| GitProvider::GitLab)
        }
        None => Err(Unauthorized),
    }
}

/// Check `X-Hub-Signature-256: sha256=<hex>` against HMAC-SHA256(`token`, `body`) in constant
/// time. A missing or malformed header, or an empty token, is [`Unauthorized`].
pub fn verify_github(token: &[u8], body: &[u8], header: Option<&str>) -> Result<(), Unauthorized> {
    let expected = header
        .and_then(|value| value.trim().strip_prefix("sha256="))
        .and_then(|hex_mac| hex::decode(hex_mac).ok())
        .ok_or(Unauthorized)?;
    if token.is_empty() {
        return Err(Unauthorized);
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(token).map_err(|_| Unauthorized)?;
    mac.update(body);
    mac.verify_slice(&expected).map_err(|_| Unauthorized)
}

/// The `sha256=<hex>` signature GitHub sends for `body` under `token`; for tests and senders.
pub fn github_signature(token: &[u8], body: &[u8]) -> String {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(token) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC takes keys of any length"),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Check `X-Gitlab-Token` against the token in constant time.
pub fn verify_gitlab(token: &[u8], header: Option<&str>) -> Result<(), Unauthorized> {
    let presented = header.ok_or(Unauthorized)?;
    tokens_equal(token, presented.as_bytes()).then_some(()).ok_or(Unauthorized)
}

/// Check `Authorization: Bearer <token>` (scheme case-insensitive) against the token in constant
/// time.
pub fn verify_bearer(token: &[u8], authorization: Option<&str>) -> Result<(), Unauthorized> {
    let presented = authorization.and_then(bearer_credentials).ok_or(Unauthorized)?;
    tokens_equal(token, presented.as_bytes()).then_some(()).ok_or(Unauthorized)
}

/// Check the `token` query parameter (Docker Hub hooks) against the token in constant time. A
/// query with the parameter twice is refused: which one counts would be a guess.
pub fn verify_query_token(token: &[u8], query: Option<&str>) -> Result<(), Unauthorized> {
    let presented = query.and_then(single_query_token).ok_or(Unauthorized)?;
    tokens_equal(token, presented.as_bytes()).then_some(()).ok_or(Unauthorized)
}

/// Check an ImagePolicy hook call: a valid `Authorization: Bearer` header or a valid `token`
/// query parameter. Both are always checked, so the time taken does not tell which was tried.
pub fn verify_image_hook(
    token: &[u8],
    authorization: Option<&str>,
    query: Option<&str>,
) -> Result<(), Unauthorized> {
    let by_header = verify_bearer(token, authorization).is_ok();
    let by_query = verify_query_token(token, query).is_ok();
    (by_header | by_query).then_some(()).ok_or(Unauthorized)
}

fn bearer_credentials(authorization: &str) -> Option<&str> {
    let (scheme, credentials) = authorization.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| credentials.trim())
}

fn single_query_token(query: &str) -> Option<String> {
    let mut tokens = form_urlencoded::parse(query.as_bytes())
        .filter(|(key, _)| key == QUERY_TOKEN)
        .map(|(_, value)| value.into_owned());
    let first = tokens.next()?;
    tokens.next().is_none().then_some(first)
}

/// Constant-time equality of a configured and a presented token, over their SHA-256 digests so
/// the length does not show either. An empty configured token matches nothing.
fn tokens_equal(configured: &[u8], presented: &[u8]) -> bool {
    if configured.is_empty() {
        return false;
    }
    let configured = Sha256::digest(configured);
    let presented = Sha256::digest(presented);
    bool::from(configured.as_slice().ct_eq(presented.as_slice()))
}

/// Whether the namespace and name of a hook URL can name an object at all: a DNS-1123 label of
/// at most 63 characters and a DNS-1123 subdomain of at most 253. Anything else (`..`, `/`,
/// upper case, percent-decoded oddities) is refused before it reaches an API request path, with
/// the same answer as an unknown object. Written out here because the stack has no validator for
/// Kubernetes names outside the API server itself.
pub fn is_hook_target(namespace: &str, name: &str) -> bool {
    is_dns_label(namespace, 63)
        && name.len() <= 253
        && name.split('.').all(|part| is_dns_label(part, 63))
}

fn is_dns_label(value: &str, max: usize) -> bool {
    let bytes = value.as_bytes();
    let alphanumeric = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= max
        && bytes.first().is_some_and(alphanumeric)
        && bytes.last().is_some_and(alphanumeric)
        && bytes.iter().all(|b| alphanumeric(b) || *b == b'-')
}

/// A push: the ref it moved and the commit it moved to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushEvent {
    /// The full ref, such as `refs/heads/main` or `refs/tags/v1`.
    pub refname: String,
    /// The commit the ref now points to; `None` when the push deleted the ref.
    pub commit: Option<String>,
}

/// What an authenticated push hook call says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GitHookEvent {
    /// A branch or tag push.
    Push(PushEvent),
    /// GitHub's `ping`, sent when a hook is created.
    Ping,
    /// Any other event (`create`, `delete`, `Merge Request Hook`, ...): acknowledged, no effect.
    Other,
}

/// Parse a push hook call. `event` is the provider's event header (`X-GitHub-Event` or
/// `X-Gitlab-Event`). Events other than pushes and pings are not parsed at all.
pub fn parse_push(
    provider: GitProvider,
    event: Option<&str>,
    body: &[u8],
) -> Result<GitHookEvent, BadPayload> {
    match provider {
        GitProvider::GitHub => match event.ok_or_else(|| missing_header("X-GitHub-Event"))? {
            "push" => parse_github_push(&json_object(body)?).map(GitHookEvent::Push),
            "ping" => Ok(GitHookEvent::Ping),
            _ => Ok(GitHookEvent::Other),
        },
        GitProvider::GitLab => match event.ok_or_else(|| missing_header("X-Gitlab-Event"))? {
            "Push Hook" | "Tag Push Hook" => {
                parse_gitlab_push(&json_object(body)?).map(GitHookEvent::Push)
            }
            _ => Ok(GitHookEvent::Other),
        },
    }
}

fn missing_header(name: &str) -> BadPayload {
    BadPayload::new(name, "header is required: the hook sender must name the event")
}

fn parse_github_push(payload: &Map<String, Value>) -> Result<PushEvent, BadPayload> {
    let refname = full_ref(payload, "ref")?;
    let after = commit_id(payload, "after")?;
    Ok(PushEvent { refname, commit: non_null_commit(after) })
}

/// GitLab's `checkout_sha` is documented as null when the push deleted the ref; `after` is the
/// fallback and must then be a commit id.
fn parse_gitlab_push(payload: &Map<String, Value>) -> Result<PushEvent, BadPayload> {
    let refname = full_ref(payload, "ref")?;
    let checkout = match payload.get("checkout_sha") {
        None | Some(Value::Null) => None,
        Some(_) => Some(commit_id(payload, "checkout_sha")?),
    };
    let commit = match checkout {
        Some(sha) => sha,
        None => commit_id(payload, "after")?,
    };
    Ok(PushEvent { refname, commit: non_null_commit(commit) })
}

fn json_object(body: &[u8]) -> Result<Map<String, Value>, BadPayload> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(BadPayload::new(
            "body",
            format!("must be a JSON object, got {}", type_name(&other)),
        )),
        Err(_) => Err(BadPayload::new(
            "body",
            "must be JSON: set the hook's content type to application/json",
        )),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A required, non-empty string at `path` (for messages) under `key`.
fn required_str<'a>(
    object: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a str, BadPayload> {
    match object.get(key) {
        None => Err(BadPayload::new(path, "is required")),
        Some(Value::String(s)) if s.is_empty() => Err(BadPayload::new(path, "must not be empty")),
        Some(Value::String(s)) => Ok(s),
        Some(other) => {
            Err(BadPayload::new(path, format!("must be a string, got {}", type_name(other))))
        }
    }
}

/// An optional string: absent or null is `None`, a string is kept, anything else is refused.
fn optional_str<'a>(
    object: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<&'a str>, BadPayload> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => {
            Err(BadPayload::new(path, format!("must be a string, got {}", type_name(other))))
        }
    }
}

fn required_object<'a>(
    object: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a Map<String, Value>, BadPayload> {
    match object.get(key) {
        None => Err(BadPayload::new(path, "is required")),
        Some(Value::Object(map)) => Ok(map),
        Some(other) => {
            Err(BadPayload::new(path, format!("must be an object, got {}", type_name(other))))
        }
    }
}

fn optional_object<'a>(
    object: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<&'a Map<String, Value>>, BadPayload> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(other) => {
            Err(BadPayload::new(path, format!("must be an object, got {}", type_name(other))))
        }
    }
}

fn required_array<'a>(
    object: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a [Value], BadPayload> {
    match object.get(key) {
        None => Err(BadPayload::new(path, "is required")),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => {
            Err(BadPayload::new(path, format!("must be an array, got {}", type_name(other))))
        }
    }
}

fn full_ref(payload: &Map<String, Value>, key: &str) -> Result<String, BadPayload> {
    let value = required_str(payload, key, key)?;
    if !value.starts_with("refs/") || value.len() <= "refs/".len() {
        return Err(BadPayload::new(key, "must be a full ref such as refs/heads/main"));
    }
    Ok(value.to_owned())
}

fn commit_id(payload: &Map<String, Value>, key: &str) -> Result<String, BadPayload> {
    let value = required_str(payload, key, key)?;
    if !is_commit_id(value) {
        return Err(BadPayload::new(key, "must be a commit id of 40 or 64 hexadecimal digits"));
    }
    Ok(value.to_ascii_lowercase())
}

fn non_null_commit(commit: String) -> Option<String> {
    (!commit.chars().all(|c| c == NULL_COMMIT_DIGIT)).then_some(commit)
}

/// A full SHA-1 (40) or SHA-256 (64) commit id.
fn is_commit_id(value: &str) -> bool {
    matches!(value.len(), 40 | 64) && value.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether a push moved a ref that one of the `watched` revisions follows. A revision is a
/// branch name (`main` matches `refs/heads/main`), a tag name (`v1` matches `refs/tags/v1`), a
/// full ref (matched as written), [`REMOTE_HEAD`] (the default branch, whose name only the remote
/// knows, so any branch push matches) or a full commit id (never moved by a push). Exact matching
/// only: no patterns, no prefixes.
pub fn push_matches(push: &PushEvent, watched: &[&str]) -> bool {
    watched.iter().any(|revision| revision_follows_ref(revision, &push.refname))
}

fn revision_follows_ref(revision: &str, refname: &str) -> bool {
    if revision == REMOTE_HEAD {
        return refname.starts_with("refs/heads/");
    }
    if revision.starts_with("refs/") {
        return revision == refname;
    }
    if is_commit_id(revision) {
        return false;
    }
    refname.strip_prefix("refs/heads/") == Some(revision)
        || refname.strip_prefix("refs/tags/") == Some(revision)
}

/// An Application's source, as the push receiver needs it: which Repository and revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApplicationSourceRef<'a> {
    /// `spec.source.repositoryRef.name`, or for a discovered Application without one, its
    /// `sync.kuvryn.io/repository` label.
    pub repository: &'a str,
    /// `spec.source.revision`.
    pub revision: Option<&'a str>,
}

/// The revisions a push to a Repository may concern: the Repository's own `spec.git.revision`
/// (or [`REMOTE_HEAD`] without one), and the revision of every Application sourced from it
/// (defaulting to the Repository's). Deduplicated, in first-seen order.
pub fn watched_revisions<'a>(
    repository: &str,
    repository_revision: Option<&'a str>,
    applications: &[ApplicationSourceRef<'a>],
) -> Vec<&'a str> {
    let default = repository_revision.filter(|r| !r.is_empty()).unwrap_or(REMOTE_HEAD);
    let mut watched = vec![default];
    for app in applications.iter().filter(|app| app.repository == repository) {
        let revision = app.revision.filter(|r| !r.is_empty()).unwrap_or(default);
        if !watched.contains(&revision) {
            watched.push(revision);
        }
    }
    watched
}

/// What a Repository hook call asks for, once authenticated and parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushAction {
    /// Set `sync.kuvryn.io/reconcile-requested-at` on the Repository.
    RequestReconcile,
    /// Answer and do nothing.
    Acknowledge,
}

impl PushAction {
    /// The outcome answered once the action is done.
    pub fn outcome(self) -> HookOutcome {
        match self {
            PushAction::RequestReconcile => HookOutcome::Accepted,
            PushAction::Acknowledge => HookOutcome::Acknowledged,
        }
    }
}

/// Decide a parsed push hook call: a push to a watched ref requests a reconcile, anything else is
/// acknowledged.
pub fn push_action(event: &GitHookEvent, watched: &[&str]) -> PushAction {
    match event {
        GitHookEvent::Push(push) if push_matches(push, watched) => PushAction::RequestReconcile,
        GitHookEvent::Push(_) | GitHookEvent::Ping | GitHookEvent::Other => PushAction::Acknowledge,
    }
}

/// Which registry notification format a body was read as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegistryFormat {
    /// CNCF distribution (`registry:2`) notification envelope.
    Distribution,
    /// Harbor webhook, default or CloudEvents payload.
    Harbor,
    /// Docker Hub repository webhook.
    DockerHub,
}

/// One image push a registry reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageEvent {
    /// Which format it came in.
    pub format: RegistryFormat,
    /// The registry host when the payload names one (distribution's `request.host`, Harbor's
    /// `resource_url` host); Docker Hub names none.
    pub host: Option<String>,
    /// The repository within the registry, such as `library/alpine`.
    pub repository: String,
    /// The tag pushed, when the push was by tag.
    pub tag: Option<String>,
    /// The digest pushed, when the payload gives it.
    pub digest: Option<String>,
}

/// Harbor's push event type, in its default and CloudEvents payloads.
const HARBOR_PUSH: &str = "PUSH_ARTIFACT";
const HARBOR_CLOUDEVENT_PUSH: &str = "harbor.artifact.pushed";
const HARBOR_CLOUDEVENT_PREFIX: &str = "harbor.";

/// Read a registry notification: the image pushes it reports (pulls, deletes, scans and other
/// events are left out, so an empty list means "nothing to do"). A body in none of the three
/// formats is a [`BadPayload`].
pub fn parse_registry_notification(body: &[u8]) -> Result<Vec<ImageEvent>, BadPayload> {
    let payload = json_object(body)?;
    if payload.contains_key("events") {
        distribution_events(&payload)
    } else if payload.contains_key("event_data") {
        harbor_events(&payload, "event_data", HARBOR_PUSH)
    } else if is_harbor_cloudevent(&payload) {
        harbor_events(&payload, "data", HARBOR_CLOUDEVENT_PUSH)
    } else if payload.contains_key("push_data") {
        docker_hub_events(&payload)
    } else {
        Err(BadPayload::new(
            "body",
            "is not a distribution (`events`), Harbor (`event_data`, or a `harbor.*` CloudEvent) \
             or Docker Hub (`push_data`) notification",
        ))
    }
}

fn is_harbor_cloudevent(payload: &Map<String, Value>) -> bool {
    payload.contains_key("specversion")
        && matches!(payload.get("type"), Some(Value::String(t)) if t.starts_with(HARBOR_CLOUDEVENT_PREFIX))
}

fn distribution_events(payload: &Map<String, Value>) -> Result<Vec<ImageEvent>, BadPayload> {
    let mut found = Vec::new();
    for (i, item) in required_array(payload, "events", "events")?.iter().enumerate() {
        let path = format!("events[{i}]");
        let Value::Object(event) = item else {
            return Err(BadPayload::new(
                path,
                format!("must be an object, got {}", type_name(item)),
            ));
        };
        if required_str(event, "action", &format!("{path}.action"))? != "push" {
            continue;
        }
        let target = required_object(event, "target", &format!("{path}.target"))?;
        let repository = required_str(target, "repository", &format!("{path}.target.repository"))?;
        let tag = optional_str(target, "tag", &format!("{path}.target.tag"))?;
        let digest = optional_str(target, "digest", &format!("{path}.target.digest"))?;
        let host = match optional_object(event, "request", &format!("{path}.request"))? {
            Some(request) => optional_str(request, "host", &format!("{path}.request.host"))?,
            None => None,
        };
        found.push(ImageEvent {
            format: RegistryFormat::Distribution,
            host: host.map(str::to_owned),
            repository: repository.to_owned(),
            tag: tag.map(str::to_owned),
            digest: digest.map(str::to_owned),
        });
    }
    Ok(found)
}

fn harbor_events(
    payload: &Map<String, Value>,
    data_key: &str,
    push_type: &str,
) -> Result<Vec<ImageEvent>, BadPayload> {
    if required_str(payload, "type", "type")? != push_type {
        return Ok(Vec::new());
    }
    let data = required_object(payload, data_key, data_key)?;
    let repository = required_object(data, "repository", &format!("{data_key}.repository"))?;
    let full_name = required_str(
        repository,
        "repo_full_name",
        &format!("{data_key}.repository.repo_full_name"),
    )?;
    let mut found = Vec::new();
    let resources_path = format!("{data_key}.resources");
    for (i, item) in required_array(data, "resources", &resources_path)?.iter().enumerate() {
        let path = format!("{resources_path}[{i}]");
        let Value::Object(resource) = item else {
            return Err(BadPayload::new(
                path,
                format!("must be an object, got {}", type_name(item)),
            ));
        };
        // A push by digest reports the digest in `tag`.
        let tag =
            optional_str(resource, "tag", &format!("{path}.tag"))?.filter(|tag| !tag.contains(':'));
        let digest = optional_str(resource, "digest", &format!("{path}.digest"))?;
        let url = optional_str(resource, "resource_url", &format!("{path}.resource_url"))?;
        found.push(ImageEvent {
            format: RegistryFormat::Harbor,
            host: url.and_then(|url| url.split_once('/')).map(|(host, _)| host.to_owned()),
            repository: full_name.to_owned(),
            tag: tag.map(str::to_owned),
            digest: digest.map(str::to_owned),
        });
    }
    Ok(found)
}

fn docker_hub_events(payload: &Map<String, Value>) -> Result<Vec<ImageEvent>, BadPayload> {
    let push = required_object(payload, "push_data", "push_data")?;
    let tag = required_str(push, "tag", "push_data.tag")?;
    let repository = required_object(payload, "repository", "repository")?;
    let name = required_str(repository, "repo_name", "repository.repo_name")?;
    Ok(vec![ImageEvent {
        format: RegistryFormat::DockerHub,
        host: None,
        repository: name.to_owned(),
        tag: Some(tag.to_owned()),
        digest: None,
    }])
}

/// What an ImagePolicy hook call asks for: a rescan when the registry reported a push.
pub fn image_hook_outcome(events: &[ImageEvent]) -> HookOutcome {
    if events.is_empty() { HookOutcome::Acknowledged } else { HookOutcome::Accepted }
}

/// The names Docker Hub goes by in image references and notifications.
const DOCKER_HUB_HOSTS: &[&str] = &["docker.io", "index.docker.io", "registry-1.docker.io"];

/// `spec.image` as (registry host, repository), the way container runtimes read it: the first
/// component is a host when it holds a `.` or a `:` or is `localhost`; otherwise the image is
/// on Docker Hub, where a one-component name is under `library/`. Hosts are lower-cased and
/// Docker Hub's names become `docker.io`.
fn image_location(image: &str) -> (String, String) {
    let (host, repository) = match image.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first.to_ascii_lowercase(), rest.to_owned())
        }
        _ => ("docker.io".to_owned(), image.to_owned()),
    };
    let docker_hub = DOCKER_HUB_HOSTS.contains(&host.as_str());
    let host = if docker_hub { "docker.io".to_owned() } else { host };
    let repository = if docker_hub && !repository.contains('/') {
        format!("library/{repository}")
    } else {
        repository
    };
    (host, repository)
}

/// Whether the push `event` reports is to the image repository `image` (an ImagePolicy's
/// `spec.image`). Exact comparison, never a pattern: the repository must be equal, and so must
/// the registry host when the payload names one (distribution's `request.host`, Harbor's
/// `resource_url`); a Docker Hub notification matches only images on Docker Hub. A Harbor payload
/// without `resource_url` names no host and is matched on the repository alone.
pub fn event_matches_image(event: &ImageEvent, image: &str) -> bool {
    let (host, repository) = image_location(image);
    let event_host = match event.format {
        RegistryFormat::DockerHub => Some("docker.io".to_owned()),
        _ => event.host.as_deref().map(|h| {
            let h = h.to_ascii_lowercase();
            if DOCKER_HUB_HOSTS.contains(&h.as_str()) { "docker.io".to_owned() } else { h }
        }),
    };
    let event_repository =
        if event.format == RegistryFormat::DockerHub && !event.repository.contains('/') {
            format!("library/{}", event.repository)
        } else {
            event.repository.clone()
        };
    event_repository == repository && event_host.is_none_or(|h| h == host)
}

/// The ImagePolicies a notification asks to rescan, of `policies` (name, `spec.image`) in the
/// hook's namespace: the policy the hook was called for whenever the notification reports a push
/// (its token authenticated the call, and a rescan reads the registry itself), and every other
/// policy whose image one of the pushes is to ([`event_matches_image`]). Sorted, without
/// duplicates.
pub fn policies_to_rescan<'a>(
    hook_policy: &'a str,
    events: &[ImageEvent],
    policies: &[(&'a str, &'a str)],
) -> Vec<&'a str> {
    if events.is_empty() {
        return Vec::new();
    }
    let mut names: Vec<&str> = policies
        .iter()
        .filter(|(_, image)| events.iter().any(|event| event_matches_image(event, image)))
        .map(|(name, _)| *name)
        .chain(std::iter::once(hook_policy))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// How long an acted-on delivery is remembered.
pub const REPLAY_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

/// How many delivery keys are remembered (two per push: about 200 bytes each, so some 4 MB).
pub const REPLAY_CACHE_CAPACITY: usize = 20_000;

/// The keys a push is remembered by: its delivery id when the sender gave one (trimmed, at most
/// 128 bytes of it), and the SHA-256 of its body.
pub fn delivery_keys(delivery_id: Option<&str>, body: &[u8]) -> Vec<String> {
    let mut keys = Vec::with_capacity(2);
    if let Some(id) = delivery_id.map(str::trim).filter(|id| !id.is_empty()) {
        let end = (0..=id.len().min(128)).rev().find(|&i| id.is_char_boundary(i)).unwrap_or(0);
        keys.push(format!("id:{}", &id[..end]));
    }
    keys.push(format!("sha256:{}", hex::encode(Sha256::digest(body))));
    keys
}

/// A bounded, time-limited set of delivery keys (see "Replays" above). Pure: the caller passes
/// the clock. Insertion order is kept in a ring, so the oldest keys are dropped first when the
/// cache is full, and expired keys are dropped as new ones arrive.
#[derive(Debug)]
pub struct ReplayCache {
    capacity: usize,
    ttl: std::time::Duration,
    seen: std::collections::HashMap<String, std::time::Instant>,
    order: std::collections::VecDeque<(String, std::time::Instant)>,
}

impl Default for ReplayCache {
    fn default() -> Self {
        ReplayCache::new(REPLAY_CACHE_CAPACITY, REPLAY_TTL)
    }
}

impl ReplayCache {
    /// A cache of at most `capacity` keys (at least one), each kept for `ttl`.
    pub fn new(capacity: usize, ttl: std::time::Duration) -> Self {
        ReplayCache {
            capacity: capacity.max(1),
            ttl,
            seen: std::collections::HashMap::new(),
            order: std::collections::VecDeque::new(),
        }
    }

    /// How many keys are remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Claim a delivery at `now`: `true` (and every key remembered) when none of `keys` was
    /// claimed within the TTL, `false` (nothing changed) when one was: a replay.
    pub fn claim(&mut self, keys: &[String], now: std::time::Instant) -> bool {
        self.expire(now);
        let fresh = |at: &std::time::Instant| now.saturating_duration_since(*at) < self.ttl;
        if keys.iter().any(|key| self.seen.get(key).is_some_and(fresh)) {
            return false;
        }
        for key in keys {
            self.seen.insert(key.clone(), now);
            self.order.push_back((key.clone(), now));
        }
        while self.seen.len() > self.capacity && !self.order.is_empty() {
            self.pop_oldest();
        }
        // Released keys leave stale ring entries behind; keep the ring bounded too.
        if self.order.len() > 2 * self.capacity {
            let seen = &self.seen;
            self.order.retain(|(key, at)| seen.get(key) == Some(at));
        }
        true
    }

    /// Forget a claim whose delivery was not acted on (the API failed), so that the sender's
    /// retry is.
    pub fn release(&mut self, keys: &[String]) {
        for key in keys {
            self.seen.remove(key);
        }
    }

    fn expire(&mut self, now: std::time::Instant) {
        while let Some((_, at)) = self.order.front() {
            if now.saturating_duration_since(*at) < self.ttl {
                break;
            }
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        let Some((key, at)) = self.order.pop_front() else { return };
        // A released and re-claimed key has a newer entry further back; only the entry that
        // matches the map is the key's.
        if self.seen.get(&key) == Some(&at) {
            self.seen.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    // Table tests spell their row types out.
    #![allow(clippy::type_complexity)]

    use super::*;

    const TOKEN: &[u8] = b"s3cret-hook-token";
    const ZEROS: &str = "0000000000000000000000000000000000000000";
    const C1: &str = "fd489864e7642b48eaad6e3f155c10e46810ec72";

    fn github_push(refname: &str, after: &str) -> Vec<u8> {
        serde_json::json!({"ref": refname, "after": after, "repository": {"clone_url": "x"}})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn outcomes_map_to_their_http_status() {
        let cases = [
            (HookOutcome::Accepted, 202, "accepted"),
            (HookOutcome::Acknowledged, 200, "acknowledged"),
            (HookOutcome::Unauthorized, 401, "unauthorized"),
            (HookOutcome::BadRequest, 400, "bad_request"),
            (HookOutcome::TooLarge, 413, "too_large"),
            (HookOutcome::Unavailable, 503, "unavailable"),
            (HookOutcome::Duplicate, 200, "duplicate"),
        ];
        assert_eq!(cases.len(), HookOutcome::ALL.len());
        for (outcome, status, label) in cases {
            assert_eq!((outcome.status(), outcome.as_str()), (status, label), "{outcome:?}");
        }
    }

    #[test]
    fn github_signatures_are_checked_over_the_raw_body() {
        let body = github_push("refs/heads/main", C1);
        let good = github_signature(TOKEN, &body);
        let upper = format!("sha256={}", good["sha256=".len()..].to_ascii_uppercase());
        let sha1_style = good.replace("sha256=", "sha1=");
        let cases: &[(&str, &[u8], &[u8], Option<&str>, bool)] = &[
            ("the right signature", TOKEN, &body, Some(&good), true),
            ("hex digits in upper case", TOKEN, &body, Some(&upper), true),
            ("another token", b"other-token", &body, Some(&good), false),
            ("a changed body", TOKEN, b"{\"ref\":\"refs/heads/evil\"}", Some(&good), false),
            ("no header", TOKEN, &body, None, false),
            ("an empty header", TOKEN, &body, Some(""), false),
            ("no sha256= prefix", TOKEN, &body, Some(&good["sha256=".len()..]), false),
            ("the sha1 prefix", TOKEN, &body, Some(&sha1_style), false),
            ("not hex", TOKEN, &body, Some("sha256=zz"), false),
            ("a truncated MAC", TOKEN, &body, Some(&good[..good.len() - 2]), false),
            ("an empty token", b"", &body, Some(&github_signature(b"", &body)), false),
        ];
        for (what, token, body, header, ok) in cases {
            assert_eq!(verify_github(token, body, *header).is_ok(), *ok, "{what}");
        }
    }

    #[test]
    fn tokens_are_compared_exactly() {
        let cases: &[(&str, &[u8], Option<&str>, bool)] = &[
            ("the token", TOKEN, Some("s3cret-hook-token"), true),
            ("a prefix of it", TOKEN, Some("s3cret-hook"), false),
            ("it with a suffix", TOKEN, Some("s3cret-hook-token2"), false),
            ("another case", TOKEN, Some("S3CRET-HOOK-TOKEN"), false),
            ("no header", TOKEN, None, false),
            ("empty against an empty token", b"", Some(""), false),
        ];
        for (what, token, header, ok) in cases {
            assert_eq!(verify_gitlab(token, *header).is_ok(), *ok, "gitlab: {what}");
            let bearer = header.map(|h| format!("Bearer {h}"));
            assert_eq!(verify_bearer(token, bearer.as_deref()).is_ok(), *ok, "bearer: {what}");
        }
    }

    #[test]
    fn bearer_headers_need_the_bearer_scheme() {
        let cases: &[(Option<&str>, bool)] = &[
            (Some("Bearer s3cret-hook-token"), true),
            (Some("bearer s3cret-hook-token"), true),
            (Some("BEARER  s3cret-hook-token "), true),
            (Some("s3cret-hook-token"), false),
            (Some("Basic s3cret-hook-token"), false),
            (Some("Token s3cret-hook-token"), false),
            (Some("Bearer"), false),
            (None, false),
        ];
        for (header, ok) in cases {
            assert_eq!(verify_bearer(TOKEN, *header).is_ok(), *ok, "{header:?}");
        }
    }

    #[test]
    fn docker_hub_tokens_come_from_one_query_parameter() {
        let cases: &[(Option<&str>, bool)] = &[
            (Some("token=s3cret-hook-token"), true),
            (Some("a=b&token=s3cret-hook-token"), true),
            (Some("token=s3cret%2Dhook%2Dtoken"), true),
            (Some("token=s3cret-hook-token&token=s3cret-hook-token"), false),
            (Some("token=wrong"), false),
            (Some("tok=s3cret-hook-token"), false),
            (Some(""), false),
            (None, false),
        ];
        for (query, ok) in cases {
            assert_eq!(verify_query_token(TOKEN, *query).is_ok(), *ok, "{query:?}");
        }
    }

    #[test]
    fn image_hooks_accept_the_header_or_the_query_token() {
        let good_header = Some("Bearer s3cret-hook-token");
        let good_query = Some("token=s3cret-hook-token");
        let cases: &[(Option<&str>, Option<&str>, bool)] = &[
            (good_header, None, true),
            (None, good_query, true),
            (Some("Bearer wrong"), good_query, true),
            (good_header, Some("token=wrong"), true),
            (Some("Bearer wrong"), Some("token=wrong"), false),
            (None, None, false),
        ];
        for (header, query, ok) in cases {
            assert_eq!(
                verify_image_hook(TOKEN, *header, *query).is_ok(),
                *ok,
                "{header:?} {query:?}"
            );
        }
    }

    #[test]
    fn the_credential_decides_the_provider() {
        let body = b"{}";
        let signature = github_signature(TOKEN, body);
        let token = std::str::from_utf8(TOKEN).expect("utf-8");
        let cases: &[(Option<&str>, Option<&str>, Result<GitProvider, Unauthorized>)] = &[
            (Some(&signature), None, Ok(GitProvider::GitHub)),
            (None, Some(token), Ok(GitProvider::GitLab)),
            // The body-covering signature wins, and a wrong one is not rescued by the token.
            (Some("sha256=00"), Some(token), Err(Unauthorized)),
            (Some(&signature), Some("wrong"), Ok(GitProvider::GitHub)),
            (None, None, Err(Unauthorized)),
        ];
        for (hub, gitlab, expected) in cases {
            let credential = git_credential(*hub, *gitlab);
            assert_eq!(verify_git(TOKEN, body, credential), *expected, "{hub:?} {gitlab:?}");
        }
    }

    #[test]
    fn hook_urls_name_objects_by_kubernetes_rules() {
        let long_label = "a".repeat(64);
        let long_name = ["a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(63)].join(".");
        let cases: &[(&str, &str, bool)] = &[
            ("default", "platform", true),
            ("team-a", "api.v2", true),
            ("default", "a", true),
            ("", "platform", false),
            ("default", "", false),
            ("Default", "platform", false),
            ("default", "Platform", false),
            ("..", "platform", false),
            ("default", "..", false),
            ("default", "a/b", false),
            ("a.b", "platform", false),
            ("-a", "platform", false),
            ("default", "a-", false),
            ("default", "a..b", false),
            ("default", "a%2Fb", false),
            (&long_label, "platform", false),
            ("default", &long_name, false),
        ];
        for (namespace, name, ok) in cases {
            assert_eq!(is_hook_target(namespace, name), *ok, "{namespace:?}/{name:?}");
        }
    }

    fn push(refname: &str, commit: Option<&str>) -> GitHookEvent {
        GitHookEvent::Push(PushEvent { refname: refname.into(), commit: commit.map(Into::into) })
    }

    fn bad(field: &str) -> Result<GitHookEvent, String> {
        Err(field.to_owned())
    }

    #[test]
    fn github_events_are_parsed_or_acknowledged() {
        use GitProvider::GitHub;
        let cases: Vec<(&str, Option<&str>, Vec<u8>, Result<GitHookEvent, String>)> = vec![
            (
                "a branch push",
                Some("push"),
                github_push("refs/heads/main", C1),
                Ok(push("refs/heads/main", Some(C1))),
            ),
            (
                "a tag push",
                Some("push"),
                github_push("refs/tags/v1", C1),
                Ok(push("refs/tags/v1", Some(C1))),
            ),
            (
                "upper-case commit",
                Some("push"),
                github_push("refs/heads/a", &C1.to_uppercase()),
                Ok(push("refs/heads/a", Some(C1))),
            ),
            (
                "a deletion",
                Some("push"),
                github_push("refs/tags/v1", ZEROS),
                Ok(push("refs/tags/v1", None)),
            ),
            ("a ping", Some("ping"), b"{\"zen\":\"x\"}".to_vec(), Ok(GitHookEvent::Ping)),
            ("a ping is not parsed", Some("ping"), b"not json".to_vec(), Ok(GitHookEvent::Ping)),
            ("another event", Some("create"), b"[]".to_vec(), Ok(GitHookEvent::Other)),
            ("no event header", None, github_push("refs/heads/main", C1), bad("X-GitHub-Event")),
            (
                "a null ref",
                Some("push"),
                br#"{"ref":null,"after":"fd489864e7642b48eaad6e3f155c10e46810ec72"}"#.to_vec(),
                bad("ref"),
            ),
            (
                "a number ref",
                Some("push"),
                br#"{"ref":7,"after":"fd489864e7642b48eaad6e3f155c10e46810ec72"}"#.to_vec(),
                bad("ref"),
            ),
            ("an empty ref", Some("push"), github_push("", C1), bad("ref")),
            ("a short ref", Some("push"), github_push("main", C1), bad("ref")),
            ("a bare refs/", Some("push"), github_push("refs/", C1), bad("ref")),
            (
                "no ref",
                Some("push"),
                br#"{"after":"fd489864e7642b48eaad6e3f155c10e46810ec72"}"#.to_vec(),
                bad("ref"),
            ),
            (
                "a null after",
                Some("push"),
                br#"{"ref":"refs/heads/main","after":null}"#.to_vec(),
                bad("after"),
            ),
            (
                "an abbreviated after",
                Some("push"),
                github_push("refs/heads/main", "fd48986"),
                bad("after"),
            ),
            (
                "an object after",
                Some("push"),
                br#"{"ref":"refs/heads/main","after":{}}"#.to_vec(),
                bad("after"),
            ),
            ("an array body", Some("push"), b"[1]".to_vec(), bad("body")),
            ("a null body", Some("push"), b"null".to_vec(), bad("body")),
            ("a form-encoded body", Some("push"), b"payload=%7B%7D".to_vec(), bad("body")),
            ("an empty body", Some("push"), Vec::new(), bad("body")),
        ];
        for (what, event, body, expected) in cases {
            let got = parse_push(GitHub, event, &body).map_err(|e| e.field);
            assert_eq!(got, expected, "{what}");
        }
    }

    #[test]
    fn gitlab_push_and_tag_push_hooks_are_parsed() {
        use GitProvider::GitLab;
        let gitlab = |refname: &str, checkout: Value, after: &str| {
            serde_json::json!({"object_kind": "push", "ref": refname, "checkout_sha": checkout, "after": after})
                .to_string()
                .into_bytes()
        };
        let cases: Vec<(&str, Option<&str>, Vec<u8>, Result<GitHookEvent, String>)> = vec![
            (
                "a push",
                Some("Push Hook"),
                gitlab("refs/heads/main", C1.into(), C1),
                Ok(push("refs/heads/main", Some(C1))),
            ),
            (
                "a tag push",
                Some("Tag Push Hook"),
                gitlab("refs/tags/v1", C1.into(), C1),
                Ok(push("refs/tags/v1", Some(C1))),
            ),
            (
                "checkout_sha wins",
                Some("Push Hook"),
                gitlab("refs/heads/main", C1.into(), ZEROS),
                Ok(push("refs/heads/main", Some(C1))),
            ),
            (
                "a deletion",
                Some("Push Hook"),
                gitlab("refs/heads/old", Value::Null, ZEROS),
                Ok(push("refs/heads/old", None)),
            ),
            (
                "a merge request",
                Some("Merge Request Hook"),
                b"{}".to_vec(),
                Ok(GitHookEvent::Other),
            ),
            (
                "no event header",
                None,
                gitlab("refs/heads/main", C1.into(), C1),
                bad("X-Gitlab-Event"),
            ),
            (
                "a wrong-typed checkout_sha",
                Some("Push Hook"),
                gitlab("refs/heads/main", 5.into(), C1),
                bad("checkout_sha"),
            ),
            ("a short ref", Some("Push Hook"), gitlab("main", C1.into(), C1), bad("ref")),
            (
                "a null ref",
                Some("Push Hook"),
                br#"{"ref":null,"checkout_sha":null}"#.to_vec(),
                bad("ref"),
            ),
            (
                "no commit at all",
                Some("Push Hook"),
                br#"{"ref":"refs/heads/main","checkout_sha":null}"#.to_vec(),
                bad("after"),
            ),
        ];
        for (what, event, body, expected) in cases {
            let got = parse_push(GitLab, event, &body).map_err(|e| e.field);
            assert_eq!(got, expected, "{what}");
        }
    }

    #[test]
    fn bad_payload_messages_name_the_field_and_never_echo_values() {
        let body = br#"{"ref":"refs/heads/main","after":"CANARY-VALUE"}"#;
        let err = parse_push(GitProvider::GitHub, Some("push"), body).expect_err("bad after");
        let message = err.to_string();
        assert!(message.contains("`after`"), "{message}");
        assert!(message.contains("40 or 64 hexadecimal digits"), "{message}");
        assert!(!message.contains("CANARY"), "{message}");
    }

    #[test]
    fn no_input_makes_a_parser_panic() {
        // Every prefix and every one-byte corruption of valid payloads, through every parser.
        let seeds: Vec<Vec<u8>> = vec![
            github_push("refs/heads/main", C1),
            br#"{"events":[{"action":"push","target":{"repository":"a","tag":"1"},"request":{"host":"h"}}]}"#.to_vec(),
            br#"{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"tag":"1","resource_url":"h/a:1"}],"repository":{"repo_full_name":"a"}}}"#.to_vec(),
            br#"{"push_data":{"tag":"1"},"repository":{"repo_name":"a/b"}}"#.to_vec(),
        ];
        for seed in &seeds {
            let mut inputs: Vec<Vec<u8>> = (0..=seed.len()).map(|n| seed[..n].to_vec()).collect();
            for i in 0..seed.len() {
                for replacement in [b'"', b'{', b'[', b'0', b'n', 0xff] {
                    let mut changed = seed.clone();
                    changed[i] = replacement;
                    inputs.push(changed);
                }
            }
            for input in inputs {
                let _ = parse_push(GitProvider::GitHub, Some("push"), &input);
                let _ = parse_push(GitProvider::GitLab, Some("Push Hook"), &input);
                let _ = parse_registry_notification(&input);
            }
        }
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse_registry_notification(deep.as_bytes()).is_err());
    }

    #[test]
    fn pushes_match_watched_revisions_exactly() {
        let cases: &[(&str, &[&str], bool)] = &[
            ("refs/heads/main", &["main"], true),
            ("refs/tags/v1", &["v1"], true),
            ("refs/heads/main", &["refs/heads/main"], true),
            ("refs/tags/v1", &["refs/heads/v1"], false),
            ("refs/heads/main", &["develop", "main"], true),
            ("refs/heads/main", &["mai"], false),
            ("refs/heads/main", &["main2"], false),
            ("refs/heads/release/1.x", &["release/1.x"], true),
            ("refs/heads/release/1.x", &["release"], false),
            ("refs/heads/main", &["ma*"], false),
            ("refs/heads/main", &["heads/main"], false),
            ("refs/heads/main", &[C1], false),
            ("refs/heads/fd489864e7642b48eaad6e3f155c10e46810ec72", &[C1], false),
            ("refs/heads/anything", &[REMOTE_HEAD], true),
            ("refs/tags/v1", &[REMOTE_HEAD], false),
            ("refs/heads/main", &[], false),
        ];
        for (refname, watched, matches) in cases {
            let push = PushEvent { refname: (*refname).into(), commit: Some(C1.into()) };
            assert_eq!(push_matches(&push, watched), *matches, "{refname} against {watched:?}");
        }
    }

    #[test]
    fn watched_revisions_cover_the_repository_and_its_applications() {
        let app = |repository, revision| ApplicationSourceRef { repository, revision };
        let cases: Vec<(Option<&str>, Vec<ApplicationSourceRef>, Vec<&str>)> = vec![
            (Some("main"), vec![], vec!["main"]),
            (None, vec![], vec![REMOTE_HEAD]),
            (Some(""), vec![], vec![REMOTE_HEAD]),
            (Some("main"), vec![app("platform", None)], vec!["main"]),
            (
                Some("main"),
                vec![app("platform", Some("v2")), app("platform", Some("v2"))],
                vec!["main", "v2"],
            ),
            (Some("main"), vec![app("other", Some("v3"))], vec!["main"]),
            (
                None,
                vec![app("platform", Some("dev")), app("platform", None)],
                vec![REMOTE_HEAD, "dev"],
            ),
        ];
        for (revision, apps, expected) in cases {
            assert_eq!(
                watched_revisions("platform", revision, &apps),
                expected,
                "{revision:?} {apps:?}"
            );
        }
    }

    #[test]
    fn only_a_watched_push_requests_a_reconcile() {
        let cases: Vec<(GitHookEvent, PushAction)> = vec![
            (push("refs/heads/main", Some(C1)), PushAction::RequestReconcile),
            (push("refs/heads/main", None), PushAction::RequestReconcile),
            (push("refs/heads/feature", Some(C1)), PushAction::Acknowledge),
            (GitHookEvent::Ping, PushAction::Acknowledge),
            (GitHookEvent::Other, PushAction::Acknowledge),
        ];
        for (event, action) in cases {
            assert_eq!(push_action(&event, &["main"]), action, "{event:?}");
        }
        assert_eq!(PushAction::RequestReconcile.outcome(), HookOutcome::Accepted);
        assert_eq!(PushAction::Acknowledge.outcome(), HookOutcome::Acknowledged);
    }

    fn image(
        format: RegistryFormat,
        host: Option<&str>,
        repo: &str,
        tag: Option<&str>,
        digest: Option<&str>,
    ) -> ImageEvent {
        ImageEvent {
            format,
            host: host.map(Into::into),
            repository: repo.into(),
            tag: tag.map(Into::into),
            digest: digest.map(Into::into),
        }
    }

    #[test]
    fn registry_notifications_yield_their_pushes() {
        use RegistryFormat::*;
        let cases: Vec<(&str, &str, Result<Vec<ImageEvent>, String>)> = vec![
            (
                "distribution push and pull",
                r#"{"events":[
                    {"action":"push","target":{"repository":"acme/api","tag":"1.2.3","digest":"sha256:ab"},"request":{"host":"reg:5000"}},
                    {"action":"pull","target":{"repository":"acme/api","tag":"1.2.3"}}]}"#,
                Ok(vec![image(
                    Distribution,
                    Some("reg:5000"),
                    "acme/api",
                    Some("1.2.3"),
                    Some("sha256:ab"),
                )]),
            ),
            (
                "distribution without tag or request",
                r#"{"events":[{"action":"push","target":{"repository":"a","digest":"sha256:1"}}]}"#,
                Ok(vec![image(Distribution, None, "a", None, Some("sha256:1"))]),
            ),
            (
                "distribution pulls only",
                r#"{"events":[{"action":"pull","target":{"repository":"a"}}]}"#,
                Ok(vec![]),
            ),
            ("distribution empty", r#"{"events":[]}"#, Ok(vec![])),
            ("distribution events null", r#"{"events":null}"#, Err("events".into())),
            ("distribution event not an object", r#"{"events":[3]}"#, Err("events[0]".into())),
            (
                "distribution action missing",
                r#"{"events":[{"target":{}}]}"#,
                Err("events[0].action".into()),
            ),
            (
                "distribution repository null",
                r#"{"events":[{"action":"push","target":{"repository":null}}]}"#,
                Err("events[0].target.repository".into()),
            ),
            (
                "distribution repository empty",
                r#"{"events":[{"action":"push","target":{"repository":""}}]}"#,
                Err("events[0].target.repository".into()),
            ),
            (
                "distribution tag a number",
                r#"{"events":[{"action":"push","target":{"repository":"a","tag":1}}]}"#,
                Err("events[0].target.tag".into()),
            ),
            (
                "distribution request a string",
                r#"{"events":[{"action":"push","target":{"repository":"a"},"request":"x"}]}"#,
                Err("events[0].request".into()),
            ),
            (
                "harbor push",
                r#"{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"tag":"v2","digest":"sha256:cd","resource_url":"harbor.local/lib/api:v2"}],"repository":{"repo_full_name":"lib/api"}}}"#,
                Ok(vec![image(
                    Harbor,
                    Some("harbor.local"),
                    "lib/api",
                    Some("v2"),
                    Some("sha256:cd"),
                )]),
            ),
            (
                "harbor push by digest",
                r#"{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"tag":"sha256:cd","digest":"sha256:cd"}],"repository":{"repo_full_name":"lib/api"}}}"#,
                Ok(vec![image(Harbor, None, "lib/api", None, Some("sha256:cd"))]),
            ),
            (
                "harbor cloudevent push",
                r#"{"specversion":"1.0","type":"harbor.artifact.pushed","data":{"resources":[{"tag":"v2"}],"repository":{"repo_full_name":"lib/api"}}}"#,
                Ok(vec![image(Harbor, None, "lib/api", Some("v2"), None)]),
            ),
            ("harbor delete", r#"{"type":"DELETE_ARTIFACT","event_data":{}}"#, Ok(vec![])),
            (
                "harbor cloudevent scan",
                r#"{"specversion":"1.0","type":"harbor.scan.completed","data":{}}"#,
                Ok(vec![]),
            ),
            ("harbor type null", r#"{"type":null,"event_data":{}}"#, Err("type".into())),
            (
                "harbor repo name missing",
                r#"{"type":"PUSH_ARTIFACT","event_data":{"resources":[],"repository":{}}}"#,
                Err("event_data.repository.repo_full_name".into()),
            ),
            (
                "harbor resources an object",
                r#"{"type":"PUSH_ARTIFACT","event_data":{"resources":{},"repository":{"repo_full_name":"a"}}}"#,
                Err("event_data.resources".into()),
            ),
            (
                "docker hub push",
                r#"{"push_data":{"tag":"latest","pusher":"x"},"repository":{"repo_name":"acme/api"}}"#,
                Ok(vec![image(DockerHub, None, "acme/api", Some("latest"), None)]),
            ),
            (
                "docker hub tag null",
                r#"{"push_data":{"tag":null},"repository":{"repo_name":"a/b"}}"#,
                Err("push_data.tag".into()),
            ),
            (
                "docker hub repository missing",
                r#"{"push_data":{"tag":"1"}}"#,
                Err("repository".into()),
            ),
            (
                "docker hub repo_name a number",
                r#"{"push_data":{"tag":"1"},"repository":{"repo_name":1}}"#,
                Err("repository.repo_name".into()),
            ),
            ("an unknown shape", r#"{"hello":"world"}"#, Err("body".into())),
            (
                "a foreign cloudevent",
                r#"{"specversion":"1.0","type":"com.example.x","data":{}}"#,
                Err("body".into()),
            ),
            ("not json", "<xml/>", Err("body".into())),
        ];
        for (what, body, expected) in cases {
            let got = parse_registry_notification(body.as_bytes()).map_err(|e| e.field);
            assert_eq!(got, expected, "{what}");
        }
    }

    #[test]
    fn an_image_hook_rescans_only_for_pushes() {
        assert_eq!(image_hook_outcome(&[]), HookOutcome::Acknowledged);
        let one = image(RegistryFormat::DockerHub, None, "a/b", Some("1"), None);
        assert_eq!(image_hook_outcome(&[one]), HookOutcome::Accepted);
    }

    #[test]
    fn pushes_match_policies_by_registry_and_repository() {
        // (what, payload, (policy name, spec.image) expected to be rescanned besides the
        // hook's own policy "hooked")
        let policies: Vec<(&str, &str)> = vec![
            ("hooked", "reg.example:5000/other/thing"),
            ("api", "reg.example:5000/acme/api"),
            ("api-upper-host", "REG.example:5000/acme/api"),
            ("api-other-registry", "ghcr.io/acme/api"),
            ("web", "reg.example:5000/acme/web"),
            ("hub-nginx", "nginx"),
            ("hub-nginx-long", "docker.io/library/nginx"),
            ("hub-user", "index.docker.io/alice/tool"),
            ("harbor", "harbor.example/library/app"),
        ];
        let cases: Vec<(&str, &str, Vec<&str>)> = vec![
            (
                "distribution envelope: every push's repository and request.host",
                r#"{"events":[
                    {"action":"push","target":{"repository":"acme/api","tag":"1.3.0","digest":"sha256:ab"},"request":{"host":"reg.example:5000"}},
                    {"action":"pull","target":{"repository":"acme/web","tag":"1"},"request":{"host":"reg.example:5000"}}]}"#,
                vec!["api", "api-upper-host", "hooked"],
            ),
            (
                "distribution push from another host matches nothing else",
                r#"{"events":[{"action":"push","target":{"repository":"acme/api","tag":"1"},"request":{"host":"mirror.example"}}]}"#,
                vec!["hooked"],
            ),
            (
                "harbor default payload",
                r#"{"type":"PUSH_ARTIFACT","occur_at":1,"operator":"admin","event_data":{
                    "resources":[{"digest":"sha256:cd","tag":"2.0","resource_url":"harbor.example/library/app:2.0"}],
                    "repository":{"name":"app","namespace":"library","repo_full_name":"library/app","repo_type":"private"}}}"#,
                vec!["harbor", "hooked"],
            ),
            (
                "docker hub user repository",
                r#"{"callback_url":"https://registry.hub.docker.com/u/alice/tool/hook/x/","push_data":{"pushed_at":1,"pusher":"alice","tag":"latest"},
                    "repository":{"repo_name":"alice/tool","name":"tool","namespace":"alice"}}"#,
                vec!["hooked", "hub-user"],
            ),
            (
                "docker hub official image",
                r#"{"push_data":{"tag":"1.27"},"repository":{"repo_name":"nginx"}}"#,
                vec!["hooked", "hub-nginx", "hub-nginx-long"],
            ),
            (
                "only a pull: nothing, not even the hook's policy",
                r#"{"events":[{"action":"pull","target":{"repository":"acme/api","tag":"1"}}]}"#,
                vec![],
            ),
        ];
        for (what, body, expected) in cases {
            let events = parse_registry_notification(body.as_bytes()).expect(what);
            assert_eq!(policies_to_rescan("hooked", &events, &policies), expected, "{what}");
        }
        // A Harbor payload without resource_url matches on the repository alone.
        let no_host = image(RegistryFormat::Harbor, None, "library/app", Some("1"), None);
        assert!(event_matches_image(&no_host, "harbor.example/library/app"));
        assert!(!event_matches_image(&no_host, "harbor.example/library/app2"));
    }

    #[test]
    fn delivery_keys_name_the_id_and_the_body() {
        let body = b"{\"ref\":\"refs/heads/main\"}";
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(body)));
        let long = "x".repeat(300);
        let cases: [(Option<&str>, Vec<String>); 5] = [
            (
                Some("72d3162e-cc78-11e3-81ab-4c9367dc0958"),
                vec!["id:72d3162e-cc78-11e3-81ab-4c9367dc0958".to_owned(), digest.clone()],
            ),
            (Some("  abc \t"), vec!["id:abc".to_owned(), digest.clone()]),
            (Some(""), vec![digest.clone()]),
            (None, vec![digest.clone()]),
            (Some(&long), vec![format!("id:{}", "x".repeat(128)), digest.clone()]),
        ];
        for (id, expected) in cases {
            assert_eq!(delivery_keys(id, body), expected, "{id:?}");
        }
        assert_ne!(delivery_keys(None, b"other"), delivery_keys(None, body));
    }

    #[test]
    fn the_replay_cache_refuses_a_key_within_its_ttl() {
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let keys = |ks: &[&str]| ks.iter().map(|k| (*k).to_owned()).collect::<Vec<_>>();
        // (keys, seconds after t0, expected claim result), run in order on one cache
        // (capacity 3, ttl 60 s).
        let steps: Vec<(Vec<String>, u64, bool)> = vec![
            (keys(&["id:a", "body:1"]), 0, true),
            (keys(&["id:a", "body:1"]), 1, false), // the same delivery again
            (keys(&["id:b", "body:1"]), 2, false), // a made-up id, the same signed body
            (keys(&["id:a", "body:2"]), 3, false), // the same id, another body
            (keys(&["id:c", "body:3"]), 4, true),  // a new delivery: capacity evicts id:a
            (keys(&["id:a"]), 5, true),            // evicted, so acted on again
            (keys(&["id:c"]), 65, true),           // expired after the ttl
            (keys(&["id:c"]), 66, false),
        ];
        let mut cache = ReplayCache::new(3, s(60));
        for (index, (ks, at, expected)) in steps.iter().enumerate() {
            assert_eq!(cache.claim(ks, t0 + s(*at)), *expected, "step {index}: {ks:?} at {at}s");
            assert!(cache.len() <= 3, "step {index}: {} keys", cache.len());
        }
    }

    #[test]
    fn a_released_claim_can_be_claimed_again() {
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let keys = vec!["id:a".to_owned(), "sha256:x".to_owned()];
        let mut cache = ReplayCache::new(10, Duration::from_secs(60));
        assert!(cache.claim(&keys, t0));
        cache.release(&keys);
        assert!(cache.is_empty());
        assert!(cache.claim(&keys, t0 + Duration::from_secs(1)), "a retry after a failure");
        assert!(!cache.claim(&keys, t0 + Duration::from_secs(2)));
        assert!(cache.claim(&["id:z".to_owned()], t0 + Duration::from_secs(3)));
        assert!(!cache.claim(&keys, t0 + Duration::from_secs(4)));
    }
}
