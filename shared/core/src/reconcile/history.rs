//! `spec.history.limit`: which Revisions of one Application to delete. Pure: the caller lists
//! the Application's Revisions and deletes the names returned.
//!
//! Rules:
//! - Revisions are ordered by `metadata.creationTimestamp`, then by name when two share a
//!   timestamp; one without a timestamp (not stored yet) counts as the newest.
//! - Every Revision counts toward the limit except those a rollback holds (the API reference:
//!   "Revisions a rollback holds are never deleted and do not count").
//! - Some Revisions are protected: never deleted, though (held ones apart) they count:
//!   - the deployed Revision ([`Keep::deployed`]);
//!   - the rollback target, the previous healthy Revision ([`Keep::rollback_target`]);
//!   - the Revision a pending rollback was requested to ([`Keep::requested_rollback`]);
//!   - the Revisions a rollback holds ([`Keep::held`]);
//!   - a Revision still in progress: no phase yet, or `Pending`, `Planning`, `AwaitingApproval`,
//!     `Applying`, `Observing` or `RollingBack` (a rollback away from it is running, and will
//!     mark it `RolledBack` once it completes).
//! - While more than `limit` Revisions count, the oldest unprotected ones are deleted until
//!   `limit` remain or only protected ones are left. A limit below 1 (the schema allows 1 to
//!   1000) is taken as 1. The caller trims whenever the count is over, not only when it makes a
//!   new Revision.
//!
//! [`Keep::for_application`] derives what to protect from the Application and its Revisions:
//! - held: the Application's Revisions with `RolledBack=True` whose `spec.source.revision` is the
//!   commit the Application's `sync.kuvryn.io/rollback-from` annotation names. Without the
//!   annotation nothing is held: once a new commit ends the hold the annotation goes, and the
//!   old Revisions keep `RolledBack=True` only as history (ruling 10), so they age out normally;
//! - deployed: the newest `Healthy` Revision of the commit in `status.deployedRevision`, or, with
//!   none `Healthy`, the newest Revision of that commit;
//! - rollback target: the deployed Revision's `status.previousRevision`; when it names none, the
//!   newest `Healthy` Revision older than the deployed one (of any other commit, not held), or,
//!   with nothing deployed, the newest `Healthy` Revision that is not held;
//! - requested rollback: the `sync.kuvryn.io/rollback-target-revision` annotation.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use kuvryn_sync_api::{Application, ConditionType, Revision, RevisionPhase, keys};

use crate::conditions::{self, Status};

/// Revisions to protect from `spec.history.limit`, by name; only the held ones do not count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keep {
    /// The Revision whose desired state runs now.
    pub deployed: Option<String>,
    /// The previous healthy Revision: where a rollback returns to.
    pub rollback_target: Option<String>,
    /// The Revision a pending rollback was requested to (`rollback-target-revision`).
    pub requested_rollback: Option<String>,
    /// Revisions a rollback holds.
    pub held: BTreeSet<String>,
}

impl Keep {
    /// What to protect for `app`, from its Revisions (Revisions of other Applications in the
    /// list are ignored). See the module documentation for the definitions.
    pub fn for_application(app: &Application, revisions: &[Revision]) -> Keep {
        let own: Vec<&Revision> = revisions.iter().filter(|r| belongs_to(r, app)).collect();
        let held: BTreeSet<String> = own
            .iter()
            .filter(|r| is_held(app, r))
            .filter_map(|r| name_of(r))
            .map(str::to_owned)
            .collect();

        let deployed_commit = app.status.as_ref().and_then(|s| s.deployed_revision.as_deref());
        let deployed = deployed_commit.and_then(|commit| {
            let of_commit =
                || own.iter().copied().filter(move |r| r.spec.source.revision == commit);
            newest(of_commit().filter(|r| phase_of(r) == Some(RevisionPhase::Healthy)))
                .or_else(|| newest(of_commit()))
        });

        let healthy_unheld = own.iter().copied().filter(|r| {
            phase_of(r) == Some(RevisionPhase::Healthy)
                && name_of(r).is_some_and(|n| !held.contains(n))
        });
        let rollback_target = match deployed {
            Some(current) => {
                current.status.as_ref().and_then(|s| s.previous_revision.clone()).or_else(|| {
                    newest(healthy_unheld.filter(|r| {
                        r.spec.source.revision != current.spec.source.revision
                            && age(r, current) == Ordering::Less
                    }))
                    .and_then(name_of)
                    .map(str::to_owned)
                })
            }
            None => newest(healthy_unheld).and_then(name_of).map(str::to_owned),
        };

        Keep {
            deployed: deployed.and_then(name_of).map(str::to_owned),
            rollback_target,
            requested_rollback: annotation(app, keys::ROLLBACK_TARGET_REVISION).map(str::to_owned),
            held,
        }
    }

