//! The OCI registry edge of image automation: list an image repository's tags and read the
//! manifest digest of one tag, through the OCI distribution API, for ImagePolicy scans.
//!
//! - **Image references** ([`ImageRef::parse`], errors name `spec.image`): `ghcr.io/acme/api`,
//!   `127.0.0.1:5000/team/app`, `[::1]:5000/app`, and Docker Hub short names (`nginx` →
//!   `registry-1.docker.io` + `library/nginx`; `docker.io/…` and `index.docker.io/…` likewise). A
//!   first path component is a registry host when it holds a `.` or a `:` or is `localhost`.
//!   Tags (`:1.2`), digests (`@sha256:…`), schemes and upper-case paths are refused: `spec.image`
//!   names a repository and the policy picks the tag. Registries are spoken to over https only.
//! - **Tags** ([`RegistryClient::list_tags`]): `GET /v2/<name>/tags/list`, with `n=` when
//!   [`RegistryOptions::page_size`] is set, following the `Link: <…>; rel="next"` header (which
//!   must stay on the registry); a registry that honours `n`/`last` without sending `Link` is
//!   paged with `last=` until a page is short or brings nothing new. Every reply is read through
//!   a size cap ([`RegistryOptions::max_response_bytes`]) and the whole list through a count cap
//!   ([`RegistryOptions::max_tags`]): past it the scan fails rather than choosing from a partial
//!   list. Tags that break the OCI tag grammar are dropped, duplicates kept once.
//! - **Digests** ([`RegistryClient::digest`]): `HEAD /v2/<name>/manifests/<tag>` with the OCI
//!   manifest and index and the Docker manifest and manifest-list media types in `Accept`
//!   (registries answer 404 for an OCI manifest that was not asked for), read from
//!   `Docker-Content-Digest`; only when that header is missing, a `GET` of the manifest (capped)
//!   and its SHA-256.
//! - **Authentication** as registries do it: a request goes out anonymously (or with an
//!   `Authorization` value cached for this registry, repository and login); a `401` from the
//!   registry itself is answered per its `WWW-Authenticate` challenge: `Basic` with the login, or
//!   `Bearer` by asking the token endpoint (`realm`, with `service` and
//!   `scope=repository:<name>:pull`) and retrying with the token. A second `401`/`403` is
//!   [`RegistryError::Unauthorized`], which says whether credentials were given and refused or
//!   missing, and never holds them.
//! - **Credentials go only to the registry they are for**: the `Authorization` header (basic or
//!   token) is sent only to URLs with the registry's scheme, host and port. Redirects are never
//!   followed by the HTTP client; this module follows them by hand (at most
//!   [`RegistryOptions::max_redirects`], https only), dropping `Authorization` on any hop that
//!   leaves the registry's origin, and it answers `401` challenges only from the registry itself.
//!   The login goes to a Bearer token realm only over https and only when the realm is the
//!   registry's own host, or its parent domain or a host under it (`registry-1.docker.io` →
//!   `auth.docker.io`, `registry.gitlab.com` → `gitlab.com`; a host with a one-label parent such
//!   as `ghcr.io` only matches itself, IP addresses only themselves). Any other realm is asked
//!   for an anonymous token, which serves public images and fails with `Unauthorized` otherwise.
//!   The token endpoint's own redirects are not followed.
//! - **TLS** trusts the system roots plus `SSL_CERT_FILE` and `SSL_CERT_DIR` (how a private
//!   registry CA is mounted into the controller) plus [`RegistryOptions::extra_ca_file`], all
//!   merged into one root store: unlike the platform verifier, which replaces the system roots
//!   when `SSL_CERT_FILE` is set, a mounted private CA does not cut off public registries.
//! - **Errors** ([`RegistryError`]) name the registry and what to do; messages pass through a
//!   [`Redactor`] holding the password and through
//!   [`redact_shapes`](kuvryn_sync_core::redact::redact_shapes). [`RegistryLogin`]'s `Debug`
//!   hides the password.
//!
//! Why not `oci-client` (docs/architecture.md#dependencies lists it): its 0.18 client keeps one
//! login per registry host for its whole life (the first one stored wins) and caches tokens per
//! repository regardless of who asked, so one shared client would serve a second tenant's scan
//! with the first tenant's credentials; it sends the login to whatever token realm a registry
//! names; it reads every reply whole without a size cap; it hides the `Link` header of tag
//! listings; and it swallows token errors into an anonymous retry. So the distribution API calls
//! here are hand-written over reqwest (async, rustls, the process's ring provider), with
//! `http-auth` parsing challenges and `rustls-native-certs` loading certificate files.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kuvryn_sync_api::FailureReason;
use kuvryn_sync_core::redact::{Redactor, redact_shapes};
use reqwest::header::{
    ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue, LINK, LOCATION, WWW_AUTHENTICATE,
};
use reqwest::{Client, Method, Response, StatusCode, Url};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The registry Docker Hub short names and `docker.io/…` resolve to.
pub const DOCKER_HUB_REGISTRY: &str = "registry-1.docker.io";
/// The field image references come from, named in every [`RegistryError::InvalidImage`].
const IMAGE_FIELD: &str = "spec.image";
/// Manifest media types asked for when reading a digest: OCI manifest and index, Docker manifest
/// and manifest list.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";
/// Largest token endpoint answer read.
const MAX_TOKEN_BYTES: u64 = 1024 * 1024;
/// How long a token lives when the token endpoint does not say (the distribution spec's default).
const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(60);
/// How long a `Basic` authorization is reused before the next challenge is awaited again.
const BASIC_LIFETIME: Duration = Duration::from_secs(600);
/// Most cached authorizations kept.
const MAX_CACHED_AUTHORIZATIONS: usize = 1024;
/// Well-known locations of the system CA bundle (Debian/Ubuntu, Fedora/RHEL, openSUSE, Alpine).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// A user name and password for a registry: what the controller takes from a
/// `kubernetes.io/dockerconfigjson` Secret's entry for the image's registry.
#[derive(Clone)]
pub struct RegistryLogin {
    /// User name.
    pub username: String,
    /// Password or access token.
    pub password: SecretString,
}

impl std::fmt::Debug for RegistryLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryLogin").field("username", &self.username).finish_non_exhaustive()
    }
}

