//! Git URL rules for `spec.git.url`.
//!
//! Accepted forms:
//! - `https://[user@]host[:port]/path` and `http://…` (a user name alone is fine, a password is
//!   not: credentials belong in a Secret labelled `sync.kuvryn.io/git-credentials: "true"`);
//! - `ssh://[user@]host[:port]/path`;
//! - the scp-like form `user@host:path` (Git reads `x:y` as ssh only when no `/` comes before the
//!   first `:`; we additionally require the `user@`, as the CRD's own validation rule does, so a
//!   plain `host:path` — which also covers `C:\repo` and `localhost:repo` — is refused with a hint);
//! - `git://host[:port]/path`.
//!
//! Refused, each with its own error naming the rule and what to do: empty URLs, URLs longer than
//! [`MAX_URL_LEN`], whitespace or control characters, anything starting with `-` (it could become
//! a command-line option of git or ssh, docs/decisions.md#threats) and a user, host or scp path starting with
//! `-`, filesystem paths (absolute, relative, `./x`, `~/x`, backslashes), `file://`, the
//! `<transport>::<address>` remote-helper form (`ext::` runs programs), any other scheme, and
//! passwords embedded in the URL (for every scheme, not only http(s)).
//!
//! Parsing is hand-written: the `url` crate does not know the scp-like form and would accept
//! everything we refuse, and the rules here are the point of the module. Pure: no I/O.

use std::fmt;

/// Longest URL accepted (the CRD's `maxLength`).
pub const MAX_URL_LEN: usize = 2048;

/// What to tell users to use instead.
const USE_INSTEAD: &str = "use https, http, ssh or git";

/// The field every error names.
const FIELD: &str = "spec.git.url";

/// Which transport a [`GitUrl`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GitUrlKind {
    /// `https://`.
    Https,
    /// `http://` (no transport encryption; allowed by the reference).
    Http,
    /// `ssh://`.
    Ssh,
    /// scp-like `user@host:path`, fetched over ssh.
    Scp,
    /// `git://` (the unauthenticated git daemon protocol).
    Git,
}

impl GitUrlKind {
    /// Whether this kind fetches over ssh (both `ssh://` and the scp-like form).
    pub fn is_ssh(self) -> bool {
        matches!(self, GitUrlKind::Ssh | GitUrlKind::Scp)
    }

    /// Whether this kind fetches over http or https.
    pub fn is_http(self) -> bool {
        matches!(self, GitUrlKind::Https | GitUrlKind::Http)
    }

    /// The scheme as written in URLs; `ssh` for the scp-like form.
    pub fn scheme(self) -> &'static str {
        match self {
            GitUrlKind::Https => "https",
            GitUrlKind::Http => "http",
            GitUrlKind::Ssh | GitUrlKind::Scp => "ssh",
            GitUrlKind::Git => "git",
        }
    }

    /// The port used when the URL names none.
    pub fn default_port(self) -> u16 {
        match self {
            GitUrlKind::Https => 443,
            GitUrlKind::Http => 80,
            GitUrlKind::Ssh | GitUrlKind::Scp => 22,
            GitUrlKind::Git => 9418,
        }
    }
}

/// A Git remote URL that passed every rule of this module. It never holds a password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitUrl {
    /// Transport.
    pub kind: GitUrlKind,
    /// Host name or IP address; IPv6 addresses keep their brackets (`[::1]`).
    pub host: String,
    /// Port when the URL names one.
    pub port: Option<u16>,
    /// Repository path on the host: starts with `/` for URL forms, as written after the `:` for
    /// the scp-like form. Query strings stay part of the path.
    pub path: String,
    /// User name from the URL, if any.
    pub user: Option<String>,
    /// The URL as configured (safe to show: it passed the no-password rule).
    pub original: String,
}

