//! Shared helpers for the end-to-end tests.

pub mod application;
pub mod apply;
pub mod charts;
pub mod cli;
pub mod cluster;
pub mod helm;
pub mod process_tree;
pub mod receiver;
pub mod registry;
pub mod servers;
pub mod webhook;
