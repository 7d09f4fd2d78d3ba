//! The small rules of a rollout that the Application decision ([`crate::application`]) combines:
//! aggregating the health of an attempt's objects, the observation deadline of an attempt, the
//! backoff between attempts, and whether a manual approval covers a Revision.
//!
//! - Health: the worst state wins (Degraded, Unknown, Progressing, Suspended, Healthy); a
//!   Suspended workload counts as done for a rollout. An attempt with nothing to observe is
//!   Healthy.
//! - Deadline (ruling 4): the smaller of `spec.health.timeout` and
//!   `spec.strategy.failurePolicy.timeout` when both are set, the one set otherwise, 5 minutes
//!   when neither is; counted from the attempt's `startedAt`, so every attempt, redeploy and
//!   self-heal repair gets the whole time.
//! - Backoff: 10 s before the second attempt, doubling, at most 5 minutes.
//! - Approval (DESIGN §4.3): the Application's `approved-revision` names the Revision and its
//!   `approved-digest` equals the plan's digest; an approval already recorded on the Revision for
//!   the same desired-state hash covers the whole rollout (waves, retries, repairs).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use kuvryn_sync_api::{Application, Approval, HealthState, ResourceCounts, keys};

use crate::desired::ObjectKey;

/// The observation deadline when no timeout is set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// The wait before the second attempt; it doubles per attempt.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(10);
/// The longest wait between attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5 * 60);
/// How often an attempt still Progressing is looked at again without a trigger.
pub const OBSERVE_EVERY: Duration = Duration::from_secs(5);

/// The health of one desired object, from its live state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectHealth {
    pub key: ObjectKey,
    pub api_version: String,
    pub state: HealthState,
    /// Why, in a few words (kstatus's message).
    pub message: String,
}

/// The health of an attempt's objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthSummary {
    pub state: HealthState,
    pub counts: ResourceCounts,
    /// The first object in the worst state, when not every object is Healthy.
    pub worst: Option<ObjectHealth>,
}

/// Aggregate `objects`' health; see the module documentation.
pub fn summarise(objects: &[ObjectHealth]) -> HealthSummary {
    let mut counts = ResourceCounts::default();
    for object in objects {
        match object.state {
            HealthState::Healthy | HealthState::Suspended => counts.healthy += 1,
            HealthState::Progressing => counts.progressing += 1,
            HealthState::Degraded => counts.degraded += 1,
            HealthState::Unknown => counts.unknown += 1,
        }
    }
    // HealthState is ordered best to worst.
    // The first of the worst.
    let worst = objects
        .iter()
        .filter(|o| o.state != HealthState::Healthy)
        .min_by_key(|o| std::cmp::Reverse(o.state));
    let state = match worst.map(|o| o.state) {
        None => HealthState::Healthy,
        Some(state) => state,
    };
    HealthSummary { state, counts, worst: worst.cloned() }
}

/// Whether a rollout with this health is done (nothing left to wait for).
pub fn is_done(state: HealthState) -> bool {
    matches!(state, HealthState::Healthy | HealthState::Suspended)
}

