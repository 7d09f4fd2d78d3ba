//! Where desired state comes from: Git URLs and credentials, checkouts, a Repository's reconcile and discovery, the push receiver, OCI chart names.

pub mod checkout;
pub mod credential_scope;
pub mod credentials;
pub mod discovery;
pub mod oci_name;
pub mod receiver;
pub mod repository;
pub mod url;