/// Limits and trust of a [`RegistryClient`].
#[derive(Clone, Debug)]
pub struct RegistryOptions {
    /// Bound on one HTTP request, connecting and reading the whole reply included.
    pub timeout: Duration,
    /// Most tags one listing may return; more fails the scan.
    pub max_tags: usize,
    /// Largest single reply read (a tag page, a manifest).
    pub max_response_bytes: u64,
    /// `n=` asked per tag page; `None` leaves the page size to the registry.
    pub page_size: Option<u32>,
    /// Most redirects followed for one request.
    pub max_redirects: usize,
    /// A PEM bundle trusted on top of the system roots: `SSL_CERT_FILE` by default.
    pub ssl_cert_file: Option<PathBuf>,
    /// Directories of PEM certificates trusted on top of the system roots: `SSL_CERT_DIR`
    /// (`:`-separated) by default.
    pub ssl_cert_dirs: Vec<PathBuf>,
    /// One more PEM bundle to trust (a controller flag, or a test CA).
    pub extra_ca_file: Option<PathBuf>,
}

impl Default for RegistryOptions {
    /// 30 s requests, 10 000 tags, 4 MiB replies, the registry's page size, 5 redirects, and
    /// `SSL_CERT_FILE`/`SSL_CERT_DIR` from the environment.
    fn default() -> Self {
        let ssl_cert_file =
            std::env::var_os("SSL_CERT_FILE").filter(|v| !v.is_empty()).map(PathBuf::from);
        let ssl_cert_dirs = std::env::var_os("SSL_CERT_DIR")
            .map(|dirs| {
                std::env::split_paths(&dirs).filter(|d| !d.as_os_str().is_empty()).collect()
            })
            .unwrap_or_default();
        Self {
            timeout: Duration::from_secs(30),
            max_tags: 10_000,
            max_response_bytes: 4 * 1024 * 1024,
            page_size: None,
            max_redirects: 5,
            ssl_cert_file,
            ssl_cert_dirs,
            extra_ca_file: None,
        }
    }
}

/// A parsed `spec.image`: a registry and a repository in it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ImageRef {
    /// `host[:port]`, lower-cased; Docker Hub is [`DOCKER_HUB_REGISTRY`].
    pub registry: String,
    /// The repository path, such as `acme/api` or `library/nginx`.
    pub repository: String,
}

impl std::fmt::Display for ImageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)
    }
}

impl ImageRef {
    /// Parse an image repository reference (see the module docs for the accepted forms).
    pub fn parse(image: &str) -> Result<Self, RegistryError> {
        let invalid = |rule: &str| RegistryError::InvalidImage {
            image: redact_shapes(image),
            rule: rule.to_owned(),
        };
        if image.is_empty() {
            return Err(invalid("it is empty; name an image repository such as ghcr.io/acme/api"));
        }
        if image.len() > 255 {
            return Err(invalid("it is longer than 255 characters"));
        }
        if image.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid("it must not contain spaces or control characters"));
        }
        if image.contains("://") {
            return Err(invalid(
                "it must not have a scheme; write the repository alone, such as ghcr.io/acme/api",
            ));
        }
        if image.contains('@') {
            return Err(invalid(
                "it must not hold a digest (@sha256:…); name the repository and let the policy select",
            ));
        }
        let (first, rest) = image.split_once('/').unwrap_or(("", image));
        let explicit_registry = !first.is_empty()
            && (first.contains('.') || first.contains(':') || first == "localhost");
        let (registry, path) = if explicit_registry {
            (first.to_ascii_lowercase(), rest)
        } else {
            (DOCKER_HUB_REGISTRY.to_owned(), image)
        };
        if path.rsplit('/').next().is_some_and(|last| last.contains(':')) {
            return Err(invalid(
                "it must not hold a tag (:tag); name the repository and let the policy select the tag",
            ));
        }
        if explicit_registry {
            check_registry_host(&registry).map_err(|rule| invalid(&rule))?;
        }
        let registry = match registry.as_str() {
            "docker.io" | "index.docker.io" => DOCKER_HUB_REGISTRY.to_owned(),
            _ => registry,
        };
        if path.is_empty() {
            return Err(invalid("it names a registry but no repository"));
        }
        for component in path.split('/') {
            if !kuvryn_sync_core::oci_name::component_ok(component) {
                return Err(invalid(&format!(
                    "path component {component:?} is not valid: use lower-case letters, digits and single separators (. _ __ -), not at either end"
                )));
            }
        }
        let repository = if registry == DOCKER_HUB_REGISTRY && !path.contains('/') {
            format!("library/{path}")
        } else {
            path.to_owned()
        };
        if repository.len() > 255 {
            return Err(invalid("the repository path is longer than 255 characters"));
        }
        Ok(Self { registry, repository })
    }

    /// `https://<registry>/`.
    fn origin(&self) -> Result<Url, RegistryError> {
        Url::parse(&format!("https://{}/", self.registry)).map_err(|_| {
            RegistryError::InvalidImage {
                image: self.to_string(),
                rule: "the registry host does not form a URL".into(),
            }
        })
    }
}

/// `host`, `host:port` or `[v6]:port`: letters, digits, `.` and `-`, not starting with `-` or `.`.
fn check_registry_host(registry: &str) -> Result<(), String> {
    let (host, port) = if let Some(rest) = registry.strip_prefix('[') {
        let (v6, after) = rest.split_once(']').ok_or("the IPv6 registry host lacks its ']'")?;
        if v6.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("registry host [{v6}] is not an IPv6 address"));
        }
        let port = match after {
            "" => None,
            _ => {
                Some(after.strip_prefix(':').ok_or("only :port may follow an IPv6 registry host")?)
            }
        };
        (None, port)
    } else {
        match registry.split_once(':') {
            Some((host, port)) => (Some(host), Some(port)),
            None => (Some(registry), None),
        }
    };
    if let Some(host) = host {
        let ok_chars = host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
        if host.is_empty()
            || !ok_chars
            || host.starts_with(['-', '.'])
            || host.ends_with(['-', '.'])
        {
            return Err(format!(
                "registry host {host:?} is not a host name: use letters, digits, '.' and '-'"
            ));
        }
    }
    if let Some(port) = port
        && !port.parse::<u16>().is_ok_and(|p| p > 0)
    {
        return Err(format!("registry port {port:?} is not a port number (1-65535)"));
    }
    Ok(())
}

