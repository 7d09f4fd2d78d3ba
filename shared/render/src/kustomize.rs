//! `render.type: kustomize`: the real kustomize engine (`kustomize build DIR`, or
//! `kubectl kustomize DIR` where only kubectl is installed) run on a sealed private
//! [`Workspace`]; we never reimplement kustomize.
//!
//! What we add around the engine is the containment kustomize does not give by itself:
//! - **Arguments**: the kustomization directory is passed as an absolute path after `--`, so no
//!   user string can become a flag; a `spec.source.path` that is absolute, holds `..` or starts
//!   with `-` is refused before anything runs. The only flag is
//!   `--load-restrictor LoadRestrictionsRootOnly` (files outside a kustomization's root stay
//!   refused); `--enable-alpha-plugins`, `--enable-exec` and `--enable-helm` are never passed, so
//!   exec and containerized KRM functions, legacy plugins and Helm charts stay disabled.
//! - **No network from a kustomization**: before the engine runs, every kustomization file
//!   reachable locally, and every builtin generator/transformer configuration it names (a file,
//!   inline, or a directory of them), is read, and every entry of a field kustomize loads a path
//!   or URL from ([`crate::references`], one table) is checked: a URL or remote Git spec
//!   ([`is_remote_entry`]) refuses the render naming the file, the field and the entry (remote
//!   `resources`/`bases`/`components` only pass with `allow_remote_bases`; remote files never
//!   do), the Helm fields are refused outright, local entries that leave the repository are
//!   refused, and a kustomization that includes itself (a cycle) fails with the entry that
//!   closes the loop. At most [`MAX_KUSTOMIZATIONS`] files are visited. [`materialise`] runs the
//!   same walk to copy only what the render reads into its workspace.
//! - **The sandbox** ([`crate::sandbox`]): the engine starts in its own empty network namespace
//!   (unless remote bases are allowed) under rlimits; a render over its memory or CPU limit
//!   fails with a message naming the flag.
//! - **The child process** gets a cleared environment (only `PATH`, `LANG=C`, and `HOME`,
//!   `XDG_CONFIG_HOME`, `KUBECONFIG` pointing into an empty temporary directory: no kubeconfig,
//!   credentials or proxy settings of the controller leak in), a null stdin, its own process group
//!   (killed whole when the time limit passes), stdout capped at `max_output_bytes`, and only the
//!   last few KiB of stderr kept. Messages pass through `kuvryn_sync_core::redact` and
//!   `truncate`, with the workspace's location replaced by repository-relative paths.
//!
//! Hand-written: the pre-scan and the process supervision are our policy; running a program with
//! a deadline uses std threads, `wait-timeout`, and `nix` to signal the process group, since no
//! crate does both the output cap and the group kill.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kuvryn_sync_api::FailureReason;
use kuvryn_sync_core::desired::Rendered;
use kuvryn_sync_core::redact::{redact_shapes, truncate};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use wait_timeout::ChildExt;

use crate::references::{self, Reference, ReferenceKind};
use crate::sandbox::{NetworkIsolation, Sandbox};
use crate::workspace::Workspace;
use crate::yaml::RenderError;

/// Default time limit of one engine run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default cap on the engine's output.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 64 * 1024 * 1024;
/// Most kustomization files read by the remote-base check (a bound on cycles and fan-out).
pub const MAX_KUSTOMIZATIONS: usize = 1000;
/// Largest kustomization file read by the remote-base check.
pub const MAX_KUSTOMIZATION_BYTES: u64 = 1024 * 1024;
/// File names kustomize looks for in a kustomization directory, in its order.
pub const KUSTOMIZATION_FILE_NAMES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];
/// How much of the end of the engine's stderr is kept for the error message.
const STDERR_TAIL_BYTES: usize = 4096;
/// How much of the start of the engine's stderr is kept to tell why it died.
const STDERR_HEAD_BYTES: usize = 1024;
/// Longest engine message shown, in characters.
const MAX_MESSAGE_CHARS: usize = 2000;
/// How long to wait for the output pipes after the process group was killed.
const KILL_GRACE: Duration = Duration::from_secs(5);
const DEFAULT_CHILD_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Which program runs kustomize.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KustomizeProgram {
    /// A standalone `kustomize` binary: `kustomize build DIR`.
    Kustomize(PathBuf),
    /// kubectl with its built-in kustomize: `kubectl kustomize DIR`.
    Kubectl(PathBuf),
}

impl KustomizeProgram {
    /// The program to use: the controller flag's path when given (a file named `kubectl…` is run
    /// as `kubectl kustomize`), else `kustomize` on `PATH`, else `kubectl`.
    pub fn detect(flag: Option<PathBuf>) -> KustomizeProgram {
        Self::detect_in(flag, std::env::var_os("PATH").as_deref())
    }

    /// [`KustomizeProgram::detect`] with an explicit `PATH` value.
    pub fn detect_in(flag: Option<PathBuf>, path_var: Option<&OsStr>) -> KustomizeProgram {
        if let Some(path) = flag {
            let is_kubectl = path
                .file_name()
                .and_then(OsStr::to_str)
                .is_some_and(|name| name.starts_with("kubectl"));
            return if is_kubectl {
                KustomizeProgram::Kubectl(path)
            } else {
                KustomizeProgram::Kustomize(path)
            };
        }
        if let Some(found) = find_executable("kustomize", path_var) {
            return KustomizeProgram::Kustomize(found);
        }
        KustomizeProgram::Kubectl(
            find_executable("kubectl", path_var).unwrap_or_else(|| PathBuf::from("kubectl")),
        )
    }

    /// The program's path.
    pub fn path(&self) -> &Path {
        match self {
            KustomizeProgram::Kustomize(path) | KustomizeProgram::Kubectl(path) => path,
        }
    }

