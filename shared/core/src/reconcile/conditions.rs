//! Kubernetes Conditions, set the way the API conventions ask: one entry per type, and
//! `lastTransitionTime` moves only when `status` changes (a new reason or message alone keeps
//! it). Pure: the caller passes the time.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use kuvryn_sync_api::ConditionType;

/// `status` of a Condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

/// A condition to set: everything but the times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewCondition<'a> {
    pub type_: ConditionType,
    pub status: Status,
    pub reason: &'a str,
    pub message: String,
    pub observed_generation: Option<i64>,
}

/// Set `new` in `conditions`, keeping `lastTransitionTime` when the status is unchanged.
/// Returns whether anything changed (so callers skip writes when nothing did).
pub fn set(conditions: &mut Vec<Condition>, new: NewCondition<'_>, now: &Time) -> bool {
    let type_ = new.type_.as_str();
    let status = new.status.as_str();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            let transition = existing.status != status;
            let updated = Condition {
                type_: type_.to_owned(),
                status: status.to_owned(),
                reason: new.reason.to_owned(),
                message: new.message,
                observed_generation: new.observed_generation,
                last_transition_time: if transition {
                    now.clone()
                } else {
                    existing.last_transition_time.clone()
                },
            };
            let changed = *existing != updated;
            *existing = updated;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_owned(),
                status: status.to_owned(),
                reason: new.reason.to_owned(),
                message: new.message,
                observed_generation: new.observed_generation,
                last_transition_time: now.clone(),
            });
            true
        }
    }
}

/// The condition of `type_`, if present.
pub fn get(conditions: &[Condition], type_: ConditionType) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == type_.as_str())
}

/// Remove the condition of `type_`; returns whether it was present.
pub fn remove(conditions: &mut Vec<Condition>, type_: ConditionType) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_.as_str());
    before != conditions.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).expect("timestamp"))
    }

    fn ready(status: Status, reason: &'static str, message: &str) -> NewCondition<'static> {
        NewCondition {
            type_: ConditionType::Ready,
            status,
            reason,
            message: message.to_owned(),
            observed_generation: Some(1),
        }
    }

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let mut conditions = Vec::new();
        // (step, new condition, time, expected changed, expected lastTransitionTime)
        let steps = [
            (ready(Status::False, "SourceFailure", "a"), 10, true, 10),
            (ready(Status::False, "SourceFailure", "a"), 20, false, 10),
            (ready(Status::False, "AuthenticationFailure", "b"), 30, true, 10),
            (ready(Status::True, "FetchSucceeded", "ok"), 40, true, 40),
            (ready(Status::True, "FetchSucceeded", "ok"), 50, false, 40),
        ];
        for (n, (new, now, changed, transition)) in steps.into_iter().enumerate() {
            assert_eq!(set(&mut conditions, new, &at(now)), changed, "step {n}");
            assert_eq!(conditions.len(), 1);
            assert_eq!(conditions[0].last_transition_time, at(transition), "step {n}");
        }
        assert_eq!(
            get(&conditions, ConditionType::Ready).map(|c| c.reason.as_str()),
            Some("FetchSucceeded")
        );
        assert!(remove(&mut conditions, ConditionType::Ready));
        assert!(get(&conditions, ConditionType::Ready).is_none());
    }
}
