//! `ksync-helm-render`: renders one Helm chart with the real engine.
//!
//! Reads one JSON [`RenderRequest`] on stdin and prints one JSON [`RenderResponse`] on stdout:
//! `{"manifests": {templatePath: yaml}}` and exit 0, or `{"error": "...", "code": n}` and a
//! non-zero exit (1: Helm refused the chart or a template failed; 2: bad request or environment).
//! The library path comes from `KSYNC_LIBHELM`; `SSL_CERT_FILE` and `HELM_CONFIG_HOME`,
//! `HELM_CACHE_HOME`, `HELM_DATA_HOME` must be set by the caller, because the embedded Go runtime
//! reads them when the library loads. [`kuvryn_sync_helm::HelmRenderer`] runs this with exactly
//! that environment.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use kuvryn_sync_helm::ffi::HelmLibrary;
use kuvryn_sync_helm::{HelmError, LIBHELM_ENV, RenderRequest, RenderResponse};

/// Largest request accepted on stdin (values included).
const MAX_REQUEST_BYTES: u64 = 64 * 1024 * 1024;

const REQUIRED_ENV: [&str; 5] =
    [LIBHELM_ENV, "SSL_CERT_FILE", "HELM_CONFIG_HOME", "HELM_CACHE_HOME", "HELM_DATA_HOME"];

fn main() -> ExitCode {
    let result = run();
    let (response, code) = match &result {
        Ok(manifests) => (RenderResponse::ok(manifests.clone()), ExitCode::SUCCESS),
        Err(e @ HelmError::Engine { .. }) => (RenderResponse::failed(e), ExitCode::from(1)),
        Err(e) => (RenderResponse::failed(e), ExitCode::from(2)),
    };
    let mut stdout = std::io::stdout().lock();
    let written = serde_json::to_writer(&mut stdout, &response)
        .map_err(std::io::Error::from)
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    if written.is_err() {
        return ExitCode::from(3);
    }
    code
}

fn run() -> Result<BTreeMap<String, String>, HelmError> {
    let mut input = Vec::new();
    std::io::stdin().lock().take(MAX_REQUEST_BYTES + 1).read_to_end(&mut input)?;
    if input.len() as u64 > MAX_REQUEST_BYTES {
        return Err(HelmError::InvalidRequest(format!(
            "request larger than {MAX_REQUEST_BYTES} bytes"
        )));
    }
    let request: RenderRequest =
        serde_json::from_slice(&input).map_err(|e| HelmError::InvalidRequest(e.to_string()))?;
    let values = request.values_json()?;
    let options = request.options_json()?;
    if !request.chart_dir.is_absolute() {
        return Err(HelmError::InvalidRequest("chartDir must be an absolute path".to_owned()));
    }
    for name in REQUIRED_ENV {
        if std::env::var_os(name).is_none_or(|v| v.is_empty()) {
            return Err(HelmError::MissingEnvironment(name));
        }
    }
    let library_path = PathBuf::from(std::env::var_os(LIBHELM_ENV).unwrap_or_default());

    let library = HelmLibrary::load(&library_path)?;
    let chart = library.load_chart(&request.chart_dir)?;
    let rendered = chart.render(&values, &options)?;
    serde_json::from_str(&rendered).map_err(|e| HelmError::Engine {
        code: -1,
        message: format!("helm_render returned something other than a map of strings: {e}"),
    })
}
