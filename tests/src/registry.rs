//! Images for registry scan tests, and a small scripted registry for what the real one cannot do.
//!
//! - [`push_image`]: writes a tiny OCI image layout (a config blob, one uncompressed tar layer
//!   holding the given content, a manifest, `index.json` naming the tag) and pushes it with the
//!   real `skopeo copy` to a [`OciRegistry`] (Debian `docker-registry`, TLS + htpasswd), trusting
//!   the registry's test CA. Returns the manifest digest, computed from the manifest bytes and
//!   checked against the digest skopeo reports for what it pushed.
//! - [`ScriptedRegistry`]: an HTTPS server (axum over rustls, certificate from a fresh test CA)
//!   speaking the parts of the distribution API a scan uses, in ways `docker-registry` 2.8 does
//!   not: `Link`-header paging of tag lists (Debian's 2.8 ignores `n` and `last`), the Bearer
//!   token flow, a manifest `HEAD` without `Docker-Content-Digest`, a redirect of the tag list to
//!   another host, and a token realm on another host. The other host is a second listener on
//!   127.0.0.1 addressed as `localhost`, so it is another origin. Every request to either is
//!   recorded with its `Authorization` header.
//!
//! Needs `skopeo` (Debian package `skopeo`) for pushes; a missing tool fails with instructions.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};
use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use axum_server::tls_rustls::RustlsConfig;
use base64::Engine as _;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::servers::registry::OciRegistry;
use crate::servers::{require_program, run};

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A one-file uncompressed tar archive (POSIX ustar), for an image layer.
fn tar_with_file(name: &str, content: &[u8]) -> Vec<u8> {
    let mut header = [0u8; 512];
    let mut put = |offset: usize, bytes: &[u8]| {
        header[offset..offset + bytes.len()].copy_from_slice(bytes);
    };
    put(0, name.as_bytes());
    put(100, b"0000644\0");
    put(108, b"0000000\0");
    put(116, b"0000000\0");
    put(124, format!("{:011o}\0", content.len()).as_bytes());
    put(136, b"00000000000\0");
    put(148, b"        ");
    put(156, b"0");
    put(257, b"ustar\0");
    put(263, b"00");
    let checksum: u32 = header.iter().map(|&b| u32::from(b)).sum();
    header[148..156].copy_from_slice(format!("{checksum:06o}\0 ").as_bytes());
    let mut tar = header.to_vec();
    tar.extend_from_slice(content);
    tar.resize(tar.len().div_ceil(512) * 512, 0);
    tar.extend_from_slice(&[0u8; 1024]);
    tar
}

/// Write an OCI image layout under `layout` holding one image tagged `tag` whose only layer is a
/// file with `content`; returns the manifest bytes.
pub fn write_oci_layout(layout: &Path, tag: &str, content: &str) -> Result<Vec<u8>> {
    let blobs = layout.join("blobs/sha256");
    std::fs::create_dir_all(&blobs)?;
    let write_blob = |bytes: &[u8]| -> Result<String> {
        let digest = sha256_digest(bytes);
        std::fs::write(blobs.join(digest.trim_start_matches("sha256:")), bytes)?;
        Ok(digest)
    };
    let layer = tar_with_file("content.txt", content.as_bytes());
    let layer_digest = write_blob(&layer)?;
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Labels": {"io.kuvryn.test.content": content}},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }))?;
    let config_digest = write_blob(&config)?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": layer_digest,
            "size": layer.len(),
        }],
    }))?;
    let manifest_digest = write_blob(&manifest)?;
    std::fs::write(layout.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)?;
    let index = json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest.len(),
            "annotations": {"org.opencontainers.image.ref.name": tag},
        }],
    });
    std::fs::write(layout.join("index.json"), serde_json::to_vec(&index)?)?;
    Ok(manifest)
}

/// Push an image with a layer holding `content` as `repository:tag` to `registry` with skopeo;
/// returns its manifest digest.
pub fn push_image(
    registry: &OciRegistry,
    username: &str,
    password: &str,
    repository: &str,
    tag: &str,
    content: &str,
) -> Result<String> {
    let skopeo = require_program("skopeo", "skopeo")?;
    let dir = tempfile::Builder::new().prefix("ksync-skopeo-").tempdir()?;
    let d = dir.path();
    let layout = d.join("layout");
    let manifest = write_oci_layout(&layout, tag, content)?;
    let certs = d.join("certs");
    std::fs::create_dir_all(&certs)?;
    std::fs::write(certs.join("ca.crt"), &registry.ca_pem)?;
    std::fs::write(d.join("policy.json"), r#"{"default":[{"type":"insecureAcceptAnything"}]}"#)?;
    std::fs::write(d.join("registries.conf"), "")?;
    let tmp = d.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    let digest_file = d.join("digest");
    let mut cmd = Command::new(skopeo);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", d)
        .env("TMPDIR", &tmp)
        .env("REGISTRY_AUTH_FILE", d.join("auth.json"))
        .arg("--policy")
        .arg(d.join("policy.json"))
        .arg("--registries-conf")
        .arg(d.join("registries.conf"))
        .arg("--tmpdir")
        .arg(&tmp)
        .args(["copy", "--quiet", "--preserve-digests", "--dest-cert-dir"])
        .arg(&certs)
        .arg("--dest-creds")
        .arg(format!("{username}:{password}"))
        .arg("--digestfile")
        .arg(&digest_file)
        .arg(format!("oci:{}:{tag}", layout.display()))
        .arg(format!("docker://{}/{repository}:{tag}", registry.host()));
    run(cmd).with_context(|| {
        format!("skopeo copy of {repository}:{tag}; registry log:\n{}", registry.log_text())
    })?;
    let digest = sha256_digest(&manifest);
    let reported = std::fs::read_to_string(&digest_file)?;
    if reported.trim() != digest {
        bail!("skopeo pushed {} but the manifest written is {digest}", reported.trim());
    }
    Ok(digest)
}

/// Which listener of a [`ScriptedRegistry`] a request reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    /// The registry itself (`127.0.0.1:PORT`).
    Registry,
    /// The other host (`localhost:OTHER_PORT`).
    Elsewhere,
}

