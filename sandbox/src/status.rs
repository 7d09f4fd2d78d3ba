//! `metav1.Status` errors worded as kube-apiserver words them.
//!
//! Wording follows `k8s.io/apimachinery/pkg/api/errors` (NewNotFound, NewAlreadyExists,
//! NewConflict, NewInvalid, NewForbidden, NewGone, NewBadRequest, NewApplyConflict); see
//! <https://github.com/kubernetes/community/blob/master/contributors/devel/sig-architecture/api-conventions.md#response-status-kind>.

use serde_json::{Value, json};

/// An API error that renders as a `Status` object with an HTTP code.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.reason, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

/// `deployments.apps` or `configmaps`: the qualified resource string kube-apiserver prints.
pub fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() { plural.to_string() } else { format!("{plural}.{group}") }
}

fn details(group: &str, plural: &str, name: &str) -> Value {
    let mut d = json!({ "name": name, "kind": plural });
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    d
}

/// A key of `details` that is not a StatusDetails field: `to_status` moves it to the Status's
/// `metadata.continue` (a 410 for an expired continue token carries a fresh token there).
pub const LIST_CONTINUE: &str = "__listContinue";

impl ApiError {
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            match d.get(LIST_CONTINUE) {
                Some(c) => s["metadata"]["continue"] = c.clone(),
                None => s["details"] = d.clone(),
            }
        }
        if self.reason.is_empty()
            && let Some(o) = s.as_object_mut()
        {
            o.remove("reason");
        }
        s
    }

    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("{} \"{}\" not found", qualified(group, plural), name),
            details: Some(details(group, plural, name)),
        }
    }

    /// The 404 for a URL that names no resource at all.
    pub fn path_not_found() -> Self {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: "the server could not find the requested resource".into(),
            details: Some(json!({})),
        }
    }

    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        ApiError {
            code: 409,
            reason: "AlreadyExists",
            message: format!("{} \"{}\" already exists", qualified(group, plural), name),
            details: Some(details(group, plural, name)),
        }
    }

    pub fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        ApiError {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {} \"{}\": {}",
                qualified(group, plural),
                name,
                why
            ),
            details: Some(details(group, plural, name)),
        }
    }

    pub fn modified(group: &str, plural: &str, name: &str) -> Self {
        Self::conflict(
            group,
            plural,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// `NewInvalid`: `Kind "name" is invalid: field: Type: detail`.
    pub fn invalid(
        group: &str,
        kind: &str,
        name: &str,
        causes: Vec<(String, String, String)>,
    ) -> Self {
        let msgs: Vec<String> = causes.iter().map(|(f, _, m)| format!("{f}: {m}")).collect();
        let message = if msgs.len() == 1 {
            format!("{kind} \"{name}\" is invalid: {}", msgs[0])
        } else {
            format!("{kind} \"{name}\" is invalid: [{}]", msgs.join(", "))
        };
        let mut d = json!({
            "name": name,
            "kind": kind,
            "causes": causes.iter().map(|(f, t, m)| json!({"reason": t, "message": m, "field": f})).collect::<Vec<_>>(),
        });
        if !group.is_empty() {
            d["group"] = json!(group);
        }
        ApiError { code: 422, reason: "Invalid", message, details: Some(d) }
    }

    pub fn bad_request(msg: impl Into<String>) -> Self {
        ApiError { code: 400, reason: "BadRequest", message: msg.into(), details: None }
    }

    pub fn gone(msg: impl Into<String>) -> Self {
        ApiError { code: 410, reason: "Expired", message: msg.into(), details: None }
    }

    pub fn method_not_allowed() -> Self {
        ApiError {
            code: 405,
            reason: "MethodNotAllowed",
            message: "the server does not allow this method on the requested resource".into(),
            details: Some(json!({})),
        }
    }

    pub fn unsupported_media_type(ct: &str) -> Self {
        ApiError {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {ct})"
            ),
            details: None,
        }
    }

    pub fn unauthorized() -> Self {
        ApiError {
            code: 401,
            reason: "Unauthorized",
            message: "Unauthorized".into(),
            details: None,
        }
    }

    /// `NewForbidden`: `plural.group "name" is forbidden: reason`.
    pub fn forbidden(group: &str, plural: &str, name: &str, why: &str) -> Self {
        let q = qualified(group, plural);
        let message = if name.is_empty() {
            format!("{q} is forbidden: {why}")
        } else {
            format!("{q} \"{name}\" is forbidden: {why}")
        };
        ApiError {
            code: 403,
            reason: "Forbidden",
            message,
            details: Some(details(group, plural, name)),
        }
    }

    pub fn internal(msg: impl Into<String>) -> Self {
        ApiError { code: 500, reason: "InternalError", message: msg.into(), details: None }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
