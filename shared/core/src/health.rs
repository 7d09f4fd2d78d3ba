//! The health of one live object, as the controller and the CLI both compute it: a hook object by
//! the hook rule (a hook Job is Healthy only once Complete, [`crate::rollout::hook_health`]);
//! any other object by the HealthCheck rules for its kind first ([`crate::health_rules`]), then
//! the Kubernetes status conventions ([`crate::kstatus`]). A rule that errors leaves the object
//! Progressing with the rule's message, never falls through to kstatus.

pub mod diagnosis;
pub mod health_rules;
pub mod kstatus;

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kuvryn_sync_api::{HealthState, keys};
use serde_json::Value;

use crate::desired::Stage;
use crate::health_rules::{InvalidRule, RuleOutcome, RuleSet};
use crate::rollout;

/// The health of a live object of `stage`: the HealthCheck rules for its kind, then kstatus.
pub fn object_health(
    rules: &RuleSet,
    stage: Stage,
    live: &Value,
    now: &Time,
) -> (HealthState, String) {
    if stage != Stage::Main {
        return rollout::hook_health(live, now);
    }
    match rules.evaluate(live) {
        RuleOutcome::Matched { state, message } => (state, message),
        RuleOutcome::Failed { message } => (HealthState::Progressing, message),
        RuleOutcome::NoMatch => kstatus::health_at(live, now),
    }
}

/// The stage a live object was applied in, read from its `sync.kuvryn.io/hook` annotation (for
/// callers that see only the live object, such as `ksync tree`): `pre-sync` and `post-sync` are
/// hooks, anything else is [`Stage::Main`].
pub fn live_stage(live: &Value) -> Stage {
    match live["metadata"]["annotations"][keys::HOOK].as_str() {
        Some(keys::HOOK_PRE_SYNC) => Stage::PreSync,
        Some(keys::HOOK_POST_SYNC) => Stage::PostSync,
        _ => Stage::Main,
    }
}

/// The health of each desired object from its `live` state (by [`object_health`]); an object not
/// created yet is Progressing.
pub fn desired_health(
    rules: &RuleSet,
    objects: &[crate::desired::DesiredObject],
    live: &std::collections::BTreeMap<crate::desired::ObjectKey, Value>,
    now: &Time,
) -> Vec<rollout::ObjectHealth> {
    objects
        .iter()
        .map(|object| {
            let (state, message) = match live.get(&object.key) {
                Some(live) => object_health(rules, object.stage, live, now),
                None => (HealthState::Progressing, "not created yet".to_owned()),
            };
            rollout::ObjectHealth {
                key: object.key.clone(),
                api_version: object.object["apiVersion"].as_str().unwrap_or_default().to_owned(),
                state,
                message,
            }
        })
        .collect()
}

