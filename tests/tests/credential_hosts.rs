//! Host-bound credentials against real servers: two HTTPS listeners A (`127.0.0.1:PORT`) and B
//! (`localhost:OTHER`, another origin) of a scripted registry that records every request's
//! `Authorization` header, and a real https Git server (lighttpd + git http-backend). A
//! credential made for A goes to A and never to B: for chart repositories (`url` key, or a
//! dockerconfigjson `auths` host), OCI charts, ImagePolicy scans and Git over https. Redirects
//! and token realms on another host are covered where each client lives: `chart_pull.rs`,
//! `registry_scan.rs` and `git_source.rs`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kuvryn_sync_core::credential_scope::chart_credentials;
use kuvryn_sync_core::credentials::{CredentialsError, GitCredentials};
use kuvryn_sync_core::image_policy::registry_login;
use kuvryn_sync_core::url::GitUrl;
use kuvryn_sync_source::chart::{ChartCredentials, ChartPull, ChartPuller, PullOptions};
use kuvryn_sync_source::git::{FetchRequest, GitCache};
use kuvryn_sync_source::registry::{RegistryClient, RegistryLogin, RegistryOptions};
use kuvryn_sync_tests::registry::{Listener, Script, ScriptedAuth, ScriptedRegistry};
use kuvryn_sync_tests::servers::{BareRepo, HttpsGit};
use serde_json::json;

const USER: &str = "bot";
const PASSWORD: &str = "canary-host-bound-pw-3f7a";

fn script() -> Script {
    Script {
        auth: ScriptedAuth::Basic,
        username: USER.into(),
        password: PASSWORD.into(),
        tags: vec!["1.2.0".into()],
        page_size: 10,
        digest_header: true,
        redirect_tags_elsewhere: false,
    }
}

fn secret(type_: Option<&str>, label: &str, data: serde_json::Value) -> Secret {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "for-a", "namespace": "team", "labels": {label: "true"}},
        "type": type_,
        "stringData": data,
    }))
    .expect("secret")
}

fn docker_config(host: &str) -> serde_json::Value {
    let auths = json!({"auths": {host: {"username": USER, "password": PASSWORD}}});
    json!({".dockerconfigjson": auths.to_string()})
}

