//! Image write-back: clone one branch into a fresh private directory, let a caller edit the work
//! tree, commit the change as the configured author and push it, retrying on the new head when
//! the branch moved in between. gix cannot push (docs/architecture.md#dependencies), so this runs
//! the `git` CLI, one command at a time, each bounded by [`PushRequest::timeout`].
//!
//! - **Flow** ([`push_update`]): `git clone --depth=1 --single-branch --branch=<branch>`, then
//!   `edit(work tree)`: `None` (or no change in the tree) is [`PushOutcome::UpToDate`]; otherwise
//!   `git add --all`, `git commit` as `authorName <authorEmail>` (author and committer) with the
//!   message `edit` returned, and `git push origin HEAD:refs/heads/<branch>`. A push refused
//!   because the branch moved (`fetch first`, non-fast-forward, a lost ref lock) fetches the new
//!   head, resets the tree to it, runs `edit` again and pushes again, at most
//!   [`PushRequest::max_attempts`] times; their commit stays, ours lands on top.
//! - **Flags**: every user string goes after `--` or inside an `--option=value`; branch names are
//!   checked like revisions (no leading `-`, no refspec syntax), URLs by
//!   [`GitUrl::parse`](kuvryn_sync_core::url::GitUrl::parse) (no paths, `file://`, `ext::` or
//!   leading `-`), and only the URL's own transport is allowed (`protocol.allow=never` plus one
//!   `protocol.<scheme>.allow=always`).
//! - **Environment**: the child starts from an empty environment: `PATH`, a private `HOME`,
//!   `TMPDIR`, `GIT_CONFIG_NOSYSTEM=1`, `GIT_CONFIG_GLOBAL=/dev/null`, `GIT_TERMINAL_PROMPT=0`,
//!   `LC_ALL=C`, and `SSL_CERT_FILE`/`SSL_CERT_DIR` passed through; so no `GIT_DIR`,
//!   `GIT_SSH_COMMAND`, askpass or user configuration applies. Settings go through
//!   `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`: no hooks
//!   (`core.hooksPath=/dev/null`), no redirects (`http.followRedirects=false`), no signing, no
//!   background maintenance, a low-speed abort.
//! - **Credentials** never appear in argv, in a URL or on disk: https basic auth is a credential
//!   helper configured only for the remote's scheme, host and port that prints the user name and
//!   password from two variables of the child's environment; ssh runs through the same strict
//!   wrapper as fetches (temporary 0600 key, pinned `known_hosts`, batch mode, cleared
//!   environment); `git://` is anonymous. Extra CAs for https become `GIT_SSL_CAINFO`.
//! - **Errors** ([`PushError`]) name the field, the rule or the failing step; git's output in
//!   them went through the credentials' [`Redactor`] and
//!   [`redact_shapes`](kuvryn_sync_core::redact::redact_shapes).
//!
//! The work tree handed to `edit` is a real checkout: symlinks are symlinks, so an editor must
//! not follow one that leaves the tree (see [`crate::tree`]). Call from a blocking thread.

use std::{
    ffi::OsString,
    fs,
    io::{Read, Seek},
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
    time::Duration,
};

use kuvryn_sync_api::FailureReason;
use kuvryn_sync_core::redact::{Redactor, redact_shapes, truncate};
use kuvryn_sync_core::url::{GitUrl, GitUrlKind};
use secrecy::ExposeSecret;
use wait_timeout::ChildExt;

use super::{GitAuth, is_full_commit, ssh::SshCommand, validate_revision};

/// Message used when `edit` returns an empty one.
const DEFAULT_MESSAGE: &str = "Update images";
/// Most bytes of a git command's output kept.
const MAX_OUTPUT: u64 = 64 * 1024;
/// Longest author name or email.
const MAX_AUTHOR_LEN: usize = 256;
/// The credential helper: prints the login from the child's environment for `get` requests.
const CREDENTIAL_HELPER: &str = "!f() { test \"$1\" = get || exit 0; printf 'username=%s\\npassword=%s\\n' \"$KSYNC_PUSH_USERNAME\" \"$KSYNC_PUSH_PASSWORD\"; }; f";

