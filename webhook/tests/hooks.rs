//! The push and image hook receivers against a real (sandbox) API server, over real HTTP: only an
//! authenticated push to a followed ref, or an authenticated registry push, annotates the
//! object; every refusal for an unknown or unauthenticated hook is the same 401 and changes
//! nothing; oversize bodies are 413 and malformed ones 400; and the RBAC the module documents is
//! enough (and needed).

// Table tests spell their row types out.
#![allow(clippy::type_complexity)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::response::Response;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use ksync_sandbox::{Sandbox, SandboxOptions};
use kube::Resource;
use kube::api::{Api, PostParams};
use kuvryn_sync_api::{Application, ImagePolicy, Repository, keys};
use kuvryn_sync_core::receiver::{HookOutcome, github_signature};
use kuvryn_sync_webhook::hooks::{self, HookReport, HookState};
use serde_json::{Value, json};

const REPO_TOKEN: &str = "repo-hook-token-7f3a";
const IMAGE_TOKEN: &str = "image-hook-token-91c2";
const C1: &str = "fd489864e7642b48eaad6e3f155c10e46810ec72";

/// A sandbox with our CRDs, a namespace, and the receivers served on loopback.
struct Harness {
    sandbox: Sandbox,
    namespace: String,
    base: String,
    http: reqwest::Client,
    reports: Arc<Mutex<Vec<HookReport>>>,
}

impl Harness {
    async fn start() -> Harness {
        let sandbox = Sandbox::start(SandboxOptions::default()).await.expect("sandbox");
        sandbox.install_crds(&kuvryn_sync_api::crds()).await.expect("CRDs");
        let namespace = sandbox.create_namespace("hooks").await.expect("namespace");
        let client = sandbox.client().await.expect("client");
        let (base, reports) = serve(client).await;
        let http = reqwest::Client::builder().build().expect("http client");
        Harness { sandbox, namespace, base, http, reports }
    }

    async fn admin(&self) -> kube::Client {
        self.sandbox.client().await.expect("client")
    }

    async fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.admin().await, &self.namespace)
    }

    async fn create<K>(&self, object: Value)
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
    {
        let object: K = serde_json::from_value(object).expect("object");
        self.api::<K>().await.create(&PostParams::default(), &object).await.expect("create");
    }

    /// A Secret holding `token` under `data` (the sandbox does not fold `stringData` into
    /// `data` as kube-apiserver does).
    async fn secret(&self, name: &str, token: &str) {
        let mut secret = Secret::default();
        secret.metadata.name = Some(name.into());
        secret.data = Some([("token".to_owned(), ByteString(token.as_bytes().to_vec()))].into());
        self.api::<Secret>().await.create(&PostParams::default(), &secret).await.expect("secret");
    }

    /// `(resourceVersion, reconcile-requested-at)` of a Repository or ImagePolicy.
    async fn state<K>(&self, name: &str) -> (String, Option<String>)
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned,
    {
        let object = self.api::<K>().await.get(name).await.expect("get");
        let meta = object.meta();
        let requested =
            meta.annotations.as_ref().and_then(|a| a.get(keys::RECONCILE_REQUESTED_AT)).cloned();
        (meta.resource_version.clone().expect("resourceVersion"), requested)
    }

    async fn post(&self, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> (u16, String) {
        let mut request = self.http.post(format!("{}{path}", self.base)).body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("send");
        let status = response.status().as_u16();
        (status, response.text().await.expect("body"))
    }

    fn repo_path(&self, name: &str) -> String {
        format!("/hooks/repositories/{}/{name}", self.namespace)
    }

    fn image_path(&self, name: &str) -> String {
        format!("/hooks/imagepolicies/{}/{name}", self.namespace)
    }

    /// Every answer so far carried a report whose outcome maps to the status answered.
    fn assert_reports_match(&self, statuses: &[u16]) {
        let reports = self.reports.lock().expect("reports").clone();
        let reported: Vec<u16> = reports.iter().map(|r| r.outcome.status()).collect();
        assert_eq!(reported, statuses, "reports {reports:?}");
    }
}

