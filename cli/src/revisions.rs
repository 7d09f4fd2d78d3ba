//! Pure decisions about an Application's Revisions: their order (newest first), which one awaits
//! approval, which one a rollback returns to, and which one a `REVISION` argument names.

use std::collections::HashMap;

use kuvryn_sync_api::{Application, Revision, RevisionPhase, keys};

/// The phase of `revision`, when the controller has written one.
pub fn phase(revision: &Revision) -> Option<RevisionPhase> {
    revision.status.as_ref().and_then(|s| s.phase)
}

/// The name of `revision`.
pub fn name(revision: &Revision) -> &str {
    revision.metadata.name.as_deref().unwrap_or_default()
}

/// `revisions` newest first: by creation time, then (for Revisions created within the same
/// second) by how many earlier Revisions their `status.previousRevision` chain leads through,
/// then by start time, then by name, so the order is total and stable.
pub fn newest_first(mut revisions: Vec<Revision>) -> Vec<Revision> {
    let previous: HashMap<String, String> = revisions
        .iter()
        .filter_map(|r| {
            let prev = r.status.as_ref()?.previous_revision.clone()?;
            Some((name(r).to_owned(), prev))
        })
        .collect();
    let depth = |start: &str| {
        let mut depth = 0usize;
        let mut current = start;
        while let Some(prev) = previous.get(current) {
            depth += 1;
            if depth > previous.len() {
                break; // a cycle: stop counting
            }
            current = prev;
        }
        depth
    };
    let mut keyed: Vec<_> = revisions
        .drain(..)
        .map(|r| {
            let created = r.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let started = r.status.as_ref().and_then(|s| s.started_at.as_ref()).map(|t| t.0);
            ((created, depth(name(&r)), started, name(&r).to_owned()), r)
        })
        .collect();
    keyed.sort_by(|(a, _), (b, _)| b.cmp(a));
    keyed.into_iter().map(|(_, r)| r).collect()
}

/// The newest Revision waiting in AwaitingApproval (`revisions` newest first).
pub fn awaiting_approval(revisions: &[Revision]) -> Option<&Revision> {
    revisions.iter().find(|r| phase(r) == Some(RevisionPhase::AwaitingApproval))
}

/// The default rollback target: the newest Healthy Revision of another commit than the deployed
/// one (`revisions` newest first).
pub fn previous_healthy<'a>(
    revisions: &'a [Revision],
    deployed_commit: Option<&str>,
) -> Option<&'a Revision> {
    revisions.iter().find(|r| {
        phase(r) == Some(RevisionPhase::Healthy)
            && Some(r.spec.source.revision.as_str()) != deployed_commit
    })
}

/// Whether `revision` completed a Healthy rollout once, so a rollback to it has a desired state
/// to return to.
pub fn was_deployed(revision: &Revision) -> bool {
    phase(revision) == Some(RevisionPhase::Healthy)
        || revision.status.as_ref().is_some_and(|s| s.deployed_desired_state_hash.is_some())
}

/// The Revision `query` names: a Revision name, else the newest Revision whose commit starts with
/// `query` (at least 7 characters).
pub fn find<'a>(revisions: &'a [Revision], query: &str) -> Option<&'a Revision> {
    revisions.iter().find(|r| name(r) == query).or_else(|| {
        (query.len() >= 7)
            .then(|| revisions.iter().find(|r| r.spec.source.revision.starts_with(query)))
            .flatten()
    })
}

/// The hold a completed rollback keeps on `app`, for `ksync status`: what is held, since when,
/// and how it ends. `None` when nothing is held.
pub fn hold_summary(app: &Application, all: &[Revision]) -> Option<String> {
    let annotations = app.metadata.annotations.clone().unwrap_or_default();
    let held = annotations.get(keys::ROLLBACK_FROM).filter(|h| !h.is_empty())?;
    let app_name = app.metadata.name.as_deref().unwrap_or_default();
    let marked: Vec<&Revision> = all
        .iter()
        .filter(|r| r.spec.source.revision == *held && rolled_back_condition(r).is_some())
        .collect();
    let short = crate::output::short_commit(Some(held));
    let Some(first) = marked.first() else {
        return Some(format!(
            "  {:<10} a rollback from commit {short} is in progress\n",
            "Rollback:"
        ));
    };
    let condition = rolled_back_condition(first)?;
    let since = crate::output::timestamp(Some(&condition.last_transition_time));
    let by = first
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::ROLLBACK_REQUESTED_BY))
        .map_or_else(|| "-".to_owned(), Clone::clone);
    Some(format!(
        "  {:<10} commit {short} is held since {since} (rollback requested by {by}); it is not \
         deployed again until a new commit arrives, or lift the hold with `ksync rollback \
         {app_name} --to {}`\n",
        "Held:",
        name(first)
    ))
}

/// A Revision's `RolledBack=True` condition, if it carries one.
pub fn rolled_back_condition(
    revision: &Revision,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    revision
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "RolledBack" && c.status == "True")
}

/// What a rollback did to `revision`, for `ksync history`: `held` or `rolled back` with who
/// requested it, `rollback target` for one a rollback ran to, else `-`.
pub fn rollback_note(revision: &Revision, held: Option<&str>) -> String {
    let by = revision
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::ROLLBACK_REQUESTED_BY))
        .map_or("-", String::as_str);
    if rolled_back_condition(revision).is_some() {
        let state = if held == Some(revision.spec.source.revision.as_str()) {
            "held"
        } else {
            "rolled back"
        };
        return format!("{state} (by {by})");
    }
    let ran = revision.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(RUN));
    if ran { format!("rollback target (by {by})") } else { "-".to_owned() }
}

