//! Who is calling: the identity a request is authenticated (or impersonated) as, shared by the
//! HTTP layer, authorization and admission.

use std::collections::BTreeMap;

/// Who is calling.
#[derive(Debug, Clone)]
pub struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}
