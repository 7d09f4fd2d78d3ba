//! Notifications end to end: the real controller binary, the sandbox API server, git daemon, and
//! local HTTPS receivers with a test CA the controller trusts through `SSL_CERT_FILE`
//! (`kuvryn_sync_tests::receiver`). Signed webhook bodies once per lifecycle transition across a
//! controller restart, the Slack body, invalid sinks reported without their url, retries after
//! 500s, a dead sink ending in NotificationFailed, and a full queue dropping with
//! NotificationDropped while other Applications sync at normal speed.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kuvryn_sync_api::{Application, NotificationSink, keys};
use kuvryn_sync_tests::application::{DEADLINE, Env, config_map, env};
use kuvryn_sync_tests::cluster::ControllerProcess;
use kuvryn_sync_tests::receiver::{Receiver, Script};
use serde_json::{Value, json};

const HMAC_KEY: &str = "notify-e2e-hmac-key-5d1f";
const IDENTITY: &str = "kuvryn-sync-controller-notify-e2e";

/// Start (or restart) the controller trusting `receiver`'s CA, with extra flags.
fn start_controller(env: &mut Env, receiver: &Receiver, flags: &[&str]) -> Result<()> {
    let mut args = vec!["--default-poll-interval", "1h"];
    args.extend_from_slice(flags);
    let bundle = receiver.ca_bundle();
    let bundle = bundle.to_str().context("bundle path")?;
    env.controller = Some(ControllerProcess::start_logged_as(
        &env.cluster,
        IDENTITY,
        &args,
        &[("SSL_CERT_FILE", bundle)],
        &env.log_path(),
    )?);
    Ok(())
}

/// A Secret `name` with `data`, and a NotificationSink `sink` of `sink_type` pointing at it.
async fn create_sink(env: &Env, sink: &str, sink_type: &str, secret: Option<Value>) -> Result<()> {
    let secret_name = format!("{sink}-secret");
    if let Some(data) = secret {
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret_name}, "stringData": data,
        }))?;
        env.api::<Secret>().create(&PostParams::default(), &secret).await?;
    }
    let object: NotificationSink = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "NotificationSink",
        "metadata": {"name": sink},
        "spec": {"type": sink_type, "secretRef": {"name": secret_name}},
    }))?;
    env.api::<NotificationSink>().create(&PostParams::default(), &object).await?;
    Ok(())
}

/// One commit with a ConfigMap at `apps/<name>/cm.yaml` for each of `names`, so each Application
/// owns its own object.
async fn push_apps(env: &Env, names: &[&str]) -> Result<String> {
    let files: Vec<(String, String)> = names
        .iter()
        .map(|name| (format!("apps/{name}/cm.yaml"), config_map(name, "1", json!({}))))
        .collect();
    let refs: Vec<(&str, String)> = files.iter().map(|(p, c)| (p.as_str(), c.clone())).collect();
    env.push(&refs, "one ConfigMap per Application").await
}

fn subscribe(sink: &str, events: &[&str]) -> Value {
    json!({"notifications": [{"sinkRef": {"name": sink}, "events": events}]})
}

