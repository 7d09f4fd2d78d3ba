//! Chart pulls for `spec.source.render.helm.chart`: an exact chart version from an `https://` Helm
//! repository or an `oci://` registry, as archive bytes and their `sha256:<hex>` digest, cached on
//! disk by content.
//!
//! - **https Helm repositories**: `GET <repository>/index.yaml` (at most
//!   [`PullOptions::max_index_bytes`]), the entry whose `version` equals the wanted version exactly
//!   (no ranges), its first URL resolved against the repository URL, then the archive (at most
//!   [`PullOptions::max_archive_bytes`]); the index's `digest`, when given, must match.
//! - **OCI registries** (`oci://host[:port]/path`): the OCI distribution API for
//!   `<path>/<name>:<version>` (`+` in a version becomes `_`, as Helm tags it; `<path>/<name>`
//!   must follow the distribution name grammar, [`kuvryn_sync_core::oci_name`]): the manifest, then
//!   its one layer of media type [`HELM_CHART_LAYER`], checked against the layer digest. A `401`
//!   is answered per the registry's `WWW-Authenticate`: `Basic` with the credentials, or `Bearer`
//!   through the token endpoint it names.
//! - **Credentials go only where they were configured**: basic auth (and a registry token) is sent
//!   only to URLs with the repository's scheme, host and port. Redirects are never followed by the
//!   HTTP client: an index or chart redirect is an error, and a registry blob redirect (registries
//!   hand blobs out from storage hosts) is followed by hand, up to 5 hops, https only, with the
//!   `Authorization` header only when the target is the registry itself. A token endpoint on
//!   another host gets no credentials.
//! - **Bounded**: every body is read through a cap, every request has a timeout.
//! - **Cache**: archives live at `<cache>/blobs/sha256/<hex>.tgz`, written atomically; an index
//!   entry keyed by SHA-256 of (repository, name, version, credential identity) names the digest, so
//!   a second pull is answered without network and different credentials never share entries. A
//!   cached archive is re-hashed before use; a mismatch drops the entry and pulls again.
//! - **Errors** ([`ChartPullError`]) are `RenderFailure` (`AuthenticationFailure` for refused
//!   credentials), and never hold the password or URL userinfo.
//!
//! Hand-written over reqwest (blocking, rustls) rather than `oci-client`: the per-hop credential
//! scoping, capped bodies and manual redirect handling above are what this module is for, and the
//! Git edge is blocking too. Call it from a blocking thread (`tokio::task::spawn_blocking`).

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::registry::{Challenge, parse_challenge, parse_token};
use kuvryn_sync_api::FailureReason;
use kuvryn_sync_core::redact::{Redactor, redact_shapes};
use reqwest::Url;
use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::header::{ACCEPT, AUTHORIZATION, LOCATION, WWW_AUTHENTICATE};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// Media type of a Helm chart's content layer in an OCI manifest.
pub const HELM_CHART_LAYER: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
/// Media types of the manifest we ask for.
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";
/// Largest manifest or token answer we read.
const MAX_SMALL_BODY: u64 = 1024 * 1024;
/// Most redirects followed for a registry blob.
const MAX_BLOB_REDIRECTS: usize = 5;

/// Username and password for a chart repository or registry.
#[derive(Clone)]
pub struct ChartCredentials {
    /// User name.
    pub username: String,
    /// Password or token.
    pub password: SecretString,
}

impl std::fmt::Debug for ChartCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChartCredentials").field("username", &self.username).finish_non_exhaustive()
    }
}

impl From<kuvryn_sync_core::helm_values::RegistryCredentials> for ChartCredentials {
    fn from(credentials: kuvryn_sync_core::helm_values::RegistryCredentials) -> Self {
        Self { username: credentials.username, password: credentials.password }
    }
}

impl From<kuvryn_sync_core::image_policy::RegistryLogin> for ChartCredentials {
    fn from(login: kuvryn_sync_core::image_policy::RegistryLogin) -> Self {
        Self { username: login.username, password: login.password }
    }
}

/// One chart to pull.
#[derive(Clone, Debug)]
pub struct ChartPull {
    /// `https://…` Helm repository or `oci://host[:port]/path` registry.
    pub repository: String,
    /// Chart name.
    pub name: String,
    /// Exact chart version.
    pub version: String,
    /// Credentials (from a labelled Secret, see `kuvryn_sync_core::helm_values::registry_credentials`).
    pub credentials: Option<ChartCredentials>,
}

