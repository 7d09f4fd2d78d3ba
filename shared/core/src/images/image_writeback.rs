//! Image write-back results on a Repository: the `ImagesUpdated` condition and its Events, and
//! the check of `spec.imageUpdate.path`. Pure: the controller runs the write-back (a fresh
//! checkout, [`crate::image_update::update_file`] on the YAML files, a commit and a push) and
//! hands its [`WriteBackOutcome`] to [`decide_write_back`] together with the status the
//! Repository reconcile is about to write.
//!
//! Rules:
//! - Only a Repository with `spec.imageUpdate` has the condition; without it the condition is
//!   removed (the spec no longer asks for write-back).
//! - `Disabled` (the controller runs without `--image-write-back`) is `ImagesUpdated=False` with
//!   reason `Disabled`: the images of this Repository are not being updated, though nothing
//!   failed. `False` rather than `Unknown`, because the controller knows exactly why, and a
//!   dashboard that only reads the status must not show it as up to date.
//! - `UpToDate` is `True/UpToDate`, except right after a commit: a `True/Committed` condition is
//!   kept while nothing else needs changing, so the last commit stays visible until the next
//!   change (or failure) replaces it. The commit is what made the branch up to date.
//! - `Committed` is `True/Committed` naming the commit and the branch; every commit records an
//!   `ImagesUpdated` Event (Normal).
//! - `Failed` is `False/UpdateFailed` with the (already redacted) reason; an `ImageUpdateFailed`
//!   Event (Warning) is recorded when the condition was not already the same failure, so a
//!   failure that repeats on every poll records one Event.
//! - Markers left alone (a policy that does not exist or has no selection yet, a malformed
//!   marker) are listed in the message of `UpToDate` and `Committed`, at most
//!   [`MAX_NOTES`] of them, so a typo in a marker does not go unnoticed.
//! - Messages pass the shape-based masks and are truncated to [`MAX_MESSAGE`]; the condition's
//!   `observedGeneration` is the Repository's `metadata.generation`.
//!
//! `spec.imageUpdate.path` ([`check_path`]) is relative to the repository root: empty or `.`
//! means the root; absolute paths and `..` components are refused, and `.` components and
//! repeated slashes are dropped. The controller walks the checkout without following any
//! symlink, so a link cannot lead the edit out of the checkout either.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use kuvryn_sync_api::{ConditionReason, ConditionType, EventReason, Repository, RepositoryStatus};

use crate::conditions::{self, NewCondition, Status};
use crate::redact;

/// Longest condition or Event message we write.
pub const MAX_MESSAGE: usize = 1024;

/// Most skipped-marker notes named in a message.
pub const MAX_NOTES: usize = 3;

/// The flag that turns write-back on, named in the `Disabled` message.
pub const FLAG: &str = "--image-write-back";

/// What one write-back attempt did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteBackOutcome {
    /// The controller runs without [`FLAG`].
    Disabled,
    /// Nothing needed changing.
    UpToDate {
        /// Markers left alone, as `path: line N: why`.
        notes: Vec<String>,
    },
    /// One commit was pushed.
    Committed {
        /// The full commit id.
        commit: String,
        /// The branch it was pushed to.
        branch: String,
        /// How many values changed.
        changes: usize,
        /// Markers left alone, as `path: line N: why`.
        notes: Vec<String>,
    },
    /// The write-back failed; `message` is already redacted with the credentials it used.
    Failed {
        /// What went wrong.
        message: String,
    },
}

/// What the write-back result changes in a Repository's status.
#[derive(Clone, Debug, PartialEq)]
pub struct WriteBackDecision {
    /// The status to write, or `None` when it equals the current one (no write).
    pub status: Option<RepositoryStatus>,
    /// Events to record (reason, message).
    pub events: Vec<(EventReason, String)>,
}