/// The observation timeout of `app`'s attempts (ruling 4). A value outside the duration grammar
/// (the CRD refuses those) counts as unset.
pub fn timeout(app: &Application) -> Duration {
    let parse = |text: Option<&String>| text.and_then(|t| crate::duration::parse(t).ok());
    let health = parse(app.spec.health.as_ref().and_then(|h| h.timeout.as_ref()));
    let policy = parse(app.spec.strategy.failure_policy.timeout.as_ref());
    match (health, policy) {
        (Some(a), Some(b)) => a.min(b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => DEFAULT_TIMEOUT,
    }
}

/// How long from `now` until `since + wait`; zero when that has passed.
pub fn remaining(since: &Time, wait: Duration, now: &Time) -> Duration {
    let wait = SignedDuration::try_from(wait).unwrap_or(SignedDuration::MAX);
    let end = since.0.checked_add(wait).unwrap_or(Timestamp::MAX);
    let left = now.0.duration_until(end);
    Duration::try_from(left).unwrap_or(Duration::ZERO)
}

/// The wait after failed attempt number `attempts` before the next one.
pub fn backoff(attempts: i32) -> Duration {
    let doublings = u32::try_from(attempts.saturating_sub(1).max(0)).unwrap_or(0).min(16);
    FIRST_BACKOFF.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

/// The health of a hook (a `pre-sync` or `post-sync` object): a Job must have finished — Healthy
/// once `Complete`, Degraded once `Failed`, Progressing while it runs (kstatus calls a running
/// Job Current, which is right for a resource and wrong for a hook); any other kind is judged as
/// usual.
pub fn hook_health(live: &serde_json::Value, now: &Time) -> (HealthState, String) {
    let is_job = live["kind"] == "Job" && live["apiVersion"] == "batch/v1";
    if !is_job {
        return crate::kstatus::health_at(live, now);
    }
    let conditions = live["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let holds =
        |type_: &str| conditions.iter().any(|c| c["type"] == type_ && c["status"] == "True");
    let message = |c: &str| {
        conditions
            .iter()
            .find(|x| x["type"] == c)
            .and_then(|x| x["message"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    if holds("Complete") {
        (HealthState::Healthy, "the hook Job completed".to_owned())
    } else if holds("Failed") {
        (HealthState::Degraded, format!("the hook Job failed: {}", message("Failed")))
    } else {
        (HealthState::Progressing, "the hook Job has not finished".to_owned())
    }
}

/// What a manual approval says about one Revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Approved; the audit record to keep on the Revision.
    Approved(Approval),
    /// The approval names this Revision but another plan digest: the plan changed after it was
    /// approved.
    Stale { approved: String, current: String },
    /// No approval for this Revision.
    Waiting,
}

/// Whether `app`'s approval covers Revision `revision` with plan `digest` of desired state
/// `desired_hash`; `recorded` is the approval already on the Revision.
pub fn approval(
    app: &Application,
    revision: &str,
    digest: &str,
    desired_hash: &str,
    recorded: Option<&Approval>,
) -> Verdict {
    if let Some(recorded) = recorded.filter(|a| a.desired_state_hash == desired_hash) {
        return Verdict::Approved(recorded.clone());
    }
    let annotations = app.metadata.annotations.clone().unwrap_or_default();
    if annotations.get(keys::APPROVED_REVISION).map(String::as_str) != Some(revision) {
        return Verdict::Waiting;
    }
    let approved = annotations.get(keys::APPROVED_DIGEST).cloned().unwrap_or_default();
    if approved != digest {
        return Verdict::Stale { approved, current: digest.to_owned() };
    }
    // The webhook records who approved and when with the digest it checked. Without that record
    // (the annotations removed after the approval, or never written because the webhook did not
    // run) nobody is on record as approving: it is no approval, and the plan waits again.
    let approved_by = annotations.get(keys::APPROVED_BY).filter(|by| !by.trim().is_empty());
    let approved_at =
        annotations.get(keys::APPROVED_AT).and_then(|at| at.parse::<Timestamp>().ok());
    let (Some(approved_by), Some(approved_at)) = (approved_by, approved_at) else {
        return Verdict::Waiting;
    };
    Verdict::Approved(Approval {
        approved_by: approved_by.clone(),
        approved_at: Time(approved_at),
        plan_digest: digest.to_owned(),
        desired_state_hash: desired_hash.to_owned(),
        note: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::GroupKind;
    use kuvryn_sync_api::ApplicationSpec;
    use serde_json::json;

    fn object(name: &str, state: HealthState) -> ObjectHealth {
        ObjectHealth {
            key: ObjectKey {
                group_kind: GroupKind::new("apps", "Deployment"),
                namespace: Some("web".into()),
                name: name.into(),
            },
            api_version: "apps/v1".into(),
            state,
            message: format!("{name} is {}", state.as_str()),
        }
    }

    fn app(spec: serde_json::Value, annotations: &[(&str, &str)]) -> Application {
        let mut base = json!({
            "source": {"repositoryRef": {"name": "apps"}, "render": {"type": "yaml"}},
            "destination": {"namespace": "web"},
        });
        if let (Some(base), Some(extra)) = (base.as_object_mut(), spec.as_object()) {
            base.extend(extra.clone());
        }
        let spec: ApplicationSpec = serde_json::from_value(base).expect("spec");
        let mut app = Application::new("web", spec);
        app.metadata.annotations =
            Some(annotations.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
        app
    }

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).expect("time"))
    }

    #[test]
    fn the_worst_state_wins_and_suspended_counts_as_done() {
        use HealthState::*;
        type Row = (Vec<HealthState>, HealthState, Option<&'static str>, (i64, i64, i64, i64));
        let rows: Vec<Row> = vec![
            (vec![], Healthy, None, (0, 0, 0, 0)),
            (vec![Healthy, Healthy], Healthy, None, (2, 0, 0, 0)),
            (vec![Healthy, Suspended], Suspended, Some("o1"), (2, 0, 0, 0)),
            (vec![Healthy, Progressing, Suspended], Progressing, Some("o1"), (2, 1, 0, 0)),
            (vec![Progressing, Unknown], Unknown, Some("o1"), (0, 1, 0, 1)),
            (vec![Unknown, Degraded, Progressing], Degraded, Some("o1"), (0, 1, 1, 1)),
            (vec![Degraded, Degraded], Degraded, Some("o0"), (0, 0, 2, 0)),
        ];
        for (states, state, worst, (healthy, progressing, degraded, unknown)) in rows {
            let objects: Vec<ObjectHealth> =
                states.iter().enumerate().map(|(n, s)| object(&format!("o{n}"), *s)).collect();
            let summary = summarise(&objects);
            assert_eq!(summary.state, state, "{states:?}");
            assert_eq!(summary.worst.map(|w| w.key.name).as_deref(), worst, "{states:?}");
            assert_eq!(
                summary.counts,
                ResourceCounts { healthy, progressing, degraded, unknown },
                "{states:?}"
            );
        }
        assert!(is_done(HealthState::Healthy) && is_done(HealthState::Suspended));
        assert!(!is_done(HealthState::Progressing) && !is_done(HealthState::Unknown));
    }

    #[test]
    fn the_timeout_is_the_smaller_of_the_two_or_five_minutes() {
        let rows = [
            (json!({}), 300),
            (json!({"health": {"timeout": "90s"}}), 90),
            (json!({"strategy": {"failurePolicy": {"timeout": "2m"}}}), 120),
            (
                json!({"health": {"timeout": "3m"}, "strategy": {"failurePolicy": {"timeout": "1m"}}}),
                60,
            ),
            (
                json!({"health": {"timeout": "30s"}, "strategy": {"failurePolicy": {"timeout": "1h"}}}),
                30,
            ),
            (json!({"health": {"timeout": "soon"}}), 300),
        ];
        for (spec, seconds) in rows {
            assert_eq!(timeout(&app(spec.clone(), &[])), Duration::from_secs(seconds), "{spec}");
        }
    }

    #[test]
    fn remaining_time_and_backoff() {
        assert_eq!(remaining(&at(100), Duration::from_secs(60), &at(130)), Duration::from_secs(30));
        assert_eq!(remaining(&at(100), Duration::from_secs(60), &at(160)), Duration::ZERO);
        assert_eq!(remaining(&at(100), Duration::from_secs(60), &at(500)), Duration::ZERO);
        let waits: Vec<u64> = (0..8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, vec![10, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(backoff(i32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn an_approval_covers_a_revision_by_name_and_digest() {
        let approved = [
            (keys::APPROVED_REVISION, "web-1"),
            (keys::APPROVED_DIGEST, "sha256:aa"),
            (keys::APPROVED_BY, "alice"),
            (keys::APPROVED_AT, "2026-12-01T10:00:00Z"),
        ];
        let verdict = approval(&app(json!({}), &approved), "web-1", "sha256:aa", "h1", None);
        let Verdict::Approved(record) = verdict else { panic!("approved, got {verdict:?}") };
        assert_eq!(record.approved_by, "alice");
        assert_eq!(record.approved_at.0.to_string(), "2026-12-01T10:00:00Z");
        assert_eq!(
            (record.plan_digest.as_str(), record.desired_state_hash.as_str()),
            ("sha256:aa", "h1")
        );

        // Another digest: stale. Another Revision, or none: waiting.
        assert_eq!(
            approval(&app(json!({}), &approved), "web-1", "sha256:bb", "h1", None),
            Verdict::Stale { approved: "sha256:aa".into(), current: "sha256:bb".into() }
        );
        assert_eq!(
            approval(&app(json!({}), &approved), "web-2", "sha256:aa", "h1", None),
            Verdict::Waiting
        );
        assert_eq!(
            approval(&app(json!({}), &[]), "web-1", "sha256:aa", "h1", None),
            Verdict::Waiting
        );

        // The audit record removed (or emptied, or unreadable) after the approval: no approval.
        for missing in [keys::APPROVED_BY, keys::APPROVED_AT] {
            let without: Vec<_> = approved.iter().copied().filter(|(k, _)| *k != missing).collect();
            assert_eq!(
                approval(&app(json!({}), &without), "web-1", "sha256:aa", "h1", None),
                Verdict::Waiting,
                "without {missing}"
            );
        }
        for (key, bad) in [(keys::APPROVED_BY, " "), (keys::APPROVED_AT, "yesterday")] {
            let edited: Vec<_> =
                approved.iter().map(|&(k, v)| if k == key { (k, bad) } else { (k, v) }).collect();
            assert_eq!(
                approval(&app(json!({}), &edited), "web-1", "sha256:aa", "h1", None),
                Verdict::Waiting,
                "{key}: {bad:?}"
            );
        }

        // A recorded approval covers the same desired state whatever the annotations say, and
        // not another desired state.
        let verdict = approval(&app(json!({}), &[]), "web-1", "sha256:cc", "h1", Some(&record));
        assert_eq!(verdict, Verdict::Approved(record.clone()));
        let verdict = approval(&app(json!({}), &[]), "web-1", "sha256:cc", "h2", Some(&record));
        assert_eq!(verdict, Verdict::Waiting);
    }

    #[test]
    fn a_hook_job_is_healthy_only_once_complete() {
        let job = |status: serde_json::Value| {
            json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "migrate", "generation": 1}, "spec": {}, "status": status})
        };
        let now = at(1_800_000_000);
        let rows = [
            (json!({}), HealthState::Progressing),
            (json!({"startTime": "2026-12-01T10:00:00Z", "active": 1}), HealthState::Progressing),
            (
                json!({"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}),
                HealthState::Healthy,
            ),
            (
                json!({"conditions": [{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}]}),
                HealthState::Degraded,
            ),
        ];
        for (status, expected) in rows {
            assert_eq!(hook_health(&job(status.clone()), &now).0, expected, "{status}");
        }
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert_eq!(hook_health(&cm, &now).0, HealthState::Healthy);
    }
}
