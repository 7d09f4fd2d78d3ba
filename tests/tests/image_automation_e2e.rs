//! Image automation end to end: the real controller scans a real registry (Debian
//! `docker-registry` with TLS from a test CA and bcrypt htpasswd, images pushed with `skopeo`),
//! trusting the CA through `SSL_CERT_FILE` as the chart mounts a private registry CA; and, with
//! `--image-write-back`, commits a new selection to a Git branch served by `git daemon`, which an
//! Application then rolls out.
//!
//! Needs the Debian packages `docker-registry skopeo apache2-utils` and `git`; a missing one fails
//! with instructions, nothing is skipped.

use std::collections::BTreeMap;

use anyhow::Result;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kuvryn_sync_api::{ImagePolicy, Repository, keys};
use kuvryn_sync_tests::application::{DEADLINE, Env, env, env_with_workloads};
use kuvryn_sync_tests::cluster::{skip_on_real_cluster, wait_for};
use kuvryn_sync_tests::registry::push_image;
use kuvryn_sync_tests::servers::registry::OciRegistry;
use serde_json::{Value, json};

const USER: &str = "scanner";
const PASSWORD: &str = "canary-e2e-registry-pw-58d1c";
const WRONG_PASSWORD: &str = "canary-e2e-wrong-pw-0b7a4";
const REPOSITORY: &str = "team/app";
const AUTHOR: &str = "Kuvryn Image Bot";
const EMAIL: &str = "image-bot@kuvryn.invalid";

fn push(registry: &OciRegistry, tag: &str, content: &str) -> String {
    push_image(registry, USER, PASSWORD, REPOSITORY, tag, content).expect("skopeo push")
}

/// The registry's CA in a file, for the controller's `SSL_CERT_FILE`.
fn ca_file(registry: &OciRegistry, dir: &std::path::Path) -> String {
    let path = dir.join("registry-ca.pem");
    std::fs::write(&path, &registry.ca_pem).expect("write CA");
    path.display().to_string()
}

/// A Secret: `type_`, `labels`, `data`.
async fn create_secret(
    env: &Env,
    name: &str,
    type_: &str,
    labels: &[(&str, &str)],
    data: &[(&str, Vec<u8>)],
) -> Result<()> {
    let mut secret = Secret {
        type_: Some(type_.to_owned()),
        data: Some(data.iter().map(|(k, v)| ((*k).to_owned(), ByteString(v.clone()))).collect()),
        ..Default::default()
    };
    secret.metadata.name = Some(name.to_owned());
    secret.metadata.labels = Some(
        labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<BTreeMap<_, _>>(),
    );
    env.api::<Secret>().create(&PostParams::default(), &secret).await?;
    Ok(())
}

/// A labelled `kubernetes.io/dockerconfigjson` Secret for the registry with `password`.
async fn registry_secret(env: &Env, name: &str, registry: &OciRegistry, password: &str) {
    let config = json!({"auths": {registry.host(): {"username": USER, "password": password}}});
    create_secret(
        env,
        name,
        "kubernetes.io/dockerconfigjson",
        &[(keys::REGISTRY_CREDENTIALS, "true")],
        &[(".dockerconfigjson", serde_json::to_vec(&config).expect("json"))],
    )
    .await
    .expect("registry Secret");
}

async fn create_policy(env: &Env, name: &str, image: &str, secret: &str, policy: Value) {
    let object: ImagePolicy = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "ImagePolicy",
        "metadata": {"name": name},
        "spec": {"image": image, "secretRef": {"name": secret}, "policy": policy},
    }))
    .expect("ImagePolicy");
    env.api::<ImagePolicy>().create(&PostParams::default(), &object).await.expect("create policy");
}

/// Ask for a rescan the way the webhook's ImagePolicy hook does.
async fn request_rescan(env: &Env, name: &str) {
    let now = format!("{:?}", std::time::SystemTime::now());
    let patch = json!({"metadata": {"annotations": {keys::RECONCILE_REQUESTED_AT: now}}});
    env.api::<ImagePolicy>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate");
}

