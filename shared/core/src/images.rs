//! Image automation: which tag an ImagePolicy selects, and the edits and commits that write it back.

pub mod image_policy;
pub mod image_update;
pub mod image_writeback;