/// The `NotificationsReady` condition's (status, reason, message).
fn notifications_ready(app: &Application) -> Option<(String, String, String)> {
    let conditions = &app.status.as_ref()?.conditions;
    let c = conditions.iter().find(|c| c.type_ == "NotificationsReady")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// `text` appears nowhere the controller writes: the Application's status, its Events, the log.
async fn assert_absent_everywhere(env: &Env, app: &str, text: &str) -> Result<()> {
    let status = serde_json::to_string(&env.api::<Application>().get(app).await?.status)?;
    ensure!(!status.contains(text), "{text} in the status of {app}: {status}");
    let events = format!("{:?}", env.events_for(app).await?);
    ensure!(!events.contains(text), "{text} in the Events of {app}: {events}");
    let log = env.controller_log();
    ensure!(!log.contains(text), "{text} in the controller log");
    Ok(())
}

/// A manual Application notifies AwaitingApproval; made automatic, Healthy; the controller is
/// restarted and reconciles the unchanged Application again without notifying; a commit with an
/// invalid hook then notifies Failed. Every body is signed with the sink's key and carries the
/// documented fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_gets_one_signed_notification_per_transition_across_a_restart() -> Result<()> {
    let mut env = env("notify-hook", false).await?;
    let receiver = Receiver::start(Script::Accept).await?;
    start_controller(&mut env, &receiver, &[])?;
    create_sink(&env, "audit", "webhook", Some(json!({"url": receiver.url, "hmacKey": HMAC_KEY})))
        .await?;
    let commit =
        env.push(&[("apps/web/cm.yaml", config_map("settings", "1", json!({})))], "one").await?;
    let mut overrides = subscribe("audit", &["AwaitingApproval", "Healthy", "Failed"]);
    overrides["sync"] = json!({"automatic": false});
    env.create_app("web", "apps/web", overrides).await?;

    let waiting = receiver.wait_count(1, DEADLINE).await?;
    let body = waiting[0].json();
    assert_eq!(body["event"], "AwaitingApproval", "{body}");
    assert_eq!(body["application"], "web");
    assert_eq!(body["namespace"], env.namespace.as_str());
    assert_eq!(body["commit"], commit.as_str());
    assert!(body["revision"].as_str().is_some_and(|r| r.starts_with("web-")), "{body}");
    assert!(body["time"].as_str().is_some_and(|t| !t.is_empty()), "{body}");
    let app = env
        .wait_app("web", "NotificationsReady=True", |app| {
            notifications_ready(app).is_some_and(|(s, r, _)| s == "True" && r == "SinksReady")
        })
        .await?;
    assert!(notifications_ready(&app).is_some());

    let automatic = json!({"spec": {"sync": {"automatic": true}}});
    env.api::<Application>()
        .patch("web", &PatchParams::default(), &Patch::Merge(&automatic))
        .await?;
    env.wait_synced("web", &commit).await?;
    receiver.wait_count(2, DEADLINE).await?;
    assert_eq!(receiver.with("event", "Healthy").len(), 1);

    // Restart; a spec change makes the new controller reconcile the unchanged Healthy state.
    env.controller.as_mut().context("controller")?.terminate(DEADLINE).await?;
    start_controller(&mut env, &receiver, &[])?;
    let limit = json!({"spec": {"history": {"limit": 7}}});
    let patched = env
        .api::<Application>()
        .patch("web", &PatchParams::default(), &Patch::Merge(&limit))
        .await?;
    let generation = patched.metadata.generation;
    env.wait_app("web", "reconciled at the new generation", |app| {
        app.status.as_ref().is_some_and(|s| {
            s.conditions.iter().any(|c| c.type_ == "Ready" && c.observed_generation == generation)
        })
    })
    .await?;

    let hooked = config_map("settings", "2", json!({ keys::HOOK: "mid-sync" }));
    let bad = env.push(&[("apps/web/cm.yaml", hooked)], "an unknown hook").await?;
    env.wait_failed("web", "ValidationFailure").await?;
    // One Failed per failure Event the decision recorded; RetryBlocked ends a failure already
    // notified and sends nothing more.
    let failed = kuvryn_sync_tests::cluster::wait_for(
        "one Failed notification per failure Event",
        DEADLINE,
        || async {
            let failure_events = env
                .events_for("web")
                .await?
                .into_iter()
                .filter(|(_, reason, _)| reason == "ValidationFailure")
                .count();
            let failed = receiver.with("event", "Failed");
            let done = !failed.is_empty() && failed.len() == failure_events;
            let observed = format!("{failure_events} failure Events, {:?}", receiver.received());
            Ok((done.then_some(failed), observed))
        },
    )
    .await?;
    assert_eq!(failed[0].json()["commit"], bad.as_str());

    let received = receiver.received();
    for request in &received {
        assert!(request.signed_with(HMAC_KEY.as_bytes()), "bad signature: {request:?}");
    }
    assert!(!received[0].signed_with(b"another-key"), "the signature check accepts any key");
    assert_eq!(receiver.with("event", "AwaitingApproval").len(), 1, "{received:?}");
    assert_eq!(receiver.with("event", "Healthy").len(), 1, "{received:?}");
    assert_absent_everywhere(&env, "web", "tokenpath").await?;
    Ok(())
}

/// A Slack sink gets `{"text": …}` naming the Application, the event and the commit, unsigned;
/// an `http://` url and a missing Secret are SinkInvalid, and the url shows nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_body_and_invalid_sinks() -> Result<()> {
    let mut env = env("notify-slack", false).await?;
    let receiver = Receiver::start(Script::Accept).await?;
    start_controller(&mut env, &receiver, &[])?;
    create_sink(&env, "chat", "slack", Some(json!({"url": receiver.url}))).await?;
    let plain = "http://127.0.0.1:9/hook/plaintext-leakcanary";
    create_sink(&env, "plain", "slack", Some(json!({"url": plain}))).await?;
    create_sink(&env, "nosecret", "webhook", None).await?;
    let commit = push_apps(&env, &["web", "plain", "lost"]).await?;
    env.create_app("web", "apps/web", subscribe("chat", &["Healthy"])).await?;
    env.create_app("plain", "apps/plain", subscribe("plain", &["Healthy"])).await?;
    env.create_app("lost", "apps/lost", subscribe("nosecret", &["Healthy"])).await?;

    let received = receiver.wait_count(1, DEADLINE).await?;
    let text = received[0].json()["text"].as_str().unwrap_or_default().to_owned();
    assert!(text.contains("web") && text.contains("Healthy"), "{text}");
    assert!(text.contains(&commit[..12]), "{text}");
    assert_eq!(received[0].signature, None);

    let invalid = |app: &Application| {
        notifications_ready(app).is_some_and(|(s, r, _)| s == "False" && r == "SinkInvalid")
    };
    let app = env.wait_app("plain", "NotificationsReady=False/SinkInvalid", invalid).await?;
    let (_, _, message) = notifications_ready(&app).context("condition")?;
    assert!(message.contains("plain") && message.contains("https://"), "{message}");
    let app = env.wait_app("lost", "NotificationsReady=False/SinkInvalid", invalid).await?;
    let (_, _, message) = notifications_ready(&app).context("condition")?;
    assert!(message.contains("nosecret-secret") && message.contains("does not exist"), "{message}");
    // Still deployed: a bad sink does not stop the rollout.
    env.wait_synced("plain", &commit).await?;
    assert_absent_everywhere(&env, "plain", "leakcanary").await?;
    assert_absent_everywhere(&env, "web", "tokenpath").await?;
    Ok(())
}

