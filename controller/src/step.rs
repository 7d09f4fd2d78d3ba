//! A step's result: its value, a failure the status reports, or an error the reconcile retries.

use kuvryn_sync_core::failure::StepFailure;

/// How a step failed: `Report` when the object's own inputs failed (its spec, source, render or
/// plan), which the decision records on its status; `Retry` when the controller could not do its
/// part (the API server, a background task), which is retried with backoff and records nothing.
/// Flux draws the same line between stalled and retried reconciles. `E` is the reconciler's
/// error type (the Application reconciler's `context::ReconcileError`, the Repository
/// reconciler's own).
#[derive(Debug)]
pub(crate) enum StepError<E> {
    Report(StepFailure),
    Retry(E),
}

/// What a step returns: its value, or how it failed. Steps compose with `?`.
pub(crate) type StepResult<T, E> = Result<T, StepError<E>>;

impl<E> From<StepFailure> for StepError<E> {
    fn from(failure: StepFailure) -> Self {
        Self::Report(failure)
    }
}

impl<E: From<kube::Error>> From<kube::Error> for StepError<E> {
    fn from(err: kube::Error) -> Self {
        Self::Retry(err.into())
    }
}

impl<E: From<tokio::task::JoinError>> From<tokio::task::JoinError> for StepError<E> {
    fn from(err: tokio::task::JoinError) -> Self {
        Self::Retry(err.into())
    }
}

/// A step's value, or its failure as `report` makes it; a retry stays the reconcile's error.
pub(crate) fn reported<T, E>(
    step: StepResult<T, E>,
    report: impl FnOnce(StepFailure) -> T,
) -> Result<T, E> {
    match step {
        Ok(value) => Ok(value),
        Err(StepError::Report(failure)) => Ok(report(failure)),
        Err(StepError::Retry(err)) => Err(err),
    }
}
