//! `spec.history.limit`: which Revisions to delete. (Being written.)
