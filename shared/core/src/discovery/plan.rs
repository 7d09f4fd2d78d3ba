//! Comparing the discovered entries with the Repository's rules and the Applications that
//! exist: what to create, update and delete, or a refusal.

use std::collections::BTreeMap;

use kuvryn_sync_api::{Application, ConflictPolicy, DeletionPolicy, GROUP, Repository, keys};

use super::{DiscoveredEntry, DiscoveryError, DiscoveryRefusal, clip};

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
    use super::*;

    #[test]
    fn dns_subdomain_names() {
        for good in ["a", "payments", "pay-ments.v2", "0abc", &"a".repeat(253)] {
            assert!(is_dns_subdomain(good), "{good}");
        }
        for bad in ["", "A", "-a", "a-", "a..b", ".a", "a_b", "a b", &"a".repeat(254)] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
    }
}