    /// How messages name the engine.
    pub fn engine_name(&self) -> &'static str {
        match self {
            KustomizeProgram::Kustomize(_) => "kustomize build",
            KustomizeProgram::Kubectl(_) => "kubectl kustomize",
        }
    }

    /// The full argument list for rendering the kustomization at `dir` (an absolute path).
    pub fn arguments(&self, dir: &Path) -> Vec<OsString> {
        let subcommand = match self {
            KustomizeProgram::Kustomize(_) => "build",
            KustomizeProgram::Kubectl(_) => "kustomize",
        };
        let mut args: Vec<OsString> =
            [subcommand, "--load-restrictor", "LoadRestrictionsRootOnly", "--"]
                .into_iter()
                .map(OsString::from)
                .collect();
        args.push(dir.as_os_str().to_owned());
        args
    }
}

/// Why a kustomize render failed; every message is safe to show (paths and entries, never file
/// contents, secrets masked).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KustomizeError {
    /// A path, symlink or workspace problem shared with the other renderers.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// `spec.source.path` starts with `-`.
    #[error(
        "spec.source.path {path:?} must not start with '-' (it could be taken for a flag): name \
         the directory without a leading dash"
    )]
    PathLooksLikeFlag { path: String },
    /// The source path has no kustomization file.
    #[error(
        "{path}: render.type kustomize needs a kustomization.yaml, kustomization.yml or \
         Kustomization file in spec.source.path"
    )]
    NoKustomization { path: String },
    /// A kustomization refers to a remote base while remote bases are off.
    #[error(
        "{file}: {field} entry {entry:?} is a remote base, and remote kustomize bases are \
         disabled: copy it into the repository and refer to it by a relative path, or ask the \
         operator to allow remote bases"
    )]
    RemoteBaseRefused { file: String, field: String, entry: String },
    /// A kustomization names a URL or remote Git spec where kustomize would fetch a file (a
    /// generator's `files`, a patch, a replacement...): renders never reach the network.
    #[error(
        "{file}: {field} entry {entry:?} is a URL or remote reference, and kustomize renders \
         never fetch anything: put the file into the repository and name it by a relative path"
    )]
    RemoteReferenceRefused { file: String, field: String, entry: String },
    /// A kustomization sets a field that is refused whatever it holds (Helm inflation).
    #[error(
        "{file}: {field} is not allowed: Helm charts through kustomize are disabled; render the \
         chart with render.type helm instead"
    )]
    FieldRefused { file: String, field: String },
    /// A render helper reached its memory limit.
    #[error(
        "{engine} ran out of memory under its limit of {limit} bytes of address space: lower \
         what the render needs, or ask the operator to raise --render-max-memory"
    )]
    MemoryLimit { engine: &'static str, limit: u64 },
    /// A render helper reached its CPU-time limit.
    #[error(
        "{engine} was stopped at its limit of {seconds} CPU seconds: lower what the render \
         needs, or ask the operator to raise --render-max-cpu-seconds"
    )]
    CpuLimit { engine: &'static str, seconds: u64 },
    /// Network isolation is required and the kernel refused it.
    #[error(
        "{engine} was not started: --render-network-isolation=required, and a network namespace \
         could not be created ({reason})"
    )]
    IsolationUnavailable { engine: &'static str, reason: String },
    /// A local entry leads outside the repository.
    #[error(
        "{file}: {field} entry {entry:?} leads outside the repository: refer to files and \
         directories inside it by relative paths"
    )]
    EntryEscapes { file: String, field: String, entry: String },
    /// Kustomizations include each other in a loop.
    #[error(
        "{file}: {field} entry {entry:?} includes a kustomization that includes this one (a \
         cycle): remove one of the references"
    )]
    KustomizationCycle { file: String, field: String, entry: String },
    /// Too many kustomization files reachable from the root.
    #[error("more than {limit} kustomization files are reachable from spec.source.path")]
    TooManyKustomizations { limit: usize },
    /// A kustomization file above [`MAX_KUSTOMIZATION_BYTES`].
    #[error("{file}: a kustomization file may hold at most {limit} bytes")]
    KustomizationTooLarge { file: String, limit: u64 },
    /// A kustomization file is not YAML.
    #[error("{file}: invalid YAML at line {line}, column {column}")]
    KustomizationSyntax { file: String, line: usize, column: usize },
    /// The engine ran on a workspace that was not sealed.
    #[error("internal error: the render workspace must be sealed before kustomize runs")]
    NotSealed,
    /// The program could not be started.
    #[error(
        "{engine} could not be started ({reason}): check the controller's kustomize binary setting"
    )]
    EngineNotStarted { engine: &'static str, reason: String },
    /// The engine exited with an error.
    #[error("{engine} failed: {message}")]
    EngineFailed { engine: &'static str, message: String },
    /// The engine ran past its time limit and was killed.
    #[error("{engine} did not finish within {seconds} s and was stopped")]
    TimedOut { engine: &'static str, seconds: u64 },
    /// The engine's output exceeded the cap.
    #[error("{engine} produced more than {limit} bytes of output and was stopped")]
    OutputTooLarge { engine: &'static str, limit: usize },
    /// The engine's output is not YAML.
    #[error("{engine} produced invalid YAML at line {line}, column {column}")]
    BadOutput { engine: &'static str, line: usize, column: usize },
}

impl KustomizeError {
    /// The failure reason for conditions and status: a path that is unsafe or leaves the
    /// repository is `ValidationFailure`; everything else, refused remote references and fields
    /// included, `RenderFailure`.
    pub fn reason(&self) -> FailureReason {
        match self {
            KustomizeError::Render(err) => err.reason(),
            KustomizeError::PathLooksLikeFlag { .. } | KustomizeError::EntryEscapes { .. } => {
                FailureReason::ValidationFailure
            }
            _ => FailureReason::RenderFailure,
        }
    }
}

/// A kustomize renderer and its limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kustomize {
    /// The engine.
    pub program: KustomizeProgram,
    /// Time limit of one run; the process group is killed when it passes.
    pub timeout: Duration,
    /// Cap on the engine's standard output.
    pub max_output_bytes: usize,
    /// Whether remote bases, resources and components are allowed. They are fetched by the
    /// engine, so the engine then runs without network isolation.
    pub allow_remote_bases: bool,
    /// Network namespace and rlimits of the engine process.
    pub sandbox: Sandbox,
}

impl Kustomize {
    /// A renderer with the default limits and remote bases refused.
    pub fn new(program: KustomizeProgram) -> Kustomize {
        Kustomize {
            program,
            timeout: DEFAULT_TIMEOUT,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            allow_remote_bases: false,
            sandbox: Sandbox::default(),
        }
    }

    /// The sandbox the engine runs in: without network isolation when remote bases are allowed
    /// (the engine fetches them).
    fn engine_sandbox(&self) -> Sandbox {
        let mut sandbox = self.sandbox;
        if self.allow_remote_bases {
            sandbox.isolation = NetworkIsolation::Off;
        }
        sandbox
    }

    /// Render the kustomization at `source_path` of the sealed `workspace`.
    pub fn render(
        &self,
        workspace: &Workspace,
        source_path: &str,
    ) -> Result<Vec<Rendered>, KustomizeError> {
        let relative = check_source_path(source_path)?;
        let display = display_relative(&relative);
        if !workspace.is_sealed() {
            return Err(KustomizeError::NotSealed);
        }
        let dir = workspace.root().join(&relative);
        if !dir.is_dir() {
            return Err(RenderError::PathMissing { path: source_path.to_owned() }.into());
        }
        let mut scan = Scan::new(workspace.root(), self.allow_remote_bases, None);
        scan.visit_root(&dir)?;
        let output = self.run(workspace, &dir)?;
        parse_output(self.program.engine_name(), &display, &output)
    }

    /// Run the engine on `dir`, returning its standard output.
    fn run(&self, workspace: &Workspace, dir: &Path) -> Result<Vec<u8>, KustomizeError> {
        let engine = self.program.engine_name();
        let not_started = |err: std::io::Error| KustomizeError::EngineNotStarted {
            engine,
            reason: err.kind().to_string(),
        };
        // An empty private home: no kubeconfig, credentials or configuration reach the engine.
        let home = crate::sandbox::temp_dir("ksync-kustomize-home-").map_err(not_started)?;
        let sandbox = self.engine_sandbox();
        let mut command = self.command(dir, home.path());
        sandbox.apply(&mut command);
        let mut child =
            command.spawn().map_err(|err| match (sandbox.isolation, err.raw_os_error()) {
                (NetworkIsolation::Required, Some(n)) if is_namespace_errno(n) => {
                    KustomizeError::IsolationUnavailable {
                        engine,
                        reason: nix::errno::Errno::from_raw(n).desc().to_owned(),
                    }
                }
                _ => not_started(err),
            })?;
        let finished = supervise(&mut child, self.timeout, self.max_output_bytes);
        match finished.outcome {
            Outcome::TimedOut => Err(KustomizeError::TimedOut {
                engine,
                seconds: u64::try_from(self.timeout.as_millis().div_ceil(1000)).unwrap_or(u64::MAX),
            }),
            Outcome::OutputTooLarge => {
                Err(KustomizeError::OutputTooLarge { engine, limit: self.max_output_bytes })
            }
            Outcome::Exited(status) if status.success() => Ok(finished.stdout),
            Outcome::Exited(status) if stopped_by_cpu_limit(status) => {
                Err(KustomizeError::CpuLimit { engine, seconds: sandbox.limits.max_cpu_seconds })
            }
            Outcome::Exited(_) if out_of_memory(&finished.stderr_head) => {
                Err(KustomizeError::MemoryLimit { engine, limit: sandbox.limits.max_memory_bytes })
            }
            Outcome::Exited(status) => {
                let mut message = engine_message(workspace, home.path(), &finished.stderr_tail);
                if message.is_empty() {
                    message = format!("exited with {status} and no message");
                }
                Err(KustomizeError::EngineFailed { engine, message })
            }
        }
    }

    /// The engine's command line and its cleared environment, with `home` as its empty home.
    fn command(&self, dir: &Path, home: &Path) -> Command {
        let path_var = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_CHILD_PATH.into());
        let mut command = Command::new(self.program.path());
        command
            .args(self.program.arguments(dir))
            .env_clear()
            .env("PATH", path_var)
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("KUBECONFIG", home.join("kubeconfig"))
            .env("LANG", "C")
            .current_dir(home)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        command
    }
}

/// The engine's stderr made fit to show: repository-relative paths instead of the workspace's
/// location, `~` for its home, no log headers, secret shapes masked, shortened.
fn engine_message(workspace: &Workspace, home: &Path, stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = workspace.hide_location(&text);
    let text = text.replace(home.to_string_lossy().as_ref(), "~");
    let text = text.lines().map(without_log_header).collect::<Vec<_>>().join("\n");
    truncate(redact_shapes(&text).trim(), MAX_MESSAGE_CHARS)
}

/// Errors `unshare` gives when a namespace cannot be created (not those of a failed `exec`).
fn is_namespace_errno(n: i32) -> bool {
    use nix::errno::Errno;
    [Errno::EPERM, Errno::EINVAL, Errno::ENOSPC, Errno::EUSERS, Errno::ENOSYS]
        .iter()
        .any(|errno| *errno as i32 == n)
}

/// Whether the process died of `SIGXCPU` (or the `SIGKILL` that follows it at the hard limit).
fn stopped_by_cpu_limit(status: ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    matches!(status.signal(), Some(n) if n == Signal::SIGXCPU as i32 || n == Signal::SIGKILL as i32)
}

/// Whether the start of the engine's stderr says it could not get memory (Go's runtime, or a
/// C program's allocator, under `RLIMIT_AS`).
fn out_of_memory(stderr_head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(stderr_head).to_ascii_lowercase();
    ["out of memory", "cannot allocate memory", "failed to reserve", "memory exhausted"]
        .iter()
        .any(|marker| text.contains(marker))
}

/// Copy into the (unsealed) `workspace` what a kustomize render of `source_path` reads: that
/// directory, then every local directory and file its kustomizations name, recursively (the
/// same walk as the check before the engine runs), from the checked-out repository the workspace
/// was made from. Nothing else of the repository is copied, so a big file elsewhere in it fails
/// nobody's render. Refusals (remote entries, entries leaving the repository, refused fields)
/// are returned here already.
pub fn materialise(
    workspace: &mut Workspace,
    source_path: &str,
    allow_remote_bases: bool,
) -> Result<(), KustomizeError> {
    let relative = check_source_path(source_path)?;
    workspace.materialise(&relative)?;
    let root = workspace.root().to_path_buf();
    let dir = root.join(&relative);
    if !dir.is_dir() {
        return Err(RenderError::PathMissing { path: source_path.to_owned() }.into());
    }
    let mut fetch = |path: &Path| workspace.materialise(path);
    let mut scan = Scan::new(&root, allow_remote_bases, Some(&mut fetch));
    scan.visit_root(&dir)
}

/// Check `spec.source.path` for kustomize: repository-relative, no `..`, not starting with `-`.
/// Returns the relative path to join to the workspace root.
pub fn check_source_path(source_path: &str) -> Result<PathBuf, KustomizeError> {
    if source_path.starts_with('-') {
        return Err(KustomizeError::PathLooksLikeFlag { path: source_path.to_owned() });
    }
    let relative = Path::new(source_path);
    let escapes = relative.is_absolute()
        || source_path.contains('\0')
        || relative.components().any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)));
    if escapes {
        return Err(RenderError::PathNotRelative { path: source_path.to_owned() }.into());
    }
    Ok(relative.components().filter(|c| matches!(c, Component::Normal(_))).collect())
}

