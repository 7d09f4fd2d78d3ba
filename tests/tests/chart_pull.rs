//! Chart pulls (`kuvryn_sync_source::chart`) from real servers: a chart packaged and indexed by the
//! real Helm engine (`ksync-helm-publish`), served by lighttpd over https with basic auth, and
//! pushed by the Helm engine to a `docker-registry` with TLS and htpasswd.
//!
//! Needs the Debian packages `lighttpd lighttpd-mod-openssl apache2-utils docker-registry`, the
//! helm-python-sdk wheel, and `cargo build -p kuvryn-sync-helm` (for the publish tool). A missing
//! one fails with instructions; nothing is skipped.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kuvryn_sync_api::FailureReason;
use kuvryn_sync_source::chart::{
    ChartCredentials, ChartPull, ChartPullError, ChartPuller, PullOptions,
};
use kuvryn_sync_tests::charts;
use kuvryn_sync_tests::servers::registry::{HttpsFiles, OciRegistry};
use secrecy::SecretString;

const USER: &str = "charts";
const PASSWORD: &str = "canary-pw-3c9a-chart-pull";
const CHART: &str = "pulled";
const VERSION: &str = "1.2.3";

/// Writes this test's chart and packages it with the Helm engine into `dest`; returns the archive.
fn package_chart(dest: &Path) -> Result<PathBuf> {
    let src = tempfile::tempdir()?;
    let chart = src.path().join(CHART);
    std::fs::create_dir_all(chart.join("templates"))?;
    std::fs::write(
        chart.join("Chart.yaml"),
        format!("apiVersion: v2\nname: {CHART}\nversion: {VERSION}\n"),
    )?;
    std::fs::write(chart.join("values.yaml"), "greeting: hello\n")?;
    std::fs::write(
        chart.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  greeting: {{ .Values.greeting }}\n",
    )?;
    std::fs::create_dir_all(dest)?;
    let archive = charts::publish(
        &serde_json::json!({"op": "package", "chart": chart, "destination": dest}),
        "",
    )?;
    let archive = PathBuf::from(archive.trim());
    assert!(archive.is_file(), "{archive:?}");
    Ok(archive)
}

fn puller(cache: &Path, ca_pem: &str) -> ChartPuller {
    kuvryn_sync_runtime::tls::install_crypto_provider();
    ChartPuller::new(
        cache,
        PullOptions { ca_certs_pem: Some(ca_pem.to_owned()), ..PullOptions::default() },
    )
    .expect("puller")
}

fn pull_request(repository: &str, version: &str, password: Option<&str>) -> ChartPull {
    ChartPull {
        repository: repository.to_owned(),
        name: CHART.to_owned(),
        version: version.to_owned(),
        credentials: password.map(|p| ChartCredentials {
            username: USER.to_owned(),
            password: SecretString::from(p.to_owned()),
        }),
    }
}

fn assert_no_leak(err: &ChartPullError) {
    let text = format!("{err} {err:?}");
    assert!(!text.contains(PASSWORD) && !text.contains("wrong-canary-pw"), "{text}");
}

