//! Host-bound credentials: a Secret declares, in its `url` key, the URL prefix its credentials
//! were made for, and they are sent only to repositories within it. Argo CD's repository
//! credential templates (`url` as a prefix) are the precedent for the key.
//!
//! Matching ([`CredentialScope::covers`]): scheme, lower-cased host and effective port exactly
//! (`oci://` counts as `https://`, which is how the OCI distribution API is served; a missing port
//! is the scheme's default), then the path as a prefix on a `/` boundary: `https://h/charts`
//! covers `https://h/charts` and `https://h/charts/stable`, not `https://h/charts-evil`. A target
//! path holding a `.` or `..` segment (also percent-encoded) is never covered, so
//! `https://h/charts/../private` cannot climb out. A declared URL may not hold a user name,
//! password, query or fragment.
//!
//! Which Secrets need the key ([`check_declared`]):
//! - **Chart repository credentials** (`username`/`password` Secrets named by
//!   `spec.source.render.helm.chart.secretRef`): always. The chart's repository and the Secret's
//!   name come from the Application, which a Git author writes (`.ksync.yaml` discovery), so a
//!   Secret without a declared URL would go wherever that author points it; it is refused.
//!   dockerconfigjson Secrets are already host-bound by their `auths` keys and need no `url`.
//! - **Git credentials** (`spec.git.auth`, `spec.imageUpdate.secretRef`): when the key is present
//!   the Repository URL must be within it. Without it they are bound to the Repository URL's own
//!   scheme, host and port, as before: that URL and the Secret are named together in the
//!   Repository, which Git authors cannot change.
//!
//! Every refusal is an `AuthenticationFailure` naming the Secret and the `url` key. Pure: no I/O.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Secret;
use kuvryn_sync_api::FailureReason;

use crate::credentials::secret_values;
use crate::helm_values::{RegistryCredentials, registry_credentials};
use crate::image_policy::{DOCKER_CONFIG_JSON_TYPE, registry_login};

/// The Secret key declaring the URL prefix a credential is for.
pub const URL_KEY: &str = "url";

/// A declared credential scope: scheme, host, port and path prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialScope {
    scheme: String,
    host: String,
    port: u16,
    /// Without a trailing `/`; empty for the whole host.
    path: String,
}

impl fmt::Display for CredentialScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}{}/", self.scheme, self.host, self.port, self.path)
    }
}

/// Why a credential may not be used for a target.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialScopeError {
    /// The Secret has no `url` key but must declare one.
    #[error(
        "Secret {secret} has no url key: {what} are sent only to the URL prefix their Secret declares; add url: <scheme://host[:port]/path> naming {target} or a prefix of it"
    )]
    Missing {
        /// `namespace/name`.
        secret: String,
        /// What the credentials are used as.
        what: &'static str,
        /// The target they would be sent to.
        target: String,
    },
    /// The `url` key is not a usable URL.
    #[error("Secret {secret}: key url {problem}; give scheme://host[:port]/path")]
    Invalid {
        /// `namespace/name`.
        secret: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The target is not within the declared URL.
    #[error(
        "Secret {secret}: its url key declares the credentials for {declared}, which does not cover {target}; they are not sent there. Use a Secret made for that host, or correct the url key"
    )]
    NotCovered {
        /// `namespace/name`.
        secret: String,
        /// The declared scope, canonical.
        declared: String,
        /// The target.
        target: String,
    },
}

impl CredentialScopeError {
    /// Always `AuthenticationFailure`.
    pub fn reason(&self) -> FailureReason {
        FailureReason::AuthenticationFailure
    }
}

/// The parts of `scheme://[user@]host[:port][/path]`, lower-cased where case does not matter.
#[derive(Debug)]
struct Parts {
    scheme: String,
    user: bool,
    host: String,
    port: u16,
    path: String,
    query_or_fragment: bool,
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "https" => Some(443),
        "http" => Some(80),
        "ssh" => Some(22),
        "git" => Some(9418),
        _ => None,
    }
}

