//! Kuvryn Sync: the API types and the decision logic shared by the controller, the admission
//! webhook and the `ksync` CLI. Decisions are pure functions over plain data; I/O stays in the
//! binaries and behind small traits.

pub mod api;
pub mod conditions;
pub mod metrics;
pub mod ops;
pub mod redact;
pub mod repository;
pub mod source;