/// One write-back: where to push, as whom.
#[derive(Clone, Debug)]
pub struct PushRequest {
    /// The remote URL (`spec.git.url` of the Repository).
    pub url: String,
    /// The branch to check out and push to (`spec.imageUpdate.branch`).
    pub branch: String,
    /// Push credentials (`spec.imageUpdate.secretRef`), matching the URL's form.
    pub credentials: Option<GitAuth>,
    /// Extra PEM CA certificates for https (added to a `ca.crt` of basic credentials).
    pub ca_certs_pem: Option<String>,
    /// Author and committer name (`spec.imageUpdate.authorName`).
    pub author_name: String,
    /// Author and committer email (`spec.imageUpdate.authorEmail`).
    pub author_email: String,
    /// Upper bound for each git command.
    pub timeout: Duration,
    /// How many pushes to try when the branch keeps moving (at least 1).
    pub max_attempts: u32,
    /// Where the private scratch directory is made; the system temporary directory when `None`.
    pub scratch_dir: Option<PathBuf>,
}

impl PushRequest {
    /// A request without credentials or extra CAs, with a 60 s timeout per command and 3 attempts.
    pub fn new(
        url: impl Into<String>,
        branch: impl Into<String>,
        author_name: impl Into<String>,
        author_email: impl Into<String>,
    ) -> Self {
        Self {
            url: url.into(),
            branch: branch.into(),
            credentials: None,
            ca_certs_pem: None,
            author_name: author_name.into(),
            author_email: author_email.into(),
            timeout: Duration::from_secs(60),
            max_attempts: 3,
            scratch_dir: None,
        }
    }
}

/// What a write-back did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PushOutcome {
    /// Nothing needed changing: no commit, no push.
    UpToDate,
    /// One commit was pushed to the branch.
    Committed {
        /// The full id of the pushed commit.
        commit: String,
    },
}

/// Why a write-back failed; every message is redacted and safe to show.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// A field of the request breaks a rule; nothing was run.
    #[error("{field} is invalid: {rule}")]
    InvalidRequest {
        /// The field (`spec.git.url`, `spec.imageUpdate.branch`, …).
        field: &'static str,
        /// The rule and what to do.
        rule: String,
    },
    /// The remote refused the credentials, needed some, or its host key did not match.
    #[error("authentication failed for {url} while {step}: {message}")]
    Authentication {
        /// The remote, redacted.
        url: String,
        /// `cloning`, `pushing`, …
        step: &'static str,
        /// Git's words, redacted.
        message: String,
    },
    /// The branch does not exist on the remote.
    #[error(
        "branch {branch:?} not found in {url}; create it first or set spec.imageUpdate.branch to an existing branch"
    )]
    BranchNotFound {
        /// The branch.
        branch: String,
        /// The remote, redacted.
        url: String,
    },
    /// The branch kept moving: every attempt's push was refused.
    #[error(
        "pushing to branch {branch:?} of {url} was refused {attempts} times because the branch kept moving: {message}"
    )]
    Rejected {
        /// The branch.
        branch: String,
        /// The remote, redacted.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// Git's words for the last refusal, redacted.
        message: String,
    },
    /// A git command did not finish in time and was killed.
    #[error("git timed out after {seconds}s while {step} {url}")]
    Timeout {
        /// The remote, redacted.
        url: String,
        /// `cloning`, `pushing`, …
        step: &'static str,
        /// The timeout.
        seconds: u64,
    },
    /// Any other git failure.
    #[error("git failed while {step} {url}: {message}")]
    Git {
        /// The remote, redacted.
        url: String,
        /// `cloning`, `pushing`, …
        step: &'static str,
        /// Git's words, redacted.
        message: String,
    },
    /// The caller's edit failed; nothing was pushed.
    #[error("editing the checkout failed: {message}")]
    Edit {
        /// The edit's error, redacted.
        message: String,
    },
    /// The scratch directory or a child process could not be set up.
    #[error("preparing the write-back failed: {message}")]
    Local {
        /// What went wrong.
        message: String,
    },
}