    /// Whether the Revision named `name` is protected by this `Keep`.
    pub fn protects(&self, name: &str) -> bool {
        self.deployed.as_deref() == Some(name)
            || self.rollback_target.as_deref() == Some(name)
            || self.requested_rollback.as_deref() == Some(name)
            || self.held.contains(name)
    }
}

/// Names of the Revisions of one Application to delete under `limit`, oldest first. `revisions`
/// are that Application's Revisions; `keep` names the protected ones (in-progress Revisions are
/// protected without being named). Every named Revision but the held ones counts.
pub fn to_delete(revisions: &[Revision], limit: i32, keep: &Keep) -> Vec<String> {
    let limit = usize::try_from(limit.max(1)).unwrap_or(1);
    let mut seen = BTreeSet::new();
    let counted: Vec<&Revision> = revisions
        .iter()
        .filter(|r| name_of(r).is_some_and(|n| seen.insert(n) && !keep.held.contains(n)))
        .collect();
    let excess = counted.len().saturating_sub(limit);
    let mut candidates: Vec<&Revision> = counted
        .into_iter()
        .filter(|r| name_of(r).is_some_and(|n| !keep.protects(n)) && !in_progress(r))
        .collect();
    candidates.sort_by(|a, b| age(a, b));
    candidates.into_iter().take(excess).filter_map(name_of).map(str::to_owned).collect()
}

/// [`to_delete`] for `app` with its own `spec.history.limit` and [`Keep::for_application`];
/// `revisions` may hold other Applications' Revisions too, which are never chosen.
pub fn decide(app: &Application, revisions: &[Revision]) -> Vec<String> {
    let own: Vec<Revision> = revisions.iter().filter(|r| belongs_to(r, app)).cloned().collect();
    to_delete(&own, app.spec.history.limit, &Keep::for_application(app, &own))
}

/// Whether `revision` is still in progress (no phase yet, or not in a terminal phase), so it is
/// never deleted.
pub fn in_progress(revision: &Revision) -> bool {
    // `RollingBack` is not terminal: the rollback away from the Revision still runs.
    phase_of(revision).is_none_or(|phase| !phase.is_terminal())
}

/// Whether a rollback of `app` holds `revision`: it carries `RolledBack=True` and is of the
/// commit the Application's `sync.kuvryn.io/rollback-from` annotation names.
pub fn is_held(app: &Application, revision: &Revision) -> bool {
    let Some(from) = annotation(app, keys::ROLLBACK_FROM).filter(|f| !f.is_empty()) else {
        return false;
    };
    revision.spec.source.revision == from
        && revision.status.as_ref().is_some_and(|s| {
            conditions::get(&s.conditions, ConditionType::RolledBack)
                .is_some_and(|c| c.status == Status::True.as_str())
        })
}

fn name_of(revision: &Revision) -> Option<&str> {
    revision.metadata.name.as_deref()
}

fn phase_of(revision: &Revision) -> Option<RevisionPhase> {
    revision.status.as_ref().and_then(|s| s.phase)
}

fn annotation<'a>(app: &'a Application, key: &str) -> Option<&'a str> {
    app.metadata.annotations.as_ref().and_then(|a| a.get(key)).map(String::as_str)
}

/// Whether `revision` is one of `app`'s: its `applicationRef` names it, in its namespace (an
/// unknown namespace matches any).
fn belongs_to(revision: &Revision, app: &Application) -> bool {
    let same_namespace = match (&revision.metadata.namespace, &app.metadata.namespace) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    same_namespace
        && Some(revision.spec.application_ref.name.as_str()) == app.metadata.name.as_deref()
}

