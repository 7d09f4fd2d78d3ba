//! The HTTPS client admission webhooks are called with: `clientConfig` (url or service) to an
//! address, the `caBundle` as trust, the webhook's timeout.
//!
//! Certificate verification accepts what kube-apiserver (Go crypto/tls) accepts: a chain to a
//! `caBundle` certificate, and also a serving certificate that *is* a bundle certificate even
//! when it carries `CA:TRUE` (a self-signed `openssl req -x509` certificate used as its own
//! bundle). rustls' WebPKI verifier refuses the latter (`CaUsedAsEndEntity`), so a small
//! verifier wraps it: when the presented leaf equals a bundle certificate, its validity period
//! and name are still checked and the handshake signature is verified against its key.

use base64::Engine;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use serde_json::Value;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Where `clientConfig.service` references point on this machine ("ns/name" -> address).
#[derive(Debug, Default)]
pub struct ServiceMap(pub RwLock<HashMap<String, SocketAddr>>);

impl ServiceMap {
    /// Route `ns/name` service references to `addr`.
    pub fn insert(&self, ns: &str, name: &str, addr: SocketAddr) {
        self.0.write().unwrap_or_else(|e| e.into_inner()).insert(format!("{ns}/{name}"), addr);
    }

    /// The address of a mapped service.
    pub fn get(&self, ns: &str, name: &str) -> Option<SocketAddr> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).get(&format!("{ns}/{name}")).copied()
    }
}

/// Trust in a webhook's `caBundle`: chains to it, or a leaf that is one of its certificates.
#[derive(Debug)]
struct BundleVerifier {
    chains: Option<Arc<WebPkiServerVerifier>>,
    bundle: Vec<CertificateDer<'static>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for BundleVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let chained = match &self.chains {
            Some(v) => {
                v.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            }
            None => Err(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)),
        };
        match chained {
            Ok(ok) => Ok(ok),
            Err(e) if self.bundle.iter().any(|c| c.as_ref() == end_entity.as_ref()) => {
                tracing::debug!(
                    "webhook certificate is a caBundle certificate ({e}); checking it as pinned"
                );
                check_pinned_leaf(end_entity, server_name, now)?;
                Ok(ServerCertVerified::assertion())
            }
            Err(e) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

fn bad(e: CertificateError) -> rustls::Error {
    rustls::Error::InvalidCertificate(e)
}

/// A leaf trusted because it is a bundle certificate: within its validity period and naming
/// the server (subjectAltName DNS or IP entries, as Go's crypto/x509 `VerifyHostname`).
fn check_pinned_leaf(
    der: &CertificateDer<'_>,
    server_name: &ServerName<'_>,
    now: UnixTime,
) -> Result<(), rustls::Error> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
        .map_err(|_| bad(CertificateError::BadEncoding))?;
    let at = x509_parser::time::ASN1Time::from_timestamp(now.as_secs() as i64)
        .map_err(|_| bad(CertificateError::BadEncoding))?;
    if !cert.validity().is_valid_at(at) {
        let e = if at < cert.validity().not_before {
            CertificateError::NotValidYet
        } else {
            CertificateError::Expired
        };
        return Err(bad(e));
    }
    let names: Vec<GeneralName<'_>> = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|ext| ext.value.general_names.clone())
        .unwrap_or_default();
    let matches = names.iter().any(|n| match (n, server_name) {
        (GeneralName::IPAddress(bytes), ServerName::IpAddress(ip)) => {
            ip_bytes(IpAddr::from(*ip)).as_slice() == *bytes
        }
        (GeneralName::DNSName(d), ServerName::DnsName(want)) => dns_matches(d, want.as_ref()),
        _ => false,
    });
    if matches { Ok(()) } else { Err(bad(CertificateError::NotValidForName)) }
}

fn ip_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// A DNS SAN against a host name: exact (case-insensitive) or a `*.` wildcard of one label.
fn dns_matches(pattern: &str, host: &str) -> bool {
    let (p, h) = (pattern.to_ascii_lowercase(), host.to_ascii_lowercase());
    match p.strip_prefix("*.") {
        Some(rest) => {
            h.split_once('.').is_some_and(|(first, tail)| !first.is_empty() && tail == rest)
        }
        None => p == h,
    }
}

/// The certificates of a base64 PEM `caBundle`.
fn bundle_certs(ca: Option<&str>) -> Result<Vec<CertificateDer<'static>>, String> {
    let Some(ca) = ca else { return Ok(vec![]) };
    let pem = base64::engine::general_purpose::STANDARD
        .decode(ca)
        .map_err(|e| format!("invalid caBundle: {e}"))?;
    CertificateDer::pem_slice_iter(&pem)
        .map(|c| c.map_err(|e| format!("invalid caBundle: {e}")))
        .collect()
}

fn tls_config(ca: Option<&str>) -> Result<rustls::ClientConfig, String> {
    let bundle = bundle_certs(ca)?;
    let provider = CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let mut roots = rustls::RootCertStore::empty();
    for c in &bundle {
        // A certificate webpki cannot take as an anchor may still be pinned as a leaf.
        let _ = roots.add(c.clone());
    }
    let chains = (!roots.is_empty())
        .then(|| {
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build()
        })
        .transpose()
        .map_err(|e| format!("invalid caBundle: {e}"))?;
    let verifier = BundleVerifier { chains, bundle, provider: provider.clone() };
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth())
}

/// A client and the URL (with `?timeout=`) for a webhook's `clientConfig`.
pub fn client_for(wh: &Value, services: &ServiceMap) -> Result<(reqwest::Client, String), String> {
    let cc = &wh["clientConfig"];
    let timeout = wh["timeoutSeconds"].as_u64().unwrap_or(10);
    let tls = tls_config(cc["caBundle"].as_str())?;
    let mut b = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(Duration::from_secs(timeout))
        .no_proxy();
    let url = if let Some(u) = cc["url"].as_str() {
        u.to_string()
    } else if let Some(svc) = cc.get("service").filter(|s| s.is_object()) {
        let ns = svc["namespace"].as_str().unwrap_or_default();
        let name = svc["name"].as_str().unwrap_or_default();
        let port = svc["port"].as_u64().unwrap_or(443);
        let path = svc["path"].as_str().unwrap_or("");
        let host = format!("{name}.{ns}.svc");
        let addr = services
            .get(ns, name)
            .ok_or_else(|| format!("service \"{ns}/{name}\" has no endpoints"))?;
        b = b.resolve(&host, addr);
        format!("https://{host}:{port}{path}")
    } else {
        return Err("no clientConfig".into());
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{sep}timeout={timeout}s");
    Ok((b.build().map_err(|e| e.to_string())?, url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names_table() {
        let cases = [
            ("hook.default.svc", "hook.default.svc", true),
            ("HOOK.default.svc", "hook.default.SVC", true),
            ("*.default.svc", "hook.default.svc", true),
            ("*.default.svc", "a.b.default.svc", false),
            ("*.default.svc", "default.svc", false),
            ("other.default.svc", "hook.default.svc", false),
        ];
        for (p, h, want) in cases {
            assert_eq!(dns_matches(p, h), want, "{p} vs {h}");
        }
    }
}
