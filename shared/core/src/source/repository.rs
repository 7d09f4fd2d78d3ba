//! The Repository reconcile decision: from what one reconcile observed to everything it writes —
//! the status, the Events, and the discovered Applications to apply or delete. Pure: the
//! controller gathers the [`Observation`] (spec checks, credentials, ref listing, the
//! `.ksync.yaml` files, the Applications in the namespace) and performs the [`Decision`] in one
//! place.
//!
//! Rules:
//! - `Ready=True/FetchSucceeded` with `state: Ready` when the source resolved and discovery (if
//!   any) was accepted; a discovery refusal is `Ready=False/ValidationFailure` and changes no
//!   Application (all or nothing); any other failure is `Ready=False/<reason>`.
//! - `observedRevision` is the last resolved commit and survives failures; `lastFetchedAt` is the
//!   time of the last successful fetch or inspection, so a quiet poll moves it (one status write
//!   per poll, and nothing else).
//! - An Event is recorded on a transition only: `RepositoryReady` when the Repository becomes
//!   Ready or its commit moves, a failure reason when the Ready condition changes.
//! - Every message passes the reconcile's [`Redactor`] (the credential values it touched) and the
//!   shape-based masks, and is truncated to [`MAX_MESSAGE`].

use crate::failure::StepFailure;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_core::Resource;

use kuvryn_sync_api::{
    Application, ConditionReason, ConditionType, EventReason, FailureReason, Repository,
    RepositoryState, RepositoryStatus,
};

use crate::conditions::{self, NewCondition, Status};
use crate::discovery::{self, ConfigFileRead, DeleteAction, DiscoveryPlan};
use crate::redact::{self, Redactor};

/// Longest condition or Event message we write.
pub const MAX_MESSAGE: usize = 1024;

/// What one Repository reconcile observed.
#[derive(Clone, Debug)]
pub enum Observation {
    /// The spec, the credentials or the source failed.
    Failed(StepFailure),
    /// The source resolved to `commit`; discovery's inputs were read at that commit.
    Resolved {
        commit: String,
        /// Each configured `.ksync.yaml` path and what was found there.
        config_files: BTreeMap<String, ConfigFileRead>,
        /// The Applications in the Repository's namespace (hand-made and foreign ones too).
        applications: Vec<Application>,
    },
}

/// What the reconcile concluded, before it is turned into writes.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    Ready { commit: String },
    DiscoveryRefused { commit: String, message: String },
    Failed { reason: FailureReason, message: String },
}

/// Everything one reconcile writes, in the order the controller performs it: Applications first
/// (a failure there retries the reconcile before the status claims success), then the status,
/// then the Events.
#[derive(Clone, Debug)]
pub struct Decision {
    /// Discovered Applications to server-side apply, each with its ownerReference set.
    pub apply: Vec<Application>,
    /// Discovered Applications to delete.
    pub delete: Vec<DeleteAction>,
    /// The new status, or `None` when it equals the current one (no write).
    pub status: Option<RepositoryStatus>,
    /// Events to record (reason, message); messages are redacted.
    pub events: Vec<(EventReason, String)>,
}

/// Decide the writes for `repository` after `observation`, at `now`.
pub fn decide(
    repository: &Repository,
    observation: &Observation,
    redactor: &Redactor,
    now: &Time,
) -> Decision {
    let (outcome, plan) = conclude(repository, observation, redactor);
    let (status, events) =
        next_status(repository.status.as_ref(), repository.metadata.generation, &outcome, now);
    let current = repository.status.clone().unwrap_or_default();
    let owner = discovery_owner_reference(repository);
    let apply = plan
        .create
        .into_iter()
        .chain(plan.update)
        .map(|mut app| {
            app.metadata.owner_references = owner.clone().map(|o| vec![o]);
            app
        })
        .collect();
    Decision { apply, delete: plan.delete, status: (status != current).then_some(status), events }
}

