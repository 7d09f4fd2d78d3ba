//! Text every other module shares: redaction of secrets, the duration grammar, the budgeted YAML parser.

pub mod duration;
pub mod redact;
pub mod yaml;