/// Whether a kustomization entry names something remote: a URL (`://`), a git spec (`git@…`,
/// `git::…`, `gh:…`, `github.com/…`, `gitlab.com/…`, `bitbucket.org/…`), or kustomize's remote
/// syntax (`//` between repository and path, `?ref=`, `?version=`, `?submodules=`, `?timeout=`).
pub fn is_remote_entry(entry: &str) -> bool {
    let lower = entry.trim().to_ascii_lowercase();
    let remote_prefixes = ["git@", "git::", "gh:", "github.com/", "gitlab.com/", "bitbucket.org/"];
    let remote_queries = ["?ref=", "?version=", "?submodules=", "?timeout=", "&ref="];
    lower.contains("://")
        || lower.contains("//")
        || remote_prefixes.iter().any(|prefix| lower.starts_with(prefix))
        || remote_queries.iter().any(|query| lower.contains(query))
}

/// Copies a repository-relative path into the workspace being scanned.
type Fetch<'f> = dyn FnMut(&Path) -> Result<(), RenderError> + 'f;

/// The walk over kustomization files (and the builtin generator and transformer configurations
/// they name) before the engine runs. With `fetch`, every local entry is copied into the
/// workspace before it is looked at ([`materialise`]).
struct Scan<'a, 'f> {
    root: PathBuf,
    allow_remote: bool,
    fetch: Option<&'a mut Fetch<'f>>,
    /// Kustomization directories fully checked (a shared base is read once).
    done: BTreeSet<PathBuf>,
    /// Kustomization directories being checked, outermost first (a cycle returns to one).
    stack: Vec<PathBuf>,
    visited: usize,
}

