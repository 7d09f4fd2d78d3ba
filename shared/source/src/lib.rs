//! Kuvryn Sync's sources: Git revision resolution and fetch through gix with an on-disk cache
//! ([`git`]), and reading files out of a checked-out tree without leaving it ([`tree`]). The rules
//! these follow (which URLs, which credentials, what discovery accepts) are pure functions in
//! `kuvryn-sync-core`; this crate is the I/O edge.
//!
//! HTTPS goes through reqwest with rustls and no built-in crypto provider: the process installs
//! one (`kuvryn_sync_runtime::tls::install_crypto_provider`) before building a [`git::GitCache`],
//! which refuses to start otherwise.

pub mod chart;
pub mod git;
pub mod registry;
pub mod tree;
