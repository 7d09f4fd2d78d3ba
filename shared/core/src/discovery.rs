//! `.ksync.yaml` discovery: Git write access proposing Applications, checked against what the
//! Repository allows. Pure: the I/O layer reads the files and lists the Applications, this module
//! decides.
//!
//! # Flow
//! 1. [`validate_config_paths`] checks `spec.applicationConfigPaths` **before** any file is read:
//!    each entry is a repository-relative path (no leading `/`, no `..`, `.` or empty components,
//!    no backslashes or control characters) whose file name is exactly `.ksync.yaml`, and entries
//!    are unique. An empty list means the root `.ksync.yaml`.
//! 2. The I/O layer reads each path from the commit's tree, following symlinks with
//!    [`resolve_within_root`] (at most [`MAX_SYMLINK_HOPS`] hops) and reporting
//!    [`DiscoveryError::SymlinkEscapes`] when one leaves the repository,
//!    [`DiscoveryError::NotAFile`] for a directory or submodule, and files larger than
//!    [`MAX_CONFIG_FILE_BYTES`] as [`DiscoveryError::FileTooLarge`] without reading them.
//! 3. [`parse_config_file`] accepts an `applications:` list or one full Application
//!    (`apiVersion: sync.kuvryn.io/v1alpha1`, `kind: Application`). Unknown keys at the top level,
//!    in an entry or in its metadata are refused, naming them (`status`, `ownerReferences`,
//!    `finalizers`, … cannot come from Git).
//! 4. [`plan_discovery`] checks every entry and compares with the Applications in the namespace.
//!    [`discover`] runs 1, 3 and 4 together and reports every problem at once.
//!
//! # Rules for discovered Applications
//! - `metadata.name` is required and must be a DNS subdomain; names are unique across all files.
//! - `metadata.namespace`, when set, must be the Repository's namespace.
//! - `spec.source.repositoryRef.name` defaults to the discovering Repository; naming another is a
//!   refusal (DESIGN ruling 15).
//! - `spec.source.render.type` is required.
//! - `spec.serviceAccountName` may only be the Repository's `applicationServiceAccountName` and
//!   defaults to it; when the Repository sets none, no service account may be set.
//! - `spec.sync.automatic`, `spec.sync.prune`, `spec.sync.conflictPolicy: adopt` and
//!   `spec.deletionPolicy: DeleteManagedResources` need `allowAutomatic`, `allowPrune`,
//!   `allowAdopt` and `allowDeleteManagedResources` in `spec.applicationPolicy`.
//! - Labels and annotations in the `sync.kuvryn.io/` domain are refused: approvals, rollback
//!   requests and ownership cannot come from Git.
//! - An existing Application of the same name that is hand-made (no `sync.kuvryn.io/repository`
//!   label) or owned by another Repository is a refusal; it is never taken over (ruling 15).
//! - Discovered Applications get the label `sync.kuvryn.io/repository=<repository>` and the
//!   annotation `sync.kuvryn.io/discovered-from=<config path>`.
//! - Applications labelled for this Repository but absent from the files are deleted with
//!   `deletionPolicy: Orphan`, or with their own `deletionPolicy` when the Repository sets
//!   `allowDeleteManagedResources` (ruling 2).
//! - A refusal is all or nothing: no Application is created, changed or deleted, so existing ones
//!   keep the spec they had (trap in DESIGN §4.14). It is `Ready=False/ValidationFailure`.
//! - An Application whose spec, our label and our annotation already match is not updated.
//!
//! # Contract with the I/O layer
//! - Create and update with server-side apply under the controller's field manager, so
//!   annotations others set (approvals, rollback requests) survive; add an ownerReference to the
//!   Repository (`controller: false`, `blockOwnerDeletion: false`) — this module does not set it.
//! - For a [`DeleteAction`] with [`DeleteAction::needs_orphan_patch`], patch
//!   `spec.deletionPolicy` to `Orphan` first, then delete with the `uid` as a precondition.
//! - A configured file missing from the tree is [`ConfigFileRead::Missing`]: the root
//!   `.ksync.yaml` may be absent (no Applications), any other configured path must exist, so a
//!   typo or a move cannot delete every Application (decision where the spec is silent).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

use kuvryn_sync_api::repository::DEFAULT_APPLICATION_CONFIG_PATH;
use kuvryn_sync_api::{
    API_VERSION, Application, ApplicationSpec, ConflictPolicy, DeletionPolicy, FailureReason,
    GROUP, Repository, keys,
};

/// File name every configured path must end with.
pub const CONFIG_FILE_NAME: &str = ".ksync.yaml";
/// Largest `.ksync.yaml` read.
pub const MAX_CONFIG_FILE_BYTES: usize = 1024 * 1024;
/// Most symlinks followed while resolving one path.
pub const MAX_SYMLINK_HOPS: usize = 40;
/// `kind` of the single-Application form.
const APPLICATION_KIND: &str = "Application";
/// Longest serde/YAML message kept in an error.
const MAX_DETAIL: usize = 200;

/// One Application proposed by a `.ksync.yaml` file, as written (defaults not yet applied).
#[derive(Clone, Debug, PartialEq)]
pub struct DiscoveredEntry {
    /// The configured path of the file it came from.
    pub path: String,
    /// Position in the file's `applications:` list (0 for the single-Application form).
    pub index: usize,
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `spec.source.repositoryRef.name` as written.
    pub repository_ref: Option<String>,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// The spec; `source.repositoryRef.name` is empty when the file omits it.
    pub spec: ApplicationSpec,
}

impl DiscoveredEntry {
    /// How messages name this entry: its name, or its position.
    fn label(&self) -> String {
        entry_label(self.name.as_deref(), self.index)
    }
}

fn entry_label(name: Option<&str>, index: usize) -> String {
    match name {
        Some(name) if !name.is_empty() => name.to_owned(),
        _ => format!("applications[{index}]"),
    }
}

/// An Application discovery deletes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteAction {
    /// Application name (in the Repository's namespace).
    pub name: String,
    /// The deletion policy the deletion must run with.
    pub deletion_policy: DeletionPolicy,
    /// The Application's current `spec.deletionPolicy`.
    pub current_deletion_policy: DeletionPolicy,
    /// `metadata.uid`, for a delete precondition.
    pub uid: Option<String>,
}

impl DeleteAction {
    /// Whether `spec.deletionPolicy` must be patched to `Orphan` before deleting.
    pub fn needs_orphan_patch(&self) -> bool {
        self.current_deletion_policy != self.deletion_policy
    }
}

/// What discovery changes; every list is sorted by name.
#[derive(Clone, Debug, Default)]
pub struct DiscoveryPlan {
    /// Applications to create.
    pub create: Vec<Application>,
    /// Applications whose spec, label or annotation changed (only our fields are set).
    pub update: Vec<Application>,
    /// Applications removed from the files.
    pub delete: Vec<DeleteAction>,
}

impl DiscoveryPlan {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.update.is_empty() && self.delete.is_empty()
    }
}