impl<'a, 'f> Scan<'a, 'f> {
    fn new(root: &Path, allow_remote: bool, fetch: Option<&'a mut Fetch<'f>>) -> Self {
        Scan {
            root: root.to_path_buf(),
            allow_remote,
            fetch,
            done: BTreeSet::new(),
            stack: Vec::new(),
            visited: 0,
        }
    }

    fn display_path(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(relative) if relative.as_os_str().is_empty() => ".".to_owned(),
            Ok(relative) => relative.to_string_lossy().into_owned(),
            Err(_) => path.to_string_lossy().into_owned(),
        }
    }

    fn visit_root(&mut self, dir: &Path) -> Result<(), KustomizeError> {
        let Some(file) = kustomization_file(dir) else {
            return Err(KustomizeError::NoKustomization { path: self.display_path(dir) });
        };
        self.visit(dir, &file, false)
    }

    /// Check the kustomization `file` of directory `dir` and, depth first, every local
    /// kustomization and plugin configuration it refers to. `plugins`: the kustomization was
    /// named by `generators`/`transformers`/`validators`, so its resources are plugin
    /// configurations.
    fn visit(&mut self, dir: &Path, file: &Path, plugins: bool) -> Result<(), KustomizeError> {
        self.visited += 1;
        if self.visited > MAX_KUSTOMIZATIONS {
            return Err(KustomizeError::TooManyKustomizations { limit: MAX_KUSTOMIZATIONS });
        }
        let file_display = self.display_path(file);
        let kustomization = read_kustomization(file, &file_display)?;
        let found = references::kustomization_references(&kustomization);
        if let Some(field) = found.refused.first() {
            return Err(KustomizeError::FieldRefused { file: file_display, field: field.clone() });
        }
        self.stack.push(dir.to_owned());
        for reference in &found.references {
            self.check(dir, &file_display, reference, plugins)?;
        }
        self.stack.pop();
        self.done.insert(dir.to_owned());
        Ok(())
    }

    /// Check one entry of the kustomization (or plugin configuration) `file_display` in `dir`.
    fn check(
        &mut self,
        dir: &Path,
        file_display: &str,
        reference: &Reference,
        plugins: bool,
    ) -> Result<(), KustomizeError> {
        let field = reference.field.as_str();
        let entry = references::entry_path(reference.kind, &reference.entry);
        let refusal = |make: fn(String, String, String) -> KustomizeError| {
            make(file_display.to_owned(), field.to_owned(), truncate(&redact_shapes(entry), 200))
        };
        if reference.inline {
            // Inline content, not a path: a generator or transformer written out in place is
            // a plugin configuration, checked like one in a file.
            if reference.kind == ReferenceKind::PluginConfig {
                self.check_plugin_text(dir, file_display, field, &reference.entry)?;
            }
            return Ok(());
        }
        if is_remote_entry(entry) {
            return match reference.kind {
                ReferenceKind::Base if self.allow_remote => Ok(()),
                ReferenceKind::Base => Err(refusal(|file, field, entry| {
                    KustomizeError::RemoteBaseRefused { file, field, entry }
                })),
                _ => Err(refusal(|file, field, entry| KustomizeError::RemoteReferenceRefused {
                    file,
                    field,
                    entry,
                })),
            };
        }
        let Some(target) = resolve_entry(&self.root, dir, entry) else {
            return Err(refusal(|file, field, entry| KustomizeError::EntryEscapes {
                file,
                field,
                entry,
            }));
        };
        let walks = matches!(reference.kind, ReferenceKind::Base | ReferenceKind::PluginConfig);
        if walks && self.stack.contains(&target) {
            return Err(refusal(|file, field, entry| KustomizeError::KustomizationCycle {
                file,
                field,
                entry,
            }));
        }
        if let Some(fetch) = self.fetch.as_mut() {
            let relative = target.strip_prefix(&self.root).unwrap_or(Path::new("")).to_owned();
            fetch(&relative)?;
        }
        if !walks {
            return Ok(());
        }
        let as_plugin = plugins || reference.kind == ReferenceKind::PluginConfig;
        if target.is_dir() {
            if self.done.contains(&target) {
                return Ok(());
            }
            if let Some(child) = kustomization_file(&target) {
                self.visit(&target, &child, as_plugin)?;
            }
        } else if as_plugin && target.is_file() {
            let display = self.display_path(&target);
            let text = read_bounded(&target, &display)?;
            self.check_plugin_text(dir, &display, field, &text)?;
        }
        Ok(())
    }

    /// Check the plugin configuration documents in `text` (named by `field` of the kustomization
    /// in `dir`): refused kinds, and the files they name, relative to `dir`.
    fn check_plugin_text(
        &mut self,
        dir: &Path,
        file_display: &str,
        field: &str,
        text: &str,
    ) -> Result<(), KustomizeError> {
        // A configuration we cannot read is refused rather than left to the engine: were the
        // two parsers to disagree, the engine would act on entries this check never saw.
        let documents = kuvryn_sync_core::yaml::documents(text)
            .map_err(|err| KustomizeError::Render(crate::yaml::yaml_error(file_display, &err)))?;
        for value in documents {
            let found = references::plugin_references(&value, field);
            if let Some(refused) = found.refused.first() {
                return Err(KustomizeError::FieldRefused {
                    file: file_display.to_owned(),
                    field: refused.clone(),
                });
            }
            for reference in &found.references {
                self.check(dir, file_display, reference, false)?;
            }
        }
        Ok(())
    }
}