/// Where credentials may be sent: transport scheme, lower-cased host and effective port. Two
/// URLs with equal `CredentialHost`s may share credentials; a redirect or a chart URL with a
/// different one must not receive them (docs/decisions.md#threats).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CredentialHost {
    /// `https`, `http`, `ssh` or `git`.
    pub scheme: &'static str,
    /// Lower-cased host.
    pub host: String,
    /// Port, with the scheme's default filled in.
    pub port: u16,
}

impl fmt::Display for CredentialHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

impl GitUrl {
    /// Parse and check `input` against every rule of this module.
    pub fn parse(input: &str) -> Result<GitUrl, UrlError> {
        parse(input)
    }

    /// The identity credentials are bound to: send them only to URLs with the same identity.
    pub fn credential_host(&self) -> CredentialHost {
        CredentialHost {
            scheme: self.kind.scheme(),
            host: self.host.to_ascii_lowercase(),
            port: self.port.unwrap_or_else(|| self.kind.default_port()),
        }
    }

    /// Whether `other` may receive the credentials configured for `self`.
    pub fn same_credential_host(&self, other: &GitUrl) -> bool {
        self.credential_host() == other.credential_host()
    }
}

impl fmt::Display for GitUrl {
    /// A canonical form built from the parsed parts; it has no password field to print.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kind == GitUrlKind::Scp {
            let user = self.user.as_deref().unwrap_or_default();
            return write!(f, "{user}@{}:{}", self.host, self.path);
        }
        write!(f, "{}://", self.kind.scheme())?;
        if let Some(user) = &self.user {
            write!(f, "{user}@")?;
        }
        f.write_str(&self.host)?;
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        f.write_str(&self.path)
    }
}

impl std::str::FromStr for GitUrl {
    type Err = UrlError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

/// Which part of a URL an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UrlPart {
    /// The user name.
    User,
    /// The host.
    Host,
    /// The repository path.
    Path,
}

impl fmt::Display for UrlPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UrlPart::User => "user name",
            UrlPart::Host => "host",
            UrlPart::Path => "repository path",
        })
    }
}

/// Why a URL was refused. The Display text is the `Ready=False/ValidationFailure` message; it
/// never contains a password (the offending URL itself is never echoed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// Nothing configured.
    #[error("{FIELD}: empty; set a Git remote URL ({USE_INSTEAD})")]
    Empty,
    /// Longer than [`MAX_URL_LEN`].
    #[error("{FIELD}: longer than {MAX_URL_LEN} characters")]
    TooLong,
    /// Starts with `-`.
    #[error(
        "{FIELD}: must not start with \"-\" (it could be read as a command-line option); {USE_INSTEAD}"
    )]
    LeadingDash,
    /// Whitespace or a control character anywhere.
    #[error("{FIELD}: contains whitespace or control characters; remove them")]
    WhitespaceOrControl,
    /// `file://`.
    #[error("{FIELD}: file:// URLs are refused (filesystem access); {USE_INSTEAD}")]
    FileScheme,
    /// An absolute, relative or home-relative filesystem path.
    #[error("{FIELD}: filesystem paths are refused (filesystem access); {USE_INSTEAD}")]
    FilesystemPath,
    /// `<transport>::<address>`.
    #[error(
        "{FIELD}: \"{transport}::\" remote-helper URLs are refused (they can run programs); {USE_INSTEAD}"
    )]
    RemoteHelper {
        /// The transport before `::` (at most 32 characters are kept).
        transport: String,
    },
    /// A scheme other than https, http, ssh or git.
    #[error("{FIELD}: scheme \"{scheme}\" is not supported; {USE_INSTEAD}")]
    UnsupportedScheme {
        /// The scheme as written (at most 32 characters are kept).
        scheme: String,
    },
    /// `host:path` without a user.
    #[error(
        "{FIELD}: scp-like URLs need a user (user@host:path); write git@host:path or ssh://host/path"
    )]
    ScpWithoutUser,
    /// A password in the URL.
    #[error(
        "{FIELD}: URLs must not embed a password; put the credentials in a Secret labelled sync.kuvryn.io/git-credentials: \"true\" and name it in spec.git.auth.secretRef.name"
    )]
    EmbeddedPassword,
    /// `git://` URLs carry no user.
    #[error("{FIELD}: git:// URLs cannot carry a user name; remove it or use https or ssh")]
    UserNotAllowed,
    /// A part is missing.
    #[error("{FIELD}: the {part} is missing")]
    Missing {
        /// The missing part.
        part: UrlPart,
    },
    /// A part starts with `-`.
    #[error(
        "{FIELD}: the {part} must not start with \"-\" (it could be read as a command-line option)"
    )]
    OptionLike {
        /// The offending part.
        part: UrlPart,
    },
    /// A part has characters outside its allowed set.
    #[error("{FIELD}: the {part} has characters that are not allowed")]
    InvalidCharacters {
        /// The offending part.
        part: UrlPart,
    },
    /// The port is not a number from 1 to 65535.
    #[error("{FIELD}: the port must be a number from 1 to 65535")]
    InvalidPort,
}