impl PushError {
    /// The failure reason: refused credentials are `AuthenticationFailure`, a request that
    /// breaks a rule `ValidationFailure`, the rest `SourceFailure`.
    pub fn reason(&self) -> FailureReason {
        match self {
            PushError::Authentication { .. } => FailureReason::AuthenticationFailure,
            PushError::InvalidRequest { .. } => FailureReason::ValidationFailure,
            _ => FailureReason::SourceFailure,
        }
    }
}

/// Clone `request.branch`, run `edit` on the work tree, and commit and push what it changed
/// (see the module docs). `edit` returns the commit message, or `None` when nothing needs to
/// change; it may run more than once when the branch moves under us, each time on a fresh tree
/// of the new head.
pub fn push_update<E: std::fmt::Display>(
    request: &PushRequest,
    mut edit: impl FnMut(&Path) -> Result<Option<String>, E>,
) -> Result<PushOutcome, PushError> {
    let url = validate(request)?;
    let redactor = request.credentials.as_ref().map(GitAuth::redactor).unwrap_or_default();
    let git = Git::prepare(request, &url, redactor)?;
    let work = git.scratch.path().join("work");
    let branch = request.branch.as_str();
    let remote_ref = format!("refs/remotes/origin/{branch}");

    let cloned = git.run(
        git.scratch.path(),
        "cloning",
        &[
            "clone".into(),
            "--quiet".into(),
            "--no-tags".into(),
            "--single-branch".into(),
            "--depth=1".into(),
            "--no-recurse-submodules".into(),
            format!("--branch={branch}").into(),
            "--".into(),
            url.original.clone().into(),
            work.clone().into(),
        ],
    )?;
    if !cloned.status.success() {
        return Err(git.failure("cloning", &cloned));
    }
    let verify = git.run(
        &work,
        "cloning",
        &[
            "rev-parse".into(),
            "--verify".into(),
            "--quiet".into(),
            format!("{remote_ref}^{{commit}}").into(),
        ],
    )?;
    if !verify.status.success() {
        return Err(PushError::BranchNotFound {
            branch: branch.to_owned(),
            url: git.shown_url.clone(),
        });
    }

    let attempts = request.max_attempts.max(1);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let message = match edit(&work) {
            Ok(Some(message)) => message,
            Ok(None) => return Ok(PushOutcome::UpToDate),
            Err(err) => {
                return Err(PushError::Edit { message: git.redact(&err.to_string()) });
            }
        };
        git.ok(&work, "committing", &["add".into(), "--all".into()])?;
        let staged =
            git.run(&work, "committing", &["diff".into(), "--cached".into(), "--quiet".into()])?;
        match staged.status.code() {
            Some(0) => return Ok(PushOutcome::UpToDate),
            Some(1) => {}
            _ => return Err(git.failure("committing", &staged)),
        }
        let message_file = git.scratch.path().join("message");
        let message = if message.trim().is_empty() { DEFAULT_MESSAGE } else { message.as_str() };
        fs::write(&message_file, message).map_err(|e| local("writing the commit message", &e))?;
        let mut commit_file = OsString::from("--file=");
        commit_file.push(&message_file);
        git.ok(
            &work,
            "committing",
            &[
                "commit".into(),
                "--quiet".into(),
                "--no-verify".into(),
                "--no-gpg-sign".into(),
                "--cleanup=whitespace".into(),
                commit_file,
            ],
        )?;
        let commit = git.ok(&work, "committing", &["rev-parse".into(), "HEAD".into()])?;
        let commit = commit.stdout.trim().to_owned();
        if !is_full_commit(&commit) {
            return Err(PushError::Local { message: "git did not report the new commit".into() });
        }

        let pushed = git.run(
            &work,
            "pushing",
            &[
                "push".into(),
                "--porcelain".into(),
                "--no-verify".into(),
                "--".into(),
                "origin".into(),
                format!("HEAD:refs/heads/{branch}").into(),
            ],
        )?;
        if pushed.status.success() {
            return Ok(PushOutcome::Committed { commit });
        }
        if !branch_moved(&pushed) {
            return Err(git.failure("pushing", &pushed));
        }
        if attempt >= attempts {
            return Err(PushError::Rejected {
                branch: branch.to_owned(),
                url: git.shown_url.clone(),
                attempts: attempt,
                message: git.summary(&pushed),
            });
        }
        // The branch moved: start again from its new head.
        let fetched = git.run(
            &work,
            "fetching the moved branch",
            &[
                "fetch".into(),
                "--quiet".into(),
                "--no-tags".into(),
                "--depth=1".into(),
                "--".into(),
                "origin".into(),
                format!("+refs/heads/{branch}:{remote_ref}").into(),
            ],
        )?;
        if !fetched.status.success() {
            return Err(git.failure("fetching the moved branch", &fetched));
        }
        git.ok(
            &work,
            "resetting to the moved branch",
            &[
                "reset".into(),
                "--quiet".into(),
                "--hard".into(),
                remote_ref.clone().into(),
                "--".into(),
            ],
        )?;
        git.ok(
            &work,
            "resetting to the moved branch",
            &["clean".into(), "-q".into(), "-f".into(), "-f".into(), "-d".into(), "-x".into()],
        )?;
    }
}

