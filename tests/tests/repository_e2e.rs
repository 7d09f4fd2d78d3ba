//! Repository controller end to end: the real controller binary against the API (an in-process
//! ksync-sandbox, or a real cluster through KSYNC_E2E_KUBECONFIG), real Git servers (git daemon,
//! lighttpd + git-http-backend over https with basic auth, sshd with a pinned host key), and
//! `.ksync.yaml` discovery refusals.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kuvryn_sync_api::{Application, Repository, keys};
use kuvryn_sync_tests::cluster::{ControllerProcess, TestCluster, events_regarding, wait_for};
use kuvryn_sync_tests::servers::{BareRepo, GitDaemon, HttpsGit, SshGit};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(30);

struct Env {
    cluster: TestCluster,
    _controller: ControllerProcess,
    namespace: String,
}

async fn env(prefix: &str) -> Result<Env> {
    let cluster = TestCluster::start().await?;
    let namespace = cluster.namespace(prefix).await?;
    // A long poll interval: every refresh in these tests must come from the annotation.
    let controller = ControllerProcess::start(&cluster, &["--default-poll-interval", "1h"])?;
    Ok(Env { cluster, _controller: controller, namespace })
}

impl Env {
    fn repositories(&self) -> Api<Repository> {
        Api::namespaced(self.cluster.client(), &self.namespace)
    }

    fn applications(&self) -> Api<Application> {
        Api::namespaced(self.cluster.client(), &self.namespace)
    }

    async fn create_repository(&self, name: &str, spec: serde_json::Value) -> Result<()> {
        let repo: Repository = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
            "metadata": {"name": name}, "spec": spec,
        }))?;
        self.repositories().create(&PostParams::default(), &repo).await?;
        Ok(())
    }

    async fn create_secret(&self, name: &str, labelled: bool, data: &[(&str, &str)]) -> Result<()> {
        let labels =
            if labelled { json!({ keys::GIT_CREDENTIALS: keys::TRUE }) } else { json!({}) };
        let string_data: BTreeMap<&str, &str> = data.iter().copied().collect();
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "labels": labels}, "stringData": string_data,
        }))?;
        Api::<Secret>::namespaced(self.cluster.client(), &self.namespace)
            .create(&PostParams::default(), &secret)
            .await?;
        Ok(())
    }

    /// Wait until the Repository satisfies `done` (given the Repository and its Ready condition);
    /// returns it. Failures report the last Ready condition seen.
    async fn wait_repository(
        &self,
        name: &str,
        what: &str,
        deadline: Duration,
        done: impl Fn(&Repository, Option<&(String, String, String)>) -> bool,
    ) -> Result<Repository> {
        let api = self.repositories();
        wait_for(&format!("Repository {name}: {what}"), deadline, || async {
            let repo = api.get(name).await?;
            let ready = ready_condition(&repo);
            let observed = format!("revision {:?}, Ready {ready:?}", observed_revision(&repo));
            Ok((done(&repo, ready.as_ref()).then_some(repo), observed))
        })
        .await
    }

    /// Wait until the Repository's Ready condition has `status`/`reason`; returns the Repository.
    async fn wait_ready(&self, name: &str, status: &str, reason: &str) -> Result<Repository> {
        self.wait_repository(name, &format!("Ready={status}/{reason}"), DEADLINE, |_, ready| {
            ready.is_some_and(|(s, r, _)| s == status && r == reason)
        })
        .await
    }

    /// Ask for an immediate refresh, as the push receivers do.
    async fn request_reconcile(&self, name: &str) -> Result<()> {
        let now = format!("{:?}", std::time::SystemTime::now());
        let patch = json!({"metadata": {"annotations": {keys::RECONCILE_REQUESTED_AT: now}}});
        self.repositories().patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        Ok(())
    }

    /// The (type, reason, note) of the events.k8s.io/v1 Events regarding `name`.
    async fn events_for(&self, name: &str) -> Result<Vec<(String, String, String)>> {
        events_regarding(&self.cluster.client(), &self.namespace, name).await
    }

    /// Wait until an Event of `type_`/`reason` regarding `name` exists; returns all of them.
    async fn wait_event(
        &self,
        name: &str,
        type_: &str,
        reason: &str,
    ) -> Result<Vec<(String, String, String)>> {
        wait_for(&format!("{type_} Event {reason} on {name}"), DEADLINE, || async {
            let events = self.events_for(name).await?;
            let found = events.iter().any(|(t, r, _)| t == type_ && r == reason);
            let observed = format!("{events:?}");
            Ok((found.then_some(events), observed))
        })
        .await
    }

    async fn application_names(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .applications()
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|a| a.metadata.name)
            .collect();
        names.sort();
        Ok(names)
    }
}

