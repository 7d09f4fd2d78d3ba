//! Shared helpers for the end-to-end tests.

pub mod application;
pub mod apply;
pub mod browser;
pub mod charts;
pub mod cli;
pub mod cluster;
pub mod helm;
pub mod image;
pub mod install;
pub mod perf;
pub mod process_tree;
pub mod receiver;
pub mod registry;
pub mod rollouts;
pub mod servers;
pub mod webhook;
pub mod writers;

/// A CA and a serving certificate for `localhost` and `127.0.0.1`, valid for a day: what every
/// test TLS server here presents.
pub fn localhost_certs() -> anyhow::Result<kuvryn_sync_certs::GeneratedCerts> {
    Ok(kuvryn_sync_certs::generate(&kuvryn_sync_certs::CertRequest {
        dns_names: vec!["localhost".into()],
        ip_addresses: vec!["127.0.0.1".parse()?],
        validity_days: 1,
    })?)
}

/// The value of `field` (`VmHWM`, `VmRSS`) in /proc/PID/status, in KiB; `None` once the process
/// is gone.
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}

/// Whether process `pid` runs (exists and is not a zombie).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .is_ok_and(|s| !s.lines().any(|l| l.starts_with("State:") && l.contains("zombie")))
}

/// A TLS client configuration that trusts only the CA in `ca_pem` (the test CA), for the HTTPS
/// clients of tests and benchmarks.
pub fn tls_trusting(ca_pem: &str) -> anyhow::Result<rustls::ClientConfig> {
    kuvryn_sync_runtime::tls::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    Ok(rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth())
}
