//! Command-line flag parsers shared by the binaries, so a flag means the same everywhere.

use std::time::Duration;

/// A clap value parser for durations in the one grammar of `kuvryn_sync_core::duration`.
pub fn duration(text: &str) -> Result<Duration, String> {
    kuvryn_sync_core::duration::parse(text).map_err(|err| err.to_string())
}
