//! Notifications: which lifecycle Events notify, what a sink receives, how it is signed, whether a
//! failed delivery is retried and after how long, whether a sink and its Secret are usable, and
//! the `NotificationsReady` condition. Pure: the controller reads the sinks and Secrets, runs the
//! HTTP calls and the queue (`controller/src/notify.rs`), and asks these functions what to do.
//!
//! Hand-written because the payloads and the signature header are Kuvryn Sync's own contract
//! (API reference, Notifications); the cryptography is the `hmac` and `sha2` crates.
//!
//! One notification per lifecycle transition: notifications are derived from the Application
//! Events the decision emits, and the decision emits each lifecycle Event once per transition
//! (ApprovalRequired → AwaitingApproval, DeploymentHealthy → Healthy, a failure reason →
//! Failed, RollbackCompleted → RolledBack), so an unchanged state across reconciles or a restart
//! sends nothing again.

use std::collections::BTreeMap;
use std::time::Duration;

use hmac::{Hmac, Mac};
use kuvryn_sync_api::{
    Application, ConditionReason, ConditionType, EventReason, FailureReason, NotificationEvent,
    NotificationSinkSpec, SinkType,
};
use sha2::Sha256;

use crate::conditions::{NewCondition, Status};
use crate::redact::Redactor;

/// The header carrying a webhook body's signature.
pub const SIGNATURE_HEADER: &str = "X-Kuvryn-Signature";
/// The Secret key holding the sink's address.
pub const URL_KEY: &str = "url";
/// The Secret key holding a webhook sink's signing key.
pub const HMAC_KEY: &str = "hmacKey";
/// Longest message a notification carries, in bytes.
pub const MAX_MESSAGE: usize = 1024;

/// The notification event a lifecycle Event reason stands for, if any.
pub fn notification_event(reason: EventReason) -> Option<NotificationEvent> {
    match reason {
        EventReason::ApprovalRequired => Some(NotificationEvent::AwaitingApproval),
        EventReason::DeploymentHealthy => Some(NotificationEvent::Healthy),
        EventReason::RollbackCompleted => Some(NotificationEvent::RolledBack),
        // A completed rollback already notifies as RolledBack.
        EventReason::Failure(FailureReason::RolledBack) => None,
        // Retries stopping ends a failure already notified as Failed: one lifecycle event.
        EventReason::Failure(FailureReason::RetryBlocked) => None,
        EventReason::Failure(_) => Some(NotificationEvent::Failed),
        _ => None,
    }
}

/// What a notification is about; the same for every sink it goes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notification {
    pub application: String,
    pub namespace: String,
    pub event: NotificationEvent,
    /// The Revision object's name, when there is one.
    pub revision: Option<String>,
    /// The Git commit the event is about, when known.
    pub commit: Option<String>,
    /// The Event's message, already redacted.
    pub message: String,
    /// RFC 3339 time of the event.
    pub time: String,
}

/// The notifications `events` (reason, message) of `app` send, one per (subscription, event):
/// `(sink name, notification)`. `message` is redacted and bounded.
pub fn notifications_for(
    app: &Application,
    events: &[(EventReason, String)],
    context: &NotificationContext,
    redactor: &Redactor,
) -> Vec<(String, Notification)> {
    let mut out = Vec::new();
    // A completed rollback is Healthy too; it notifies once, as RolledBack.
    let rolled_back = events.iter().any(|(reason, _)| *reason == EventReason::RollbackCompleted);
    for (reason, message) in events {
        let Some(event) = notification_event(*reason) else { continue };
        if rolled_back && event == NotificationEvent::Healthy {
            continue;
        }
        for subscription in &app.spec.notifications {
            if !subscription.events.contains(&event) {
                continue;
            }
            let commit = match event {
                NotificationEvent::Healthy | NotificationEvent::RolledBack => {
                    context.deployed_commit.clone()
                }
                NotificationEvent::AwaitingApproval | NotificationEvent::Failed => {
                    context.desired_commit.clone()
                }
            };
            let revision = commit.as_ref().and_then(|c| context.revisions.get(c).cloned());
            out.push((
                subscription.sink_ref.name.clone(),
                Notification {
                    application: context.application.clone(),
                    namespace: context.namespace.clone(),
                    event,
                    revision,
                    commit,
                    message: crate::redact::truncate(&redactor.redact(message), MAX_MESSAGE),
                    time: context.time.clone(),
                },
            ));
        }
    }
    out
}

