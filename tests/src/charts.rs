//! Helm charts for the end-to-end tests: a chart's files written from strings, then packaged,
//! indexed and pushed to an OCI registry by the real Helm engine through `ksync-helm-publish`,
//! and an archive's digest computed by the `sha256sum` tool, independent of the code under test.
//!
//! Nothing here skips: a missing tool is an error with instructions.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::helm::libhelm;
use crate::servers::registry::OciRegistry;

/// The publish tool's binary name.
const PUBLISH_TOOL: &str = "ksync-helm-publish";

/// `ksync-helm-publish` of this build, next to the running test executable.
pub fn publish_tool() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join(PUBLISH_TOOL))
        .find(|p| p.is_file())
        .with_context(|| {
            format!(
                "{PUBLISH_TOOL} is missing next to {exe:?}: run `cargo build -p kuvryn-sync-helm`"
            )
        })
}

/// Run one publish `request` with the Helm engine trusting the system CAs and `ca_pem`, in a
/// private Helm home; returns the tool's `ok` answer.
pub fn publish(request: &Value, ca_pem: &str) -> Result<String> {
    let home = tempfile::tempdir()?;
    let h = home.path();
    for dir in ["config", "cache", "data"] {
        std::fs::create_dir(h.join(dir))?;
    }
    let mut bundle =
        std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    bundle.push('\n');
    bundle.push_str(ca_pem);
    std::fs::write(h.join("ca-bundle.pem"), bundle)?;
    let mut child = Command::new(publish_tool()?)
        .env_clear()
        .env("SSL_CERT_FILE", h.join("ca-bundle.pem"))
        .env("HELM_CONFIG_HOME", h.join("config"))
        .env("HELM_CACHE_HOME", h.join("cache"))
        .env("HELM_DATA_HOME", h.join("data"))
        .env("HOME", h)
        .env("TMPDIR", h)
        .env(kuvryn_sync_helm::LIBHELM_ENV, libhelm())
        .current_dir(h)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {PUBLISH_TOOL}"))?;
    child.stdin.take().context("stdin")?.write_all(request.to_string().as_bytes())?;
    let out = child.wait_with_output()?;
    let answer: Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!("{PUBLISH_TOOL} answered no JSON: {}", String::from_utf8_lossy(&out.stderr))
    })?;
    match (out.status.success(), answer["ok"].as_str()) {
        (true, Some(ok)) => Ok(ok.to_owned()),
        _ => bail!("{PUBLISH_TOOL} failed: {answer}"),
    }
}

/// Write `files` (path relative to `root`, content) under `root`, creating folders.
pub fn write_files(root: &Path, files: &[(&str, String)]) -> Result<()> {
    for (path, content) in files {
        let path = root.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, content).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Package the chart directory `chart` into `destination` with the Helm engine; the archive.
pub fn package(chart: &Path, destination: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(destination)?;
    let request = json!({"op": "package", "chart": chart, "destination": destination});
    let archive = PathBuf::from(publish(&request, "")?.trim());
    if !archive.is_file() {
        bail!("{PUBLISH_TOOL} package named {} which is not a file", archive.display());
    }
    Ok(archive)
}

/// Write `dir/index.yaml` for the archives in `dir` with the Helm engine (relative URLs).
pub fn index(dir: &Path) -> Result<()> {
    publish(&json!({"op": "index", "dir": dir}), "").map(drop)
}

/// Push `archive` with the Helm engine to `registry` under `oci://HOST/<path>`.
pub fn push(
    archive: &Path,
    registry: &OciRegistry,
    path: &str,
    username: &str,
    password: &str,
) -> Result<()> {
    let request = json!({
        "op": "push", "archive": archive, "remote": registry.oci_url(path),
        "host": registry.host(), "username": username, "password": password,
    });
    publish(&request, &registry.ca_pem).with_context(|| registry.log_text()).map(drop)
}

/// `sha256:<hex>` of a file, by the `sha256sum` tool.
pub fn sha256_digest(path: &Path) -> Result<String> {
    let out = Command::new("sha256sum").arg(path).output().context("running sha256sum")?;
    if !out.status.success() {
        bail!("sha256sum {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8(out.stdout)?;
    let hex = text.split_whitespace().next().context("sha256sum printed nothing")?;
    Ok(format!("sha256:{hex}"))
}
