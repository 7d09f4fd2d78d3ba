//! Events as the kubelet and the controllers record them: core/v1 Events named
//! `<object>.<hex nanoseconds>` with `count`, `firstTimestamp`/`lastTimestamp`, `source` and
//! `reportingComponent` (<https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/>).

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One event a decision wants recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSpec {
    pub regarding: ObjectReference,
    pub type_: EventType,
    pub reason: String,
    pub message: String,
    /// `kubelet`, `default-scheduler`, `deployment-controller`, …
    pub component: String,
    /// The node for kubelet events.
    pub host: Option<String>,
    /// Emitted on every pass while the condition lasts (not on a transition): repeats within
    /// [`THROTTLE`] are dropped instead of counted.
    pub throttled: bool,
}

/// How often a throttled event is counted again.
pub const THROTTLE: std::time::Duration = std::time::Duration::from_secs(10);

impl EventSpec {
    pub fn new(
        regarding: ObjectReference,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
        component: &str,
    ) -> EventSpec {
        EventSpec {
            regarding,
            type_,
            reason: reason.to_string(),
            message: message.into(),
            component: component.to_string(),
            host: None,
            throttled: false,
        }
    }

    pub fn throttled(mut self) -> EventSpec {
        self.throttled = true;
        self
    }

    pub fn on_host(mut self, host: Option<&str>) -> EventSpec {
        self.host = host.map(str::to_string);
        self
    }

    /// The key under which repeats are counted (the event correlator's aggregation key).
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{}/{}/{}/{}",
            self.regarding.uid.as_deref().unwrap_or_default(),
            self.regarding.field_path.as_deref().unwrap_or_default(),
            self.type_.as_str(),
            self.reason,
            self.message,
            self.component
        )
    }

    /// The core/v1 Event for a first occurrence; `seq` keeps names unique within a nanosecond.
    pub fn to_event(&self, now: Timestamp, seq: u64) -> Event {
        let name = self.regarding.name.as_deref().unwrap_or("unknown");
        let ns = self.regarding.namespace.clone().unwrap_or_else(|| "default".to_string());
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", now.as_nanosecond() as u128 + u128::from(seq))),
                namespace: Some(ns),
                ..Default::default()
            },
            involved_object: self.regarding.clone(),
            reason: Some(self.reason.clone()),
            message: Some(self.message.clone()),
            type_: Some(self.type_.as_str().to_string()),
            source: Some(EventSource {
                component: Some(self.component.clone()),
                host: self.host.clone(),
            }),
            count: Some(1),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            reporting_component: Some(self.component.clone()),
            reporting_instance: Some(self.host.clone().unwrap_or_default()),
            ..Default::default()
        }
    }
}

/// An `ObjectReference` to `obj` (optionally to one of its containers, `spec.containers{name}`).
pub fn reference<K: Resource<DynamicType = ()>>(
    obj: &K,
    field_path: Option<String>,
) -> ObjectReference {
    let m = obj.meta();
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        field_path,
    }
}