/// What the I/O layer found at a configured path.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigFileRead {
    /// The file's text.
    Text(String),
    /// No file at this path in the commit.
    Missing,
    /// The I/O layer refused it (symlink escape, not a file, too large).
    Refused(DiscoveryError),
}

/// One discovery problem. Messages name the file, the Application, the field and the allowance.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// The Repository has no name or namespace.
    #[error("the Repository has no metadata.name or metadata.namespace")]
    InvalidRepository,
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
    /// Larger than [`MAX_CONFIG_FILE_BYTES`].
    #[error("{path}: larger than {limit} bytes")]
    FileTooLarge {
        /// Configured path.
        path: String,
        /// The limit.
        limit: usize,
    },
    /// Not YAML, or more than one document.
    #[error("{path}: not a single valid YAML document: {message}")]
    InvalidYaml {
        /// Configured path.
        path: String,
        /// Parser message (with line and column).
        message: String,
    },
    /// Keys that are not allowed at some place.
    #[error("{path}: unknown {} {} at {at}; allowed: {allowed}", if keys.len() == 1 { "key" } else { "keys" }, keys.join(", "))]
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
    /// The Ready condition reason (ruling 1).
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
    /// The Ready condition reason: `ValidationFailure` (ruling 1).
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

fn clip(s: &str, max: usize) -> String {
    crate::redact::truncate(s, max)
}

/// Whether `name` is a Kubernetes DNS subdomain (RFC 1123): at most 253 characters of
/// dot-separated labels of lowercase letters, digits and `-`, each starting and ending with a
/// letter or digit.
pub fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            let bytes = label.as_bytes();
            match (bytes.first(), bytes.last()) {
                (Some(first), Some(last)) => {
                    first.is_ascii_alphanumeric()
                        && last.is_ascii_alphanumeric()
                        && bytes
                            .iter()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                }
                _ => false,
            }
        })
}

// ---------------------------------------------------------------------------------------------
// Configured paths and symlinks

/// Check `spec.applicationConfigPaths` before any file is read. Returns the paths to read (the
/// root `.ksync.yaml` when the list is empty), or every problem found.
pub fn validate_config_paths(paths: &[String]) -> Result<Vec<String>, DiscoveryRefusal> {
    if paths.is_empty() {
        return Ok(vec![DEFAULT_APPLICATION_CONFIG_PATH.to_owned()]);
    }
    let mut errors = Vec::new();
    let mut seen = BTreeSet::new();
    for (index, path) in paths.iter().enumerate() {
        if let Err(rule) = check_config_path(path) {
            errors.push(DiscoveryError::InvalidConfigPath { index, path: clip(path, 200), rule });
        } else if !seen.insert(path.as_str()) {
            errors.push(DiscoveryError::DuplicateConfigPath { index, path: path.clone() });
        }
    }
    if errors.is_empty() { Ok(paths.to_vec()) } else { Err(DiscoveryRefusal { errors }) }
}

fn check_config_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("is empty");
    }
    if path.chars().any(char::is_control) {
        return Err("contains control characters");
    }
    if path.starts_with('/') {
        return Err("must be repository-relative, not an absolute path");
    }
    if path.contains('\\') {
        return Err("must use / as separator, not backslashes");
    }
    let components: Vec<&str> = path.split('/').collect();
    if components.contains(&"..") {
        return Err("must not contain .. (it would escape the repository)");
    }
    if components.iter().any(|c| c.is_empty() || *c == ".") {
        return Err("must not contain empty or . components");
    }
    if components.last() != Some(&CONFIG_FILE_NAME) {
        return Err("must name a file called .ksync.yaml");
    }
    Ok(())
}

/// Resolve a symlink found in the tree: `link_dir` holds the repository-relative components of
/// the directory containing the link, `target` is the link's content. Returns the normalized
/// repository-relative components of the target, or `None` when the target is absolute, empty or
/// climbs above the repository root — the I/O layer then reports
/// [`DiscoveryError::SymlinkEscapes`]. The I/O layer walks a path component by component, calls
/// this for every symlink (in a directory or as the final file), continues from the result and
/// gives up after [`MAX_SYMLINK_HOPS`] links, so chains that leave and re-enter the root are
/// refused as soon as they leave.
pub fn resolve_within_root(link_dir: &[&str], target: &str) -> Option<Vec<String>> {
    if target.is_empty()
        || target.starts_with('/')
        || target.contains('\\')
        || target.contains('\0')
    {
        return None;
    }
    let mut out: Vec<String> = Vec::with_capacity(link_dir.len() + 4);
    for component in link_dir.iter().copied().chain(target.split('/')) {
        match component {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            other => out.push(other.to_owned()),
        }
    }
    Some(out)
}

// ---------------------------------------------------------------------------------------------
// Parsing

const TOP_LEVEL_ALLOWED: &str =
    "applications (a list), or apiVersion, kind, metadata and spec of a single Application";
const ENTRY_ALLOWED: &str = "metadata, spec (and apiVersion, kind)";
const METADATA_ALLOWED: &str = "name, namespace, labels, annotations";

/// Parse one `.ksync.yaml`: an `applications:` list, or a single full Application. An empty
/// file (or `applications: []`) proposes no Application. Checks the file's shape, unknown keys
/// and each spec's decoding; the policy rules are [`plan_discovery`]'s.
pub fn parse_config_file(path: &str, text: &str) -> Result<Vec<DiscoveredEntry>, DiscoveryError> {
    if text.len() > MAX_CONFIG_FILE_BYTES {
        return Err(DiscoveryError::FileTooLarge {
            path: path.to_owned(),
            limit: MAX_CONFIG_FILE_BYTES,
        });
    }
    let doc: Yaml = serde_yaml::from_str(text).map_err(|e| DiscoveryError::InvalidYaml {
        path: path.to_owned(),
        message: clip(&e.to_string(), MAX_DETAIL),
    })?;
    let top = match doc {
        Yaml::Null => return Ok(Vec::new()),
        Yaml::Mapping(map) => map,
        _ => {
            return Err(DiscoveryError::WrongShape {
                path: path.to_owned(),
                at: "the top level".into(),
                expected: "a mapping with applications: or a single Application",
            });
        }
    };
    let keys = string_keys(path, "the top level", &top)?;
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    if keys.contains(&"applications") {
        reject_unknown(path, "the top level", &keys, &["applications"], TOP_LEVEL_ALLOWED)?;
        let items = match top.get("applications") {
            None | Some(Yaml::Null) => return Ok(Vec::new()),
            Some(Yaml::Sequence(items)) => items,
            Some(_) => {
                return Err(DiscoveryError::WrongShape {
                    path: path.to_owned(),
                    at: "applications".into(),
                    expected: "a list",
                });
            }
        };
        return items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                parse_entry(path, index, &format!("applications[{index}]"), item, false)
            })
            .collect();
    }
    if keys.contains(&"apiVersion") || keys.contains(&"kind") {
        let entry = parse_entry(path, 0, "the top level", &Yaml::Mapping(top), true)?;
        return Ok(vec![entry]);
    }
    reject_unknown(path, "the top level", &keys, &[], TOP_LEVEL_ALLOWED)?;
    Ok(Vec::new())
}

