//! Certificates for Kuvryn Sync: a private CA and a serving certificate it signs, for the webhook
//! server in installs without cert-manager, in tests and in the demo. Built on `rcgen`; written
//! as PEM files (`ca.crt`, `ca.key`, `tls.crt`, `tls.key`, the names a `kubernetes.io/tls`
//! Secret and a `caBundle` use).

use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

/// What went wrong while generating or writing certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// No DNS name and no IP address was given.
    #[error("a serving certificate needs at least one DNS name or IP address")]
    NoSubjectAltNames,
    /// A DNS name rcgen cannot encode.
    #[error("invalid DNS name {name:?}: {source}")]
    InvalidDnsName {
        name: String,
        #[source]
        source: rcgen::Error,
    },
    /// Key or certificate generation failed.
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    /// A validity of zero days.
    #[error("validity must be at least one day")]
    InvalidValidity,
    /// Writing a PEM file failed.
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What the serving certificate is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertRequest {
    /// DNS subject alternative names, such as `kuvryn-sync-webhook.kuvryn-system.svc`.
    pub dns_names: Vec<String>,
    /// IP subject alternative names, such as `127.0.0.1`.
    pub ip_addresses: Vec<IpAddr>,
    /// Days both certificates are valid from now.
    pub validity_days: u32,
}

impl Default for CertRequest {
    fn default() -> Self {
        CertRequest { dns_names: Vec::new(), ip_addresses: Vec::new(), validity_days: 365 }
    }
}

/// A CA and the serving certificate it signed, PEM-encoded.
#[derive(Clone)]
pub struct GeneratedCerts {
    /// The CA certificate: what a kubeconfig's `certificate-authority-data` or a webhook
    /// configuration's `caBundle` holds.
    pub ca_cert_pem: String,
    /// The CA private key (PKCS#8).
    pub ca_key_pem: String,
    /// The serving certificate.
    pub cert_pem: String,
    /// The serving private key (PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for GeneratedCerts {
    // Private keys never reach a log through Debug.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeneratedCerts")
            .field("ca_cert_pem", &self.ca_cert_pem)
            .field("ca_key_pem", &"<redacted>")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// File names [`GeneratedCerts::write_to`] uses.
pub const CA_CERT_FILE: &str = "ca.crt";
pub const CA_KEY_FILE: &str = "ca.key";
pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";

/// Generate a new CA (ECDSA P-256) and a serving certificate for `request`'s names, signed by it.
pub fn generate(request: &CertRequest) -> Result<GeneratedCerts, CertError> {
    if request.dns_names.is_empty() && request.ip_addresses.is_empty() {
        return Err(CertError::NoSubjectAltNames);
    }
    if request.validity_days == 0 {
        return Err(CertError::InvalidValidity);
    }
    let now = OffsetDateTime::now_utc();
    // Back-date a little so a peer with a slightly slow clock accepts the certificate.
    let not_before = now - Duration::minutes(5);
    let not_after = now + Duration::days(i64::from(request.validity_days));

    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = name("kuvryn-sync-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params.not_before = not_before;
    ca_params.not_after = not_after;
    let ca_key = KeyPair::generate()?;
    let ca_key_pem = ca_key.serialize_pem();
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key)?;

    let mut params = CertificateParams::default();
    let common_name =
        request.dns_names.first().cloned().unwrap_or_else(|| request.ip_addresses[0].to_string());
    params.distinguished_name = name(&common_name);
    params.subject_alt_names = subject_alt_names(request)?;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = not_before;
    params.not_after = not_after;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca)?;

