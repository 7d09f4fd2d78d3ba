//! OpenSSH `sshd` in the foreground with one authorized client key and a pinned host key.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};

use super::{START_DEADLINE, ServerProcess, free_port, require_program, run};

/// A running sshd that lets `user` in with [`SshGit::client_key`].
#[derive(Debug)]
pub struct SshGit {
    /// The port on 127.0.0.1.
    pub port: u16,
    /// The login user.
    pub user: String,
    /// The authorized client private key (OpenSSH format).
    pub client_key: String,
    /// The `known_hosts` line pinning the server's host key.
    pub known_hosts: String,
    /// The client key file, for the `git` CLI.
    pub client_key_file: PathBuf,
    /// The known_hosts file, for the `git` CLI.
    pub known_hosts_file: PathBuf,
    root: PathBuf,
    process: ServerProcess,
    _dir: tempfile::TempDir,
}

/// A fresh ed25519 key pair in `dir/name` and `dir/name.pub`; returns (private, public).
pub fn keygen(dir: &Path, name: &str) -> Result<(String, String)> {
    let file = dir.join(name);
    let mut cmd = Command::new("ssh-keygen");
    cmd.args(["-q", "-t", "ed25519", "-N", "", "-C", "ksync-test", "-f"]).arg(&file);
    run(cmd)?;
    Ok((std::fs::read_to_string(&file)?, std::fs::read_to_string(file.with_extension("pub"))?))
}

impl SshGit {
    /// Start sshd serving the repositories under `root` (absolute paths in URLs) as root.
    pub fn start(root: &Path) -> Result<Self> {
        let sshd = require_program("/usr/sbin/sshd", "openssh-server")?;
        require_program("ssh-keygen", "openssh-client")?;
        let dir = tempfile::Builder::new().prefix("ksync-sshd-").tempdir()?;
        let d = dir.path();
        let (_, host_pub) = keygen(d, "host_key")?;
        let (client_key, client_pub) = keygen(d, "client_key")?;
        std::fs::write(d.join("authorized_keys"), &client_pub)?;
        std::fs::create_dir_all("/run/sshd").context("creating /run/sshd (sshd needs it)")?;
        let port = free_port()?;
        let user = "root".to_owned();
        let conf = format!(
            "ListenAddress 127.0.0.1\nPort {port}\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nUsePAM no\nPermitRootLogin prohibit-password\n\
             AllowUsers {user}\nAcceptEnv GIT_PROTOCOL\nLogLevel ERROR\n",
            d = d.display(),
        );
        let conf_path = d.join("sshd_config");
        std::fs::write(&conf_path, conf)?;
        let mut parts = host_pub.split_whitespace();
        let known_hosts = format!(
            "[127.0.0.1]:{port} {} {}\n",
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default()
        );
        let known_hosts_file = d.join("known_hosts");
        std::fs::write(&known_hosts_file, &known_hosts)?;
        let mut cmd = Command::new(sshd);
        cmd.arg("-D").arg("-e").arg("-f").arg(&conf_path);
        let mut process = ServerProcess::spawn("sshd", cmd, &d.join("sshd.log"))?;
        process.wait_for_port(SocketAddr::from(([127, 0, 0, 1], port)), START_DEADLINE)?;
        Ok(Self {
            port,
            user,
            client_key,
            known_hosts,
            client_key_file: d.join("client_key"),
            known_hosts_file,
            root: root.to_owned(),
            process,
            _dir: dir,
        })
    }

    /// The ssh:// URL of `name` (such as `app.git`).
    pub fn url(&self, name: &str) -> String {
        format!("ssh://{}@127.0.0.1:{}{}/{name}", self.user, self.port, self.root.display())
    }

    /// A `known_hosts` line for this address with a different (wrong) host key.
    pub fn wrong_known_hosts(&self) -> Result<String> {
        let dir = tempfile::tempdir()?;
        let (_, other) = keygen(dir.path(), "other")?;
        let mut parts = other.split_whitespace();
        Ok(format!(
            "[127.0.0.1]:{} {} {}\n",
            self.port,
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default()
        ))
    }

    /// `GIT_SSH_COMMAND` for the `git` CLI with the client key and pinned host key.
    pub fn git_ssh_command(&self) -> String {
        format!(
            "ssh -F /dev/null -i {} -o IdentitiesOnly=yes -o UserKnownHostsFile={} -o StrictHostKeyChecking=yes -o BatchMode=yes",
            self.client_key_file.display(),
            self.known_hosts_file.display()
        )
    }

    /// sshd's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}
