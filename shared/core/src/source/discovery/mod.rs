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
//! # Where the code is
//! - `paths`: configured paths and symlinks (step 1, and the rule the I/O layer follows in 2).
//! - `parse`: one file's shape and keys (step 3).
//! - `rules`: one entry against the discovering Repository (step 4).
//! - `plan`: desired Applications compared with the existing ones (step 4).
//! - `error`: every refusal and its message.
//!
//! # Rules for discovered Applications
//! - `metadata.name` is required and must be a DNS subdomain; names are unique across all files.
//! - `metadata.namespace`, when set, must be the Repository's namespace.
//! - `spec.source.repositoryRef.name` defaults to the discovering Repository; naming another is a
//!   refusal (docs/decisions.md#ruling-15).
//! - `spec.source.render.type` is required.
//! - `spec.serviceAccountName` may only be the Repository's `applicationServiceAccountName` and
//!   defaults to it; when the Repository sets none, no service account may be set.
//! - `spec.sync.automatic`, `spec.sync.prune`, `spec.sync.conflictPolicy: adopt` and
//!   `spec.deletionPolicy: DeleteManagedResources` need `allowAutomatic`, `allowPrune`,
//!   `allowAdopt` and `allowDeleteManagedResources` in `spec.applicationPolicy`.
//! - Labels and annotations in the `sync.kuvryn.io/` domain are refused: approvals, rollback
//!   requests and ownership cannot come from Git.
//! - An existing Application of the same name that is hand-made (no `sync.kuvryn.io/repository`
//!   label) or owned by another Repository is a refusal; it is never taken over
//!   (docs/decisions.md#ruling-15).
//! - Discovered Applications get the label `sync.kuvryn.io/repository=<repository>` and the
//!   annotation `sync.kuvryn.io/discovered-from=<config path>`.
//! - Applications labelled for this Repository but absent from the files are deleted with
//!   `deletionPolicy: Orphan`, or with their own `deletionPolicy` when the Repository sets
//!   `allowDeleteManagedResources` (docs/decisions.md#ruling-2).
//! - A refusal is all or nothing: no Application is created, changed or deleted, so existing ones
//!   keep the spec they had (docs/decisions.md#traps). It is `Ready=False/ValidationFailure`.
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

mod error;
mod parse;
mod paths;
mod plan;
mod rules;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use kuvryn_sync_api::repository::DEFAULT_APPLICATION_CONFIG_PATH;
use kuvryn_sync_api::{Application, Repository};

pub use error::{DiscoveryError, DiscoveryRefusal};
pub use parse::{DiscoveredEntry, parse_config_file};
pub use paths::{
    CONFIG_FILE_NAME, MAX_CONFIG_FILE_BYTES, MAX_SYMLINK_HOPS, resolve_within_root,
    validate_config_paths,
};
pub use plan::{DeleteAction, DiscoveryPlan, plan_discovery};
pub use rules::is_dns_subdomain;

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

fn clip(s: &str, max: usize) -> String {
    crate::redact::truncate(s, max)
}