fn parts(url: &str) -> Result<Parts, &'static str> {
    let (scheme, rest) = url.split_once("://").ok_or("is not a URL with a scheme")?;
    let mut scheme = scheme.to_ascii_lowercase();
    if scheme == "oci" {
        scheme = "https".to_owned();
    }
    let port_default =
        default_port(&scheme).ok_or("has a scheme other than https, http, oci, ssh or git")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, hostport) = match authority.rsplit_once('@') {
        Some((_, hostport)) => (true, hostport),
        None => (false, authority),
    };
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (addr, after) = v6.split_once(']').ok_or("has an unclosed [ in the host")?;
        (format!("[{}]", addr.to_ascii_lowercase()), after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_ascii_lowercase(), Some(p)),
            None => (hostport.to_ascii_lowercase(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err("has no host");
    }
    let port = match port {
        None | Some("") => port_default,
        Some(p) => p.parse::<u16>().map_err(|_| "has a port that is not a number up to 65535")?,
    };
    let path_end = tail.find(['?', '#']).unwrap_or(tail.len());
    Ok(Parts {
        scheme,
        user,
        host: host.trim_end_matches('.').to_owned(),
        port,
        path: tail[..path_end].to_owned(),
        query_or_fragment: path_end < tail.len(),
    })
}

/// Whether a path segment is `.` or `..`, also percent-encoded.
fn dot_segment(segment: &str) -> bool {
    let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
    decoded == "." || decoded == ".."
}

impl CredentialScope {
    /// Parse a declared `url`.
    pub fn parse(declared: &str) -> Result<Self, &'static str> {
        let declared = declared.trim();
        let parts = parts(declared)?;
        if parts.user {
            return Err("holds a user name; keep user names in the username key");
        }
        if parts.query_or_fragment {
            return Err("holds a query or fragment");
        }
        if parts.path.split('/').any(dot_segment) {
            return Err("holds a . or .. path segment");
        }
        Ok(Self {
            scheme: parts.scheme,
            host: parts.host,
            port: parts.port,
            path: parts.path.trim_end_matches('/').to_owned(),
        })
    }

    /// Whether credentials of this scope may be sent for `target` (a repository, registry or
    /// Git URL; scp-like `user@host:path` counts as `ssh://host/path`).
    pub fn covers(&self, target: &str) -> bool {
        let normalised;
        let target = match scp_as_ssh(target) {
            Some(url) => {
                normalised = url;
                normalised.as_str()
            }
            None => target,
        };
        let Ok(parts) = parts(target) else { return false };
        if parts.scheme != self.scheme || parts.host != self.host || parts.port != self.port {
            return false;
        }
        if parts.path.split('/').any(dot_segment) {
            return false;
        }
        match parts.path.strip_prefix(self.path.as_str()) {
            Some(rest) => rest.is_empty() || rest.starts_with('/'),
            None => false,
        }
    }
}

/// `user@host:path` as `ssh://user@host/path`; `None` for anything with a scheme.
fn scp_as_ssh(target: &str) -> Option<String> {
    if target.contains("://") {
        return None;
    }
    let (authority, path) = target.split_once(':')?;
    let path = path.trim_start_matches('/');
    Some(format!("ssh://{authority}/{path}"))
}

/// Check `target` against the `url` key of Secret `secret` (its decoded `data`). With
/// `required`, a Secret without the key is refused; otherwise it passes (the caller binds the
/// credentials to the target's own host).
pub fn check_declared(
    secret: &str,
    data: &BTreeMap<String, Vec<u8>>,
    target: &str,
    required: bool,
    what: &'static str,
) -> Result<(), CredentialScopeError> {
    let declared = data
        .get(URL_KEY)
        .map(|bytes| std::str::from_utf8(bytes).map(str::trim))
        .filter(|text| !matches!(text, Ok("")));
    let declared = match declared {
        None if required => {
            return Err(CredentialScopeError::Missing {
                secret: secret.to_owned(),
                what,
                target: target.to_owned(),
            });
        }
        None => return Ok(()),
        Some(Err(_)) => {
            return Err(CredentialScopeError::Invalid {
                secret: secret.to_owned(),
                problem: "is not UTF-8 text",
            });
        }
        Some(Ok(text)) => text,
    };
    let scope = CredentialScope::parse(declared)
        .map_err(|problem| CredentialScopeError::Invalid { secret: secret.to_owned(), problem })?;
    if scope.covers(target) {
        Ok(())
    } else {
        Err(CredentialScopeError::NotCovered {
            secret: secret.to_owned(),
            declared: scope.to_string(),
            target: target.to_owned(),
        })
    }
}

