//! ImagePolicy registry scans (`kuvryn_sync_source::registry`) against real servers: Debian's
//! `docker-registry` (distribution 2.8) with TLS from a test CA and bcrypt htpasswd auth, holding
//! images pushed by the real `skopeo` from OCI layouts written here; and a scripted HTTPS registry
//! for Link-header paging, the Bearer token flow, a manifest HEAD without a digest header, and
//! redirects or token realms on another host.
//!
//! Needs the Debian packages `docker-registry skopeo apache2-utils`; a missing one fails with
//! instructions, nothing is skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use kuvryn_sync_api::FailureReason;
use kuvryn_sync_source::registry::{RegistryClient, RegistryError, RegistryLogin, RegistryOptions};
use kuvryn_sync_tests::registry::{Listener, Script, ScriptedAuth, ScriptedRegistry, push_image};
use kuvryn_sync_tests::servers::registry::OciRegistry;
use secrecy::SecretString;

const USER: &str = "scanner";
const PASSWORD: &str = "canary-registry-pw-6e2b1f";
const WRONG_PASSWORD: &str = "canary-wrong-registry-pw-91c4";
const REPOSITORY: &str = "team/app";

fn login(password: &str) -> RegistryLogin {
    RegistryLogin { username: USER.into(), password: SecretString::from(password.to_owned()) }
}

/// Options trusting only the system roots and `ca_file` (never the machine's TLS environment).
fn options(ca_file: Option<&Path>) -> RegistryOptions {
    RegistryOptions {
        ssl_cert_file: None,
        ssl_cert_dirs: Vec::new(),
        extra_ca_file: ca_file.map(Path::to_owned),
        ..RegistryOptions::default()
    }
}

fn client(options: RegistryOptions) -> RegistryClient {
    kuvryn_sync_runtime::tls::install_crypto_provider();
    RegistryClient::new(options).expect("registry client")
}

fn write_ca(registry: &OciRegistry, dir: &Path) -> PathBuf {
    let file = dir.join("registry-ca.pem");
    std::fs::write(&file, &registry.ca_pem).expect("write CA");
    file
}

fn assert_no_secret(err: &RegistryError) {
    let text = format!("{err} {err:?}");
    for secret in [PASSWORD, WRONG_PASSWORD, "scripted-good-token"] {
        assert!(!text.contains(secret), "secret in {text}");
    }
}