/// OCI tag grammar: `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
pub fn valid_tag(tag: &str) -> bool {
    let mut chars = tag.chars();
    tag.len() <= 128
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// `sha256:<64 hex>` or `sha512:<128 hex>`, lower case.
fn valid_digest(digest: &str) -> bool {
    let hex = |s: &str, len: usize| {
        s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    match digest.split_once(':') {
        Some(("sha256", h)) => hex(h, 64),
        Some(("sha512", h)) => hex(h, 128),
        _ => false,
    }
}

/// Why a registry read failed; every message is redacted and safe to show.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// `spec.image` is not an image repository reference we accept.
    #[error("{IMAGE_FIELD} {image:?} is invalid: {rule}")]
    InvalidImage {
        /// The reference as given, redacted.
        image: String,
        /// The rule it breaks.
        rule: String,
    },
    /// A tag is not valid OCI tag syntax.
    #[error("tag {tag:?} is invalid: it must match [A-Za-z0-9_][A-Za-z0-9._-]{{0,127}}")]
    InvalidTag {
        /// The tag.
        tag: String,
    },
    /// The registry refused us: the credentials were wrong, or it needs some and none were given.
    #[error("{}", unauthorized_message(registry, repository, *status, *credentials_given))]
    Unauthorized {
        /// `host[:port]` that refused.
        registry: String,
        /// The repository.
        repository: String,
        /// 401 or 403.
        status: u16,
        /// Whether a login was sent.
        credentials_given: bool,
    },
    /// The repository or the tag does not exist.
    #[error("{} not found in registry {registry}", not_found_what(repository, tag.as_deref()))]
    NotFound {
        /// `host[:port]`.
        registry: String,
        /// The repository.
        repository: String,
        /// The tag, for a manifest read.
        tag: Option<String>,
    },
    /// The TLS handshake failed (an untrusted or mismatching certificate, most often).
    #[error(
        "TLS with registry {registry} failed: {detail}; if it uses a private CA, mount the CA and point SSL_CERT_FILE or SSL_CERT_DIR at it"
    )]
    Tls {
        /// `host[:port]`.
        registry: String,
        /// The TLS error, redacted.
        detail: String,
    },
    /// A request did not finish within the timeout.
    #[error("registry {registry} did not answer {url} within {seconds}s")]
    Timeout {
        /// `host[:port]`.
        registry: String,
        /// The URL, without query, redacted.
        url: String,
        /// The timeout.
        seconds: u64,
    },
    /// The registry could not be reached.
    #[error("cannot reach registry {registry} ({url}): {detail}")]
    Unreachable {
        /// `host[:port]`.
        registry: String,
        /// The URL, without query, redacted.
        url: String,
        /// What went wrong, redacted.
        detail: String,
    },
    /// An HTTP status we cannot act on.
    #[error("registry {registry} answered {url} with HTTP {status}")]
    Status {
        /// `host[:port]`.
        registry: String,
        /// The URL, without query, redacted.
        url: String,
        /// The status.
        status: u16,
    },
    /// A reply we cannot use: not JSON, too large, a bad digest, a redirect we refuse.
    #[error("unusable reply from registry {registry} ({url}): {problem}")]
    Malformed {
        /// `host[:port]`.
        registry: String,
        /// The URL, without query, redacted.
        url: String,
        /// What is wrong, redacted.
        problem: String,
    },
    /// The client could not be built (no crypto provider, unreadable CA files).
    #[error("registry client setup failed: {0}")]
    Setup(String),
}

fn unauthorized_message(
    registry: &str,
    repository: &str,
    status: u16,
    credentials_given: bool,
) -> String {
    if credentials_given {
        format!(
            "registry {registry} refused the credentials for {repository} (HTTP {status}); check the user name and password for {registry} in the registry credentials Secret (spec.secretRef)"
        )
    } else {
        format!(
            "registry {registry} requires credentials for {repository} (HTTP {status}) and none were given; set spec.secretRef to a kubernetes.io/dockerconfigjson Secret labelled sync.kuvryn.io/registry-credentials: \"true\""
        )
    }
}

fn not_found_what(repository: &str, tag: Option<&str>) -> String {
    match tag {
        Some(tag) => format!("tag {tag:?} of repository {repository}"),
        None => format!("repository {repository}"),
    }
}

impl RegistryError {
    /// The failure reason for conditions: refused credentials are `AuthenticationFailure`,
    /// everything else a `SourceFailure`.
    pub fn reason(&self) -> FailureReason {
        match self {
            RegistryError::Unauthorized { .. } => FailureReason::AuthenticationFailure,
            _ => FailureReason::SourceFailure,
        }
    }
}

/// An `Authorization` value that worked, and until when to reuse it.
struct CachedAuthorization {
    value: SecretString,
    expires: Instant,
}

/// Reads tags and digests from OCI registries. Build one and share it: it holds one HTTP
/// connection pool and a cache of authorizations keyed by registry, repository and login.
pub struct RegistryClient {
    http: Client,
    options: RegistryOptions,
    authorizations: Mutex<HashMap<String, CachedAuthorization>>,
}

impl std::fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cached = self.authorizations.lock().map(|c| c.len()).unwrap_or_default();
        f.debug_struct("RegistryClient")
            .field("options", &self.options)
            .field("cached_authorizations", &cached)
            .finish_non_exhaustive()
    }
}