/// Check every field before anything runs; returns the parsed URL.
fn validate(request: &PushRequest) -> Result<GitUrl, PushError> {
    let url = GitUrl::parse(&request.url).map_err(|e| PushError::InvalidRequest {
        field: "spec.git.url",
        rule: redact_shapes(&e.to_string()),
    })?;
    let branch = &request.branch;
    let invalid_branch =
        |rule: String| PushError::InvalidRequest { field: "spec.imageUpdate.branch", rule };
    validate_revision(branch, &Redactor::new()).map_err(|e| invalid_branch(e.to_string()))?;
    if branch == "HEAD" || branch.starts_with("refs/") || is_full_commit(branch) {
        return Err(invalid_branch(format!(
            "{branch:?} is not a branch name; give the short name such as main"
        )));
    }
    for (field, value) in [
        ("spec.imageUpdate.authorName", &request.author_name),
        ("spec.imageUpdate.authorEmail", &request.author_email),
    ] {
        let rule = if value.trim().is_empty() {
            Some("it is empty".to_owned())
        } else if value.chars().count() > MAX_AUTHOR_LEN {
            Some(format!("it is longer than {MAX_AUTHOR_LEN} characters"))
        } else if value.chars().any(|c| c.is_control() || c == '<' || c == '>') {
            Some("it must not contain '<', '>' or control characters".to_owned())
        } else if field.ends_with("Email") && value.chars().any(char::is_whitespace) {
            Some("it must not contain spaces".to_owned())
        } else {
            None
        };
        if let Some(rule) = rule {
            return Err(PushError::InvalidRequest { field, rule });
        }
    }
    let mismatch = |rule: &str| PushError::InvalidRequest {
        field: "spec.imageUpdate.secretRef",
        rule: rule.to_owned(),
    };
    match (&request.credentials, url.kind) {
        (Some(_), GitUrlKind::Git) => {
            return Err(mismatch(
                "git:// has no authentication; remove the credentials or use https or ssh",
            ));
        }
        (Some(GitAuth::Basic(_)), kind) if kind.is_ssh() => {
            return Err(mismatch(
                "basic credentials cannot be used with an ssh URL; give an ssh key",
            ));
        }
        (Some(GitAuth::Ssh(_)), kind) if kind.is_http() => {
            return Err(mismatch(
                "an ssh key cannot be used with an https URL; give a username and password",
            ));
        }
        (Some(GitAuth::Basic(basic)), _)
            if basic.username.chars().any(char::is_control)
                || basic.password.expose_secret().chars().any(|c| c == '\n' || c == '\0') =>
        {
            return Err(mismatch("the username or password holds a line break or NUL"));
        }
        _ => {}
    }
    Ok(url)
}