/// Limits and trust of a [`ChartPuller`].
#[derive(Clone, Debug)]
pub struct PullOptions {
    /// Extra PEM CA certificates trusted beyond the system roots.
    pub ca_certs_pem: Option<String>,
    /// Per-request timeout (connect and whole request).
    pub timeout: Duration,
    /// Largest `index.yaml`.
    pub max_index_bytes: u64,
    /// Largest chart archive.
    pub max_archive_bytes: u64,
}

impl Default for PullOptions {
    fn default() -> Self {
        Self {
            ca_certs_pem: None,
            timeout: Duration::from_secs(60),
            max_index_bytes: 10 * 1024 * 1024,
            max_archive_bytes: 20 * 1024 * 1024,
        }
    }
}

/// A pulled chart.
#[derive(Clone, PartialEq, Eq)]
pub struct PulledChart {
    /// `sha256:<hex>` of the archive.
    pub digest: String,
    /// The cached archive file.
    pub path: PathBuf,
    /// The archive bytes.
    pub archive: Vec<u8>,
    /// Whether it was answered from the cache without network.
    pub from_cache: bool,
}

impl std::fmt::Debug for PulledChart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PulledChart")
            .field("digest", &self.digest)
            .field("path", &self.path)
            .field("bytes", &self.archive.len())
            .field("from_cache", &self.from_cache)
            .finish()
    }
}

/// Why a pull failed; every message is redacted.
#[derive(Debug, thiserror::Error)]
pub enum ChartPullError {
    /// The repository is not an https:// or oci:// URL we accept.
    #[error("chart repository {repository:?} is invalid: {rule}")]
    InvalidRepository {
        /// The repository, redacted.
        repository: String,
        /// The rule.
        rule: String,
    },
    /// The server refused the credentials (or asked for some we do not have).
    #[error("authentication failed for {url}: HTTP {status}")]
    Authentication {
        /// The URL, redacted.
        url: String,
        /// The HTTP status.
        status: u16,
    },
    /// The chart or version does not exist there.
    #[error("chart {name} version {version} not found in {repository}")]
    NotFound {
        /// The repository, redacted.
        repository: String,
        /// Chart name.
        name: String,
        /// Version.
        version: String,
    },
    /// Any other unexpected answer.
    #[error("{url}: {problem}")]
    Remote {
        /// The URL, redacted.
        url: String,
        /// What went wrong, redacted.
        problem: String,
    },
    /// The download or the cache broke.
    #[error("chart cache: {0}")]
    Cache(String),
}

impl ChartPullError {
    /// The failure reason for conditions and status.
    pub fn reason(&self) -> FailureReason {
        // The reference: RenderFailure covers "a Helm chart that could not be pulled", whatever
        // the cause; AuthenticationFailure is the Git source's.
        FailureReason::RenderFailure
    }
}

/// Pulls charts and keeps them in a content-addressed cache.
#[derive(Debug)]
pub struct ChartPuller {
    cache_dir: PathBuf,
    client: Client,
    options: PullOptions,
}