/// Push an image with skopeo (blocking; the tests' runtime has a second worker meanwhile).
fn push(registry: &OciRegistry, tag: &str, content: &str) -> String {
    push_image(registry, USER, PASSWORD, REPOSITORY, tag, content).expect("skopeo push")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_every_tag_and_reads_each_pushed_digest_and_a_moved_tag() {
    let registry = OciRegistry::start(USER, PASSWORD).expect("docker-registry");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = write_ca(&registry, dir.path());
    let tags = ["1.2.0", "1.3.0", "1.10.0", "2.0.0", "1.4.0-rc.1", "main-7", "main-12", "main"];
    let mut pushed = BTreeMap::new();
    for tag in tags {
        let digest = push(&registry, tag, &format!("content of {tag}"));
        pushed.insert(tag.to_owned(), digest);
    }
    assert_eq!(
        pushed.values().collect::<BTreeSet<_>>().len(),
        tags.len(),
        "each tag has its own image"
    );

    // A small page size: Debian's distribution 2.8 ignores `n` and answers whole, which the
    // client must take as the last page (the scripted registry below pages for real).
    let client = client(RegistryOptions { page_size: Some(2), ..options(Some(&ca)) });
    let image = format!("{}/{REPOSITORY}", registry.host());
    let listed = client.list_tags(&image, Some(&login(PASSWORD))).await.expect("list tags");
    assert_eq!(
        listed.iter().cloned().collect::<BTreeSet<_>>(),
        tags.iter().map(|t| (*t).to_owned()).collect::<BTreeSet<_>>()
    );
    assert_eq!(listed.len(), tags.len(), "no duplicates: {listed:?}");
    for (tag, digest) in &pushed {
        let read = client.digest(&image, tag, Some(&login(PASSWORD))).await.expect("digest");
        assert_eq!(&read, digest, "digest of {tag}");
    }

    // Re-pushing `main` moves its digest, and the scan follows.
    let moved = push(&registry, "main", "content of main, second build");
    assert_ne!(moved, pushed["main"]);
    let read = client.digest(&image, "main", Some(&login(PASSWORD))).await.expect("digest");
    assert_eq!(read, moved);

    let missing = client.digest(&image, "9.9.9", Some(&login(PASSWORD))).await.expect_err("no tag");
    assert!(
        matches!(missing, RegistryError::NotFound { tag: Some(ref t), .. } if t == "9.9.9"),
        "{missing}"
    );
    let missing = client
        .list_tags(&format!("{}/team/nothing", registry.host()), Some(&login(PASSWORD)))
        .await
        .expect_err("no repository");
    assert!(matches!(missing, RegistryError::NotFound { tag: None, .. }), "{missing}");
    let invalid = client.digest(&image, "-x", None).await.expect_err("bad tag");
    assert!(matches!(invalid, RegistryError::InvalidTag { .. }), "{invalid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_or_missing_credentials_are_unauthorized_without_leaking_and_never_reuse_anothers_login()
 {
    let registry = OciRegistry::start(USER, PASSWORD).expect("docker-registry");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = write_ca(&registry, dir.path());
    push(&registry, "1.0.0", "one");
    let client = client(options(Some(&ca)));
    let image = format!("{}/{REPOSITORY}", registry.host());

    // A good scan first, so the client holds a working authorization for this repository.
    assert_eq!(client.list_tags(&image, Some(&login(PASSWORD))).await.expect("tags"), ["1.0.0"]);

    let wrong = client.list_tags(&image, Some(&login(WRONG_PASSWORD))).await.expect_err("wrong");
    assert!(
        matches!(wrong, RegistryError::Unauthorized { credentials_given: true, status: 401, .. }),
        "{wrong}"
    );
    assert_eq!(wrong.reason(), FailureReason::AuthenticationFailure);
    assert!(wrong.to_string().contains(&registry.host()), "{wrong}");
    assert!(wrong.to_string().contains("refused the credentials"), "{wrong}");
    assert_no_secret(&wrong);
    let wrong =
        client.digest(&image, "1.0.0", Some(&login(WRONG_PASSWORD))).await.expect_err("wrong");
    assert!(
        matches!(wrong, RegistryError::Unauthorized { credentials_given: true, .. }),
        "{wrong}"
    );
    assert_no_secret(&wrong);

    let anonymous = client.list_tags(&image, None).await.expect_err("anonymous");
    assert!(
        matches!(anonymous, RegistryError::Unauthorized { credentials_given: false, .. }),
        "{anonymous}"
    );
    assert!(anonymous.to_string().contains("spec.secretRef"), "{anonymous}");
    assert_no_secret(&anonymous);
    assert!(!format!("{client:?}").contains(PASSWORD));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_is_a_tls_error_and_the_ca_may_come_as_ssl_cert_file() {
    let registry = OciRegistry::start(USER, PASSWORD).expect("docker-registry");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = write_ca(&registry, dir.path());
    push(&registry, "1.0.0", "one");
    let image = format!("{}/{REPOSITORY}", registry.host());

    let untrusted = client(options(None));
    let err = untrusted.list_tags(&image, Some(&login(PASSWORD))).await.expect_err("untrusted");
    assert!(matches!(err, RegistryError::Tls { .. }), "{err}");
    assert!(err.to_string().contains("SSL_CERT_FILE"), "{err}");
    assert_no_secret(&err);

    // The controller's way: the CA file named by SSL_CERT_FILE, added to the system roots.
    let via_env_file = client(RegistryOptions { ssl_cert_file: Some(ca.clone()), ..options(None) });
    assert_eq!(
        via_env_file.list_tags(&image, Some(&login(PASSWORD))).await.expect("trusted"),
        ["1.0.0"]
    );
    // Or a directory of CA files (SSL_CERT_DIR).
    let certs_dir = dir.path().join("certs");
    std::fs::create_dir_all(&certs_dir).expect("certs dir");
    std::fs::copy(&ca, certs_dir.join("registry.pem")).expect("copy CA");
    let via_env_dir = client(RegistryOptions { ssl_cert_dirs: vec![certs_dir], ..options(None) });
    assert_eq!(
        via_env_dir.list_tags(&image, Some(&login(PASSWORD))).await.expect("trusted"),
        ["1.0.0"]
    );
    // An explicit CA file that is not there is a setup error naming it.
    kuvryn_sync_runtime::tls::install_crypto_provider();
    let err =
        RegistryClient::new(options(Some(&dir.path().join("absent.pem")))).expect_err("absent");
    assert!(err.to_string().contains("absent.pem"), "{err}");
}

fn script(auth: ScriptedAuth) -> Script {
    Script {
        auth,
        username: USER.into(),
        password: PASSWORD.into(),
        tags: ["1.2.0", "1.3.0", "1.10.0", "2.0.0", "1.4.0-rc.1", "main-7", "main-12"]
            .map(str::to_owned)
            .to_vec(),
        page_size: 2,
        digest_header: true,
        redirect_tags_elsewhere: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_through_link_headers_with_a_bearer_token_from_the_registrys_realm() {
    let server = ScriptedRegistry::start(script(ScriptedAuth::Bearer)).await.expect("server");
    let client = client(options(Some(&server.ca_file)));
    let image = server.image("team/app");

    let tags = client.list_tags(&image, Some(&login(PASSWORD))).await.expect("tags");
    assert_eq!(tags, script(ScriptedAuth::Bearer).tags, "every page, in order");
    let recorded = server.recorded();
    let pages: Vec<_> = recorded.iter().filter(|r| r.target.contains("/tags/list")).collect();
    assert!(pages.len() >= 4, "7 tags at 2 a page: {pages:#?}");
    let token_requests: Vec<_> =
        recorded.iter().filter(|r| r.target.starts_with("/token")).collect();
    assert_eq!(token_requests.len(), 1, "one token for the whole listing: {recorded:#?}");
    assert!(
        token_requests[0].target.contains("scope=repository%3Ateam%2Fapp%3Apull"),
        "{:?}",
        token_requests[0]
    );
    assert!(token_requests[0].authorization.as_deref().is_some_and(|a| a.starts_with("Basic ")));
    assert!(
        pages
            .iter()
            .skip(1)
            .all(|r| r.authorization.as_deref() == Some("Bearer scripted-good-token")),
        "{pages:#?}"
    );

    let digest = client.digest(&image, "1.10.0", Some(&login(PASSWORD))).await.expect("digest");
    assert_eq!(
        digest,
        kuvryn_sync_tests::registry::sha256_digest(&ScriptedRegistry::manifest("1.10.0"))
    );
    let last = server.recorded().pop().expect("a request");
    assert_eq!(last.method, "HEAD", "a digest is read with HEAD: {last:?}");
    assert_eq!(
        server.recorded().iter().filter(|r| r.target.starts_with("/token")).count(),
        1,
        "the token is reused for the digest"
    );

    let wrong = client.list_tags(&image, Some(&login(WRONG_PASSWORD))).await.expect_err("wrong");
    assert!(
        matches!(wrong, RegistryError::Unauthorized { credentials_given: true, .. }),
        "{wrong}"
    );
    assert_no_secret(&wrong);
    let anonymous = client.list_tags(&image, None).await.expect_err("anonymous");
    assert!(
        matches!(anonymous, RegistryError::Unauthorized { credentials_given: false, .. }),
        "{anonymous}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_to_another_host_gets_no_credentials_and_a_missing_digest_header_falls_back_to_get()
 {
    let mut s = script(ScriptedAuth::Basic);
    s.redirect_tags_elsewhere = true;
    s.digest_header = false;
    let server = ScriptedRegistry::start(s).await.expect("server");
    let client = client(options(Some(&server.ca_file)));
    let image = server.image("team/app");

    let tags = client.list_tags(&image, Some(&login(PASSWORD))).await.expect("tags");
    assert_eq!(tags, ["from-elsewhere"], "the redirect was followed");
    let recorded = server.recorded();
    let elsewhere: Vec<_> = recorded.iter().filter(|r| r.listener == Listener::Elsewhere).collect();
    assert_eq!(elsewhere.len(), 1, "{recorded:#?}");
    assert_eq!(
        elsewhere[0].authorization, None,
        "credentials followed the redirect: {elsewhere:?}"
    );
    assert!(
        recorded.iter().any(|r| r.listener == Listener::Registry && r.authorization.is_some()),
        "the registry itself did get the login: {recorded:#?}"
    );

    let digest = client.digest(&image, "2.0.0", Some(&login(PASSWORD))).await.expect("digest");
    assert_eq!(
        digest,
        kuvryn_sync_tests::registry::sha256_digest(&ScriptedRegistry::manifest("2.0.0"))
    );
    let methods: Vec<_> = server
        .recorded()
        .iter()
        .filter(|r| r.target.contains("/manifests/"))
        .map(|r| r.method.clone())
        .collect();
    assert_eq!(methods, ["HEAD", "GET"], "GET only after a HEAD without Docker-Content-Digest");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_realm_on_another_host_is_asked_without_the_login() {
    let server =
        ScriptedRegistry::start(script(ScriptedAuth::BearerRealmElsewhere)).await.expect("server");
    let client = client(options(Some(&server.ca_file)));
    let err = client
        .list_tags(&server.image("team/app"), Some(&login(PASSWORD)))
        .await
        .expect_err("the other host's anonymous token is not accepted");
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err}");
    assert_no_secret(&err);
    let recorded = server.recorded();
    let token: Vec<_> = recorded
        .iter()
        .filter(|r| r.listener == Listener::Elsewhere && r.target.starts_with("/token"))
        .collect();
    assert_eq!(token.len(), 1, "{recorded:#?}");
    assert_eq!(token[0].authorization, None, "the login went to another host: {token:?}");
}