fn string_keys<'a>(
    path: &str,
    at: &str,
    map: &'a serde_yaml::Mapping,
) -> Result<Vec<&'a str>, DiscoveryError> {
    map.keys()
        .map(|k| {
            k.as_str().ok_or_else(|| DiscoveryError::WrongShape {
                path: path.to_owned(),
                at: at.to_owned(),
                expected: "a mapping with string keys",
            })
        })
        .collect()
}

fn reject_unknown(
    path: &str,
    at: &str,
    keys: &[&str],
    allowed: &[&str],
    allowed_text: &'static str,
) -> Result<(), DiscoveryError> {
    let unknown: Vec<String> =
        keys.iter().filter(|k| !allowed.contains(k)).map(|k| clip(k, 64)).collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(DiscoveryError::UnknownKeys {
            path: path.to_owned(),
            at: at.to_owned(),
            keys: unknown,
            allowed: allowed_text,
        })
    }
}

fn parse_entry(
    path: &str,
    index: usize,
    at: &str,
    item: &Yaml,
    single: bool,
) -> Result<DiscoveredEntry, DiscoveryError> {
    let shape = |at: String, expected: &'static str| DiscoveryError::WrongShape {
        path: path.to_owned(),
        at,
        expected,
    };
    let Yaml::Mapping(map) = item else {
        return Err(shape(at.to_owned(), "a mapping with metadata and spec"));
    };
    let keys = string_keys(path, at, map)?;
    let allowed_text = if single { TOP_LEVEL_ALLOWED } else { ENTRY_ALLOWED };
    reject_unknown(path, at, &keys, &["apiVersion", "kind", "metadata", "spec"], allowed_text)?;
    let api_version = map.get("apiVersion");
    let kind = map.get("kind");
    let is_application = api_version.and_then(Yaml::as_str) == Some(API_VERSION)
        && kind.and_then(Yaml::as_str) == Some(APPLICATION_KIND);
    if (single || api_version.is_some() || kind.is_some()) && !is_application {
        return Err(DiscoveryError::WrongKind { path: path.to_owned(), at: at.to_owned() });
    }

    let metadata_at = if single { "metadata".to_owned() } else { format!("{at}.metadata") };
    let (mut name, mut namespace) = (None, None);
    let (mut labels, mut annotations) = (BTreeMap::new(), BTreeMap::new());
    match map.get("metadata") {
        None | Some(Yaml::Null) => {}
        Some(Yaml::Mapping(meta)) => {
            let keys = string_keys(path, &metadata_at, meta)?;
            reject_unknown(
                path,
                &metadata_at,
                &keys,
                &["name", "namespace", "labels", "annotations"],
                METADATA_ALLOWED,
            )?;
            let text = |key: &str| -> Result<Option<String>, DiscoveryError> {
                match meta.get(key) {
                    None | Some(Yaml::Null) => Ok(None),
                    Some(Yaml::String(s)) => Ok((!s.is_empty()).then(|| s.clone())),
                    Some(_) => Err(shape(format!("{metadata_at}.{key}"), "a string")),
                }
            };
            name = text("name")?;
            namespace = text("namespace")?;
            let map_of = |key: &str| -> Result<BTreeMap<String, String>, DiscoveryError> {
                match meta.get(key) {
                    None | Some(Yaml::Null) => Ok(BTreeMap::new()),
                    Some(value) => serde_yaml::from_value(value.clone()).map_err(|_| {
                        shape(format!("{metadata_at}.{key}"), "a mapping of strings to strings")
                    }),
                }
            };
            labels = map_of("labels")?;
            annotations = map_of("annotations")?;
        }
        Some(_) => return Err(shape(metadata_at, "a mapping")),
    }

    let app = entry_label(name.as_deref(), index);
    let spec_value = match map.get("spec") {
        None | Some(Yaml::Null) => Json::Object(Default::default()),
        Some(value) => serde_json::to_value(value).map_err(|e| DiscoveryError::InvalidSpec {
            path: path.to_owned(),
            app: app.clone(),
            message: clip(&e.to_string(), MAX_DETAIL),
        })?,
    };
    let Json::Object(mut spec_map) = spec_value else {
        return Err(shape(if single { "spec".into() } else { format!("{at}.spec") }, "a mapping"));
    };
    let render_type =
        spec_map.get("source").and_then(|s| s.get("render")).and_then(|r| r.get("type"));
    if matches!(render_type, None | Some(Json::Null)) {
        return Err(DiscoveryError::MissingRenderType { path: path.to_owned(), app });
    }
    // repositoryRef defaults to the discovering Repository: decode with an empty name and keep
    // what was written separately.
    let mut repository_ref = None;
    if let Some(Json::Object(source)) = spec_map.get_mut("source") {
        match source.get_mut("repositoryRef") {
            Some(Json::Object(reference)) => match reference.get("name") {
                Some(Json::String(n)) => repository_ref = (!n.is_empty()).then(|| n.clone()),
                None | Some(Json::Null) => {
                    reference.insert("name".into(), Json::String(String::new()));
                }
                Some(_) => {}
            },
            None | Some(Json::Null) => {
                source.insert("repositoryRef".into(), serde_json::json!({ "name": "" }));
            }
            Some(_) => {}
        }
    }
    let spec: ApplicationSpec = serde_json::from_value(Json::Object(spec_map)).map_err(|e| {
        DiscoveryError::InvalidSpec {
            path: path.to_owned(),
            app: app.clone(),
            message: clip(&e.to_string(), MAX_DETAIL),
        }
    })?;
    Ok(DiscoveredEntry {
        path: path.to_owned(),
        index,
        name,
        namespace,
        repository_ref,
        labels,
        annotations,
        spec,
    })
}

// ---------------------------------------------------------------------------------------------
// Planning

/// Run discovery end to end: check the configured paths, parse every file the I/O layer read
/// (`files` maps each configured path to what was found; a path absent from `files` counts as
/// [`ConfigFileRead::Missing`]) and plan against `existing` (the Applications in the
/// Repository's namespace). Every problem is reported; any problem refuses everything.
pub fn discover(
    repository: &Repository,
    files: &BTreeMap<String, ConfigFileRead>,
    existing: &[Application],
) -> Result<DiscoveryPlan, DiscoveryRefusal> {
    let paths = validate_config_paths(&repository.spec.application_config_paths)?;
    let mut errors = Vec::new();
    let mut entries = Vec::new();
    for path in &paths {
        match files.get(path) {
            Some(ConfigFileRead::Text(text)) => match parse_config_file(path, text) {
                Ok(parsed) => entries.extend(parsed),
                Err(e) => errors.push(e),
            },
            Some(ConfigFileRead::Refused(e)) => errors.push(e.clone()),
            Some(ConfigFileRead::Missing) | None => {
                if path != DEFAULT_APPLICATION_CONFIG_PATH {
                    errors.push(DiscoveryError::ConfigFileMissing { path: path.clone() });
                }
            }
        }
    }
    match plan_discovery(repository, &entries, existing) {
        Ok(plan) if errors.is_empty() => Ok(plan),
        Ok(_) => Err(DiscoveryRefusal { errors }),
        Err(refusal) => {
            errors.extend(refusal.errors);
            Err(DiscoveryRefusal { errors })
        }
    }
}