fn clip(s: &str) -> String {
    s.chars().take(32).collect()
}

fn is_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

fn parse(input: &str) -> Result<GitUrl, UrlError> {
    if input.is_empty() {
        return Err(UrlError::Empty);
    }
    if input.len() > MAX_URL_LEN {
        return Err(UrlError::TooLong);
    }
    if input.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(UrlError::WhitespaceOrControl);
    }
    if input.starts_with('-') {
        return Err(UrlError::LeadingDash);
    }
    if input.starts_with(['/', '.', '~']) || input.contains('\\') {
        return Err(UrlError::FilesystemPath);
    }
    // `<transport>::<address>`: git hands these to `git-remote-<transport>`.
    if let Some((transport, _)) = input.split_once("::")
        && is_scheme(transport)
    {
        return Err(UrlError::RemoteHelper { transport: clip(transport) });
    }
    if let Some((scheme, rest)) = input.split_once("://")
        && is_scheme(scheme)
    {
        let kind = match scheme {
            "https" => GitUrlKind::Https,
            "http" => GitUrlKind::Http,
            "ssh" => GitUrlKind::Ssh,
            "git" => GitUrlKind::Git,
            "file" => return Err(UrlError::FileScheme),
            _ if scheme.eq_ignore_ascii_case("file") => return Err(UrlError::FileScheme),
            _ => return Err(UrlError::UnsupportedScheme { scheme: clip(scheme) }),
        };
        return parse_hierarchical(kind, rest, input);
    }
    parse_scp(input)
}

/// `scheme://[user@]host[:port]/path`, after the `scheme://`.
fn parse_hierarchical(kind: GitUrlKind, rest: &str, original: &str) -> Result<GitUrl, UrlError> {
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (user, host_port) = match authority.rsplit_once('@') {
        Some((userinfo, host_port)) => (Some(check_userinfo(userinfo)?), host_port),
        None => (None, authority),
    };
    if kind == GitUrlKind::Git && user.is_some() {
        return Err(UrlError::UserNotAllowed);
    }
    let (host, port) = split_host_port(host_port)?;
    check_host(host)?;
    if path.is_empty() || path == "/" || !path.starts_with('/') {
        return Err(UrlError::Missing { part: UrlPart::Path });
    }
    Ok(GitUrl {
        kind,
        host: host.to_owned(),
        port,
        path: path.to_owned(),
        user,
        original: original.to_owned(),
    })
}

