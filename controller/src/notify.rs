//! Notification delivery: reading an Application's sinks and their Secrets, the bounded queue,
//! and the delivery tasks (reqwest over rustls). What to send, how to sign it and whether to
//! retry are decided by [`kuvryn_sync_core::notify`]; this module only does the I/O.
//!
//! - **Queue**: at most `--notification-queue-size` notifications are pending (waiting for their
//!   sink or being delivered) at once, counted by a semaphore's permits. Enqueueing never waits:
//!   without a free permit the notification is dropped with one `NotificationDropped` Warning
//!   Event, so a reconcile is never slowed by a sink.
//! - **Per-sink lanes**: each pending notification is its own task, and the tasks for one sink
//!   take turns on that sink's lane (a FIFO lock), so one sink receives its notifications in
//!   order and a slow or dead sink holds only its own lane (and the queue slots of its own
//!   pending notifications), never other sinks or reconciles.
//! - **Delivery**: each attempt has `--notification-timeout`; the retry decision is
//!   [`after_attempt`]. On giving up, a `NotificationFailed` Warning Event names the sink and the
//!   reason, never the url.
//! - **Secrets**: the sink is read with the controller's client (it may get NotificationSinks);
//!   the Secret as the Application's service account. The url and key go only into the request;
//!   reqwest errors are reduced to their kind, since their text contains the url.
//! - The queue is in memory: notifications pending when the controller stops are lost (the
//!   lifecycle Event that caused them is recorded once and not replayed).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use kuvryn_sync_api::{
    Application, EventReason, NotificationEvent, NotificationSink, Revision, keys,
};
use kuvryn_sync_apply::clients::ImpersonatedClients;
use kuvryn_sync_core::notify::{
    AttemptOutcome, NextStep, Notification, NotificationContext, RetryPolicy, SIGNATURE_HEADER,
    SecretLookup, SinkTarget, after_attempt, body_for, notification_event, notifications_for,
    parse_retry_after, signature, validate_sink,
};
use kuvryn_sync_core::redact::Redactor;
use kuvryn_sync_runtime::events::EventRecorder;
use kuvryn_sync_runtime::metrics::{ControllerMetrics, NotificationOutcome};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Delivers notifications; shared by every reconcile.
pub struct Notifier {
    client: kube::Client,
    recorder: Arc<EventRecorder>,
    metrics: ControllerMetrics,
    http: reqwest::Client,
    queue: Arc<Semaphore>,
    lanes: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    policy: RetryPolicy,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("free_queue_slots", &self.queue.available_permits())
            .finish_non_exhaustive()
    }
}

/// A sink as resolved for one Application: its name and either where to send or why not.
pub type ResolvedSinks = BTreeMap<String, Result<SinkTarget, String>>;

impl Notifier {
    /// A notifier with room for `queue_size` pending notifications, each attempt bounded by
    /// `timeout`. TLS trusts the system roots (with `SSL_CERT_FILE`/`SSL_CERT_DIR`).
    pub fn new(
        client: kube::Client,
        recorder: Arc<EventRecorder>,
        metrics: ControllerMetrics,
        queue_size: usize,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent("kuvryn-sync")
            .build()
            .map_err(|_| anyhow::anyhow!("cannot build the notification HTTP client"))?;
        Ok(Notifier {
            client,
            recorder,
            metrics,
            http,
            queue: Arc::new(Semaphore::new(queue_size.max(1))),
            lanes: Mutex::new(HashMap::new()),
            policy: RetryPolicy::default(),
        })
    }

    /// Enqueue the notifications `events` of `app` send to its subscribed sinks. Returns at once:
    /// delivery runs in the background.
    pub async fn notify(
        self: &Arc<Self>,
        app: &Application,
        events_sent: &[(EventReason, String)],
        redactor: &Redactor,
        identity: (&ImpersonatedClients, Option<&str>),
    ) {
        let subscribed = events_sent
            .iter()
            .filter_map(|(r, _)| notification_event(*r))
            .any(|e| app.spec.notifications.iter().any(|s| s.events.contains(&e)));
        let Some(namespace) = app.namespace().filter(|_| subscribed) else { return };
        let context = match self.context(app, &namespace).await {
            Ok(context) => context,
            Err(err) => {
                tracing::warn!(application = %app.name_any(), %namespace, %err,
                    "cannot read the Application for its notifications");
                return;
            }
        };
        let sinks = resolve_sinks(app, &namespace, &self.client, identity).await;
        for (sink, notification) in notifications_for(app, events_sent, &context, redactor) {
            match sinks.get(&sink) {
                Some(Ok(target)) => {
                    self.enqueue(app, &namespace, &sink, target, notification).await
                }
                Some(Err(problem)) => tracing::warn!(application = %app.name_any(), %namespace,
                    %sink, %problem, "notification not sent: the sink is invalid"),
                None => {}
            }
        }
    }