/// Check every entry against the Repository's rules and compare with `existing` (the
/// Applications in the Repository's namespace, hand-made and foreign ones included). All or
/// nothing: any violation refuses the whole plan.
pub fn plan_discovery(
    repository: &Repository,
    entries: &[DiscoveredEntry],
    existing: &[Application],
) -> Result<DiscoveryPlan, DiscoveryRefusal> {
    let (Some(repo), Some(namespace)) = (
        repository.metadata.name.as_deref().filter(|n| !n.is_empty()),
        repository.metadata.namespace.as_deref().filter(|n| !n.is_empty()),
    ) else {
        return Err(DiscoveryError::InvalidRepository.into());
    };
    let spec = &repository.spec;
    let policy = &spec.application_policy;
    let repo_sa = spec.application_service_account_name.as_deref().filter(|s| !s.is_empty());
    let existing: BTreeMap<&str, &Application> = existing
        .iter()
        .filter(|a| a.metadata.namespace.as_deref().is_none_or(|n| n == namespace))
        .filter_map(|a| a.metadata.name.as_deref().map(|n| (n, a)))
        .collect();

    let mut errors = Vec::new();
    let mut first_path: BTreeMap<&str, &str> = BTreeMap::new();
    let mut desired: Vec<Application> = Vec::new();
    for entry in entries {
        let path = entry.path.clone();
        let app = entry.label();
        let Some(name) = entry.name.as_deref() else {
            errors.push(DiscoveryError::MissingName { path, index: entry.index });
            continue;
        };
        let before = errors.len();
        if !is_dns_subdomain(name) {
            errors.push(DiscoveryError::InvalidName { path: path.clone(), name: clip(name, 253) });
        }
        if let Some(ns) = entry.namespace.as_deref()
            && ns != namespace
        {
            errors.push(DiscoveryError::ForeignNamespace {
                path: path.clone(),
                app: app.clone(),
                namespace: ns.to_owned(),
                repository_namespace: namespace.to_owned(),
            });
        }
        if let Some(reference) = entry.repository_ref.as_deref()
            && reference != repo
        {
            errors.push(DiscoveryError::ForeignRepositoryRef {
                path: path.clone(),
                app: app.clone(),
                repository_ref: reference.to_owned(),
                repository: repo.to_owned(),
            });
        }
        let entry_sa = entry.spec.service_account_name.as_deref().filter(|s| !s.is_empty());
        match (entry_sa, repo_sa) {
            (Some(sa), Some(allowed)) if sa != allowed => {
                errors.push(DiscoveryError::ForeignServiceAccount {
                    path: path.clone(),
                    app: app.clone(),
                    service_account: sa.to_owned(),
                    allowed: allowed.to_owned(),
                    repository: repo.to_owned(),
                });
            }
            (Some(sa), None) => errors.push(DiscoveryError::ServiceAccountNotAllowed {
                path: path.clone(),
                app: app.clone(),
                service_account: sa.to_owned(),
                repository: repo.to_owned(),
            }),
            _ => {}
        }
        let forbidden = [
            (
                entry.spec.sync.automatic && !policy.allow_automatic,
                "spec.sync.automatic",
                "allowAutomatic",
            ),
            (entry.spec.sync.prune && !policy.allow_prune, "spec.sync.prune", "allowPrune"),
            (
                entry.spec.sync.conflict_policy == ConflictPolicy::Adopt && !policy.allow_adopt,
                "spec.sync.conflictPolicy: adopt",
                "allowAdopt",
            ),
            (
                entry.spec.deletion_policy == DeletionPolicy::DeleteManagedResources
                    && !policy.allow_delete_managed_resources,
                "spec.deletionPolicy: DeleteManagedResources",
                "allowDeleteManagedResources",
            ),
        ];
        for (refused, field, allowance) in forbidden {
            if refused {
                errors.push(DiscoveryError::NotAllowed {
                    path: path.clone(),
                    app: app.clone(),
                    field,
                    allowance,
                    repository: repo.to_owned(),
                });
            }
        }
        for (what, map) in [("label", &entry.labels), ("annotation", &entry.annotations)] {
            for key in map.keys().filter(|k| is_reserved_key(k)) {
                errors.push(DiscoveryError::ReservedMetadata {
                    path: path.clone(),
                    app: app.clone(),
                    what,
                    key: clip(key, 253),
                });
            }
        }
        if let Some(first) = first_path.get(name) {
            errors.push(DiscoveryError::DuplicateName {
                path: path.clone(),
                app: app.clone(),
                first_path: (*first).to_owned(),
            });
            continue;
        }
        first_path.insert(name, &entry.path);
        if let Some(current) = existing.get(name) {
            match current.metadata.labels.as_ref().and_then(|l| l.get(keys::REPOSITORY)) {
                None => errors.push(DiscoveryError::HandMadeCollision {
                    path: path.clone(),
                    app: app.clone(),
                    namespace: namespace.to_owned(),
                }),
                Some(owner) if owner != repo => {
                    errors.push(DiscoveryError::OwnedByOtherRepository {
                        path: path.clone(),
                        app: app.clone(),
                        owner: owner.clone(),
                    })
                }
                Some(_) => {}
            }
        }
        if errors.len() == before {
            desired.push(desired_application(entry, name, namespace, repo, repo_sa));
        }
    }
    if !errors.is_empty() {
        return Err(DiscoveryRefusal { errors });
    }

    let mut plan = DiscoveryPlan::default();
    for app in desired {
        let name = app.metadata.name.as_deref().unwrap_or_default();
        match existing.get(name) {
            None => plan.create.push(app),
            Some(current) if !up_to_date(current, &app) => plan.update.push(app),
            Some(_) => {}
        }
    }
    for (name, current) in &existing {
        let ours = current
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::REPOSITORY))
            .map(String::as_str)
            == Some(repo);
        if !ours || first_path.contains_key(name) || current.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let current_policy = current.spec.deletion_policy;
        plan.delete.push(DeleteAction {
            name: (*name).to_owned(),
            deletion_policy: if policy.allow_delete_managed_resources {
                current_policy
            } else {
                DeletionPolicy::Orphan
            },
            current_deletion_policy: current_policy,
            uid: current.metadata.uid.clone(),
        });
    }
    let by_name = |a: &Application, b: &Application| a.metadata.name.cmp(&b.metadata.name);
    plan.create.sort_by(by_name);
    plan.update.sort_by(by_name);
    Ok(plan)
}

/// Whether a label or annotation key is in the `sync.kuvryn.io` domain (or a subdomain of it).
fn is_reserved_key(key: &str) -> bool {
    key.split_once('/')
        .is_some_and(|(prefix, _)| prefix == GROUP || prefix.ends_with(&format!(".{GROUP}")))
}