/// `user@host:path`.
fn parse_scp(input: &str) -> Result<GitUrl, UrlError> {
    // Git's rule: a `/` before the first `:` (or no `:` at all) makes it a local path.
    let colon = input.find(':');
    let slash = input.find('/');
    let Some(colon) = colon else {
        return Err(UrlError::FilesystemPath);
    };
    if slash.is_some_and(|s| s < colon) {
        return Err(UrlError::FilesystemPath);
    }
    // `user@[v6]:path`: the host ends at `]`, not at the first `:`.
    let (userhost, path) = match input.find("@[") {
        Some(at) if at < colon => {
            let close = input[at..].find("]:").map(|i| at + i + 1);
            match close {
                Some(close) => (&input[..close], &input[close + 1..]),
                None => return Err(UrlError::InvalidCharacters { part: UrlPart::Host }),
            }
        }
        _ => (&input[..colon], &input[colon + 1..]),
    };
    let Some((userinfo, host)) = userhost.rsplit_once('@') else {
        return Err(UrlError::ScpWithoutUser);
    };
    let user = check_userinfo(userinfo)?;
    check_host(host)?;
    if path.is_empty() {
        return Err(UrlError::Missing { part: UrlPart::Path });
    }
    if path.starts_with('-') {
        return Err(UrlError::OptionLike { part: UrlPart::Path });
    }
    Ok(GitUrl {
        kind: GitUrlKind::Scp,
        host: host.to_owned(),
        port: None,
        path: path.to_owned(),
        user: Some(user),
        original: input.to_owned(),
    })
}

/// The user part of `userinfo`; a password (`user:password`, or a percent-encoded `:`) is
/// refused.
fn check_userinfo(userinfo: &str) -> Result<String, UrlError> {
    if userinfo.contains(':') || userinfo.to_ascii_lowercase().contains("%3a") {
        return Err(UrlError::EmbeddedPassword);
    }
    if userinfo.is_empty() {
        return Err(UrlError::Missing { part: UrlPart::User });
    }
    if userinfo.starts_with('-') {
        return Err(UrlError::OptionLike { part: UrlPart::User });
    }
    let allowed =
        |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '~' | '%' | '+');
    if !userinfo.chars().all(allowed) {
        return Err(UrlError::InvalidCharacters { part: UrlPart::User });
    }
    Ok(userinfo.to_owned())
}

fn split_host_port(host_port: &str) -> Result<(&str, Option<u16>), UrlError> {
    let (host, port) = if host_port.starts_with('[') {
        match host_port.find(']') {
            Some(close) => {
                let (host, rest) = host_port.split_at(close + 1);
                match rest.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None if rest.is_empty() => (host, None),
                    None => return Err(UrlError::InvalidCharacters { part: UrlPart::Host }),
                }
            }
            None => return Err(UrlError::InvalidCharacters { part: UrlPart::Host }),
        }
    } else {
        match host_port.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.chars().all(|c| c.is_ascii_digit()) => Some(n),
            _ => return Err(UrlError::InvalidPort),
        },
    };
    Ok((host, port))
}

fn check_host(host: &str) -> Result<(), UrlError> {
    if host.is_empty() {
        return Err(UrlError::Missing { part: UrlPart::Host });
    }
    if host.starts_with('-') {
        return Err(UrlError::OptionLike { part: UrlPart::Host });
    }
    let valid = if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        !inner.is_empty() && inner.chars().all(|c| c.is_ascii_hexdigit() || matches!(c, ':' | '.'))
    } else {
        host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    };
    if valid { Ok(()) } else { Err(UrlError::InvalidCharacters { part: UrlPart::Host }) }
}

#[cfg(test)]
mod tests {
    // Table tests spell their row types out.
    #![allow(clippy::type_complexity)]

    use super::*;

    fn ok(input: &str) -> GitUrl {
        match GitUrl::parse(input) {
            Ok(url) => url,
            Err(e) => panic!("{input}: {e}"),
        }
    }