#[test]
fn pulls_from_an_https_helm_repository_with_basic_auth_and_caches_by_digest() -> Result<()> {
    let server = HttpsFiles::start(USER, PASSWORD)?;
    let archive = package_chart(server.root())?;
    // The index names the archive relatively, as `helm repo index` does without a base URL.
    charts::publish(&serde_json::json!({"op": "index", "dir": server.root()}), "")?;
    let index = std::fs::read_to_string(server.root().join("index.yaml"))?;
    assert!(index.contains(&format!("{CHART}-{VERSION}.tgz")), "{index}");
    let expected = charts::sha256_digest(&archive)?;

    let cache = tempfile::tempdir()?;
    let repository = server.url("");
    let pulled = puller(cache.path(), &server.ca_pem).pull(&pull_request(
        &repository,
        VERSION,
        Some(PASSWORD),
    ))?;
    assert_eq!(pulled.digest, expected);
    assert_eq!(pulled.archive, std::fs::read(&archive)?);
    assert!(!pulled.from_cache);
    assert!(pulled.path.starts_with(cache.path()));

    // Wrong password: refused, nothing leaks, and it never shares the cached entry.
    let err = puller(cache.path(), &server.ca_pem)
        .pull(&pull_request(&repository, VERSION, Some("wrong-canary-pw")))
        .expect_err("wrong password");
    assert!(matches!(err, ChartPullError::Authentication { status: 401, .. }), "{err:?}");
    assert_eq!(err.reason(), FailureReason::RenderFailure);
    assert_no_leak(&err);
    let err = puller(cache.path(), &server.ca_pem)
        .pull(&pull_request(&repository, VERSION, None))
        .expect_err("no credentials");
    assert_eq!(err.reason(), FailureReason::RenderFailure);

    // A version that is not in the index (ranges are not versions).
    for version in ["9.9.9", "^1.2.0"] {
        let err = puller(cache.path(), &server.ca_pem)
            .pull(&pull_request(&repository, version, Some(PASSWORD)))
            .expect_err(version);
        assert!(matches!(err, ChartPullError::NotFound { .. }), "{err:?}");
    }

    // A redirect (here to another origin) is not followed, so credentials cannot travel with it.
    let err = puller(cache.path(), &server.ca_pem)
        .pull(&pull_request(&server.url("moved"), VERSION, Some(PASSWORD)))
        .expect_err("redirect");
    assert!(err.to_string().contains("redirect is not followed"), "{err}");
    assert_no_leak(&err);

    // An index whose chart URL is on another origin (localhost instead of 127.0.0.1): the archive
    // is requested without the credentials, so this server refuses it.
    let cross = server.root().join("cross");
    std::fs::create_dir_all(&cross)?;
    std::fs::copy(&archive, cross.join(archive.file_name().context("name")?))?;
    let other_origin = format!("https://localhost:{}/cross", server.port);
    charts::publish(
        &serde_json::json!({"op": "index", "dir": cross, "baseUrl": other_origin}),
        "",
    )?;
    let err = puller(cache.path(), &server.ca_pem)
        .pull(&pull_request(&server.url("cross"), VERSION, Some(PASSWORD)))
        .expect_err("credentials withheld from another origin");
    assert!(
        matches!(&err, ChartPullError::Authentication { url, status: 401 } if url.starts_with("https://localhost:")),
        "{err:?}"
    );

    // An index.yaml above the cap is refused.
    kuvryn_sync_runtime::tls::install_crypto_provider();
    let small = PullOptions {
        ca_certs_pem: Some(server.ca_pem.clone()),
        max_index_bytes: 64,
        ..PullOptions::default()
    };
    let err = ChartPuller::new(cache.path(), small)?
        .pull(&pull_request(&server.url("cross"), VERSION, Some(PASSWORD)))
        .expect_err("index too large");
    assert!(err.to_string().contains("larger than the limit of 64 bytes"), "{err}");

    // The second pull is answered from the cache: it works with the server gone.
    drop(server);
    let again =
        puller(cache.path(), "").pull(&pull_request(&repository, VERSION, Some(PASSWORD)))?;
    assert!(again.from_cache);
    assert_eq!(again.digest, expected);
    Ok(())
}

#[test]
fn pulls_a_chart_pushed_by_helm_to_an_oci_registry() -> Result<()> {
    let registry = OciRegistry::start(USER, PASSWORD)?;
    let work = tempfile::tempdir()?;
    let archive = package_chart(work.path())?;
    let pushed = charts::publish(
        &serde_json::json!({
            "op": "push", "archive": archive, "remote": registry.oci_url("team/charts"),
            "host": registry.host(), "username": USER, "password": PASSWORD,
        }),
        &registry.ca_pem,
    )
    .with_context(|| registry.log_text())?;
    // Helm answers `{"output": ""}`; the pull below proves what was pushed.
    assert!(pushed.contains("output"), "{pushed}");
    let expected = charts::sha256_digest(&archive)?;

    let cache = tempfile::tempdir()?;
    let repository = registry.oci_url("team/charts");
    let pulled = puller(cache.path(), &registry.ca_pem)
        .pull(&pull_request(&repository, VERSION, Some(PASSWORD)))
        .with_context(|| registry.log_text())?;
    assert_eq!(pulled.digest, expected);
    assert_eq!(pulled.archive, std::fs::read(&archive)?);
    assert!(!pulled.from_cache);

    for password in [Some("wrong-canary-pw"), None] {
        let err = puller(cache.path(), &registry.ca_pem)
            .pull(&pull_request(&repository, VERSION, password))
            .expect_err("refused");
        assert!(matches!(err, ChartPullError::Authentication { .. }), "{err:?}");
        assert_no_leak(&err);
    }
    let err = puller(cache.path(), &registry.ca_pem)
        .pull(&pull_request(&repository, "9.9.9", Some(PASSWORD)))
        .expect_err("missing tag");
    assert!(matches!(err, ChartPullError::NotFound { .. }), "{err:?}");

    let again = puller(cache.path(), &registry.ca_pem).pull(&pull_request(
        &repository,
        VERSION,
        Some(PASSWORD),
    ))?;
    assert!(again.from_cache);
    Ok(())
}