/// What the controller knows about the Application when its Events are published.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NotificationContext {
    pub application: String,
    pub namespace: String,
    /// `status.desiredRevision` as just written.
    pub desired_commit: Option<String>,
    /// `status.deployedRevision` as just written.
    pub deployed_commit: Option<String>,
    /// Revision object names by commit.
    pub revisions: BTreeMap<String, String>,
    /// RFC 3339 time.
    pub time: String,
}

/// The webhook sink's JSON body: `{application, namespace, event, revision, commit, message,
/// time}`.
pub fn webhook_body(n: &Notification) -> Vec<u8> {
    let body = serde_json::json!({
        "application": n.application,
        "namespace": n.namespace,
        "event": n.event.as_str(),
        "revision": n.revision,
        "commit": n.commit,
        "message": n.message,
        "time": n.time,
    });
    body.to_string().into_bytes()
}

/// The Slack incoming-webhook body: one `text` line naming the Application, the event, the
/// commit (short) and the message.
pub fn slack_body(n: &Notification) -> Vec<u8> {
    let commit = n.commit.as_deref().map(|c| c.chars().take(12).collect::<String>());
    let mut text = format!("*{}/{}*: {}", n.namespace, n.application, n.event.as_str());
    if let Some(commit) = commit {
        text.push_str(&format!(" at `{commit}`"));
    }
    if !n.message.is_empty() {
        text.push_str(" — ");
        text.push_str(&crate::redact::truncate(&n.message, 300));
    }
    serde_json::json!({ "text": text }).to_string().into_bytes()
}

/// The body a sink of `sink_type` receives for `n`.
pub fn body_for(sink_type: SinkType, n: &Notification) -> Vec<u8> {
    match sink_type {
        SinkType::Webhook => webhook_body(n),
        SinkType::Slack => slack_body(n),
    }
}

/// `sha256=<hex HMAC-SHA256(key, body)>`, the value of [`SIGNATURE_HEADER`].
pub fn signature(key: &[u8], body: &[u8]) -> String {
    // HMAC accepts keys of any length, so this never fails.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// How a delivery attempt ended, as the worker saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The sink answered with this HTTP status; `retry_after` is its Retry-After, if parsed.
    Answered { status: u16, retry_after: Option<Duration> },
    /// No connection, TLS failure or a broken connection.
    ConnectionError,
    /// No answer within the delivery timeout.
    TimedOut,
}

/// What to do after an attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NextStep {
    /// The sink took it (2xx).
    Delivered,
    /// Try again after this long.
    RetryAfter(Duration),
    /// Give up: record `NotificationFailed` with this (URL-free) reason.
    Fail(String),
}

/// Retry limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Wait before the second attempt; doubled each time after.
    pub base_backoff: Duration,
    /// Longest wait between attempts, Retry-After included.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// What to do after attempt number `attempt` (1-based) ended with `outcome`: 2xx is delivered;
/// connection errors, timeouts, 429 and 5xx are retried with exponential backoff (a 429's
/// Retry-After is honoured up to `max_backoff`) until `max_attempts`; any other status fails at
/// once.
pub fn after_attempt(attempt: u32, outcome: AttemptOutcome, policy: &RetryPolicy) -> NextStep {
    let (retryable, why, retry_after) = match outcome {
        AttemptOutcome::Answered { status, .. } if (200..300).contains(&status) => {
            return NextStep::Delivered;
        }
        AttemptOutcome::Answered { status: 429, retry_after } => {
            (true, "the sink answered 429 Too Many Requests".to_owned(), retry_after)
        }
        AttemptOutcome::Answered { status, .. } if status >= 500 => {
            (true, format!("the sink answered HTTP {status}"), None)
        }
        AttemptOutcome::Answered { status, .. } => {
            (false, format!("the sink refused the notification with HTTP {status}"), None)
        }
        AttemptOutcome::ConnectionError => (true, "the sink could not be reached".to_owned(), None),
        AttemptOutcome::TimedOut => (true, "the sink did not answer in time".to_owned(), None),
    };
    if !retryable {
        return NextStep::Fail(why);
    }
    if attempt >= policy.max_attempts {
        return NextStep::Fail(format!("{why}; gave up after {attempt} attempts"));
    }
    let wait = retry_after.unwrap_or_else(|| backoff(attempt, policy));
    NextStep::RetryAfter(wait.min(policy.max_backoff))
}