    #[test]
    fn accepts_every_supported_form() {
        use GitUrlKind::*;
        let cases: &[(&str, GitUrlKind, &str, Option<u16>, &str, Option<&str>)] = &[
            (
                "https://github.com/example/platform.git",
                Https,
                "github.com",
                None,
                "/example/platform.git",
                None,
            ),
            (
                "https://bot@git.example.com:8443/a/b.git",
                Https,
                "git.example.com",
                Some(8443),
                "/a/b.git",
                Some("bot"),
            ),
            ("http://127.0.0.1:8080/repo.git", Http, "127.0.0.1", Some(8080), "/repo.git", None),
            (
                "ssh://git@example.com/org/repo.git",
                Ssh,
                "example.com",
                None,
                "/org/repo.git",
                Some("git"),
            ),
            ("ssh://example.com:2222/repo", Ssh, "example.com", Some(2222), "/repo", None),
            ("ssh://git@[::1]:2222/repo", Ssh, "[::1]", Some(2222), "/repo", Some("git")),
            (
                "git@github.com:example/platform.git",
                Scp,
                "github.com",
                None,
                "example/platform.git",
                Some("git"),
            ),
            ("git@[::1]:repo.git", Scp, "[::1]", None, "repo.git", Some("git")),
            (
                "deploy@host:/srv/git/repo.git",
                Scp,
                "host",
                None,
                "/srv/git/repo.git",
                Some("deploy"),
            ),
            ("git://localhost:9418/repo.git", Git, "localhost", Some(9418), "/repo.git", None),
            ("git://example.com/repo", Git, "example.com", None, "/repo", None),
        ];
        for (input, kind, host, port, path, user) in cases {
            let url = ok(input);
            assert_eq!(url.kind, *kind, "{input}");
            assert_eq!(url.host, *host, "{input}");
            assert_eq!(url.port, *port, "{input}");
            assert_eq!(url.path, *path, "{input}");
            assert_eq!(url.user.as_deref(), *user, "{input}");
            assert_eq!(url.original, *input);
            assert_eq!(url.to_string(), *input, "display round-trips");
        }
    }

    #[test]
    fn refuses_with_the_rule_named() {
        use UrlError::*;
        let cases: &[(&str, UrlError)] = &[
            ("", Empty),
            ("/srv/git/repo.git", FilesystemPath),
            ("./repo", FilesystemPath),
            ("../repo", FilesystemPath),
            ("~/repo", FilesystemPath),
            ("repo", FilesystemPath),
            ("dir/repo.git", FilesystemPath),
            ("dir/x:y", FilesystemPath),
            ("C:\\repos\\x", FilesystemPath),
            ("file:///etc/passwd", FileScheme),
            ("FILE:///etc", FileScheme),
            ("ext::sh -c touch% /tmp/pwned", WhitespaceOrControl),
            ("ext::sh%-c%touch", RemoteHelper { transport: "ext".into() }),
            ("fd::17", RemoteHelper { transport: "fd".into() }),
            ("https::example.com/x", RemoteHelper { transport: "https".into() }),
            ("ftp://example.com/x", UnsupportedScheme { scheme: "ftp".into() }),
            ("git+ssh://example.com/x", UnsupportedScheme { scheme: "git+ssh".into() }),
            ("HTTPS://example.com/x", UnsupportedScheme { scheme: "HTTPS".into() }),
            ("-uhttps://x/y", LeadingDash),
            ("--upload-pack=touch /tmp/x", WhitespaceOrControl),
            ("--upload-pack=touch", LeadingDash),
            ("ssh://-oProxyCommand=x/y", OptionLike { part: UrlPart::Host }),
            ("ssh://-oProxyCommand=x@host/y", OptionLike { part: UrlPart::User }),
            ("-oProxyCommand=x@host:y", LeadingDash),
            ("git@-oProxyCommand=x:y", OptionLike { part: UrlPart::Host }),
            ("git@host:-oProxyCommand=x", OptionLike { part: UrlPart::Path }),
            ("https://exa mple.com/x", WhitespaceOrControl),
            ("https://example.com/x\n", WhitespaceOrControl),
            ("https://example.com/x\u{7f}", WhitespaceOrControl),
            ("https://bot:hunter2@example.com/x.git", EmbeddedPassword),
            ("http://:token@example.com/x.git", EmbeddedPassword),
            ("https://bot%3Ahunter2@example.com/x.git", EmbeddedPassword),
            ("ssh://git:pw@example.com/x.git", EmbeddedPassword),
            ("git://user@example.com/x", UserNotAllowed),
            ("github.com:example/repo.git", ScpWithoutUser),
            ("https://", Missing { part: UrlPart::Host }),
            ("https:///x", Missing { part: UrlPart::Host }),
            ("https://example.com", Missing { part: UrlPart::Path }),
            ("https://example.com/", Missing { part: UrlPart::Path }),
            ("git@host:", Missing { part: UrlPart::Path }),
            ("https://@example.com/x", Missing { part: UrlPart::User }),
            ("https://example.com:0/x", InvalidPort),
            ("https://example.com:99999/x", InvalidPort),
            ("https://example.com:+80/x", InvalidPort),
            ("https://exa$mple.com/x", InvalidCharacters { part: UrlPart::Host }),
            ("https://u$er@example.com/x", InvalidCharacters { part: UrlPart::User }),
        ];
        for (input, expected) in cases {
            assert_eq!(GitUrl::parse(input).as_ref(), Err(expected), "{input:?}");
        }
        assert_eq!(GitUrl::parse(&format!("https://h/{}", "a".repeat(MAX_URL_LEN))), Err(TooLong));
    }