fn ready_condition(repo: &Repository) -> Option<(String, String, String)> {
    repo.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn observed_revision(repo: &Repository) -> Option<String> {
    repo.status.as_ref()?.observed_revision.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_daemon_source_resolves_and_follows_a_push_within_two_seconds() -> Result<()> {
    let env = env("repo-git").await?;
    let root = tempfile::tempdir()?;
    let repo = BareRepo::create(root.path(), "platform")?;
    let daemon = GitDaemon::start(root.path())?;
    env.create_repository(
        "platform",
        json!({"type": "git", "git": {"url": daemon.url(&repo.name), "revision": "main"}}),
    )
    .await?;

    let ready = env.wait_ready("platform", "True", "FetchSucceeded").await?;
    let first = repo.head()?;
    assert_eq!(observed_revision(&ready).as_deref(), Some(first.as_str()));
    let status = ready.status.as_ref().context("status")?;
    assert_eq!(status.state, kuvryn_sync_api::RepositoryState::Ready);
    assert!(status.last_fetched_at.is_some());
    env.wait_event("platform", "Normal", "RepositoryReady").await?;

    let second = repo.commit(&[("apps/web/deploy.yaml", "kind: ConfigMap\n")], "second")?;
    assert_ne!(first, second);
    let pushed_at = Instant::now();
    env.request_reconcile("platform").await?;
    env.wait_repository(
        "platform",
        "observedRevision follows the push",
        Duration::from_secs(2),
        |r, _| observed_revision(r).as_deref() == Some(second.as_str()),
    )
    .await?;
    let elapsed = pushed_at.elapsed();
    assert!(elapsed < Duration::from_secs(2), "followed the push in {elapsed:?}");
    eprintln!("{{\"e2e\":\"push_to_observed_revision\",\"ms\":{}}}", elapsed.as_millis());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_basic_auth_needs_a_labelled_secret_and_the_right_password() -> Result<()> {
    const CANARY: &str = "canary-7c1e-wrong-password";
    let env = env("repo-https").await?;
    let root = tempfile::tempdir()?;
    let repo = BareRepo::create(root.path(), "platform")?;
    let server = HttpsGit::start(root.path(), "deployer", "s3cret-pass")?;
    let url = server.url(&repo.name);

    env.create_secret(
        "good",
        true,
        &[("username", "deployer"), ("password", "s3cret-pass"), ("ca.crt", &server.ca_pem)],
    )
    .await?;
    env.create_secret(
        "wrong",
        true,
        &[("username", "deployer"), ("password", CANARY), ("ca.crt", &server.ca_pem)],
    )
    .await?;
    env.create_secret(
        "unlabelled",
        false,
        &[("username", "deployer"), ("password", "s3cret-pass")],
    )
    .await?;
    for (name, secret) in [("good", "good"), ("wrong", "wrong"), ("unlabelled", "unlabelled")] {
        env.create_repository(name, json!({"git": {"url": url, "revision": "main", "auth": {"secretRef": {"name": secret}}}}))
            .await?;
    }

    let good = env.wait_ready("good", "True", "FetchSucceeded").await?;
    assert_eq!(observed_revision(&good), Some(repo.head()?));

    let wrong = env.wait_ready("wrong", "False", "AuthenticationFailure").await?;
    let (_, _, message) = ready_condition(&wrong).context("Ready")?;
    assert!(!message.contains(CANARY), "the password leaked into status: {message}");
    assert_eq!(
        wrong.status.as_ref().map(|s| s.state),
        Some(kuvryn_sync_api::RepositoryState::Failed)
    );
    let events = env.wait_event("wrong", "Warning", "AuthenticationFailure").await?;
    assert!(
        events.iter().all(|(_, _, m)| !m.contains(CANARY)),
        "the password leaked into an Event"
    );

    let unlabelled = env.wait_ready("unlabelled", "False", "AuthenticationFailure").await?;
    let (_, _, message) = ready_condition(&unlabelled).context("Ready")?;
    assert!(
        message.contains("is not labelled sync.kuvryn.io/git-credentials: \"true\""),
        "{message}"
    );
    Ok(())
}

/// A Secret whose `url` key names server A fetches from A; a Repository pointing the same Secret
/// at server B (another port, so another origin) is refused with `AuthenticationFailure` naming
/// the key, and B's access log shows no `Authorization` header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_credentials_declaring_a_url_are_sent_only_within_it() -> Result<()> {
    let env = env("repo-url-bound").await?;
    let root = tempfile::tempdir()?;
    let repo = BareRepo::create(root.path(), "platform")?;
    let a = HttpsGit::start(root.path(), "deployer", "a-pass-5e1d")?;
    let b = HttpsGit::start(root.path(), "deployer", "b-pass-9c2f")?;
    let a_prefix = format!("https://127.0.0.1:{}/git/", a.port);
    env.create_secret(
        "for-a",
        true,
        &[
            ("username", "deployer"),
            ("password", "a-pass-5e1d"),
            ("ca.crt", &a.ca_pem),
            ("url", &a_prefix),
        ],
    )
    .await?;
    for (name, server) in [("on-a", &a), ("on-b", &b)] {
        let url = server.url(&repo.name);
        env.create_repository(name, json!({"git": {"url": url, "revision": "main", "auth": {"secretRef": {"name": "for-a"}}}}))
            .await?;
    }
    let on_a = env.wait_ready("on-a", "True", "FetchSucceeded").await?;
    assert_eq!(observed_revision(&on_a), Some(repo.head()?));
    let on_b = env.wait_ready("on-b", "False", "AuthenticationFailure").await?;
    let (_, _, message) = ready_condition(&on_b).context("Ready")?;
    assert!(message.contains("url key") && message.contains("for-a"), "{message}");
    assert!(!message.contains("a-pass-5e1d"), "{message}");
    // lighttpd writes its access log in batches: wait for A's lines, then read B's.
    wait_for("A's access log shows the credentials", DEADLINE, || async {
        let log = a.access_log();
        Ok((log.contains("authorization=\"Basic ").then_some(()), log))
    })
    .await?;
    let b_log = b.access_log();
    assert!(!b_log.contains("authorization=\"Basic"), "B got credentials: {b_log}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_source_uses_the_key_and_checks_the_pinned_host_key() -> Result<()> {
    let env = env("repo-ssh").await?;
    let root = tempfile::tempdir()?;
    let repo = BareRepo::create(root.path(), "platform")?;
    let server = SshGit::start(root.path())?;
    let url = server.url(&repo.name);
    let wrong_hosts = server.wrong_known_hosts()?;
    env.create_secret(
        "key",
        true,
        &[("identity", &server.client_key), ("known_hosts", &server.known_hosts)],
    )
    .await?;
    env.create_secret(
        "wrong-host",
        true,
        &[("identity", &server.client_key), ("known_hosts", &wrong_hosts)],
    )
    .await?;
    env.create_repository(
        "pinned",
        json!({"git": {"url": url, "revision": "main", "auth": {"secretRef": {"name": "key"}}}}),
    )
    .await?;
    env.create_repository(
        "impostor",
        json!({"git": {"url": url, "revision": "main", "auth": {"secretRef": {"name": "wrong-host"}}}}),
    )
    .await?;

    let pinned = env.wait_ready("pinned", "True", "FetchSucceeded").await?;
    assert_eq!(observed_revision(&pinned), Some(repo.head()?));
    let impostor = env.wait_ready("impostor", "False", "AuthenticationFailure").await?;
    let (_, _, message) = ready_condition(&impostor).context("Ready")?;
    assert!(!message.contains("PRIVATE KEY"), "{message}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_urls_plain_paths_passwords_and_option_like_parts_are_refused() -> Result<()> {
    let env = env("repo-url").await?;
    for (name, url) in
        [("file-url", "file:///srv/git/platform.git"), ("plain-path", "/srv/git/platform.git")]
    {
        match env.create_repository(name, json!({"git": {"url": url}})).await {
            // An API server enforcing the CRD's CEL rule refuses it outright...
            Err(err) => {
                let text = format!("{err:#}");
                assert!(
                    text.contains("filesystem paths and file:// are not allowed"),
                    "{name}: {text}"
                );
            }
            // ...otherwise the controller must: Ready=False/ValidationFailure naming the rule.
            Ok(()) => {
                let repo = env.wait_ready(name, "False", "ValidationFailure").await?;
                let (_, _, message) = ready_condition(&repo).context("Ready")?;
                assert!(message.starts_with("spec.git.url"), "{name}: {message}");
                assert!(message.contains("use https, http, ssh or git"), "{name}: {message}");
            }
        }
    }
    // URLs the CRD rule lets through but the controller's stricter rules refuse are reported on
    // the Repository, naming the rule, without echoing the password.
    let cases = [
        (
            "embedded-password",
            "https://bot:canary-url-pw-31@127.0.0.1:1/platform.git",
            "must not embed a password",
        ),
        (
            "dash-user",
            "ssh://-oProxyCommand=touch@127.0.0.1/platform.git",
            "could be read as a command-line option",
        ),
    ];
    for (name, url, rule) in cases {
        env.create_repository(name, json!({"git": {"url": url}})).await?;
        let repo = env.wait_ready(name, "False", "ValidationFailure").await?;
        let (_, _, message) = ready_condition(&repo).context("Ready")?;
        assert!(message.starts_with("spec.git.url"), "{name}: {message}");
        assert!(message.contains(rule), "{name}: {message}");
        assert!(!message.contains("canary-url-pw-31"), "{name}: the password leaked: {message}");
    }
    Ok(())
}

const VALID: &str = "applications:\n  - metadata:\n      name: web\n    spec:\n      source:\n        path: apps/web\n        render:\n          type: yaml\n      destination:\n        namespace: web\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_creates_refuses_forbidden_fields_without_changes_and_deletes_removed()
-> Result<()> {
    let env = env("repo-disc").await?;
    let root = tempfile::tempdir()?;
    let repo = BareRepo::create(root.path(), "platform")?;
    repo.commit(&[(".ksync.yaml", VALID)], "discover web")?;
    let daemon = GitDaemon::start(root.path())?;
    env.create_repository(
        "platform",
        json!({"git": {"url": daemon.url(&repo.name), "revision": "main"}, "applicationServiceAccountName": "deployer"}),
    )
    .await?;
    env.wait_ready("platform", "True", "FetchSucceeded").await?;
    let web = env.applications().get("web").await?;
    assert_eq!(web.labels().get(keys::REPOSITORY).map(String::as_str), Some("platform"));
    assert_eq!(
        web.annotations().get(keys::DISCOVERED_FROM).map(String::as_str),
        Some(".ksync.yaml")
    );
    assert_eq!(web.spec.source.repository_ref.name, "platform");
    assert_eq!(web.spec.service_account_name.as_deref(), Some("deployer"));
    let web_spec = web.spec.clone();

    // A hand-made Application that discovery must never touch.
    let hand: Application = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application", "metadata": {"name": "hand"},
        "spec": {"source": {"repositoryRef": {"name": "platform"}, "path": "x", "render": {"type": "yaml"}},
                 "destination": {"namespace": "x"}}
    }))?;
    env.applications().create(&PostParams::default(), &hand).await?;

    let entry = |name: &str, extra_meta: &str, extra_spec: &str| {
        format!(
            "  - metadata:\n      name: {name}\n{extra_meta}    spec:\n      source:\n        path: apps/{name}\n        render:\n          type: yaml\n      destination:\n        namespace: web\n{extra_spec}"
        )
    };
    let forbidden: Vec<(&str, String, &str)> = vec![
        (
            "automatic",
            entry("new", "", "      sync:\n        automatic: true\n"),
            "spec.sync.automatic",
        ),
        ("prune", entry("new", "", "      sync:\n        prune: true\n"), "allowPrune"),
        ("adopt", entry("new", "", "      sync:\n        conflictPolicy: adopt\n"), "allowAdopt"),
        (
            "delete",
            entry("new", "", "      deletionPolicy: DeleteManagedResources\n"),
            "allowDeleteManagedResources",
        ),
        (
            "foreign SA",
            entry("new", "", "      serviceAccountName: cluster-admin\n"),
            "cluster-admin",
        ),
        ("foreign namespace", entry("new", "      namespace: kube-system\n", ""), "kube-system"),
        ("duplicate name", format!("{}{}", entry("new", "", ""), entry("new", "", "")), "new"),
        ("hand-made collision", entry("hand", "", ""), "hand"),
    ];
    for (case, new_entry, expected) in forbidden {
        let file = format!("{VALID}{new_entry}");
        let commit = repo.commit(&[(".ksync.yaml", &file)], case)?;
        env.request_reconcile("platform").await?;
        let refused = env
            .wait_repository("platform", &format!("refusal of {case}"), DEADLINE, |r, ready| {
                observed_revision(r).as_deref() == Some(commit.as_str())
                    && ready
                        .is_some_and(|(s, reason, _)| s == "False" && reason == "ValidationFailure")
            })
            .await?;
        let (_, _, message) = ready_condition(&refused).context("Ready")?;
        assert!(message.contains(expected), "{case}: {message}");
        assert_eq!(env.application_names().await?, ["hand", "web"], "{case} changed Applications");
        assert_eq!(env.applications().get("web").await?.spec, web_spec, "{case} changed web");
        let hand_now = env.applications().get("hand").await?;
        assert!(
            hand_now.labels().get(keys::REPOSITORY).is_none(),
            "{case} took over the hand-made Application"
        );
    }

    // A configured path escaping the repository is refused before anything is read.
    let escape = json!({"spec": {"applicationConfigPaths": ["../other/.ksync.yaml"]}});
    env.repositories().patch("platform", &PatchParams::default(), &Patch::Merge(&escape)).await?;
    let escaped = env
        .wait_repository("platform", "refusal of an escaping path", DEADLINE, |_, ready| {
            ready.is_some_and(|(s, _, m)| s == "False" && m.contains("../other/.ksync.yaml"))
        })
        .await?;
    assert!(ready_condition(&escaped).is_some_and(|(_, r, _)| r == "ValidationFailure"));
    assert_eq!(env.application_names().await?, ["hand", "web"]);

    // Back to the default path and a file without web: web is deleted, hand stays.
    let back = json!({"spec": {"applicationConfigPaths": [".ksync.yaml"]}});
    env.repositories().patch("platform", &PatchParams::default(), &Patch::Merge(&back)).await?;
    repo.commit(&[(".ksync.yaml", "applications: []\n")], "remove web")?;
    env.request_reconcile("platform").await?;
    let apps = env.applications();
    wait_for("web to be deleted", DEADLINE, || {
        let apps = apps.clone();
        async move {
            let names: Vec<String> = apps
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter_map(|a| a.metadata.name)
                .collect();
            Ok(((names == ["hand"]).then_some(()), format!("{names:?}")))
        }
    })
    .await?;
    env.wait_ready("platform", "True", "FetchSucceeded").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_poll_advances_last_fetched_at_with_one_status_write_and_no_event() -> Result<()> {
    let env = env("repo-quiet").await?;
    let root = tempfile::tempdir()?;
    let repo = BareRepo::create(root.path(), "quiet")?;
    let daemon = GitDaemon::start(root.path())?;
    env.create_repository(
        "quiet",
        json!({"type": "git", "git": {"url": daemon.url(&repo.name)}, "pollInterval": "1s"}),
    )
    .await?;
    let ready = env.wait_ready("quiet", "True", "FetchSucceeded").await?;
    let status = ready.status.clone().context("status")?;
    let first_fetch = status.last_fetched_at.clone().context("lastFetchedAt")?;

    // lastFetchedAt is the time of the last successful inspection: a poll that finds nothing new
    // still moves it, while the revision, the condition and its transition time stay.
    let later = env
        .wait_repository("quiet", "lastFetchedAt advances on a quiet poll", DEADLINE, |r, _| {
            r.status
                .as_ref()
                .and_then(|s| s.last_fetched_at.as_ref())
                .is_some_and(|t| t.0 > first_fetch.0)
        })
        .await?;
    let later_status = later.status.as_ref().context("status")?;
    assert_eq!(later_status.observed_revision, status.observed_revision);
    assert_eq!(later_status.conditions, status.conditions, "no condition moved");
    let ready_events: Vec<_> = env
        .events_for("quiet")
        .await?
        .into_iter()
        .filter(|(_, r, _)| r == "RepositoryReady")
        .collect();
    assert_eq!(
        ready_events.len(),
        1,
        "one RepositoryReady Event, not one per poll: {ready_events:?}"
    );

    // The status is written by server-side apply under the controller's field manager.
    let managers: Vec<_> = later
        .managed_fields()
        .iter()
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .map(|m| (m.manager.clone().unwrap_or_default(), m.operation.clone().unwrap_or_default()))
        .collect();
    assert_eq!(managers, vec![("kuvryn-sync-controller".to_owned(), "Apply".to_owned())]);
    Ok(())
}