/// Annotation on a Revision a rollback ran to (the controller's `core::rollback::RUN`).
const RUN: &str = "sync.kuvryn.io/rollback-run";

#[cfg(test)]
pub mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use kuvryn_sync_api::RevisionStatus;
    use serde_json::json;

    /// A Revision `name` of `commit`, created at second `created`, in `phase`.
    pub fn revision(
        name: &str,
        commit: &str,
        created: i64,
        phase: Option<RevisionPhase>,
        previous: Option<&str>,
    ) -> Revision {
        let mut revision: Revision = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Revision",
            "metadata": {"name": name},
            "spec": {"applicationRef": {"name": "web"},
                     "source": {"repositoryRef": {"name": "apps"}, "revision": commit,
                                "render": {"type": "yaml"}},
                     "desiredStateHash": "sha256:00"},
        }))
        .expect("revision");
        revision.metadata.creation_timestamp =
            Some(Time(Timestamp::from_second(created).expect("time")));
        revision.status = Some(RevisionStatus {
            phase,
            previous_revision: previous.map(str::to_owned),
            ..RevisionStatus::default()
        });
        revision
    }

    fn names(revisions: &[Revision]) -> Vec<&str> {
        revisions.iter().map(name).collect()
    }

    #[test]
    fn newest_first_orders_by_creation_then_by_the_previous_revision_chain() {
        use RevisionPhase::*;
        let cases: Vec<(Vec<Revision>, Vec<&str>)> = vec![
            (
                vec![
                    revision("a", "c1", 10, Some(Healthy), None),
                    revision("c", "c3", 30, Some(Healthy), Some("b")),
                    revision("b", "c2", 20, Some(Healthy), Some("a")),
                ],
                vec!["c", "b", "a"],
            ),
            // Same second: the one whose previousRevision is the other is newer, whatever
            // the names say.
            (
                vec![
                    revision("z-old", "c1", 10, Some(Healthy), None),
                    revision("a-new", "c2", 10, Some(AwaitingApproval), Some("z-old")),
                ],
                vec!["a-new", "z-old"],
            ),
            // A cycle of previousRevision does not hang.
            (
                vec![
                    revision("x", "c1", 10, Some(Healthy), Some("y")),
                    revision("y", "c2", 10, Some(Healthy), Some("x")),
                ],
                vec!["y", "x"],
            ),
        ];
        for (input, want) in cases {
            assert_eq!(names(&newest_first(input)), want);
        }
    }

    #[test]
    fn the_rollback_target_is_the_newest_healthy_revision_of_another_commit() {
        use RevisionPhase::*;
        let revisions = newest_first(vec![
            revision("r1", "c1", 10, Some(Healthy), None),
            revision("r2", "c2", 20, Some(Healthy), Some("r1")),
            revision("r3", "c3", 30, Some(Failed), Some("r2")),
            revision("r4", "c4", 40, Some(Healthy), Some("r2")),
        ]);
        let target = |deployed| previous_healthy(&revisions, deployed).map(name);
        assert_eq!(target(Some("c4")), Some("r2"), "skips the deployed and the failed one");
        assert_eq!(target(Some("c2")), Some("r4"));
        assert_eq!(target(None), Some("r4"));
        let only = vec![revision("r1", "c1", 10, Some(Healthy), None)];
        assert_eq!(previous_healthy(&only, Some("c1")).map(name), None, "nothing to return to");
    }

    #[test]
    fn awaiting_approval_is_the_newest_waiting_revision() {
        use RevisionPhase::*;
        let revisions = newest_first(vec![
            revision("r1", "c1", 10, Some(Healthy), None),
            revision("r2", "c2", 20, Some(AwaitingApproval), Some("r1")),
        ]);
        assert_eq!(awaiting_approval(&revisions).map(name), Some("r2"));
        assert_eq!(awaiting_approval(&revisions[1..]).map(name), None);
    }

    #[test]
    fn a_revision_is_found_by_name_or_by_a_commit_prefix_of_seven_characters() {
        use RevisionPhase::*;
        let revisions = newest_first(vec![
            revision("web-1", "0123456789abcdef", 10, Some(Healthy), None),
            revision("web-2", "fedcba9876543210", 20, Some(Healthy), None),
        ]);
        let cases = [
            ("web-1", Some("web-1")),
            ("fedcba9", Some("web-2")),
            ("fedcba98765", Some("web-2")),
            ("fedcba", None),
            ("nope", None),
        ];
        for (query, want) in cases {
            assert_eq!(find(&revisions, query).map(name), want, "{query}");
        }
    }

    #[test]
    fn was_deployed_needs_a_healthy_phase_or_a_deployed_desired_state() {
        let mut rolled_back = revision("r", "c", 10, Some(RevisionPhase::RolledBack), None);
        assert!(!was_deployed(&rolled_back));
        if let Some(status) = rolled_back.status.as_mut() {
            status.deployed_desired_state_hash = Some("sha256:11".into());
        }
        assert!(was_deployed(&rolled_back));
        assert!(was_deployed(&revision("h", "c", 10, Some(RevisionPhase::Healthy), None)));
        assert!(!was_deployed(&revision("f", "c", 10, Some(RevisionPhase::Failed), None)));
    }
}
