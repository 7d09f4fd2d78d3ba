//! `ksync-sandbox`: an embedded single-process Kubernetes API server for tests and `ksync demo`.
//!
//! It serves the Kubernetes API over HTTPS on loopback from an in-memory store, close enough to
//! kube-apiserver that kubectl and kube-rs cannot tell the difference for what Kuvryn Sync uses.

mod admission;

/// A YAML request body as JSON, read like every other untrusted YAML (kuvryn_sync_core::yaml).
pub(crate) fn decode_yaml<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let text = std::str::from_utf8(body).map_err(|_| "the body is not UTF-8".to_owned())?;
    kuvryn_sync_core::yaml::from_str(text).map_err(|e| e.to_string())
}
mod authz;
mod builtin;
mod builtin_admission;
mod convert;
mod crdvalid;
mod faults;
mod fields;
mod gc;
mod identity;
mod jsonpath;
mod labelindex;
mod matchcond;
mod metavalid;
mod openapi;
mod protobuf;
mod requestlog;
mod resources;
mod schema;
mod selector;
mod server;
mod simulator;
mod smp;
mod status;
mod store;
mod table;
mod tls;
mod webhookclient;
mod webhookconfig;

pub mod harness;

pub use faults::{Fault, Injected};
pub use requestlog::RequestRecord;

use anyhow::Context;
use base64::Engine;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How to start a sandbox.
#[derive(Debug, Clone)]
pub struct SandboxOptions {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Where to write the kubeconfig; `None`: a file in a private temporary directory.
    pub kubeconfig: Option<PathBuf>,
    /// Run the workload simulator.
    pub simulate_workloads: bool,
    /// How many change events the store keeps (`serve --event-history`): watches resume from
    /// them and paged or `Exact` lists rebuild older snapshots from them; older versions get
    /// 410 Gone.
    pub watch_history: usize,
    /// How often watches with `allowWatchBookmarks` get a BOOKMARK.
    pub bookmark_interval: Duration,
}

impl Default for SandboxOptions {
    fn default() -> Self {
        SandboxOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            kubeconfig: None,
            simulate_workloads: false,
            watch_history: 200_000,
            bookmark_interval: Duration::from_secs(60),
        }
    }
}

