//! Root-cause diagnosis end to end, on the sandbox with simulated workloads: for each failure the
//! simulator produces, the Application's `status.diagnosis` names the right reason and root
//! resource, with the chain from the managed Deployment down to it, within 10 seconds of the
//! first observation; a `Diagnosed` Event is recorded; a Secret value printed in a Pod's Event
//! never reaches the diagnosis; and fixing the cause clears the diagnosis.
//!
//! Pods the API server refuses (a missing ServiceAccount, an exceeded ResourceQuota), a failing
//! pre-sync hook Job and a HealthCheck rule that says Degraded for a custom kind are diagnosed
//! the same way, each within 10 seconds of the failure being observable in the cluster.

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ResourceQuota, Secret, ServiceAccount};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kuvryn_sync_api::{Application, Diagnosis, HealthCheck, keys};
use kuvryn_sync_tests::application::{Env, env_with_workloads};
use kuvryn_sync_tests::cluster::{skip_on_real_cluster, wait_for};
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
    if skip_on_real_cluster(
        "every_simulated_failure_is_diagnosed_to_its_root_and_clears_when_fixed",
        "workload failures of fictional images (pull errors, crash loops, refused Pods)",
    ) {
        return Ok(());
    }
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
    // An Application that depends on the broken one waits, and its diagnosis is the
    // dependency's root cause, reached through the dependency.
    env.create_app(
        "front",
        "apps/missing-config",
        json!({"dependsOn": [{"name": "missing-secret"}]}),
    )
    .await?;
    let through = wait_diagnosis(&env, "front", "MissingSecret").await?;
    let first = through.chain.first().map(|r| (r.kind.as_str(), r.name.as_str()));
    assert_eq!(first, Some(("Application", "missing-secret")), "{through:?}");
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

/// How long a diagnosis may take once its failure is observable in the cluster.
const DIAGNOSIS_DEADLINE: Duration = Duration::from_secs(10);

/// Wait (at most [`DIAGNOSIS_DEADLINE`]) for `app`'s diagnosis entry with `reason`.
async fn diagnosis_within_deadline(env: &Env, app: &str, reason: &str) -> Result<Diagnosis> {
    let api = env.api::<Application>();
    wait_for(&format!("{app}: diagnosis {reason}"), DIAGNOSIS_DEADLINE, || async {
        let found = api.get(app).await?;
        let diagnosis = found.status.map(|s| s.diagnosis).unwrap_or_default();
        let hit = diagnosis.iter().find(|d| d.reason == reason).cloned();
        Ok((hit, format!("{diagnosis:?}")))
    })
    .await
}

/// The message of the `ReplicaFailure=True` condition of the ReplicaSet of Deployment `name`,
/// once the ReplicaSet controller has set it (read as the admin).
async fn wait_replica_failure(env: &Env, name: &str) -> Result<String> {
    let api = Api::<ReplicaSet>::namespaced(env.cluster.client(), &env.namespace);
    wait_for(&format!("ReplicaFailure of {name}'s ReplicaSet"), Duration::from_secs(60), || async {
        let listed = api.list(&ListParams::default().labels(&format!("app={name}"))).await?;
        let message = listed.items.iter().find_map(|rs| {
            let conditions = rs.status.as_ref()?.conditions.as_ref()?;
            let c =
                conditions.iter().find(|c| c.type_ == "ReplicaFailure" && c.status == "True")?;
            c.message.clone()
        });
        Ok((message, format!("{} ReplicaSets", listed.items.len())))
    })
    .await
}

/// The chain runs from the managed `first` (kind, name) to the root, within the bounds.
fn assert_chain(found: &Diagnosis, first: (&str, &str)) {
    let head = found.chain.first().map(|r| (r.kind.as_str(), r.name.as_str()));
    assert_eq!(head, Some(first), "chain {:?}", found.chain);
    assert_eq!(found.chain.last(), Some(&found.resource), "chain ends at the root: {found:?}");
    assert!(found.chain.len() <= 10 && found.message.len() <= 512, "{found:?}");
}

