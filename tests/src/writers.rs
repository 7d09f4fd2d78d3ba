//! Who wrote which Application, from the sandbox's request log (the API server's side, not the
//! controllers' word): the shard tests and the scale benchmark's shard phases check with it that
//! no Application ever has two writers at once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use ksync_sandbox::RequestRecord;

/// The Application a successful write request targets (`.../applications/NAME[/status]` in
/// `namespace`).
pub fn written_app<'a>(record: &'a RequestRecord, namespace: &str) -> Option<&'a str> {
    let prefix = format!("/apis/sync.kuvryn.io/v1alpha1/namespaces/{namespace}/applications/");
    let rest = record.path.strip_prefix(&prefix)?;
    let name = rest.strip_suffix("/status").unwrap_or(rest);
    (record.is_write() && record.code < 400 && !name.contains('/')).then_some(name)
}

/// Per Application, per user: the interval from the start of its first write to the end of its
/// last.
pub type Writers = BTreeMap<String, BTreeMap<String, (SystemTime, SystemTime)>>;

/// The writes of `users` to the Applications of `namespace`, as [`Writers`].
pub fn writers(records: &[RequestRecord], namespace: &str, users: &BTreeSet<String>) -> Writers {
    let mut out: Writers = BTreeMap::new();
    for record in records.iter().filter(|r| users.contains(&r.user)) {
        if let Some(app) = written_app(record, namespace) {
            let span = out
                .entry(app.to_owned())
                .or_default()
                .entry(record.user.clone())
                .or_insert((record.started, record.finished));
            span.0 = span.0.min(record.started);
            span.1 = span.1.max(record.finished);
        }
    }
    out
}

/// The last of `users` to write each Application of `namespace`.
pub fn last_writers(
    records: &[RequestRecord],
    namespace: &str,
    users: &BTreeSet<String>,
) -> BTreeMap<String, String> {
    let mut last = BTreeMap::new();
    for record in records.iter().filter(|r| users.contains(&r.user)) {
        if let Some(app) = written_app(record, namespace) {
            last.insert(app.to_owned(), record.user.clone());
        }
    }
    last
}

/// The Applications whose writers' intervals overlap: two writers at once, or writers taking
/// turns back and forth. Each entry names the Application and the two writers.
pub fn overlapping(writers: &Writers) -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    for (app, spans) in writers {
        let mut spans: Vec<(&String, &(SystemTime, SystemTime))> = spans.iter().collect();
        spans.sort_by_key(|(_, span)| span.0);
        for pair in spans.windows(2) {
            let ((first, a), (second, b)) = (pair[0], pair[1]);
            if a.1 > b.0 {
                found.push((app.clone(), first.clone(), second.clone()));
            }
        }
    }
    found
}
