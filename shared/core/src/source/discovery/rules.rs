//! The rules one discovered entry must follow, given the Repository that discovers it: its name,
//! namespace, Repository reference and service account, the `applicationPolicy` allowances, the
//! reserved `sync.kuvryn.io/` metadata, and never taking over an existing Application.

use kuvryn_sync_api::{
    Application, ApplicationPolicy, ConflictPolicy, DeletionPolicy, GROUP, Repository, keys,
};

use super::{DiscoveredEntry, DiscoveryError, clip};

/// The discovering Repository, as far as the rules need it.
pub(super) struct RepositoryRules<'a> {
    /// `metadata.name`.
    pub repo: &'a str,
    /// `metadata.namespace`, where every discovered Application lives.
    pub namespace: &'a str,
    /// `spec.applicationPolicy`.
    pub policy: &'a ApplicationPolicy,
    /// `spec.applicationServiceAccountName`, when set and not empty.
    pub service_account: Option<&'a str>,
    /// The Repository's `sync.kuvryn.io/shard` label: its discovered Applications go to the
    /// same controller shard (docs/sharding.md).
    pub shard: Option<&'a str>,
}

impl<'a> RepositoryRules<'a> {
    /// The Repository's rules, or [`DiscoveryError::InvalidRepository`] when it has no name or
    /// namespace.
    pub fn of(repository: &'a Repository) -> Result<Self, DiscoveryError> {
        let (Some(repo), Some(namespace)) = (
            repository.metadata.name.as_deref().filter(|n| !n.is_empty()),
            repository.metadata.namespace.as_deref().filter(|n| !n.is_empty()),
        ) else {
            return Err(DiscoveryError::InvalidRepository);
        };
        let spec = &repository.spec;
        Ok(Self {
            repo,
            namespace,
            policy: &spec.application_policy,
            service_account: spec
                .application_service_account_name
                .as_deref()
                .filter(|s| !s.is_empty()),
            shard: repository
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(keys::SHARD))
                .map(String::as_str),
        })
    }

    /// Every rule `entry` (named `name`) breaks on its own, in a fixed order. Rules that involve
    /// other entries or existing Applications are the caller's.
    pub fn check_entry(&self, entry: &DiscoveredEntry, name: &str) -> Vec<DiscoveryError> {
        let mut errors = Vec::new();
        if !is_dns_subdomain(name) {
            errors.push(DiscoveryError::InvalidName {
                path: entry.path.clone(),
                name: clip(name, 253),
            });
        }
        errors.extend(self.check_namespace(entry));
        errors.extend(self.check_repository_ref(entry));
        errors.extend(self.check_service_account(entry));
        errors.extend(self.check_allowances(entry));
        errors.extend(check_reserved_metadata(entry));
        errors
    }

    /// `metadata.namespace`, when set, must be the Repository's.
    fn check_namespace(&self, entry: &DiscoveredEntry) -> Option<DiscoveryError> {
        let namespace = entry.namespace.as_deref().filter(|ns| *ns != self.namespace)?;
        Some(DiscoveryError::ForeignNamespace {
            path: entry.path.clone(),
            app: entry.label(),
            namespace: namespace.to_owned(),
            repository_namespace: self.namespace.to_owned(),
        })
    }

    /// `spec.source.repositoryRef.name`, when set, must be the discovering Repository
    /// (docs/decisions.md#ruling-15).
    fn check_repository_ref(&self, entry: &DiscoveredEntry) -> Option<DiscoveryError> {
        let reference = entry.repository_ref.as_deref().filter(|r| *r != self.repo)?;
        Some(DiscoveryError::ForeignRepositoryRef {
            path: entry.path.clone(),
            app: entry.label(),
            repository_ref: reference.to_owned(),
            repository: self.repo.to_owned(),
        })
    }

    /// `spec.serviceAccountName` may only be the Repository's `applicationServiceAccountName`,
    /// and nothing when the Repository sets none.
    fn check_service_account(&self, entry: &DiscoveredEntry) -> Option<DiscoveryError> {
        let service_account = entry.spec.service_account_name.as_deref().filter(|s| !s.is_empty());
        match (service_account, self.service_account) {
            (Some(sa), Some(allowed)) if sa != allowed => {
                Some(DiscoveryError::ForeignServiceAccount {
                    path: entry.path.clone(),
                    app: entry.label(),
                    service_account: sa.to_owned(),
                    allowed: allowed.to_owned(),
                    repository: self.repo.to_owned(),
                })
            }
            (Some(sa), None) => Some(DiscoveryError::ServiceAccountNotAllowed {
                path: entry.path.clone(),
                app: entry.label(),
                service_account: sa.to_owned(),
                repository: self.repo.to_owned(),
            }),
            _ => None,
        }
    }

    /// Fields that need an `applicationPolicy` allowance the Repository does not give.
    fn check_allowances(&self, entry: &DiscoveredEntry) -> Vec<DiscoveryError> {
        let (spec, policy) = (&entry.spec, self.policy);
        let needs = [
            (
                spec.sync.automatic && !policy.allow_automatic,
                "spec.sync.automatic",
                "allowAutomatic",
            ),
            (spec.sync.prune && !policy.allow_prune, "spec.sync.prune", "allowPrune"),
            (
                spec.sync.conflict_policy == ConflictPolicy::Adopt && !policy.allow_adopt,
                "spec.sync.conflictPolicy: adopt",
                "allowAdopt",
            ),
            (
                spec.deletion_policy == DeletionPolicy::DeleteManagedResources
                    && !policy.allow_delete_managed_resources,
                "spec.deletionPolicy: DeleteManagedResources",
                "allowDeleteManagedResources",
            ),
        ];
        needs
            .into_iter()
            .filter(|(refused, _, _)| *refused)
            .map(|(_, field, allowance)| DiscoveryError::NotAllowed {
                path: entry.path.clone(),
                app: entry.label(),
                field,
                allowance,
                repository: self.repo.to_owned(),
            })
            .collect()
    }

    /// An existing Application of the entry's name must be one this Repository discovered: a
    /// hand-made one or another Repository's is never taken over (docs/decisions.md#ruling-15).
    pub fn check_not_taken_over(
        &self,
        entry: &DiscoveredEntry,
        current: &Application,
    ) -> Option<DiscoveryError> {
        match repository_label(current) {
            None => Some(DiscoveryError::HandMadeCollision {
                path: entry.path.clone(),
                app: entry.label(),
                namespace: self.namespace.to_owned(),
            }),
            Some(owner) if owner != self.repo => Some(DiscoveryError::OwnedByOtherRepository {
                path: entry.path.clone(),
                app: entry.label(),
                owner: owner.to_owned(),
            }),
            Some(_) => None,
        }
    }

    /// Whether `app` carries this Repository's `sync.kuvryn.io/repository` label.
    pub fn owns(&self, app: &Application) -> bool {
        repository_label(app) == Some(self.repo)
    }
}

/// Labels and annotations in the `sync.kuvryn.io/` domain cannot come from Git.
fn check_reserved_metadata(entry: &DiscoveredEntry) -> Vec<DiscoveryError> {
    [("label", &entry.labels), ("annotation", &entry.annotations)]
        .into_iter()
        .flat_map(|(what, map)| {
            map.keys().filter(|k| is_reserved_key(k)).map(move |key| {
                DiscoveryError::ReservedMetadata {
                    path: entry.path.clone(),
                    app: entry.label(),
                    what,
                    key: clip(key, 253),
                }
            })
        })
        .collect()
}

/// The `sync.kuvryn.io/repository` label: which Repository discovered `app`, if any.
fn repository_label(app: &Application) -> Option<&str> {
    app.metadata.labels.as_ref().and_then(|l| l.get(keys::REPOSITORY)).map(String::as_str)
}

/// Whether a label or annotation key is in the `sync.kuvryn.io` domain (or a subdomain of it).
fn is_reserved_key(key: &str) -> bool {
    key.split_once('/')
        .is_some_and(|(prefix, _)| prefix == GROUP || prefix.ends_with(&format!(".{GROUP}")))
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