    #[test]
    fn messages_name_the_rule_and_the_way_out() {
        let cases: &[(&str, &str)] = &[
            (
                "file:///srv/repo",
                "spec.git.url: file:// URLs are refused (filesystem access); use https, http, ssh or git",
            ),
            (
                "/srv/repo",
                "spec.git.url: filesystem paths are refused (filesystem access); use https, http, ssh or git",
            ),
            (
                "ext::sh",
                "spec.git.url: \"ext::\" remote-helper URLs are refused (they can run programs); use https, http, ssh or git",
            ),
            (
                "https://bot:s3cret-canary@example.com/x",
                "spec.git.url: URLs must not embed a password; put the credentials in a Secret labelled sync.kuvryn.io/git-credentials: \"true\" and name it in spec.git.auth.secretRef.name",
            ),
            (
                "-x",
                "spec.git.url: must not start with \"-\" (it could be read as a command-line option); use https, http, ssh or git",
            ),
        ];
        for (input, message) in cases {
            let err = GitUrl::parse(input).err().map(|e| e.to_string());
            assert_eq!(err.as_deref(), Some(*message), "{input}");
        }
    }

    #[test]
    fn credential_host_is_scheme_host_and_effective_port() {
        let cases: &[(&str, &str)] = &[
            ("https://GitHub.com/a/b", "https://github.com:443"),
            ("https://bot@github.com:443/a/b", "https://github.com:443"),
            ("http://github.com/a/b", "http://github.com:80"),
            ("git@github.com:a/b", "ssh://github.com:22"),
            ("ssh://git@github.com/a/b", "ssh://github.com:22"),
            ("ssh://git@github.com:2222/a/b", "ssh://github.com:2222"),
            ("git://github.com/a/b", "git://github.com:9418"),
        ];
        for (input, identity) in cases {
            assert_eq!(ok(input).credential_host().to_string(), *identity, "{input}");
        }
        let configured = ok("https://github.com/a/b");
        assert!(configured.same_credential_host(&ok("https://github.com:443/other")));
        assert!(!configured.same_credential_host(&ok("https://github.com.evil.example/a")));
        assert!(!configured.same_credential_host(&ok("http://github.com/a/b")));
        assert!(ok("git@h:a").same_credential_host(&ok("ssh://h/a")));
    }

    #[test]
    fn scp_display_and_kind_helpers() {
        let url = ok("git@example.com:org/repo.git");
        assert!(url.kind.is_ssh() && !url.kind.is_http());
        assert_eq!(url.to_string(), "git@example.com:org/repo.git");
        assert_eq!(ok("https://x/y").kind.scheme(), "https");
        let parsed: GitUrl = "ssh://h/r".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.kind, GitUrlKind::Ssh);
    }
}
