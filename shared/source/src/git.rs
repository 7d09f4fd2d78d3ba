//! The Git I/O edge: resolve a revision of a remote and hand out read-only trees of commits,
//! backed by an on-disk cache.
//!
//! - **Cheap polling.** [`GitCache::resolve`] opens one connection, lists the remote's refs
//!   (protocol v2 `ls-refs`, filtered by prefix) and fetches only when the wanted ref points at a
//!   commit the cache does not hold yet. A poll with nothing new makes one ref listing and no
//!   fetch ([`Resolved::fetched`], [`GitCache::stats`]). Fetches are shallow (depth 1). An exact
//!   40-hex commit already in the cache needs no network at all.
//! - **Cache.** One bare repository per `hash(url, cache_identity)`, so two Repositories with
//!   different credentials never share fetched data. Each key is guarded by an in-process mutex and
//!   an exclusive lock file (for several processes); checked-out trees are written once per commit
//!   into a temporary directory, made read-only and renamed into place. Above `max_bytes` the least
//!   recently used trees and repositories are removed (never ones that are locked or in use).
//! - **Checkout limits.** Before a tree is written, its entries are charged to a budget of
//!   paths, bytes, single-file size and depth ([`kuvryn_sync_core::checkout`], set with
//!   [`GitCache::with_limits`]) while walking the object database, blob sizes from object
//!   headers; a tree over a limit (such as a "git bomb" of shared subtrees) is refused
//!   ([`GitError::CheckoutLimit`]) without expanding it and nothing is written.
//! - **Credentials.** https basic auth goes through gix's credential callback, only for the
//!   configured scheme, host and port (a Secret's `url` key is checked against the remote by
//!   [`kuvryn_sync_core::credentials`]), and redirects are not followed; no credential helper or git
//!   configuration from the environment is ever consulted (repositories are opened isolated). ssh
//!   runs the `ssh` program through a generated wrapper with a temporary key file (0600), a
//!   temporary `known_hosts`, strict host-key checking, batch mode, no agent, no user ssh config,
//!   and a cleared environment.
//! - **Errors** are [`GitError`]s whose messages went through a [`Redactor`] holding the
//!   credential values and through [`redact_shapes`](kuvryn_sync_core::redact::redact_shapes).
//!
//! Fetching and ref listing are gix (docs/architecture.md#dependencies). Hand-written here, because no crate does it: the
//! cache layout, locking and eviction, and materialising a tree: bytes exactly as committed (no
//! filters, attributes or line-ending conversion), symlinks kept as symlinks for the later
//! containment checks, submodules as empty directories.

mod fetch;
mod push;
mod ssh;
mod store;

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use kuvryn_sync_api::FailureReason;
use kuvryn_sync_core::redact::Redactor;

pub use push::{PushError, PushOutcome, PushRequest, push_update};
pub use store::{CacheStats, CheckedOutTree, GitCache, TreeIds};

/// Credentials for a Git remote: the form [`kuvryn_sync_core::credentials`] parses from a labelled Secret.
pub use kuvryn_sync_core::credentials::{BasicAuth, GitAuth, SshAuth};

/// The revision that names the remote's default branch (its `HEAD`), used when a Repository
/// sets no `spec.git.revision`.
pub const REMOTE_HEAD: &str = "HEAD";

/// What to resolve or check out.
#[derive(Clone, Debug)]
pub struct FetchRequest {
    /// The remote URL, already validated against the URL rules.
    pub url: String,
    /// Credentials, if the remote needs them.
    pub credentials: Option<GitAuth>,
    /// Identity of the credentials (e.g. Secret namespace/name/resourceVersion); part of the cache
    /// key so different credentials never share fetched data.
    pub cache_identity: String,
    /// A branch, a tag (annotated tags are peeled to their commit), a full ref name, or an exact
    /// 40-hex commit.
    pub revision: String,
    /// Upper bound for one remote interaction.
    pub timeout: Duration,
    /// Extra PEM CA certificates trusted for https, beyond the system roots.
    pub ca_certs_pem: Option<String>,
}

impl FetchRequest {
    /// A request without credentials or extra CAs, with a 60 s timeout.
    pub fn new(url: impl Into<String>, revision: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            credentials: None,
            cache_identity: String::new(),
            revision: revision.into(),
            timeout: Duration::from_secs(60),
            ca_certs_pem: None,
        }
    }

    /// A redactor that masks this request's credential values.
    pub fn redactor(&self) -> Redactor {
        self.credentials.as_ref().map(GitAuth::redactor).unwrap_or_default()
    }
}

/// The outcome of [`GitCache::resolve`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The full 40-hex commit the revision points at.
    pub commit: String,
    /// Whether objects were fetched from the remote for this call.
    pub fetched: bool,
    /// How many ref listings this call made (0 or 1).
    pub refs_listed: u32,
}

