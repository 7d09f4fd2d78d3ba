//! A Kubernetes API for end-to-end tests: an in-process `ksync-sandbox` by default, or a real
//! cluster when `KSYNC_E2E_KUBECONFIG` names a kubeconfig. Installs our CRDs, gives each test its
//! own namespace, starts the controller binary against it, and waits on conditions with
//! deadlines.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ksync_sandbox::{Sandbox, SandboxOptions, harness};

/// Poll `check` until it returns `Some` or `deadline` passes; the error says what was awaited
/// and the last observation.
pub use ksync_sandbox::harness::wait_for;

/// Environment variable naming a real cluster's kubeconfig to run the e2e suite against.
pub const REAL_CLUSTER_ENV: &str = "KSYNC_E2E_KUBECONFIG";

/// The API server the tests talk to.
pub struct TestCluster {
    sandbox: Option<Sandbox>,
    kubeconfig: PathBuf,
    client: kube::Client,
}

impl TestCluster {
    /// Start a sandbox (or connect to `KSYNC_E2E_KUBECONFIG`) and install the CRDs.
    pub async fn start() -> Result<Self> {
        Self::start_with(SandboxOptions::default()).await
    }

    /// [`start`](Self::start) with workloads that run: the sandbox's simulated scheduler,
    /// kubelet and workload controllers (`--simulate-workloads`); a real cluster runs them anyway.
    pub async fn start_with_workloads() -> Result<Self> {
        Self::start_with(SandboxOptions { simulate_workloads: true, ..SandboxOptions::default() })
            .await
    }

    async fn start_with(options: SandboxOptions) -> Result<Self> {
        let (sandbox, kubeconfig) = match std::env::var_os(REAL_CLUSTER_ENV) {
            Some(path) => (None, PathBuf::from(path)),
            None => {
                let sandbox = Sandbox::start(options).await?;
                let path = sandbox.kubeconfig_path().to_owned();
                (Some(sandbox), path)
            }
        };
        let kc = kube::config::Kubeconfig::read_from(&kubeconfig)?;
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?;
        let client = kube::Client::try_from(config)?;
        let cluster = TestCluster { sandbox, kubeconfig, client };
        cluster.install_crds().await?;
        Ok(cluster)
    }

    /// The in-process sandbox, or `None` against a real cluster.
    pub fn sandbox(&self) -> Option<&Sandbox> {
        self.sandbox.as_ref()
    }

    /// An admin client.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The kubeconfig file for child processes (`KUBECONFIG`, `kubectl --kubeconfig`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Server-side apply every Kuvryn Sync CRD and wait until each is Established.
    pub async fn install_crds(&self) -> Result<()> {
        harness::install_crds(&self.client, kuvryn_sync_api::crds()).await
    }

    /// Create a fresh namespace named `<prefix>-<random>`.
    pub async fn namespace(&self, prefix: &str) -> Result<String> {
        harness::create_namespace(&self.client, prefix).await
    }
}

impl std::fmt::Debug for TestCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCluster").field("kubeconfig", &self.kubeconfig).finish()
    }
}

fn random_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{:x}{:x}", std::process::id() ^ nanos, COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// Tests whose workloads only the sandbox's simulation runs as they expect (fictional images
/// such as `registry.example/app:1` that "pull", failures the simulator produces, images on a
/// registry bound to the test machine's loopback) call this first. Against a real cluster
/// (`KSYNC_E2E_KUBECONFIG`) it prints why `test` is skipped and returns true; docs/testing.md
/// lists these tests.
pub fn skip_on_real_cluster(test: &str, needs: &str) -> bool {
    if std::env::var_os(REAL_CLUSTER_ENV).is_none() {
        return false;
    }
    eprintln!(
        "SKIPPED {test}: it needs {needs}, which only the sandbox simulates \
         ({REAL_CLUSTER_ENV} names a real cluster)"
    );
    true
}

/// The path of a workspace binary built by `cargo build` (the test script builds them all).
pub fn workspace_binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    // target/debug/deps/<test> → target/debug/<name>
    let dir = exe.parent().and_then(Path::parent).context("test executable location")?;
    let path = dir.join(name);
    if !path.exists() {
        bail!("{} is missing: run `cargo build --workspace` first", path.display());
    }
    Ok(path)
}

/// A running `kuvryn-sync-controller`, killed on drop together with any process it started
/// (render helpers, `git`, `ssh`).
#[derive(Debug)]
pub struct ControllerProcess {
    child: Child,
    cache: tempfile::TempDir,
}

impl ControllerProcess {
    /// Start the controller against `cluster` with extra flags.
    pub fn start(cluster: &TestCluster, extra_args: &[&str]) -> Result<Self> {
        Self::start_as(
            cluster,
            &format!("kuvryn-sync-controller-test-{}", random_suffix()),
            extra_args,
        )
    }