/// Older first: by creation time (none is newest), then by name.
fn age(a: &Revision, b: &Revision) -> Ordering {
    let key = |r: &Revision| {
        let created = r.metadata.creation_timestamp.as_ref();
        (created.is_none(), created.cloned(), r.metadata.name.clone())
    };
    key(a).cmp(&key(b))
}

fn newest<'a>(revisions: impl Iterator<Item = &'a Revision>) -> Option<&'a Revision> {
    revisions.max_by(|a, b| age(a, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions::NewCondition;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use kuvryn_sync_api::{
        ApplicationSpec, ApplicationStatus, ConditionReason, RevisionSpec, RevisionStatus,
    };

    const APP: &str = "web";
    const NS: &str = "team";

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).expect("timestamp"))
    }

    /// A Revision of [`APP`] named `name`, created at `created` seconds, of `commit`, in `phase`.
    fn rev(name: &str, created: i64, commit: &str, phase: Option<RevisionPhase>) -> Revision {
        let spec: RevisionSpec = serde_json::from_value(serde_json::json!({
            "applicationRef": {"name": APP},
            "source": {"repositoryRef": {"name": "platform"}, "revision": commit, "render": {"type": "yaml"}},
            "desiredStateHash": format!("hash-{name}"),
        }))
        .expect("spec");
        let mut r = Revision::new(name, spec);
        r.metadata.namespace = Some(NS.into());
        r.metadata.creation_timestamp = Some(at(created));
        r.status = Some(RevisionStatus { phase, ..RevisionStatus::default() });
        r
    }

    fn done(name: &str, created: i64) -> Revision {
        rev(name, created, &format!("c-{name}"), Some(RevisionPhase::Healthy))
    }

    fn with(mut r: Revision, change: impl FnOnce(&mut Revision)) -> Revision {
        change(&mut r);
        r
    }

    fn rolled_back(r: &mut Revision) {
        let status = r.status.get_or_insert_with(RevisionStatus::default);
        let condition = NewCondition {
            type_: ConditionType::RolledBack,
            status: Status::True,
            reason: ConditionReason::RollbackCompleted.as_str(),
            message: String::new(),
            observed_generation: None,
        };
        conditions::set(&mut status.conditions, condition, &at(500));
        status.phase = Some(RevisionPhase::RolledBack);
    }

    fn keep(deployed: Option<&str>, target: Option<&str>, held: &[&str]) -> Keep {
        Keep {
            deployed: deployed.map(str::to_owned),
            rollback_target: target.map(str::to_owned),
            requested_rollback: None,
            held: held.iter().map(|h| (*h).to_owned()).collect(),
        }
    }

    fn five() -> Vec<Revision> {
        (1..=5).map(|n| done(&format!("r{n}"), n * 10)).collect()
    }

    #[test]
    fn which_revisions_the_limit_deletes() {
        // (case, revisions, limit, keep, expected deletions, oldest first)
        type Case = (&'static str, Vec<Revision>, i32, Keep, Vec<&'static str>);
        let cases: Vec<Case> = vec![
            ("under the limit", five(), 10, Keep::default(), vec![]),
            ("at the limit", five(), 5, Keep::default(), vec![]),
            ("the newest limit are kept", five(), 3, Keep::default(), vec!["r1", "r2"]),
            ("limit 1", five(), 1, Keep::default(), vec!["r1", "r2", "r3", "r4"]),
            ("limit 0 is taken as 1", five(), 0, Keep::default(), vec!["r1", "r2", "r3", "r4"]),
            (
                "a negative limit is taken as 1",
                five(),
                -3,
                Keep::default(),
                vec!["r1", "r2", "r3", "r4"],
            ),
            (
                "input order does not matter",
                five().into_iter().rev().collect(),
                3,
                Keep::default(),
                vec!["r1", "r2"],
            ),
            (
                "the deployed Revision is kept and counts",
                five(),
                2,
                keep(Some("r1"), None, &[]),
                vec!["r2", "r3", "r4"],
            ),
            (
                "the rollback target is kept and counts",
                five(),
                1,
                keep(Some("r5"), Some("r2"), &[]),
                vec!["r1", "r3", "r4"],
            ),
            (
                "a requested rollback's Revision is kept and counts",
                five(),
                1,
                Keep { requested_rollback: Some("r1".into()), ..Keep::default() },
                vec!["r2", "r3", "r4", "r5"],
            ),
            (
                "held Revisions are kept and do not count",
                five(),
                2,
                keep(None, None, &["r4", "r5"]),
                vec!["r1"],
            ),
            (
                "limit 1 with everything protected but one",
                five(),
                1,
                keep(Some("r3"), Some("r2"), &["r4", "r5"]),
                vec!["r1"],
            ),
            (
                "limit 1 with deployed, target and held",
                five(),
                1,
                keep(Some("r3"), Some("r1"), &["r5"]),
                vec!["r2", "r4"],
            ),
            (
                "in-progress Revisions are never deleted but count",
                vec![
                    rev("p1", 10, "c1", Some(RevisionPhase::Pending)),
                    rev("p2", 20, "c2", Some(RevisionPhase::Planning)),
                    rev("p3", 30, "c3", Some(RevisionPhase::AwaitingApproval)),
                    rev("p4", 40, "c4", Some(RevisionPhase::Applying)),
                    rev("p5", 50, "c5", Some(RevisionPhase::Observing)),
                    rev("p6", 60, "c6", Some(RevisionPhase::RollingBack)),
                    rev("p7", 70, "c7", None),
                    done("d1", 15),
                    done("d2", 25),
                ],
                1,
                Keep::default(),
                vec!["d1", "d2"],
            ),
            (
                "ended phases are all deletable",
                vec![
                    rev("e1", 10, "c1", Some(RevisionPhase::Failed)),
                    rev("e2", 20, "c2", Some(RevisionPhase::Cancelled)),
                    rev("e3", 30, "c3", Some(RevisionPhase::RolledBack)),
                    rev("e4", 40, "c4", Some(RevisionPhase::Healthy)),
                ],
                1,
                Keep::default(),
                vec!["e1", "e2", "e3"],
            ),
            (
                "ties on the timestamp are broken by name",
                vec![done("rc", 10), done("ra", 10), done("rb", 10), done("aa", 20)],
                2,
                Keep::default(),
                vec!["ra", "rb"],
            ),
            (
                "no creationTimestamp counts as the newest",
                vec![
                    with(done("new", 0), |r| r.metadata.creation_timestamp = None),
                    done("old", 10),
                    done("mid", 20),
                ],
                2,
                Keep::default(),
                vec!["old"],
            ),
            (
                "a Revision without a name is never chosen",
                vec![with(done("x", 1), |r| r.metadata.name = None), done("a", 10), done("b", 20)],
                1,
                Keep::default(),
                vec!["a"],
            ),
        ];
        for (case, revisions, limit, keep, expected) in cases {
            assert_eq!(to_delete(&revisions, limit, &keep), expected, "{case}");
        }
    }

    fn application(status: Option<ApplicationStatus>, annotations: &[(&str, &str)]) -> Application {
        let spec: ApplicationSpec = serde_json::from_value(serde_json::json!({
            "source": {"repositoryRef": {"name": "platform"}, "path": APP, "render": {"type": "yaml"}},
            "destination": {"namespace": APP},
            "history": {"limit": 2},
        }))
        .expect("spec");
        let mut app = Application::new(APP, spec);
        app.metadata.namespace = Some(NS.into());
        if !annotations.is_empty() {
            app.metadata.annotations =
                Some(annotations.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
        }
        app.status = status;
        app
    }

    fn deployed(commit: &str) -> Option<ApplicationStatus> {
        Some(ApplicationStatus {
            deployed_revision: Some(commit.into()),
            ..ApplicationStatus::default()
        })
    }

    fn previous(r: &mut Revision, name: &str) {
        r.status.get_or_insert_with(RevisionStatus::default).previous_revision = Some(name.into());
    }

    #[test]
    fn what_an_application_protects() {
        let healthy = Some(RevisionPhase::Healthy);
        let failed = Some(RevisionPhase::Failed);
        let history = vec![
            rev("a1", 10, "ca", healthy),
            rev("b1", 20, "cb", healthy),
            with(rev("c1", 30, "cc", healthy), |r| previous(r, "b1")),
            with(rev("d1", 40, "cd", failed), rolled_back),
            with(rev("d2", 50, "cd", failed), rolled_back),
            rev("c2", 60, "cc", failed),
            // Another Application's Revision of the same commit.
            with(rev("other", 70, "cd", failed), |r| {
                rolled_back(r);
                r.spec.application_ref.name = "api".into();
            }),
        ];
        let rollback_from = [(keys::ROLLBACK_FROM, "cd")];
        // (case, Application, Revisions, expected Keep)
        let cases: Vec<(&str, Application, Vec<Revision>, Keep)> = vec![
            ("nothing deployed, nothing held", application(None, &[]), vec![], Keep::default()),
            (
                "deployed with previousRevision, held by rollback-from",
                application(deployed("cc"), &rollback_from),
                history.clone(),
                keep(Some("c1"), Some("b1"), &["d1", "d2"]),
            ),
            (
                "no rollback-from: RolledBack=True is history only (ruling 10)",
                application(deployed("cc"), &[]),
                history.clone(),
                keep(Some("c1"), Some("b1"), &[]),
            ),
            (
                "rollback-from of a commit with no RolledBack Revision holds nothing yet",
                application(deployed("cc"), &[(keys::ROLLBACK_FROM, "cb")]),
                history.clone(),
                keep(Some("c1"), Some("b1"), &[]),
            ),
            (
                "without previousRevision the newest older Healthy of another commit is the target",
                application(deployed("cc"), &[]),
                history
                    .iter()
                    .cloned()
                    .map(|r| {
                        with(r, |r| {
                            r.status.get_or_insert_with(RevisionStatus::default).previous_revision =
                                None
                        })
                    })
                    .collect(),
                keep(Some("c1"), Some("b1"), &[]),
            ),
            (
                "nothing deployed: the newest Healthy Revision not held is the target",
                application(None, &rollback_from),
                history.clone(),
                keep(None, Some("c1"), &["d1", "d2"]),
            ),
            (
                "deployed commit without a Healthy Revision: its newest Revision",
                application(deployed("cd"), &[]),
                history.clone(),
                keep(Some("d2"), Some("c1"), &[]),
            ),
            (
                "a pending rollback's requested Revision",
                application(deployed("cc"), &[(keys::ROLLBACK_TARGET_REVISION, "a1")]),
                history.clone(),
                Keep { requested_rollback: Some("a1".into()), ..keep(Some("c1"), Some("b1"), &[]) },
            ),
        ];
        for (case, app, revisions, expected) in cases {
            assert_eq!(Keep::for_application(&app, &revisions), expected, "{case}");
        }
    }

    #[test]
    fn decide_applies_the_application_s_limit_and_protections() {
        let healthy = Some(RevisionPhase::Healthy);
        let mut revisions: Vec<Revision> =
            (1..=6).map(|n| rev(&format!("h{n}"), n * 10, &format!("c{n}"), healthy)).collect();
        // h3 is deployed, h2 the rollback target; h7 and h8 are held; h9 is in progress.
        revisions[2] = with(revisions[2].clone(), |r| previous(r, "h2"));
        revisions.push(with(rev("h7", 70, "c7", Some(RevisionPhase::Failed)), rolled_back));
        revisions.push(with(rev("h8", 80, "c7", Some(RevisionPhase::Failed)), rolled_back));
        revisions.push(rev("h9", 90, "c9", Some(RevisionPhase::Applying)));
        revisions.push(with(done("foreign", 1), |r| r.spec.application_ref.name = "api".into()));
        let app = application(deployed("c3"), &[(keys::ROLLBACK_FROM, "c7")]);
        // Limit 2: all but the held h7 and h8 count (seven), so every unprotected one goes.
        assert_eq!(decide(&app, &revisions), ["h1", "h4", "h5", "h6"]);
        // Once a new commit ends the hold the annotation goes, and h7 and h8 count and go too.
        let released = application(deployed("c3"), &[]);
        assert_eq!(decide(&released, &revisions), ["h1", "h4", "h5", "h6", "h7", "h8"]);
    }
}
