//! Smart HTTP over https with basic auth: lighttpd in front of `git http-backend`, with a
//! certificate from a test CA (the project's `kuvryn-sync-certs`).

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};
use kuvryn_sync_certs::{CERT_FILE, CertRequest, KEY_FILE};

use super::{START_DEADLINE, ServerProcess, free_port, require_program, run};

/// A running lighttpd serving `/git/NAME.git` from a root, behind basic auth.
#[derive(Debug)]
pub struct HttpsGit {
    /// The port on 127.0.0.1.
    pub port: u16,
    /// The PEM of the CA that signed the server certificate.
    pub ca_pem: String,
    /// The CA certificate file.
    pub ca_file: PathBuf,
    /// The user accepted.
    pub username: String,
    process: ServerProcess,
    _dir: tempfile::TempDir,
}

impl HttpsGit {
    /// Serve the repositories under `root` to `username`/`password`.
    pub fn start(root: &Path, username: &str, password: &str) -> Result<Self> {
        let lighttpd = require_program("/usr/sbin/lighttpd", "lighttpd")?;
        require_program("/usr/lib/lighttpd/mod_openssl.so", "lighttpd-mod-openssl")?;
        require_program("htpasswd", "apache2-utils")?;
        let dir = tempfile::Builder::new().prefix("ksync-https-").tempdir()?;
        let d = dir.path();
        let certs = kuvryn_sync_certs::generate(&CertRequest {
            dns_names: vec!["localhost".into()],
            ip_addresses: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
            validity_days: 2,
        })?;
        certs.write_to(d)?;
        let ca_file = d.join(kuvryn_sync_certs::CA_CERT_FILE);
        let mut htpasswd = Command::new("htpasswd");
        htpasswd.arg("-bBc").arg(d.join("htpasswd")).arg(username).arg(password);
        run(htpasswd)?;
        let exec_path = run({
            let mut c = Command::new("git");
            c.arg("--exec-path");
            c
        })?;
        let backend = Path::new(exec_path.trim()).join("git-http-backend");
        std::fs::create_dir_all(d.join("www"))?;
        let port = free_port()?;
        let conf = format!(
            r#"server.modules = ("mod_alias","mod_auth","mod_authn_file","mod_cgi","mod_setenv","mod_openssl","mod_accesslog")
server.document-root = "{d}/www"
server.bind = "127.0.0.1"
server.port = {port}
server.pid-file = "{d}/lighttpd.pid"
server.errorlog = "{d}/error.log"
accesslog.filename = "{d}/access.log"
accesslog.format = "%r %>s authorization=\"%{{Authorization}}i\""
ssl.engine = "enable"
ssl.pemfile = "{d}/{cert}"
ssl.privkey = "{d}/{key}"
auth.backend = "htpasswd"
auth.backend.htpasswd.userfile = "{d}/htpasswd"
alias.url = ("/git" => "{backend}")
$HTTP["url"] =~ "^/git" {{
  cgi.assign = ("" => "")
  setenv.add-environment = ("GIT_PROJECT_ROOT" => "{root}", "GIT_HTTP_EXPORT_ALL" => "", "GIT_CONFIG_NOSYSTEM" => "1")
  auth.require = ("" => ("method" => "basic", "realm" => "git", "require" => "valid-user"))
}}
"#,
            d = d.display(),
            cert = CERT_FILE,
            key = KEY_FILE,
            backend = backend.display(),
            root = root.display(),
        );
        let conf_path = d.join("lighttpd.conf");
        std::fs::write(&conf_path, conf).context("writing lighttpd.conf")?;
        let mut cmd = Command::new(lighttpd);
        cmd.arg("-D").arg("-f").arg(&conf_path);
        let mut process = ServerProcess::spawn("lighttpd", cmd, &d.join("lighttpd.log"))?;
        process.wait_for_port(SocketAddr::from(([127, 0, 0, 1], port)), START_DEADLINE)?;
        Ok(Self {
            port,
            ca_pem: certs.ca_cert_pem.clone(),
            ca_file,
            username: username.to_owned(),
            process,
            _dir: dir,
        })
    }

    /// The https URL of `name` (such as `app.git`), without credentials.
    pub fn url(&self, name: &str) -> String {
        format!("https://127.0.0.1:{}/git/{name}", self.port)
    }

    /// lighttpd's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The access log so far: one line per request, `METHOD TARGET PROTOCOL STATUS
    /// authorization="…"` (the request's `Authorization` header, `-` when absent).
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("access.log")).unwrap_or_default()
    }
}
