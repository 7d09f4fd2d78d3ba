//! Shared helpers for the end-to-end tests.

pub mod cluster;
pub mod helm;
pub mod servers;