/// A `Diagnosed` Event on the Application names `reason`.
async fn assert_diagnosed_event(env: &Env, app: &str, reason: &str) -> Result<()> {
    let events = env.wait_event(app, "Diagnosed").await?;
    assert!(
        events.iter().any(|(_, r, note)| r == "Diagnosed" && note.contains(reason)),
        "{app}: {events:?}"
    );
    Ok(())
}

async fn assert_cleared(env: &Env, app: &str) -> Result<()> {
    env.wait_ready(app, "True", "Healthy").await?;
    let cleared = env.api::<Application>().get(app).await?;
    assert!(cleared.status.map(|s| s.diagnosis.is_empty()).unwrap_or(false), "diagnosis cleared");
    Ok(())
}

/// The ServiceAccount admission plugin refuses the Pods of a Deployment naming a missing
/// ServiceAccount; the ReplicaSet's `FailedCreate` leads to `MissingServiceAccount` at the
/// ServiceAccount, which clears once it is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_service_account_is_diagnosed_at_the_service_account() -> Result<()> {
    if skip_on_real_cluster(
        "a_missing_service_account_is_diagnosed_at_the_service_account",
        "workload failures of fictional images (pull errors, crash loops, refused Pods)",
    ) {
        return Ok(());
    }
    let env = env_with_workloads("diag-sa", true).await?;
    env.grant("apps", &["deployments", "replicasets"]).await?;
    env.grant("", &["pods", "events"]).await?;
    let manifest =
        deployment("runner", json!({}), json!({"serviceAccountName": "runner-identity"}));
    env.push(&[("apps/runner/deploy.yaml", manifest)], "a Deployment without its identity").await?;
    env.create_app("runner", "apps/runner", json!({"health": {"timeout": "10m"}})).await?;

    let refusal = wait_replica_failure(&env, "runner").await?;
    assert!(refusal.contains("serviceaccount \"runner-identity\" not found"), "{refusal}");
    let found = diagnosis_within_deadline(&env, "runner", "MissingServiceAccount").await?;
    assert_eq!(
        (found.resource.kind.as_str(), found.resource.name.as_str()),
        ("ServiceAccount", "runner-identity"),
        "{found:?}"
    );
    assert_eq!(found.resource.namespace, env.namespace);
    assert_chain(&found, ("Deployment", "runner"));
    assert!(found.chain.iter().any(|r| r.kind == "ReplicaSet"), "{:?}", found.chain);
    assert_diagnosed_event(&env, "runner", "MissingServiceAccount").await?;

    let identity: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "runner-identity"}}))?;
    Api::<ServiceAccount>::namespaced(env.cluster.client(), &env.namespace)
        .create(&PostParams::default(), &identity)
        .await?;
    assert_cleared(&env, "runner").await
}

/// A ResourceQuota allowing one Pod refuses the second replica: `QuotaExceeded` rooted at the
/// quota, cleared when the quota is raised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exceeded_quota_is_diagnosed_at_the_resource_quota() -> Result<()> {
    if skip_on_real_cluster(
        "an_exceeded_quota_is_diagnosed_at_the_resource_quota",
        "workload failures of fictional images (pull errors, crash loops, refused Pods)",
    ) {
        return Ok(());
    }
    let env = env_with_workloads("diag-quota", true).await?;
    env.grant("apps", &["deployments", "replicasets"]).await?;
    env.grant("", &["pods", "events"]).await?;
    let quotas = Api::<ResourceQuota>::namespaced(env.cluster.client(), &env.namespace);
    let quota: ResourceQuota = serde_json::from_value(
        json!({"metadata": {"name": "pod-cap"}, "spec": {"hard": {"pods": "1"}}}),
    )?;
    quotas.create(&PostParams::default(), &quota).await?;
    let mut manifest: Value = serde_json::from_str(&deployment("capped", json!({}), json!({})))?;
    manifest["spec"]["replicas"] = json!(2);
    env.push(&[("apps/capped/deploy.yaml", manifest.to_string())], "two replicas").await?;
    env.create_app("capped", "apps/capped", json!({"health": {"timeout": "10m"}})).await?;

    let refusal = wait_replica_failure(&env, "capped").await?;
    assert!(refusal.contains("exceeded quota: pod-cap"), "{refusal}");
    let found = diagnosis_within_deadline(&env, "capped", "QuotaExceeded").await?;
    assert_eq!(
        (found.resource.kind.as_str(), found.resource.name.as_str()),
        ("ResourceQuota", "pod-cap"),
        "{found:?}"
    );
    assert_chain(&found, ("Deployment", "capped"));
    assert!(found.message.contains("exceeded quota: pod-cap"), "{found:?}");
    assert_diagnosed_event(&env, "capped", "QuotaExceeded").await?;

    let raise = json!({"spec": {"hard": {"pods": "2"}}});
    quotas.patch("pod-cap", &PatchParams::default(), &Patch::Merge(&raise)).await?;
    assert_cleared(&env, "capped").await
}