/// The credentials `secret` holds for chart repository `repository` (`https://…` or
/// `oci://…`), bound to its host: a `kubernetes.io/dockerconfigjson` Secret by the `auths` entry
/// of the repository's `host[:port]`, any other by its `username` and `password` and a `url` key
/// that must cover the repository (the Application naming both is written by Git authors). The
/// message names the Secret and the key; never a value.
pub fn chart_credentials(secret: &Secret, repository: &str) -> Result<RegistryCredentials, String> {
    let name = secret.metadata.name.as_deref().unwrap_or_default();
    let id = format!("{}/{name}", secret.metadata.namespace.as_deref().unwrap_or_default());
    if secret.type_.as_deref() == Some(DOCKER_CONFIG_JSON_TYPE) {
        let host = authority_host(repository)
            .ok_or_else(|| format!("Secret {id}: cannot tell the host of the chart repository"))?;
        return match registry_login(secret, &host) {
            Ok(Some(login)) => {
                Ok(RegistryCredentials { username: login.username, password: login.password })
            }
            Ok(None) => Err(format!(
                "Secret {id}: its .dockerconfigjson auths has no entry for {host}; registry \
                 credentials are sent only to the hosts their auths keys name"
            )),
            Err(err) => Err(err.to_string()),
        };
    }
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    let data = secret_values(secret);
    let credentials = registry_credentials(&id, &labels, &data).map_err(|e| e.to_string())?;
    check_declared(&id, &data, repository, true, "chart repository credentials")
        .map_err(|e| e.to_string())?;
    Ok(credentials)
}

