//! How a rollout advances through pre-sync hooks, waves and post-sync hooks, one step per reconcile.

pub mod advance;