/// A pre-sync hook Job whose container crashes (`backoffLimit: 0`) fails the rollout with
/// `HookFailed`, and the diagnosis names the Job and its failed Pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_pre_sync_hook_is_diagnosed_at_its_job() -> Result<()> {
    if skip_on_real_cluster(
        "a_failing_pre_sync_hook_is_diagnosed_at_its_job",
        "workload failures of fictional images (pull errors, crash loops, refused Pods)",
    ) {
        return Ok(());
    }
    let env = env_with_workloads("diag-hook", true).await?;
    env.grant("batch", &["jobs"]).await?;
    env.grant("", &["pods", "events"]).await?;
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "migrate", "annotations": {keys::HOOK: keys::HOOK_PRE_SYNC}},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "run", "image": "registry.example/tools:1",
                            "env": [{"name": "KSYNC_SIMULATE", "value": "crash"}]}]}}},
    });
    let settings = serde_json::to_string(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings"}, "data": {"k": "v"}}))?;
    env.push(
        &[("apps/hook/migrate.yaml", job.to_string()), ("apps/hook/settings.yaml", settings)],
        "a crashing migration",
    )
    .await?;
    env.create_app("hook", "apps/hook", json!({})).await?;

    let jobs = Api::<Job>::namespaced(env.cluster.client(), &env.namespace);
    wait_for("the hook Job Failed", Duration::from_secs(60), || async {
        let job = jobs.get_opt("migrate").await?;
        let failed = job
            .as_ref()
            .and_then(|j| j.status.as_ref()?.conditions.clone())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Failed" && c.status == "True"));
        Ok((failed.then_some(()), format!("{:?}", job.and_then(|j| j.status))))
    })
    .await?;
    let found = diagnosis_within_deadline(&env, "hook", "HookFailed").await?;
    let message = env.wait_ready("hook", "False", "HookFailed").await?;
    assert!(message.contains("migrate"), "{message}");
    assert_eq!(
        (found.resource.kind.as_str(), found.resource.name.as_str()),
        ("Job", "migrate"),
        "{found:?}"
    );
    assert_chain(&found, ("Job", "migrate"));
    assert!(found.message.contains("BackoffLimitExceeded"), "{found:?}");
    assert!(found.message.contains("Pod migrate-"), "names the failed Pod: {found:?}");
    assert_diagnosed_event(&env, "hook", "HookFailed").await
}