/// `host[:port]` of `scheme://[user@]host[:port]/…`, lower-cased, as `auths` keys name it.
fn authority_host(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheme_host_and_port_match_exactly_and_paths_on_a_slash_boundary() {
        let cases: &[(&str, &str, bool)] = &[
            ("https://charts.example.com", "https://charts.example.com/stable", true),
            ("https://charts.example.com/", "https://charts.example.com", true),
            ("https://charts.example.com/stable", "https://charts.example.com/stable", true),
            ("https://charts.example.com/stable", "https://charts.example.com/stable/", true),
            ("https://charts.example.com/stable/", "https://charts.example.com/stable/x", true),
            ("https://charts.example.com/stable", "https://charts.example.com/stable-evil", false),
            ("https://charts.example.com/stable", "https://charts.example.com/other", false),
            ("https://charts.example.com/stable", "https://charts.example.com/stable/../x", false),
            (
                "https://charts.example.com/stable",
                "https://charts.example.com/stable/%2E%2E/x",
                false,
            ),
            ("https://Charts.Example.COM", "https://charts.example.com/x", true),
            ("HTTPS://charts.example.com", "https://charts.example.com/x", true),
            ("https://charts.example.com", "https://charts.example.com:443/x", true),
            ("https://charts.example.com:8443", "https://charts.example.com/x", false),
            ("https://charts.example.com", "http://charts.example.com/x", false),
            ("https://charts.example.com", "https://charts.example.com.evil.net/x", false),
            ("https://charts.example.com", "https://evil.net/charts.example.com", false),
            ("https://charts.example.com", "https://charts.example.com@evil.net/x", false),
            ("https://a.example.com", "https://b.example.com", false),
            ("oci://registry.example.com/charts", "oci://registry.example.com/charts", true),
            ("https://registry.example.com", "oci://registry.example.com/charts", true),
            ("oci://registry.example.com/charts", "oci://registry.example.com/other", false),
            ("oci://127.0.0.1:5000", "oci://127.0.0.1:5001/charts", false),
            ("https://[::1]:8443/git", "https://[::1]:8443/git/app.git", true),
            ("ssh://git.example.com/org", "git@git.example.com:org/app.git", true),
            ("ssh://git.example.com/org", "git@git.example.com:other/app.git", false),
            ("ssh://git.example.com:2222/org", "ssh://git@git.example.com:2222/org/a", true),
        ];
        for (declared, target, want) in cases {
            let scope = CredentialScope::parse(declared).expect(declared);
            assert_eq!(scope.covers(target), *want, "{declared} covers {target}");
        }
    }

    fn secret(type_: Option<&str>, data: &[(&str, &str)]) -> Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "creds", "namespace": "team",
                         "labels": {kuvryn_sync_api::keys::REGISTRY_CREDENTIALS: "true"}},
            "type": type_,
            "stringData": data.iter().copied().collect::<BTreeMap<_, _>>(),
        }))
        .expect("secret")
    }

    #[test]
    fn chart_credentials_go_only_to_the_declared_url_or_the_auths_host() {
        let a = "https://a.example.com/charts";
        let b = "https://b.example.com/charts";
        let basic = [("username", "bot"), ("password", "canary-pw-51d0")];
        let with_url = [basic[0], basic[1], ("url", "https://a.example.com/charts/")];
        let oci_url = [basic[0], basic[1], ("url", "oci://a.example.com:5000/team")];
        let auths = r#"{"auths": {"a.example.com:5000": {"username": "bot", "password": "canary-pw-51d0"}}}"#;
        let docker = [(".dockerconfigjson", auths)];
        let json = Some(DOCKER_CONFIG_JSON_TYPE);
        // (secret type, data, repository, expected: Ok or a piece of the message)
        type Case<'a> = (Option<&'a str>, &'a [(&'a str, &'a str)], &'a str, Result<(), &'a str>);
        let cases: &[Case] = &[
            (None, &with_url, a, Ok(())),
            (None, &with_url, "https://a.example.com/charts/stable", Ok(())),
            (None, &with_url, b, Err("does not cover https://b.example.com/charts")),
            (None, &with_url, "https://a.example.com/charts-other", Err("url key")),
            (None, &basic, a, Err("has no url key")),
            (None, &oci_url, "oci://a.example.com:5000/team/charts", Ok(())),
            (None, &oci_url, "oci://a.example.com:5001/team", Err("does not cover")),
            (json, &docker, "oci://a.example.com:5000/team", Ok(())),
            (json, &docker, "oci://A.example.com:5000/other", Ok(())),
            (
                json,
                &docker,
                "oci://b.example.com:5000/team",
                Err("no entry for b.example.com:5000"),
            ),
            (json, &docker, "oci://a.example.com/team", Err("no entry for a.example.com")),
        ];
        for (type_, data, repository, want) in cases {
            let got = chart_credentials(&secret(*type_, data), repository);
            match (got, want) {
                (Ok(creds), Ok(())) => assert_eq!(creds.username, "bot", "{repository}"),
                (Err(message), Err(part)) => {
                    assert!(message.contains(part), "{repository}: {message}");
                    assert!(message.contains("team/creds"), "{message}");
                    assert!(!message.contains("canary-pw-51d0"), "{message}");
                }
                (got, want) => panic!("{repository}: {:?}, expected {want:?}", got.map(|_| ())),
            }
        }
    }

    #[test]
    fn declared_urls_must_be_plain_prefixes() {
        for (bad, why) in [
            ("charts.example.com", "scheme"),
            ("ftp://charts.example.com", "scheme other"),
            ("https://user@charts.example.com", "user name"),
            ("https://charts.example.com/?x=1", "query"),
            ("https://charts.example.com/#x", "query or fragment"),
            ("https://charts.example.com:99999", "port"),
            ("https://", "no host"),
            ("https://charts.example.com/a/../b", ".."),
        ] {
            let err = CredentialScope::parse(bad).expect_err(bad);
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn secrets_without_the_key_are_refused_only_where_required_and_errors_name_the_key() {
        let none = BTreeMap::new();
        let for_a: BTreeMap<String, Vec<u8>> =
            [(URL_KEY.to_owned(), b"https://a.example.com/charts\n".to_vec())].into();
        let target_a = "https://a.example.com/charts/stable";
        let target_b = "https://b.example.com/charts";
        assert!(check_declared("ns/s", &none, target_b, false, "Git credentials").is_ok());
        let missing = check_declared("ns/s", &none, target_b, true, "chart repository credentials")
            .expect_err("required");
        assert_eq!(missing.reason(), FailureReason::AuthenticationFailure);
        assert!(missing.to_string().contains("has no url key"), "{missing}");
        assert!(check_declared("ns/s", &for_a, target_a, true, "x").is_ok());
        let other = check_declared("ns/s", &for_a, target_b, false, "x").expect_err("B");
        let message = other.to_string();
        assert!(message.contains("url key") && message.contains(target_b), "{message}");
        assert!(message.contains("https://a.example.com:443/charts/"), "{message}");
        let invalid: BTreeMap<String, Vec<u8>> =
            [(URL_KEY.to_owned(), b"a.example.com".to_vec())].into();
        let err = check_declared("ns/s", &invalid, target_a, true, "x").expect_err("invalid");
        assert!(err.to_string().contains("key url"), "{err}");
    }
}
