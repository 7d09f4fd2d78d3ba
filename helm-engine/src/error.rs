//! The one error type of this crate.

use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong between a render request and parsed documents.
#[derive(Debug, thiserror::Error)]
pub enum HelmError {
    /// `libhelm_c.so` was not found where we looked.
    #[error(
        "libhelm_c.so not found: set KSYNC_LIBHELM or install the helm-python-sdk wheel; searched: {}",
        display_paths(.searched)
    )]
    LibraryNotFound {
        /// Every place that was tried, in order.
        searched: Vec<PathBuf>,
    },
    /// The library exists but could not be loaded or lacks a symbol.
    #[error("cannot load the Helm engine {}: {message}", .path.display())]
    Library {
        /// The library file.
        path: PathBuf,
        /// What the loader said.
        message: String,
    },
    /// The render helper binary does not exist.
    #[error("render helper {} does not exist (build it with `cargo build -p kuvryn-sync-helm`)", .0.display())]
    HelperNotFound(PathBuf),
    /// A required environment variable is missing in the helper process.
    #[error("environment variable {0} must be set before the Helm engine is loaded")]
    MissingEnvironment(&'static str),
    /// The request is malformed (before Helm saw it).
    #[error("invalid render request: {0}")]
    InvalidRequest(String),
    /// The Helm engine returned an error code (chart load or template failure).
    #[error("helm engine error {code}: {message}")]
    Engine {
        /// The library's `helm_error_code` (negative).
        code: i32,
        /// The library's detail message.
        message: String,
    },
    /// Starting or talking to the helper failed.
    #[error("render helper I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The helper ran past the time limit and was killed.
    #[error("helm render exceeded the time limit of {0:?}")]
    Timeout(Duration),
    /// The helper wrote more than the output cap and was stopped.
    #[error("helm render output exceeded the limit of {limit} bytes")]
    OutputTooLarge {
        /// The cap, in bytes.
        limit: usize,
    },
    /// The helper died without a well-formed answer (for example a crash of the Go runtime).
    #[error("render helper failed ({status}): {stderr}")]
    HelperFailed {
        /// The exit status as text.
        status: String,
        /// The end of its standard error.
        stderr: String,
    },
    /// The helper refused the request or its environment before Helm ran.
    #[error("render helper: {0}")]
    Helper(String),
    /// The helper's answer is not the documented JSON.
    #[error("render helper protocol error: {0}")]
    Protocol(String),
    /// A rendered template is not valid YAML or holds a non-object document.
    #[error("rendered template {template} is not a list of YAML objects: {message}")]
    Manifest {
        /// The template path, as Helm names it (`chart/templates/x.yaml`).
        template: String,
        /// What is wrong.
        message: String,
    },
}

fn display_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "(nothing)".to_owned();
    }
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}
