//! From the discovered entries and the Applications that exist to what discovery changes: check
//! every entry, build the Application it asks for, then compare with the existing ones to find
//! creates, updates and deletions. Any problem refuses the whole plan.

use std::collections::{BTreeMap, BTreeSet};

use kuvryn_sync_api::{Application, DeletionPolicy, Repository, keys};

use super::rules::RepositoryRules;
use super::{DiscoveredEntry, DiscoveryError, DiscoveryRefusal};

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

/// Check every entry against the Repository's rules and compare with `existing` (the
/// Applications in the Repository's namespace, hand-made and foreign ones included). All or
/// nothing: any violation refuses the whole plan.
pub fn plan_discovery(
    repository: &Repository,
    entries: &[DiscoveredEntry],
    existing: &[Application],
) -> Result<DiscoveryPlan, DiscoveryRefusal> {
    let rules = RepositoryRules::of(repository)?;
    let existing = existing_by_name(existing, rules.namespace);
    let desired = desired_applications(&rules, entries, &existing)?;
    let delete = deletions(&rules, &desired, &existing);
    let (create, update) = creates_and_updates(desired, &existing);
    Ok(DiscoveryPlan { create, update, delete })
}

/// The Applications in `namespace` (or without one), by name.
fn existing_by_name<'a>(
    existing: &'a [Application],
    namespace: &str,
) -> BTreeMap<&'a str, &'a Application> {
    existing
        .iter()
        .filter(|a| a.metadata.namespace.as_deref().is_none_or(|n| n == namespace))
        .filter_map(|a| a.metadata.name.as_deref().map(|n| (n, a)))
        .collect()
}

/// The Application each entry asks for, in entry order, or every rule broken: the entry's own
/// rules, names unique across all files, and no existing Application taken over.
fn desired_applications(
    rules: &RepositoryRules<'_>,
    entries: &[DiscoveredEntry],
    existing: &BTreeMap<&str, &Application>,
) -> Result<Vec<Application>, DiscoveryRefusal> {
    let mut errors = Vec::new();
    let mut first_path: BTreeMap<&str, &str> = BTreeMap::new();
    let mut desired = Vec::new();
    for entry in entries {
        let Some(name) = entry.name.as_deref() else {
            errors
                .push(DiscoveryError::MissingName { path: entry.path.clone(), index: entry.index });
            continue;
        };
        let before = errors.len();
        errors.extend(rules.check_entry(entry, name));
        if let Some(first) = first_path.get(name) {
            errors.push(DiscoveryError::DuplicateName {
                path: entry.path.clone(),
                app: entry.label(),
                first_path: (*first).to_owned(),
            });
            continue;
        }
        first_path.insert(name, &entry.path);
        if let Some(current) = existing.get(name) {
            errors.extend(rules.check_not_taken_over(entry, current));
        }
        if errors.len() == before {
            desired.push(desired_application(rules, entry, name));
        }
    }
    if errors.is_empty() { Ok(desired) } else { Err(DiscoveryRefusal { errors }) }
}

/// The Application an entry asks for: the Repository's reference and service account filled in,
/// in the Repository's namespace, with our label and annotation.
fn desired_application(
    rules: &RepositoryRules<'_>,
    entry: &DiscoveredEntry,
    name: &str,
) -> Application {
    let mut spec = entry.spec.clone();
    spec.source.repository_ref.name = rules.repo.to_owned();
    spec.service_account_name = rules.service_account.map(str::to_owned);
    let mut app = Application::new(name, spec);
    app.metadata.namespace = Some(rules.namespace.to_owned());
    let mut labels = entry.labels.clone();
    labels.insert(keys::REPOSITORY.to_owned(), rules.repo.to_owned());
    if let Some(shard) = rules.shard {
        labels.insert(keys::SHARD.to_owned(), shard.to_owned());
    }
    let mut annotations = entry.annotations.clone();
    annotations.insert(keys::DISCOVERED_FROM.to_owned(), entry.path.clone());
    app.metadata.labels = Some(labels);
    app.metadata.annotations = Some(annotations);
    app
}

/// Split the desired Applications into those to create (no Application of the name) and those to
/// update (not [`up_to_date`]); the rest need nothing. Both lists are sorted by name.
fn creates_and_updates(
    desired: Vec<Application>,
    existing: &BTreeMap<&str, &Application>,
) -> (Vec<Application>, Vec<Application>) {
    let (mut create, mut update) = (Vec::new(), Vec::new());
    for app in desired {
        let name = app.metadata.name.as_deref().unwrap_or_default();
        match existing.get(name) {
            None => create.push(app),
            Some(current) if !up_to_date(current, &app) => update.push(app),
            Some(_) => {}
        }
    }
    let by_name = |a: &Application, b: &Application| a.metadata.name.cmp(&b.metadata.name);
    create.sort_by(by_name);
    update.sort_by(by_name);
    (create, update)
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

/// Applications of this Repository that no file proposes any more and that are not already being
/// deleted, sorted by name. They go as `Orphan`, or with their own `deletionPolicy` when the
/// Repository allows `DeleteManagedResources` (docs/decisions.md#ruling-2).
fn deletions(
    rules: &RepositoryRules<'_>,
    desired: &[Application],
    existing: &BTreeMap<&str, &Application>,
) -> Vec<DeleteAction> {
    let proposed: BTreeSet<&str> =
        desired.iter().filter_map(|a| a.metadata.name.as_deref()).collect();
    existing
        .iter()
        .filter(|(name, current)| {
            rules.owns(current)
                && !proposed.contains(*name)
                && current.metadata.deletion_timestamp.is_none()
        })
        .map(|(name, current)| {
            let current_policy = current.spec.deletion_policy;
            DeleteAction {
                name: (*name).to_owned(),
                deletion_policy: if rules.policy.allow_delete_managed_resources {
                    current_policy
                } else {
                    DeletionPolicy::Orphan
                },
                current_deletion_policy: current_policy,
                uid: current.metadata.uid.clone(),
            }
        })
        .collect()
}
