//! The `ssh` program as gix runs it: a generated wrapper named `ssh` (so gix passes OpenSSH-style
//! `-p PORT` and `-o SendEnv=GIT_PROTOCOL`) that starts the real `ssh` with a cleared environment
//! and an explicit, strict configuration. The wrapper, the key and `known_hosts` live in a
//! private temporary directory removed on drop.

use std::{
    fs,
    io::Write,
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
    time::Duration,
};

use secrecy::{ExposeSecret, SecretString};

/// A prepared ssh invocation; keep it alive for the whole connection.
#[derive(Debug)]
pub(super) struct SshCommand {
    _dir: tempfile::TempDir,
    wrapper: PathBuf,
    stderr_log: PathBuf,
}

/// Quote for a POSIX shell: everything inside single quotes, single quotes spliced in.
fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

fn write_private(path: &Path, contents: &[u8], mode: u32) -> std::io::Result<()> {
    let mut file = fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(path)?;
    file.write_all(contents)
}

/// The argument on which the wrapper exits at once, without starting ssh.
const READY_PROBE: &str = "--ksync-ready";

/// Run the wrapper once with [`READY_PROBE`] until the kernel lets it be executed.
///
/// A process forked by another thread while the wrapper was open for writing holds the write
/// descriptor until it execs (close-on-exec), and until then executing the wrapper fails with
/// `ETXTBSY` ("Text file busy"). Our descriptor is closed by now, so no new holder can appear: once
/// one exec succeeds, every later one (gix's, git's) does too. The wait is bounded; the pause
/// between tries is a back-off for a kernel race, not a synchronisation.
fn wait_until_executable(wrapper: &Path) -> std::io::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let probe = std::process::Command::new(wrapper)
            .arg(READY_PROBE)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        match probe {
            Ok(status) if status.success() => return Ok(()),
            Ok(status) => {
                return Err(std::io::Error::other(format!("the ssh wrapper failed: {status}")));
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::ExecutableFileBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e),
        }
    }
}

/// The `ssh` binary to run: the first on the standard system paths.
fn ssh_program() -> &'static str {
    for candidate in ["/usr/bin/ssh", "/usr/local/bin/ssh", "/bin/ssh"] {
        if Path::new(candidate).is_file() {
            return candidate;
        }
    }
    "ssh"
}

impl SshCommand {
    /// Write the key (0600), `known_hosts` and the wrapper into a fresh private directory.
    pub(super) fn prepare(
        private_key: &SecretString,
        known_hosts: &str,
        timeout: Duration,
    ) -> std::io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("ksync-ssh-").tempdir()?;
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700))?;
        let key = dir.path().join("id");
        let mut key_text = private_key.expose_secret().trim_end().to_owned();
        key_text.push('\n');
        write_private(&key, key_text.as_bytes(), 0o600)?;
        let known = dir.path().join("known_hosts");
        write_private(&known, known_hosts.as_bytes(), 0o600)?;
        let home = dir.path().join("home");
        fs::create_dir(&home)?;
        let stderr_log = dir.path().join("stderr.log");
        let bin = dir.path().join("bin");
        fs::create_dir(&bin)?;
        let wrapper = bin.join("ssh");
        let connect_timeout = timeout.as_secs().clamp(1, 600);
        // `env -i` drops SSH_AUTH_SOCK, GIT_*, and everything else from the controller's
        // environment; only GIT_PROTOCOL (set by gix for protocol v2) is passed on. `-F /dev/null`
        // ignores user and system ssh configuration (ssh reads ~ from the password database, not
        // from HOME). gix appends `-p PORT`, `-o SendEnv=GIT_PROTOCOL`, the host and the remote
        // command; it refuses hosts and users that start with '-'.
        let script = format!(
            "#!/bin/sh\n[ \"$1\" = {READY_PROBE} ] && exit 0\nexec /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME={home} \
             GIT_CONFIG_NOSYSTEM=1 GIT_PROTOCOL=\"${{GIT_PROTOCOL:-}}\" \
             {ssh} -F /dev/null -i {key} -o IdentitiesOnly=yes -o IdentityAgent=none \
             -o UserKnownHostsFile={known} -o GlobalKnownHostsFile=/dev/null \
             -o StrictHostKeyChecking=yes -o BatchMode=yes -o PasswordAuthentication=no \
             -o KbdInteractiveAuthentication=no -o ConnectTimeout={connect_timeout} \
             -o ServerAliveInterval=15 -o ServerAliveCountMax=2 -o LogLevel=ERROR \
             \"$@\" 2>>{log}\n",
            home = shell_quote(&home.to_string_lossy()),
            ssh = ssh_program(),
            key = shell_quote(&key.to_string_lossy()),
            known = shell_quote(&known.to_string_lossy()),
            log = shell_quote(&stderr_log.to_string_lossy()),
        );
        write_private(&wrapper, script.as_bytes(), 0o700)?;
        wait_until_executable(&wrapper)?;
        Ok(Self { _dir: dir, wrapper, stderr_log })
    }

    /// The command gix runs (without a shell).
    pub(super) fn program(&self) -> &Path {
        &self.wrapper
    }

    /// What ssh wrote to stderr so far (bounded).
    pub(super) fn stderr(&self) -> String {
        let text = fs::read(&self.stderr_log).unwrap_or_default();
        let text = String::from_utf8_lossy(&text[..text.len().min(16 * 1024)]).into_owned();
        // The verdict is in the last lines; drop OpenSSH's warning banner and removal hints.
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| {
                !l.is_empty()
                    && !l.starts_with('@')
                    && !l.starts_with("ssh-keygen")
                    && !l.starts_with("remove with")
            })
            .collect();
        lines[lines.len().saturating_sub(2)..].join("; ")
    }

    #[cfg(test)]
    fn dir(&self) -> &Path {
        self._dir.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_file_is_private_and_the_wrapper_is_strict() {
        let key = SecretString::from(
            "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----",
        );
        let cmd =
            SshCommand::prepare(&key, "[127.0.0.1]:22 ssh-ed25519 AAAA", Duration::from_secs(5))
                .expect("prepare");
        let mode = fs::metadata(cmd.dir().join("id")).expect("key").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let script = fs::read_to_string(cmd.program()).expect("wrapper");
        for needle in [
            "env -i",
            "-o IdentitiesOnly=yes",
            "-o StrictHostKeyChecking=yes",
            "-o BatchMode=yes",
            "-F /dev/null",
            "UserKnownHostsFile=",
        ] {
            assert!(script.contains(needle), "{needle} missing from {script}");
        }
        assert!(!script.contains("SSH_AUTH_SOCK"));
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    }

    /// Wrappers written while other threads fork and exec must still run at once: without the
    /// wait in `prepare`, some of these execs fail with "Text file busy".
    #[test]
    fn a_wrapper_written_while_other_threads_fork_can_be_executed_at_once() {
        let key = SecretString::from("k");
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let key = key.clone();
                std::thread::spawn(move || {
                    for _ in 0..40 {
                        let cmd =
                            SshCommand::prepare(&key, "", Duration::from_secs(5)).expect("prepare");
                        let status = std::process::Command::new(cmd.program())
                            .arg(READY_PROBE)
                            .status()
                            .expect("the wrapper runs");
                        assert!(status.success());
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("no thread panicked");
        }
    }
}
