//! Chart sources for pull tests, both over https with a certificate from a test CA and behind
//! basic auth (bcrypt htpasswd): an OCI registry (Debian `docker-registry`, distribution 2.8) and
//! an https Helm repository (lighttpd serving a directory of `index.yaml` and `.tgz` files).

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};
use kuvryn_sync_certs::{CERT_FILE, CertRequest, KEY_FILE};

use super::{START_DEADLINE, ServerProcess, free_port, require_program, run};

/// TLS material and an htpasswd file in a fresh directory.
fn prepare(prefix: &str, username: &str, password: &str) -> Result<(tempfile::TempDir, String)> {
    require_program("htpasswd", "apache2-utils")?;
    let dir = tempfile::Builder::new().prefix(prefix).tempdir()?;
    let certs = kuvryn_sync_certs::generate(&CertRequest {
        dns_names: vec!["localhost".into()],
        ip_addresses: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
        validity_days: 2,
    })?;
    certs.write_to(dir.path())?;
    let mut htpasswd = Command::new("htpasswd");
    htpasswd.arg("-bBc").arg(dir.path().join("htpasswd")).arg(username).arg(password);
    run(htpasswd)?;
    Ok((dir, certs.ca_cert_pem.clone()))
}

/// A running `docker-registry` on 127.0.0.1 with TLS and htpasswd auth.
#[derive(Debug)]
pub struct OciRegistry {
    /// The port on 127.0.0.1.
    pub port: u16,
    /// PEM of the CA that signed the server certificate.
    pub ca_pem: String,
    process: ServerProcess,
    _dir: tempfile::TempDir,
}

impl OciRegistry {
    /// Start a registry accepting `username`/`password`.
    pub fn start(username: &str, password: &str) -> Result<Self> {
        let registry = require_program("docker-registry", "docker-registry")?;
        let (dir, ca_pem) = prepare("ksync-registry-", username, password)?;
        let d = dir.path();
        let port = free_port()?;
        let config = format!(
            "version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: {d}/data}}, delete: {{enabled: true}}}}\nhttp: {{addr: 127.0.0.1:{port}, secret: test, tls: {{certificate: {d}/{cert}, key: {d}/{key}}}}}\nauth: {{htpasswd: {{realm: test, path: {d}/htpasswd}}}}\n",
            d = d.display(),
            cert = CERT_FILE,
            key = KEY_FILE,
        );
        let config_path = d.join("config.yml");
        std::fs::write(&config_path, config).context("writing the registry config")?;
        let mut cmd = Command::new(registry);
        cmd.arg("serve").arg(&config_path).env_remove("REGISTRY_HTTP_ADDR");
        let mut process = ServerProcess::spawn("docker-registry", cmd, &d.join("registry.log"))?;
        process.wait_for_port(SocketAddr::from(([127, 0, 0, 1], port)), START_DEADLINE)?;
        Ok(Self { port, ca_pem, process, _dir: dir })
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `oci://127.0.0.1:PORT/<path>`.
    pub fn oci_url(&self, path: &str) -> String {
        format!("oci://{}/{path}", self.host())
    }

    /// What the registry logged so far.
    pub fn log_text(&self) -> String {
        self.process.log_text()
    }
}

/// A running lighttpd serving a directory over https, every file behind basic auth. Anything
/// under `/moved/` answers with a redirect to the same path without `/moved` on `localhost`
/// (another origin than `127.0.0.1`), for testing that redirects are not followed.
#[derive(Debug)]
pub struct HttpsFiles {
    /// The port on 127.0.0.1.
    pub port: u16,
    /// PEM of the CA that signed the server certificate.
    pub ca_pem: String,
    /// The served directory.
    pub root: PathBuf,
    process: ServerProcess,
    _dir: tempfile::TempDir,
}

impl HttpsFiles {
    /// Serve a fresh empty directory ([`HttpsFiles::root`]) to `username`/`password`.
    pub fn start(username: &str, password: &str) -> Result<Self> {
        let lighttpd = require_program("/usr/sbin/lighttpd", "lighttpd")?;
        require_program("/usr/lib/lighttpd/mod_openssl.so", "lighttpd-mod-openssl")?;
        let (dir, ca_pem) = prepare("ksync-https-files-", username, password)?;
        let d = dir.path();
        let root = d.join("www");
        std::fs::create_dir_all(&root)?;
        let port = free_port()?;
        let conf = format!(
            r#"server.modules = ("mod_redirect","mod_auth","mod_authn_file","mod_openssl")
server.document-root = "{root}"
server.bind = "127.0.0.1"
server.port = {port}
server.pid-file = "{d}/lighttpd.pid"
server.errorlog = "{d}/error.log"
mimetype.assign = (".yaml" => "application/yaml", ".tgz" => "application/gzip")
ssl.engine = "enable"
ssl.pemfile = "{d}/{cert}"
ssl.privkey = "{d}/{key}"
auth.backend = "htpasswd"
auth.backend.htpasswd.userfile = "{d}/htpasswd"
auth.require = ("" => ("method" => "basic", "realm" => "charts", "require" => "valid-user"))
url.redirect = ("^/moved/(.*)$" => "https://localhost:{port}/$1")
"#,
            root = root.display(),
            d = d.display(),
            cert = CERT_FILE,
            key = KEY_FILE,
        );
        let conf_path = d.join("lighttpd.conf");
        std::fs::write(&conf_path, conf).context("writing lighttpd.conf")?;
        let mut cmd = Command::new(lighttpd);
        cmd.arg("-D").arg("-f").arg(&conf_path);
        let mut process = ServerProcess::spawn("lighttpd", cmd, &d.join("lighttpd.log"))?;
        process.wait_for_port(SocketAddr::from(([127, 0, 0, 1], port)), START_DEADLINE)?;
        Ok(Self { port, ca_pem, root, process, _dir: dir })
    }

    /// `https://127.0.0.1:PORT/<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}/{path}", self.port)
    }

    /// Where files are served from.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// What lighttpd logged so far.
    pub fn log_text(&self) -> String {
        self.process.log_text()
    }
}