    /// The commits and Revision names of `app` as just written.
    async fn context(
        &self,
        app: &Application,
        namespace: &str,
    ) -> Result<NotificationContext, kube::Error> {
        let fresh = Api::<Application>::namespaced(self.client.clone(), namespace)
            .get(&app.name_any())
            .await?;
        let status = fresh.status.unwrap_or_default();
        let selector = format!("{}={}", keys::APPLICATION, app.name_any());
        let revisions = Api::<Revision>::namespaced(self.client.clone(), namespace)
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .into_iter()
            .map(|r| (r.spec.source.revision.clone(), r.name_any()))
            .collect();
        Ok(NotificationContext {
            application: app.name_any(),
            namespace: namespace.to_owned(),
            desired_commit: status.desired_revision,
            deployed_commit: status.deployed_revision,
            revisions,
            time: k8s_openapi::jiff::Timestamp::now().to_string(),
        })
    }

    async fn enqueue(
        self: &Arc<Self>,
        app: &Application,
        namespace: &str,
        sink: &str,
        target: &SinkTarget,
        notification: Notification,
    ) {
        let Ok(permit) = Arc::clone(&self.queue).try_acquire_owned() else {
            self.metrics.count_notification(target.sink_type, NotificationOutcome::Dropped);
            let message = format!(
                "notification {} to NotificationSink {sink} dropped: the notification queue is \
                 full (--notification-queue-size)",
                notification.event.as_str()
            );
            self.record(app, EventReason::NotificationDropped, &message, target).await;
            return;
        };
        let delivery = Delivery {
            app: app.clone(),
            lane: format!("{namespace}/{sink}"),
            sink: sink.to_owned(),
            target: target.clone(),
            event: notification.event,
            body: body_for(target.sink_type, &notification),
        };
        let notifier = Arc::clone(self);
        tokio::spawn(async move { notifier.deliver(delivery, permit).await });
    }