/// A HealthCheck rule that says Degraded for a custom kind: the diagnosis is rooted at the
/// custom resource and carries the rule's message; it clears when the rule says Healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_rule_saying_degraded_is_diagnosed_at_the_custom_resource() -> Result<()> {
    if skip_on_real_cluster(
        "a_health_check_rule_saying_degraded_is_diagnosed_at_the_custom_resource",
        "workload failures of fictional images (pull errors, crash loops, refused Pods)",
    ) {
        return Ok(());
    }
    let env = env_with_workloads("diag-rule", true).await?;
    let ns = env.namespace.clone();
    let gadgets = env.custom_kind("Gadget", "gadgets").await?;
    let group = gadgets.group.clone();
    let admin = env.cluster.client();
    env.grant("", &["events"]).await?;
    let check: HealthCheck = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "HealthCheck",
        "metadata": {"name": format!("{ns}-gadget")},
        "spec": {"group": group, "kind": "Gadget", "rules": [
            {"expression": "has(object.status) && object.status.phase == 'Jammed'",
             "state": "Degraded", "message": "the gadget is jammed"},
            {"expression": "has(object.status) && object.status.phase == 'Ready'",
             "state": "Healthy", "message": "the gadget is ready"},
            {"expression": "true", "state": "Progressing", "message": "waiting for the gadget"},
        ]},
    }))?;
    Api::<HealthCheck>::all(admin.clone()).create(&PostParams::default(), &check).await?;
    let crd = gadgets.crd.clone();
    let gadget = json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget",
        "metadata": {"name": "cog"}, "spec": {"size": 1}});
    let commit = env
        .push(
            &[
                ("apps/g/crd.yaml", serde_json::to_string(&crd)?),
                ("apps/g/gadget.yaml", serde_json::to_string(&gadget)?),
            ],
            "a Gadget",
        )
        .await?;
    env.create_app("gadgets", "apps/g", json!({"health": {"timeout": "10m"}})).await?;
    env.wait_synced("gadgets", &commit).await?;

    let resource = gadgets.resource.clone();
    let gadgets: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &resource);
    let set_phase = |phase: &'static str| {
        let gadgets = gadgets.clone();
        async move {
            let status = json!({"status": {"phase": phase}});
            gadgets.patch_status("cog", &PatchParams::default(), &Patch::Merge(&status)).await
        }
    };
    // Healthy first (a rollout failing on its first health check stops retrying), then the
    // rule says Degraded.
    set_phase("Ready").await?;
    env.wait_ready("gadgets", "True", "Healthy").await?;
    set_phase("Jammed").await?;
    let found = diagnosis_within_deadline(&env, "gadgets", "Degraded").await?;
    env.wait_ready("gadgets", "False", "Degraded").await?;
    assert_eq!(
        (found.resource.kind.as_str(), found.resource.name.as_str()),
        ("Gadget", "cog"),
        "{found:?}"
    );
    assert_eq!(found.chain, vec![found.resource.clone()], "the custom resource is the root");
    assert!(found.message.contains("the gadget is jammed"), "{found:?}");
    assert_diagnosed_event(&env, "gadgets", "Degraded").await?;

    set_phase("Ready").await?;
    assert_cleared(&env, "gadgets").await
}

/// A Secret value that shows up in a Pod's Event message (as a crashing program may print it)
/// never reaches the diagnosis, the Diagnosed Event or `ksync diagnose`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_value_in_a_pod_event_never_reaches_the_diagnosis() -> Result<()> {
    if skip_on_real_cluster(
        "a_secret_value_in_a_pod_event_never_reaches_the_diagnosis",
        "workload failures of fictional images (pull errors, crash loops, refused Pods)",
    ) {
        return Ok(());
    }
    const CANARY: &str = "canary-9c1e7b-diagnosis";
    let env = env_with_workloads("diagnose-leak", true).await?;
    env.grant("apps", &["deployments", "replicasets"]).await?;
    env.grant("", &["pods", "events"]).await?;
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
                        "stringData": {"password": CANARY}});
    let files = [
        ("apps/leaky/secret.yaml", serde_json::to_string(&secret)?),
        (
            "apps/leaky/deploy.yaml",
            deployment(
                "leaky",
                json!({"env": [{"name": "KSYNC_SIMULATE", "value": "unready"}],
                       "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}}}),
                json!({}),
            ),
        ),
    ];
    env.push(&files, "an unready Deployment beside a Secret").await?;
    env.create_app("leaky", "apps/leaky", json!({"health": {"timeout": "10m"}})).await?;
    // The Pod exists; an Event about it quotes the Secret's value.
    let pods = env.api::<k8s_openapi::api::core::v1::Pod>();
    let pod = wait_for("the leaky Pod", Duration::from_secs(60), || async {
        let list = pods.list(&ListParams::default().labels("app=leaky")).await?;
        let name = list.items.first().and_then(|p| p.metadata.name.clone());
        Ok((name, format!("{} pods", list.items.len())))
    })
    .await?;
    let event: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("{pod}.leak")},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": env.namespace},
        "reason": "Unhealthy", "type": "Warning", "count": 1000,
        "message": format!("Readiness probe failed: HTTP probe failed with body: login failed for password={CANARY}"),
        "source": {"component": "kubelet"},
    }))?;
    env.api::<k8s_openapi::api::core::v1::Event>().create(&PostParams::default(), &event).await?;
    // The evidence is that Event (the most repeated one), with the value masked.
    let found = wait_for("the leaked Event as evidence", Duration::from_secs(60), || async {
        let app = env.api::<Application>().get("leaky").await?;
        let diagnosis = app.status.map(|s| s.diagnosis).unwrap_or_default();
        let hit = diagnosis
            .iter()
            .find(|d| d.reason == "ReadinessProbeFailed" && d.message.contains("login failed"))
            .cloned();
        Ok((hit, format!("{diagnosis:?}")))
    })
    .await?;
    assert!(found.message.contains("password=***"), "{found:?}");
    env.wait_event("leaky", "Diagnosed").await?;
    let app = env.api::<Application>().get("leaky").await?;
    let events = env.events_for("leaky").await?;
    let cli = kuvryn_sync_tests::cli::Ksync::new(&env)?;
    let human = cli.run(&["diagnose", "leaky"]).await?;
    let json_out = cli.run(&["diagnose", "leaky", "-o", "json"]).await?;
    let everything = format!(
        "{}{events:?}{}{}{}{}",
        serde_json::to_string(&app.status)?,
        human.stdout,
        human.stderr,
        json_out.stdout,
        env.controller_log()
    );
    assert!(human.stdout.contains("ReadinessProbeFailed"), "{}", human.stdout);
    assert!(!everything.contains(CANARY), "the Secret value leaked");
    Ok(())
}