impl ChartPuller {
    /// A puller caching under `cache_dir` (created when missing). The process must have installed
    /// a rustls crypto provider (`kuvryn_sync_runtime::tls::install_crypto_provider`).
    pub fn new(
        cache_dir: impl Into<PathBuf>,
        options: PullOptions,
    ) -> Result<Self, ChartPullError> {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            return Err(ChartPullError::Cache(
                "no rustls crypto provider is installed in this process; install one first".into(),
            ));
        }
        let cache_dir = cache_dir.into();
        for dir in ["blobs/sha256", "index", "tmp"] {
            fs::create_dir_all(cache_dir.join(dir))
                .map_err(|e| cache_error("creating the cache", &e))?;
        }
        let extra_roots = match &options.ca_certs_pem {
            Some(pem) => reqwest::Certificate::from_pem_bundle(pem.as_bytes()).map_err(|_| {
                ChartPullError::Cache("the CA certificates are not valid PEM".into())
            })?,
            None => Vec::new(),
        };
        let client = Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(options.timeout)
            .connect_timeout(options.timeout)
            .user_agent("kuvryn-sync")
            .tls_certs_merge(extra_roots)
            .build()
            .map_err(|_| ChartPullError::Cache("cannot build the HTTP client".into()))?;
        Ok(Self { cache_dir, client, options })
    }

    /// Pulls `request`, from the cache when this (repository, name, version, credentials) was
    /// pulled before.
    pub fn pull(&self, request: &ChartPull) -> Result<PulledChart, ChartPullError> {
        let redactor = request_redactor(request);
        let key = cache_key(request);
        if let Some(hit) = self.cached(&key) {
            return Ok(hit);
        }
        let repository = parse_repository(&request.repository, &redactor)?;
        let archive = match &repository {
            Repository::Https(base) => self.pull_https(base, request, &redactor)?,
            Repository::Oci { registry, path } => {
                self.pull_oci(registry, path, request, &redactor)?
            }
        };
        let digest = sha256_digest(&archive);
        let path = self.store(&key, &digest, &archive)?;
        Ok(PulledChart { digest, path, archive, from_cache: false })
    }

    fn blob_path(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.cache_dir.join("blobs/sha256").join(format!("{hex}.tgz"))
    }

    fn cached(&self, key: &str) -> Option<PulledChart> {
        let index = self.cache_dir.join("index").join(key);
        let digest = fs::read_to_string(&index).ok()?;
        let digest = digest.trim().to_owned();
        if !is_sha256_digest(&digest) {
            let _ = fs::remove_file(&index);
            return None;
        }
        let path = self.blob_path(&digest);
        let archive = fs::read(&path).ok()?;
        if sha256_digest(&archive) != digest {
            // Corrupted: forget it and pull again.
            let _ = fs::remove_file(&path);
            let _ = fs::remove_file(&index);
            return None;
        }
        Some(PulledChart { digest, path, archive, from_cache: true })
    }

    fn store(&self, key: &str, digest: &str, archive: &[u8]) -> Result<PathBuf, ChartPullError> {
        let path = self.blob_path(digest);
        self.write_atomically(&path, archive)?;
        self.write_atomically(&self.cache_dir.join("index").join(key), digest.as_bytes())?;
        Ok(path)
    }

    fn write_atomically(&self, path: &Path, bytes: &[u8]) -> Result<(), ChartPullError> {
        let mut file = tempfile::NamedTempFile::new_in(self.cache_dir.join("tmp"))
            .map_err(|e| cache_error("writing the cache", &e))?;
        file.write_all(bytes).map_err(|e| cache_error("writing the cache", &e))?;
        file.persist(path).map_err(|e| cache_error("writing the cache", &e.error))?;
        Ok(())
    }

    fn pull_https(
        &self,
        base: &Url,
        request: &ChartPull,
        redactor: &Redactor,
    ) -> Result<Vec<u8>, ChartPullError> {
        let index_url = base
            .join("index.yaml")
            .map_err(|_| invalid(request, redactor, "cannot form the index.yaml URL"))?;
        let response = self.send(
            self.with_basic(self.client.get(index_url.clone()), &index_url, base, request),
            &index_url,
            redactor,
        )?;
        let response = expect_success(response, &index_url, redactor)?;
        let body = read_capped(response, self.options.max_index_bytes, &index_url, redactor)?;
        let entry =
            find_index_entry(&body, &request.name, &request.version).map_err(|problem| {
                match problem {
                    IndexProblem::Missing => not_found(request, redactor),
                    IndexProblem::Invalid(problem) => remote(&index_url, redactor, problem),
                }
            })?;
        let archive_url = resolve_chart_url(base, &entry.url)
            .map_err(|rule| remote(&index_url, redactor, rule))?;
        let response = self.send(
            self.with_basic(self.client.get(archive_url.clone()), &archive_url, base, request),
            &archive_url,
            redactor,
        )?;
        let response = expect_success(response, &archive_url, redactor)?;
        let archive =
            read_capped(response, self.options.max_archive_bytes, &archive_url, redactor)?;
        if let Some(expected) = entry.digest {
            let actual = sha256_digest(&archive);
            if actual.trim_start_matches("sha256:") != expected.trim_start_matches("sha256:") {
                return Err(remote(
                    &archive_url,
                    redactor,
                    "the archive does not match the digest in index.yaml".into(),
                ));
            }
        }
        Ok(archive)
    }

    /// Basic auth only when `url` has the repository's origin.
    fn with_basic(
        &self,
        builder: RequestBuilder,
        url: &Url,
        base: &Url,
        request: &ChartPull,
    ) -> RequestBuilder {
        match &request.credentials {
            Some(c) if same_origin(url, base) => {
                builder.basic_auth(&c.username, Some(c.password.expose_secret()))
            }
            _ => builder,
        }
    }

    fn send(
        &self,
        builder: RequestBuilder,
        url: &Url,
        redactor: &Redactor,
    ) -> Result<Response, ChartPullError> {
        builder.send().map_err(|e| remote(url, redactor, transport_problem(&e)))
    }

    fn pull_oci(
        &self,
        registry: &Url,
        path: &str,
        request: &ChartPull,
        redactor: &Redactor,
    ) -> Result<Vec<u8>, ChartPullError> {
        let repo =
            if path.is_empty() { request.name.clone() } else { format!("{path}/{}", request.name) };
        if let Some(problem) = kuvryn_sync_core::oci_name::name_problem(&repo) {
            let rule =
                format!("the chart name with the registry path ({repo:?}) is refused: {problem}");
            return Err(invalid(request, redactor, &redactor.redact(&rule)));
        }
        let tag = request.version.replace('+', "_");
        if !valid_tag(&tag) {
            return Err(invalid(request, redactor, "the version is not a valid OCI tag"));
        }
        let mut session = OciSession {
            puller: self,
            registry,
            repo: &repo,
            request,
            redactor,
            authorization: None,
        };
        let manifest_url = registry
            .join(&format!("v2/{repo}/manifests/{tag}"))
            .map_err(|_| invalid(request, redactor, "cannot form the manifest URL"))?;
        let response = session.get(&manifest_url, Some(MANIFEST_ACCEPT))?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Err(not_found(request, redactor));
        }
        let response = expect_success(response, &manifest_url, redactor)?;
        let body = read_capped(response, MAX_SMALL_BODY, &manifest_url, redactor)?;
        let layer =
            chart_layer(&body).map_err(|problem| remote(&manifest_url, redactor, problem))?;
        if layer.size > self.options.max_archive_bytes {
            return Err(remote(
                &manifest_url,
                redactor,
                format!(
                    "the chart layer is larger than the limit of {} bytes",
                    self.options.max_archive_bytes
                ),
            ));
        }
        let blob_url = registry
            .join(&format!("v2/{repo}/blobs/{}", layer.digest))
            .map_err(|_| invalid(request, redactor, "cannot form the blob URL"))?;
        let archive = session.get_blob(&blob_url)?;
        if sha256_digest(&archive) != layer.digest {
            return Err(remote(
                &blob_url,
                redactor,
                "the chart layer does not match its digest".into(),
            ));
        }
        Ok(archive)
    }
}

