//! Kuvryn Sync's renderers: from a checked-out commit and an Application's `spec.source` to the
//! objects it declares ([`kuvryn_sync_core::desired::Rendered`]), which `core::desired` then
//! normalises and validates. [`application::render_application`] renders one Application, for
//! the controller and the CLI alike: `yaml` ([`yaml`]), `kustomize` ([`kustomize`]) and `helm`
//! ([`helm`]), with SOPS decryption ([`sops`]) in a private copy ([`workspace`]).

pub mod application;
pub mod cache;
pub mod helm;
pub mod kustomize;
pub mod references;
pub mod sandbox;
pub mod sops;
pub mod source;
pub mod workspace;
pub mod yaml;
