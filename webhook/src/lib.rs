//! The webhook's HTTPS surface as a library, so that what it serves is written once: the binary
//! serves [`routes::router`] on each of its two listeners, and the chart's tests check every
//! admission path the chart registers against [`paths::ROUTES`].

pub mod admission;
pub mod connections;
pub mod hooks;
pub mod metrics;
pub mod paths;
pub mod routes;
pub mod state;