/// What one git command printed.
struct Output {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// The prepared environment for every git command of one write-back.
struct Git {
    scratch: tempfile::TempDir,
    env: Vec<(OsString, OsString)>,
    timeout: Duration,
    redactor: Redactor,
    shown_url: String,
    branch: String,
    ssh: Option<SshCommand>,
}

impl Git {
    fn prepare(request: &PushRequest, url: &GitUrl, redactor: Redactor) -> Result<Self, PushError> {
        let mut builder = tempfile::Builder::new();
        builder.prefix("ksync-push-");
        let scratch = match &request.scratch_dir {
            Some(dir) => builder.tempdir_in(dir),
            None => builder.tempdir(),
        }
        .map_err(|e| local("creating the scratch directory", &e))?;
        fs::set_permissions(scratch.path(), fs::Permissions::from_mode(0o700))
            .map_err(|e| local("securing the scratch directory", &e))?;
        let home = scratch.path().join("home");
        let tmp = scratch.path().join("tmp");
        for dir in [&home, &tmp] {
            fs::create_dir(dir).map_err(|e| local("creating the scratch directory", &e))?;
        }

        let mut env: Vec<(OsString, OsString)> = Vec::new();
        let mut set = |key: &str, value: OsString| env.push((key.into(), value));
        set(
            "PATH",
            std::env::var_os("PATH")
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
        );
        set("HOME", home.clone().into());
        set("XDG_CONFIG_HOME", home.join(".config").into());
        set("TMPDIR", tmp.into());
        set("LC_ALL", "C".into());
        set("LANG", "C".into());
        set("GIT_TERMINAL_PROMPT", "0".into());
        set("GIT_CONFIG_NOSYSTEM", "1".into());
        set("GIT_CONFIG_GLOBAL", "/dev/null".into());
        set("GIT_ATTR_NOSYSTEM", "1".into());
        set("GIT_AUTHOR_NAME", request.author_name.clone().into());
        set("GIT_AUTHOR_EMAIL", request.author_email.clone().into());
        set("GIT_COMMITTER_NAME", request.author_name.clone().into());
        set("GIT_COMMITTER_EMAIL", request.author_email.clone().into());
        for inherited in ["SSL_CERT_FILE", "SSL_CERT_DIR"] {
            if let Some(value) = std::env::var_os(inherited) {
                set(inherited, value);
            }
        }

        let scheme = url.kind.scheme();
        let mut config: Vec<(String, String)> = vec![
            ("protocol.allow".into(), "never".into()),
            (format!("protocol.{scheme}.allow"), "always".into()),
            ("core.hooksPath".into(), "/dev/null".into()),
            ("core.fsmonitor".into(), "false".into()),
            ("credential.helper".into(), String::new()),
            ("transfer.credentialsInUrl".into(), "die".into()),
            ("http.followRedirects".into(), "false".into()),
            ("http.lowSpeedLimit".into(), "1".into()),
            ("http.lowSpeedTime".into(), request.timeout.as_secs().clamp(1, 3600).to_string()),
            ("commit.gpgSign".into(), "false".into()),
            ("gc.auto".into(), "0".into()),
            ("maintenance.auto".into(), "false".into()),
            ("submodule.recurse".into(), "false".into()),
            ("fetch.recurseSubmodules".into(), "false".into()),
            ("init.defaultBranch".into(), "main".into()),
            ("advice.detachedHead".into(), "false".into()),
        ];
        let mut ssh = None;
        match &request.credentials {
            Some(GitAuth::Basic(basic)) => {
                let host = url.credential_host();
                let authority = if host.port == url.kind.default_port() {
                    host.host.clone()
                } else {
                    format!("{}:{}", host.host, host.port)
                };
                config.push((
                    format!("credential.{}://{authority}.helper", host.scheme),
                    CREDENTIAL_HELPER.into(),
                ));
                set("KSYNC_PUSH_USERNAME", basic.username.clone().into());
                set("KSYNC_PUSH_PASSWORD", basic.password.expose_secret().into());
            }
            Some(GitAuth::Ssh(key)) => {
                let command =
                    SshCommand::prepare(&key.private_key, &key.known_hosts, request.timeout)
                        .map_err(|e| local("preparing ssh", &e))?;
                set("GIT_SSH", command.program().into());
                set("GIT_SSH_VARIANT", "ssh".into());
                ssh = Some(command);
            }
            None => {}
        }
        if url.kind.is_http() {
            let mut pem = String::new();
            if let Some(GitAuth::Basic(basic)) = &request.credentials
                && let Some(bundle) = &basic.ca_bundle
            {
                pem.push_str(bundle);
                pem.push('\n');
            }
            if let Some(extra) = &request.ca_certs_pem {
                pem.push_str(extra);
                pem.push('\n');
            }
            if !pem.trim().is_empty() {
                let ca_file = scratch.path().join("ca.pem");
                fs::write(&ca_file, pem).map_err(|e| local("writing the CA file", &e))?;
                set("GIT_SSL_CAINFO", ca_file.into());
            }
        }
        set("GIT_CONFIG_COUNT", config.len().to_string().into());
        for (i, (key, value)) in config.into_iter().enumerate() {
            set(&format!("GIT_CONFIG_KEY_{i}"), key.into());
            set(&format!("GIT_CONFIG_VALUE_{i}"), value.into());
        }

        let shown_url = redact_shapes(&redactor.redact(&url.original));
        Ok(Self {
            scratch,
            env,
            timeout: request.timeout,
            redactor,
            shown_url,
            branch: request.branch.clone(),
            ssh,
        })
    }