/// A Secret that is not in Git — created in the cluster by someone else — and that the workload
/// reads: its value, printed by the crashing program into its termination message, is masked
/// in the diagnosis, the Events, `ksync diagnose` and the controller's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_secret_value_in_a_termination_message_never_reaches_the_diagnosis() -> Result<()>
{
    if skip_on_real_cluster(
        "a_cluster_secret_value_in_a_termination_message_never_reaches_the_diagnosis",
        "a simulated crash that writes its termination message",
    ) {
        return Ok(());
    }
    const CANARY: &str = "canary-4d2f81-termination";
    let env = env_with_workloads("diagnose-term", true).await?;
    env.grant("apps", &["deployments", "replicasets"]).await?;
    env.grant("", &["pods", "events"]).await?;
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-login"},
        "stringData": {"password": CANARY}}))?;
    env.api::<Secret>().create(&PostParams::default(), &secret).await?;
    let container = json!({"env": [
        {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db-login", "key": "password"}}},
        {"name": "KSYNC_SIMULATE", "value": "crash"},
        {"name": "KSYNC_SIMULATE_TERMINATION_MESSAGE",
         "value": format!("cannot log in to the database as app with password {CANARY}")}]});
    let files = [("apps/crashy/deploy.yaml", deployment("crashy", container, json!({})))];
    env.push(&files, "a Deployment that prints its database password as it dies").await?;
    env.create_app("crashy", "apps/crashy", json!({"health": {"timeout": "10m"}})).await?;
    let found =
        wait_for("the termination message as evidence", Duration::from_secs(60), || async {
            let app = env.api::<Application>().get("crashy").await?;
            let diagnosis = app.status.map(|s| s.diagnosis).unwrap_or_default();
            let hit = diagnosis.iter().find(|d| d.message.contains("cannot log in")).cloned();
            Ok((hit, format!("{diagnosis:?}")))
        })
        .await?;
    assert!(found.message.contains("password ***"), "{found:?}");
    env.wait_event("crashy", "Diagnosed").await?;
    let app = env.api::<Application>().get("crashy").await?;
    let events = env.events_for("crashy").await?;
    let cli = kuvryn_sync_tests::cli::Ksync::new(&env)?;
    let human = cli.run(&["diagnose", "crashy"]).await?;
    let everything = format!(
        "{}{events:?}{}{}{}",
        serde_json::to_string(&app.status)?,
        human.stdout,
        human.stderr,
        env.controller_log()
    );
    assert!(human.stdout.contains("cannot log in"), "{}", human.stdout);
    assert!(!everything.contains(CANARY), "the Secret value leaked");
    Ok(())
}

