//! An opt-in request log, like kube-apiserver's audit log at the `Metadata` level: for every
//! request, who sent it (the authenticated user, and the user it impersonated), the verb and
//! path, when it arrived and when its response began, and the response code. Tests read it to
//! check what clients did from the server's side (for example that no two controller replicas
//! wrote one object at the same time) instead of trusting the clients' own logs. Off by default:
//! [`crate::Sandbox::record_requests`] turns it on.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// HTTP method (`GET`, `PUT`, `PATCH`, ...).
    pub method: String,
    /// The request path, without the query.
    pub path: String,
    /// The query string (`watch=true&...`), empty when none.
    pub query: String,
    /// The authenticated user (before impersonation); empty when authentication failed.
    pub user: String,
    /// The `Impersonate-User` header, when the request impersonated someone.
    pub impersonated: Option<String>,
    /// When the request arrived.
    pub started: SystemTime,
    /// When its response (or, for a watch, the response's first bytes) was ready.
    pub finished: SystemTime,
    /// The response's status code.
    pub code: u16,
}

impl RequestRecord {
    /// Whether the request may change something (not `GET`, `HEAD` or `OPTIONS`).
    pub fn is_write(&self) -> bool {
        !matches!(self.method.as_str(), "GET" | "HEAD" | "OPTIONS")
    }
}

/// The log: empty and off until enabled.
#[derive(Debug, Default)]
pub struct RequestLog {
    enabled: AtomicBool,
    records: Mutex<Vec<RequestRecord>>,
}

impl RequestLog {
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Release);
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    pub fn push(&self, record: RequestRecord) {
        if self.enabled() {
            self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(record);
        }
    }

    /// Every request recorded so far, in the order their responses were ready.
    pub fn records(&self) -> Vec<RequestRecord> {
        self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(method: &str) -> RequestRecord {
        RequestRecord {
            method: method.into(),
            path: "/api/v1/namespaces".into(),
            query: String::new(),
            user: "admin".into(),
            impersonated: None,
            started: SystemTime::UNIX_EPOCH,
            finished: SystemTime::UNIX_EPOCH,
            code: 200,
        }
    }

    #[test]
    fn records_only_once_enabled() {
        let log = RequestLog::default();
        log.push(record("GET"));
        assert!(log.records().is_empty());
        log.enable();
        log.push(record("PATCH"));
        assert_eq!(log.records(), vec![record("PATCH")]);
        assert!(log.records()[0].is_write());
        assert!(!record("GET").is_write());
    }
}