impl RegistryClient {
    /// A client trusting the system roots plus the option's certificate files. The process must
    /// have installed a rustls crypto provider (`kuvryn_sync_runtime::tls::install_crypto_provider`).
    pub fn new(options: RegistryOptions) -> Result<Self, RegistryError> {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            return Err(RegistryError::Setup(
                "no rustls crypto provider is installed in this process; install one first".into(),
            ));
        }
        let roots = trust_roots(
            options.ssl_cert_file.as_deref(),
            &options.ssl_cert_dirs,
            options.extra_ca_file.as_deref(),
        )
        .map_err(RegistryError::Setup)?;
        let http = Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(options.timeout)
            .connect_timeout(options.timeout)
            .user_agent("kuvryn-sync")
            .tls_certs_only(roots)
            .build()
            .map_err(|_| RegistryError::Setup("cannot build the HTTP client".into()))?;
        Ok(Self { http, options, authorizations: Mutex::new(HashMap::new()) })
    }

    /// Every tag of `image` (a `spec.image` reference), in the registry's order, paged and
    /// capped as the module docs say.
    pub async fn list_tags(
        &self,
        image: &str,
        login: Option<&RegistryLogin>,
    ) -> Result<Vec<String>, RegistryError> {
        let image = ImageRef::parse(image)?;
        let mut session = Session::new(self, &image, login)?;
        let first = session.url(&format!("v2/{}/tags/list", image.repository))?;
        let list_path = first.path().to_owned();
        let mut next = Some(first);
        if let (Some(url), Some(n)) = (next.as_mut(), self.options.page_size) {
            url.query_pairs_mut().append_pair("n", &n.to_string());
        }
        let mut tags = Vec::new();
        let mut seen = HashSet::new();
        // Each page must bring a new tag, so this ends; the bound is a second guard.
        let max_pages = self.options.max_tags + 2;
        for _ in 0..max_pages {
            let Some(url) = next.take() else { break };
            let (response, answered_by) = session.send(Method::GET, &url, None).await?;
            let status = response.status();
            if status == StatusCode::NOT_FOUND {
                return Err(session.not_found(None));
            }
            if !status.is_success() {
                return Err(session.status_error(&answered_by, status));
            }
            let link = next_link(response.headers(), &answered_by);
            let body =
                read_capped(response, self.options.max_response_bytes, &session, &answered_by)
                    .await?;
            let page: TagPage = serde_json::from_slice(&body).map_err(|_| {
                session.malformed(&answered_by, "the tag list is not {\"tags\": [...]} JSON")
            })?;
            let page_tags = page.tags.unwrap_or_default();
            let page_len = page_tags.len();
            let mut new = 0;
            for tag in page_tags {
                if valid_tag(&tag) && seen.insert(tag.clone()) {
                    new += 1;
                    tags.push(tag);
                }
            }
            if tags.len() > self.options.max_tags {
                return Err(session.malformed(
                    &answered_by,
                    &format!(
                        "the repository has more than {} tags, the limit of one scan",
                        self.options.max_tags
                    ),
                ));
            }
            next = match link {
                Some(Ok(link)) => {
                    if !same_origin(&link, &session.origin) || link.path() != list_path {
                        return Err(session.malformed(
                            &answered_by,
                            "the next-page link leaves the registry's tag list",
                        ));
                    }
                    (new > 0).then_some(link)
                }
                Some(Err(())) => {
                    return Err(session.malformed(&answered_by, "the Link header is not valid"));
                }
                // No Link: page on with `last` only while full pages bring new tags.
                None => match (self.options.page_size, tags.last()) {
                    (Some(n), Some(last)) if page_len == n as usize && new > 0 => {
                        let mut url = session.url(&format!("v2/{}/tags/list", image.repository))?;
                        url.query_pairs_mut()
                            .append_pair("n", &n.to_string())
                            .append_pair("last", last);
                        Some(url)
                    }
                    _ => None,
                },
            };
        }
        if next.is_some() {
            return Err(session.malformed(&session.origin.clone(), "the tag list never ends"));
        }
        Ok(tags)
    }

    /// The manifest digest (`sha256:<hex>`) `tag` of `image` points at: `HEAD` first, a `GET`
    /// and its SHA-256 only when the registry sends no `Docker-Content-Digest`.
    pub async fn digest(
        &self,
        image: &str,
        tag: &str,
        login: Option<&RegistryLogin>,
    ) -> Result<String, RegistryError> {
        let image = ImageRef::parse(image)?;
        if !valid_tag(tag) {
            return Err(RegistryError::InvalidTag { tag: redact_shapes(tag) });
        }
        let mut session = Session::new(self, &image, login)?;
        let url = session.url(&format!("v2/{}/manifests/{tag}", image.repository))?;
        let (response, answered_by) =
            session.send(Method::HEAD, &url, Some(MANIFEST_ACCEPT)).await?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND {
            return Err(session.not_found(Some(tag)));
        }
        if !status.is_success() {
            return Err(session.status_error(&answered_by, status));
        }
        if let Some(digest) = content_digest(response.headers()) {
            return match digest {
                Ok(digest) => Ok(digest),
                Err(()) => Err(session.malformed(
                    &answered_by,
                    "Docker-Content-Digest is not a sha256/sha512 digest",
                )),
            };
        }
        let (response, answered_by) =
            session.send(Method::GET, &url, Some(MANIFEST_ACCEPT)).await?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND {
            return Err(session.not_found(Some(tag)));
        }
        if !status.is_success() {
            return Err(session.status_error(&answered_by, status));
        }
        let body =
            read_capped(response, self.options.max_response_bytes, &session, &answered_by).await?;
        Ok(sha256_digest(&body))
    }

    fn cached_authorization(&self, key: &str) -> Option<SecretString> {
        let cache = self.authorizations.lock().ok()?;
        cache.get(key).filter(|c| c.expires > Instant::now()).map(|c| c.value.clone())
    }

    fn cache_authorization(&self, key: String, value: SecretString, lifetime: Duration) {
        let Ok(mut cache) = self.authorizations.lock() else { return };
        if cache.len() >= MAX_CACHED_AUTHORIZATIONS {
            let now = Instant::now();
            cache.retain(|_, c| c.expires > now);
            if cache.len() >= MAX_CACHED_AUTHORIZATIONS {
                cache.clear();
            }
        }
        cache.insert(key, CachedAuthorization { value, expires: Instant::now() + lifetime });
    }

    fn forget_authorization(&self, key: &str) {
        if let Ok(mut cache) = self.authorizations.lock() {
            cache.remove(key);
        }
    }
}

#[derive(Deserialize)]
struct TagPage {
    #[serde(default)]
    tags: Option<Vec<String>>,
}

/// One read against one repository: the registry's origin, the login and the `Authorization`
/// value in use.
struct Session<'a> {
    client: &'a RegistryClient,
    image: &'a ImageRef,
    origin: Url,
    login: Option<&'a RegistryLogin>,
    redactor: Redactor,
    cache_key: String,
    authorization: Option<SecretString>,
}

impl<'a> Session<'a> {
    fn new(
        client: &'a RegistryClient,
        image: &'a ImageRef,
        login: Option<&'a RegistryLogin>,
    ) -> Result<Self, RegistryError> {
        let origin = image.origin()?;
        let mut redactor = Redactor::new();
        if let Some(login) = login {
            redactor.add_secret(login.password.expose_secret());
        }
        let cache_key = authorization_key(image, login);
        let authorization = client.cached_authorization(&cache_key);
        Ok(Self { client, image, origin, login, redactor, cache_key, authorization })
    }

    fn url(&self, path: &str) -> Result<Url, RegistryError> {
        self.origin.join(path).map_err(|_| RegistryError::InvalidImage {
            image: self.image.to_string(),
            rule: "the repository does not form a URL path".into(),
        })
    }