/// One request a [`ScriptedRegistry`] got.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// Which listener.
    pub listener: Listener,
    /// The method.
    pub method: String,
    /// Path and query.
    pub target: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
}

/// How a [`ScriptedRegistry`] authenticates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptedAuth {
    /// `WWW-Authenticate: Basic`.
    Basic,
    /// `WWW-Authenticate: Bearer` with the token realm on the registry itself.
    Bearer,
    /// `WWW-Authenticate: Bearer` with the token realm on the other host, which hands out only
    /// a token the registry does not accept.
    BearerRealmElsewhere,
}

/// What a [`ScriptedRegistry`] does.
#[derive(Clone, Debug)]
pub struct Script {
    /// The authentication scheme.
    pub auth: ScriptedAuth,
    /// The accepted user name.
    pub username: String,
    /// The accepted password.
    pub password: String,
    /// The tags of every repository, in listing order.
    pub tags: Vec<String>,
    /// Most tags per page (a `Link` header names the next page).
    pub page_size: usize,
    /// Whether manifest answers carry `Docker-Content-Digest`.
    pub digest_header: bool,
    /// Whether the tag list redirects to the other host (which lists `from-elsewhere`).
    pub redirect_tags_elsewhere: bool,
}

/// The token the scripted registry accepts.
const GOOD_TOKEN: &str = "scripted-good-token";

#[derive(Debug)]
struct Shared {
    script: Script,
    port: u16,
    other_port: u16,
    recorded: Mutex<Vec<Recorded>>,
}

/// A running scripted registry; stops on drop.
#[derive(Debug)]
pub struct ScriptedRegistry {
    /// The registry's port on 127.0.0.1.
    pub port: u16,
    /// The other host's port (addressed as `localhost`).
    pub other_port: u16,
    /// A PEM file with the test CA both listeners' certificate chains to.
    pub ca_file: PathBuf,
    shared: Arc<Shared>,
    handles: Vec<axum_server::Handle<SocketAddr>>,
    _dir: tempfile::TempDir,
}

impl Drop for ScriptedRegistry {
    fn drop(&mut self) {
        for handle in &self.handles {
            handle.shutdown();
        }
    }
}

impl ScriptedRegistry {
    /// Start both listeners. The process must have a rustls provider
    /// (`kuvryn_sync_runtime::tls::install_crypto_provider`).
    pub async fn start(script: Script) -> Result<Self> {
        kuvryn_sync_runtime::tls::install_crypto_provider();
        let dir = tempfile::tempdir()?;
        let certs = crate::localhost_certs()?;
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, &certs.ca_cert_pem)?;
        let tls = RustlsConfig::from_pem(certs.cert_pem.into_bytes(), certs.key_pem.into_bytes())
            .await
            .context("scripted registry TLS config")?;
        let registry = std::net::TcpListener::bind("127.0.0.1:0")?;
        let elsewhere = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = registry.local_addr()?.port();
        let other_port = elsewhere.local_addr()?.port();
        let shared =
            Arc::new(Shared { script, port, other_port, recorded: Mutex::new(Vec::new()) });
        let mut handles = Vec::new();
        for (listener, which) in [(registry, Listener::Registry), (elsewhere, Listener::Elsewhere)]
        {
            listener.set_nonblocking(true)?;
            let router = axum::Router::new().fallback(answer).with_state((shared.clone(), which));
            let handle = axum_server::Handle::new();
            let server = axum_server::from_tcp_rustls(listener, tls.clone())?
                .handle(handle.clone())
                .serve(router.into_make_service());
            tokio::spawn(server);
            handles.push(handle);
        }
        Ok(Self { port, other_port, ca_file, shared, handles, _dir: dir })
    }

    /// `127.0.0.1:PORT/<repository>`, a `spec.image`.
    pub fn image(&self, repository: &str) -> String {
        format!("127.0.0.1:{}/{repository}", self.port)
    }

    /// Every request so far.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.shared.recorded.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The manifest bytes served for `tag`.
    pub fn manifest(tag: &str) -> Vec<u8> {
        format!("{{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"annotations\":{{\"tag\":\"{tag}\"}}}}").into_bytes()
    }
}

