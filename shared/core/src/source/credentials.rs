//! Git credentials from a Secret named by `spec.git.auth.secretRef.name`.
//!
//! Rules:
//! - Only a Secret labelled `sync.kuvryn.io/git-credentials: "true"` is used; an unlabelled one,
//!   or one with another value, is refused with a message saying exactly that.
//! - `data` (already base64-decoded by the client) and `stringData` are merged, `stringData`
//!   winning, as the API server does on write. Values must be UTF-8.
//! - The form must match the URL:
//!   - `https://` and `http://`: basic auth from `username` + `password`, or `token` (with
//!     `username` when given, else the user name `git`, which GitHub, Gitea and GitLab accept
//!     for tokens). `password` and `token` together are ambiguous and refused. An optional
//!     `ca.crt` holds extra PEM certificate authorities for the host.
//!   - `ssh://` and `user@host:path`: a private key in `identity` or `ssh-privatekey` (the key
//!     of `kubernetes.io/ssh-auth` Secrets) plus a required `known_hosts`: strict host-key
//!     checking is mandatory, so a Secret without host keys is refused. The user comes from the
//!     URL. Passphrase-protected keys are not supported.
//!   - `git://` has no authentication at all, so any credentials are refused.
//!   - Basic credentials with an ssh URL, or a key with an https URL, are refused naming both.
//! - Trailing newlines of `username`, `password` and `token` are dropped (`kubectl create secret
//!   --from-file` keeps them); a private key always ends with a newline (OpenSSH needs one).
//! - Secret values are [`SecretString`]s, so `Debug` never prints them, and
//!   [`GitCredentials::redactor`] masks all of them in any text. Errors never contain values.
//! - [`credential_identity`] hashes the Secret's namespace, name and sorted data with SHA-256:
//!   caches of fetched data are keyed by it, so Repositories with different credentials never
//!   share fetched data, and a rotated Secret gets a fresh cache key.
//!
//! Every error here maps to [`FailureReason::AuthenticationFailure`]. The I/O layer reads the
//! Secret from the Repository's own namespace; that lookup is not repeated here. Pure: no I/O.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};

use crate::redact::Redactor;
use crate::url::{GitUrl, GitUrlKind};
use kuvryn_sync_api::FailureReason;
use kuvryn_sync_api::keys;

/// Secret key: basic-auth user name.
pub const USERNAME: &str = "username";
/// Secret key: basic-auth password.
pub const PASSWORD: &str = "password";
/// Secret key: access token, sent as the basic-auth password.
pub const TOKEN: &str = "token";
/// Secret key: ssh private key (Flux-style).
pub const IDENTITY: &str = "identity";
/// Secret key: ssh private key of `kubernetes.io/ssh-auth` Secrets.
pub const SSH_PRIVATE_KEY: &str = "ssh-privatekey";
/// Secret key: OpenSSH `known_hosts` lines for the remote's host keys.
pub const KNOWN_HOSTS: &str = "known_hosts";
/// Secret key: extra PEM certificate authorities for an https remote.
pub const CA_BUNDLE: &str = "ca.crt";
/// User name sent with a `token` when the Secret has no `username`.
pub const TOKEN_USERNAME: &str = "git";
/// Cache identity of a Repository without credentials.
pub const ANONYMOUS_IDENTITY: &str = "anonymous";

/// Keys whose values are not secret (user names, host keys, CA certificates).
const PUBLIC_KEYS: &[&str] = &[USERNAME, KNOWN_HOSTS, CA_BUNDLE, crate::credential_scope::URL_KEY];

/// https basic authentication.
#[derive(Clone, Debug)]
pub struct BasicAuth {
    /// User name.
    pub username: String,
    /// Password or token.
    pub password: SecretString,
    /// Extra PEM certificate authorities, from `ca.crt`.
    pub ca_bundle: Option<String>,
}