    /// Send `method` to `url`, following redirects by hand and answering one challenge of the
    /// registry; returns the final answer and the URL that gave it. A refusal after answering
    /// the challenge is [`RegistryError::Unauthorized`].
    async fn send(
        &mut self,
        method: Method,
        url: &Url,
        accept: Option<&str>,
    ) -> Result<(Response, Url), RegistryError> {
        let mut challenged = false;
        loop {
            let (response, answered_by) = self.send_following(method.clone(), url, accept).await?;
            let status = response.status();
            let from_registry = same_origin(&answered_by, &self.origin);
            if status == StatusCode::UNAUTHORIZED && from_registry && !challenged {
                challenged = true;
                if self.authorization.take().is_some() {
                    self.client.forget_authorization(&self.cache_key);
                }
                let challenge = response
                    .headers()
                    .get_all(WWW_AUTHENTICATE)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .find_map(parse_challenge);
                let Some(challenge) = challenge else {
                    return Err(self.unauthorized(status));
                };
                self.authorize(&challenge).await?;
                continue;
            }
            if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
                if !from_registry {
                    return Err(self.malformed(
                        &answered_by,
                        &format!(
                            "a redirect led to another host that answered HTTP {}; credentials are never sent there",
                            status.as_u16()
                        ),
                    ));
                }
                return Err(self.unauthorized(status));
            }
            return Ok((response, answered_by));
        }
    }

    async fn send_following(
        &self,
        method: Method,
        url: &Url,
        accept: Option<&str>,
    ) -> Result<(Response, Url), RegistryError> {
        let mut current = url.clone();
        let mut hops = 0;
        loop {
            let mut builder = self.client.http.request(method.clone(), current.clone());
            if let Some(accept) = accept {
                builder = builder.header(ACCEPT, accept);
            }
            if same_origin(&current, &self.origin)
                && let Some(value) = &self.authorization
            {
                let mut value = HeaderValue::from_str(value.expose_secret()).map_err(|_| {
                    RegistryError::Setup("the authorization is not a valid header value".into())
                })?;
                value.set_sensitive(true);
                builder = builder.header(AUTHORIZATION, value);
            }
            let response = builder.send().await.map_err(|e| self.transport(&current, &e))?;
            let status = response.status();
            if !status.is_redirection() || status == StatusCode::NOT_MODIFIED {
                return Ok((response, current));
            }
            if hops >= self.client.options.max_redirects {
                return Err(self.malformed(&current, "too many redirects"));
            }
            hops += 1;
            let location = response
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|l| current.join(l).ok())
                .ok_or_else(|| self.malformed(&current, "a redirect without a usable Location"))?;
            if location.scheme() != "https" {
                return Err(self.malformed(&current, "a redirect to a non-https URL is refused"));
            }
            if !location.username().is_empty() || location.password().is_some() {
                return Err(self.malformed(&current, "a redirect to a URL with credentials"));
            }
            current = location;
        }
    }

    /// Answer `challenge`: basic with the login, or a token from the realm.
    async fn authorize(&mut self, challenge: &Challenge) -> Result<(), RegistryError> {
        let (value, lifetime) = match challenge {
            Challenge::Basic => {
                let login =
                    self.login.ok_or_else(|| self.unauthorized(StatusCode::UNAUTHORIZED))?;
                let pair = format!("{}:{}", login.username, login.password.expose_secret());
                let value = SecretString::from(format!("Basic {}", base64_encode(pair.as_bytes())));
                (value, BASIC_LIFETIME)
            }
            Challenge::Bearer { realm, service } => self.token(realm, service.as_deref()).await?,
        };
        self.client.cache_authorization(self.cache_key.clone(), value.clone(), lifetime);
        self.authorization = Some(value);
        Ok(())
    }

    async fn token(
        &self,
        realm: &str,
        service: Option<&str>,
    ) -> Result<(SecretString, Duration), RegistryError> {
        let mut token_url = Url::parse(realm)
            .map_err(|_| self.malformed(&self.origin, "the token realm is not a URL"))?;
        if token_url.scheme() != "https" {
            return Err(self.malformed(&self.origin, "the token realm is not an https URL"));
        }
        {
            let mut query = token_url.query_pairs_mut();
            if let Some(service) = service {
                query.append_pair("service", service);
            }
            query.append_pair("scope", &format!("repository:{}:pull", self.image.repository));
        }
        let mut builder = self.client.http.get(token_url.clone());
        if let Some(login) =
            self.login.filter(|_| realm_may_receive_login(&token_url, &self.origin))
        {
            builder = builder.basic_auth(&login.username, Some(login.password.expose_secret()));
        }
        let response = builder.send().await.map_err(|e| self.transport(&token_url, &e))?;
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(self.unauthorized(status));
        }
        if !status.is_success() {
            return Err(self.status_error(&token_url, status));
        }
        let body = read_capped(response, MAX_TOKEN_BYTES, self, &token_url).await?;
        let answer = parse_token(&body)
            .ok_or_else(|| self.malformed(&token_url, "the token answer holds no token"))?;
        let lifetime = answer
            .expires_in
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(s.min(3600)))
            .unwrap_or(DEFAULT_TOKEN_LIFETIME);
        // Renew a little early rather than send a token that expires on the way.
        let lifetime = lifetime.saturating_sub(lifetime / 10);
        Ok((SecretString::from(format!("Bearer {}", answer.token)), lifetime))
    }

    fn registry(&self) -> String {
        self.image.registry.clone()
    }

    fn shown(&self, url: &Url) -> String {
        let mut url = url.clone();
        let _ = url.set_password(None);
        let _ = url.set_username("");
        url.set_query(None);
        self.redactor.redact(url.as_str())
    }

    fn unauthorized(&self, status: StatusCode) -> RegistryError {
        RegistryError::Unauthorized {
            registry: self.registry(),
            repository: self.image.repository.clone(),
            status: status.as_u16(),
            credentials_given: self.login.is_some(),
        }
    }

    fn not_found(&self, tag: Option<&str>) -> RegistryError {
        RegistryError::NotFound {
            registry: self.registry(),
            repository: self.image.repository.clone(),
            tag: tag.map(str::to_owned),
        }
    }

    fn status_error(&self, url: &Url, status: StatusCode) -> RegistryError {
        RegistryError::Status {
            registry: self.registry(),
            url: self.shown(url),
            status: status.as_u16(),
        }
    }

    fn malformed(&self, url: &Url, problem: &str) -> RegistryError {
        RegistryError::Malformed {
            registry: self.registry(),
            url: self.shown(url),
            problem: self.redactor.redact(problem),
        }
    }

    fn transport(&self, url: &Url, error: &reqwest::Error) -> RegistryError {
        let detail = self.redactor.redact(&error_causes(error));
        if error.is_timeout() {
            return RegistryError::Timeout {
                registry: self.registry(),
                url: self.shown(url),
                seconds: self.client.options.timeout.as_secs(),
            };
        }
        if is_tls_error(error) {
            return RegistryError::Tls { registry: host_port(url), detail };
        }
        RegistryError::Unreachable { registry: host_port(url), url: self.shown(url), detail }
    }
}

