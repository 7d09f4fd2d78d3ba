//! The cage around every render helper process (`kustomize build` / `kubectl kustomize`, and the
//! Helm engine's `ksync-helm-render`): a fresh network namespace, resource limits, and one
//! directory for every render's temporary files.
//!
//! - **Network isolation** ([`NetworkIsolation`]): the helper is started in a new, empty network
//!   namespace (`unshare(CLONE_NEWNET)` between fork and exec; as non-root, or where the
//!   container lacks `CAP_SYS_ADMIN`, `CLONE_NEWUSER | CLONE_NEWNET`, an unprivileged user
//!   namespace). The namespace has only a loopback interface that is down: no address, no route,
//!   no DNS, so nothing a kustomization names can be fetched, not even `127.0.0.1` of the pod.
//!   `auto` isolates when the kernel allows it (the controller logs once at start-up when it
//!   does not, [`Sandbox::probe`]); `required` refuses to start a helper without it; `off` never
//!   isolates. The field refusal of [`crate::kustomize`] holds in every mode.
//! - **Resource limits** ([`ResourceLimits`], `setrlimit` in the child): address space, CPU
//!   seconds, largest file written, open files; no core dumps. They are per process, so one
//!   render reaching its limit fails that render only; renders running beside it are untouched.
//!   The number of processes is not limited: `RLIMIT_NPROC` counts every process of the user,
//!   the controller's own threads included, so it would let one render's neighbours starve it.
//!   The wall-clock limit is the supervisor's (`--render-timeout`).
//! - **Temporary directories** ([`temp_dir`]): workspaces (with decrypted SOPS files), engine
//!   homes and chart copies are created under one directory ([`use_temp_root`]), which the
//!   controller empties at start-up ([`empty_temp_root`]), so files a crash left behind are
//!   removed.
//!
//! This is the render crate's only `unsafe` code: `CommandExt::pre_exec` is unsafe because the
//! closure runs in the forked child of a multi-threaded process, where only async-signal-safe
//! calls are allowed. Ours makes only raw system calls (`setrlimit`, `unshare`) through `nix`,
//! with values computed before the fork: no allocation, no lock. Hand-written: no maintained
//! crate applies rlimits and namespaces to a `std::process::Command`.

#![allow(unsafe_code)]

use std::fmt;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::OnceLock;

use nix::sched::{CloneFlags, unshare};
use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Whether render helpers run in their own empty network namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NetworkIsolation {
    /// Isolate when the kernel allows it; otherwise run without (logged once at start-up).
    #[default]
    Auto,
    /// Isolate, or fail the render (and refuse to start the controller) when impossible.
    Required,
    /// Never isolate.
    Off,
}

impl FromStr for NetworkIsolation {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "auto" => Ok(NetworkIsolation::Auto),
            "required" => Ok(NetworkIsolation::Required),
            "off" => Ok(NetworkIsolation::Off),
            other => Err(format!("{other:?} is not one of auto, required, off")),
        }
    }
}

impl fmt::Display for NetworkIsolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NetworkIsolation::Auto => "auto",
            NetworkIsolation::Required => "required",
            NetworkIsolation::Off => "off",
        })
    }
}

/// Default address-space limit of a render helper: 4 GiB (a Go program reserves about 1 GiB of
/// address space before it does anything).
pub const DEFAULT_MAX_MEMORY_BYTES: u64 = 4 * 1024 * 1024 * 1024;
/// Default CPU-time limit of a render helper, in seconds.
pub const DEFAULT_MAX_CPU_SECONDS: u64 = 120;
/// Default limit on the size of any file a render helper writes.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// Default limit on the files a render helper has open at once.
pub const DEFAULT_MAX_OPEN_FILES: u64 = 1024;

/// Per-process limits of a render helper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceLimits {
    /// `RLIMIT_AS`: address space, in bytes.
    pub max_memory_bytes: u64,
    /// `RLIMIT_CPU`: CPU seconds (all threads); `SIGXCPU` then, a second later, `SIGKILL`.
    pub max_cpu_seconds: u64,
    /// `RLIMIT_FSIZE`: largest file written, in bytes.
    pub max_file_bytes: u64,
    /// `RLIMIT_NOFILE`: open files.
    pub max_open_files: u64,
}

