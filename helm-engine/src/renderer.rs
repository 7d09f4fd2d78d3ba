//! [`HelmRenderer`]: renders a chart in a `ksync-helm-render` child process.
//!
//! The Helm engine embeds a Go runtime that reads its configuration from the environment when it
//! starts and can take its process down, so every render runs in a fresh helper process with an
//! explicit environment (nothing inherited), fresh `HELM_*_HOME` directories, a time limit and an
//! output cap.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use wait_timeout::ChildExt;

use crate::manifests::{RenderedDocument, split_manifests};
use crate::request::{RenderRequest, RenderResponse};
use crate::{HelmError, LIBHELM_ENV};

/// How much of the helper's standard error is kept for error messages.
const STDERR_KEEP: usize = 16 * 1024;

/// The environment and limits of each render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderEnv {
    /// CA bundle the Go runtime trusts (`SSL_CERT_FILE`).
    pub ssl_cert_file: PathBuf,
    /// Wall-clock limit of one render, helper start included.
    pub timeout: Duration,
    /// Largest accepted helper answer in bytes.
    pub max_output_bytes: usize,
}

impl Default for RenderEnv {
    fn default() -> Self {
        Self {
            ssl_cert_file: PathBuf::from("/etc/ssl/certs/ca-certificates.crt"),
            timeout: Duration::from_secs(60),
            max_output_bytes: 32 * 1024 * 1024,
        }
    }
}

/// A successful render: Helm's template path → rendered YAML (NOTES.txt included, CRDs from
/// `crds/` not: Helm installs those separately).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedChart {
    /// Template path (`chart/templates/x.yaml`) → YAML text.
    pub manifests: BTreeMap<String, String>,
}

impl RenderedChart {
    /// Every object, skipping NOTES.txt, partials and empty documents.
    pub fn documents(&self) -> Result<Vec<RenderedDocument>, HelmError> {
        split_manifests(&self.manifests)
    }
}

/// Renders charts with the real Helm engine in a helper process.
#[derive(Debug, Clone)]
pub struct HelmRenderer {
    helper: PathBuf,
    library: PathBuf,
    env: RenderEnv,
    prepare: Option<CommandHook>,
}

/// A change made to the helper's command before it is spawned (the caller's process sandbox:
/// limits, namespaces).
#[derive(Clone)]
pub struct CommandHook(Arc<dyn Fn(&mut Command) + Send + Sync>);

impl std::fmt::Debug for CommandHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CommandHook")
    }
}

impl HelmRenderer {
    /// `helper` is the `ksync-helm-render` binary, `library` the `libhelm_c.so` it loads. Both
    /// must exist; relative paths are made absolute against the current directory.
    pub fn new(
        helper: impl Into<PathBuf>,
        library: impl Into<PathBuf>,
        env: RenderEnv,
    ) -> Result<Self, HelmError> {
        let helper = absolute(helper.into());
        let library = absolute(library.into());
        if !helper.is_file() {
            return Err(HelmError::HelperNotFound(helper));
        }
        if !library.is_file() {
            return Err(HelmError::LibraryNotFound { searched: vec![library] });
        }
        Ok(Self { helper, library, env, prepare: None })
    }

    /// Let `prepare` adjust every helper command before it is spawned.
    pub fn with_command_hook(
        mut self,
        prepare: impl Fn(&mut Command) + Send + Sync + 'static,
    ) -> Self {
        self.prepare = Some(CommandHook(Arc::new(prepare)));
        self
    }

    /// The helper binary.
    pub fn helper(&self) -> &Path {
        &self.helper
    }

    /// The library the helper loads.
    pub fn library(&self) -> &Path {
        &self.library
    }

    /// Renders one chart. Validation errors are returned before any process starts.
    pub fn render(&self, request: &RenderRequest) -> Result<RenderedChart, HelmError> {
        request.values_json()?;
        request.options_json()?;
        let mut request = request.clone();
        request.chart_dir = absolute(request.chart_dir);
        let input =
            serde_json::to_vec(&request).map_err(|e| HelmError::InvalidRequest(e.to_string()))?;

        // Fresh, private HELM_*_HOME per render; removed when `work` drops.
        let work = tempfile::Builder::new().prefix("ksync-helm-").tempdir()?;
        let home = work.path();
        for dir in ["config", "cache", "data"] {
            std::fs::create_dir(home.join(dir))?;
        }

        let mut command = Command::new(&self.helper);
        command
            .env_clear()
            .env("SSL_CERT_FILE", &self.env.ssl_cert_file)
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env("HOME", home)
            .env("TMPDIR", home)
            .env(LIBHELM_ENV, &self.library)
            .current_dir(home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(CommandHook(prepare)) = &self.prepare {
            prepare(&mut command);
        }
        let mut child = command.spawn()?;

        let stdin = child.stdin.take();
        let writer = std::thread::spawn(move || {
            if let Some(mut stdin) = stdin {
                // A helper that dies early closes its end; the exit status tells the story.
                let _ = stdin.write_all(&input);
            }
        });
        let stdout =
            child.stdout.take().map(|s| spawn_capped_reader(s, self.env.max_output_bytes, false));
        let stderr = child.stderr.take().map(|s| spawn_capped_reader(s, STDERR_KEEP, true));

        let status = match child.wait_timeout(self.env.timeout)? {
            Some(status) => status,
            None => {
                // Kill only our own child; reap it so no zombie is left.
                let _ = child.kill();
                let _ = child.wait();
                join_quietly(writer, stdout, stderr);
                return Err(HelmError::Timeout(self.env.timeout));
            }
        };
        let _ = writer.join();
        let stdout = stdout.map(join_reader).unwrap_or_default();
        let stderr = stderr.map(join_reader).unwrap_or_default();
        if stdout.exceeded {
            return Err(HelmError::OutputTooLarge { limit: self.env.max_output_bytes });
        }
        interpret(status, &stdout.bytes, &stderr.bytes)
    }
}

fn absolute(path: PathBuf) -> PathBuf {
    std::path::absolute(&path).unwrap_or(path)
}

#[derive(Debug, Default)]
struct Captured {
    bytes: Vec<u8>,
    exceeded: bool,
}

/// Reads at most `limit` bytes. Past the limit, `drain` keeps reading and discarding (stderr:
/// never block the child); otherwise the pipe is closed, which stops a runaway writer.
fn spawn_capped_reader<R: Read + Send + 'static>(
    reader: R,
    limit: usize,
    drain: bool,
) -> JoinHandle<Captured> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
        let mut limited = reader.take(cap);
        let _ = limited.read_to_end(&mut bytes);
        let exceeded = bytes.len() > limit;
        bytes.truncate(limit);
        if exceeded && drain {
            let _ = std::io::copy(&mut limited.into_inner(), &mut std::io::sink());
        }
        Captured { bytes, exceeded }
    })
}