/// Set the `ImagesUpdated` condition of `repository` after `outcome` (`None`: the Repository has
/// no `spec.imageUpdate`) on `next`, the status the reconcile decided to write (`None`: it keeps
/// the current one), at `now`.
pub fn decide_write_back(
    repository: &Repository,
    next: Option<RepositoryStatus>,
    outcome: Option<&WriteBackOutcome>,
    now: &Time,
) -> WriteBackDecision {
    let current = repository.status.clone().unwrap_or_default();
    let mut status = next.unwrap_or_else(|| current.clone());
    let generation = repository.metadata.generation;
    let previous = conditions::get(&current.conditions, ConditionType::ImagesUpdated).cloned();
    let mut events = Vec::new();

    match outcome {
        None => {
            conditions::remove(&mut status.conditions, ConditionType::ImagesUpdated);
        }
        Some(outcome) => {
            let (condition_status, reason, message) = condition_of(outcome);
            let message = truncate(&message);
            let keep_commit = matches!(outcome, WriteBackOutcome::UpToDate { .. })
                && previous.as_ref().is_some_and(|c| {
                    c.status == Status::True.as_str()
                        && c.reason == ConditionReason::Committed.as_str()
                });
            match outcome {
                WriteBackOutcome::Committed { .. } => {
                    events.push((EventReason::ImagesUpdated, message.clone()));
                }
                WriteBackOutcome::Failed { .. } => {
                    let same = previous.as_ref().is_some_and(|c| {
                        c.reason == ConditionReason::UpdateFailed.as_str() && c.message == message
                    });
                    if !same {
                        events.push((EventReason::ImageUpdateFailed, message.clone()));
                    }
                }
                WriteBackOutcome::Disabled | WriteBackOutcome::UpToDate { .. } => {}
            }
            if keep_commit {
                // Carry the Committed condition over as it is, whatever `next` holds.
                if let Some(previous) = previous {
                    conditions::remove(&mut status.conditions, ConditionType::ImagesUpdated);
                    status.conditions.push(previous);
                }
            } else {
                conditions::set(
                    &mut status.conditions,
                    NewCondition {
                        type_: ConditionType::ImagesUpdated,
                        status: condition_status,
                        reason: reason.as_str(),
                        message,
                        observed_generation: generation,
                    },
                    now,
                );
            }
        }
    }
    WriteBackDecision { status: (status != current).then_some(status), events }
}

/// The condition's status, reason and message for `outcome`.
fn condition_of(outcome: &WriteBackOutcome) -> (Status, ConditionReason, String) {
    match outcome {
        WriteBackOutcome::Disabled => (
            Status::False,
            ConditionReason::Disabled,
            format!(
                "image write-back is off: the controller runs without {FLAG}, so spec.imageUpdate is not acted on; start the controller with {FLAG} (chart value controller.imageWriteBack: true) to commit ImagePolicy selections"
            ),
        ),
        WriteBackOutcome::UpToDate { notes } => (
            Status::True,
            ConditionReason::UpToDate,
            with_notes("every marked field already has its ImagePolicy's selection".into(), notes),
        ),
        WriteBackOutcome::Committed { commit, branch, changes, notes } => (
            Status::True,
            ConditionReason::Committed,
            with_notes(
                format!(
                    "committed {commit} to branch {branch}: {changes} image reference{} updated",
                    if *changes == 1 { "" } else { "s" }
                ),
                notes,
            ),
        ),
        WriteBackOutcome::Failed { message } => {
            (Status::False, ConditionReason::UpdateFailed, message.clone())
        }
    }
}

fn with_notes(mut message: String, notes: &[String]) -> String {
    if notes.is_empty() {
        return message;
    }
    let shown: Vec<&str> = notes.iter().take(MAX_NOTES).map(String::as_str).collect();
    message.push_str(&format!("; {} marker(s) left alone: {}", notes.len(), shown.join("; ")));
    if notes.len() > MAX_NOTES {
        message.push_str("; …");
    }
    message
}

fn truncate(message: &str) -> String {
    redact::truncate(&redact::redact_shapes(message), MAX_MESSAGE)
}

/// Why `spec.imageUpdate.path` cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// It starts with `/`.
    #[error(
        "spec.imageUpdate.path {path:?} is absolute; write a folder relative to the repository root, such as deploy/production"
    )]
    Absolute {
        /// The path as written.
        path: String,
    },
    /// A component is `..`.
    #[error(
        "spec.imageUpdate.path {path:?} has a '..' component, which could leave the checkout; write a folder inside the repository, such as deploy/production"
    )]
    ParentComponent {
        /// The path as written.
        path: String,
    },
    /// It holds a NUL or another control character.
    #[error("spec.imageUpdate.path has a control character; write a plain folder name")]
    ControlCharacter,
}

/// The components of `spec.imageUpdate.path` below the repository root (empty for the root).
pub fn check_path(path: Option<&str>) -> Result<Vec<String>, PathError> {
    let Some(path) = path else { return Ok(Vec::new()) };
    if path.chars().any(char::is_control) {
        return Err(PathError::ControlCharacter);
    }
    if path.starts_with('/') {
        return Err(PathError::Absolute { path: path.to_owned() });
    }
    let mut components = Vec::new();
    for component in path.split('/') {
        match component {
            "" | "." => {}
            ".." => return Err(PathError::ParentComponent { path: path.to_owned() }),
            other => components.push(other.to_owned()),
        }
    }
    Ok(components)
}