/// One registry conversation: remembers the `Authorization` value that worked.
struct OciSession<'a> {
    puller: &'a ChartPuller,
    registry: &'a Url,
    repo: &'a str,
    request: &'a ChartPull,
    redactor: &'a Redactor,
    authorization: Option<SecretString>,
}

impl OciSession<'_> {
    /// GET on the registry, answering one `401` challenge.
    fn get(&mut self, url: &Url, accept: Option<&str>) -> Result<Response, ChartPullError> {
        let response = self.send(url, accept)?;
        if response.status() != reqwest::StatusCode::UNAUTHORIZED || self.authorization.is_some() {
            return Ok(response);
        }
        let challenge = response
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_challenge);
        let Some(challenge) = challenge else { return Ok(response) };
        self.authorization = Some(self.authorize(&challenge, url)?);
        self.send(url, accept)
    }

    fn send(&self, url: &Url, accept: Option<&str>) -> Result<Response, ChartPullError> {
        let mut builder = self.puller.client.get(url.clone());
        if let Some(accept) = accept {
            builder = builder.header(ACCEPT, accept);
        }
        if let Some(auth) = self.authorization.as_ref().filter(|_| same_origin(url, self.registry))
        {
            builder = builder.header(AUTHORIZATION, auth.expose_secret());
        }
        self.puller.send(builder, url, self.redactor)
    }

    fn authorize(&self, challenge: &Challenge, url: &Url) -> Result<SecretString, ChartPullError> {
        let credentials = self.request.credentials.as_ref();
        match challenge {
            Challenge::Basic => {
                let c = credentials.ok_or_else(|| ChartPullError::Authentication {
                    url: shown(url, self.redactor),
                    status: 401,
                })?;
                let pair = format!("{}:{}", c.username, c.password.expose_secret());
                Ok(SecretString::from(format!("Basic {}", base64_encode(pair.as_bytes()))))
            }
            Challenge::Bearer { realm, service } => {
                let mut token_url = Url::parse(realm).map_err(|_| {
                    remote(url, self.redactor, "the registry's token realm is not a URL".into())
                })?;
                if token_url.scheme() != "https" {
                    return Err(remote(
                        url,
                        self.redactor,
                        "the registry's token realm is not https".into(),
                    ));
                }
                {
                    let mut query = token_url.query_pairs_mut();
                    if let Some(service) = service {
                        query.append_pair("service", service);
                    }
                    query.append_pair("scope", &format!("repository:{}:pull", self.repo));
                }
                let mut builder = self.puller.client.get(token_url.clone());
                if let Some(c) = credentials.filter(|_| same_origin(&token_url, self.registry)) {
                    builder = builder.basic_auth(&c.username, Some(c.password.expose_secret()));
                }
                let response = self.puller.send(builder, &token_url, self.redactor)?;
                let response = expect_success(response, &token_url, self.redactor)?;
                let body = read_capped(response, MAX_SMALL_BODY, &token_url, self.redactor)?;
                let token = parse_token(&body).map(|answer| answer.token).ok_or_else(|| {
                    remote(&token_url, self.redactor, "the token answer holds no token".into())
                })?;
                Ok(SecretString::from(format!("Bearer {token}")))
            }
        }
    }

    /// GET a blob, following redirects by hand (https only, credentials only to the registry).
    fn get_blob(&mut self, url: &Url) -> Result<Vec<u8>, ChartPullError> {
        let mut current = url.clone();
        let mut response = self.get(&current, None)?;
        for _ in 0..MAX_BLOB_REDIRECTS {
            if !response.status().is_redirection() {
                break;
            }
            let location = response
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|l| current.join(l).ok())
                .ok_or_else(|| {
                    remote(&current, self.redactor, "a redirect without a usable Location".into())
                })?;
            if location.scheme() != "https" {
                return Err(remote(
                    &current,
                    self.redactor,
                    "a blob redirect to a non-https URL is not followed".into(),
                ));
            }
            current = location;
            response = self.send(&current, None)?;
        }
        let response = expect_success(response, &current, self.redactor)?;
        read_capped(response, self.puller.options.max_archive_bytes, &current, self.redactor)
    }
}