/// The kustomization file of `dir`, if any.
fn kustomization_file(dir: &Path) -> Option<PathBuf> {
    KUSTOMIZATION_FILE_NAMES.iter().map(|name| dir.join(name)).find(|path| path.is_file())
}

/// A kustomization or plugin configuration file's text, at most [`MAX_KUSTOMIZATION_BYTES`].
fn read_bounded(file: &Path, display: &str) -> Result<String, KustomizeError> {
    let unreadable = |err: std::io::Error| RenderError::Unreadable {
        path: display.to_owned(),
        reason: err.kind().to_string(),
    };
    let meta = std::fs::metadata(file).map_err(unreadable)?;
    if meta.len() > MAX_KUSTOMIZATION_BYTES {
        return Err(KustomizeError::KustomizationTooLarge {
            file: display.to_owned(),
            limit: MAX_KUSTOMIZATION_BYTES,
        });
    }
    Ok(std::fs::read_to_string(file).map_err(unreadable)?)
}

fn read_kustomization(file: &Path, display: &str) -> Result<Value, KustomizeError> {
    let text = read_bounded(file, display)?;
    kuvryn_sync_core::yaml::document(&text).map_err(|err| match err.exceeded() {
        Some(_) => KustomizeError::Render(crate::yaml::yaml_error(display, &err)),
        None => {
            let (line, column) = err.position();
            KustomizeError::KustomizationSyntax { file: display.to_owned(), line, column }
        }
    })
}

/// Where a local entry of the kustomization in `dir` leads, resolved lexically (the workspace
/// holds no symbolic links); `None` when it is absolute or climbs out of `root`.
fn resolve_entry(root: &Path, dir: &Path, entry: &str) -> Option<PathBuf> {
    let entry = Path::new(entry.trim());
    if entry.is_absolute() {
        return None;
    }
    let mut out = dir.to_path_buf();
    for component in entry.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if out == root {
                    return None;
                }
                out.pop();
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    out.starts_with(root).then_some(out)
}

fn display_relative(relative: &Path) -> String {
    let text = relative.to_string_lossy();
    if text.is_empty() { ".".to_owned() } else { text.into_owned() }
}