/// The invalid rules of HealthChecks for `kinds` (group, kind), each kind once.
pub fn invalid_rules_for<'a>(
    rules: &RuleSet,
    kinds: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<InvalidRule> {
    let mut seen = BTreeSet::new();
    kinds
        .into_iter()
        .filter(|kind| seen.insert(*kind))
        .flat_map(|(group, kind)| rules.invalid_rules(group, kind))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kuvryn_sync_api::HealthCheckSpec;
    use serde_json::json;

    fn now() -> Time {
        Time("2026-01-01T00:00:00Z".parse().expect("a time"))
    }

    fn check(kind: &str, rules: Value) -> HealthCheckSpec {
        serde_json::from_value(json!({"group": "example.com", "kind": kind, "rules": rules}))
            .expect("a valid HealthCheck")
    }

    fn widget(phase: &str) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "w", "generation": 1},
               "status": {"phase": phase, "observedGeneration": 1}})
    }

    fn job(condition: Option<&str>) -> Value {
        let conditions: Vec<Value> = condition
            .map(|c| json!({"type": c, "status": "True", "message": "exit 1"}))
            .into_iter()
            .collect();
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate"},
               "status": {"conditions": conditions}})
    }

    fn deployment(available: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "generation": 2},
               "spec": {"replicas": 1},
               "status": {"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1,
                          "readyReplicas": 1, "availableReplicas": 1,
                          "conditions": [{"type": "Available", "status": available}]}})
    }

    /// Which rule decides: hooks by the hook rule whatever the HealthChecks say, a kind with
    /// rules by its rules (an erroring rule is Progressing), every other object by kstatus.
    #[test]
    fn hooks_then_health_checks_then_kstatus() {
        let widgets = check(
            "Widget",
            json!([{"expression": "object.status.phase == 'Ready'", "state": "Healthy",
                    "message": "ready"},
                   {"expression": "object.status.phase == 'Broken'", "state": "Degraded"}]),
        );
        let mut jobs = check("Job", json!([{"expression": "true", "state": "Degraded"}]));
        jobs.group = "batch".into();
        let erroring = check(
            "Gadget",
            json!([{"expression": "object.status.missing == 'x'", "state": "Healthy"}]),
        );
        let rules = RuleSet::new([("widgets", &widgets), ("jobs", &jobs), ("erroring", &erroring)]);
        let mut gadget = widget("Ready");
        gadget["kind"] = json!("Gadget");
        let cases: Vec<(&str, Stage, Value, HealthState)> = vec![
            ("a rule matches", Stage::Main, widget("Ready"), HealthState::Healthy),
            ("another rule matches", Stage::Main, widget("Broken"), HealthState::Degraded),
            ("no rule matches: kstatus", Stage::Main, widget("Pending"), HealthState::Healthy),
            ("a rule errors", Stage::Main, gadget, HealthState::Progressing),
            ("no rules for the kind", Stage::Main, deployment("True"), HealthState::Healthy),
            ("kstatus unavailable", Stage::Main, deployment("False"), HealthState::Progressing),
            ("a main Job follows its rules", Stage::Main, job(None), HealthState::Degraded),
            ("a hook Job running", Stage::PreSync, job(None), HealthState::Progressing),
            ("a hook Job complete", Stage::PostSync, job(Some("Complete")), HealthState::Healthy),
            ("a hook Job failed", Stage::PreSync, job(Some("Failed")), HealthState::Degraded),
        ];
        for (what, stage, live, want) in cases {
            let (state, message) = object_health(&rules, stage, &live, &now());
            assert_eq!(state, want, "{what}: {message}");
        }
    }

    #[test]
    fn the_hook_annotation_gives_the_stage_of_a_live_object() {
        let annotated = |value: Value| json!({"metadata": {"annotations": {keys::HOOK: value}}});
        let cases = [
            (annotated(json!("pre-sync")), Stage::PreSync),
            (annotated(json!("post-sync")), Stage::PostSync),
            (annotated(json!("skip")), Stage::Main),
            (annotated(json!(3)), Stage::Main),
            (json!({"metadata": {}}), Stage::Main),
        ];
        for (live, want) in cases {
            assert_eq!(live_stage(&live), want, "{live}");
        }
    }

    #[test]
    fn invalid_rules_are_listed_once_per_kind() {
        let invalid =
            check("Widget", json!([{"expression": "object.status.phase", "state": "Healthy"}]));
        let valid = check("Gadget", json!([{"expression": "true", "state": "Healthy"}]));
        let rules = RuleSet::new([("bad", &invalid), ("good", &valid)]);
        let kinds =
            [("example.com", "Widget"), ("example.com", "Widget"), ("example.com", "Gadget")];
        let found = invalid_rules_for(&rules, kinds);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].health_check, "bad");
        assert!(invalid_rules_for(&rules, [("example.com", "Gadget")]).is_empty());
    }

    #[test]
    fn desired_health_judges_live_objects_and_holds_absent_ones_progressing() {
        use crate::desired::{DesiredObject, GroupKind, ObjectKey};
        let object = |name: &str, body: Value| DesiredObject {
            key: ObjectKey {
                group_kind: GroupKind::new("apps", "Deployment"),
                namespace: Some("team".into()),
                name: name.into(),
            },
            stage: Stage::Main,
            wave: 0,
            object: body,
        };
        let objects = [object("up", deployment("True")), object("absent", deployment("True"))];
        let live = std::collections::BTreeMap::from([(objects[0].key.clone(), deployment("True"))]);
        let health = desired_health(&RuleSet::default(), &objects, &live, &now());
        let states: Vec<_> =
            health.iter().map(|h| (h.key.name.as_str(), h.state, h.message.as_str())).collect();
        assert_eq!(states[1], ("absent", HealthState::Progressing, "not created yet"));
        assert_eq!((states[0].0, states[0].1), ("up", HealthState::Healthy), "{states:?}");
        assert_eq!(health[0].api_version, "apps/v1");
    }
}
