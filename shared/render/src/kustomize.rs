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
//! - **Remote bases** are refused by default: before the engine runs, every kustomization file
//!   reachable from the root through local `resources`, `bases`, `components`, `generators`,
//!   `transformers` and `validators` entries is read, and any entry that is a URL or a remote git
//!   spec ([`is_remote_entry`]) refuses the render, naming the file and the entry. Local entries
//!   that leave the repository are refused too, and a kustomization that includes itself (a cycle)
//!   fails with the entry that closes the loop. At most [`MAX_KUSTOMIZATIONS`] files are visited.
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
/// Kustomization fields whose entries may name other kustomizations (local or remote).
pub const REFERENCE_FIELDS: [&str; 6] =
    ["resources", "bases", "components", "generators", "transformers", "validators"];
/// How much of the end of the engine's stderr is kept for the error message.
const STDERR_TAIL_BYTES: usize = 4096;
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
    /// The failure reason for conditions and status: unsafe or refused Git content is
    /// `ValidationFailure`, everything else `RenderFailure`.
    pub fn reason(&self) -> FailureReason {
        match self {
            KustomizeError::Render(err) => err.reason(),
            KustomizeError::PathLooksLikeFlag { .. }
            | KustomizeError::RemoteBaseRefused { .. }
            | KustomizeError::EntryEscapes { .. } => FailureReason::ValidationFailure,
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
    /// Whether remote bases, resources and components are allowed.
    pub allow_remote_bases: bool,
}

impl Kustomize {
    /// A renderer with the default limits and remote bases refused.
    pub fn new(program: KustomizeProgram) -> Kustomize {
        Kustomize {
            program,
            timeout: DEFAULT_TIMEOUT,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            allow_remote_bases: false,
        }
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
        let mut scan = Scan::new(workspace, self.allow_remote_bases);
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
        let home = tempfile::Builder::new()
            .prefix("ksync-kustomize-home-")
            .tempdir()
            .map_err(not_started)?;
        let mut child = self.command(dir, home.path()).spawn().map_err(not_started)?;
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

/// The walk over kustomization files before the engine runs.
struct Scan<'a> {
    workspace: &'a Workspace,
    allow_remote: bool,
    /// Kustomization directories fully checked (a shared base is read once).
    done: BTreeSet<PathBuf>,
    /// Kustomization directories being checked, outermost first (a cycle returns to one).
    stack: Vec<PathBuf>,
    visited: usize,
}

impl<'a> Scan<'a> {
    fn new(workspace: &'a Workspace, allow_remote: bool) -> Self {
        Scan { workspace, allow_remote, done: BTreeSet::new(), stack: Vec::new(), visited: 0 }
    }

    fn visit_root(&mut self, dir: &Path) -> Result<(), KustomizeError> {
        let Some(file) = kustomization_file(dir) else {
            return Err(KustomizeError::NoKustomization { path: self.workspace.display_path(dir) });
        };
        self.visit(dir, &file)
    }

    /// Check the kustomization `file` of directory `dir` and, depth first, every local
    /// kustomization it refers to.
    fn visit(&mut self, dir: &Path, file: &Path) -> Result<(), KustomizeError> {
        self.visited += 1;
        if self.visited > MAX_KUSTOMIZATIONS {
            return Err(KustomizeError::TooManyKustomizations { limit: MAX_KUSTOMIZATIONS });
        }
        let file_display = self.workspace.display_path(file);
        let kustomization = read_kustomization(file, &file_display)?;
        self.stack.push(dir.to_owned());
        for (field, entry) in reference_entries(&kustomization) {
            let refusal = |make: fn(String, String, String) -> KustomizeError| {
                make(file_display.clone(), field.to_owned(), truncate(&redact_shapes(entry), 200))
            };
            if is_remote_entry(entry) {
                if self.allow_remote {
                    continue;
                }
                return Err(refusal(|file, field, entry| KustomizeError::RemoteBaseRefused {
                    file,
                    field,
                    entry,
                }));
            }
            let Some(target) = resolve_entry(self.workspace.root(), dir, entry) else {
                return Err(refusal(|file, field, entry| KustomizeError::EntryEscapes {
                    file,
                    field,
                    entry,
                }));
            };
            if self.stack.contains(&target) {
                return Err(refusal(|file, field, entry| KustomizeError::KustomizationCycle {
                    file,
                    field,
                    entry,
                }));
            }
            if self.done.contains(&target) || !target.is_dir() {
                continue;
            }
            if let Some(child) = kustomization_file(&target) {
                self.visit(&target, &child)?;
            }
        }
        self.stack.pop();
        self.done.insert(dir.to_owned());
        Ok(())
    }
}

/// The kustomization file of `dir`, if any.
fn kustomization_file(dir: &Path) -> Option<PathBuf> {
    KUSTOMIZATION_FILE_NAMES.iter().map(|name| dir.join(name)).find(|path| path.is_file())
}

fn read_kustomization(file: &Path, display: &str) -> Result<Value, KustomizeError> {
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
    let text = std::fs::read_to_string(file).map_err(unreadable)?;
    kuvryn_sync_core::yaml::document(&text).map_err(|err| match err.exceeded() {
        Some(_) => KustomizeError::Render(crate::yaml::yaml_error(display, &err)),
        None => {
            let (line, column) = err.position();
            KustomizeError::KustomizationSyntax { file: display.to_owned(), line, column }
        }
    })
}

/// The string entries of the fields that may refer to other kustomizations, as (field, entry).
/// Multi-line entries are inline configurations (a generator or transformer written out in
/// place), not references, and are left to the engine.
fn reference_entries(kustomization: &Value) -> Vec<(&'static str, &str)> {
    REFERENCE_FIELDS
        .iter()
        .filter_map(|field| Some((*field, kustomization.get(field)?.as_array()?)))
        .flat_map(|(field, entries)| {
            entries
                .iter()
                .filter_map(Value::as_str)
                .filter(|entry| !entry.trim().contains('\n'))
                .map(move |entry| (field, entry))
        })
        .collect()
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
    stderr_tail: Vec<u8>,
}

/// What a pipe reader thread reports once its pipe is closed.
enum Pipe {
    Stdout(Vec<u8>, bool),
    Stderr(Vec<u8>),
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
            let _ = events.send(Pipe::Stderr(read_tail(stderr, STDERR_TAIL_BYTES)));
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
            Ok(Pipe::Stderr(bytes)) => stderr_tail = Some(bytes),
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
    Finished {
        outcome,
        stdout: stdout.unwrap_or_default(),
        stderr_tail: stderr_tail.unwrap_or_default(),
    }
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

/// Read everything, keeping the last `keep` bytes.
fn read_tail(mut input: impl Read, keep: usize) -> Vec<u8> {
    let mut tail = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        match input.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
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
    tail
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

    #[test]
    fn references_are_the_single_line_entries_of_the_reference_fields() {
        let kustomization: Value = kuvryn_sync_core::yaml::document(
            "resources: [a.yaml, ../base]\nbases: [old]\ncomponents: [c]\nnamePrefix: x-\n\
             generators:\n- gen\n- |\n  apiVersion: builtin\n  kind: ConfigMapGenerator\n  \
             metadata: {name: https://not-a-base}\n\
             transformers: [t]\nvalidators: [v]\nconfigMapGenerator: [{name: cm}]\n",
        )
        .expect("yaml");
        assert_eq!(
            reference_entries(&kustomization),
            [
                ("resources", "a.yaml"),
                ("resources", "../base"),
                ("bases", "old"),
                ("components", "c"),
                ("generators", "gen"),
                ("transformers", "t"),
                ("validators", "v"),
            ]
        );
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
        assert_eq!(read_tail(&long[..], 100), long[long.len() - 100..].to_vec());
        assert_eq!(read_tail(&b"short"[..], 100), b"short".to_vec());
    }
}
