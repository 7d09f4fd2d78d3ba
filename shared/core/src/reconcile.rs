//! An Application's reconcile: its decision, attempts and their health, rollbacks, history, dependencies, conditions, shards.

pub mod application;
pub mod conditions;
pub mod dependencies;
pub mod failure;
pub mod history;
pub mod rollback;
pub mod rollout;
pub mod shards;