/// The first executable file called `name` in the directories of `path_var`.
fn find_executable(name: &str, path_var: Option<&OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path_var?).map(|dir| dir.join(name)).find(|candidate| {
        std::fs::metadata(candidate)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// How a supervised run ended.
#[derive(Debug)]
enum Outcome {
    Exited(ExitStatus),
    TimedOut,
    OutputTooLarge,
}

/// What a supervised run left: how it ended, its (capped) stdout and the end of its stderr.
#[derive(Debug)]
struct Finished {
    outcome: Outcome,
    stdout: Vec<u8>,
    stderr_head: Vec<u8>,
    stderr_tail: Vec<u8>,
}

/// What a pipe reader thread reports once its pipe is closed.
enum Pipe {
    Stdout(Vec<u8>, bool),
    Stderr(Vec<u8>, Vec<u8>),
}

/// Collect the child's output and exit status within `timeout`; kill its process group when the
/// time limit passes or stdout exceeds `max_output`. Every kill happens before the child is
/// reaped, so the group id cannot have been reused by then.
fn supervise(child: &mut Child, timeout: Duration, max_output: usize) -> Finished {
    let group = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    let deadline = Instant::now() + timeout;
    let (events, received) = mpsc::channel();
    if let Some(stdout) = child.stdout.take() {
        let events = events.clone();
        std::thread::spawn(move || {
            let (bytes, overflowed) = read_capped(stdout, max_output);
            let _ = events.send(Pipe::Stdout(bytes, overflowed));
        });
    }
    if let Some(stderr) = child.stderr.take() {
        let events = events.clone();
        std::thread::spawn(move || {
            let (head, tail) = read_head_and_tail(stderr, STDERR_TAIL_BYTES);
            let _ = events.send(Pipe::Stderr(head, tail));
        });
    }
    drop(events);
    let (mut stdout, mut stderr_tail) = (None, None);
    let mut stopped: Option<Outcome> = None;
    // The pipes close when every process of the group has ended (or was killed).
    while stdout.is_none() || stderr_tail.is_none() {
        let wait = match stopped {
            Some(_) => KILL_GRACE,
            None => deadline.saturating_duration_since(Instant::now()),
        };
        match received.recv_timeout(wait) {
            Ok(Pipe::Stdout(bytes, overflowed)) => {
                if overflowed && stopped.is_none() {
                    kill_group(group);
                    stopped = Some(Outcome::OutputTooLarge);
                }
                stdout = Some(bytes);
            }
            Ok(Pipe::Stderr(head, tail)) => stderr_tail = Some((head, tail)),
            Err(mpsc::RecvTimeoutError::Timeout) if stopped.is_none() => {
                kill_group(group);
                stopped = Some(Outcome::TimedOut);
            }
            // The grace period after a kill passed (a process escaped the group and holds a
            // pipe), or every reader is gone.
            Err(_) => break,
        }
    }
    let outcome = match stopped {
        Some(outcome) => {
            let _ = child.wait_timeout(KILL_GRACE);
            outcome
        }
        None => match child.wait_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Some(status)) => Outcome::Exited(status),
            _ => {
                // Still running with its pipes closed: stop it like any other overrun.
                kill_group(group);
                let _ = child.wait_timeout(KILL_GRACE);
                Outcome::TimedOut
            }
        },
    };
    let (stderr_head, stderr_tail) = stderr_tail.unwrap_or_default();
    Finished { outcome, stdout: stdout.unwrap_or_default(), stderr_head, stderr_tail }
}

fn kill_group(group: Pid) {
    // ESRCH (already gone) is the expected outcome for a process that ended on its own.
    let _ = killpg(group, Signal::SIGKILL);
}

/// Read up to `max` bytes; `true` when there was more.
fn read_capped(mut input: impl Read, max: usize) -> (Vec<u8>, bool) {
    let mut bytes = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    let _ = (&mut input).take(limit).read_to_end(&mut bytes);
    if bytes.len() > max {
        bytes.truncate(max);
        return (bytes, true);
    }
    (bytes, false)
}

/// Read everything, keeping the first [`STDERR_HEAD_BYTES`] (where a Go runtime says why it
/// died, before its long stack dump) and the last `keep` bytes.
fn read_head_and_tail(mut input: impl Read, keep: usize) -> (Vec<u8>, Vec<u8>) {
    let mut head = Vec::new();
    let mut tail = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        match input.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = STDERR_HEAD_BYTES.saturating_sub(head.len()).min(n);
                head.extend_from_slice(&buffer[..room]);
                tail.extend_from_slice(&buffer[..n]);
                if tail.len() > 2 * keep {
                    tail.drain(..tail.len() - keep);
                }
            }
        }
    }
    if tail.len() > keep {
        tail.drain(..tail.len() - keep);
    }
    (head, tail)
}

/// A stderr line without the klog header kubectl puts in front of its errors
/// (`E1201 12:31:33.812650   26066 run.go:72] `): time, process id and source line say nothing to
/// the user.
fn without_log_header(line: &str) -> &str {
    let bytes = line.as_bytes();
    let looks_like_header = bytes.len() > 6
        && matches!(bytes[0], b'E' | b'W' | b'I' | b'F')
        && bytes[1..5].iter().all(u8::is_ascii_digit)
        && bytes[5] == b' ';
    match line.find("] ") {
        Some(end) if looks_like_header && end < 80 => &line[end + 2..],
        _ => line,
    }
}