impl ResourceLimits {
    /// No limit at all (each at `RLIM_INFINITY`, capped to this process's own hard limits).
    pub const UNLIMITED: ResourceLimits = ResourceLimits {
        max_memory_bytes: u64::MAX,
        max_cpu_seconds: u64::MAX,
        max_file_bytes: u64::MAX,
        max_open_files: u64::MAX,
    };
}

impl Default for ResourceLimits {
    fn default() -> Self {
        ResourceLimits {
            max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
            max_cpu_seconds: DEFAULT_MAX_CPU_SECONDS,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_open_files: DEFAULT_MAX_OPEN_FILES,
        }
    }
}

/// The isolation policy and limits applied to every render helper.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sandbox {
    pub isolation: NetworkIsolation,
    pub limits: ResourceLimits,
}

/// What [`Sandbox::probe`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IsolationSupport {
    /// Helpers start in their own network namespace.
    Isolated,
    /// The policy is `off`.
    Disabled,
    /// The kernel refused the namespace (the reason, an errno name).
    Unavailable(String),
}

impl Sandbox {
    /// No cage: no limits, no namespace. [`Sandbox::apply`] then leaves the command untouched,
    /// so the helper starts the way an unsupervised one would (`posix_spawn`, no `fork`). The
    /// render benchmark measures the cage's cost against it; no flag of the controller gives it.
    pub const UNCONFINED: Sandbox =
        Sandbox { isolation: NetworkIsolation::Off, limits: ResourceLimits::UNLIMITED };

    /// Make `command` start its process under this sandbox (limits, then the namespace).
    pub fn apply(&self, command: &mut Command) {
        if *self == Sandbox::UNCONFINED {
            return;
        }
        // Never above the hard limits this process has: raising one would fail the start.
        let cap = |resource, value: u64| {
            let hard = getrlimit(resource).map_or(u64::MAX, |(_, hard)| hard);
            value.min(hard)
        };
        let memory = cap(Resource::RLIMIT_AS, self.limits.max_memory_bytes);
        let cpu = cap(Resource::RLIMIT_CPU, self.limits.max_cpu_seconds.saturating_add(1));
        let file = cap(Resource::RLIMIT_FSIZE, self.limits.max_file_bytes);
        let open = cap(Resource::RLIMIT_NOFILE, self.limits.max_open_files);
        let isolation = self.isolation;
        let as_root = nix::unistd::geteuid().is_root();
        // SAFETY: the closure runs between fork and exec. It only makes system calls
        // (setrlimit, unshare) with values captured by copy before the fork; it allocates
        // nothing and takes no lock, which is what async-signal safety requires.
        unsafe {
            command.pre_exec(move || {
                let set = |resource, soft: u64, hard: u64| {
                    setrlimit(resource, soft, hard)
                        .map_err(|e| io::Error::from_raw_os_error(e as i32))
                };
                set(Resource::RLIMIT_CORE, 0, 0)?;
                set(Resource::RLIMIT_AS, memory, memory)?;
                set(Resource::RLIMIT_CPU, cpu.saturating_sub(1).max(1), cpu)?;
                set(Resource::RLIMIT_FSIZE, file, file)?;
                set(Resource::RLIMIT_NOFILE, open, open)?;
                if isolation != NetworkIsolation::Off
                    && let Err(errno) = isolate_network(as_root)
                    && isolation == NetworkIsolation::Required
                {
                    return Err(io::Error::from_raw_os_error(errno as i32));
                }
                Ok(())
            });
        }
    }

    /// Whether helpers can be isolated here: starts `program args` (a harmless command of the
    /// engine, such as `kubectl version --client`) in the sandbox's namespace and reports.
    pub fn probe(&self, program: &Path, args: &[&str]) -> IsolationSupport {
        if self.isolation == NetworkIsolation::Off {
            return IsolationSupport::Disabled;
        }
        let strict = Sandbox { isolation: NetworkIsolation::Required, ..*self };
        let mut command = Command::new(program);
        command.args(args).env_clear().stdin(Stdio::null()).stdout(Stdio::null());
        command.stderr(Stdio::null());
        strict.apply(&mut command);
        match command.status() {
            Ok(_) => IsolationSupport::Isolated,
            Err(err) => IsolationSupport::Unavailable(
                err.raw_os_error()
                    .map(|n| nix::errno::Errno::from_raw(n).desc().to_owned())
                    .unwrap_or_else(|| err.kind().to_string()),
            ),
        }
    }
}