/// The exponential backoff after attempt `attempt` (1-based): base, 2×base, 4×base…, capped.
pub fn backoff(attempt: u32, policy: &RetryPolicy) -> Duration {
    let factor = 1u32.checked_shl(attempt.saturating_sub(1)).unwrap_or(u32::MAX);
    policy.base_backoff.saturating_mul(factor).min(policy.max_backoff)
}

/// A Retry-After header in delta-seconds; an HTTP date or anything else is `None` (the
/// exponential backoff applies then).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// A usable sink: where to post and how to sign. Debug never prints the url or the key.
#[derive(Clone, PartialEq, Eq)]
pub struct SinkTarget {
    pub sink_type: SinkType,
    pub url: String,
    /// The signing key (webhook sinks).
    pub hmac_key: Option<Vec<u8>>,
}

impl std::fmt::Debug for SinkTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkTarget")
            .field("sink_type", &self.sink_type)
            .field("url", &"<secret>")
            .field("hmac_key", &self.hmac_key.as_ref().map(|_| "<secret>"))
            .finish()
    }
}

/// What the controller found when it looked for a sink's Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretLookup {
    /// The Secret's data.
    Found(BTreeMap<String, Vec<u8>>),
    /// No such Secret.
    Missing,
    /// It could not be read (forbidden, API error); the text is already redacted.
    Unreadable(String),
}

/// Whether sink `name` (`sink`, `None` when missing) with its Secret can be sent to. The error
/// names the sink, the rule broken and what to do, and never contains the url.
pub fn validate_sink(
    name: &str,
    sink: Option<&NotificationSinkSpec>,
    secret: &SecretLookup,
) -> Result<SinkTarget, String> {
    let Some(sink) = sink else {
        return Err(format!("NotificationSink {name} does not exist in the namespace; create it"));
    };
    let secret_name = &sink.secret_ref.name;
    let data = match secret {
        SecretLookup::Found(data) => data,
        SecretLookup::Missing => {
            return Err(format!(
                "NotificationSink {name}: Secret {secret_name} (spec.secretRef.name) does not \
                 exist; create it with keys url and, for webhook sinks, hmacKey"
            ));
        }
        SecretLookup::Unreadable(why) => {
            return Err(format!(
                "NotificationSink {name}: Secret {secret_name} cannot be read as the \
                 Application's service account: {why}"
            ));
        }
    };
    let url = data
        .get(URL_KEY)
        .map(|v| String::from_utf8_lossy(v).trim().to_owned())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("NotificationSink {name}: Secret {secret_name} has no url"))?;
    if !is_https_url(&url) {
        return Err(format!(
            "NotificationSink {name}: Secret {secret_name} url must be an https:// URL; \
             set url to the sink's https address"
        ));
    }
    let hmac_key = match sink.sink_type {
        SinkType::Webhook => {
            let key = data.get(HMAC_KEY).filter(|k| !k.is_empty()).ok_or_else(|| {
                format!(
                    "NotificationSink {name}: Secret {secret_name} has no hmacKey, which \
                     webhook sinks sign with; add one"
                )
            })?;
            Some(key.clone())
        }
        SinkType::Slack => None,
    };
    Ok(SinkTarget { sink_type: sink.sink_type, url, hmac_key })
}