fn desired_application(
    entry: &DiscoveredEntry,
    name: &str,
    namespace: &str,
    repo: &str,
    repo_sa: Option<&str>,
) -> Application {
    let mut spec = entry.spec.clone();
    spec.source.repository_ref.name = repo.to_owned();
    spec.service_account_name = repo_sa.map(str::to_owned);
    let mut app = Application::new(name, spec);
    app.metadata.namespace = Some(namespace.to_owned());
    let mut labels = entry.labels.clone();
    labels.insert(keys::REPOSITORY.to_owned(), repo.to_owned());
    let mut annotations = entry.annotations.clone();
    annotations.insert(keys::DISCOVERED_FROM.to_owned(), entry.path.clone());
    app.metadata.labels = Some(labels);
    app.metadata.annotations = Some(annotations);
    app
}

/// Same spec, and every label and annotation discovery sets has the same value.
fn up_to_date(current: &Application, desired: &Application) -> bool {
    let contains = |have: &Option<BTreeMap<String, String>>,
                    want: &Option<BTreeMap<String, String>>| {
        want.iter().flatten().all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    current.spec == desired.spec
        && contains(&current.metadata.labels, &desired.metadata.labels)
        && contains(&current.metadata.annotations, &desired.metadata.annotations)
}

#[cfg(test)]
mod tests {
    // Table tests spell their row types out.
    #![allow(clippy::type_complexity)]

    use super::*;
    use kuvryn_sync_api::{ApplicationPolicy, RepositorySpec};
    use serde_json::json;

    const REPO: &str = "platform";
    const NS: &str = "default";
    const SA: &str = "payments-deployer";
    const ROOT: &str = ".ksync.yaml";
    const TEAM: &str = "teams/payments/.ksync.yaml";
    const SEARCH: &str = "teams/search/.ksync.yaml";

    fn repository(policy: ApplicationPolicy, sa: Option<&str>, paths: &[&str]) -> Repository {
        let spec: RepositorySpec = serde_json::from_value(json!({
            "type": "git",
            "git": { "url": "https://example.com/platform.git" },
            "applicationConfigPaths": paths,
            "applicationServiceAccountName": sa,
            "applicationPolicy": policy,
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let mut repo = Repository::new(REPO, spec);
        repo.metadata.namespace = Some(NS.into());
        repo
    }

    fn strict() -> Repository {
        repository(ApplicationPolicy::default(), Some(SA), &[TEAM, SEARCH])
    }

    fn allow_all() -> ApplicationPolicy {
        ApplicationPolicy {
            allow_automatic: true,
            allow_prune: true,
            allow_adopt: true,
            allow_delete_managed_resources: true,
        }
    }

    fn merge(base: &mut Json, extra: Json) {
        match (base, extra) {
            (Json::Object(b), Json::Object(e)) => {
                for (k, v) in e {
                    match b.get_mut(&k) {
                        Some(slot) if v.is_object() => merge(slot, v),
                        _ => {
                            b.insert(k, v);
                        }
                    }
                }
            }
            (b, e) => *b = e,
        }
    }

    /// A valid list entry named `name`, with `extra` merged in.
    fn entry(name: &str, extra: Json) -> Json {
        let mut e = json!({
            "metadata": { "name": name },
            "spec": {
                "source": { "path": format!("apps/{name}"), "render": { "type": "kustomize" } },
                "destination": { "namespace": name },
            }
        });
        merge(&mut e, extra);
        e
    }

    fn list(entries: &[Json]) -> String {
        json!({ "applications": entries }).to_string()
    }

    fn files(pairs: &[(&str, String)]) -> BTreeMap<String, ConfigFileRead> {
        pairs.iter().map(|(p, t)| ((*p).to_owned(), ConfigFileRead::Text(t.clone()))).collect()
    }

    /// The two configured files, with `team` in the payments file and an empty search file.
    fn team(entries: &[Json]) -> BTreeMap<String, ConfigFileRead> {
        files(&[(TEAM, list(entries)), (SEARCH, String::new())])
    }

    /// An existing Application, optionally labelled for `owner`.
    fn existing(name: &str, owner: Option<&str>) -> Application {
        let entry = entry(name, json!({}));
        let mut spec = entry["spec"].clone();
        merge(
            &mut spec,
            json!({ "source": { "repositoryRef": { "name": owner.unwrap_or("x") } } }),
        );
        let spec: ApplicationSpec = serde_json::from_value(spec).unwrap_or_else(|e| panic!("{e}"));
        let mut app = Application::new(name, spec);
        app.metadata.namespace = Some(NS.into());
        app.metadata.uid = Some(format!("uid-{name}"));
        if let Some(owner) = owner {
            app.metadata.labels =
                Some(BTreeMap::from([(keys::REPOSITORY.to_owned(), owner.to_owned())]));
        }
        app
    }

    fn refusal(result: Result<DiscoveryPlan, DiscoveryRefusal>) -> DiscoveryRefusal {
        match result {
            Ok(plan) => panic!("expected a refusal, got {plan:?}"),
            Err(refusal) => refusal,
        }
    }

    fn plan(result: Result<DiscoveryPlan, DiscoveryRefusal>) -> DiscoveryPlan {
        result.unwrap_or_else(|e| panic!("{e}"))
    }

    fn names(apps: &[Application]) -> Vec<&str> {
        apps.iter().filter_map(|a| a.metadata.name.as_deref()).collect()
    }

    #[test]
    fn every_rule_refuses_the_whole_discovery() {
        let no_sa = repository(ApplicationPolicy::default(), None, &[TEAM, SEARCH]);
        let valid = entry("search", json!({}));
        // (rule, repository, files, existing, expected message)
        let cases: Vec<(&str, Repository, BTreeMap<String, ConfigFileRead>, Vec<Application>, String)> = vec![
            (
                "automatic",
                strict(),
                team(&[entry("payments", json!({ "spec": { "sync": { "automatic": true } } }))]),
                vec![],
                format!("{TEAM}: Application payments sets spec.sync.automatic, which needs spec.applicationPolicy.allowAutomatic on Repository platform"),
            ),
            (
                "prune",
                strict(),
                team(&[entry("payments", json!({ "spec": { "sync": { "prune": true } } }))]),
                vec![],
                format!("{TEAM}: Application payments sets spec.sync.prune, which needs spec.applicationPolicy.allowPrune on Repository platform"),
            ),
            (
                "adopt",
                strict(),
                team(&[entry("payments", json!({ "spec": { "sync": { "conflictPolicy": "adopt" } } }))]),
                vec![],
                format!("{TEAM}: Application payments sets spec.sync.conflictPolicy: adopt, which needs spec.applicationPolicy.allowAdopt on Repository platform"),
            ),
            (
                "DeleteManagedResources",
                strict(),
                team(&[entry("payments", json!({ "spec": { "deletionPolicy": "DeleteManagedResources" } }))]),
                vec![],
                format!("{TEAM}: Application payments sets spec.deletionPolicy: DeleteManagedResources, which needs spec.applicationPolicy.allowDeleteManagedResources on Repository platform"),
            ),
            (
                "foreign service account",
                strict(),
                team(&[entry("payments", json!({ "spec": { "serviceAccountName": "cluster-admin" } }))]),
                vec![],
                format!("{TEAM}: Application payments sets spec.serviceAccountName cluster-admin, but Repository platform only allows spec.applicationServiceAccountName payments-deployer"),
            ),
            (
                "service account when the Repository sets none",
                no_sa.clone(),
                team(&[entry("payments", json!({ "spec": { "serviceAccountName": SA } }))]),
                vec![],
                format!("{TEAM}: Application payments sets spec.serviceAccountName payments-deployer, but Repository platform sets no spec.applicationServiceAccountName"),
            ),
            (
                "foreign namespace",
                strict(),
                team(&[entry("payments", json!({ "metadata": { "namespace": "kube-system" } }))]),
                vec![],
                format!("{TEAM}: Application payments sets metadata.namespace kube-system, but discovered Applications live in the Repository's namespace default"),
            ),
            (
                "other Repository in repositoryRef",
                strict(),
                team(&[entry("payments", json!({ "spec": { "source": { "repositoryRef": { "name": "infra" } } } }))]),
                vec![],
                format!("{TEAM}: Application payments sets spec.source.repositoryRef.name infra, but Repository platform may only discover its own Applications"),
            ),
            (
                "path escaping the repository",
                repository(ApplicationPolicy::default(), Some(SA), &["../other/.ksync.yaml"]),
                BTreeMap::new(),
                vec![],
                "spec.applicationConfigPaths[0] \"../other/.ksync.yaml\": must not contain .. (it would escape the repository)".into(),
            ),
            (
                "duplicate names across files",
                strict(),
                files(&[(TEAM, list(&[entry("payments", json!({}))])), (SEARCH, list(&[entry("payments", json!({}))]))]),
                vec![],
                format!("{SEARCH}: Application payments is also defined in {TEAM}; names must be unique across all configured files"),
            ),
            (
                "duplicate names in one file",
                strict(),
                team(&[entry("payments", json!({})), entry("payments", json!({}))]),
                vec![],
                format!("{TEAM}: Application payments is also defined in {TEAM}"),
            ),
            (
                "hand-made collision",
                strict(),
                team(&[entry("payments", json!({}))]),
                vec![existing("payments", None)],
                format!("{TEAM}: Application payments already exists in namespace default without the sync.kuvryn.io/repository label; discovery never takes over"),
            ),
            (
                "other-Repository collision",
                strict(),
                team(&[entry("payments", json!({}))]),
                vec![existing("payments", Some("infra"))],
                format!("{TEAM}: Application payments already exists and belongs to Repository infra"),
            ),
            (
                "missing name",
                strict(),
                team(&[valid.clone(), entry("x", json!({ "metadata": { "name": null } }))]),
                vec![],
                format!("{TEAM}: applications[1] has no metadata.name, which is required"),
            ),
            (
                "invalid name",
                strict(),
                team(&[entry("Payments_App", json!({}))]),
                vec![],
                format!("{TEAM}: Application name \"Payments_App\" is not a valid DNS subdomain"),
            ),
            (
                "missing render.type",
                strict(),
                team(&[entry("payments", json!({ "spec": { "source": { "render": { "type": null } } } }))]),
                vec![],
                format!("{TEAM}: Application payments has no spec.source.render.type, which is required"),
            ),
            (
                "missing spec",
                strict(),
                files(&[(TEAM, "applications:\n  - metadata:\n      name: payments\n".into())]),
                vec![],
                format!("{TEAM}: Application payments has no spec.source.render.type"),
            ),
            (
                "undecodable spec",
                strict(),
                team(&[entry("payments", json!({ "spec": { "destination": null } }))]),
                vec![],
                format!("{TEAM}: Application payments has an invalid spec: "),
            ),
            (
                "unknown top-level keys",
                strict(),
                files(&[
                    (TEAM, "applications: []\nextra: 1\nstatus: {}\n".into()),
                    (SEARCH, list(std::slice::from_ref(&valid))),
                ]),
                vec![],
                format!("{TEAM}: unknown keys extra, status at the top level; allowed: applications"),
            ),
            (
                "unknown entry keys",
                strict(),
                team(&[entry("payments", json!({ "status": { "state": "Healthy" } }))]),
                vec![],
                format!("{TEAM}: unknown key status at applications[0]; allowed: metadata, spec"),
            ),
            (
                "unknown metadata keys",
                strict(),
                team(&[entry("payments", json!({ "metadata": { "ownerReferences": [], "finalizers": [] } }))]),
                vec![],
                format!("{TEAM}: unknown keys finalizers, ownerReferences at applications[0].metadata"),
            ),
            (
                "reserved annotation (approval from Git)",
                strict(),
                team(&[entry("payments", json!({ "metadata": { "annotations": { "sync.kuvryn.io/approved-revision": "abc" } } }))]),
                vec![],
                format!("{TEAM}: Application payments sets annotation sync.kuvryn.io/approved-revision; the sync.kuvryn.io/ domain is reserved"),
            ),
            (
                "reserved label (ownership from Git)",
                strict(),
                team(&[entry("payments", json!({ "metadata": { "labels": { "sync.kuvryn.io/repository": "infra" } } }))]),
                vec![],
                format!("{TEAM}: Application payments sets label sync.kuvryn.io/repository"),
            ),
            (
                "wrong kind in the single form",
                strict(),
                files(&[(TEAM, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n".into())]),
                vec![],
                format!("{TEAM}: the top level must have apiVersion: sync.kuvryn.io/v1alpha1 and kind: Application"),
            ),
            (
                "not YAML",
                strict(),
                files(&[(TEAM, "applications: [\n".into())]),
                vec![],
                format!("{TEAM}: not a single valid YAML document"),
            ),
            (
                "configured file missing",
                strict(),
                files(&[(SEARCH, list(std::slice::from_ref(&valid)))]),
                vec![],
                format!("{TEAM}: listed in spec.applicationConfigPaths but not found at this revision"),
            ),
            (
                "symlink escape reported by the I/O layer",
                strict(),
                BTreeMap::from([
                    (TEAM.to_owned(), ConfigFileRead::Refused(DiscoveryError::SymlinkEscapes { path: TEAM.into() })),
                    (SEARCH.to_owned(), ConfigFileRead::Text(list(std::slice::from_ref(&valid)))),
                ]),
                vec![],
                format!("{TEAM}: resolves through a symlink that leaves the repository"),
            ),
        ];
        for (rule, repo, files, existing_apps, expected) in cases {
            // A valid new entry and a removed Application ride along: neither may happen.
            let mut existing_apps = existing_apps;
            existing_apps.push(existing("removed", Some(REPO)));
            let refusal = refusal(discover(&repo, &files, &existing_apps));
            let message = refusal.to_string();
            assert!(
                message.contains(&expected),
                "{rule}:\n  got      {message}\n  expected {expected}"
            );
            assert!(
                message.starts_with("discovery refused, no Application was changed: "),
                "{rule}"
            );
            assert_eq!(refusal.reason(), FailureReason::ValidationFailure, "{rule}");
        }
    }

    #[test]
    fn several_violations_are_all_listed() {
        let repo = repository(ApplicationPolicy::default(), None, &[TEAM]);
        let bad = entry(
            "payments",
            json!({ "spec": { "serviceAccountName": "admin", "sync": { "automatic": true, "prune": true } } }),
        );
        let refusal = refusal(discover(&repo, &files(&[(TEAM, list(&[bad]))]), &[]));
        assert_eq!(refusal.errors.len(), 3, "{refusal}");
        let message = refusal.to_string();
        for part in ["spec.serviceAccountName admin", "allowAutomatic", "allowPrune"] {
            assert!(message.contains(part), "{message}");
        }
    }

    #[test]
    fn allowances_permit_their_fields() {
        let repo = repository(allow_all(), Some(SA), &[TEAM]);
        let e = entry(
            "payments",
            json!({ "spec": {
                "serviceAccountName": SA,
                "sync": { "automatic": true, "prune": true, "conflictPolicy": "adopt" },
                "deletionPolicy": "DeleteManagedResources",
                "source": { "repositoryRef": { "name": REPO } }
            }, "metadata": { "namespace": NS, "labels": { "team": "payments" } } }),
        );
        let plan = plan(discover(&repo, &files(&[(TEAM, list(&[e]))]), &[]));
        assert_eq!(names(&plan.create), ["payments"]);
        let app = &plan.create[0];
        assert!(app.spec.sync.automatic && app.spec.sync.prune);
        assert_eq!(
            app.metadata.labels.as_ref().and_then(|l| l.get("team")).map(String::as_str),
            Some("payments")
        );
    }

    #[test]
    fn creates_with_defaults_label_and_annotation() {
        let repo = strict();
        let plan = plan(discover(&repo, &team(&[entry("payments", json!({}))]), &[]));
        assert!(plan.update.is_empty() && plan.delete.is_empty());
        let app = &plan.create[0];
        assert_eq!(app.metadata.name.as_deref(), Some("payments"));
        assert_eq!(app.metadata.namespace.as_deref(), Some(NS));
        assert_eq!(app.spec.source.repository_ref.name, REPO);
        assert_eq!(app.spec.service_account_name.as_deref(), Some(SA));
        assert_eq!(
            app.metadata.labels.as_ref().and_then(|l| l.get(keys::REPOSITORY)).map(String::as_str),
            Some(REPO)
        );
        assert_eq!(
            app.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::DISCOVERED_FROM))
                .map(String::as_str),
            Some(TEAM)
        );
        // Without a Repository service account none is set.
        let no_sa = repository(ApplicationPolicy::default(), None, &[TEAM]);
        let plan = plan_discovery_from(&no_sa, TEAM, &list(&[entry("payments", json!({}))]), &[]);
        assert_eq!(plan.create[0].spec.service_account_name, None);
    }

    fn plan_discovery_from(
        repo: &Repository,
        path: &str,
        text: &str,
        existing: &[Application],
    ) -> DiscoveryPlan {
        let entries = parse_config_file(path, text).unwrap_or_else(|e| panic!("{e}"));
        plan(plan_discovery(repo, &entries, existing))
    }

    #[test]
    fn accepts_the_spec_example_and_a_single_full_application() {
        let repo = repository(
            ApplicationPolicy { allow_automatic: true, ..Default::default() },
            Some(SA),
            &[],
        );
        let example = "applications:
  - metadata:
      name: payments
    spec:
      source:
        path: apps/payments
        render:
          type: kustomize
      destination:
        namespace: payments
      sync:
        automatic: true
        conflictPolicy: fail
";
        let plan = plan(discover(&repo, &files(&[(ROOT, example.into())]), &[]));
        assert_eq!(names(&plan.create), ["payments"]);

        let single = "apiVersion: sync.kuvryn.io/v1alpha1
kind: Application
metadata:
  name: payments
  namespace: default
spec:
  serviceAccountName: payments-deployer
  source:
    repositoryRef:
      name: platform
    path: apps/payments
    render:
      type: helm
      helm:
        releaseName: payments
  destination:
    namespace: payments
";
        let entries = parse_config_file(ROOT, single).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].repository_ref.as_deref(), Some(REPO));
        let plan = plan_discovery_from(&repo, ROOT, single, &[]);
        assert_eq!(names(&plan.create), ["payments"]);
        assert_eq!(
            plan.create[0]
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::DISCOVERED_FROM))
                .map(String::as_str),
            Some(ROOT)
        );
    }

    #[test]
    fn parse_edge_cases() {
        let cases: &[(&str, usize)] = &[
            ("", 0),
            ("# nothing yet\n", 0),
            ("applications: []\n", 0),
            ("applications:\n", 0),
            ("{}\n", 0),
        ];
        for (text, count) in cases {
            let entries = parse_config_file(ROOT, text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(entries.len(), *count, "{text:?}");
        }
        let refused: &[(&str, &str)] = &[
            (
                "- a\n- b\n",
                ".ksync.yaml: the top level must be a mapping with applications: or a single Application",
            ),
            ("applications: {}\n", ".ksync.yaml: applications must be a list"),
            (
                "applications: [1]\n",
                ".ksync.yaml: applications[0] must be a mapping with metadata and spec",
            ),
            (
                "metadata: {}\nspec: {}\n",
                ".ksync.yaml: unknown keys metadata, spec at the top level",
            ),
            ("a: 1\n---\nb: 2\n", ".ksync.yaml: not a single valid YAML document"),
            (
                "applications:\n  - metadata: {name: [x]}\n",
                ".ksync.yaml: applications[0].metadata.name must be a string",
            ),
        ];
        for (text, expected) in refused {
            let err =
                parse_config_file(ROOT, text).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.starts_with(expected), "{text:?}: {err}");
        }
        let big = "#".repeat(MAX_CONFIG_FILE_BYTES + 1);
        assert!(matches!(parse_config_file(ROOT, &big), Err(DiscoveryError::FileTooLarge { .. })));
    }

    #[test]
    fn unchanged_applications_are_not_updated() {
        let repo = strict();
        let unchanged =
            team(&[entry("payments", json!({ "metadata": { "labels": { "team": "p" } } }))]);
        let first = plan(discover(&repo, &unchanged, &[]));
        let mut stored = first.create[0].clone();
        // Fields others own do not count as a change.
        stored.metadata.uid = Some("uid-1".into());
        stored
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(keys::APPROVED_REVISION.into(), "abc".into());
        let again = plan(discover(&repo, &unchanged, std::slice::from_ref(&stored)));
        assert!(again.is_empty(), "{again:?}");

        // A changed spec, a moved file and a changed label are updates.
        let changed = team(&[entry(
            "payments",
            json!({ "metadata": { "labels": { "team": "p" } }, "spec": { "source": { "path": "apps/v2" } } }),
        )]);
        assert_eq!(
            names(&plan(discover(&repo, &changed, std::slice::from_ref(&stored))).update),
            ["payments"]
        );
        let moved = files(&[
            (
                SEARCH,
                list(&[entry("payments", json!({ "metadata": { "labels": { "team": "p" } } }))]),
            ),
            (TEAM, String::new()),
        ]);
        let update = plan(discover(&repo, &moved, std::slice::from_ref(&stored))).update;
        assert_eq!(
            update[0]
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::DISCOVERED_FROM))
                .map(String::as_str),
            Some(SEARCH)
        );
        let relabelled =
            team(&[entry("payments", json!({ "metadata": { "labels": { "team": "q" } } }))]);
        assert_eq!(names(&plan(discover(&repo, &relabelled, &[stored])).update), ["payments"]);
    }

    #[test]
    fn removed_applications_are_deleted_with_the_right_policy() {
        let mut dmr = existing("old-dmr", Some(REPO));
        dmr.spec.deletion_policy = DeletionPolicy::DeleteManagedResources;
        let orphan = existing("old-orphan", Some(REPO));
        let mut terminating = existing("old-terminating", Some(REPO));
        terminating.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let apps = vec![
            dmr,
            orphan,
            terminating,
            existing("hand-made", None),
            existing("infra-app", Some("infra")),
            {
                let mut other_ns = existing("other-ns", Some(REPO));
                other_ns.metadata.namespace = Some("elsewhere".into());
                other_ns
            },
        ];
        // (policy, expected deletes: name, deletion_policy, needs_orphan_patch)
        let cases: Vec<(ApplicationPolicy, Vec<(&str, DeletionPolicy, bool)>)> = vec![
            (
                ApplicationPolicy::default(),
                vec![
                    ("old-dmr", DeletionPolicy::Orphan, true),
                    ("old-orphan", DeletionPolicy::Orphan, false),
                ],
            ),
            (
                ApplicationPolicy { allow_delete_managed_resources: true, ..Default::default() },
                vec![
                    ("old-dmr", DeletionPolicy::DeleteManagedResources, false),
                    ("old-orphan", DeletionPolicy::Orphan, false),
                ],
            ),
        ];
        for (policy, expected) in cases {
            let repo = repository(policy, Some(SA), &[TEAM]);
            let plan = plan(discover(
                &repo,
                &files(&[(TEAM, list(&[entry("payments", json!({}))]))]),
                &apps,
            ));
            assert_eq!(names(&plan.create), ["payments"]);
            let got: Vec<(&str, DeletionPolicy, bool)> = plan
                .delete
                .iter()
                .map(|d| (d.name.as_str(), d.deletion_policy, d.needs_orphan_patch()))
                .collect();
            assert_eq!(got, expected);
            assert_eq!(plan.delete[0].uid.as_deref(), Some("uid-old-dmr"));
        }
        // A missing root .ksync.yaml proposes nothing: everything of ours goes, Orphan.
        let repo = repository(ApplicationPolicy::default(), Some(SA), &[]);
        let plan = plan(discover(&repo, &BTreeMap::new(), &apps));
        assert!(plan.create.is_empty());
        assert_eq!(plan.delete.len(), 2);
    }

    #[test]
    fn config_path_rules() {
        let ok: &[(&[&str], &[&str])] =
            &[(&[], &[ROOT]), (&[ROOT], &[ROOT]), (&[TEAM, SEARCH], &[TEAM, SEARCH])];
        for (paths, expected) in ok {
            let paths: Vec<String> = paths.iter().map(|p| (*p).to_owned()).collect();
            assert_eq!(
                validate_config_paths(&paths),
                Ok(expected.iter().map(|p| (*p).to_owned()).collect())
            );
        }
        let refused: &[(&str, &str)] = &[
            ("", "is empty"),
            ("/etc/.ksync.yaml", "must be repository-relative, not an absolute path"),
            ("../.ksync.yaml", "must not contain .. (it would escape the repository)"),
            ("a/../../.ksync.yaml", "must not contain .."),
            ("a/../.ksync.yaml", "must not contain .."),
            ("./.ksync.yaml", "must not contain empty or . components"),
            ("a//.ksync.yaml", "must not contain empty or . components"),
            ("a/.ksync.yaml/", "must not contain empty or . components"),
            ("teams/ksync.yaml", "must name a file called .ksync.yaml"),
            ("teams/.ksync.yml", "must name a file called .ksync.yaml"),
            ("teams", "must name a file called .ksync.yaml"),
            ("teams\\.ksync.yaml", "must use / as separator"),
            ("a\n/.ksync.yaml", "contains control characters"),
        ];
        for (path, rule) in refused {
            let err = validate_config_paths(&[(*path).to_owned()])
                .err()
                .map(|r| r.to_string())
                .unwrap_or_default();
            assert!(
                err.contains(&format!("spec.applicationConfigPaths[0] {path:?}: {rule}")),
                "{path:?}: {err}"
            );
        }
        let dup = validate_config_paths(&[TEAM.into(), SEARCH.into(), TEAM.into()])
            .err()
            .map(|r| r.to_string());
        assert_eq!(
            dup.as_deref(),
            Some(
                "discovery refused, no Application was changed: spec.applicationConfigPaths[2] \"teams/payments/.ksync.yaml\": listed more than once"
            )
        );
    }

    #[test]
    fn symlink_resolution_stays_within_the_root() {
        let cases: &[(&[&str], &str, Option<&[&str]>)] = &[
            (&["teams"], "shared/.ksync.yaml", Some(&["teams", "shared", ".ksync.yaml"])),
            (
                &["teams", "payments"],
                "../common/.ksync.yaml",
                Some(&["teams", "common", ".ksync.yaml"]),
            ),
            (&["a"], "./b/../c", Some(&["a", "c"])),
            (&[], "x", Some(&["x"])),
            (&["a"], "..", Some(&[])),
            (&[], "../x", None),
            (&["a"], "../../x", None),
            (&["a"], "../../a/x", None), // leaves and re-enters: refused
            (&["a"], "/etc/passwd", None),
            (&["a"], "", None),
            (&["a"], "..\\x", None),
        ];
        for (dir, target, expected) in cases {
            let got = resolve_within_root(dir, target);
            let expected = expected.map(|e| e.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
            assert_eq!(got, expected, "{dir:?} -> {target:?}");
        }
    }

    #[test]
    fn dns_subdomain_names() {
        for good in ["a", "payments", "pay-ments.v2", "0abc", &"a".repeat(253)] {
            assert!(is_dns_subdomain(good), "{good}");
        }
        for bad in ["", "A", "-a", "a-", "a..b", ".a", "a_b", "a b", &"a".repeat(254)] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
    }

    #[test]
    fn repository_without_identity_is_refused() {
        let mut repo = strict();
        repo.metadata.namespace = None;
        let refusal = refusal(plan_discovery(&repo, &[], &[]));
        assert_eq!(refusal.errors, vec![DiscoveryError::InvalidRepository]);
    }
}
