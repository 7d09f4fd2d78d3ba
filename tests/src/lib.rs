//! Shared helpers for the end-to-end tests.

pub mod application;
pub mod apply;
pub mod charts;
pub mod cli;
pub mod cluster;
pub mod helm;
pub mod process_tree;
pub mod receiver;
pub mod registry;
pub mod rollouts;
pub mod servers;
pub mod webhook;

/// A CA and a serving certificate for `localhost` and `127.0.0.1`, valid for a day: what every
/// test TLS server here presents.
pub fn localhost_certs() -> anyhow::Result<kuvryn_sync_certs::GeneratedCerts> {
    Ok(kuvryn_sync_certs::generate(&kuvryn_sync_certs::CertRequest {
        dns_names: vec!["localhost".into()],
        ip_addresses: vec!["127.0.0.1".parse()?],
        validity_days: 1,
    })?)
}