/// A parsed `chart.repository`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Repository {
    /// Base URL ending in `/`.
    Https(Url),
    /// `https://host[:port]/` and the repository path (no leading or trailing `/`).
    Oci { registry: Url, path: String },
}

fn parse_repository(repository: &str, redactor: &Redactor) -> Result<Repository, ChartPullError> {
    let invalid = |rule: &str| ChartPullError::InvalidRepository {
        repository: redact_shapes(&redactor.redact(repository)),
        rule: rule.to_owned(),
    };
    // Checked before parsing: the URL parser would resolve the dot segments away.
    if repository.split(['/', '?', '#']).any(|part| part == ".." || part == ".") {
        return Err(invalid("'.' and '..' path segments are not allowed"));
    }
    let url = Url::parse(repository).map_err(|_| invalid("not a URL"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("credentials in the URL are refused; use secretRef"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("the URL has no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("a query or fragment is not allowed"));
    }
    match url.scheme() {
        "https" => {
            let mut base = url;
            if !base.path().ends_with('/') {
                let path = format!("{}/", base.path());
                base.set_path(&path);
            }
            Ok(Repository::Https(base))
        }
        "oci" => {
            let host = url.host_str().unwrap_or_default();
            let authority = match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_owned(),
            };
            let registry = Url::parse(&format!("https://{authority}/"))
                .map_err(|_| invalid("bad registry host"))?;
            let path = url.path().trim_matches('/').to_owned();
            Ok(Repository::Oci { registry, path })
        }
        _ => Err(invalid("must start with https:// or oci://")),
    }
}

/// What `index.yaml` says about one chart version.
#[derive(Clone, Debug, PartialEq, Eq)]
struct IndexEntry {
    url: String,
    digest: Option<String>,
}

#[derive(Debug, PartialEq, Eq)]
enum IndexProblem {
    Missing,
    Invalid(String),
}

#[derive(Deserialize)]
struct IndexFile {
    #[serde(default)]
    entries: std::collections::BTreeMap<String, Vec<IndexVersion>>,
}

#[derive(Deserialize)]
struct IndexVersion {
    #[serde(default)]
    version: String,
    #[serde(default)]
    urls: Vec<String>,
    #[serde(default)]
    digest: Option<String>,
}

/// The entry of exactly `version` of `name`.
fn find_index_entry(body: &[u8], name: &str, version: &str) -> Result<IndexEntry, IndexProblem> {
    let invalid =
        || IndexProblem::Invalid("index.yaml is not a valid Helm repository index".into());
    let text = std::str::from_utf8(body).map_err(|_| invalid())?;
    let index: IndexFile = kuvryn_sync_core::yaml::from_str(text).map_err(|err| match err {
        kuvryn_sync_core::yaml::YamlError::Budget(_) => {
            IndexProblem::Invalid(format!("index.yaml: {err}"))
        }
        _ => invalid(),
    })?;
    let entry = index
        .entries
        .get(name)
        .and_then(|versions| versions.iter().find(|v| v.version == version))
        .ok_or(IndexProblem::Missing)?;
    let url = entry.urls.first().cloned().ok_or_else(|| {
        IndexProblem::Invalid(format!("index.yaml lists {name} {version} without a URL"))
    })?;
    Ok(IndexEntry { url, digest: entry.digest.clone().filter(|d| !d.is_empty()) })
}

/// The archive URL: `url` resolved against the repository; must be https and carry no userinfo.
fn resolve_chart_url(base: &Url, url: &str) -> Result<Url, String> {
    let resolved =
        base.join(url).map_err(|_| "the chart URL in index.yaml is not a URL".to_owned())?;
    if resolved.scheme() != "https" {
        return Err("the chart URL in index.yaml is not https".into());
    }
    if !resolved.username().is_empty() || resolved.password().is_some() {
        return Err("the chart URL in index.yaml carries credentials".into());
    }
    Ok(resolved)
}

/// Same scheme, host and port (default ports included).
fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

/// The Helm chart layer of an OCI manifest.
#[derive(Debug, PartialEq, Eq)]
struct Layer {
    digest: String,
    size: u64,
}

fn chart_layer(body: &[u8]) -> Result<Layer, String> {
    #[derive(Deserialize)]
    struct Manifest {
        #[serde(default)]
        layers: Vec<Descriptor>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Descriptor {
        media_type: String,
        digest: String,
        #[serde(default)]
        size: u64,
    }
    let manifest: Manifest =
        serde_json::from_slice(body).map_err(|_| "the manifest is not valid JSON".to_owned())?;
    let mut charts = manifest.layers.into_iter().filter(|l| l.media_type == HELM_CHART_LAYER);
    let layer = charts.next().ok_or_else(|| {
        format!("the manifest has no {HELM_CHART_LAYER} layer; is it a Helm chart?")
    })?;
    if charts.next().is_some() {
        return Err("the manifest has more than one chart layer".into());
    }
    if !is_sha256_digest(&layer.digest) {
        return Err("the chart layer digest is not sha256".into());
    }
    Ok(Layer { digest: layer.digest, size: layer.size })
}

/// OCI tag grammar: `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
fn valid_tag(tag: &str) -> bool {
    let mut chars = tag.chars();
    tag.len() <= 128
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

fn is_sha256_digest(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    })
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    format!("sha256:{}", hash.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// The cache index key: SHA-256 over length-prefixed repository, name, version and credential
/// identity (a hash of username and password, or `anonymous`).
fn cache_key(request: &ChartPull) -> String {
    let mut hasher = Sha256::new();
    let mut part = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    part(b"kuvryn-sync/chart-pull/v1");
    part(request.repository.trim_end_matches('/').as_bytes());
    part(request.name.as_bytes());
    part(request.version.as_bytes());
    match &request.credentials {
        Some(c) => {
            part(b"basic");
            part(c.username.as_bytes());
            part(c.password.expose_secret().as_bytes());
        }
        None => part(b"anonymous"),
    }
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn request_redactor(request: &ChartPull) -> Redactor {
    let mut redactor = Redactor::new();
    if let Some(c) = &request.credentials {
        redactor.add_secret(c.password.expose_secret());
    }
    redactor
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn shown(url: &Url, redactor: &Redactor) -> String {
    let mut url = url.clone();
    let _ = url.set_password(None);
    let _ = url.set_username("");
    url.set_query(None);
    redact_shapes(&redactor.redact(url.as_str()))
}

fn remote(url: &Url, redactor: &Redactor, problem: String) -> ChartPullError {
    ChartPullError::Remote {
        url: shown(url, redactor),
        problem: redact_shapes(&redactor.redact(&problem)),
    }
}

fn invalid(request: &ChartPull, redactor: &Redactor, rule: &str) -> ChartPullError {
    ChartPullError::InvalidRepository {
        repository: redact_shapes(&redactor.redact(&request.repository)),
        rule: rule.to_owned(),
    }
}

fn not_found(request: &ChartPull, redactor: &Redactor) -> ChartPullError {
    ChartPullError::NotFound {
        repository: redact_shapes(&redactor.redact(&request.repository)),
        name: request.name.clone(),
        version: request.version.clone(),
    }
}

fn cache_error(what: &str, error: &std::io::Error) -> ChartPullError {
    ChartPullError::Cache(format!("{what}: {}", error.kind()))
}

/// reqwest's error without its URL (we show our own, redacted) but with the causes.
fn transport_problem(error: &reqwest::Error) -> String {
    let mut text = if error.is_timeout() {
        "timed out".to_owned()
    } else if error.is_connect() {
        "cannot connect".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn expect_success(
    response: Response,
    url: &Url,
    redactor: &Redactor,
) -> Result<Response, ChartPullError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        return Err(ChartPullError::Authentication {
            url: shown(url, redactor),
            status: status.as_u16(),
        });
    }
    if status.is_redirection() {
        return Err(remote(
            url,
            redactor,
            format!("HTTP {} redirect is not followed", status.as_u16()),
        ));
    }
    Err(remote(url, redactor, format!("HTTP {}", status.as_u16())))
}

/// The body, refused once it passes `limit` bytes.
fn read_capped(
    response: Response,
    limit: u64,
    url: &Url,
    redactor: &Redactor,
) -> Result<Vec<u8>, ChartPullError> {
    if response.content_length().is_some_and(|len| len > limit) {
        return Err(remote(
            url,
            redactor,
            format!("the answer is larger than the limit of {limit} bytes"),
        ));
    }
    let mut body = Vec::new();
    response
        .take(limit + 1)
        .read_to_end(&mut body)
        .map_err(|e| remote(url, redactor, format!("reading the answer failed ({})", e.kind())))?;
    if body.len() as u64 > limit {
        return Err(remote(
            url,
            redactor,
            format!("the answer is larger than the limit of {limit} bytes"),
        ));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).expect("url")
    }

    #[test]
    fn repositories_parse_into_https_bases_and_oci_paths() {
        let r = Redactor::new();
        assert_eq!(
            parse_repository("https://h.example/charts", &r).ok(),
            Some(Repository::Https(url("https://h.example/charts/")))
        );
        assert_eq!(
            parse_repository("oci://127.0.0.1:5000/team/charts/", &r).ok(),
            Some(Repository::Oci {
                registry: url("https://127.0.0.1:5000/"),
                path: "team/charts".into()
            })
        );
        assert_eq!(
            parse_repository("oci://reg.example", &r).ok(),
            Some(Repository::Oci { registry: url("https://reg.example/"), path: String::new() })
        );
        let refused = [
            "http://h/x",
            "https://u:hunter2pass@h/x",
            "ftp://h",
            "not a url",
            "https://h/x?y=1",
            "oci://h/a/../b",
        ];
        for repository in refused {
            let err = parse_repository(repository, &r).expect_err(repository);
            assert!(!err.to_string().contains("hunter2pass"), "{err}");
        }
    }

    #[test]
    fn index_entries_match_the_exact_version() {
        let index = b"apiVersion: v1\nentries:\n  web:\n  - version: 1.2.0\n    urls: [web-1.2.0.tgz]\n    digest: abc\n  - version: 1.10.0\n    urls: [https://cdn.example/web-1.10.0.tgz]\n  other:\n  - version: 1.2.0\n    urls: []\n";
        let cases = [
            (
                "web",
                "1.2.0",
                Ok(IndexEntry { url: "web-1.2.0.tgz".into(), digest: Some("abc".into()) }),
            ),
            (
                "web",
                "1.10.0",
                Ok(IndexEntry { url: "https://cdn.example/web-1.10.0.tgz".into(), digest: None }),
            ),
            ("web", "1.2", Err(IndexProblem::Missing)),
            ("web", "^1.2.0", Err(IndexProblem::Missing)),
            ("nope", "1.2.0", Err(IndexProblem::Missing)),
        ];
        for (name, version, want) in cases {
            assert_eq!(find_index_entry(index, name, version), want, "{name} {version}");
        }
        assert!(matches!(find_index_entry(index, "other", "1.2.0"), Err(IndexProblem::Invalid(_))));
        assert!(matches!(find_index_entry(b"[1, 2", "web", "1"), Err(IndexProblem::Invalid(_))));
    }

    #[test]
    fn chart_urls_resolve_against_the_repository_and_credentials_stay_on_its_origin() {
        let base = url("https://charts.example:8443/team/");
        let cases = [
            ("web-1.0.0.tgz", Some("https://charts.example:8443/team/web-1.0.0.tgz"), true),
            ("/other/web.tgz", Some("https://charts.example:8443/other/web.tgz"), true),
            ("https://cdn.example/web.tgz", Some("https://cdn.example/web.tgz"), false),
            (
                "https://charts.example/team/web.tgz",
                Some("https://charts.example/team/web.tgz"),
                false,
            ),
            ("http://charts.example:8443/team/web.tgz", None, false),
            ("https://u:p@charts.example:8443/web.tgz", None, false),
        ];
        for (entry, want, credentials) in cases {
            let got = resolve_chart_url(&base, entry).ok();
            assert_eq!(got.as_ref().map(Url::as_str), want, "{entry}");
            if let Some(got) = got {
                assert_eq!(same_origin(&got, &base), credentials, "{entry}");
            }
        }
    }

    #[test]
    fn manifests_must_hold_exactly_one_chart_layer() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let one = format!(
            r#"{{"layers":[{{"mediaType":"{HELM_CHART_LAYER}","digest":"{digest}","size":12}}]}}"#
        );
        assert_eq!(chart_layer(one.as_bytes()), Ok(Layer { digest: digest.clone(), size: 12 }));
        let image = format!(
            r#"{{"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"{digest}"}}]}}"#
        );
        assert!(chart_layer(image.as_bytes()).is_err());
        let bad =
            format!(r#"{{"layers":[{{"mediaType":"{HELM_CHART_LAYER}","digest":"md5:x"}}]}}"#);
        assert!(chart_layer(bad.as_bytes()).is_err());
    }

    #[test]
    fn cache_keys_differ_by_credentials() {
        let base = ChartPull {
            repository: "oci://r/x".into(),
            name: "web".into(),
            version: "1.0.0".into(),
            credentials: None,
        };
        let with = |user: &str, pass: &str| ChartPull {
            credentials: Some(ChartCredentials {
                username: user.into(),
                password: SecretString::from(pass.to_owned()),
            }),
            ..base.clone()
        };
        let keys = [
            cache_key(&base),
            cache_key(&with("a", "p1")),
            cache_key(&with("a", "p2")),
            cache_key(&with("b", "p1")),
        ];
        let unique: std::collections::BTreeSet<_> = keys.iter().collect();
        assert_eq!(unique.len(), keys.len());
        assert_eq!(cache_key(&with("a", "p1")), keys[1]);
    }

    #[test]
    fn tags_follow_the_oci_grammar() {
        for (tag, ok) in
            [("1.2.3", true), ("1.2.3_build.1", true), ("", false), ("-x", false), ("a/b", false)]
        {
            assert_eq!(valid_tag(tag), ok, "{tag}");
        }
    }
}