/// The (status, reason, message) of condition `type_`.
fn condition(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> Option<(String, String, String)> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Wait until policy `name` satisfies `done`.
async fn wait_policy(
    env: &Env,
    name: &str,
    what: &str,
    done: impl Fn(&ImagePolicy) -> bool,
) -> ImagePolicy {
    let api = env.api::<ImagePolicy>();
    let result = wait_for(&format!("ImagePolicy {name}: {what}"), DEADLINE, || async {
        let policy = api.get(name).await?;
        let observed = serde_json::to_string(&policy.status)?;
        Ok((done(&policy).then_some(policy), observed))
    })
    .await;
    match result {
        Ok(policy) => policy,
        Err(err) => panic!("{err:#}\ncontroller log:\n{}", env.log_tail(40)),
    }
}

fn ready_of(policy: &ImagePolicy) -> Option<(String, String, String)> {
    condition(&policy.status.as_ref()?.conditions, "Ready")
}

/// Wait until policy `name` selected `tag` with `digest`; checks the whole status.
async fn wait_selected(env: &Env, name: &str, image: &str, tag: &str, digest: &str) {
    let reference = format!("{image}:{tag}@{digest}");
    let policy = wait_policy(env, name, &format!("selects {reference}"), |p| {
        p.status.as_ref().and_then(|s| s.latest_image.as_deref()) == Some(reference.as_str())
            && ready_of(p).is_some_and(|(s, r, _)| s == "True" && r == "Selected")
    })
    .await;
    let status = policy.status.expect("status");
    assert_eq!(status.latest_tag.as_deref(), Some(tag));
    assert_eq!(status.latest_digest.as_deref(), Some(digest));
    assert!(status.last_scanned_at.is_some());
    assert_eq!(status.observed_generation, policy.metadata.generation);
    let (_, _, message) = condition(&status.conditions, "Ready").expect("Ready");
    assert!(message.contains(&reference), "{message}");
}

/// Wait until policy `name` is `Ready=False/ScanFailed`; the message.
async fn wait_scan_failed(env: &Env, name: &str) -> String {
    let policy = wait_policy(env, name, "Ready=False/ScanFailed", |p| {
        ready_of(p).is_some_and(|(s, r, _)| s == "False" && r == "ScanFailed")
    })
    .await;
    ready_of(&policy).map(|(_, _, m)| m).unwrap_or_default()
}

/// Wait until the clock is past the second `time` names: status times have whole seconds, so
/// only then does a time written next differ from it.
async fn wait_past(time: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) {
    let Some(time) = time else { return };
    let recorded = time.0.as_second();
    wait_for("the clock to pass the last recorded second", DEADLINE, || async move {
        let now = k8s_openapi::jiff::Timestamp::now();
        Ok(((now.as_second() > recorded).then_some(()), now.to_string()))
    })
    .await
    .expect("clock");
}

async fn count_events(env: &Env, name: &str, reason: &str) -> usize {
    env.events_for(name).await.expect("events").iter().filter(|(_, r, _)| r == reason).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_select_from_a_real_registry_and_refuse_bad_credentials() {
    let registry = OciRegistry::start(USER, PASSWORD).expect("docker-registry");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = ca_file(&registry, dir.path());
    let mut digests = BTreeMap::new();
    for tag in ["1.2.0", "1.3.0", "1.10.0", "2.0.0", "1.4.0-rc.1", "main-7", "main-12", "main-9"] {
        digests.insert(tag, push(&registry, tag, &format!("content of {tag}")));
    }
    let first_main = push(&registry, "main", "main, first build");

    let mut env = env("img-scan", false).await.expect("env");
    env.start_controller(&[("SSL_CERT_FILE", ca.as_str())]).expect("controller");
    let image = format!("{}/{REPOSITORY}", registry.host());
    registry_secret(&env, "registry", &registry, PASSWORD).await;

    create_policy(
        &env,
        "semver",
        &image,
        "registry",
        json!({"semver": {"range": ">=1.2.0 <2.0.0"}}),
    )
    .await;
    create_policy(
        &env,
        "builds",
        &image,
        "registry",
        json!({"tagPattern": {"regex": r"^main-(\d+)$", "order": "numerical"}}),
    )
    .await;
    create_policy(&env, "follow-main", &image, "registry", json!({"digest": {"tag": "main"}}))
        .await;

    // The highest 1.x release (not the pre-release, not 2.0.0), with its real digest.
    wait_selected(&env, "semver", &image, "1.10.0", &digests["1.10.0"]).await;
    wait_selected(&env, "builds", &image, "main-12", &digests["main-12"]).await;
    wait_selected(&env, "follow-main", &image, "main", &first_main).await;
    env.wait_event("semver", "ImageSelected").await.expect("ImageSelected");

    // A rescan that finds the same image records no second Event.
    let scanned_before = env.api::<ImagePolicy>().get("semver").await.expect("get").status;
    let before = scanned_before.and_then(|s| s.last_scanned_at);
    wait_past(before.as_ref()).await;
    request_rescan(&env, "semver").await;
    wait_policy(&env, "semver", "scanned again", |p| {
        p.status.as_ref().and_then(|s| s.last_scanned_at.clone()) != before
    })
    .await;
    assert_eq!(count_events(&env, "semver", "ImageSelected").await, 1);

    // The digest policy follows a re-pushed tag once a rescan is requested.
    let second_main = push(&registry, "main", "main, second build");
    assert_ne!(first_main, second_main);
    request_rescan(&env, "follow-main").await;
    wait_selected(&env, "follow-main", &image, "main", &second_main).await;
    let events = env.events_for("follow-main").await.expect("events");
    let selected: Vec<&String> =
        events.iter().filter(|(_, r, _)| r == "ImageSelected").map(|(_, _, n)| n).collect();
    assert_eq!(selected.len(), 2, "{events:?}");
    assert!(selected.iter().any(|n| n.contains(&second_main)), "{events:?}");

    // Wrong credentials: ScanFailed, and the password nowhere.
    registry_secret(&env, "wrong", &registry, WRONG_PASSWORD).await;
    create_policy(&env, "wrong-login", &image, "wrong", json!({"semver": {"range": ">=1.0.0"}}))
        .await;
    let message = wait_scan_failed(&env, "wrong-login").await;
    assert!(message.contains("refused the credentials"), "{message}");
    // An unlabelled Secret and one of another type are refused before use.
    let config = json!({"auths": {registry.host(): {"username": USER, "password": PASSWORD}}});
    let config = serde_json::to_vec(&config).expect("json");
    create_secret(
        &env,
        "unlabelled",
        "kubernetes.io/dockerconfigjson",
        &[],
        &[(".dockerconfigjson", config.clone())],
    )
    .await
    .expect("secret");
    create_policy(
        &env,
        "unlabelled",
        &image,
        "unlabelled",
        json!({"semver": {"range": ">=1.0.0"}}),
    )
    .await;
    let message = wait_scan_failed(&env, "unlabelled").await;
    assert!(
        message.contains("is not labelled sync.kuvryn.io/registry-credentials: \"true\""),
        "{message}"
    );
    create_secret(
        &env,
        "opaque",
        "Opaque",
        &[(keys::REGISTRY_CREDENTIALS, "true")],
        &[(".dockerconfigjson", config)],
    )
    .await
    .expect("secret");
    create_policy(&env, "opaque", &image, "opaque", json!({"semver": {"range": ">=1.0.0"}})).await;
    let message = wait_scan_failed(&env, "opaque").await;
    assert!(message.contains("kubernetes.io/dockerconfigjson"), "{message}");

    for name in ["wrong-login", "unlabelled", "opaque"] {
        let policy = env.api::<ImagePolicy>().get(name).await.expect("get");
        let status = serde_json::to_string(&policy.status).expect("json");
        let events = format!("{:?}", env.events_for(name).await.expect("events"));
        for secret in [PASSWORD, WRONG_PASSWORD] {
            assert!(!status.contains(secret), "{name}: password in status {status}");
            assert!(!events.contains(secret), "{name}: password in Events {events}");
        }
        assert!(policy.status.and_then(|s| s.latest_image).is_none(), "{name}");
    }
    let log = env.controller_log();
    assert!(log.contains("image scan failed"), "the failures are logged");
    for secret in [PASSWORD, WRONG_PASSWORD] {
        assert!(!log.contains(secret), "password in the controller log");
    }

    // Without --image-write-back, a Repository asking for write-back is told it is off.
    let patch = json!({"spec": {"imageUpdate": {
        "secretRef": {"name": "push"}, "branch": "main",
        "authorName": AUTHOR, "authorEmail": EMAIL}}});
    env.api::<Repository>()
        .patch("apps", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch Repository");
    let repositories = env.api::<Repository>();
    wait_for("Repository ImagesUpdated=False/Disabled", DEADLINE, || async {
        let repo = repositories.get("apps").await?;
        let conditions = repo.status.map(|s| s.conditions).unwrap_or_default();
        let images = condition(&conditions, "ImagesUpdated");
        let done = images.as_ref().is_some_and(|(s, r, m)| {
            s == "False" && r == "Disabled" && m.contains("--image-write-back")
        }) && condition(&conditions, "Ready").is_some_and(|(s, _, _)| s == "True");
        Ok((done.then_some(()), format!("{conditions:?}")))
    })
    .await
    .expect("Disabled");
}

/// The manifest in Git: a Deployment whose container image and `VERSION` value carry markers,
/// among comments and other fields the write-back must leave byte for byte.
fn deployment_yaml(namespace: &str, image: &str, tag: &str, digest: &str) -> String {
    format!(
        r#"# The web Deployment; the image follows ImagePolicy app.
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {{app: web}}   # flow mapping, left alone
spec:
  replicas: 1
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
        - name: web
          image: {image}:{tag}@{digest} # {{"$imagepolicy": "{namespace}:app"}}
          env:
            - name: VERSION
              value: "{tag}"   # {{"$imagepolicy": "{namespace}:app:tag"}}
            - name: UNRELATED
              value: '{tag}'
          ports:
            - containerPort: 8080 # http
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_tag_becomes_one_commit_and_the_application_rolls_it_out() {
    if skip_on_real_cluster(
        "a_new_tag_becomes_one_commit_and_the_application_rolls_it_out",
        "simulated workloads (images on a registry bound to the loopback of the test machine)",
    ) {
        return;
    }
    let registry = OciRegistry::start(USER, PASSWORD).expect("docker-registry");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = ca_file(&registry, dir.path());
    let first = push(&registry, "1.2.0", "release 1.2.0");

    let mut env = env_with_workloads("img-wb", false).await.expect("env");
    env.grant("apps", &["deployments"]).await.expect("grant deployments");
    // git daemon takes pushes for this repository.
    let mut allow = kuvryn_sync_tests::servers::git(env.repo.home());
    allow.arg(format!("--git-dir={}", env.repo.path.display())).args([
        "config",
        "daemon.receivepack",
        "true",
    ]);
    kuvryn_sync_tests::servers::run(allow).expect("enable receive-pack");

    let ns = env.namespace.clone();
    let image = format!("{}/{REPOSITORY}", registry.host());
    let original = deployment_yaml(&ns, &image, "1.2.0", &first);
    let initial = env.repo.commit(&[("deploy/web.yaml", &original)], "add web").expect("commit");
    registry_secret(&env, "registry", &registry, PASSWORD).await;
    create_secret(
        &env,
        "push",
        "Opaque",
        &[(keys::GIT_CREDENTIALS, "true")],
        &[("password", b"unused-over-git-protocol".to_vec())],
    )
    .await
    .expect("push Secret");
    create_policy(&env, "app", &image, "registry", json!({"semver": {"range": ">=1.0.0 <2.0.0"}}))
        .await;
    let patch = json!({"spec": {"imageUpdate": {
        "secretRef": {"name": "push"}, "branch": "main", "path": "deploy",
        "authorName": AUTHOR, "authorEmail": EMAIL}}});
    env.api::<Repository>()
        .patch("apps", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch Repository");
    env.create_app("web", "deploy", json!({})).await.expect("Application");
    env.start_controller_with(&["--image-write-back"], &[("SSL_CERT_FILE", ca.as_str())])
        .expect("controller");

    // The current selection is what Git already says: nothing to commit.
    wait_selected(&env, "app", &image, "1.2.0", &first).await;
    let repositories = env.api::<Repository>();
    let images_updated = |wanted: &'static str| {
        let repositories = repositories.clone();
        async move {
            wait_for(&format!("Repository ImagesUpdated {wanted}"), DEADLINE, || async {
                let repo = repositories.get("apps").await?;
                let conditions = repo.status.map(|s| s.conditions).unwrap_or_default();
                let found = condition(&conditions, "ImagesUpdated")
                    .filter(|(s, r, _)| format!("{s}/{r}") == wanted);
                Ok((found, format!("{conditions:?}")))
            })
            .await
        }
    };
    if let Err(err) = images_updated("True/UpToDate").await {
        panic!("{err:#}\ncontroller log:\n{}", env.log_tail(40));
    }
    env.wait_synced("web", &initial).await.expect("synced at the initial commit");
    env.wait_ready("web", "True", "Healthy").await.expect("healthy");
    let bare = |args: &[&str]| {
        let mut cmd = kuvryn_sync_tests::servers::git(env.repo.home());
        cmd.arg(format!("--git-dir={}", env.repo.path.display())).args(args);
        kuvryn_sync_tests::servers::run(cmd).expect("git").trim().to_owned()
    };
    assert_eq!(bare(&["rev-parse", "refs/heads/main"]), initial, "no commit while up to date");

    // A new matching tag, announced like a registry notification would.
    let newer = push(&registry, "1.11.0", "release 1.11.0");
    request_rescan(&env, "app").await;
    wait_selected(&env, "app", &image, "1.11.0", &newer).await;
    let (_, _, message) = match images_updated("True/Committed").await {
        Ok(found) => found,
        Err(err) => panic!("{err:#}\ncontroller log:\n{}", env.log_tail(40)),
    };
    let head = bare(&["rev-parse", "refs/heads/main"]);
    assert!(message.contains(&head), "the condition names the commit: {message}");
    assert_eq!(bare(&["rev-list", "--count", &format!("{initial}..{head}")]), "1", "one commit");
    assert_eq!(
        bare(&["log", "-1", "--format=%an|%ae|%cn|%ce|%P", &head]),
        format!("{AUTHOR}|{EMAIL}|{AUTHOR}|{EMAIL}|{initial}")
    );
    let commit_message = bare(&["log", "-1", "--format=%B", &head]);
    assert!(
        commit_message.starts_with("Update 2 image references from ImagePolicies"),
        "{commit_message}"
    );
    assert!(commit_message.contains("deploy/web.yaml:"), "{commit_message}");
    assert_eq!(bare(&["diff", "--name-only", &initial, &head]), "deploy/web.yaml");
    // Exactly the marked fields changed: the image (tag and digest) and the tag-only VERSION.
    let mut expected = original.replace(
        &format!("image: {image}:1.2.0@{first}"),
        &format!("image: {image}:1.11.0@{newer}"),
    );
    expected = expected.replace("value: \"1.2.0\"", "value: \"1.11.0\"");
    assert_ne!(expected, original);
    let committed = {
        let mut cmd = kuvryn_sync_tests::servers::git(env.repo.home());
        cmd.arg(format!("--git-dir={}", env.repo.path.display()))
            .args(["show", &format!("{head}:deploy/web.yaml")]);
        kuvryn_sync_tests::servers::run(cmd).expect("git show")
    };
    assert_eq!(committed, expected, "byte for byte");
    let events = env.events_for("apps").await.expect("events");
    let updated: Vec<_> = events.iter().filter(|(_, r, _)| r == "ImagesUpdated").collect();
    assert_eq!(updated.len(), 1, "{events:?}");
    assert!(updated[0].2.contains(&head), "{events:?}");

    // The Repository fetched the commit and the Application rolled the new image out.
    env.wait_synced("web", &head).await.expect("synced at the write-back commit");
    let deployments = env.api::<Deployment>();
    let want = format!("{image}:1.11.0@{newer}");
    wait_for("the live Deployment runs the new image", DEADLINE, || async {
        let live = deployments.get("web").await?;
        let images: Vec<String> = live
            .spec
            .and_then(|s| s.template.spec)
            .map(|s| s.containers.into_iter().filter_map(|c| c.image).collect())
            .unwrap_or_default();
        Ok((images.contains(&want).then_some(()), format!("{images:?}")))
    })
    .await
    .expect("rolled out");
    env.wait_ready("web", "True", "Healthy").await.expect("healthy on the new image");

    // Another reconcile finds nothing to change: still exactly one write-back commit.
    let fetched = |repo: &Repository| repo.status.as_ref().and_then(|s| s.last_fetched_at.clone());
    let before = fetched(&repositories.get("apps").await.expect("get"));
    wait_past(before.as_ref()).await;
    env.announce().await.expect("announce");
    wait_for("the Repository reconciled again", DEADLINE, || async {
        let now = fetched(&repositories.get("apps").await?);
        Ok(((now != before).then_some(()), format!("{now:?}")))
    })
    .await
    .expect("reconciled");
    assert_eq!(bare(&["rev-parse", "refs/heads/main"]), head);
    let events = env.events_for("apps").await.expect("events");
    assert_eq!(events.iter().filter(|(_, r, _)| r == "ImagesUpdated").count(), 1, "{events:?}");
}
