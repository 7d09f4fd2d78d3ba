//! Repository reconcile decisions: from what one reconcile found out (the outcome) to the status
//! to write and the Events to record. Pure: the controller does the fetching, discovery I/O and
//! writes; this module decides what they mean.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{
    ConditionReason, ConditionType, EventReason, FailureReason, RepositoryState, RepositoryStatus,
};
use crate::conditions::{self, NewCondition, Status};
use crate::redact;

/// Longest condition or Event message we write.
pub const MAX_MESSAGE: usize = 1024;

/// What one Repository reconcile found out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The source resolved to `commit` and discovery (if any) succeeded.
    Resolved { commit: String },
    /// The source resolved to `commit`, but discovery was refused; nothing was changed.
    DiscoveryRefused { commit: String, message: String },
    /// The source could not be resolved or fetched, for `reason`.
    Failed { reason: FailureReason, message: String },
}

/// The status to write and the Events to record.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub status: RepositoryStatus,
    /// Whether `status` differs from the current one (no write when it does not).
    pub status_changed: bool,
    pub events: Vec<(EventReason, String)>,
}

/// Decide the Repository's status after `outcome`. `messages` are already redacted by the
/// caller's [`redact::Redactor`]; URL credentials and secret shapes are masked here once more.
pub fn decide(
    current: Option<&RepositoryStatus>,
    generation: Option<i64>,
    outcome: &Outcome,
    now: &Time,
) -> Decision {
    let current = current.cloned().unwrap_or_default();
    let mut status = current.clone();
    status.observed_generation = generation;
    let mut events = Vec::new();
    let was_ready = status.state == RepositoryState::Ready;
    let previous_revision = status.observed_revision.clone();

    if let Outcome::Resolved { commit } | Outcome::DiscoveryRefused { commit, .. } = outcome {
        status.observed_revision = Some(commit.clone());
        status.last_fetched_at = Some(now.clone());
    }
    let (state, reason, message, condition_status) = match outcome {
        Outcome::Resolved { commit } => (
            RepositoryState::Ready,
            ConditionReason::FetchSucceeded.as_str(),
            format!("resolved to commit {commit}"),
            Status::True,
        ),
        Outcome::DiscoveryRefused { commit, message } => (
            RepositoryState::Failed,
            FailureReason::ValidationFailure.as_str(),
            format!("discovery refused at commit {commit}: {message}"),
            Status::False,
        ),
        Outcome::Failed { reason, message } => {
            (RepositoryState::Failed, reason.as_str(), message.clone(), Status::False)
        }
    };
    let message = redact::truncate(&redact::redact_shapes(&message), MAX_MESSAGE);
    status.state = state;
    let condition_changed = conditions::set(
        &mut status.conditions,
        NewCondition {
            type_: ConditionType::Ready,
            status: condition_status,
            reason,
            message: message.clone(),
            observed_generation: generation,
        },
        now,
    );

    match outcome {
        Outcome::Resolved { .. } => {
            if !was_ready || previous_revision != status.observed_revision {
                events.push((EventReason::RepositoryReady, message));
            }
        }
        Outcome::DiscoveryRefused { .. } => {
            if condition_changed {
                events.push((EventReason::Failure(FailureReason::ValidationFailure), message));
            }
        }
        Outcome::Failed { reason, .. } => {
            if condition_changed {
                events.push((EventReason::Failure(*reason), message));
            }
        }
    }

    // lastFetchedAt moves on every successful fetch, but a poll that found nothing new should not
    // write: compare without it.
    let mut without_time = status.clone();
    without_time.last_fetched_at = current.last_fetched_at.clone();
    let status_changed = without_time != current;
    Decision { status, status_changed, events }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).expect("timestamp"))
    }

    const C1: &str = "1111111111111111111111111111111111111111";
    const C2: &str = "2222222222222222222222222222222222222222";

    fn ready(commit: &str) -> Outcome {
        Outcome::Resolved { commit: commit.to_owned() }
    }

    fn failed(reason: FailureReason, message: &str) -> Outcome {
        Outcome::Failed { reason, message: message.to_owned() }
    }

    fn reasons(d: &Decision) -> Vec<&'static str> {
        d.events.iter().map(|(r, _)| r.as_str()).collect()
    }

    fn ready_condition(d: &Decision) -> (String, String, String) {
        let c = conditions::get(&d.status.conditions, ConditionType::Ready).expect("Ready");
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    #[test]
    fn a_sequence_of_outcomes_sets_state_condition_and_events() {
        // (outcome, state, Ready status, reason, events, status changed)
        type Step = (Outcome, RepositoryState, &'static str, &'static str, Vec<&'static str>, bool);
        let steps: Vec<Step> = vec![
            (
                ready(C1),
                RepositoryState::Ready,
                "True",
                "FetchSucceeded",
                vec!["RepositoryReady"],
                true,
            ),
            // Nothing new: no write, no Event.
            (ready(C1), RepositoryState::Ready, "True", "FetchSucceeded", vec![], false),
            (
                ready(C2),
                RepositoryState::Ready,
                "True",
                "FetchSucceeded",
                vec!["RepositoryReady"],
                true,
            ),
            (
                failed(
                    FailureReason::AuthenticationFailure,
                    "authentication failed for https://bot:pw@h/x",
                ),
                RepositoryState::Failed,
                "False",
                "AuthenticationFailure",
                vec!["AuthenticationFailure"],
                true,
            ),
            // The same failure again: no new Event, no write.
            (
                failed(
                    FailureReason::AuthenticationFailure,
                    "authentication failed for https://bot:pw@h/x",
                ),
                RepositoryState::Failed,
                "False",
                "AuthenticationFailure",
                vec![],
                false,
            ),
            (
                Outcome::DiscoveryRefused {
                    commit: C2.into(),
                    message: "needs allowAutomatic".into(),
                },
                RepositoryState::Failed,
                "False",
                "ValidationFailure",
                vec!["ValidationFailure"],
                true,
            ),
            (
                ready(C2),
                RepositoryState::Ready,
                "True",
                "FetchSucceeded",
                vec!["RepositoryReady"],
                true,
            ),
        ];
        let mut status: Option<RepositoryStatus> = None;
        for (n, (outcome, state, cond, reason, events, changed)) in steps.into_iter().enumerate() {
            let now = at(100 + n as i64);
            let d = decide(status.as_ref(), Some(3), &outcome, &now);
            assert_eq!(d.status.state, state, "step {n}");
            let (s, r, _) = ready_condition(&d);
            assert_eq!((s.as_str(), r.as_str()), (cond, reason), "step {n}");
            assert_eq!(reasons(&d), events, "step {n}");
            assert_eq!(d.status_changed, changed, "step {n}");
            assert_eq!(d.status.observed_generation, Some(3));
            status = Some(d.status);
        }
        let last = status.expect("status");
        assert_eq!(last.observed_revision.as_deref(), Some(C2));
        assert_eq!(last.last_fetched_at, Some(at(106)));
    }

    #[test]
    fn a_failure_keeps_the_last_resolved_revision_and_fetch_time() {
        let first = decide(None, Some(1), &ready(C1), &at(10));
        let d = decide(
            Some(&first.status),
            Some(1),
            &failed(FailureReason::SourceFailure, "timeout"),
            &at(20),
        );
        assert_eq!(d.status.observed_revision.as_deref(), Some(C1));
        assert_eq!(d.status.last_fetched_at, Some(at(10)));
    }

    #[test]
    fn messages_never_carry_url_credentials() {
        let d = decide(
            None,
            None,
            &failed(
                FailureReason::SourceFailure,
                "fetch https://u:canary-pw-123@git.example.com/r.git failed",
            ),
            &at(1),
        );
        let (_, _, message) = ready_condition(&d);
        assert!(!message.contains("canary-pw-123"), "{message}");
        assert!(d.events.iter().all(|(_, m)| !m.contains("canary-pw-123")));
    }
}