    /// Run `git args` in `dir`, killing it at the timeout.
    fn run(&self, dir: &Path, step: &'static str, args: &[OsString]) -> Result<Output, PushError> {
        let mut stdout = tempfile::tempfile_in(self.scratch.path())
            .map_err(|e| local("capturing git output", &e))?;
        let mut stderr = tempfile::tempfile_in(self.scratch.path())
            .map_err(|e| local("capturing git output", &e))?;
        let mut command = Command::new("git");
        command
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(stdout.try_clone().map_err(|e| local("capturing git output", &e))?)
            .stderr(stderr.try_clone().map_err(|e| local("capturing git output", &e))?);
        let mut child = command.spawn().map_err(|e| local("starting git", &e))?;
        let status =
            match child.wait_timeout(self.timeout).map_err(|e| local("waiting for git", &e))? {
                Some(status) => status,
                None => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(PushError::Timeout {
                        url: self.shown_url.clone(),
                        step,
                        seconds: self.timeout.as_secs(),
                    });
                }
            };
        let read = |file: &mut fs::File| -> String {
            let mut bytes = Vec::new();
            let _ = file.rewind();
            let _ = file.take(MAX_OUTPUT).read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        };
        Ok(Output { status, stdout: read(&mut stdout), stderr: read(&mut stderr) })
    }

    /// Run and require success.
    fn ok(&self, dir: &Path, step: &'static str, args: &[OsString]) -> Result<Output, PushError> {
        let output = self.run(dir, step, args)?;
        if output.status.success() { Ok(output) } else { Err(self.failure(step, &output)) }
    }

    fn redact(&self, text: &str) -> String {
        truncate(&redact_shapes(&self.redactor.redact(text)), 600)
    }

