//! Sources: Git URL rules, credentials from labelled Secrets, revision resolution and fetch
//! (gix) with an on-disk cache, and `.ksync.yaml` discovery. Discovery, URL rules and credential
//! parsing are pure; fetching is the I/O edge.

pub mod credentials;
pub mod discovery;
pub mod git;
pub mod url;