/// ssh public-key authentication with pinned host keys.
#[derive(Clone, Debug)]
pub struct SshAuth {
    /// OpenSSH or PEM private key, ending with a newline.
    pub private_key: SecretString,
    /// `known_hosts` lines; the I/O layer runs ssh with `StrictHostKeyChecking=yes` and only
    /// this file as `UserKnownHostsFile`.
    pub known_hosts: String,
}

/// The authentication form, matched to the URL kind.
#[derive(Clone, Debug)]
pub enum GitAuth {
    /// For `https://` and `http://`.
    Basic(BasicAuth),
    /// For `ssh://` and `user@host:path`.
    Ssh(SshAuth),
}

impl GitAuth {
    /// A redactor masking this credential's secret value (password, token or private key): the
    /// one place that says what of a Git credential is secret.
    pub fn redactor(&self) -> Redactor {
        let secret = match self {
            GitAuth::Basic(basic) => basic.password.expose_secret(),
            GitAuth::Ssh(ssh) => ssh.private_key.expose_secret(),
        };
        Redactor::new().with_secret(secret)
    }
}

/// Credentials read from one labelled Secret.
#[derive(Clone, Debug)]
pub struct GitCredentials {
    /// Namespace of the Secret.
    pub secret_namespace: String,
    /// Name of the Secret.
    pub secret_name: String,
    /// The authentication to use.
    pub auth: GitAuth,
    /// [`credential_identity`] of the Secret: the cache key part for these credentials.
    pub identity: String,
    /// Values of keys this module does not use, masked by the redactor all the same.
    other_values: Vec<SecretString>,
}

/// Why a Secret cannot be used as Git credentials. Messages name the Secret and the keys, never
/// a value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    /// The Secret lacks the label.
    #[error(
        "Secret {secret} is not labelled sync.kuvryn.io/git-credentials: \"true\"; add the label to allow it as Git credentials"
    )]
    NotLabelled {
        /// `namespace/name`.
        secret: String,
    },
    /// The label has another value.
    #[error(
        "Secret {secret} has label sync.kuvryn.io/git-credentials: \"{value}\", not \"true\"; set it to \"true\" to allow it as Git credentials"
    )]
    WrongLabelValue {
        /// `namespace/name`.
        secret: String,
        /// The label's value (at most 32 characters).
        value: String,
    },
    /// A value is not UTF-8.
    #[error("Secret {secret}: key {key} is not valid UTF-8 text")]
    NotText {
        /// `namespace/name`.
        secret: String,
        /// The key.
        key: String,
    },
    /// A key the chosen form needs is missing or empty.
    #[error("Secret {secret}: {needed} for a {scheme} URL; key {key} is missing or empty")]
    MissingKey {
        /// `namespace/name`.
        secret: String,
        /// The key.
        key: &'static str,
        /// What the form needs.
        needed: &'static str,
        /// URL scheme.
        scheme: &'static str,
    },
    /// Two keys that exclude each other.
    #[error("Secret {secret}: keys {first} and {second} are both set; keep only one")]
    Ambiguous {
        /// `namespace/name`.
        secret: String,
        /// One key.
        first: &'static str,
        /// The other key.
        second: &'static str,
    },
    /// ssh without `known_hosts`.
    #[error(
        "Secret {secret}: ssh needs known_hosts with the remote's host keys (strict host-key checking is mandatory); add a known_hosts key, e.g. from ssh-keyscan checked against the host's published fingerprints"
    )]
    MissingKnownHosts {
        /// `namespace/name`.
        secret: String,
    },
    /// `known_hosts` has no host-key line.
    #[error("Secret {secret}: known_hosts has no host-key lines (\"host keytype key\")")]
    InvalidKnownHosts {
        /// `namespace/name`.
        secret: String,
    },
    /// The private key is not a PEM or OpenSSH private key.
    #[error(
        "Secret {secret}: key {key} is not a private key (expected \"-----BEGIN … PRIVATE KEY-----\")"
    )]
    InvalidPrivateKey {
        /// `namespace/name`.
        secret: String,
        /// The key.
        key: &'static str,
    },
    /// Credentials of one form with a URL of another.
    #[error(
        "Secret {secret} holds {found}, which cannot be used with a {scheme} URL; {scheme} needs {needed}"
    )]
    FormMismatch {
        /// `namespace/name`.
        secret: String,
        /// What the Secret holds.
        found: &'static str,
        /// URL scheme.
        scheme: &'static str,
        /// What the URL needs.
        needed: &'static str,
    },
    /// No credentials at all.
    #[error("Secret {secret} holds no Git credentials; a {scheme} URL needs {needed}")]
    NoCredentials {
        /// `namespace/name`.
        secret: String,
        /// URL scheme.
        scheme: &'static str,
        /// What the URL needs.
        needed: &'static str,
    },
    /// The Secret's `url` key does not cover the remote ([`crate::credential_scope`]).
    #[error(transparent)]
    Scope(#[from] crate::credential_scope::CredentialScopeError),
    /// `git://` cannot authenticate.
    #[error(
        "git:// URLs have no authentication; remove spec.git.auth or use an https or ssh URL with Secret {secret}"
    )]
    NotSupported {
        /// `namespace/name`.
        secret: String,
    },
}

