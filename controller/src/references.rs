//! Changes of the Secrets and ConfigMaps Applications read by name — their notification sinks'
//! Secrets, `valuesFrom` ConfigMaps and Secrets, the decryption-key Secret — wake those
//! Applications within one poll interval instead of at the resync.
//!
//! Polled, not watched, on purpose: a watch of Secrets needs `list` and `watch` on every Secret
//! of the cluster, and the controller's RBAC grants only `get` (it cannot enumerate Secrets; see
//! the chart's controller ClusterRole). So every interval the controller reads the metadata of
//! each object some Application names — each distinct object once, however many Applications
//! name it — and requeues the Applications naming one whose `resourceVersion` moved, that
//! appeared or that went away. An object the controller may not read is skipped (the resync
//! still covers it).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kuvryn_sync_api::{Application, NotificationSink, ValuesSourceKind};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How often the objects are polled: a change is seen within this long.
pub const POLL_EVERY: Duration = Duration::from_secs(5);

/// A ConfigMap or Secret, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Named {
    Secret { namespace: String, name: String },
    ConfigMap { namespace: String, name: String },
}

/// Every object the Applications read by name, with the Applications that read it.
pub fn referenced(
    applications: &[Arc<Application>],
    sinks: &[Arc<NotificationSink>],
) -> BTreeMap<Named, HashSet<ObjectRef<Application>>> {
    let mut out: BTreeMap<Named, HashSet<ObjectRef<Application>>> = BTreeMap::new();
    for app in applications {
        let Some(namespace) = app.namespace() else { continue };
        let me = ObjectRef::from_obj(app.as_ref());
        let secret = |name: &str| Named::Secret { namespace: namespace.clone(), name: name.into() };
        let mut names = Vec::new();
        if let Some(decryption) = &app.spec.decryption {
            names.push(secret(&decryption.secret_ref.name));
        }
        for values in app.spec.source.render.helm.iter().flat_map(|h| &h.values_from) {
            names.push(match values.kind {
                ValuesSourceKind::Secret => secret(&values.name),
                ValuesSourceKind::ConfigMap => {
                    Named::ConfigMap { namespace: namespace.clone(), name: values.name.clone() }
                }
            });
        }
        for subscription in &app.spec.notifications {
            let sink = sinks.iter().find(|s| {
                s.namespace().as_deref() == Some(namespace.as_str())
                    && s.name_any() == subscription.sink_ref.name
            });
            if let Some(sink) = sink {
                names.push(secret(&sink.spec.secret_ref.name));
            }
        }
        for name in names {
            out.entry(name).or_default().insert(me.clone());
        }
    }
    out
}

/// What a poll found of one object: its `resourceVersion`, `None` when absent.
type Seen = Option<String>;

/// The Applications to requeue: those naming an object whose version changed since the last
/// poll (an object seen for the first time wakes nobody: the Application read it already).
pub fn changed(
    before: &BTreeMap<Named, Seen>,
    now: &BTreeMap<Named, Seen>,
    readers: &BTreeMap<Named, HashSet<ObjectRef<Application>>>,
) -> HashSet<ObjectRef<Application>> {
    now.iter()
        .filter(|(named, version)| before.get(*named).is_some_and(|old| old != *version))
        .flat_map(|(named, _)| readers.get(named).into_iter().flatten().cloned())
        .collect()
}

/// Poll every `interval` until `stop`; requeues go to `triggers`.
pub async fn poll(
    client: kube::Client,
    applications: Store<Application>,
    sinks: Store<NotificationSink>,
    triggers: mpsc::Sender<ObjectRef<Application>>,
    interval: Duration,
    stop: CancellationToken,
) {
    let mut seen: BTreeMap<Named, Seen> = BTreeMap::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        let readers = referenced(&applications.state(), &sinks.state());
        let mut now = BTreeMap::new();
        for named in readers.keys() {
            if let Some(version) = version_of(&client, named).await {
                now.insert(named.clone(), version);
            }
        }
        for app in changed(&seen, &now, &readers) {
            tracing::debug!(application = %app, "an object the Application reads changed");
            // A full queue drops the request: the resync covers it.
            let _ = triggers.try_send(app);
        }
        seen = now;
    }
}

