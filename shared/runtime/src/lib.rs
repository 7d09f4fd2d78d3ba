//! Process plumbing the Kuvryn Sync binaries share, so each is written once: the ops HTTP
//! listener ([`ops`]), metrics ([`metrics`]), log set-up ([`logging`]), shutdown signals
//! ([`signals`]), the process-wide TLS provider ([`tls`]), flag parsers ([`flags`]) and Event
//! recording ([`events`]).

pub mod durations;
pub mod events;
pub mod flags;
pub mod labels;
pub mod logging;
pub mod metrics;
pub mod ops;
pub mod signals;
pub mod tls;