    /// Start the controller with `POD_NAME` (its leader-election identity) set to `identity`.
    pub fn start_as(cluster: &TestCluster, identity: &str, extra_args: &[&str]) -> Result<Self> {
        Self::launch(cluster, identity, extra_args, &[], None)
    }

    /// Start the controller with extra environment variables, its output (stdout and stderr)
    /// written to `log` instead of the test's output.
    pub fn start_logged(
        cluster: &TestCluster,
        extra_args: &[&str],
        env: &[(&str, &str)],
        log: &Path,
    ) -> Result<Self> {
        let identity = format!("kuvryn-sync-controller-test-{}", random_suffix());
        Self::launch(cluster, &identity, extra_args, env, Some(log))
    }

    fn launch(
        cluster: &TestCluster,
        identity: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
        log: Option<&Path>,
    ) -> Result<Self> {
        let cache = tempfile::tempdir()?;
        let (stdout, stderr) = match log {
            Some(path) => {
                let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
                (Stdio::from(file.try_clone()?), Stdio::from(file))
            }
            None => (Stdio::inherit(), Stdio::inherit()),
        };
        let child = Command::new(workspace_binary("kuvryn-sync-controller")?)
            .env("KUBECONFIG", cluster.kubeconfig())
            .env("POD_NAME", identity)
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()))
            .envs(env.iter().copied())
            .args(["--metrics-bind-address", "127.0.0.1:0"])
            .args(if extra_args.contains(&"--leader-election-namespace") {
                &[][..]
            } else {
                &["--leader-election-namespace", "default"][..]
            })
            .arg("--cache-dir")
            .arg(cache.path())
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .context("start kuvryn-sync-controller")?;
        Ok(ControllerProcess { child, cache })
    }

    /// Wait (up to `deadline`) for the controller to exit on its own; its exit status. Async, so
    /// that an in-process sandbox on the same runtime keeps serving the controller meanwhile.
    pub async fn wait_exit(&mut self, deadline: Duration) -> Result<std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if start.elapsed() > deadline {
                bail!("the controller did not exit within {deadline:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl ControllerProcess {
    /// Send SIGTERM and wait (up to `deadline`) for the exit status.
    pub async fn terminate(&mut self, deadline: Duration) -> Result<std::process::ExitStatus> {
        let pid = i32::try_from(self.child.id()).context("pid")?;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM)?;
        self.wait_exit(deadline).await.context("after SIGTERM")
    }
}

impl ControllerProcess {
    /// [`start_logged`](Self::start_logged) with `POD_NAME` (its leader-election identity) set to
    /// `identity`: a controller restarted under the identity of one that died takes the Lease at
    /// once instead of waiting for it to expire.
    pub fn start_logged_as(
        cluster: &TestCluster,
        identity: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
        log: &Path,
    ) -> Result<Self> {
        Self::launch(cluster, identity, extra_args, env, Some(log))
    }

    /// The controller's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The controller's `--cache-dir` (a temporary directory removed on drop).
    pub fn cache_dir(&self) -> &Path {
        self.cache.path()
    }

    /// Whether the controller process has exited (it is not reaped elsewhere).
    pub fn has_exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Send SIGKILL, as when a node or the kubelet kills the container: the controller gets no
    /// chance to release its Lease or finish a write. The processes it started (`git`, render
    /// helpers) are killed with it. Waits (up to `deadline`) for the exit status.
    pub async fn kill(&mut self, deadline: Duration) -> Result<std::process::ExitStatus> {
        let descendants = crate::process_tree::tree(self.child.id());
        let pid = i32::try_from(self.child.id()).context("pid")?;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL)?;
        for process in descendants.iter().skip(1) {
            let same = crate::process_tree::ProcessInfo::read(process.pid)
                .is_some_and(|now| now.start_ticks == process.start_ticks);
            if same {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(process.pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        self.wait_exit(deadline).await.context("after SIGKILL")
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = crate::process_tree::kill_tree(&mut self.child, crate::process_tree::STOP_DEADLINE);
    }
}

/// The (type, reason, note) of the events.k8s.io/v1 Events in `namespace` regarding the object
/// named `name`, once per recording: an Event recorded again is one object whose
/// `series.count` says how often, and is listed that many times.
pub async fn events_regarding(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Vec<(String, String, String)>> {
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(client.clone(), namespace);
    Ok(events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .flat_map(|e| {
            // An Event recorded again is one object whose series counts the recordings.
            let times = e.series.as_ref().map_or(1, |s| usize::try_from(s.count).unwrap_or(1));
            let event = (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            );
            std::iter::repeat_n(event, times)
        })
        .collect())
}