/// `https://` followed by a host.
fn is_https_url(url: &str) -> bool {
    let Some(rest) = url.get(..8).filter(|s| s.eq_ignore_ascii_case("https://")).map(|_| &url[8..])
    else {
        return false;
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    !host.is_empty() && !url.chars().any(char::is_whitespace)
}

/// The `NotificationsReady` condition for the sink problems found (empty: all ready), or `None`
/// when `spec.notifications` is empty (the condition is absent then: remove it).
pub fn condition(app: &Application, problems: &[String]) -> Option<NewCondition<'static>> {
    if app.spec.notifications.is_empty() {
        return None;
    }
    let (status, reason, message) = if problems.is_empty() {
        let count = app.spec.notifications.len();
        (Status::True, ConditionReason::SinksReady, format!("{count} notification sink(s) ready"))
    } else {
        (Status::False, ConditionReason::SinkInvalid, problems.join("; "))
    };
    Some(NewCondition {
        type_: ConditionType::NotificationsReady,
        status,
        reason: reason.as_str(),
        message: crate::redact::truncate(&message, MAX_MESSAGE),
        observed_generation: app.metadata.generation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kuvryn_sync_api::{LocalObjectReference, NotificationSubscription};

    fn app(subscriptions: &[(&str, &[NotificationEvent])]) -> Application {
        let mut app: Application = serde_json::from_value(serde_json::json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "shop", "namespace": "team", "generation": 3},
            "spec": {"source": {"repositoryRef": {"name": "apps"}, "render": {"type": "yaml"}},
                     "destination": {"namespace": "team"}},
        }))
        .expect("application");
        app.spec.notifications = subscriptions
            .iter()
            .map(|(sink, events)| NotificationSubscription {
                sink_ref: LocalObjectReference { name: (*sink).to_owned() },
                events: events.to_vec(),
            })
            .collect();
        app
    }

    fn context() -> NotificationContext {
        NotificationContext {
            application: "shop".into(),
            namespace: "team".into(),
            desired_commit: Some("b".repeat(40)),
            deployed_commit: Some("a".repeat(40)),
            revisions: [("a".repeat(40), "shop-aaaa".to_owned())].into_iter().collect(),
            time: "2026-01-02T03:04:05Z".into(),
        }
    }

    fn notification(event: NotificationEvent) -> Notification {
        Notification {
            application: "shop".into(),
            namespace: "team".into(),
            event,
            revision: Some("shop-aaaa".into()),
            commit: Some("a".repeat(40)),
            message: "every managed resource is Healthy".into(),
            time: "2026-01-02T03:04:05Z".into(),
        }
    }

    #[test]
    fn lifecycle_events_map_to_notification_events() {
        use NotificationEvent::*;
        let table = [
            (EventReason::ApprovalRequired, Some(AwaitingApproval)),
            (EventReason::DeploymentHealthy, Some(Healthy)),
            (EventReason::RollbackCompleted, Some(RolledBack)),
            (EventReason::Failure(FailureReason::HealthFailure), Some(Failed)),
            (EventReason::Failure(FailureReason::RetryBlocked), None),
            (EventReason::Failure(FailureReason::RolledBack), None),
            (EventReason::PlanCreated, None),
            (EventReason::DeploymentStarted, None),
            (EventReason::RollbackStarted { automatic: true }, None),
            (EventReason::NotificationFailed, None),
            (EventReason::NotificationDropped, None),
        ];
        for (reason, want) in table {
            assert_eq!(notification_event(reason), want, "{reason:?}");
        }
    }

    #[test]
    fn only_subscribed_events_notify_each_subscribed_sink() {
        use NotificationEvent::*;
        let app = app(&[("audit", &[Healthy, Failed]), ("chat", &[Failed])]);
        let events = vec![
            (EventReason::PlanCreated, "plan".to_owned()),
            (EventReason::DeploymentHealthy, "healthy".to_owned()),
            (EventReason::Failure(FailureReason::ApplyFailure), "token s3cr3tvalue".to_owned()),
            (EventReason::ApprovalRequired, "waiting".to_owned()),
        ];
        let redactor = Redactor::new().with_secret("s3cr3tvalue");
        type Row = (String, NotificationEvent, Option<String>, Option<String>, String);
        let got: Vec<Row> = notifications_for(&app, &events, &context(), &redactor)
            .into_iter()
            .map(|(sink, n)| (sink, n.event, n.commit, n.revision, n.message))
            .collect();
        let a = Some("a".repeat(40));
        let b = Some("b".repeat(40));
        assert_eq!(
            got,
            vec![
                ("audit".into(), Healthy, a, Some("shop-aaaa".into()), "healthy".into()),
                ("audit".into(), Failed, b.clone(), None, "token ***".into()),
                ("chat".into(), Failed, b, None, "token ***".into()),
            ]
        );
    }

    #[test]
    fn a_completed_rollback_notifies_once_as_rolled_back() {
        use NotificationEvent::*;
        let app = app(&[("audit", &[Healthy, Failed, RolledBack])]);
        let events = vec![
            (EventReason::DeploymentHealthy, "healthy".to_owned()),
            (EventReason::RollbackCompleted, "rolled back".to_owned()),
        ];
        let got: Vec<NotificationEvent> =
            notifications_for(&app, &events, &context(), &Redactor::new())
                .into_iter()
                .map(|(_, n)| n.event)
                .collect();
        assert_eq!(got, vec![RolledBack]);
    }

    #[test]
    fn webhook_body_has_the_documented_fields() {
        let body = webhook_body(&notification(NotificationEvent::Healthy));
        let value: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(
            value,
            serde_json::json!({
                "application": "shop", "namespace": "team", "event": "Healthy",
                "revision": "shop-aaaa", "commit": "a".repeat(40),
                "message": "every managed resource is Healthy", "time": "2026-01-02T03:04:05Z",
            })
        );
    }

    #[test]
    fn slack_body_is_one_text_naming_application_event_and_commit() {
        let table = [
            (
                notification(NotificationEvent::Failed),
                "*team/shop*: Failed at `aaaaaaaaaaaa` — every managed resource is Healthy",
            ),
            (
                Notification {
                    commit: None,
                    message: String::new(),
                    ..notification(NotificationEvent::AwaitingApproval)
                },
                "*team/shop*: AwaitingApproval",
            ),
        ];
        for (n, want) in table {
            let value: serde_json::Value = serde_json::from_slice(&slack_body(&n)).expect("json");
            assert_eq!(value, serde_json::json!({ "text": want }));
        }
    }

    #[test]
    fn signatures_are_hex_hmac_sha256_of_the_raw_body() {
        // RFC 4231 test case 2.
        let table: [(&[u8], &[u8], &str); 2] = [
            (
                b"Jefe",
                b"what do ya want for nothing?",
                "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (b"", b"", "sha256=b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad"),
        ];
        for (key, body, want) in table {
            assert_eq!(signature(key, body), want);
        }
    }

    #[test]
    fn attempts_are_retried_only_when_the_sink_may_recover() {
        let policy = RetryPolicy {
            max_attempts: 4,
            base_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
        };
        let answered = |status, retry_after| AttemptOutcome::Answered { status, retry_after };
        let secs = |s| NextStep::RetryAfter(Duration::from_secs(s));
        let table = [
            (1, answered(200, None), NextStep::Delivered),
            (4, answered(204, None), NextStep::Delivered),
            (1, answered(500, None), secs(1)),
            (2, answered(503, None), secs(2)),
            (3, AttemptOutcome::ConnectionError, secs(4)),
            (1, AttemptOutcome::TimedOut, secs(1)),
            (1, answered(429, Some(Duration::from_secs(7))), secs(7)),
            (1, answered(429, Some(Duration::from_secs(3600))), secs(10)),
            (2, answered(429, None), secs(2)),
            (
                4,
                answered(500, None),
                NextStep::Fail("the sink answered HTTP 500; gave up after 4 attempts".into()),
            ),
            (
                4,
                AttemptOutcome::TimedOut,
                NextStep::Fail("the sink did not answer in time; gave up after 4 attempts".into()),
            ),
            (
                1,
                answered(404, None),
                NextStep::Fail("the sink refused the notification with HTTP 404".into()),
            ),
            (
                1,
                answered(301, None),
                NextStep::Fail("the sink refused the notification with HTTP 301".into()),
            ),
        ];
        for (attempt, outcome, want) in table {
            assert_eq!(after_attempt(attempt, outcome, &policy), want, "{attempt} {outcome:?}");
        }
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let policy = RetryPolicy::default();
        let got: Vec<u64> =
            [1, 2, 3, 5, 6, 40].iter().map(|a| backoff(*a, &policy).as_secs()).collect();
        assert_eq!(got, vec![1, 2, 4, 16, 30, 30]);
    }

    #[test]
    fn retry_after_is_read_as_seconds() {
        let table = [
            ("120", Some(Duration::from_secs(120))),
            (" 0 ", Some(Duration::ZERO)),
            ("Wed, 21 Oct 2015 07:28:00 GMT", None),
            ("-1", None),
            ("", None),
        ];
        for (value, want) in table {
            assert_eq!(parse_retry_after(value), want, "{value:?}");
        }
    }

    fn spec(sink_type: SinkType) -> NotificationSinkSpec {
        NotificationSinkSpec { sink_type, secret_ref: LocalObjectReference { name: "hook".into() } }
    }

    fn data(pairs: &[(&str, &str)]) -> SecretLookup {
        SecretLookup::Found(
            pairs.iter().map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec())).collect(),
        )
    }

    #[test]
    fn sinks_are_valid_only_with_an_https_url_and_a_key_for_webhooks() {
        let url = "https://hooks.example.test/T0/B0/secretpath";
        let webhook = spec(SinkType::Webhook);
        let slack = spec(SinkType::Slack);
        let ok = |target: Result<SinkTarget, String>| target.map(|t| (t.sink_type, t.hmac_key));
        let table: Vec<(Option<&NotificationSinkSpec>, SecretLookup, Result<_, &str>)> = vec![
            (
                Some(&webhook),
                data(&[("url", url), ("hmacKey", "k")]),
                Ok((SinkType::Webhook, Some(b"k".to_vec()))),
            ),
            (Some(&slack), data(&[("url", url)]), Ok((SinkType::Slack, None))),
            (
                None,
                SecretLookup::Missing,
                Err("NotificationSink audit does not exist in the namespace; create it"),
            ),
            (
                Some(&webhook),
                SecretLookup::Missing,
                Err(
                    "NotificationSink audit: Secret hook (spec.secretRef.name) does not exist; create it with keys url and, for webhook sinks, hmacKey",
                ),
            ),
            (
                Some(&webhook),
                SecretLookup::Unreadable("forbidden".into()),
                Err(
                    "NotificationSink audit: Secret hook cannot be read as the Application's service account: forbidden",
                ),
            ),
            (Some(&slack), data(&[]), Err("NotificationSink audit: Secret hook has no url")),
            (
                Some(&slack),
                data(&[("url", "http://hooks.example.test/secretpath")]),
                Err(
                    "NotificationSink audit: Secret hook url must be an https:// URL; set url to the sink's https address",
                ),
            ),
            (
                Some(&slack),
                data(&[("url", "https://")]),
                Err(
                    "NotificationSink audit: Secret hook url must be an https:// URL; set url to the sink's https address",
                ),
            ),
            (
                Some(&slack),
                data(&[("url", "ftp://x/secretpath")]),
                Err(
                    "NotificationSink audit: Secret hook url must be an https:// URL; set url to the sink's https address",
                ),
            ),
            (
                Some(&webhook),
                data(&[("url", url)]),
                Err(
                    "NotificationSink audit: Secret hook has no hmacKey, which webhook sinks sign with; add one",
                ),
            ),
        ];
        for (sink, secret, want) in table {
            let got = validate_sink("audit", sink, &secret);
            if let Err(message) = &got {
                assert!(!message.contains("secretpath"), "url leaked: {message}");
            }
            assert_eq!(ok(got), want.map_err(str::to_owned), "{secret:?}");
        }
    }

    #[test]
    fn sink_target_debug_hides_url_and_key() {
        let target = SinkTarget {
            sink_type: SinkType::Webhook,
            url: "https://x.test/secretpath".into(),
            hmac_key: Some(b"topsecretkey".to_vec()),
        };
        let debug = format!("{target:?}");
        assert!(!debug.contains("secretpath") && !debug.contains("topsecret"), "{debug}");
    }

    #[test]
    fn condition_is_present_only_with_subscriptions() {
        use NotificationEvent::*;
        assert_eq!(condition(&app(&[]), &[]), None);
        let with = app(&[("audit", &[Healthy])]);
        let ready = condition(&with, &[]).expect("present");
        assert_eq!((ready.status, ready.reason), (Status::True, "SinksReady"));
        assert_eq!(ready.observed_generation, Some(3));
        let invalid =
            condition(&with, &["NotificationSink audit does not exist".into()]).expect("present");
        assert_eq!((invalid.status, invalid.reason), (Status::False, "SinkInvalid"));
        assert_eq!(invalid.message, "NotificationSink audit does not exist");
    }
}