/// Enter a new network namespace: directly with `CAP_SYS_ADMIN`, else inside a new user
/// namespace. Only system calls: this runs between fork and exec.
fn isolate_network(as_root: bool) -> Result<(), nix::errno::Errno> {
    if as_root && unshare(CloneFlags::CLONE_NEWNET).is_ok() {
        return Ok(());
    }
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET)
}

/// The directory render temporary files go under, once set; else the system's.
static TEMP_ROOT: OnceLock<PathBuf> = OnceLock::new();

/// Create every later render temporary directory under `root` (the first call wins; the
/// controller calls it once at start-up, after [`empty_temp_root`]).
pub fn use_temp_root(root: PathBuf) -> Result<(), PathBuf> {
    TEMP_ROOT.set(root)
}

/// The directory render temporary files go under.
pub fn temp_root() -> PathBuf {
    TEMP_ROOT.get().cloned().unwrap_or_else(std::env::temp_dir)
}

/// A fresh private temporary directory for one render (workspace, engine home, chart copy),
/// under [`temp_root`]; removed when dropped.
pub fn temp_dir(prefix: &str) -> io::Result<tempfile::TempDir> {
    tempfile::Builder::new().prefix(prefix).tempdir_in(temp_root())
}

/// Create `root` (private, `0700`) when missing and remove everything in it: files a crashed
/// controller left (workspaces with decrypted files, sealed read-only). Returns how many
/// entries were removed.
pub fn empty_temp_root(root: &Path) -> io::Result<usize> {
    std::fs::create_dir_all(root)?;
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))?;
    let mut removed = 0;
    for entry in std::fs::read_dir(root)? {
        let path = entry?.path();
        make_writable(&path);
        if std::fs::symlink_metadata(&path)?.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
        removed += 1;
    }
    Ok(removed)
}

/// Open up sealed (read-only) directories below `path` so they can be removed; links are not
/// followed.
fn make_writable(path: &Path) {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700));
    if let Ok(entries) = std::fs::read_dir(path) {
        for entry in entries.flatten() {
            make_writable(&entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_print() {
        for (text, policy) in [
            ("auto", NetworkIsolation::Auto),
            ("required", NetworkIsolation::Required),
            ("off", NetworkIsolation::Off),
        ] {
            assert_eq!(text.parse::<NetworkIsolation>(), Ok(policy));
            assert_eq!(policy.to_string(), text);
        }
        let err = "on".parse::<NetworkIsolation>().expect_err("refused");
        assert!(err.contains("auto, required, off"), "{err}");
    }

    /// The open-files limit a shell started under `sandbox` reports.
    fn child_open_files(sandbox: &Sandbox) -> String {
        let mut command = Command::new("sh");
        command.args(["-c", "ulimit -n"]).stdout(Stdio::piped());
        sandbox.apply(&mut command);
        let output = command.output().expect("sh runs");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    #[test]
    fn the_default_cage_limits_a_helper_and_the_unconfined_one_leaves_it_as_it_was() {
        let limits = ResourceLimits { max_open_files: 77, ..ResourceLimits::default() };
        let caged = Sandbox { isolation: NetworkIsolation::Off, limits };
        assert_eq!(child_open_files(&caged), "77");
        // A soft limit below the hard one: a cage with no limits would raise it to the hard
        // limit; leaving the command untouched keeps it.
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("own limit");
        let soft = soft.min(hard.saturating_sub(1));
        setrlimit(Resource::RLIMIT_NOFILE, soft, hard).expect("lower own soft limit");
        assert_eq!(child_open_files(&Sandbox::UNCONFINED), soft.to_string());
        // Unlimited yet isolated is still a cage: it sets every limit (here to the hard one).
        let isolated =
            Sandbox { isolation: NetworkIsolation::Auto, limits: ResourceLimits::UNLIMITED };
        assert_eq!(child_open_files(&isolated), hard.to_string());
    }
}