fn join_reader(handle: JoinHandle<Captured>) -> Captured {
    handle.join().unwrap_or_default()
}

fn join_quietly(
    writer: JoinHandle<()>,
    stdout: Option<JoinHandle<Captured>>,
    stderr: Option<JoinHandle<Captured>>,
) {
    let _ = writer.join();
    if let Some(h) = stdout {
        let _ = h.join();
    }
    if let Some(h) = stderr {
        let _ = h.join();
    }
}

/// Turns the helper's exit status and output into the result.
fn interpret(status: ExitStatus, stdout: &[u8], stderr: &[u8]) -> Result<RenderedChart, HelmError> {
    let response: Option<RenderResponse> = serde_json::from_slice(stdout).ok();
    match response {
        Some(RenderResponse { manifests: Some(manifests), error: None, .. })
            if status.success() =>
        {
            Ok(RenderedChart { manifests })
        }
        Some(RenderResponse { error: Some(message), code, .. }) if !status.success() => {
            Err(match code {
                Some(code) => HelmError::Engine { code, message },
                None => HelmError::Helper(message),
            })
        }
        Some(_) => Err(HelmError::Protocol(format!("answer does not match exit status {status}"))),
        None if status.success() => {
            Err(HelmError::Protocol("the helper's output is not a render response".to_owned()))
        }
        None => Err(HelmError::HelperFailed { status: status.to_string(), stderr: tail(stderr) }),
    }
}

/// The last lines of stderr, after the reason of a Go runtime crash (its `fatal error:` line,
/// which comes before a stack dump longer than the tail); never much more than 2 KiB.
fn tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    let max = 2048;
    if text.len() <= max {
        return text.to_owned();
    }
    let reason = text.lines().find(|line| line.starts_with("fatal error:")).map(|line| {
        let mut end = line.len().min(200);
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        format!("{} ", &line[..end])
    });
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("{}...{}", reason.unwrap_or_default(), &text[start..])
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    fn exit(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn success_needs_manifests_and_exit_zero() {
        let out = br#"{"manifests":{"c/templates/a.yaml":"kind: A\n"}}"#;
        let chart = interpret(exit(0), out, b"").expect("ok");
        assert_eq!(chart.manifests["c/templates/a.yaml"], "kind: A\n");
        assert!(matches!(interpret(exit(1), out, b""), Err(HelmError::Protocol(_))));
    }

    #[test]
    fn engine_errors_keep_their_code() {
        let out = br#"{"error":"template: x: boom","code":-23}"#;
        let err = interpret(exit(1), out, b"").expect_err("error");
        assert!(
            matches!(err, HelmError::Engine { code: -23, ref message } if message == "template: x: boom")
        );
        let err = interpret(exit(2), br#"{"error":"bad env"}"#, b"").expect_err("error");
        assert!(matches!(err, HelmError::Helper(ref m) if m == "bad env"));
    }

    #[test]
    fn crash_reports_status_and_stderr() {
        let err = interpret(ExitStatus::from_raw(6), b"", b"fatal error: unexpected signal\n")
            .expect_err("crash");
        let text = err.to_string();
        assert!(text.contains("fatal error: unexpected signal"), "{text}");
        assert!(matches!(err, HelmError::HelperFailed { .. }));
        assert!(matches!(interpret(exit(0), b"garbage", b""), Err(HelmError::Protocol(_))));
    }

    #[test]
    fn tail_keeps_the_end_on_a_char_boundary() {
        let long = format!("{}é-end", "x".repeat(5000));
        let t = tail(long.as_bytes());
        assert!(t.starts_with("...") && t.ends_with("é-end"));
        assert!(t.len() <= 2048 + 3);
    }

    #[test]
    fn capped_reader_marks_overflow() {
        let data = vec![b'a'; 100];
        let c =
            spawn_capped_reader(std::io::Cursor::new(data.clone()), 10, true).join().expect("join");
        assert!(c.exceeded);
        assert_eq!(c.bytes.len(), 10);
        let c = spawn_capped_reader(std::io::Cursor::new(data), 100, false).join().expect("join");
        assert!(!c.exceeded);
        assert_eq!(c.bytes.len(), 100);
    }

    #[test]
    fn new_checks_that_files_exist() {
        let err =
            HelmRenderer::new("/nonexistent/helper", "/nonexistent/lib.so", RenderEnv::default())
                .expect_err("missing");
        assert!(matches!(err, HelmError::HelperNotFound(_)));
    }
}