/// The engine's output as objects; `origin` is the source path and the document index.
fn parse_output(
    engine: &'static str,
    source_display: &str,
    output: &[u8],
) -> Result<Vec<Rendered>, KustomizeError> {
    let text = String::from_utf8_lossy(output);
    let documents =
        kuvryn_sync_core::yaml::documents(&text).map_err(|err| match err.exceeded() {
            Some(_) => KustomizeError::Render(crate::yaml::yaml_error(
                &format!("the output of {engine} for {source_display}"),
                &err,
            )),
            None => {
                let (line, column) = err.position();
                KustomizeError::BadOutput { engine, line, column }
            }
        })?;
    let mut objects = Vec::new();
    for (n, value) in documents.into_iter().enumerate() {
        let origin = format!("{source_display}#{n}");
        match value {
            Value::Null => {}
            list if list["kind"] == "List" && list["apiVersion"] == "v1" => {
                let items =
                    list.get("items").and_then(Value::as_array).cloned().unwrap_or_default();
                objects.extend(items.into_iter().enumerate().map(|(i, object)| Rendered {
                    origin: format!("{origin}.items[{i}]"),
                    object,
                }));
            }
            object => objects.push(Rendered { origin, object }),
        }
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_entries_are_recognised() {
        let rows: &[(&str, bool)] = &[
            ("../base", false),
            ("base", false),
            ("./overlays/prod", false),
            ("deployment.yaml", false),
            ("https://github.com/org/repo//deploy?ref=v1", true),
            ("http://example.com/manifest.yaml", true),
            ("ssh://git@example.com/org/repo.git", true),
            ("file:///etc/kustomize", true),
            ("git@github.com:org/repo.git//base", true),
            ("git::https://example.com/org/repo", true),
            ("gh:org/repo/base", true),
            ("github.com/org/repo/base?ref=main", true),
            ("GitHub.com/org/repo", true),
            ("gitlab.com/org/repo/base", true),
            ("bitbucket.org/org/repo", true),
            ("example.com/org/repo//base", true),
            ("example.com/org/repo?ref=v2", true),
            ("example.com/org/repo?version=v2", true),
        ];
        for (entry, remote) in rows {
            assert_eq!(is_remote_entry(entry), *remote, "{entry}");
        }
    }

    #[test]
    fn source_paths_are_checked() {
        let ok: &[(&str, &str)] =
            &[("apps/web", "apps/web"), ("", ""), (".", ""), ("apps/./web/", "apps/web")];
        for (path, expected) in ok {
            assert_eq!(check_source_path(path), Ok(PathBuf::from(expected)), "{path}");
        }
        let flag = |p: &str| KustomizeError::PathLooksLikeFlag { path: p.to_owned() };
        let not_relative =
            |p: &str| KustomizeError::Render(RenderError::PathNotRelative { path: p.to_owned() });
        let refused: &[(&str, KustomizeError)] = &[
            ("-o", flag("-o")),
            ("--enable-exec", flag("--enable-exec")),
            ("/etc", not_relative("/etc")),
            ("../other", not_relative("../other")),
            ("apps/../../x", not_relative("apps/../../x")),
        ];
        for (path, expected) in refused {
            assert_eq!(check_source_path(path).as_ref(), Err(expected), "{path}");
            assert_eq!(expected.reason(), FailureReason::ValidationFailure);
        }
    }

    #[test]
    fn entries_resolve_inside_the_root_only() {
        let root = Path::new("/w/repo");
        let dir = Path::new("/w/repo/apps/web");
        let rows: &[(&str, Option<&str>)] = &[
            ("../base", Some("/w/repo/apps/base")),
            ("./patch.yaml", Some("/w/repo/apps/web/patch.yaml")),
            ("../../shared", Some("/w/repo/shared")),
            ("../../../outside", None),
            ("../../shared/../../x", None),
            ("/etc/passwd", None),
            (".", Some("/w/repo/apps/web")),
        ];
        for (entry, expected) in rows {
            assert_eq!(resolve_entry(root, dir, entry), expected.map(PathBuf::from), "{entry}");
        }
    }

    #[test]
    fn programs_are_detected_from_the_flag_then_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let with_kustomize = dir.path().join("a");
        let with_kubectl = dir.path().join("b");
        for (bin_dir, name) in [(&with_kustomize, "kustomize"), (&with_kubectl, "kubectl")] {
            std::fs::create_dir(bin_dir).expect("mkdir");
            let file = bin_dir.join(name);
            std::fs::write(&file, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let both = std::env::join_paths([&with_kubectl, &with_kustomize]).expect("join");
        let rows: Vec<(Option<PathBuf>, Option<OsString>, KustomizeProgram)> = vec![
            (
                Some("/opt/kustomize".into()),
                Some(both.clone()),
                KustomizeProgram::Kustomize("/opt/kustomize".into()),
            ),
            (
                Some("/opt/kubectl.1.32".into()),
                None,
                KustomizeProgram::Kubectl("/opt/kubectl.1.32".into()),
            ),
            (None, Some(both), KustomizeProgram::Kustomize(with_kustomize.join("kustomize"))),
            (
                None,
                Some(with_kubectl.clone().into_os_string()),
                KustomizeProgram::Kubectl(with_kubectl.join("kubectl")),
            ),
            (None, None, KustomizeProgram::Kubectl("kubectl".into())),
        ];
        for (flag, path_var, expected) in rows {
            assert_eq!(KustomizeProgram::detect_in(flag, path_var.as_deref()), expected);
        }
    }

    #[test]
    fn arguments_put_the_directory_after_the_end_of_flags() {
        let dir = Path::new("/w/repo/apps/web");
        let expect = |sub: &str| -> Vec<OsString> {
            [sub, "--load-restrictor", "LoadRestrictionsRootOnly", "--", "/w/repo/apps/web"]
                .into_iter()
                .map(OsString::from)
                .collect()
        };
        assert_eq!(KustomizeProgram::Kustomize("k".into()).arguments(dir), expect("build"));
        assert_eq!(KustomizeProgram::Kubectl("k".into()).arguments(dir), expect("kustomize"));
    }

    #[test]
    fn output_documents_become_objects_with_their_index() {
        let output = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n---\napiVersion: v1\nkind: List\nitems:\n- kind: Secret\n";
        let objects = parse_output("kustomize build", "apps/web", output).expect("parse");
        let origins: Vec<&str> = objects.iter().map(|o| o.origin.as_str()).collect();
        // The empty document is skipped and not numbered.
        assert_eq!(origins, ["apps/web#0", "apps/web#1.items[0]"]);
        assert_eq!(objects[1].object["kind"], "Secret");
        assert!(matches!(
            parse_output("kustomize build", "x", b"a: [\n"),
            Err(KustomizeError::BadOutput { line: 1..=2, .. })
        ));
    }

    /// A real HTTP server on 127.0.0.1 counting the connections it accepts.
    fn counting_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::Write as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = std::sync::Arc::clone(&accepted);
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fetched\n";
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (port, accepted)
    }

    /// The check before the engine bypassed on purpose (the engine run directly on a
    /// kustomization naming a URL): with isolation the network namespace stops the fetch; the
    /// same run without isolation reaches the server, so the test can fail. This machine runs
    /// the tests as root, where isolation must be available: no skipping.
    #[test]
    fn the_network_namespace_stops_what_the_check_would_miss() {
        let (port, accepted) = counting_server();
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(repo.join("app")).expect("mkdir");
        std::fs::write(
            repo.join("app/kustomization.yaml"),
            format!("resources: [\"http://127.0.0.1:{port}/cm.yaml\"]\n"),
        )
        .expect("write");
        let mut workspace =
            Workspace::copy_of(&repo, crate::yaml::Limits::default()).expect("copy");
        workspace.seal().expect("seal");
        let app = workspace.root().join("app");
        let mut engine = Kustomize::new(KustomizeProgram::detect(None));
        engine.allow_remote_bases = false;

        engine.sandbox.isolation = NetworkIsolation::Required;
        let probe = engine.sandbox.probe(engine.program.path(), &["version", "--client"]);
        assert_eq!(probe, crate::sandbox::IsolationSupport::Isolated, "isolation must work here");
        let err = engine.run(&workspace, &app).expect_err("no network in the namespace");
        assert!(matches!(err, KustomizeError::EngineFailed { .. }), "{err}");
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0, "{err}");

        engine.sandbox.isolation = NetworkIsolation::Auto;
        assert!(engine.run(&workspace, &app).is_err());
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0);

        // The control: without isolation the very same run fetches from the server.
        engine.sandbox.isolation = NetworkIsolation::Off;
        let output = engine.run(&workspace, &app).expect("fetched");
        assert!(String::from_utf8_lossy(&output).contains("fetched"));
        assert!(accepted.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    }

    #[test]
    fn remote_bases_allowed_turn_isolation_off_for_the_engine_only() {
        let mut engine = Kustomize::new(KustomizeProgram::Kubectl("kubectl".into()));
        engine.sandbox.isolation = NetworkIsolation::Required;
        assert_eq!(engine.engine_sandbox().isolation, NetworkIsolation::Required);
        engine.allow_remote_bases = true;
        assert_eq!(engine.engine_sandbox().isolation, NetworkIsolation::Off);
        assert_eq!(engine.engine_sandbox().limits, engine.sandbox.limits);
    }

    #[test]
    fn limit_deaths_are_recognised() {
        use std::os::unix::process::ExitStatusExt;
        let signalled = |signal: Signal| ExitStatus::from_raw(signal as i32);
        let rows: &[(ExitStatus, bool)] = &[
            (signalled(Signal::SIGXCPU), true),
            (signalled(Signal::SIGKILL), true),
            (signalled(Signal::SIGTERM), false),
            (ExitStatus::from_raw(1 << 8), false),
        ];
        for (status, cpu) in rows {
            assert_eq!(stopped_by_cpu_limit(*status), *cpu, "{status}");
        }
        let heads: &[(&str, bool)] = &[
            ("fatal error: failed to reserve page summary memory\n", true),
            ("runtime: out of memory: cannot allocate 4194304-byte block\n", true),
            ("sh: fork: Cannot allocate memory", true),
            ("Error: accumulating resources: missing", false),
            ("", false),
        ];
        for (head, oom) in heads {
            assert_eq!(out_of_memory(head.as_bytes()), *oom, "{head}");
        }
        assert!(is_namespace_errno(nix::errno::Errno::EPERM as i32));
        assert!(!is_namespace_errno(nix::errno::Errno::ENOENT as i32));
    }

    #[test]
    fn log_headers_are_dropped_from_engine_messages() {
        let rows: &[(&str, &str)] = &[
            (
                "E1201 12:31:33.812650   26066 run.go:72] \"command failed\" err=\"x\"",
                "\"command failed\" err=\"x\"",
            ),
            ("W0102 01:02:03.000001 1 a.go:1] careful", "careful"),
            (
                "Error: accumulating resources: [x] missing",
                "Error: accumulating resources: [x] missing",
            ),
            ("E12 short] line", "E12 short] line"),
            ("", ""),
        ];
        for (line, expected) in rows {
            assert_eq!(without_log_header(line), *expected, "{line}");
        }
    }

    #[test]
    fn stdout_is_capped_and_stderr_keeps_its_end() {
        assert_eq!(read_capped(&b"abcdef"[..], 6), (b"abcdef".to_vec(), false));
        assert_eq!(read_capped(&b"abcdefg"[..], 6), (b"abcdef".to_vec(), true));
        let long: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        let (head, tail) = read_head_and_tail(&long[..], 100);
        assert_eq!(tail, long[long.len() - 100..].to_vec());
        assert_eq!(head, long[..STDERR_HEAD_BYTES].to_vec());
        assert_eq!(read_head_and_tail(&b"short"[..], 100), (b"short".to_vec(), b"short".to_vec()));
    }
}