/// A running sandbox; dropping it shuts the server down.
#[derive(Debug)]
pub struct Sandbox {
    addr: SocketAddr,
    kubeconfig: PathBuf,
    store: Arc<store::Store>,
    app: Arc<server::App>,
    ca_pem: String,
    handle: axum_server::Handle<SocketAddr>,
    _tmp: Option<TempDir>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// A private temporary directory removed on drop.
#[derive(Debug)]
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn make_tempdir() -> anyhow::Result<TempDir> {
    let p = std::env::temp_dir().join(format!("ksync-sandbox-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&p)?;
    Ok(TempDir(p))
}

/// The kubeconfig for the admin (`system:masters`) with the sandbox CA.
fn kubeconfig_yaml(server: &str, ca_pem: &str, token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: ksync-sandbox\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: ksync-sandbox-admin\n  user:\n    token: {token}\ncontexts:\n- name: ksync-sandbox\n  context:\n    cluster: ksync-sandbox\n    user: ksync-sandbox-admin\n    namespace: default\ncurrent-context: ksync-sandbox\npreferences: {{}}\n"
    )
}

impl Sandbox {
    /// Start a sandbox in this process (inside a tokio runtime).
    pub async fn start(opts: SandboxOptions) -> anyhow::Result<Sandbox> {
        kuvryn_sync_runtime::tls::install_crypto_provider();
        let pki = tls::generate()?;
        let listener = std::net::TcpListener::bind(opts.listen)
            .with_context(|| format!("binding {}", opts.listen))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let token = format!("ksync-admin-{}", uuid::Uuid::new_v4().simple());
        let store = store::Store::new(opts.watch_history.max(1));
        store.set_ca(&pki.ca_pem);
        let app = Arc::new(server::App {
            store: store.clone(),
            admin_token: token.clone(),
            addr,
            bookmark_interval: opts.bookmark_interval,
            services: webhookclient::ServiceMap::default(),
            faults: faults::Faults::default(),
            tokens: Default::default(),
            requests: Default::default(),
        });
        let app_handle = app.clone();
        let router = axum::Router::new().fallback(
            move |method: axum::http::Method,
                  uri: axum::http::Uri,
                  headers: axum::http::HeaderMap,
                  body: axum::body::Bytes| {
                let app = app.clone();
                async move { server::handle(app, method, uri, headers, body).await }
            },
        );
        let router = router.layer(axum::extract::DefaultBodyLimit::max(64 << 20));
        let cfg = axum_server::tls_rustls::RustlsConfig::from_pem(
            pki.cert_pem.clone().into_bytes(),
            pki.key_pem.clone().into_bytes(),
        )
        .await
        .context("TLS config")?;
        let handle = axum_server::Handle::new();
        let server = axum_server::from_tcp_rustls(listener, cfg)?.handle(handle.clone());
        let mut tasks = vec![tokio::spawn(async move {
            if let Err(e) = server.serve(router.into_make_service()).await {
                tracing::error!("sandbox server: {e}");
            }
        })];
        let gc_store = store.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                gc_store.gc.notified().await;
                while gc_store.gc_pass() {}
            }
        }));
        handle.listening().await.context("server did not start")?;
        let (kubeconfig, tmp) = match &opts.kubeconfig {
            Some(p) => (p.clone(), None),
            None => {
                let t = make_tempdir()?;
                (t.0.join("kubeconfig"), Some(t))
            }
        };
        let server_url = format!("https://{addr}");
        let ca_pem = pki.ca_pem.clone();
        write_private(&kubeconfig, &kubeconfig_yaml(&server_url, &pki.ca_pem, &token))?;
        // The workload simulator is a client of this API, like kubelet and kube-controller-manager.
        if opts.simulate_workloads {
            tasks.push(simulator::start(&kubeconfig).await?);
        }
        Ok(Sandbox { addr, kubeconfig, store, app: app_handle, ca_pem, handle, _tmp: tmp, tasks })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Forget the watch history (like an etcd compaction): open watches end with 410 Gone and
    /// clients must relist.
    pub fn compact(&self) {
        self.store.compact();
    }

    /// Route webhook `clientConfig.service` references to `ns/name` to a local address; the TLS
    /// server name stays `name.ns.svc`, as kube-apiserver uses it.
    pub fn map_service(&self, namespace: &str, name: &str, addr: SocketAddr) {
        self.app.services.insert(namespace, name, addr);
    }

    /// Write a kubeconfig (next to the admin's) for another identity, authenticated by a bearer
    /// token; its permissions come from RBAC. Service accounts are `system:serviceaccount:NS:NAME`.
    pub fn user_kubeconfig(&self, username: &str, groups: &[&str]) -> anyhow::Result<PathBuf> {
        let token = format!("ksync-user-{}", uuid::Uuid::new_v4().simple());
        let mut gs: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        if let Some(ns) = username
            .strip_prefix("system:serviceaccount:")
            .and_then(|r| r.split_once(':'))
            .map(|(ns, _)| ns)
        {
            gs.push("system:serviceaccounts".into());
            gs.push(format!("system:serviceaccounts:{ns}"));
        }
        gs.push("system:authenticated".into());
        let user = identity::UserInfo {
            username: username.to_string(),
            uid: String::new(),
            groups: gs,
            extra: Default::default(),
        };
        self.app.tokens.write().unwrap_or_else(|e| e.into_inner()).insert(token.clone(), user);
        let safe: String =
            username.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        let path = self.kubeconfig.with_file_name(format!("kubeconfig-{safe}"));
        write_private(&path, &kubeconfig_yaml(&self.url(), &self.ca_pem, &token))?;
        Ok(path)
    }

    /// Start recording every request (who, what, when, the response code): the audit log a
    /// test reads with [`requests`](Self::requests).
    pub fn record_requests(&self) {
        self.app.requests.enable();
    }

    /// The requests recorded since [`record_requests`](Self::record_requests).
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.app.requests.records()
    }

    /// Inject faults for a verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`) or `*`.
    pub fn set_fault(&self, verb: &str, fault: Fault) {
        self.app.faults.set(verb, fault);
    }

    /// How many faults were injected so far, by kind (errors, resets, delayed requests, watch
    /// cuts, `410 Gone` on resumed watches).
    pub fn injected_faults(&self) -> Injected {
        self.app.faults.injected()
    }

    /// Remove every injected fault.
    pub fn clear_faults(&self) {
        self.app.faults.clear();
    }

    /// A kube-rs client for the admin.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig)?;
        let cfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?;
        Ok(kube::Client::try_from(cfg)?)
    }

    /// Create a fresh namespace `PREFIX-<random suffix>` for one test and return its name
    /// (see [`harness::create_namespace`]).
    pub async fn create_namespace(&self, prefix: &str) -> anyhow::Result<String> {
        harness::create_namespace(&self.client().await?, prefix).await
    }

    /// Install CustomResourceDefinitions (server-side apply) and wait until each is
    /// `Established` (see [`harness::install_crds`]).
    pub async fn install_crds(
        &self,
        crds: &[k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition],
    ) -> anyhow::Result<()> {
        harness::install_crds(&self.client().await?, crds.iter().cloned()).await
    }

    /// Stop serving (also done on drop).
    pub fn shutdown(&self) {
        self.handle.shutdown();
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn write_private(path: &Path, content: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(content.as_bytes())?;
    Ok(())
}