/// The object's `resourceVersion` (`Some(None)` when it does not exist), or `None` when it
/// could not be read.
async fn version_of(client: &kube::Client, named: &Named) -> Option<Seen> {
    let found = match named {
        Named::Secret { namespace, name } => Api::<Secret>::namespaced(client.clone(), namespace)
            .get_metadata_opt(name)
            .await
            .map(|found| found.and_then(|meta| meta.metadata.resource_version)),
        Named::ConfigMap { namespace, name } => {
            Api::<ConfigMap>::namespaced(client.clone(), namespace)
                .get_metadata_opt(name)
                .await
                .map(|found| found.and_then(|meta| meta.metadata.resource_version))
        }
    };
    match found {
        Ok(version) => Some(version),
        Err(err) => {
            tracing::debug!(?named, %err, "cannot read an object Applications name");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(name: &str, spec: serde_json::Value) -> Arc<Application> {
        let mut spec_json = json!({
            "source": {"repositoryRef": {"name": "apps"}, "path": "x", "render": {"type": "yaml"}},
            "destination": {"namespace": "team"},
        });
        if let (Some(base), Some(extra)) = (spec_json.as_object_mut(), spec.as_object()) {
            for (key, value) in extra {
                if key == "render" {
                    base["source"]["render"] = value.clone();
                } else {
                    base.insert(key.clone(), value.clone());
                }
            }
        }
        let mut app = Application::new(name, serde_json::from_value(spec_json).expect("spec"));
        app.metadata.namespace = Some("team".into());
        Arc::new(app)
    }

    fn sink(name: &str, namespace: &str, secret: &str) -> Arc<NotificationSink> {
        let mut sink = NotificationSink::new(
            name,
            serde_json::from_value(json!({"type": "webhook", "secretRef": {"name": secret}}))
                .expect("sink"),
        );
        sink.metadata.namespace = Some(namespace.into());
        Arc::new(sink)
    }

    fn secret(name: &str) -> Named {
        Named::Secret { namespace: "team".into(), name: name.into() }
    }

    fn reference(name: &str) -> ObjectRef<Application> {
        ObjectRef::new(name).within("team")
    }

    #[test]
    fn every_object_read_by_name_is_polled_once_with_its_readers() {
        let apps = [
            app("plain", json!({})),
            app(
                "helm",
                json!({"render": {"type": "helm", "helm": {"valuesFrom": [
                {"kind": "ConfigMap", "name": "values"}, {"kind": "Secret", "name": "db"}]}}}),
            ),
            app("sops", json!({"decryption": {"provider": "sops", "secretRef": {"name": "age"}}})),
            app(
                "notified",
                json!({"notifications": [
                {"sinkRef": {"name": "ops"}, "events": ["Failed"]},
                {"sinkRef": {"name": "missing"}, "events": ["Failed"]}]}),
            ),
            app(
                "shares",
                json!({"decryption": {"provider": "sops", "secretRef": {"name": "age"}}}),
            ),
        ];
        // A sink of the same name in another namespace is not this one.
        let sinks = [sink("ops", "team", "ops-url"), sink("ops", "other", "not-read")];
        let found = referenced(&apps, &sinks);
        let expected: BTreeMap<Named, HashSet<ObjectRef<Application>>> = [
            (secret("age"), [reference("sops"), reference("shares")].into()),
            (secret("db"), [reference("helm")].into()),
            (secret("ops-url"), [reference("notified")].into()),
            (
                Named::ConfigMap { namespace: "team".into(), name: "values".into() },
                [reference("helm")].into(),
            ),
        ]
        .into();
        assert_eq!(found, expected);
    }

    #[test]
    fn only_a_version_that_moved_wakes_its_readers() {
        let readers: BTreeMap<Named, HashSet<ObjectRef<Application>>> = [
            (secret("a"), [reference("one")].into()),
            (secret("b"), [reference("two")].into()),
            (secret("c"), [reference("three")].into()),
            (secret("d"), [reference("four")].into()),
        ]
        .into();
        let before: BTreeMap<Named, Seen> =
            [(secret("a"), Some("1".into())), (secret("b"), Some("5".into())), (secret("c"), None)]
                .into();
        let now: BTreeMap<Named, Seen> = [
            (secret("a"), Some("2".into())), // changed
            (secret("b"), None),             // deleted
            (secret("c"), Some("7".into())), // created
            (secret("d"), Some("9".into())), // first seen: already read
        ]
        .into();
        let woken = changed(&before, &now, &readers);
        assert_eq!(woken, [reference("one"), reference("two"), reference("three")].into());
        assert!(changed(&now, &now, &readers).is_empty(), "nothing moved, nobody woken");
    }
}