impl CredentialsError {
    /// The Ready condition reason of this error.
    pub fn reason(&self) -> FailureReason {
        FailureReason::AuthenticationFailure
    }
}

const BASIC_NEEDED: &str = "username and password, or token";
const SSH_NEEDED: &str = "identity (or ssh-privatekey) and known_hosts";

/// `namespace/name` of a Secret.
fn secret_id(secret: &Secret) -> String {
    format!(
        "{}/{}",
        secret.metadata.namespace.as_deref().unwrap_or_default(),
        secret.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Refuse a Secret without `sync.kuvryn.io/git-credentials: "true"`.
pub fn check_label(secret: &Secret) -> Result<(), CredentialsError> {
    match secret.metadata.labels.as_ref().and_then(|l| l.get(keys::GIT_CREDENTIALS)) {
        Some(value) if value == keys::TRUE => Ok(()),
        Some(value) => Err(CredentialsError::WrongLabelValue {
            secret: secret_id(secret),
            value: value.chars().take(32).collect(),
        }),
        None => Err(CredentialsError::NotLabelled { secret: secret_id(secret) }),
    }
}

/// The Secret's `data` merged with its `stringData` (which wins), as raw bytes.
pub fn secret_values(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut values: BTreeMap<String, Vec<u8>> =
        secret.data.iter().flatten().map(|(k, v)| (k.clone(), v.0.clone())).collect();
    for (k, v) in secret.string_data.iter().flatten() {
        values.insert(k.clone(), v.clone().into_bytes());
    }
    values
}

/// SHA-256 (lower-case hex) of the Secret's namespace, name and data in key order, each part
/// length-prefixed so no two different inputs hash alike. Used to key caches of fetched data.
pub fn credential_identity(
    secret_namespace: &str,
    secret_name: &str,
    data: &BTreeMap<String, Vec<u8>>,
) -> String {
    let mut hasher = Sha256::new();
    let mut part = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    part(b"kuvryn-sync/git-credentials/v1");
    part(secret_namespace.as_bytes());
    part(secret_name.as_bytes());
    for (key, value) in data {
        part(key.as_bytes());
        part(value);
    }
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The text values of a Secret, checked to be UTF-8.
struct Values<'a> {
    secret: String,
    raw: &'a BTreeMap<String, Vec<u8>>,
}

impl Values<'_> {
    /// The value of `key` as text; `None` when missing or empty after trimming line ends.
    fn text(&self, key: &str) -> Result<Option<String>, CredentialsError> {
        let Some(bytes) = self.raw.get(key) else { return Ok(None) };
        let text = std::str::from_utf8(bytes).map_err(|_| CredentialsError::NotText {
            secret: self.secret.clone(),
            key: key.to_owned(),
        })?;
        let text = text.trim_end_matches(['\n', '\r']);
        Ok((!text.is_empty()).then(|| text.to_owned()))
    }

    fn has(&self, key: &str) -> bool {
        self.raw.get(key).is_some_and(|v| !v.is_empty())
    }
}

impl GitCredentials {
    /// Read credentials for `url` from `secret`, checking the label and the form.
    pub fn from_secret(secret: &Secret, url: &GitUrl) -> Result<GitCredentials, CredentialsError> {
        check_label(secret)?;
        let id = secret_id(secret);
        let raw = secret_values(secret);
        // A declared `url` binds the Secret to that prefix; without one it is bound to this
        // remote's own scheme, host and port (see crate::credential_scope).
        crate::credential_scope::check_declared(
            &id,
            &raw,
            &url.original,
            false,
            "Git credentials",
        )?;
        let values = Values { secret: id.clone(), raw: &raw };
        let has_basic = values.has(PASSWORD) || values.has(TOKEN);
        let has_ssh = values.has(IDENTITY) || values.has(SSH_PRIVATE_KEY);
        let scheme = url.kind.scheme();

        let auth = match url.kind {
            GitUrlKind::Git => return Err(CredentialsError::NotSupported { secret: id }),
            GitUrlKind::Https | GitUrlKind::Http => {
                if !has_basic {
                    return Err(if has_ssh {
                        CredentialsError::FormMismatch {
                            secret: id,
                            found: "an ssh private key",
                            scheme,
                            needed: BASIC_NEEDED,
                        }
                    } else if values.has(USERNAME) {
                        CredentialsError::MissingKey {
                            secret: id,
                            key: PASSWORD,
                            needed: "basic auth needs a password or a token",
                            scheme,
                        }
                    } else {
                        CredentialsError::NoCredentials { secret: id, scheme, needed: BASIC_NEEDED }
                    });
                }
                GitAuth::Basic(basic_auth(&values, scheme)?)
            }
            GitUrlKind::Ssh | GitUrlKind::Scp => {
                if !has_ssh {
                    return Err(if has_basic {
                        CredentialsError::FormMismatch {
                            secret: id,
                            found: "basic-auth credentials (password or token)",
                            scheme,
                            needed: SSH_NEEDED,
                        }
                    } else {
                        CredentialsError::NoCredentials { secret: id, scheme, needed: SSH_NEEDED }
                    });
                }
                GitAuth::Ssh(ssh_auth(&values)?)
            }
        };

        let used: &[&str] = match auth {
            GitAuth::Basic(_) => &[PASSWORD, TOKEN],
            GitAuth::Ssh(_) => &[IDENTITY, SSH_PRIVATE_KEY],
        };
        let other_values = raw
            .iter()
            .filter(|(k, _)| !used.contains(&k.as_str()) && !PUBLIC_KEYS.contains(&k.as_str()))
            .map(|(_, v)| SecretString::from(String::from_utf8_lossy(v).into_owned()))
            .collect();
        Ok(GitCredentials {
            secret_namespace: secret.metadata.namespace.clone().unwrap_or_default(),
            secret_name: secret.metadata.name.clone().unwrap_or_default(),
            identity: credential_identity(
                secret.metadata.namespace.as_deref().unwrap_or_default(),
                secret.metadata.name.as_deref().unwrap_or_default(),
                &raw,
            ),
            auth,
            other_values,
        })
    }

    /// A redactor masking every secret value of the Secret (password, token, private key and
    /// the values of keys this module does not know), with their base64 forms.
    pub fn redactor(&self) -> Redactor {
        let mut redactor = self.auth.redactor();
        for value in &self.other_values {
            redactor.add_secret(value.expose_secret());
        }
        redactor
    }
}

fn basic_auth(values: &Values<'_>, scheme: &'static str) -> Result<BasicAuth, CredentialsError> {
    let password = values.text(PASSWORD)?;
    let token = values.text(TOKEN)?;
    let username = values.text(USERNAME)?;
    let (username, password) = match (password, token) {
        (Some(_), Some(_)) => {
            return Err(CredentialsError::Ambiguous {
                secret: values.secret.clone(),
                first: PASSWORD,
                second: TOKEN,
            });
        }
        (Some(password), None) => {
            let username = username.ok_or_else(|| CredentialsError::MissingKey {
                secret: values.secret.clone(),
                key: USERNAME,
                needed: "a password needs a username",
                scheme,
            })?;
            (username, password)
        }
        (None, Some(token)) => (username.unwrap_or_else(|| TOKEN_USERNAME.to_owned()), token),
        (None, None) => {
            // Present but blank after trimming line ends.
            return Err(CredentialsError::MissingKey {
                secret: values.secret.clone(),
                key: PASSWORD,
                needed: "basic auth needs a password or a token",
                scheme,
            });
        }
    };
    Ok(BasicAuth {
        username,
        password: SecretString::from(password),
        ca_bundle: values.text(CA_BUNDLE)?,
    })
}

fn ssh_auth(values: &Values<'_>) -> Result<SshAuth, CredentialsError> {
    let secret = || values.secret.clone();
    let (key_name, key) = match (values.text(IDENTITY)?, values.text(SSH_PRIVATE_KEY)?) {
        (Some(_), Some(_)) => {
            return Err(CredentialsError::Ambiguous {
                secret: secret(),
                first: IDENTITY,
                second: SSH_PRIVATE_KEY,
            });
        }
        (Some(key), None) => (IDENTITY, key),
        (None, Some(key)) => (SSH_PRIVATE_KEY, key),
        (None, None) => {
            return Err(CredentialsError::InvalidPrivateKey { secret: secret(), key: IDENTITY });
        }
    };
    if !(key.contains("-----BEGIN ") && key.contains("PRIVATE KEY-----")) {
        return Err(CredentialsError::InvalidPrivateKey { secret: secret(), key: key_name });
    }
    let known_hosts = values
        .text(KNOWN_HOSTS)?
        .ok_or_else(|| CredentialsError::MissingKnownHosts { secret: secret() })?;
    if !has_host_key_line(&known_hosts) {
        return Err(CredentialsError::InvalidKnownHosts { secret: secret() });
    }
    let mut known_hosts = known_hosts;
    known_hosts.push('\n');
    let mut key = key;
    key.push('\n');
    Ok(SshAuth { private_key: SecretString::from(key), known_hosts })
}

/// Whether `known_hosts` has at least one `[marker] hosts keytype key` line.
fn has_host_key_line(known_hosts: &str) -> bool {
    known_hosts.lines().map(str::trim).any(|line| {
        if line.is_empty() || line.starts_with('#') {
            return false;
        }
        let fields = line.split_whitespace().count();
        if line.starts_with('@') { fields >= 4 } else { fields >= 3 }
    })
}

#[cfg(test)]
mod tests {
    // Table tests spell their row types out.
    #![allow(clippy::type_complexity)]

    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    const PASSWORD_CANARY: &str = "canary-pw-7c1e9b2d";
    const TOKEN_CANARY: &str = "canary-token-4a8f0e3c";
    const KEY_BODY: &str = "b3BlbnNzaC1rZXktdjEAAAAACmNhbmFyeS1rZXk";
    const EXTRA_CANARY: &str = "canary-extra-19d3f0aa";
    const KNOWN: &str = "git.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample\n";

    fn key() -> String {
        format!(
            "-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_BODY}\n-----END OPENSSH PRIVATE KEY-----"
        )
    }

    fn secret(label: Option<&str>, data: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("git-creds".into()),
                namespace: Some("default".into()),
                labels: label
                    .map(|v| BTreeMap::from([(keys::GIT_CREDENTIALS.to_owned(), v.to_owned())])),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn labelled(data: &[(&str, &str)]) -> Secret {
        secret(Some("true"), data)
    }

    fn url(s: &str) -> GitUrl {
        GitUrl::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    const HTTPS: &str = "https://git.example.com/a.git";
    const SSH: &str = "git@git.example.com:a.git";

    #[test]
    fn a_declared_url_binds_git_credentials_to_its_prefix() {
        let data =
            [(USERNAME, "bot"), (PASSWORD, PASSWORD_CANARY), ("url", "https://git.example.com/")];
        let creds = GitCredentials::from_secret(&labelled(&data), &url(HTTPS)).expect("covered");
        assert!(creds.redactor().redact("https://git.example.com/").contains("git.example.com"));
        for elsewhere in ["https://evil.example.com/a.git", "http://git.example.com/a.git"] {
            let err = GitCredentials::from_secret(&labelled(&data), &url(elsewhere))
                .expect_err(elsewhere);
            assert!(matches!(err, CredentialsError::Scope(_)), "{err}");
            assert_eq!(err.reason(), FailureReason::AuthenticationFailure);
            assert!(err.to_string().contains("url key"), "{err}");
            assert!(!err.to_string().contains(PASSWORD_CANARY));
        }
        let scp = [
            (IDENTITY, key()),
            (KNOWN_HOSTS, KNOWN.to_owned()),
            ("url", "ssh://git.example.com/org".to_owned()),
        ];
        let scp: Vec<(&str, &str)> = scp.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert!(
            GitCredentials::from_secret(&labelled(&scp), &url("git@git.example.com:org/a.git"))
                .is_ok()
        );
        assert!(GitCredentials::from_secret(&labelled(&scp), &url(SSH)).is_err(), "outside /org");
    }

    #[test]
    fn accepted_forms() {
        let key = key();
        // (url, data, expected username or "ssh")
        let cases: Vec<(&str, Vec<(&str, &str)>, &str)> = vec![
            (HTTPS, vec![(USERNAME, "bot"), (PASSWORD, PASSWORD_CANARY)], "bot"),
            (
                "http://git.example.com/a.git",
                vec![(USERNAME, "bot\n"), (PASSWORD, "pw-with-newline\n")],
                "bot",
            ),
            (HTTPS, vec![(TOKEN, TOKEN_CANARY)], TOKEN_USERNAME),
            (HTTPS, vec![(USERNAME, "oauth2"), (TOKEN, TOKEN_CANARY)], "oauth2"),
            (SSH, vec![(IDENTITY, key.as_str()), (KNOWN_HOSTS, KNOWN)], "ssh"),
            (
                "ssh://git@git.example.com/a.git",
                vec![(SSH_PRIVATE_KEY, key.as_str()), (KNOWN_HOSTS, KNOWN)],
                "ssh",
            ),
            // Keys of the other form are ignored when the matching form is complete.
            (SSH, vec![(IDENTITY, key.as_str()), (KNOWN_HOSTS, KNOWN), (USERNAME, "x")], "ssh"),
        ];
        for (u, data, expected) in cases {
            let creds = GitCredentials::from_secret(&labelled(&data), &url(u))
                .unwrap_or_else(|e| panic!("{u}: {e}"));
            match (&creds.auth, expected) {
                (GitAuth::Ssh(ssh), "ssh") => {
                    assert!(ssh.private_key.expose_secret().ends_with("-----\n"));
                    assert_eq!(ssh.known_hosts, KNOWN);
                }
                (GitAuth::Basic(basic), user) => {
                    assert_eq!(basic.username, user, "{u}");
                    assert!(!basic.password.expose_secret().ends_with('\n'));
                }
                (auth, _) => panic!("{u}: unexpected {auth:?}"),
            }
            assert_eq!(creds.identity.len(), 64);
        }
    }

    #[test]
    fn refusals() {
        let key = key();
        let id = "default/git-creds".to_owned();
        let cases: Vec<(Option<&str>, &str, Vec<(&str, &str)>, CredentialsError)> = vec![
            (
                None,
                HTTPS,
                vec![(TOKEN, TOKEN_CANARY)],
                CredentialsError::NotLabelled { secret: id.clone() },
            ),
            (
                Some("yes"),
                HTTPS,
                vec![(TOKEN, TOKEN_CANARY)],
                CredentialsError::WrongLabelValue { secret: id.clone(), value: "yes".into() },
            ),
            (
                Some("true"),
                SSH,
                vec![(USERNAME, "bot"), (PASSWORD, PASSWORD_CANARY)],
                CredentialsError::FormMismatch {
                    secret: id.clone(),
                    found: "basic-auth credentials (password or token)",
                    scheme: "ssh",
                    needed: SSH_NEEDED,
                },
            ),
            (
                Some("true"),
                HTTPS,
                vec![(IDENTITY, key.as_str()), (KNOWN_HOSTS, KNOWN)],
                CredentialsError::FormMismatch {
                    secret: id.clone(),
                    found: "an ssh private key",
                    scheme: "https",
                    needed: BASIC_NEEDED,
                },
            ),
            (
                Some("true"),
                SSH,
                vec![(IDENTITY, key.as_str())],
                CredentialsError::MissingKnownHosts { secret: id.clone() },
            ),
            (
                Some("true"),
                SSH,
                vec![(IDENTITY, key.as_str()), (KNOWN_HOSTS, "# only a comment\n\n")],
                CredentialsError::InvalidKnownHosts { secret: id.clone() },
            ),
            (
                Some("true"),
                SSH,
                vec![(IDENTITY, "not a key"), (KNOWN_HOSTS, KNOWN)],
                CredentialsError::InvalidPrivateKey { secret: id.clone(), key: IDENTITY },
            ),
            (
                Some("true"),
                SSH,
                vec![
                    (IDENTITY, key.as_str()),
                    (SSH_PRIVATE_KEY, key.as_str()),
                    (KNOWN_HOSTS, KNOWN),
                ],
                CredentialsError::Ambiguous {
                    secret: id.clone(),
                    first: IDENTITY,
                    second: SSH_PRIVATE_KEY,
                },
            ),
            (
                Some("true"),
                HTTPS,
                vec![(PASSWORD, PASSWORD_CANARY)],
                CredentialsError::MissingKey {
                    secret: id.clone(),
                    key: USERNAME,
                    needed: "a password needs a username",
                    scheme: "https",
                },
            ),
            (
                Some("true"),
                HTTPS,
                vec![(USERNAME, "bot")],
                CredentialsError::MissingKey {
                    secret: id.clone(),
                    key: PASSWORD,
                    needed: "basic auth needs a password or a token",
                    scheme: "https",
                },
            ),
            (
                Some("true"),
                HTTPS,
                vec![(USERNAME, "bot"), (PASSWORD, PASSWORD_CANARY), (TOKEN, TOKEN_CANARY)],
                CredentialsError::Ambiguous { secret: id.clone(), first: PASSWORD, second: TOKEN },
            ),
            (
                Some("true"),
                HTTPS,
                vec![("other", "x")],
                CredentialsError::NoCredentials {
                    secret: id.clone(),
                    scheme: "https",
                    needed: BASIC_NEEDED,
                },
            ),
            (
                Some("true"),
                "git://git.example.com/a.git",
                vec![(TOKEN, TOKEN_CANARY)],
                CredentialsError::NotSupported { secret: id.clone() },
            ),
        ];
        for (label, u, data, expected) in cases {
            let err = GitCredentials::from_secret(&secret(label, &data), &url(u)).err();
            assert_eq!(err.as_ref(), Some(&expected), "{u} {data:?}");
            assert_eq!(expected.reason(), FailureReason::AuthenticationFailure);
            let message = expected.to_string();
            for canary in [PASSWORD_CANARY, TOKEN_CANARY, KEY_BODY] {
                assert!(!message.contains(canary), "{message}");
            }
        }
    }

    #[test]
    fn unlabelled_message_says_so() {
        let err = check_label(&secret(None, &[])).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "Secret default/git-creds is not labelled sync.kuvryn.io/git-credentials: \"true\"; add the label to allow it as Git credentials"
            )
        );
    }

    #[test]
    fn binary_value_is_refused_without_echoing_it() {
        let mut s = labelled(&[(USERNAME, "bot")]);
        if let Some(data) = s.data.as_mut() {
            data.insert(PASSWORD.into(), ByteString(vec![0xff, 0xfe, 0x00]));
        }
        let err = GitCredentials::from_secret(&s, &url(HTTPS)).err();
        assert_eq!(
            err,
            Some(CredentialsError::NotText {
                secret: "default/git-creds".into(),
                key: PASSWORD.into()
            })
        );
    }

    #[test]
    fn string_data_wins_over_data() {
        let mut s = labelled(&[(USERNAME, "from-data"), (PASSWORD, "data-pw-value")]);
        s.string_data =
            Some(BTreeMap::from([(USERNAME.to_owned(), "from-string-data".to_owned())]));
        let creds = GitCredentials::from_secret(&s, &url(HTTPS)).unwrap_or_else(|e| panic!("{e}"));
        let GitAuth::Basic(basic) = creds.auth else { panic!("basic expected") };
        assert_eq!(basic.username, "from-string-data");
    }

    #[test]
    fn debug_and_redactor_hide_every_secret_value() {
        let key = key();
        let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
            (HTTPS, vec![(USERNAME, "bot"), (PASSWORD, PASSWORD_CANARY), ("extra", EXTRA_CANARY)]),
            (HTTPS, vec![(TOKEN, TOKEN_CANARY), ("extra", EXTRA_CANARY)]),
            (SSH, vec![(IDENTITY, key.as_str()), (KNOWN_HOSTS, KNOWN), ("extra", EXTRA_CANARY)]),
        ];
        for (u, data) in cases {
            let creds = GitCredentials::from_secret(&labelled(&data), &url(u))
                .unwrap_or_else(|e| panic!("{e}"));
            let debug = format!("{creds:?}");
            let redactor = creds.redactor();
            for (k, v) in &data {
                if PUBLIC_KEYS.contains(k) {
                    continue;
                }
                assert!(!debug.contains(v) && !debug.contains(KEY_BODY), "{debug}");
                let out = redactor.redact(&format!("remote said: bad credentials {v}"));
                assert!(!out.contains(v), "{out}");
            }
            if matches!(creds.auth, GitAuth::Ssh(_)) {
                let out = redactor.redact(&format!("invalid key line {KEY_BODY}"));
                assert!(!out.contains(KEY_BODY), "{out}");
            }
        }
    }

    #[test]
    fn identity_depends_on_every_input() {
        let data = |pairs: &[(&str, &str)]| -> BTreeMap<String, Vec<u8>> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec())).collect()
        };
        let base = credential_identity("ns", "s", &data(&[("username", "a"), ("password", "b")]));
        assert_eq!(base.len(), 64);
        assert!(base.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        // Stable, and independent of insertion order.
        assert_eq!(
            base,
            credential_identity("ns", "s", &data(&[("password", "b"), ("username", "a")]))
        );
        let different = [
            credential_identity("ns2", "s", &data(&[("username", "a"), ("password", "b")])),
            credential_identity("ns", "s2", &data(&[("username", "a"), ("password", "b")])),
            credential_identity("ns", "s", &data(&[("username", "a"), ("password", "c")])),
            credential_identity("ns", "s", &data(&[("username", "ab"), ("password", "")])),
            credential_identity("ns", "s", &data(&[("username", "a")])),
            credential_identity("n", "ss", &data(&[("username", "a"), ("password", "b")])),
        ];
        for other in different {
            assert_ne!(base, other);
        }
        let secret = labelled(&[(TOKEN, TOKEN_CANARY)]);
        let creds =
            GitCredentials::from_secret(&secret, &url(HTTPS)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            creds.identity,
            credential_identity("default", "git-creds", &secret_values(&secret))
        );
        assert_ne!(creds.identity, ANONYMOUS_IDENTITY);
    }
}
