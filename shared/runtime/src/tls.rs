//! The process-wide rustls crypto provider. Every TLS user in Kuvryn Sync (the webhook server,
//! the Kubernetes client, Git over HTTPS, the test servers' clients) is built without a provider
//! of its own and uses the one installed here: ring, once, at start-up.

/// Install ring as the process's rustls provider. Idempotent: a second call, or a call after
/// another part of the process installed ring, does nothing.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Fails only when another thread installed one in between; either way one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn installing_twice_keeps_one_provider() {
        super::install_crypto_provider();
        super::install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