/// `host[:port]` of a URL, for errors about a host other than the registry.
fn host_port(url: &Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_owned(),
        _ => String::new(),
    }
}

/// The cache key of an authorization: registry, repository and the login (hashed).
fn authorization_key(image: &ImageRef, login: Option<&RegistryLogin>) -> String {
    let mut hasher = Sha256::new();
    let mut part = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    part(image.registry.as_bytes());
    part(image.repository.as_bytes());
    match login {
        Some(login) => {
            part(b"login");
            part(login.username.as_bytes());
            part(login.password.expose_secret().as_bytes());
        }
        None => part(b"anonymous"),
    }
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Same scheme, host and port (default ports included).
fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str().map(str::to_ascii_lowercase) == b.host_str().map(str::to_ascii_lowercase)
        && a.port_or_known_default() == b.port_or_known_default()
}

/// Whether the login may go to the token realm `realm` named by `registry` (see the module
/// docs): https, and the registry's host, its parent domain or a host under that parent.
fn realm_may_receive_login(realm: &Url, registry: &Url) -> bool {
    if realm.scheme() != "https" {
        return false;
    }
    let (Some(realm), Some(registry)) = (realm.host_str(), registry.host_str()) else {
        return false;
    };
    let realm = realm.to_ascii_lowercase();
    let registry = registry.to_ascii_lowercase();
    if realm == registry {
        return true;
    }
    let is_ip = |host: &str| host.starts_with('[') || host.parse::<std::net::IpAddr>().is_ok();
    if is_ip(&realm) || is_ip(&registry) {
        return false;
    }
    match registry.split_once('.') {
        Some((_, parent)) if parent.contains('.') => {
            realm == parent || realm.ends_with(&format!(".{parent}"))
        }
        _ => false,
    }
}

/// A `WWW-Authenticate` challenge we can answer (registry scans and OCI chart pulls).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Challenge {
    Basic,
    Bearer { realm: String, service: Option<String> },
}

/// The first `Basic` or `Bearer` challenge in a `WWW-Authenticate` value.
pub(crate) fn parse_challenge(header: &str) -> Option<Challenge> {
    let challenges = http_auth::parse_challenges(header).ok()?;
    challenges.into_iter().find_map(|c| {
        let param = |name: &str| {
            c.params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.to_unescaped())
        };
        if c.scheme.eq_ignore_ascii_case("basic") {
            Some(Challenge::Basic)
        } else if c.scheme.eq_ignore_ascii_case("bearer") {
            Some(Challenge::Bearer { realm: param("realm")?, service: param("service") })
        } else {
            None
        }
    })
}

pub(crate) struct TokenAnswer {
    pub(crate) token: String,
    expires_in: Option<u64>,
}

/// The token of a token endpoint's answer (`token` or `access_token`), refused when it could not
/// be a header value.
pub(crate) fn parse_token(body: &[u8]) -> Option<TokenAnswer> {
    #[derive(Deserialize)]
    struct Answer {
        token: Option<String>,
        access_token: Option<String>,
        expires_in: Option<u64>,
    }
    let answer: Answer = serde_json::from_slice(body).ok()?;
    let token = answer.token.or(answer.access_token).filter(|t| !t.is_empty())?;
    // It becomes a header value.
    if token.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return None;
    }
    Some(TokenAnswer { token, expires_in: answer.expires_in })
}

/// The `rel="next"` target of a `Link` header, resolved against `base`; `Some(Err)` when a
/// Link header is there but unusable.
fn next_link(headers: &HeaderMap, base: &Url) -> Option<Result<Url, ()>> {
    for value in headers.get_all(LINK) {
        let Ok(value) = value.to_str() else { return Some(Err(())) };
        for link in value.split(',') {
            let link = link.trim();
            let Some(rest) = link.strip_prefix('<') else { continue };
            let Some((target, params)) = rest.split_once('>') else { return Some(Err(())) };
            let is_next = params.split(';').any(|p| {
                let p = p.trim();
                p.split_once('=').is_some_and(|(k, v)| {
                    k.trim().eq_ignore_ascii_case("rel")
                        && v.trim().trim_matches('"').split_whitespace().any(|r| r == "next")
                })
            });
            if is_next {
                return Some(base.join(target).map_err(|_| ()));
            }
        }
    }
    None
}

/// A registry's replies as this client reads them, for the fuzz harness
/// (`tests/fuzzing`): the challenge of a `WWW-Authenticate` value, a token endpoint's answer, the
/// next page named by a `Link` value, a tag page and a `Docker-Content-Digest` value, each
/// through the same functions the client uses. Returns how many were usable; never panics.
#[doc(hidden)]
pub fn read_untrusted_replies(
    www_authenticate: &str,
    token_body: &[u8],
    link: &[u8],
    tag_page: &[u8],
    digest: &[u8],
) -> usize {
    let mut usable = 0;
    usable += usize::from(parse_challenge(www_authenticate).is_some());
    usable += usize::from(parse_token(token_body).is_some());
    let mut headers = HeaderMap::new();
    if let Ok(value) = HeaderValue::from_bytes(link) {
        headers.insert(LINK, value);
    }
    if let Ok(value) = HeaderValue::from_bytes(digest) {
        headers.insert("docker-content-digest", value);
    }
    let base = Url::parse("https://registry.invalid/v2/a/b/tags/list").expect("a valid URL");
    usable += usize::from(matches!(next_link(&headers, &base), Some(Ok(_))));
    usable += usize::from(matches!(content_digest(&headers), Some(Ok(_))));
    if let Ok(page) = serde_json::from_slice::<TagPage>(tag_page) {
        usable += page.tags.unwrap_or_default().iter().filter(|t| valid_tag(t)).count();
    }
    usable
}

/// `Docker-Content-Digest`, when present: valid or not.
fn content_digest(headers: &HeaderMap) -> Option<Result<String, ()>> {
    let value = headers.get("docker-content-digest")?;
    let digest = value.to_str().map(str::trim).unwrap_or_default();
    Some(if valid_digest(digest) { Ok(digest.to_owned()) } else { Err(()) })
}