/// Serve the receivers on a loopback port with a layer that records each [`HookReport`], as the
/// server's metrics layer does.
async fn serve(client: kube::Client) -> (String, Arc<Mutex<Vec<HookReport>>>) {
    let reports = Arc::new(Mutex::new(Vec::new()));
    let record = reports.clone();
    let app = hooks::router(HookState::new(client)).layer(axum::middleware::map_response(
        move |response: Response| {
            let record = record.clone();
            async move {
                if let Some(report) = response.extensions().get::<HookReport>() {
                    record.lock().expect("reports").push(*report);
                }
                response
            }
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), reports)
}

fn repository(name: &str, revision: &str, secret: Option<&str>) -> Value {
    let mut spec =
        json!({"git": {"url": "https://git.example.invalid/platform.git", "revision": revision}});
    if let Some(secret) = secret {
        spec["webhook"] = json!({"secretRef": {"name": secret}});
    }
    json!({"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
           "metadata": {"name": name}, "spec": spec})
}

fn application(name: &str, repository: &str, revision: Option<&str>, label: bool) -> Value {
    let mut source =
        json!({"repositoryRef": {"name": repository}, "path": "apps", "render": {"type": "yaml"}});
    if let Some(revision) = revision {
        source["revision"] = json!(revision);
    }
    let mut metadata = json!({"name": name});
    if label {
        metadata["labels"] = json!({keys::REPOSITORY: repository});
    }
    json!({"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application", "metadata": metadata,
           "spec": {"source": source, "destination": {"namespace": "default"}}})
}

fn github_push(refname: &str) -> Vec<u8> {
    json!({"ref": refname, "before": "0".repeat(40), "after": C1,
           "repository": {"clone_url": "https://git.example.invalid/platform.git"}})
    .to_string()
    .into_bytes()
}

fn gitlab_push(refname: &str) -> Vec<u8> {
    json!({"object_kind": "push", "ref": refname, "checkout_sha": C1, "after": C1})
        .to_string()
        .into_bytes()
}

/// Set up Repository `platform` (revision main, webhook), an Application following it at
/// `release-1`, a discovered one at tag `v2`, and an Application of another Repository at
/// `other-branch`.
async fn repositories(h: &Harness) {
    h.secret("platform-hook", REPO_TOKEN).await;
    h.create::<Repository>(repository("platform", "main", Some("platform-hook"))).await;
    h.create::<Repository>(repository("no-hook", "main", None)).await;
    h.create::<Repository>(repository("lost-secret", "main", Some("does-not-exist"))).await;
    h.create::<Repository>(repository("other", "main", None)).await;
    h.create::<Application>(application("payments", "platform", Some("release-1"), false)).await;
    h.create::<Application>(application("search", "platform", Some("v2"), true)).await;
    h.create::<Application>(application("billing", "other", Some("other-branch"), false)).await;
}

#[tokio::test]
async fn repository_hooks_request_a_reconcile_only_for_authenticated_watched_pushes() {
    let h = Harness::start().await;
    repositories(&h).await;
    let path = h.repo_path("platform");
    let mut statuses = Vec::new();

    // A signed GitHub push to the Repository's own revision: 202 and the annotation.
    let body = github_push("refs/heads/main");
    let signature = github_signature(REPO_TOKEN.as_bytes(), &body);
    let before = h.state::<Repository>("platform").await;
    let (status, answer) = h
        .post(&path, &[("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &signature)], body)
        .await;
    assert_eq!(status, 202, "{answer}");
    statuses.push(status);
    let after = h.state::<Repository>("platform").await;
    let requested = after.1.clone().expect("reconcile-requested-at set");
    requested.parse::<jiff::Timestamp>().expect("an RFC 3339 time");
    assert_ne!(before.0, after.0);

    // Every unauthenticated or unknown hook: the same 401 body, nothing written.
    let body = github_push("refs/heads/main");
    let signed = github_signature(REPO_TOKEN.as_bytes(), &body);
    let wrong = github_signature(b"not-the-token", &body);
    let mut tampered = body.clone();
    tampered[10] ^= 1;
    let unauthorized: Vec<(&str, String, Vec<(&str, &str)>, Vec<u8>)> = vec![
        (
            "a tampered body",
            path.clone(),
            vec![("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &signed)],
            tampered,
        ),
        (
            "a wrong token",
            path.clone(),
            vec![("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &wrong)],
            body.clone(),
        ),
        ("no signature", path.clone(), vec![("X-GitHub-Event", "push")], body.clone()),
        (
            "a wrong GitLab token",
            path.clone(),
            vec![("X-Gitlab-Event", "Push Hook"), ("X-Gitlab-Token", "nope")],
            gitlab_push("refs/heads/main"),
        ),
        (
            "an unknown Repository",
            h.repo_path("nobody"),
            vec![("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &signed)],
            body.clone(),
        ),
        (
            "a Repository without webhook",
            h.repo_path("no-hook"),
            vec![("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &signed)],
            body.clone(),
        ),
        (
            "a missing Secret",
            h.repo_path("lost-secret"),
            vec![("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &signed)],
            body.clone(),
        ),
        (
            "an unknown namespace",
            "/hooks/repositories/no-such-ns/platform".into(),
            vec![("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &signed)],
            body.clone(),
        ),
        (
            "an invalid name",
            format!("/hooks/repositories/{}/Not_A_Name", h.namespace),
            vec![("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &signed)],
            body.clone(),
        ),
    ];
    let watched = ["platform", "no-hook", "lost-secret"];
    let mut versions = Vec::new();
    for name in watched {
        versions.push(h.state::<Repository>(name).await);
    }
    let mut bodies = Vec::new();
    for (what, path, headers, body) in unauthorized {
        let (status, answer) = h.post(&path, &headers, body).await;
        assert_eq!(status, 401, "{what}: {answer}");
        statuses.push(status);
        bodies.push((what, answer));
    }
    for (what, answer) in &bodies {
        assert_eq!(answer, &bodies[0].1, "{what} answers like {}", bodies[0].0);
    }
    assert!(!bodies[0].1.contains(REPO_TOKEN));
    for (name, version) in watched.iter().zip(&versions) {
        assert_eq!(&h.state::<Repository>(name).await, version, "{name} unchanged");
    }

    // Oversize: 413 before anything else, known Repository or not.
    let huge = vec![b' '; 2 << 20];
    for target in [path.clone(), h.repo_path("nobody")] {
        let (status, answer) = h
            .post(
                &target,
                &[("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &signed)],
                huge.clone(),
            )
            .await;
        assert_eq!(status, 413, "{target}: {answer}");
        statuses.push(status);
    }

    // Authenticated but malformed: 400 naming the field; nothing written.
    let malformed: Vec<(&str, Vec<u8>, &str)> = vec![
        ("not JSON", b"{\"ref\": ".to_vec(), "`body`"),
        (
            "a null ref",
            br#"{"ref":null,"after":"fd489864e7642b48eaad6e3f155c10e46810ec72"}"#.to_vec(),
            "`ref`",
        ),
        (
            "a number ref",
            br#"{"ref":42,"after":"fd489864e7642b48eaad6e3f155c10e46810ec72"}"#.to_vec(),
            "`ref`",
        ),
        ("an array after", br#"{"ref":"refs/heads/main","after":[]}"#.to_vec(), "`after`"),
        (
            "an empty ref",
            br#"{"ref":"","after":"fd489864e7642b48eaad6e3f155c10e46810ec72"}"#.to_vec(),
            "`ref`",
        ),
    ];
    let unchanged = h.state::<Repository>("platform").await;
    for (what, body, field) in malformed {
        let signature = github_signature(REPO_TOKEN.as_bytes(), &body);
        let (status, answer) = h
            .post(&path, &[("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &signature)], body)
            .await;
        assert_eq!(status, 400, "{what}: {answer}");
        assert!(answer.contains(field), "{what}: {answer}");
        statuses.push(status);
    }
    assert_eq!(h.state::<Repository>("platform").await, unchanged);

    // Authenticated, but nothing follows the ref or there is nothing to do: 200, nothing written.
    let acknowledged: Vec<(&str, &str, Vec<u8>)> = vec![
        ("a push to an unwatched branch", "push", github_push("refs/heads/feature")),
        (
            "a push to another Repository's Application's branch",
            "push",
            github_push("refs/heads/other-branch"),
        ),
        ("a tag nothing follows", "push", github_push("refs/tags/v9")),
        ("a ping", "ping", br#"{"zen":"Keep it logically awesome.","hook_id":1}"#.to_vec()),
        ("a create event", "create", br#"{"ref":"v2","ref_type":"tag"}"#.to_vec()),
    ];
    for (what, event, body) in acknowledged {
        let signature = github_signature(REPO_TOKEN.as_bytes(), &body);
        let (status, answer) = h
            .post(&path, &[("X-GitHub-Event", event), ("X-Hub-Signature-256", &signature)], body)
            .await;
        assert_eq!(status, 200, "{what}: {answer}");
        statuses.push(status);
        assert_eq!(h.state::<Repository>("platform").await, unchanged, "{what}");
    }

    // GitLab pushes to the revisions the Applications follow: a hand-made one's branch, and a
    // discovered one's tag.
    let gitlab: Vec<(&str, &str)> =
        vec![("Push Hook", "refs/heads/release-1"), ("Tag Push Hook", "refs/tags/v2")];
    for (event, refname) in gitlab {
        let before = h.state::<Repository>("platform").await;
        let (status, answer) = h
            .post(
                &path,
                &[("X-Gitlab-Event", event), ("X-Gitlab-Token", REPO_TOKEN)],
                gitlab_push(refname),
            )
            .await;
        assert_eq!(status, 202, "{event} {refname}: {answer}");
        statuses.push(status);
        let after = h.state::<Repository>("platform").await;
        assert_ne!(before.0, after.0, "{event} {refname} annotated");
        assert!(after.1.is_some());
    }
    // The other Repository was never touched.
    assert!(h.state::<Repository>("other").await.1.is_none());

    h.assert_reports_match(&statuses);
}

#[tokio::test]
async fn a_replayed_gitlab_push_is_a_duplicate_and_changes_nothing() {
    let h = Harness::start().await;
    repositories(&h).await;
    let path = h.repo_path("platform");
    let uuid = "1b2c3d4e-0000-4000-8000-00000000abcd";
    let push = |uuid: &'static str, refname: &str| {
        let headers = vec![
            ("X-Gitlab-Event", "Push Hook"),
            ("X-Gitlab-Token", REPO_TOKEN),
            ("X-Gitlab-Event-UUID", uuid),
        ];
        (headers, gitlab_push(refname))
    };
    let (headers, body) = push(uuid, "refs/heads/main");
    let (status, answer) = h.post(&path, &headers, body).await;
    assert_eq!(status, 202, "{answer}");
    let acted = h.state::<Repository>("platform").await;
    assert!(acted.1.is_some());

    // The same event UUID with another body, and the same body under another UUID: both replays.
    for (uuid, refname) in [(uuid, "refs/heads/release-1"), ("another-uuid", "refs/heads/main")] {
        let (headers, body) = push(uuid, refname);
        let (status, answer) = h.post(&path, &headers, body).await;
        assert_eq!(status, 200, "{uuid} {refname}: {answer}");
        let answer: Value = serde_json::from_str(&answer).expect("json");
        assert_eq!(answer["outcome"], "duplicate", "{uuid} {refname}");
        assert_eq!(h.state::<Repository>("platform").await, acted, "{uuid} {refname}");
    }
    // A new event is acted on.
    let (headers, body) = push("a-new-uuid", "refs/heads/release-1");
    assert_eq!(h.post(&path, &headers, body).await.0, 202);
    assert_ne!(h.state::<Repository>("platform").await.0, acted.0);
    h.assert_reports_match(&[202, 200, 200, 202]);
}

fn distribution(action: &str) -> Vec<u8> {
    json!({"events": [{"id": "1", "action": action,
        "target": {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                   "repository": "acme/api", "tag": "1.4.0", "digest": "sha256:0123"},
        "request": {"host": "registry.example.invalid", "method": "PUT"}}]})
    .to_string()
    .into_bytes()
}

fn harbor() -> Vec<u8> {
    json!({"type": "PUSH_ARTIFACT", "occur_at": 1, "operator": "ci",
        "event_data": {"resources": [{"digest": "sha256:0123", "tag": "1.4.0",
                                      "resource_url": "harbor.example.invalid/acme/api:1.4.0"}],
                       "repository": {"name": "api", "namespace": "acme",
                                      "repo_full_name": "acme/api"}}})
    .to_string()
    .into_bytes()
}

fn docker_hub() -> Vec<u8> {
    json!({"callback_url": "https://hub.example.invalid/cb",
           "push_data": {"pushed_at": 1, "pusher": "ci", "tag": "1.4.0"},
           "repository": {"repo_name": "acme/api", "name": "api", "namespace": "acme"}})
    .to_string()
    .into_bytes()
}

fn image_policy(name: &str, secret: Option<&str>) -> Value {
    let mut spec = json!({"image": "registry.example.invalid/acme/api",
                          "policy": {"semver": {"range": ">=1.0.0"}}});
    if let Some(secret) = secret {
        spec["webhook"] = json!({"secretRef": {"name": secret}});
    }
    json!({"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "ImagePolicy",
           "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn image_policy_hooks_request_a_rescan_for_registry_pushes() {
    let h = Harness::start().await;
    h.secret("api-hook", IMAGE_TOKEN).await;
    h.create::<ImagePolicy>(image_policy("api", Some("api-hook"))).await;
    h.create::<ImagePolicy>(image_policy("no-hook", None)).await;
    let path = h.image_path("api");
    let bearer = format!("Bearer {IMAGE_TOKEN}");
    let mut statuses = Vec::new();

    let accepted: Vec<(&str, String, Vec<(&str, &str)>, Vec<u8>)> = vec![
        ("distribution", path.clone(), vec![("Authorization", &bearer)], distribution("push")),
        ("Harbor", path.clone(), vec![("Authorization", &bearer)], harbor()),
        ("Docker Hub", format!("{path}?token={IMAGE_TOKEN}"), vec![], docker_hub()),
    ];
    for (what, target, headers, body) in accepted {
        let before = h.state::<ImagePolicy>("api").await;
        let (status, answer) = h.post(&target, &headers, body).await;
        assert_eq!(status, 202, "{what}: {answer}");
        statuses.push(status);
        let after = h.state::<ImagePolicy>("api").await;
        assert_ne!(before.0, after.0, "{what} annotated");
        after.1.expect("annotation").parse::<jiff::Timestamp>().expect("RFC 3339");
    }

    let unchanged = h.state::<ImagePolicy>("api").await;
    let (status, answer) = h.post(&path, &[("Authorization", &bearer)], distribution("pull")).await;
    assert_eq!(status, 200, "pull only: {answer}");
    statuses.push(status);

    let unauthorized: Vec<(&str, String, Vec<(&str, &str)>)> = vec![
        ("a wrong token", path.clone(), vec![("Authorization", "Bearer wrong")]),
        ("the token without Bearer", path.clone(), vec![("Authorization", IMAGE_TOKEN)]),
        ("a wrong query token", format!("{path}?token=wrong"), vec![]),
        ("no token", path.clone(), vec![]),
        ("an unknown ImagePolicy", h.image_path("nobody"), vec![("Authorization", &bearer)]),
        (
            "an ImagePolicy without webhook",
            h.image_path("no-hook"),
            vec![("Authorization", &bearer)],
        ),
    ];
    let mut bodies = Vec::new();
    for (what, target, headers) in unauthorized {
        let (status, answer) = h.post(&target, &headers, distribution("push")).await;
        assert_eq!(status, 401, "{what}: {answer}");
        statuses.push(status);
        bodies.push(answer);
    }
    assert!(bodies.iter().all(|b| b == &bodies[0]), "{bodies:?}");

    for (what, body) in [
        ("not JSON", b"<xml/>".to_vec()),
        ("an unknown shape", br#"{"hello":"world"}"#.to_vec()),
        (
            "a null repository",
            br#"{"push_data":{"tag":"1"},"repository":{"repo_name":null}}"#.to_vec(),
        ),
    ] {
        let (status, answer) = h.post(&path, &[("Authorization", &bearer)], body).await;
        assert_eq!(status, 400, "{what}: {answer}");
        statuses.push(status);
    }
    let (status, _) = h.post(&path, &[("Authorization", &bearer)], vec![b'x'; 2 << 20]).await;
    assert_eq!(status, 413);
    statuses.push(status);

    assert_eq!(h.state::<ImagePolicy>("api").await, unchanged);
    h.assert_reports_match(&statuses);
}

#[tokio::test]
async fn a_registry_push_rescans_every_policy_of_the_namespace_following_the_image() {
    let h = Harness::start().await;
    h.secret("api-hook", IMAGE_TOKEN).await;
    h.create::<ImagePolicy>(image_policy("api", Some("api-hook"))).await;
    // The same image, without a webhook of its own.
    h.create::<ImagePolicy>(image_policy("api-twin", None)).await;
    let mut web = image_policy("web", None);
    web["spec"]["image"] = json!("registry.example.invalid/acme/web");
    h.create::<ImagePolicy>(web).await;
    let mut elsewhere = image_policy("elsewhere", None);
    elsewhere["spec"]["image"] = json!("ghcr.io/acme/api");
    h.create::<ImagePolicy>(elsewhere).await;

    let bearer = format!("Bearer {IMAGE_TOKEN}");
    let (status, answer) =
        h.post(&h.image_path("api"), &[("Authorization", &bearer)], distribution("push")).await;
    assert_eq!(status, 202, "{answer}");
    for rescanned in ["api", "api-twin"] {
        let (_, requested) = h.state::<ImagePolicy>(rescanned).await;
        requested.expect("annotated").parse::<jiff::Timestamp>().expect("RFC 3339");
    }
    for untouched in ["web", "elsewhere"] {
        assert_eq!(h.state::<ImagePolicy>(untouched).await.1, None, "{untouched}");
    }
}

/// The verbs the module documents, as a Role for the webhook's service account.
fn documented_rules() -> Value {
    json!([
        {"apiGroups": ["sync.kuvryn.io"], "resources": ["repositories", "imagepolicies"], "verbs": ["get", "patch"]},
        {"apiGroups": ["sync.kuvryn.io"], "resources": ["applications", "imagepolicies"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
    ])
}

async fn client_as(h: &Harness, account: &str) -> kube::Client {
    let user = format!("system:serviceaccount:{}:{account}", h.namespace);
    let path = h.sandbox.user_kubeconfig(&user, &[]).expect("kubeconfig");
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

#[tokio::test]
async fn the_documented_rbac_is_enough_and_needed() {
    let h = Harness::start().await;
    repositories(&h).await;
    h.secret("api-hook", IMAGE_TOKEN).await;
    h.create::<ImagePolicy>(image_policy("api", Some("api-hook"))).await;
    h.create::<Role>(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                            "metadata": {"name": "webhook"}, "rules": documented_rules()}))
        .await;
    h.create::<RoleBinding>(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "webhook"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "webhook"},
        "subjects": [{"kind": "ServiceAccount", "name": "webhook", "namespace": h.namespace}]}),
    )
    .await;

    let body = github_push("refs/heads/main");
    let signature = github_signature(REPO_TOKEN.as_bytes(), &body);
    let headers = [("X-GitHub-Event", "push"), ("X-Hub-Signature-256", signature.as_str())];
    let bearer = format!("Bearer {IMAGE_TOKEN}");

    // With the documented Role.
    let (granted, _) = serve(client_as(&h, "webhook").await).await;
    let repo_url = format!("{granted}{}", h.repo_path("platform"));
    let image_url = format!("{granted}{}", h.image_path("api"));
    let status = h
        .http
        .post(&repo_url)
        .headers(header_map(&headers))
        .body(body.clone())
        .send()
        .await
        .expect("send")
        .status();
    assert_eq!(status, 202);
    let status = h
        .http
        .post(&image_url)
        .header("Authorization", &bearer)
        .body(distribution("push"))
        .send()
        .await
        .expect("send")
        .status();
    assert_eq!(status, 202);

    // Without any: the API refuses, and the receiver says the API failed (not 401 or 202).
    let (denied, reports) = serve(client_as(&h, "nobody").await).await;
    let before = h.state::<Repository>("platform").await;
    let status = h
        .http
        .post(format!("{denied}{}", h.repo_path("platform")))
        .headers(header_map(&headers))
        .body(body)
        .send()
        .await
        .expect("send")
        .status();
    assert_eq!(status, 503);
    assert_eq!(h.state::<Repository>("platform").await, before);
    let outcomes: Vec<HookOutcome> =
        reports.lock().expect("reports").iter().map(|r| r.outcome).collect();
    assert_eq!(outcomes, [HookOutcome::Unavailable]);
}

fn header_map(headers: &[(&str, &str)]) -> reqwest::header::HeaderMap {
    let mut map = reqwest::header::HeaderMap::new();
    for (name, value) in headers {
        map.insert(
            reqwest::header::HeaderName::from_bytes(name.as_bytes()).expect("name"),
            reqwest::header::HeaderValue::from_str(value).expect("value"),
        );
    }
    map
}