/// A sink answering 500 three times gets the notification on the fourth attempt, once; a sink
/// that never answers ends in NotificationFailed after the retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_after_500s_and_fails_on_a_dead_sink() -> Result<()> {
    let mut env = env("notify-retry", false).await?;
    let flaky = Receiver::start(Script::FailFirst(3)).await?;
    let dead = Receiver::start(Script::Stall).await?;
    // Both receivers' CAs: the bundle of one plus the other's CA.
    let mut bundle = std::fs::read_to_string(flaky.ca_bundle())?;
    bundle.push_str(&std::fs::read_to_string(dead.ca_bundle())?);
    std::fs::write(flaky.ca_bundle(), bundle)?;
    start_controller(&mut env, &flaky, &["--notification-timeout", "1s"])?;
    create_sink(&env, "flaky", "webhook", Some(json!({"url": flaky.url, "hmacKey": HMAC_KEY})))
        .await?;
    create_sink(&env, "dead", "webhook", Some(json!({"url": dead.url, "hmacKey": HMAC_KEY})))
        .await?;
    let commit = push_apps(&env, &["web", "gone"]).await?;
    env.create_app("web", "apps/web", subscribe("flaky", &["Healthy"])).await?;
    env.create_app("gone", "apps/gone", subscribe("dead", &["Healthy"])).await?;
    env.wait_synced("web", &commit).await?;

    let received = flaky.wait_count(4, DEADLINE).await?;
    let answers: Vec<Option<u16>> = received.iter().map(|r| r.answered).collect();
    assert_eq!(answers[..3], [Some(500); 3], "{received:?}");
    let delivered = kuvryn_sync_tests::cluster::wait_for("the 200", DEADLINE, || async {
        let ok = flaky.received().iter().filter(|r| r.answered == Some(200)).count();
        Ok(((ok > 0).then_some(ok), format!("{:?}", flaky.received())))
    })
    .await?;
    assert_eq!(delivered, 1);
    assert!(received.iter().all(|r| r.body == received[0].body), "retries change the body");

    let events = env.wait_event("gone", "NotificationFailed").await?;
    let (kind, _, note) =
        events.iter().find(|(_, r, _)| r == "NotificationFailed").context("event")?;
    assert_eq!(kind, "Warning");
    assert!(note.contains("dead") && note.contains("did not answer"), "{note}");
    ensure!(dead.received().len() >= 2, "the dead sink was not retried");
    let web_events = env.events_for("web").await?;
    assert!(!web_events.iter().any(|(_, r, _)| r == "NotificationFailed"), "{web_events:?}");
    assert_absent_everywhere(&env, "gone", "tokenpath").await?;
    Ok(())
}

/// With room for one pending notification and a sink that never answers, a second Application's
/// notification is dropped with NotificationDropped, and an Application without notifications
/// still syncs promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_drops_and_other_applications_carry_on() -> Result<()> {
    let mut env = env("notify-queue", false).await?;
    let stalled = Receiver::start(Script::Stall).await?;
    start_controller(&mut env, &stalled, &["--notification-queue-size", "1"])?;
    create_sink(&env, "stuck", "webhook", Some(json!({"url": stalled.url, "hmacKey": HMAC_KEY})))
        .await?;
    let commit = push_apps(&env, &["first", "second", "other"]).await?;
    env.create_app("first", "apps/first", subscribe("stuck", &["Healthy"])).await?;
    env.wait_synced("first", &commit).await?;
    stalled.wait_count(1, DEADLINE).await?;
    env.create_app("second", "apps/second", subscribe("stuck", &["Healthy"])).await?;
    let events = env.wait_event("second", "NotificationDropped").await?;
    let dropped: Vec<_> = events.iter().filter(|(_, r, _)| r == "NotificationDropped").collect();
    assert_eq!(dropped.len(), 1, "{events:?}");
    assert!(dropped[0].2.contains("queue is full"), "{dropped:?}");

    let start = Instant::now();
    env.create_app("other", "apps/other", json!({})).await?;
    env.wait_synced("other", &commit).await?;
    let took = start.elapsed();
    assert!(took < Duration::from_secs(20), "a stalled sink slowed another sync: {took:?}");
    assert_absent_everywhere(&env, "second", "tokenpath").await?;
    Ok(())
}