/// A TLS admission webhook that denies every Pod (its CA is fresh), on a free loopback port.
async fn pod_denier() -> Result<(String, String, axum_server::Handle<std::net::SocketAddr>)> {
    use axum::Json;
    use base64::Engine as _;
    kuvryn_sync_runtime::tls::install_crypto_provider();
    let certs = kuvryn_sync_tests::localhost_certs()?;
    let app = axum::Router::new().route(
        "/validate",
        axum::routing::post(|Json(review): Json<Value>| async move {
            Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": false,
                    "status": {"code": 403, "reason": "Forbidden",
                               "message": "pods need an approved image"}}}))
        }),
    );
    let tls = axum_server::tls_rustls::RustlsConfig::from_pem(
        certs.cert_pem.clone().into_bytes(),
        certs.key_pem.clone().into_bytes(),
    )
    .await?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let address = listener.local_addr()?;
    let handle = axum_server::Handle::new();
    let server = axum_server::from_tcp_rustls(listener, tls)?.handle(handle.clone());
    tokio::spawn(async move { server.serve(app.into_make_service()).await });
    handle.listening().await;
    let ca = base64::engine::general_purpose::STANDARD.encode(&certs.ca_cert_pem);
    Ok((format!("https://{address}/validate"), ca, handle))
}

/// Pods that an admission webhook refuses: the ReplicaSet's FailedCreate names the webhook, and
/// the diagnosis says AdmissionRefused at the workload that cannot create its Pods; it clears once
/// the webhook is gone and the Pods run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_refused_by_an_admission_webhook_are_diagnosed_as_admission_refused() -> Result<()> {
    if skip_on_real_cluster(
        "pods_refused_by_an_admission_webhook_are_diagnosed_as_admission_refused",
        "workload failures of fictional images (pull errors, crash loops, refused Pods)",
    ) {
        return Ok(());
    }
    let env = env_with_workloads("diagnose-admission", true).await?;
    let ns = env.namespace.clone();
    env.grant("apps", &["deployments", "replicasets"]).await?;
    env.grant("", &["pods", "events"]).await?;
    let (url, ca, _server) = pod_denier().await?;
    let resource = kube::discovery::ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: "ValidatingWebhookConfiguration".into(),
        plural: "validatingwebhookconfigurations".into(),
    };
    let configs: Api<DynamicObject> = Api::all_with(env.cluster.client(), &resource);
    let name = format!("{ns}-pod-denier");
    let config = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{"name": "deny-pods.example.com", "admissionReviewVersions": ["v1"],
            "sideEffects": "None", "failurePolicy": "Fail",
            "clientConfig": {"url": url, "caBundle": ca},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}],
    });
    configs.patch(&name, &PatchParams::apply("e2e").force(), &Patch::Apply(&config)).await?;
    env.push(
        &[("apps/gated/deploy.yaml", deployment("gated", json!({}), json!({})))],
        "a Deployment whose Pods are refused",
    )
    .await?;
    env.create_app("gated", "apps/gated", json!({"health": {"timeout": "10m"}})).await?;
    let found = wait_diagnosis(&env, "gated", "AdmissionRefused").await?;
    assert!(found.message.contains("deny-pods.example.com"), "{found:?}");
    let first = found.chain.first().map(|r| (r.kind.as_str(), r.name.as_str()));
    assert_eq!(first, Some(("Deployment", "gated")), "{found:?}");
    assert!(
        matches!(found.resource.kind.as_str(), "ReplicaSet" | "Deployment"),
        "rooted at the workload that cannot create Pods: {found:?}"
    );
    env.wait_event("gated", "Diagnosed").await?;
    // Without the webhook the Pods are created, the Deployment becomes Healthy, and the
    // diagnosis clears.
    configs.delete(&name, &Default::default()).await?;
    env.wait_ready("gated", "True", "Healthy").await?;
    let app = env.api::<Application>().get("gated").await?;
    assert!(app.status.map(|s| s.diagnosis.is_empty()).unwrap_or(false), "diagnosis cleared");
    Ok(())
}