#[cfg(test)]
mod tests {
    // Table tests spell their row types out.
    #![allow(clippy::type_complexity)]

    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use kuvryn_sync_api::RepositorySpec;

    fn time(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).expect("time"))
    }

    fn condition(status: &str, reason: &str, message: &str, at: i64) -> Condition {
        Condition {
            type_: "ImagesUpdated".into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: Some(3),
            last_transition_time: time(at),
        }
    }

    fn ready() -> Condition {
        Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "FetchSucceeded".into(),
            message: "fetched".into(),
            observed_generation: Some(3),
            last_transition_time: time(1),
        }
    }

    fn repository(images_updated: Option<Condition>) -> Repository {
        let spec: RepositorySpec = serde_json::from_value(serde_json::json!({
            "type": "git", "git": {"url": "https://git.example/apps.git"}
        }))
        .expect("spec");
        let mut repo = Repository::new("apps", spec);
        repo.metadata.generation = Some(3);
        let mut conditions = vec![ready()];
        conditions.extend(images_updated);
        repo.status = Some(RepositoryStatus { conditions, ..Default::default() });
        repo
    }

    fn committed() -> WriteBackOutcome {
        WriteBackOutcome::Committed {
            commit: "0123abc".into(),
            branch: "main".into(),
            changes: 1,
            notes: Vec::new(),
        }
    }

    fn failed(message: &str) -> WriteBackOutcome {
        WriteBackOutcome::Failed { message: message.into() }
    }

    const COMMITTED: &str = "committed 0123abc to branch main: 1 image reference updated";
    const UP_TO_DATE: &str = "every marked field already has its ImagePolicy's selection";

    #[test]
    fn the_condition_and_events_follow_the_outcome() {
        let up_to_date = WriteBackOutcome::UpToDate { notes: Vec::new() };
        let noted = format!(
            "{UP_TO_DATE}; 5 marker(s) left alone: a.yaml: line 1: unknown; a.yaml: line 2: unknown; a.yaml: line 3: unknown; …"
        );
        // (name, current condition, outcome, expected (status, reason, message prefix,
        // transition time), expected events)
        let rows: Vec<(
            &str,
            Option<Condition>,
            WriteBackOutcome,
            (&str, &str, &str, i64),
            Vec<EventReason>,
        )> = vec![
            (
                "disabled, first time",
                None,
                WriteBackOutcome::Disabled,
                ("False", "Disabled", "image write-back is off", 100),
                vec![],
            ),
            (
                "up to date, first time",
                None,
                up_to_date.clone(),
                ("True", "UpToDate", UP_TO_DATE, 100),
                vec![],
            ),
            (
                "a commit",
                Some(condition("True", "UpToDate", UP_TO_DATE, 5)),
                committed(),
                ("True", "Committed", COMMITTED, 5),
                vec![EventReason::ImagesUpdated],
            ),
            (
                "a second commit records a second Event",
                Some(condition("True", "Committed", "committed 999 to branch main", 5)),
                committed(),
                ("True", "Committed", COMMITTED, 5),
                vec![EventReason::ImagesUpdated],
            ),
            (
                "up to date after a commit keeps the commit",
                Some(condition("True", "Committed", COMMITTED, 5)),
                up_to_date.clone(),
                ("True", "Committed", COMMITTED, 5),
                vec![],
            ),
            (
                "a failure after success",
                Some(condition("True", "Committed", COMMITTED, 5)),
                failed("push refused"),
                ("False", "UpdateFailed", "push refused", 100),
                vec![EventReason::ImageUpdateFailed],
            ),
            (
                "the same failure again records no Event",
                Some(condition("False", "UpdateFailed", "push refused", 5)),
                failed("push refused"),
                ("False", "UpdateFailed", "push refused", 5),
                vec![],
            ),
            (
                "another failure records one",
                Some(condition("False", "UpdateFailed", "push refused", 5)),
                failed("Secret apps/push not found"),
                ("False", "UpdateFailed", "Secret apps/push not found", 5),
                vec![EventReason::ImageUpdateFailed],
            ),
            (
                "up to date after a failure",
                Some(condition("False", "UpdateFailed", "push refused", 5)),
                up_to_date.clone(),
                ("True", "UpToDate", UP_TO_DATE, 100),
                vec![],
            ),
            (
                "disabled after a commit",
                Some(condition("True", "Committed", COMMITTED, 5)),
                WriteBackOutcome::Disabled,
                ("False", "Disabled", "image write-back is off", 100),
                vec![],
            ),
            (
                "notes are listed",
                None,
                WriteBackOutcome::UpToDate {
                    notes: (1..=5).map(|n| format!("a.yaml: line {n}: unknown")).collect(),
                },
                ("True", "UpToDate", &noted, 100),
                vec![],
            ),
        ];
        for (name, current, outcome, (status, reason, message, at), events) in rows {
            let repo = repository(current);
            let decision = decide_write_back(&repo, None, Some(&outcome), &time(100));
            let written = decision.status.unwrap_or_else(|| repo.status.clone().expect("fixture"));
            let got = conditions::get(&written.conditions, ConditionType::ImagesUpdated)
                .unwrap_or_else(|| panic!("{name}: no condition"));
            assert_eq!(
                (got.status.as_str(), got.reason.as_str()),
                (status, reason),
                "{name}: {got:?}"
            );
            assert!(got.message.starts_with(message), "{name}: {:?}", got.message);
            assert_eq!(got.last_transition_time, time(at), "{name}");
            assert_eq!(got.observed_generation, Some(3), "{name}");
            let reasons: Vec<EventReason> = decision.events.iter().map(|(r, _)| *r).collect();
            assert_eq!(reasons, events, "{name}");
            assert!(written.conditions.contains(&ready()), "{name}: Ready kept");
        }
    }

    #[test]
    fn nothing_changed_means_no_write_and_no_spec_removes_the_condition() {
        let repo = repository(Some(condition("True", "UpToDate", UP_TO_DATE, 5)));
        let same = WriteBackOutcome::UpToDate { notes: Vec::new() };
        let decision = decide_write_back(&repo, None, Some(&same), &time(100));
        assert_eq!(decision, WriteBackDecision { status: None, events: Vec::new() });

        let decision = decide_write_back(&repo, None, None, &time(100));
        let status = decision.status.expect("the condition goes");
        assert_eq!(status.conditions, vec![ready()]);

        // The reconcile's own new status is the base, not the stored one.
        let mut next = repo.status.clone().expect("fixture");
        next.observed_revision = Some("abc".into());
        let decision = decide_write_back(&repo, Some(next), Some(&same), &time(100));
        let status = decision.status.expect("the reconcile's change is kept");
        assert_eq!(status.observed_revision.as_deref(), Some("abc"));
    }

    #[test]
    fn failure_messages_are_masked_and_bounded() {
        let repo = repository(None);
        let long =
            format!("push to https://bot:hunter2hunter2@git.example/x failed {}", "x".repeat(5000));
        let decision = decide_write_back(&repo, None, Some(&failed(&long)), &time(1));
        let status = decision.status.expect("written");
        let got =
            conditions::get(&status.conditions, ConditionType::ImagesUpdated).expect("fixture");
        assert!(!got.message.contains("hunter2"), "{}", got.message);
        assert!(got.message.chars().count() <= MAX_MESSAGE);
        assert!(!decision.events[0].1.contains("hunter2"));
    }

    #[test]
    fn paths_stay_inside_the_repository() {
        let ok: &[(Option<&str>, &[&str])] = &[
            (None, &[]),
            (Some(""), &[]),
            (Some("."), &[]),
            (Some("./"), &[]),
            (Some("deploy"), &["deploy"]),
            (Some("deploy/prod/"), &["deploy", "prod"]),
            (Some("./deploy//prod"), &["deploy", "prod"]),
            (Some("a..b/..c"), &["a..b", "..c"]),
        ];
        for (path, want) in ok {
            let want: Vec<String> = want.iter().map(|s| (*s).to_owned()).collect();
            assert_eq!(check_path(*path), Ok(want), "{path:?}");
        }
        let refused: &[(&str, &str)] = &[
            ("/etc", "is absolute"),
            ("..", "'..' component"),
            ("deploy/../../etc", "'..' component"),
            ("deploy/..", "'..' component"),
            ("a\0b", "control character"),
        ];
        for (path, why) in refused {
            let err = check_path(Some(path)).expect_err(path);
            assert!(err.to_string().contains(why), "{path:?}: {err}");
            assert!(err.to_string().contains("spec.imageUpdate.path"), "{err}");
        }
    }
}
