//! The one failure type of a reconcile's steps: what failed (`reason`), what to do about it
//! (`message`), and on which object when one is to blame (`resource`). A step that fails for the
//! Application's (or the Repository's) own inputs returns it, and the decision reports it on the
//! status; trouble of the controller's own (the API server, a background task) is not a
//! `StepFailure` but an error the controller retries with backoff.

use kuvryn_sync_api::FailureReason;

use crate::desired::ObjectKey;

/// A step that failed for a reason the status reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepFailure {
    pub reason: FailureReason,
    pub message: String,
    /// The object the failure is about, when one is (boxed: most failures name none, and a
    /// failure travels in `Err`, which should stay small).
    pub resource: Option<Box<ObjectKey>>,
}

impl StepFailure {
    /// A failure about no object in particular.
    pub fn new(reason: FailureReason, message: impl Into<String>) -> Self {
        Self { reason, message: message.into(), resource: None }
    }

    /// The same failure, about `resource`.
    pub fn on(self, resource: ObjectKey) -> Self {
        Self { resource: Some(Box::new(resource)), ..self }
    }
}

impl std::fmt::Display for StepFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason.as_str(), self.message)
    }
}