/// `sha256:<hex>` of `bytes`.
fn sha256_digest(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    format!("sha256:{}", hash.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The body, refused once it passes `limit` bytes.
async fn read_capped(
    mut response: Response,
    limit: u64,
    session: &Session<'_>,
    url: &Url,
) -> Result<Vec<u8>, RegistryError> {
    let too_large =
        || session.malformed(url, &format!("the reply is larger than the limit of {limit} bytes"));
    if response.content_length().is_some_and(|len| len > limit) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| session.transport(url, &e))? {
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The causes of a transport error, without reqwest's own URL (callers show theirs).
fn error_causes(error: &reqwest::Error) -> String {
    let mut text = if error.is_timeout() {
        "timed out".to_owned()
    } else if error.is_connect() {
        "cannot connect".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let part = cause.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = cause.source();
    }
    text
}

/// Whether a rustls error is somewhere in the error's causes, also inside (nested) `io::Error`s,
/// whose `source()` skips the error they wrap.
fn is_tls_error(error: &reqwest::Error) -> bool {
    fn holds_rustls(error: &(dyn std::error::Error + 'static)) -> bool {
        if error.is::<rustls::Error>() {
            return true;
        }
        match error.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => holds_rustls(inner),
            None => false,
        }
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(cause) = source {
        if holds_rustls(cause) {
            return true;
        }
        source = cause.source();
    }
    false
}

/// The root store: the system bundle, `ssl_cert_file`, every `ssl_cert_dirs` entry and
/// `extra_ca_file`, as certificates rustls accepts (duplicates dropped). An explicit
/// `extra_ca_file` that cannot be read or holds no certificate is an error; so is an empty store.
fn trust_roots(
    ssl_cert_file: Option<&Path>,
    ssl_cert_dirs: &[PathBuf],
    extra_ca_file: Option<&Path>,
) -> Result<Vec<reqwest::Certificate>, String> {
    let mut ders: Vec<rustls::pki_types::CertificateDer<'static>> = Vec::new();
    match SYSTEM_BUNDLES.iter().map(Path::new).find(|p| p.is_file()) {
        Some(bundle) => {
            ders.extend(rustls_native_certs::load_certs_from_paths(Some(bundle), None).certs)
        }
        None => ders.extend(rustls_native_certs::load_native_certs().certs),
    }
    if let Some(file) = ssl_cert_file {
        ders.extend(rustls_native_certs::load_certs_from_paths(Some(file), None).certs);
    }
    for dir in ssl_cert_dirs {
        ders.extend(rustls_native_certs::load_certs_from_paths(None, Some(dir)).certs);
    }
    if let Some(file) = extra_ca_file {
        let loaded = rustls_native_certs::load_certs_from_paths(Some(file), None);
        if !loaded.errors.is_empty() || loaded.certs.is_empty() {
            return Err(format!(
                "the CA bundle {} cannot be read or holds no PEM certificate",
                file.display()
            ));
        }
        ders.extend(loaded.certs);
    }
    let mut seen = HashSet::new();
    let mut roots = Vec::new();
    for der in ders {
        if !seen.insert(der.as_ref().to_vec()) {
            continue;
        }
        // reqwest refuses the whole store for one certificate rustls cannot use; skip those.
        let mut probe = rustls::RootCertStore::empty();
        if probe.add(der.clone()).is_ok()
            && let Ok(cert) = reqwest::Certificate::from_der(der.as_ref())
        {
            roots.push(cert);
        }
    }
    if roots.is_empty() {
        return Err(
            "no trusted CA certificate found (system bundle, SSL_CERT_FILE, SSL_CERT_DIR)".into()
        );
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).expect("url")
    }

    #[test]
    fn image_references_resolve_to_a_registry_and_a_repository() {
        let cases = [
            ("ghcr.io/acme/api", "ghcr.io", "acme/api"),
            ("127.0.0.1:5000/team/app", "127.0.0.1:5000", "team/app"),
            ("localhost/app", "localhost", "app"),
            ("localhost:5000/a/b/c", "localhost:5000", "a/b/c"),
            ("[::1]:5000/app", "[::1]:5000", "app"),
            ("Registry.Example.com/x", "registry.example.com", "x"),
            ("nginx", DOCKER_HUB_REGISTRY, "library/nginx"),
            ("bitnami/redis", DOCKER_HUB_REGISTRY, "bitnami/redis"),
            ("docker.io/nginx", DOCKER_HUB_REGISTRY, "library/nginx"),
            ("index.docker.io/acme/web", DOCKER_HUB_REGISTRY, "acme/web"),
            ("quay.io/a__b/c-d.e_f", "quay.io", "a__b/c-d.e_f"),
            ("ghcr.io/a---b", "ghcr.io", "a---b"),
        ];
        for (image, registry, repository) in cases {
            let parsed = ImageRef::parse(image).unwrap_or_else(|e| panic!("{image}: {e}"));
            assert_eq!(
                (parsed.registry.as_str(), parsed.repository.as_str()),
                (registry, repository),
                "{image}"
            );
        }
    }

    #[test]
    fn invalid_image_references_are_refused_naming_the_field() {
        let refused = [
            ("", "empty"),
            ("ghcr.io/acme/api:1.2.3", "tag"),
            ("127.0.0.1:5000/app:latest", "tag"),
            ("nginx:1.25", "tag"),
            ("ghcr.io/acme/api@sha256:abc", "digest"),
            ("https://ghcr.io/acme/api", "scheme"),
            ("ghcr.io/Acme/api", "path component"),
            ("ghcr.io/acme//api", "path component"),
            ("ghcr.io/-acme/api", "path component"),
            ("ghcr.io/acme/api/", "path component"),
            ("ghcr.io/", "no repository"),
            ("-x.io/app", "host"),
            ("reg.example:0/app", "port"),
            ("reg.example:99999/app", "port"),
            ("reg.example:port/app", "port"),
            ("reg ex.io/app", "spaces"),
            ("ghcr.io/a..b", "path component"),
        ];
        for (image, needle) in refused {
            let err = ImageRef::parse(image).expect_err(image);
            let text = err.to_string();
            assert!(text.starts_with("spec.image "), "{image}: {text}");
            assert!(text.contains(needle), "{image}: {text} lacks {needle:?}");
            assert_eq!(err.reason(), FailureReason::SourceFailure);
        }
    }

    #[test]
    fn tags_and_digests_follow_the_oci_grammar() {
        for (tag, ok) in [
            ("1.2.3", true),
            ("v1.2.3-rc.1", true),
            ("_x", true),
            ("main-12", true),
            ("", false),
            ("-x", false),
            (".x", false),
            ("a/b", false),
            ("a:b", false),
        ] {
            assert_eq!(valid_tag(tag), ok, "{tag:?}");
        }
        assert!(!valid_tag(&"a".repeat(129)));
        let hex64 = "a".repeat(64);
        assert!(valid_digest(&format!("sha256:{hex64}")));
        assert!(valid_digest(&format!("sha512:{}", "0".repeat(128))));
        assert!(!valid_digest(&format!("sha256:{}", "A".repeat(64))));
        assert!(!valid_digest("sha256:abc"));
        assert!(!valid_digest(&format!("md5:{hex64}")));
    }

    #[test]
    fn challenges_parse_with_quoted_commas_and_unknown_schemes() {
        let cases = [
            ("Basic realm=\"test\"", Some(Challenge::Basic)),
            (
                "Bearer realm=\"https://auth.example/token\",service=\"registry.example\",scope=\"repository:a/b:pull,push\"",
                Some(Challenge::Bearer {
                    realm: "https://auth.example/token".into(),
                    service: Some("registry.example".into()),
                }),
            ),
            (
                "Negotiate, Bearer realm=\"https://r/t\"",
                Some(Challenge::Bearer { realm: "https://r/t".into(), service: None }),
            ),
            ("Bearer service=\"x\"", None),
            ("Negotiate", None),
            ("Bearer realm=\"unterminated", None),
        ];
        for (header, want) in cases {
            assert_eq!(parse_challenge(header), want, "{header}");
        }
        let answer = parse_token(br#"{"token":"t1","expires_in":300}"#).expect("token");
        assert_eq!((answer.token.as_str(), answer.expires_in), ("t1", Some(300)));
        assert_eq!(
            parse_token(br#"{"access_token":"t2"}"#).map(|a| a.token).as_deref(),
            Some("t2")
        );
        assert!(parse_token(br#"{"token":""}"#).is_none());
        assert!(parse_token(b"{\"token\":\"a\\r\\nX-Injected: 1\"}").is_none());
    }

    #[test]
    fn the_login_goes_only_to_the_registry_or_a_realm_in_its_domain() {
        let cases = [
            ("https://ghcr.io/", "https://ghcr.io/token", true),
            ("https://ghcr.io/", "https://evil.io/token", false),
            ("https://registry-1.docker.io/", "https://auth.docker.io/token", true),
            ("https://registry.gitlab.com/", "https://gitlab.com/jwt/auth", true),
            ("https://registry.gitlab.com/", "https://gitlab.com.evil.example/jwt", false),
            ("https://registry.gitlab.com/", "http://gitlab.com/jwt/auth", false),
            ("https://127.0.0.1:5000/", "https://127.0.0.1:5001/token", true),
            ("https://127.0.0.1:5000/", "https://localhost:5000/token", false),
            ("https://127.0.0.1:5000/", "https://127.0.0.2/token", false),
            ("https://reg.corp.example/", "https://sso.corp.example/token", true),
            ("https://reg.corp.example/", "https://corp.example.evil/token", false),
        ];
        for (registry, realm, allowed) in cases {
            assert_eq!(
                realm_may_receive_login(&url(realm), &url(registry)),
                allowed,
                "{registry} -> {realm}"
            );
        }
        assert!(same_origin(&url("https://Reg.Example/a"), &url("https://reg.example:443/b")));
        assert!(!same_origin(&url("https://reg.example/"), &url("https://reg.example:444/")));
        assert!(!same_origin(&url("https://127.0.0.1:5000/"), &url("https://localhost:5000/")));
    }

    #[test]
    fn link_headers_name_the_next_page() {
        let base = url("https://r.example/v2/a/tags/list?n=2");
        let header = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(LINK, HeaderValue::from_str(v).expect("header"));
            h
        };
        let next = |v: &str| next_link(&header(v), &base).map(|r| r.map(|u| u.to_string()));
        assert_eq!(
            next("</v2/a/tags/list?last=b&n=2>; rel=\"next\""),
            Some(Ok("https://r.example/v2/a/tags/list?last=b&n=2".into()))
        );
        assert_eq!(
            next(
                "<https://r.example/v2/a/tags/list?last=c>; rel=prev, <https://r.example/v2/a/tags/list?last=d>; rel=next"
            ),
            Some(Ok("https://r.example/v2/a/tags/list?last=d".into()))
        );
        assert_eq!(next("</x>; rel=\"prev\""), None);
        assert_eq!(next("<no-end; rel=next"), Some(Err(())));
        assert_eq!(next_link(&HeaderMap::new(), &base), None);
    }

    #[test]
    fn unauthorized_messages_say_what_to_do_and_never_hold_the_login() {
        let refused = RegistryError::Unauthorized {
            registry: "ghcr.io".into(),
            repository: "acme/api".into(),
            status: 401,
            credentials_given: true,
        };
        assert!(refused.to_string().contains("refused the credentials"), "{refused}");
        assert_eq!(refused.reason(), FailureReason::AuthenticationFailure);
        let missing = RegistryError::Unauthorized {
            registry: "ghcr.io".into(),
            repository: "acme/api".into(),
            status: 401,
            credentials_given: false,
        };
        assert!(missing.to_string().contains("spec.secretRef"), "{missing}");
        let login = RegistryLogin {
            username: "bot".into(),
            password: SecretString::from("canary-registry-pw-0192"),
        };
        assert!(!format!("{login:?}").contains("canary"), "{login:?}");
        let a = ImageRef::parse("ghcr.io/a").expect("image");
        let b = ImageRef::parse("ghcr.io/b").expect("image");
        let other = RegistryLogin { password: SecretString::from("other"), ..login.clone() };
        let keys = [
            authorization_key(&a, None),
            authorization_key(&a, Some(&login)),
            authorization_key(&a, Some(&other)),
            authorization_key(&b, Some(&login)),
        ];
        assert_eq!(keys.iter().collect::<HashSet<_>>().len(), keys.len());
    }

    #[test]
    fn trust_roots_merge_the_system_bundle_with_explicit_files() {
        let system = trust_roots(None, &[], None).expect("system roots");
        assert!(!system.is_empty());
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing.pem");
        let err = trust_roots(None, &[], Some(&missing)).expect_err("missing CA file");
        assert!(err.contains("missing.pem"), "{err}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").expect("write");
        assert!(trust_roots(None, &[], Some(&empty)).is_err());
        // A missing SSL_CERT_FILE or SSL_CERT_DIR adds nothing but does not break the system roots.
        let with_env = trust_roots(Some(&missing), &[dir.path().to_owned()], None).expect("roots");
        assert_eq!(with_env.len(), system.len());
    }

    #[test]
    fn default_options_read_the_tls_environment() {
        let options = RegistryOptions::default();
        assert_eq!(
            options.ssl_cert_file,
            std::env::var_os("SSL_CERT_FILE").filter(|v| !v.is_empty()).map(PathBuf::from)
        );
        assert!(options.max_tags > 0 && options.max_response_bytes > 0);
    }
}
