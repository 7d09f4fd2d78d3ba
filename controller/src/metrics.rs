//! The state gauges: how many Applications are in each sync state, health state and Ready
//! status/reason, how many Repositories in each Ready status/reason, how many Applications are
//! suspended, and how many have a spec the controller has not processed yet (the backlog).
//!
//! Computed at scrape time from reflector stores of Applications and Repositories, so they are
//! never stale and cost nothing between scrapes. The stores are filled only while this replica
//! leads (see `main.rs`): a standby reports zeros, so a `sum` over replicas counts each object
//! once. Every label is a closed set of the API's names; a Ready reason outside them (an older
//! controller's) is counted as `Other`. Never an object's name.

use std::collections::BTreeMap;
use std::str::FromStr;

use kube::runtime::reflector::Store;
use kuvryn_sync_api::{
    Application, ConditionReason, FailureReason, HealthState, Repository, SyncState,
};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use strum::IntoEnumIterator;

/// `kuvryn_sync_applications_by_sync_state{state}`.
pub const BY_SYNC_STATE: &str = "kuvryn_sync_applications_by_sync_state";
/// `kuvryn_sync_applications_by_health{state}`.
pub const BY_HEALTH: &str = "kuvryn_sync_applications_by_health";
/// `kuvryn_sync_applications_by_ready{status, reason}`.
pub const APPS_BY_READY: &str = "kuvryn_sync_applications_by_ready";
/// `kuvryn_sync_applications_suspended`.
pub const SUSPENDED: &str = "kuvryn_sync_applications_suspended";
/// `kuvryn_sync_applications_unobserved`.
pub const UNOBSERVED: &str = "kuvryn_sync_applications_unobserved";
/// `kuvryn_sync_repositories_by_ready{status, reason}`.
pub const REPOS_BY_READY: &str = "kuvryn_sync_repositories_by_ready";

/// `state`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, Ord, PartialOrd, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

/// `status` and `reason` of a Ready condition.
#[derive(Clone, Debug, Hash, PartialEq, Eq, Ord, PartialOrd, EncodeLabelSet)]
pub struct ReadyLabels {
    /// True, False or Unknown (Unknown also when there is no Ready condition yet).
    pub status: String,
    /// A ConditionReason or FailureReason name, `None` without a condition, else `Other`.
    pub reason: String,
}

/// The counts behind the gauges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub sync: BTreeMap<String, i64>,
    pub health: BTreeMap<String, i64>,
    pub ready: BTreeMap<(String, String), i64>,
    pub suspended: i64,
    pub unobserved: i64,
}

/// A Ready condition's labels, from a closed set.
pub fn ready_labels(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> (String, String) {
    let Some(ready) = conditions.iter().find(|c| c.type_ == "Ready") else {
        return ("Unknown".into(), "None".into());
    };
    let status = match ready.status.as_str() {
        "True" | "False" => ready.status.clone(),
        _ => "Unknown".into(),
    };
    let known = ConditionReason::from_str(&ready.reason)
        .map(|r| r.as_str())
        .or_else(|_| FailureReason::from_str(&ready.reason).map(|r| r.as_str()));
    (status, known.unwrap_or("Other").to_owned())
}

/// Count `apps` by state; every sync and health state is present, at zero when unused.
pub fn application_counts<'a>(apps: impl IntoIterator<Item = &'a Application>) -> Counts {
    let mut counts = Counts::default();
    for state in SyncState::iter() {
        counts.sync.insert(state.as_str().to_owned(), 0);
    }
    for state in HealthState::iter() {
        counts.health.insert(state.as_str().to_owned(), 0);
    }
    for app in apps {
        let status = app.status.clone().unwrap_or_default();
        *counts.sync.entry(status.sync.state.as_str().to_owned()).or_default() += 1;
        *counts.health.entry(status.health.state.as_str().to_owned()).or_default() += 1;
        *counts.ready.entry(ready_labels(&status.conditions)).or_default() += 1;
        counts.suspended += i64::from(app.spec.suspend);
        let behind = match (app.metadata.generation, status.observed_generation) {
            (Some(generation), Some(observed)) => observed < generation,
            (Some(_), None) => true,
            _ => false,
        };
        counts.unobserved += i64::from(behind);
    }
    counts
}

/// Count `repos` by Ready status and reason.
pub fn repository_counts<'a>(
    repos: impl IntoIterator<Item = &'a Repository>,
) -> BTreeMap<(String, String), i64> {
    let mut counts = BTreeMap::new();
    for repo in repos {
        let conditions = repo.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
        *counts.entry(ready_labels(conditions)).or_default() += 1;
    }
    counts
}

/// The collector registered with the ops registry.
#[derive(Clone)]
pub struct StateGauges {
    pub applications: Store<Application>,
    pub repositories: Store<Repository>,
}

impl std::fmt::Debug for StateGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateGauges").finish_non_exhaustive()
    }
}

