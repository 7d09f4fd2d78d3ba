//! `kuvryn-sync-controller`: reconciles Repositories, Applications, Revisions and ImagePolicies.
//!
//! The controller wires things together and keeps no decisions of its own: those live in
//! `kuvryn-sync-core`. [`run`] serves `/healthz`, `/readyz` (ready once every Kuvryn Sync CRD is
//! served) and `/metrics`, takes the leader Lease (or claims shards), and while it leads runs the
//! reconcilers: the Repository reconciler (`repository`, with image write-back in
//! `image_update`), the Application reconciler (`application`, with the shared per-kind
//! `watches`) and the ImagePolicy reconciler (`imagepolicy`).
//!
//! A library so that tests run the reconcilers in-process against the sandbox and assert on the
//! requests they send (`tests/reconcile_requests.rs`); the binary (`main.rs`) only parses the
//! flags, sets up logging and signals, and calls [`run`].

mod announcements;
mod application;
mod args;
mod context;
mod deletion;
mod diagnose;
mod engines;
mod fault;
mod health;
mod image_update;
mod imagepolicy;
mod leadership;
mod metrics;
mod notify;
mod process;
mod reconcilers;
mod references;
mod render;
mod repository;
mod revision_writes;
mod shards;
mod source;
mod status;
mod step;
mod triggers;
mod watches;

pub use args::Args;
pub use process::run;