/// Run discovery on a resolved source; a failure plans nothing.
fn conclude(
    repository: &Repository,
    observation: &Observation,
    redactor: &Redactor,
) -> (Outcome, DiscoveryPlan) {
    match observation {
        Observation::Failed(StepFailure { reason, message, .. }) => (
            Outcome::Failed { reason: *reason, message: redactor.redact(message) },
            DiscoveryPlan::default(),
        ),
        Observation::Resolved { commit, config_files, applications } => {
            match discovery::discover(repository, config_files, applications) {
                Ok(plan) => (Outcome::Ready { commit: commit.clone() }, plan),
                Err(refusal) => (
                    Outcome::DiscoveryRefused {
                        commit: commit.clone(),
                        message: redactor.redact(&refusal.to_string()),
                    },
                    DiscoveryPlan::default(),
                ),
            }
        }
    }
}

/// A reference for garbage collection when the Repository goes, not a controller claim: a
/// hand-made controller of the Application keeps working.
fn discovery_owner_reference(
    repository: &Repository,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    repository.controller_owner_ref(&()).map(|mut owner| {
        owner.controller = Some(false);
        owner.block_owner_deletion = Some(false);
        owner
    })
}

/// The status after `outcome` and the Events of the transition.
fn next_status(
    current: Option<&RepositoryStatus>,
    generation: Option<i64>,
    outcome: &Outcome,
    now: &Time,
) -> (RepositoryStatus, Vec<(EventReason, String)>) {
    let mut status = current.cloned().unwrap_or_default();
    status.observed_generation = generation;
    let was_ready = status.state == RepositoryState::Ready;
    let previous_revision = status.observed_revision.clone();

    if let Outcome::Ready { commit } | Outcome::DiscoveryRefused { commit, .. } = outcome {
        status.observed_revision = Some(commit.clone());
        status.last_fetched_at = Some(now.clone());
    }
    let (state, reason, message, condition_status) = match outcome {
        Outcome::Ready { commit } => (
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

    let event = match outcome {
        Outcome::Ready { .. } => (!was_ready || previous_revision != status.observed_revision)
            .then_some(EventReason::RepositoryReady),
        Outcome::DiscoveryRefused { .. } => {
            condition_changed.then_some(EventReason::Failure(FailureReason::ValidationFailure))
        }
        Outcome::Failed { reason, .. } => {
            condition_changed.then_some(EventReason::Failure(*reason))
        }
    };
    (status, event.map(|reason| (reason, message)).into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::DiscoveryError;
    use k8s_openapi::jiff::Timestamp;
    use kuvryn_sync_api::RepositorySpec;

    const C1: &str = "1111111111111111111111111111111111111111";
    const C2: &str = "2222222222222222222222222222222222222222";
    const ROOT: &str = ".ksync.yaml";

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).expect("timestamp"))
    }

    fn repository(status: Option<RepositoryStatus>) -> Repository {
        let spec: RepositorySpec = serde_json::from_value(serde_json::json!({
            "type": "git",
            "git": {"url": "https://example.com/platform.git"},
        }))
        .expect("spec");
        let mut repo = Repository::new("apps", spec);
        repo.metadata.namespace = Some("team".into());
        repo.metadata.uid = Some("uid-1".into());
        repo.metadata.generation = Some(3);
        repo.status = status;
        repo
    }

    fn resolved(commit: &str, files: &[(&str, ConfigFileRead)]) -> Observation {
        Observation::Resolved {
            commit: commit.to_owned(),
            config_files: files.iter().map(|(p, f)| ((*p).to_owned(), f.clone())).collect(),
            applications: Vec::new(),
        }
    }

    fn ready(commit: &str) -> Observation {
        resolved(commit, &[])
    }

    fn refused(commit: &str) -> Observation {
        let not_a_file = DiscoveryError::NotAFile { path: ROOT.into() };
        resolved(commit, &[(ROOT, ConfigFileRead::Refused(not_a_file))])
    }

    fn failed(reason: FailureReason, message: &str) -> Observation {
        Observation::Failed(StepFailure::new(reason, message))
    }

    fn run(status: Option<RepositoryStatus>, observation: &Observation, now: i64) -> Decision {
        decide(&repository(status), observation, &Redactor::new(), &at(now))
    }

    fn reasons(d: &Decision) -> Vec<&'static str> {
        d.events.iter().map(|(r, _)| r.as_str()).collect()
    }

    #[test]
    fn a_sequence_of_observations_sets_state_condition_events_and_writes() {
        // (observation, state, Ready status, reason, events, status written)
        type Step =
            (Observation, RepositoryState, &'static str, &'static str, Vec<&'static str>, bool);
        let auth = "authentication failed for https://bot:pw@h/x";
        let steps: Vec<Step> = vec![
            (
                ready(C1),
                RepositoryState::Ready,
                "True",
                "FetchSucceeded",
                vec!["RepositoryReady"],
                true,
            ),
            // Nothing new: lastFetchedAt advances (one write), no Event.
            (ready(C1), RepositoryState::Ready, "True", "FetchSucceeded", vec![], true),
            (
                ready(C2),
                RepositoryState::Ready,
                "True",
                "FetchSucceeded",
                vec!["RepositoryReady"],
                true,
            ),
            (
                failed(FailureReason::AuthenticationFailure, auth),
                RepositoryState::Failed,
                "False",
                "AuthenticationFailure",
                vec!["AuthenticationFailure"],
                true,
            ),
            // The same failure again: no new Event, no write.
            (
                failed(FailureReason::AuthenticationFailure, auth),
                RepositoryState::Failed,
                "False",
                "AuthenticationFailure",
                vec![],
                false,
            ),
            (
                refused(C2),
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
        for (n, (observation, state, cond, reason, events, written)) in
            steps.into_iter().enumerate()
        {
            let d = run(status.clone(), &observation, 100 + n as i64);
            assert_eq!(reasons(&d), events, "step {n}");
            assert_eq!(d.status.is_some(), written, "step {n}");
            let next = d.status.or(status).expect("a status");
            assert_eq!(next.state, state, "step {n}");
            let c = conditions::get(&next.conditions, ConditionType::Ready).expect("Ready");
            assert_eq!((c.status.as_str(), c.reason.as_str()), (cond, reason), "step {n}");
            assert_eq!(next.observed_generation, Some(3));
            status = Some(next);
        }
        let last = status.expect("status");
        assert_eq!(last.observed_revision.as_deref(), Some(C2));
        assert_eq!(last.last_fetched_at, Some(at(106)));
    }

    #[test]
    fn a_failure_keeps_the_last_resolved_revision_and_fetch_time() {
        let first = run(None, &ready(C1), 10).status;
        let d = run(first, &failed(FailureReason::SourceFailure, "timeout"), 20);
        let status = d.status.expect("written");
        assert_eq!(status.observed_revision.as_deref(), Some(C1));
        assert_eq!(status.last_fetched_at, Some(at(10)));
    }

    #[test]
    fn messages_never_carry_url_credentials_or_secret_values() {
        let redactor = Redactor::new().with_secret("canary-token-9f8e7d");
        let observation = failed(
            FailureReason::SourceFailure,
            "fetch https://u:canary-pw-123@git.example.com/r.git failed: canary-token-9f8e7d",
        );
        let d = decide(&repository(None), &observation, &redactor, &at(1));
        let status = d.status.expect("written");
        let c = conditions::get(&status.conditions, ConditionType::Ready).expect("Ready");
        for text in std::iter::once(&c.message).chain(d.events.iter().map(|(_, m)| m)) {
            assert!(!text.contains("canary-pw-123"), "{text}");
            assert!(!text.contains("canary-token-9f8e7d"), "{text}");
        }
    }

    #[test]
    fn discovered_applications_are_applied_with_a_non_controller_owner_reference() {
        let file = "applications:\n- metadata: {name: web}\n  spec:\n    source:\n      path: web\n      render: {type: yaml}\n    destination: {namespace: web}\n";
        let d = run(None, &resolved(C1, &[(ROOT, ConfigFileRead::Text(file.into()))]), 1);
        assert_eq!(reasons(&d), ["RepositoryReady"]);
        let [app] = d.apply.as_slice() else { panic!("one Application: {:?}", d.apply) };
        let owners = app.metadata.owner_references.as_deref().expect("owner");
        assert_eq!(owners.len(), 1);
        assert_eq!((owners[0].kind.as_str(), owners[0].name.as_str()), ("Repository", "apps"));
        assert_eq!(owners[0].uid, "uid-1");
        assert_eq!(owners[0].controller, Some(false));
        assert_eq!(owners[0].block_owner_deletion, Some(false));
    }

    #[test]
    fn a_refusal_or_a_failure_writes_no_application() {
        for observation in [refused(C1), failed(FailureReason::SourceFailure, "down")] {
            let d = run(None, &observation, 1);
            assert!(d.apply.is_empty() && d.delete.is_empty(), "{observation:?}");
        }
    }
}