fn encode_family<L>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (L, i64)>,
) -> Result<(), std::fmt::Error>
where
    L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug,
{
    let family = Family::<L, Gauge>::default();
    for (labels, value) in values {
        family.get_or_create(&labels).set(value);
    }
    let metric = encoder.encode_descriptor(name, help, None, family.metric_type())?;
    family.encode(metric)
}

fn encode_single(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: i64,
) -> Result<(), std::fmt::Error> {
    let gauge = Gauge::<i64>::default();
    gauge.set(value);
    let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
    gauge.encode(metric)
}

fn ready_pairs(counts: BTreeMap<(String, String), i64>) -> Vec<(ReadyLabels, i64)> {
    counts.into_iter().map(|((status, reason), n)| (ReadyLabels { status, reason }, n)).collect()
}

impl Collector for StateGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let apps = self.applications.state();
        let counts = application_counts(apps.iter().map(AsRef::as_ref));
        let states = |map: BTreeMap<String, i64>| {
            map.into_iter().map(|(state, n)| (StateLabels { state }, n))
        };
        encode_family(
            &mut encoder,
            BY_SYNC_STATE,
            "Applications by status.sync.state",
            states(counts.sync),
        )?;
        encode_family(
            &mut encoder,
            BY_HEALTH,
            "Applications by status.health.state",
            states(counts.health),
        )?;
        encode_family(
            &mut encoder,
            APPS_BY_READY,
            "Applications by the status and reason of their Ready condition",
            ready_pairs(counts.ready),
        )?;
        encode_single(
            &mut encoder,
            SUSPENDED,
            "Applications with spec.suspend set",
            counts.suspended,
        )?;
        encode_single(
            &mut encoder,
            UNOBSERVED,
            "Applications whose latest spec (metadata.generation) the controller has not processed yet: its backlog",
            counts.unobserved,
        )?;
        let repos = self.repositories.state();
        let repo_counts = repository_counts(repos.iter().map(AsRef::as_ref));
        encode_family(
            &mut encoder,
            REPOS_BY_READY,
            "Repositories by the status and reason of their Ready condition",
            ready_pairs(repo_counts),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(status: serde_json::Value, generation: i64, suspend: bool) -> Application {
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "web", "namespace": "team-a", "generation": generation},
            "spec": {"source": {"repositoryRef": {"name": "apps"}, "render": {"type": "yaml"}},
                     "destination": {"namespace": "team-a"}, "suspend": suspend},
            "status": status,
        }))
        .expect("application")
    }

    fn ready(status: &str, reason: &str) -> serde_json::Value {
        json!([{"type": "Ready", "status": status, "reason": reason, "message": "",
                "lastTransitionTime": "2026-12-01T10:00:00Z"}])
    }

    #[test]
    fn applications_are_counted_by_closed_sets_only() {
        let apps = [
            app(
                json!({"sync": {"state": "Synced"}, "health": {"state": "Healthy"},
                       "observedGeneration": 2, "conditions": ready("True", "Healthy")}),
                2,
                false,
            ),
            app(
                json!({"sync": {"state": "OutOfSync"}, "health": {"state": "Degraded"},
                       "observedGeneration": 1, "conditions": ready("False", "HealthFailure")}),
                2,
                true,
            ),
            app(json!({"conditions": ready("False", "SomethingNew")}), 1, false),
        ];
        let counts = application_counts(&apps);
        assert_eq!(counts.sync["Synced"], 1);
        assert_eq!(counts.sync["OutOfSync"], 1);
        assert_eq!(counts.sync["Applying"], 0, "every state is present");
        assert_eq!(counts.health["Degraded"], 1);
        assert_eq!(counts.ready[&("True".into(), "Healthy".into())], 1);
        assert_eq!(counts.ready[&("False".into(), "HealthFailure".into())], 1);
        assert_eq!(
            counts.ready[&("False".into(), "Other".into())],
            1,
            "an unknown reason is Other"
        );
        assert_eq!(counts.suspended, 1);
        assert_eq!(counts.unobserved, 2, "generation 2 observed 1, and never observed");
    }

    #[test]
    fn the_collector_writes_every_gauge() {
        let (apps, mut writer) = kube::runtime::reflector::store::<Application>();
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(app(
            json!({"sync": {"state": "Synced"}, "conditions": ready("True", "Healthy")}),
            1,
            false,
        )));
        let (repositories, _) = kube::runtime::reflector::store::<Repository>();
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(StateGauges { applications: apps, repositories }));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        for line in [
            r#"kuvryn_sync_applications_by_sync_state{state="Synced"} 1"#,
            r#"kuvryn_sync_applications_by_sync_state{state="Drifted"} 0"#,
            r#"kuvryn_sync_applications_by_health{state="Unknown"} 1"#,
            r#"kuvryn_sync_applications_by_ready{status="True",reason="Healthy"} 1"#,
            "kuvryn_sync_applications_suspended 0",
            "# TYPE kuvryn_sync_repositories_by_ready gauge",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("web"), "no object names: {text}");
    }
}