    /// The last meaningful lines git (and ssh) printed, redacted.
    fn summary(&self, output: &Output) -> String {
        let text = format!("{}\n{}", output.stderr, output.stdout);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| {
                !l.is_empty() && !l.starts_with("hint:") && *l != "Done" && !l.starts_with("To ")
            })
            .collect();
        let mut summary = lines[lines.len().saturating_sub(3)..].join("; ");
        if let Some(ssh) = &self.ssh {
            let ssh_said = ssh.stderr();
            if !ssh_said.is_empty() && !summary.contains(&ssh_said) {
                summary.push_str("; ssh: ");
                summary.push_str(&ssh_said);
            }
        }
        if summary.is_empty() {
            summary = format!("exit status {}", output.status.code().unwrap_or(-1));
        }
        self.redact(&summary)
    }

    fn failure(&self, step: &'static str, output: &Output) -> PushError {
        let message = self.summary(output);
        let ssh_said = self.ssh.as_ref().map(SshCommand::stderr).unwrap_or_default();
        let lower =
            format!("{}\n{}\n{ssh_said}", output.stderr, output.stdout).to_ascii_lowercase();
        let auth = [
            "authentication failed",
            "could not read username",
            "could not read password",
            "permission denied",
            "host key verification failed",
            "remote host identification has changed",
            "no matching host key",
            "returned error: 401",
            "returned error: 403",
            "access denied",
        ];
        if auth.iter().any(|needle| lower.contains(needle)) {
            return PushError::Authentication { url: self.shown_url.clone(), step, message };
        }
        if (lower.contains("remote branch") && lower.contains("not found"))
            || lower.contains("couldn't find remote ref")
        {
            return PushError::BranchNotFound {
                branch: self.branch.clone(),
                url: self.shown_url.clone(),
            };
        }
        PushError::Git { url: self.shown_url.clone(), step, message }
    }
}