fn reply(status: StatusCode) -> axum::http::response::Builder {
    Response::builder().status(status)
}

fn finish(builder: axum::http::response::Builder, body: impl Into<Body>) -> Response {
    builder.body(body.into()).unwrap_or_else(|_| Response::new(Body::empty()))
}

async fn answer(
    State((shared, which)): State<(Arc<Shared>, Listener)>,
    request: Request,
) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let target = request.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    if let Ok(mut recorded) = shared.recorded.lock() {
        recorded.push(Recorded {
            listener: which,
            method: request.method().to_string(),
            target: target.clone(),
            authorization: authorization.clone(),
        });
    }
    let script = &shared.script;
    let path = request.uri().path().to_owned();
    let query: BTreeMap<String, String> =
        Query::try_from_uri(request.uri()).map(|Query(q)| q).unwrap_or_default();
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", script.username, script.password))
    );

    if which == Listener::Elsewhere {
        if path == "/token" {
            return finish(reply(StatusCode::OK), r#"{"token":"elsewhere-token"}"#);
        }
        if path.ends_with("/tags/list") {
            return finish(reply(StatusCode::OK), r#"{"name":"x","tags":["from-elsewhere"]}"#);
        }
        return finish(reply(StatusCode::NOT_FOUND), "");
    }

    if path == "/token" && script.auth == ScriptedAuth::Bearer {
        return if authorization.as_deref() == Some(basic.as_str()) {
            finish(reply(StatusCode::OK), format!(r#"{{"token":"{GOOD_TOKEN}","expires_in":300}}"#))
        } else {
            finish(
                reply(StatusCode::UNAUTHORIZED),
                r#"{"details":"incorrect username or password"}"#,
            )
        };
    }
    let Some(rest) = path.strip_prefix("/v2/") else {
        return finish(reply(StatusCode::NOT_FOUND), "");
    };
    let authorized = match script.auth {
        ScriptedAuth::Basic => authorization.as_deref() == Some(basic.as_str()),
        ScriptedAuth::Bearer | ScriptedAuth::BearerRealmElsewhere => {
            authorization.as_deref() == Some(format!("Bearer {GOOD_TOKEN}").as_str())
        }
    };
    if !authorized {
        let challenge = match script.auth {
            ScriptedAuth::Basic => "Basic realm=\"scripted\"".to_owned(),
            ScriptedAuth::Bearer => format!(
                "Bearer realm=\"https://127.0.0.1:{}/token\",service=\"scripted\",scope=\"repository:x:pull\"",
                shared.port
            ),
            ScriptedAuth::BearerRealmElsewhere => format!(
                "Bearer realm=\"https://localhost:{}/token\",service=\"scripted\"",
                shared.other_port
            ),
        };
        return finish(
            reply(StatusCode::UNAUTHORIZED).header(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_str(&challenge).unwrap_or(HeaderValue::from_static("Basic")),
            ),
            r#"{"errors":[{"code":"UNAUTHORIZED"}]}"#,
        );
    }
    if rest.is_empty() {
        return finish(reply(StatusCode::OK), "{}");
    }
    if let Some(repository) = rest.strip_suffix("/tags/list") {
        if script.redirect_tags_elsewhere {
            let location =
                format!("https://localhost:{}/v2/{repository}/tags/list", shared.other_port);
            return finish(
                reply(StatusCode::TEMPORARY_REDIRECT).header(header::LOCATION, location),
                "",
            );
        }
        let n = query
            .get("n")
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(script.page_size)
            .min(script.page_size)
            .max(1);
        let start = match query.get("last") {
            Some(last) => script.tags.iter().position(|t| t == last).map_or(0, |i| i + 1),
            None => 0,
        };
        let page: Vec<&String> = script.tags.iter().skip(start).take(n).collect();
        let mut builder = reply(StatusCode::OK).header(header::CONTENT_TYPE, "application/json");
        if start + page.len() < script.tags.len()
            && let Some(last) = page.last()
        {
            builder = builder.header(
                header::LINK,
                format!("</v2/{repository}/tags/list?n={n}&last={last}>; rel=\"next\""),
            );
        }
        return finish(builder, json!({"name": repository, "tags": page}).to_string());
    }
    if let Some((_, tag)) = rest.split_once("/manifests/") {
        if !script.tags.iter().any(|t| t == tag) {
            return finish(
                reply(StatusCode::NOT_FOUND),
                r#"{"errors":[{"code":"MANIFEST_UNKNOWN"}]}"#,
            );
        }
        let manifest = ScriptedRegistry::manifest(tag);
        let mut builder = reply(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/vnd.oci.image.manifest.v1+json")
            .header(header::CONTENT_LENGTH, manifest.len());
        if script.digest_header {
            builder = builder.header("Docker-Content-Digest", sha256_digest(&manifest));
        }
        let body = if request.method() == Method::HEAD { Vec::new() } else { manifest };
        return finish(builder, body);
    }
    finish(reply(StatusCode::NOT_FOUND), "")
}