    Ok(GeneratedCerts {
        ca_cert_pem: ca.pem(),
        ca_key_pem,
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "Kuvryn Sync");
    dn.push(DnType::CommonName, common_name);
    dn
}

fn subject_alt_names(request: &CertRequest) -> Result<Vec<SanType>, CertError> {
    let mut sans = Vec::with_capacity(request.dns_names.len() + request.ip_addresses.len());
    for dns in &request.dns_names {
        let ia5 = dns
            .clone()
            .try_into()
            .map_err(|source| CertError::InvalidDnsName { name: dns.clone(), source })?;
        sans.push(SanType::DnsName(ia5));
    }
    sans.extend(request.ip_addresses.iter().copied().map(SanType::IpAddress));
    Ok(sans)
}

impl GeneratedCerts {
    /// Write `ca.crt`, `ca.key`, `tls.crt` and `tls.key` into `dir` (created if missing). Key
    /// files are readable by their owner only.
    pub fn write_to(&self, dir: &Path) -> Result<Vec<PathBuf>, CertError> {
        fs::create_dir_all(dir).map_err(|source| CertError::Write { path: dir.into(), source })?;
        let files = [
            (CA_CERT_FILE, &self.ca_cert_pem, false),
            (CA_KEY_FILE, &self.ca_key_pem, true),
            (CERT_FILE, &self.cert_pem, false),
            (KEY_FILE, &self.key_pem, true),
        ];
        let mut written = Vec::with_capacity(files.len());
        for (file, contents, private) in files {
            let path = dir.join(file);
            write_file(&path, contents, private)
                .map_err(|source| CertError::Write { path: path.clone(), source })?;
            written.push(path);
        }
        Ok(written)
    }
}

fn write_file(path: &Path, contents: &str, private: bool) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mode = if private { 0o600 } else { 0o644 };
    let mut file =
        fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(path)?;
    file.write_all(contents.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::extensions::GeneralName;
    use x509_parser::pem::parse_x509_pem;

    fn request() -> CertRequest {
        CertRequest {
            dns_names: vec!["webhook.kuvryn-system.svc".into(), "localhost".into()],
            ip_addresses: vec!["127.0.0.1".parse().expect("ip")],
            validity_days: 30,
        }
    }

    #[test]
    fn serving_certificate_names_every_requested_host_and_is_signed_by_the_ca() {
        let certs = generate(&request()).expect("generate");
        let (_, ca_pem) = parse_x509_pem(certs.ca_cert_pem.as_bytes()).expect("ca pem");
        let ca = ca_pem.parse_x509().expect("ca x509");
        let (_, leaf_pem) = parse_x509_pem(certs.cert_pem.as_bytes()).expect("leaf pem");
        let leaf = leaf_pem.parse_x509().expect("leaf x509");

        assert!(ca.is_ca(), "CA certificate must be a CA");
        assert!(!leaf.is_ca(), "serving certificate must not be a CA");
        assert_eq!(leaf.issuer(), ca.subject());
        leaf.verify_signature(Some(ca.public_key())).expect("leaf signed by the CA");

        let san = leaf.subject_alternative_name().expect("san ext").expect("san present");
        let names: Vec<String> = san
            .value
            .general_names
            .iter()
            .map(|name| match name {
                GeneralName::DNSName(dns) => (*dns).to_owned(),
                GeneralName::IPAddress(ip) => format!("ip:{ip:?}"),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(names, vec!["webhook.kuvryn-system.svc", "localhost", "ip:[127, 0, 0, 1]"]);
        let eku = leaf.extended_key_usage().expect("eku ext").expect("eku present");
        assert!(eku.value.server_auth);
        let validity = leaf.validity().time_to_expiration().expect("not expired");
        assert!(validity.whole_days() >= 29 && validity.whole_days() <= 30);
    }

    #[test]
    fn refuses_a_request_without_names_or_validity() {
        assert!(matches!(generate(&CertRequest::default()), Err(CertError::NoSubjectAltNames)));
        let zero = CertRequest { validity_days: 0, ..request() };
        assert!(matches!(generate(&zero), Err(CertError::InvalidValidity)));
    }

    #[test]
    fn writes_pem_files_with_private_keys_readable_by_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let certs = generate(&request()).expect("generate");
        let files = certs.write_to(&dir.path().join("out")).expect("write");
        assert_eq!(files.len(), 4);
        for (file, private) in
            [(CA_CERT_FILE, false), (CA_KEY_FILE, true), (CERT_FILE, false), (KEY_FILE, true)]
        {
            let path = dir.path().join("out").join(file);
            let text = fs::read_to_string(&path).expect("read");
            assert!(text.starts_with("-----BEGIN "), "{file} is PEM");
            let mode = fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
            assert_eq!(mode, if private { 0o600 } else { 0o644 }, "{file} mode");
        }
        assert!(!format!("{certs:?}").contains("PRIVATE KEY"), "Debug must not print keys");
    }
}
