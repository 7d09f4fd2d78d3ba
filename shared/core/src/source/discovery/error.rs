//! What discovery refuses: one [`DiscoveryError`] per problem, gathered in a [`DiscoveryRefusal`].
//! Messages name the file, the Application, the field and the allowance; tests and users rely on
//! their exact wording.

use std::fmt;

use kuvryn_sync_api::{API_VERSION, FailureReason};

/// One discovery problem. Messages name the file, the Application, the field and the allowance.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    // The Repository itself.
    /// The Repository has no name or namespace.
    #[error("the Repository has no metadata.name or metadata.namespace")]
    InvalidRepository,

    // spec.applicationConfigPaths, checked before any file is read.
    /// A `spec.applicationConfigPaths` entry breaks a path rule.
    #[error("spec.applicationConfigPaths[{index}] {path:?}: {rule}")]
    InvalidConfigPath {
        /// Position in the list.
        index: usize,
        /// The entry (at most 200 characters).
        path: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// A `spec.applicationConfigPaths` entry repeats an earlier one.
    #[error("spec.applicationConfigPaths[{index}] {path:?}: listed more than once")]
    DuplicateConfigPath {
        /// Position of the repeat.
        index: usize,
        /// The entry.
        path: String,
    },

    // Reading a configured file (reported by the I/O layer, or when it is absent).
    /// A configured file that is not the root default does not exist.
    #[error(
        "{path}: listed in spec.applicationConfigPaths but not found at this revision; add the file or remove the entry"
    )]
    ConfigFileMissing {
        /// Configured path.
        path: String,
    },
    /// A symlink on the way leaves the repository (or loops).
    #[error("{path}: resolves through a symlink that leaves the repository or loops; refused")]
    SymlinkEscapes {
        /// Configured path.
        path: String,
    },
    /// A directory or submodule where a file should be.
    #[error("{path}: is not a regular file")]
    NotAFile {
        /// Configured path.
        path: String,
    },
    /// Larger than [`MAX_CONFIG_FILE_BYTES`](super::MAX_CONFIG_FILE_BYTES).
    #[error("{path}: larger than {limit} bytes")]
    FileTooLarge {
        /// Configured path.
        path: String,
        /// The limit.
        limit: usize,
    },

    // The file's shape: YAML, keys, kinds and each spec's decoding.
    /// Not YAML, or more than one document.
    #[error("{path}: not a single valid YAML document: {message}")]
    InvalidYaml {
        /// Configured path.
        path: String,
        /// Parser message (with line and column).
        message: String,
    },
    /// Over a YAML budget (nodes with aliases expanded, depth, documents, bytes).
    #[error("{path}: YAML budget exceeded: {exceeded}")]
    YamlBudget {
        /// Configured path.
        path: String,
        /// Which budget, with its limit.
        exceeded: crate::yaml::Exceeded,
    },
    /// Keys that are not allowed at some place.
    #[error("{path}: unknown {} {} at {at}; allowed: {allowed}", key_or_keys(keys), keys.join(", "))]
    UnknownKeys {
        /// Configured path.
        path: String,
        /// Where (`top level`, `applications[0].metadata`, …).
        at: String,
        /// The unknown keys (each at most 64 characters).
        keys: Vec<String>,
        /// What is allowed there.
        allowed: &'static str,
    },
    /// A value of the wrong type.
    #[error("{path}: {at} must be {expected}")]
    WrongShape {
        /// Configured path.
        path: String,
        /// Where.
        at: String,
        /// What it must be.
        expected: &'static str,
    },
    /// `apiVersion`/`kind` of another kind.
    #[error("{path}: {at} must have apiVersion: {API_VERSION} and kind: Application")]
    WrongKind {
        /// Configured path.
        path: String,
        /// Where.
        at: String,
    },
    /// `spec.source.render.type` missing.
    #[error(
        "{path}: Application {app} has no spec.source.render.type, which is required (yaml, kustomize or helm)"
    )]
    MissingRenderType {
        /// Configured path.
        path: String,
        /// Application name or position.
        app: String,
    },
    /// The spec does not decode.
    #[error("{path}: Application {app} has an invalid spec: {message}")]
    InvalidSpec {
        /// Configured path.
        path: String,
        /// Application name or position.
        app: String,
        /// Decoder message.
        message: String,
    },

    // Each entry against the Repository's rules and the other entries.
    /// `metadata.name` missing.
    #[error("{path}: applications[{index}] has no metadata.name, which is required")]
    MissingName {
        /// Configured path.
        path: String,
        /// Position in the file.
        index: usize,
    },
    /// `metadata.name` is not a DNS subdomain.
    #[error(
        "{path}: Application name {name:?} is not a valid DNS subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)"
    )]
    InvalidName {
        /// Configured path.
        path: String,
        /// The name (at most 253 characters).
        name: String,
    },
    /// `metadata.namespace` of another namespace.
    #[error(
        "{path}: Application {app} sets metadata.namespace {namespace}, but discovered Applications live in the Repository's namespace {repository_namespace}; remove it"
    )]
    ForeignNamespace {
        /// Configured path.
        path: String,
        /// Application name.
        app: String,
        /// What the file says.
        namespace: String,
        /// The Repository's namespace.
        repository_namespace: String,
    },
    /// `spec.source.repositoryRef.name` of another Repository.
    #[error(
        "{path}: Application {app} sets spec.source.repositoryRef.name {repository_ref}, but Repository {repository} may only discover its own Applications; remove it"
    )]
    ForeignRepositoryRef {
        /// Configured path.
        path: String,
        /// Application name.
        app: String,
        /// What the file says.
        repository_ref: String,
        /// The discovering Repository.
        repository: String,
    },
    /// `spec.serviceAccountName` other than the Repository's.
    #[error(
        "{path}: Application {app} sets spec.serviceAccountName {service_account}, but Repository {repository} only allows spec.applicationServiceAccountName {allowed}; remove it or set it to {allowed}"
    )]
    ForeignServiceAccount {
        /// Configured path.
        path: String,
        /// Application name.
        app: String,
        /// What the file says.
        service_account: String,
        /// The Repository's `applicationServiceAccountName`.
        allowed: String,
        /// The discovering Repository.
        repository: String,
    },
    /// `spec.serviceAccountName` while the Repository sets none.
    #[error(
        "{path}: Application {app} sets spec.serviceAccountName {service_account}, but Repository {repository} sets no spec.applicationServiceAccountName, so discovered Applications use the controller's default; remove it"
    )]
    ServiceAccountNotAllowed {
        /// Configured path.
        path: String,
        /// Application name.
        app: String,
        /// What the file says.
        service_account: String,
        /// The discovering Repository.
        repository: String,
    },
    /// A field that needs an allowance the Repository does not give.
    #[error(
        "{path}: Application {app} sets {field}, which needs spec.applicationPolicy.{allowance} on Repository {repository}"
    )]
    NotAllowed {
        /// Configured path.
        path: String,
        /// Application name.
        app: String,
        /// The field (and value).
        field: &'static str,
        /// The `applicationPolicy` allowance.
        allowance: &'static str,
        /// The discovering Repository.
        repository: String,
    },
    /// A label or annotation in our domain.
    #[error(
        "{path}: Application {app} sets {what} {key}; the sync.kuvryn.io/ domain is reserved and cannot come from Git"
    )]
    ReservedMetadata {
        /// Configured path.
        path: String,
        /// Application name.
        app: String,
        /// `label` or `annotation`.
        what: &'static str,
        /// The key.
        key: String,
    },
    /// The name appears twice.
    #[error(
        "{path}: Application {app} is also defined in {first_path}; names must be unique across all configured files"
    )]
    DuplicateName {
        /// Configured path of the repeat.
        path: String,
        /// Application name.
        app: String,
        /// Configured path of the first definition.
        first_path: String,
    },

    // Existing Applications discovery would take over (docs/decisions.md#ruling-15).
    /// A hand-made Application has the name.
    #[error(
        "{path}: Application {app} already exists in namespace {namespace} without the sync.kuvryn.io/repository label; discovery never takes over an Application it did not create: rename the entry or delete the existing Application"
    )]
    HandMadeCollision {
        /// Configured path.
        path: String,
        /// Application name.
        app: String,
        /// The namespace.
        namespace: String,
    },
    /// Another Repository's Application has the name.
    #[error(
        "{path}: Application {app} already exists and belongs to Repository {owner}; discovery never takes over another Repository's Application: rename the entry"
    )]
    OwnedByOtherRepository {
        /// Configured path.
        path: String,
        /// Application name.
        app: String,
        /// The owning Repository.
        owner: String,
    },
}

impl DiscoveryError {
    /// The Ready condition reason (docs/decisions.md#ruling-1).
    pub fn reason(&self) -> FailureReason {
        FailureReason::ValidationFailure
    }
}

/// Discovery refused: one or more [`DiscoveryError`]s; nothing may change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveryRefusal {
    /// Every problem found, in file order.
    pub errors: Vec<DiscoveryError>,
}

impl DiscoveryRefusal {
    /// The Ready condition reason: `ValidationFailure` (docs/decisions.md#ruling-1).
    pub fn reason(&self) -> FailureReason {
        FailureReason::ValidationFailure
    }
}

impl fmt::Display for DiscoveryRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("discovery refused, no Application was changed: ")?;
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for DiscoveryRefusal {}

impl From<DiscoveryError> for DiscoveryRefusal {
    fn from(error: DiscoveryError) -> Self {
        DiscoveryRefusal { errors: vec![error] }
    }
}

/// `key` or `keys`, for [`DiscoveryError::UnknownKeys`].
fn key_or_keys(keys: &[String]) -> &'static str {
    if keys.len() == 1 { "key" } else { "keys" }
}