/// Whether a failed push was refused because the branch moved under us.
fn branch_moved(output: &Output) -> bool {
    let text = format!("{}\n{}", output.stdout, output.stderr).to_ascii_lowercase();
    [
        "(fetch first)",
        "(non-fast-forward)",
        "(stale info)",
        "cannot lock ref",
        "failed to update ref",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

fn local(what: &str, error: &std::io::Error) -> PushError {
    PushError::Local { message: format!("{what}: {}", error.kind()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kuvryn_sync_core::credentials::{BasicAuth, SshAuth};
    use secrecy::SecretString;

    fn request(url: &str, branch: &str) -> PushRequest {
        PushRequest::new(url, branch, "Kuvryn Bot", "bot@kuvryn.invalid")
    }

    #[test]
    fn requests_that_could_inject_flags_or_break_rules_are_refused_before_anything_runs() {
        let cases: Vec<(PushRequest, &str)> = vec![
            (request("--upload-pack=touch /tmp/x", "main"), "spec.git.url"),
            (request("/srv/repo.git", "main"), "spec.git.url"),
            (request("file:///srv/repo.git", "main"), "spec.git.url"),
            (request("ext::sh -c touch% /tmp/x", "main"), "spec.git.url"),
            (request("git://h/r.git", "-f"), "spec.imageUpdate.branch"),
            (request("git://h/r.git", "--force"), "spec.imageUpdate.branch"),
            (request("git://h/r.git", "a:b"), "spec.imageUpdate.branch"),
            (request("git://h/r.git", "refs/heads/main"), "spec.imageUpdate.branch"),
            (request("git://h/r.git", "HEAD"), "spec.imageUpdate.branch"),
            (request("git://h/r.git", ""), "spec.imageUpdate.branch"),
            (
                PushRequest {
                    author_name: "Evil <x@y>".into(),
                    ..request("git://h/r.git", "main")
                },
                "spec.imageUpdate.authorName",
            ),
            (
                PushRequest { author_name: " ".into(), ..request("git://h/r.git", "main") },
                "spec.imageUpdate.authorName",
            ),
            (
                PushRequest { author_email: "a b@c".into(), ..request("git://h/r.git", "main") },
                "spec.imageUpdate.authorEmail",
            ),
            (
                PushRequest {
                    author_email: "a@c\nSigned-off-by: x".into(),
                    ..request("git://h/r.git", "main")
                },
                "spec.imageUpdate.authorEmail",
            ),
        ];
        for (req, field) in cases {
            let err = push_update(&req, |_| Ok::<_, String>(None)).expect_err(&req.url);
            assert!(
                matches!(&err, PushError::InvalidRequest { field: f, .. } if *f == field),
                "{req:?}: {err}"
            );
            assert_eq!(err.reason(), FailureReason::ValidationFailure);
        }
    }

    #[test]
    fn credentials_must_match_the_url_form() {
        let basic = GitAuth::Basic(BasicAuth {
            username: "bot".into(),
            password: SecretString::from("canary-push-pw-77"),
            ca_bundle: None,
        });
        let ssh = GitAuth::Ssh(SshAuth {
            private_key: SecretString::from(
                "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----\n",
            ),
            known_hosts: "h ssh-ed25519 AAAA".into(),
        });
        for (url, auth) in [
            ("git://h/r.git", basic.clone()),
            ("ssh://git@h/r.git", basic.clone()),
            ("https://h/r.git", ssh),
        ] {
            let req = PushRequest { credentials: Some(auth), ..request(url, "main") };
            let err = validate(&req).expect_err(url);
            assert!(
                matches!(
                    err,
                    PushError::InvalidRequest { field: "spec.imageUpdate.secretRef", .. }
                ),
                "{err}"
            );
            assert!(!format!("{err} {err:?}").contains("canary-push-pw-77"));
        }
        let req =
            PushRequest { credentials: Some(basic), ..request("https://h:8443/r.git", "main") };
        assert!(validate(&req).is_ok());
    }

    #[test]
    fn the_environment_scopes_credentials_to_the_remote_and_keeps_them_out_of_argv() {
        let req = PushRequest {
            credentials: Some(GitAuth::Basic(BasicAuth {
                username: "bot".into(),
                password: SecretString::from("canary-push-pw-78"),
                ca_bundle: Some("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----".into()),
            })),
            ..request("https://git.example:8443/r.git", "main")
        };
        let url = validate(&req).expect("valid");
        let git = Git::prepare(&req, &url, Redactor::new()).expect("prepare");
        let env: std::collections::HashMap<String, String> = git
            .env
            .iter()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
            .collect();
        let count: usize = env["GIT_CONFIG_COUNT"].parse().expect("count");
        let config: Vec<(String, String)> = (0..count)
            .map(|i| {
                (
                    env[&format!("GIT_CONFIG_KEY_{i}")].clone(),
                    env[&format!("GIT_CONFIG_VALUE_{i}")].clone(),
                )
            })
            .collect();
        let has = |k: &str, v: &str| config.iter().any(|(ck, cv)| ck == k && cv == v);
        assert!(has("protocol.allow", "never"));
        assert!(has("protocol.https.allow", "always"));
        assert!(has("core.hooksPath", "/dev/null"));
        assert!(has("http.followRedirects", "false"));
        assert!(has("credential.https://git.example:8443.helper", CREDENTIAL_HELPER));
        assert!(!config.iter().any(|(k, v)| k.contains("canary") || v.contains("canary")));
        assert_eq!(env["KSYNC_PUSH_PASSWORD"], "canary-push-pw-78");
        assert_eq!(env["GIT_TERMINAL_PROMPT"], "0");
        assert_eq!(env["GIT_CONFIG_NOSYSTEM"], "1");
        assert!(std::path::Path::new(&env["GIT_SSL_CAINFO"]).is_file());
        for absent in
            ["GIT_DIR", "GIT_WORK_TREE", "GIT_SSH_COMMAND", "GIT_ASKPASS", "SSH_AUTH_SOCK"]
        {
            assert!(!env.contains_key(absent), "{absent}");
        }
        assert!(env["HOME"].starts_with(&*git.scratch.path().to_string_lossy()));
    }

    #[test]
    fn push_refusals_for_a_moved_branch_are_told_apart_from_other_failures() {
        let output = |stdout: &str, stderr: &str| Output {
            status: std::process::ExitStatus::default(),
            stdout: stdout.into(),
            stderr: stderr.into(),
        };
        assert!(branch_moved(&output("!\tHEAD:refs/heads/main\t[rejected] (fetch first)\n", "")));
        assert!(branch_moved(&output(
            "!\tHEAD:refs/heads/main\t[rejected] (non-fast-forward)\n",
            ""
        )));
        assert!(branch_moved(&output("", "error: cannot lock ref 'refs/heads/main'")));
        assert!(!branch_moved(&output(
            "!\tHEAD:refs/heads/main\t[remote rejected] (pre-receive hook declined)",
            ""
        )));
        assert!(!branch_moved(&output("", "fatal: Authentication failed for 'https://h/r.git/'")));
    }
}