/// No request B received carried an `Authorization` header.
fn assert_b_got_no_authorization(server: &ScriptedRegistry) {
    let recorded = server.recorded();
    let to_b: Vec<_> = recorded.iter().filter(|r| r.listener == Listener::Elsewhere).collect();
    assert!(to_b.iter().all(|r| r.authorization.is_none()), "B got credentials: {to_b:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_credentials_made_for_a_are_sent_to_a_and_never_to_b() {
    let server = ScriptedRegistry::start(script()).await.expect("server");
    let a_host = format!("127.0.0.1:{}", server.port);
    let b_host = format!("localhost:{}", server.other_port);
    let labelled = kuvryn_sync_api::keys::REGISTRY_CREDENTIALS;
    let for_a = secret(
        None,
        labelled,
        json!({"username": USER, "password": PASSWORD, "url": format!("oci://{a_host}/charts")}),
    );
    let docker_for_a = secret(
        Some(kuvryn_sync_core::image_policy::DOCKER_CONFIG_JSON_TYPE),
        labelled,
        docker_config(&a_host),
    );
    let ca_pem = std::fs::read_to_string(&server.ca_file).expect("ca");
    // The blocking HTTP client of a puller lives and dies on a blocking thread.
    let pull = move |requests: Vec<ChartPull>| {
        tokio::task::spawn_blocking(move || {
            let cache = tempfile::tempdir().expect("tempdir");
            let options = PullOptions {
                ca_certs_pem: Some(ca_pem),
                timeout: Duration::from_secs(20),
                ..PullOptions::default()
            };
            let puller = ChartPuller::new(cache.path(), options).expect("puller");
            requests.iter().map(|r| puller.pull(r).map(|_| ())).collect::<Vec<_>>()
        })
    };

    // A: both Secrets give credentials for A's repository, and A receives them. (The scripted
    // registry serves an image manifest, not a chart: the pull fails after authenticating,
    // which is all this needs.)
    let https_for_a = secret(
        None,
        labelled,
        json!({"username": USER, "password": PASSWORD, "url": format!("https://{a_host}/charts")}),
    );
    let mut requests = Vec::new();
    for (secret, repository) in [
        (&for_a, format!("oci://{a_host}/charts")),
        (&docker_for_a, format!("oci://{a_host}/charts")),
        (&https_for_a, format!("https://{a_host}/charts/stable")),
    ] {
        let credentials = chart_credentials(secret, &repository).expect("made for A");
        requests.push(ChartPull {
            repository,
            name: "web".into(),
            version: "1.2.0".into(),
            credentials: Some(ChartCredentials::from(credentials)),
        });
    }
    // An OCI chart name may not climb out of the registry path.
    requests.push(ChartPull {
        repository: format!("oci://{a_host}/charts"),
        name: "../private/web".into(),
        version: "1.2.0".into(),
        credentials: None,
    });
    let outcomes = pull(requests).await.expect("pulls");
    let climbing = outcomes[3].as_ref().expect_err("a climbing name is refused");
    assert!(climbing.to_string().contains("'.' or '..' path component"), "{climbing}");
    assert!(
        server.recorded().iter().all(|r| !r.target.contains("private")),
        "the climbing name requested nothing"
    );
    let recorded = server.recorded();
    for path in ["/v2/charts/web/manifests/1.2.0", "/charts/stable/index.yaml"] {
        assert!(
            recorded.iter().any(|r| r.listener == Listener::Registry
                && r.target == path
                && r.authorization.as_deref().is_some_and(|a| a.starts_with("Basic "))),
            "A got the credentials for {path}: {recorded:#?}"
        );
    }

    // B: refused before anything is sent, naming the key, for OCI and https alike.
    for repository in [
        format!("oci://{b_host}/charts"),
        format!("https://{b_host}/charts"),
        format!("oci://{a_host}/other"),
    ] {
        let err = chart_credentials(&for_a, &repository).expect_err("not made for it");
        assert!(err.contains("url key") && err.contains("does not cover"), "{err}");
        assert!(!err.contains(PASSWORD), "{err}");
    }
    for repository in [format!("https://{b_host}/charts"), format!("https://{a_host}/other")] {
        let err = chart_credentials(&https_for_a, &repository).expect_err("not made for it");
        assert!(err.contains("does not cover"), "{err}");
    }
    for repository in [format!("oci://{b_host}/charts"), format!("https://{b_host}/charts")] {
        let err = chart_credentials(&docker_for_a, &repository).expect_err("not in auths");
        assert!(err.contains(&format!("no entry for {b_host}")), "{err}");
    }
    let without_url = secret(None, labelled, json!({"username": USER, "password": PASSWORD}));
    let err = chart_credentials(&without_url, &format!("https://{b_host}/charts"))
        .expect_err("no declared host");
    assert!(err.contains("has no url key"), "{err}");
    assert_b_got_no_authorization(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_scan_sends_a_login_only_to_the_host_its_auths_entry_names() {
    kuvryn_sync_runtime::tls::install_crypto_provider();
    let server = ScriptedRegistry::start(script()).await.expect("server");
    let a_host = format!("127.0.0.1:{}", server.port);
    let b_host = format!("localhost:{}", server.other_port);
    let docker_for_a = secret(
        Some(kuvryn_sync_core::image_policy::DOCKER_CONFIG_JSON_TYPE),
        kuvryn_sync_api::keys::REGISTRY_CREDENTIALS,
        docker_config(&a_host),
    );
    let client = RegistryClient::new(RegistryOptions {
        ssl_cert_file: None,
        ssl_cert_dirs: Vec::new(),
        extra_ca_file: Some(server.ca_file.clone()),
        ..RegistryOptions::default()
    })
    .expect("client");
    let as_login = |login: kuvryn_sync_core::image_policy::RegistryLogin| RegistryLogin {
        username: login.username,
        password: login.password,
    };

    // The ImagePolicy scan's steps: the login for the image's host, then the listing.
    let a_login = registry_login(&docker_for_a, &a_host).expect("valid").map(as_login);
    assert!(a_login.is_some(), "the auths entry for A");
    let tags = client.list_tags(&format!("{a_host}/team/app"), a_login.as_ref()).await;
    assert_eq!(tags.expect("A lists"), ["1.2.0"]);
    let b_login = registry_login(&docker_for_a, &b_host).expect("valid").map(as_login);
    assert!(b_login.is_none(), "no auths entry for B, so no login");
    let tags = client.list_tags(&format!("{b_host}/team/app"), b_login.as_ref()).await;
    assert_eq!(tags.expect("B lists anonymously"), ["from-elsewhere"]);

    let recorded = server.recorded();
    assert!(recorded.iter().any(|r| r.listener == Listener::Elsewhere), "B was asked");
    assert!(
        recorded.iter().any(|r| r.listener == Listener::Registry && r.authorization.is_some()),
        "A got the login: {recorded:#?}"
    );
    assert_b_got_no_authorization(&server);

    // A redirect from A to B: the login stays with A.
    let mut redirecting = script();
    redirecting.redirect_tags_elsewhere = true;
    let server = ScriptedRegistry::start(redirecting).await.expect("server");
    let a_host = format!("127.0.0.1:{}", server.port);
    let docker_for_a = secret(
        Some(kuvryn_sync_core::image_policy::DOCKER_CONFIG_JSON_TYPE),
        kuvryn_sync_api::keys::REGISTRY_CREDENTIALS,
        docker_config(&a_host),
    );
    let client = RegistryClient::new(RegistryOptions {
        ssl_cert_file: None,
        ssl_cert_dirs: Vec::new(),
        extra_ca_file: Some(server.ca_file.clone()),
        ..RegistryOptions::default()
    })
    .expect("client");
    let a_login = registry_login(&docker_for_a, &a_host).expect("valid").map(as_login);
    let tags = client.list_tags(&format!("{a_host}/team/app"), a_login.as_ref()).await;
    assert_eq!(tags.expect("followed to B"), ["from-elsewhere"]);
    let recorded = server.recorded();
    assert!(recorded.iter().any(|r| r.listener == Listener::Elsewhere), "redirected to B");
    assert_b_got_no_authorization(&server);
}

#[test]
fn git_credentials_declaring_a_url_are_used_only_within_it() {
    kuvryn_sync_runtime::tls::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("srv");
    std::fs::create_dir_all(&root).expect("root");
    let repo = BareRepo::create(&root, "app").expect("repo");
    let https = HttpsGit::start(&root, USER, PASSWORD).expect("https git");
    let a_url = https.url(&repo.name);
    let data: BTreeMap<&str, String> = [
        ("username", USER.to_owned()),
        ("password", PASSWORD.to_owned()),
        ("ca.crt", https.ca_pem.clone()),
        ("url", format!("https://127.0.0.1:{}/", https.port)),
    ]
    .into();
    let for_a = secret(
        None,
        kuvryn_sync_api::keys::GIT_CREDENTIALS,
        serde_json::to_value(&data).expect("data"),
    );

    // A: the Secret's credentials fetch from A's real server.
    let creds =
        GitCredentials::from_secret(&for_a, &GitUrl::parse(&a_url).expect("url")).expect("for A");
    let cache = GitCache::new(dir.path().join("cache"), 1 << 30).expect("cache");
    let mut request = FetchRequest::new(&a_url, "main");
    request.timeout = Duration::from_secs(30);
    request.ca_certs_pem = Some(https.ca_pem.clone());
    request.credentials = Some(creds.auth);
    request.cache_identity = creds.identity;
    let resolved = cache.resolve(&request).expect("A serves the repository with the credentials");
    assert_eq!(resolved.commit, repo.head().expect("head"));

    // B (another origin, another port, another scheme): refused before any connection.
    for elsewhere in [
        format!("https://localhost:{}/git/app.git", https.port),
        format!("https://127.0.0.1:{}/git/app.git", https.port + 1),
        format!("http://127.0.0.1:{}/git/app.git", https.port),
    ] {
        let err = GitCredentials::from_secret(&for_a, &GitUrl::parse(&elsewhere).expect("url"))
            .expect_err("not made for it");
        assert!(matches!(err, CredentialsError::Scope(_)), "{err}");
        assert_eq!(err.reason(), kuvryn_sync_api::FailureReason::AuthenticationFailure);
        let message = err.to_string();
        assert!(message.contains("url key") && !message.contains(PASSWORD), "{message}");
    }
}
