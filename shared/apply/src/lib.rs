//! The apply engine's I/O: everything that talks to the API server on an Application's behalf.
//! The decisions (normalising desired state, plan, order, prune selection) are pure functions in
//! `kuvryn-sync-core`; this crate gathers their inputs and carries out their results.
//!
//! Every request here goes through a client impersonating the Application's service account
//! ([`clients`]): never the controller's own identity.

pub mod clients;
pub mod engine;
pub mod kinds;
pub mod memo;
pub mod runner;
pub mod shared_inventory;