    async fn deliver(self: Arc<Self>, delivery: Delivery, _permit: OwnedSemaphorePermit) {
        let lane = {
            let mut lanes = self.lanes.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            Arc::clone(lanes.entry(delivery.lane.clone()).or_default())
        };
        let _turn = lane.lock().await;
        let _timer = self.metrics.durations.notification(delivery.target.sink_type);
        let mut attempt = 1;
        loop {
            let outcome = self.attempt(&delivery).await;
            match after_attempt(attempt, outcome, &self.policy) {
                NextStep::Delivered => {
                    self.metrics
                        .count_notification(delivery.target.sink_type, NotificationOutcome::Sent);
                    tracing::info!(application = %delivery.app.name_any(), sink = %delivery.sink,
                        event = delivery.event.as_str(), attempt, "notification delivered");
                    return;
                }
                NextStep::RetryAfter(wait) => {
                    tracing::info!(application = %delivery.app.name_any(), sink = %delivery.sink,
                        event = delivery.event.as_str(), attempt, ?outcome, ?wait,
                        "notification will be retried");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                NextStep::Fail(why) => {
                    self.metrics
                        .count_notification(delivery.target.sink_type, NotificationOutcome::Failed);
                    let message = format!(
                        "notification {} to NotificationSink {} failed: {why}",
                        delivery.event.as_str(),
                        delivery.sink
                    );
                    self.record(
                        &delivery.app,
                        EventReason::NotificationFailed,
                        &message,
                        &delivery.target,
                    )
                    .await;
                    return;
                }
            }
        }
    }

    /// One POST; its outcome without the url.
    async fn attempt(&self, delivery: &Delivery) -> AttemptOutcome {
        let mut request = self
            .http
            .post(&delivery.target.url)
            .header("Content-Type", "application/json")
            .body(delivery.body.clone());
        if let Some(key) = &delivery.target.hmac_key {
            request = request.header(SIGNATURE_HEADER, signature(key, &delivery.body));
        }
        match request.send().await {
            Ok(response) => AttemptOutcome::Answered {
                status: response.status().as_u16(),
                retry_after: response
                    .headers()
                    .get("Retry-After")
                    .and_then(|v| v.to_str().ok())
                    .and_then(parse_retry_after),
            },
            Err(err) if err.is_timeout() => AttemptOutcome::TimedOut,
            Err(_) => AttemptOutcome::ConnectionError,
        }
    }

    /// A Warning Event on `app`, with the sink's url and key masked.
    async fn record(
        &self,
        app: &Application,
        reason: EventReason,
        message: &str,
        target: &SinkTarget,
    ) {
        let mut redactor = Redactor::new().with_secret(&target.url);
        if let Some(key) = &target.hmac_key {
            redactor.add_secret(&String::from_utf8_lossy(key));
        }
        tracing::warn!(application = %app.name_any(), reason = reason.as_str(),
            message = %redactor.redact(message), "notification not delivered");
        let reference = app.object_ref(&());
        let sent = [(reason, message.to_owned())];
        self.recorder.publish(&reference, &sent, &redactor).await;
        self.metrics.count_event(reason);
    }
}

/// One notification on its way to one sink.
struct Delivery {
    app: Application,
    lane: String,
    sink: String,
    target: SinkTarget,
    event: NotificationEvent,
    body: Vec<u8>,
}

/// Each subscribed sink of `app`: the NotificationSink read by the controller, its Secret read
/// as the Application's service account (`identity`: the clients and the service account name),
/// then validated.
pub async fn resolve_sinks(
    app: &Application,
    namespace: &str,
    client: &kube::Client,
    identity: (&ImpersonatedClients, Option<&str>),
) -> ResolvedSinks {
    let mut resolved = ResolvedSinks::new();
    let sinks: Api<NotificationSink> = Api::namespaced(client.clone(), namespace);
    let (clients, service_account) = identity;
    for subscription in &app.spec.notifications {
        let name = &subscription.sink_ref.name;
        if resolved.contains_key(name) {
            continue;
        }
        let verdict = match sinks.get_opt(name).await {
            Err(err) => {
                Err(format!("NotificationSink {name} cannot be read: {}", kube_reason(&err)))
            }
            Ok(sink) => {
                let spec = sink.map(|s| s.spec);
                let secret = match (&spec, service_account) {
                    (None, _) => SecretLookup::Missing,
                    (Some(_), None) => SecretLookup::Unreadable(
                        "no service account: set spec.serviceAccountName".into(),
                    ),
                    (Some(spec), Some(sa)) => {
                        read_secret(clients, namespace, sa, &spec.secret_ref.name).await
                    }
                };
                validate_sink(name, spec.as_ref(), &secret)
            }
        };
        resolved.insert(name.clone(), verdict);
    }
    resolved
}

/// The Secret `name`'s data, read as service account `sa`.
async fn read_secret(
    clients: &ImpersonatedClients,
    namespace: &str,
    sa: &str,
    name: &str,
) -> SecretLookup {
    let client = match clients.for_service_account(namespace, sa) {
        Ok(client) => client,
        Err(err) => return SecretLookup::Unreadable(err.to_string()),
    };
    match Api::<Secret>::namespaced(client, namespace).get_opt(name).await {
        Ok(Some(secret)) => SecretLookup::Found(
            secret.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect(),
        ),
        Ok(None) => SecretLookup::Missing,
        Err(err) => SecretLookup::Unreadable(kube_reason(&err)),
    }
}

/// An API error reduced to its status and reason (its message may quote request data).
fn kube_reason(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => format!("{} {}", status.code, status.reason),
        _ => "the API server could not be reached".to_owned(),
    }
}

/// The `NotificationsReady` condition of `app` (`None` without `spec.notifications`), from its
/// sinks and Secrets read now: every reconcile, so the periodic resync
/// (`--application-resync-interval`) re-evaluates a changed sink or Secret. Each usable url is
/// added to `redactor`.
pub async fn sinks_condition(
    app: &Application,
    namespace: &str,
    client: &kube::Client,
    identity: (&ImpersonatedClients, Option<&str>),
    redactor: &mut Redactor,
) -> Option<kuvryn_sync_core::conditions::NewCondition<'static>> {
    if app.spec.notifications.is_empty() {
        return kuvryn_sync_core::notify::condition(app, &[]);
    }
    let sinks = resolve_sinks(app, namespace, client, identity).await;
    let mut problems = Vec::new();
    for verdict in sinks.values() {
        match verdict {
            Ok(target) => redactor.add_secret(&target.url),
            Err(problem) => problems.push(problem.clone()),
        }
    }
    kuvryn_sync_core::notify::condition(app, &problems)
}