/// A failure to resolve or check out; every message is safe to show users.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The remote refused our credentials, asked for ones we do not have, or its host key did not
    /// match.
    #[error("authentication failed for {url}: {message}")]
    Authentication {
        /// The remote, redacted.
        url: String,
        /// What went wrong, redacted.
        message: String,
    },
    /// The revision is neither a branch nor a tag of the remote, nor a commit it serves.
    #[error("revision {revision:?} not found in {url}")]
    RevisionNotFound {
        /// The wanted revision, redacted.
        revision: String,
        /// The remote, redacted.
        url: String,
    },
    /// The revision is not a valid branch, tag or commit name.
    #[error("invalid revision {revision:?}: {rule}")]
    InvalidRevision {
        /// The revision, redacted.
        revision: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// The remote could not be reached or did not answer in time, or the fetch failed.
    #[error("fetching {url} failed: {message}")]
    Remote {
        /// The remote, redacted.
        url: String,
        /// What went wrong, redacted.
        message: String,
    },
    /// The commit's tree breaks a checkout limit ([`kuvryn_sync_core::checkout`]); nothing was
    /// written.
    #[error("checking out commit {commit} refused: {message}")]
    CheckoutLimit {
        /// The commit.
        commit: String,
        /// Which limit, its flag and the path reached, redacted.
        message: String,
    },
    /// The local cache could not be used.
    #[error("git cache error: {message}")]
    Cache {
        /// What went wrong, redacted.
        message: String,
    },
}

impl GitError {
    /// The failure reason for conditions and status.
    pub fn reason(&self) -> FailureReason {
        match self {
            GitError::Authentication { .. } => FailureReason::AuthenticationFailure,
            _ => FailureReason::SourceFailure,
        }
    }

    pub(crate) fn cache(redactor: &Redactor, context: &str, err: impl std::fmt::Display) -> Self {
        GitError::Cache { message: redactor.redact(&format!("{context}: {err}")) }
    }

    pub(crate) fn cache_io(
        redactor: &Redactor,
        context: &str,
        path: &Path,
        err: std::io::Error,
    ) -> Self {
        Self::cache(redactor, &format!("{context} {}", path.display()), err)
    }
}

/// Whether `revision` is an exact full commit id.
fn is_full_commit(revision: &str) -> bool {
    revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Check a branch, tag or ref name before it becomes part of a refspec.
fn validate_revision(revision: &str, redactor: &Redactor) -> Result<(), GitError> {
    let invalid = |rule| GitError::InvalidRevision { revision: redactor.redact(revision), rule };
    if revision.is_empty() {
        return Err(invalid("it is empty"));
    }
    if revision.len() > 255 {
        return Err(invalid("it is longer than 255 characters"));
    }
    if revision.starts_with('-') {
        return Err(invalid("it must not start with '-'"));
    }
    if revision.bytes().any(|b| b.is_ascii_control() || b" ~^:?*[\\".contains(&b)) {
        return Err(invalid("it must not contain spaces, control characters or any of ~^:?*[\\"));
    }
    if revision.contains("..") || revision.contains("@{") || revision.contains("//") {
        return Err(invalid("it must not contain '..', '@{' or '//'"));
    }
    if revision.starts_with('/')
        || revision.ends_with('/')
        || revision.ends_with('.')
        || revision.ends_with(".lock")
    {
        return Err(invalid("it must not start or end with '/', or end with '.' or '.lock'"));
    }
    if revision.split('/').any(|c| c.starts_with('.')) {
        return Err(invalid("no path component may start with '.'"));
    }
    Ok(())
}

/// The cache directory name of a key: hex SHA-256 of the URL and the credential identity.
fn cache_key(url: &str, cache_identity: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update((url.len() as u64).to_be_bytes());
    hasher.update(url.as_bytes());
    hasher.update((cache_identity.len() as u64).to_be_bytes());
    hasher.update(cache_identity.as_bytes());
    hasher.finalize().iter().take(20).map(|b| format!("{b:02x}")).collect()
}

/// A directory path inside the cache root for a key.
fn key_dir(root: &Path, key: &str) -> PathBuf {
    root.join(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_keys_differ_by_identity_and_url_and_do_not_collide_on_concatenation() {
        let a = cache_key("https://h/r.git", "ns/secret-a");
        assert_eq!(a, cache_key("https://h/r.git", "ns/secret-a"));
        assert_ne!(a, cache_key("https://h/r.git", "ns/secret-b"));
        assert_ne!(a, cache_key("https://h/r.gitn", "s/secret-a"));
        assert_eq!(a.len(), 40);
    }

    #[test]
    fn revisions_that_could_be_flags_or_refspec_syntax_are_refused() {
        let redactor = Redactor::new();
        for bad in
            ["", "-main", "--upload-pack=x", "a:b", "a b", "a..b", "main^", "/x", "x/", ".hidden"]
        {
            assert!(validate_revision(bad, &redactor).is_err(), "{bad:?} accepted");
        }
        for good in ["main", "release/1.x", "v1.2.3", "refs/heads/main", "refs/tags/v1"] {
            assert!(validate_revision(good, &redactor).is_ok(), "{good:?} refused");
        }
        assert!(is_full_commit("0123456789abcdef0123456789abcdef01234567"));
        assert!(!is_full_commit("0123456789abcdef"));
    }

    #[test]
    fn reasons_map_to_the_spec() {
        let auth = GitError::Authentication { url: "u".into(), message: "m".into() };
        assert_eq!(auth.reason(), FailureReason::AuthenticationFailure);
        let missing = GitError::RevisionNotFound { revision: "nope".into(), url: "u".into() };
        assert_eq!(missing.reason(), FailureReason::SourceFailure);
        assert!(missing.to_string().contains("nope"));
    }
}
