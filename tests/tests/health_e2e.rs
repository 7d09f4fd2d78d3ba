//! HealthCheck rules decide the health of a kind the status conventions cannot read: the real
//! controller binary, a real git daemon, and a custom resource whose status is set with kubectl.
//! The first true rule decides (across HealthChecks in name order); a rule that cannot answer
//! holds the object Progressing with `HealthCheckFailed` and raises `InvalidHealthCheck`.
//! `ksync tree` shows the health those rules give.

use anyhow::{Context, Result};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kuvryn_sync_api::HealthCheck;
use kuvryn_sync_tests::application::{config_map, env};
use kuvryn_sync_tests::cli::Ksync;
use kuvryn_sync_tests::{alive, proc_status_kib};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_rules_decide_a_custom_kinds_health() -> Result<()> {
    let env = env("health", true).await?;
    let ns = env.namespace.clone();
    let widgets_kind = env.custom_kind("Widget", "widgets").await?;
    let group = widgets_kind.group.clone();
    let admin = env.cluster.client();
    let health_checks = Api::<HealthCheck>::all(admin.clone());
    let check = |name: &str, rules: serde_json::Value| -> Result<HealthCheck> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "HealthCheck",
            "metadata": {"name": name},
            "spec": {"group": group, "kind": "Widget", "rules": rules},
        }))?)
    };
    health_checks
        .create(
            &PostParams::default(),
            &check(
                &format!("{ns}-widget"),
                json!([
                    {"expression": "has(object.status) && object.status.phase == 'Broken'",
                     "state": "Degraded", "message": "the widget is broken"},
                    {"expression": "has(object.status) && object.status.phase == 'Ready'",
                     "state": "Healthy", "message": "the widget is ready"},
                    {"expression": "true", "state": "Progressing", "message": "waiting for the widget"},
                ]),
            )?,
        )
        .await?;

    let crd = widgets_kind.crd.clone();
    let widget = |size: u32| {
        json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
               "metadata": {"name": "gear"}, "spec": {"size": size}})
    };
    let commit = env
        .push(
            &[
                ("apps/w/crd.yaml", serde_json::to_string(&crd)?),
                ("apps/w/widget.yaml", serde_json::to_string(&widget(3))?),
            ],
            "a Widget",
        )
        .await?;
    env.create_app("widgets", "apps/w", json!({"health": {"timeout": "10m"}})).await?;
    env.wait_synced("widgets", &commit).await?;
    // No status yet: the catch-all rule holds it Progressing, so the rollout is not Healthy.
    env.wait_app("widgets", "health Progressing", |app| {
        app.status
            .as_ref()
            .is_some_and(|s| s.health.state == kuvryn_sync_api::HealthState::Progressing)
    })
    .await?;

    let resource = widgets_kind.resource.clone();
    let widgets: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &resource);
    let set_phase = |phase: &'static str| {
        let widgets = widgets.clone();
        async move {
            let status = json!({"status": {"phase": phase}});
            widgets.patch_status("gear", &PatchParams::default(), &Patch::Merge(&status)).await
        }
    };
    set_phase("Ready").await?;
    let message = env.wait_ready("widgets", "True", "Healthy").await?;
    assert!(message.contains(&commit), "{message}");

    set_phase("Broken").await?;
    let message = env.wait_ready("widgets", "False", "Degraded").await?;
    assert!(message.contains("the widget is broken"), "{message}");
    // `ksync tree` judges with the same rules: the HealthCheck says Degraded where the status
    // conventions alone (no conditions) would call the Widget Healthy.
    let nodes = Ksync::new(&env)?.json(&["tree", "widgets"]).await?;
    let gear = nodes
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["kind"] == "Widget" && n["name"] == "gear"))
        .with_context(|| format!("the Widget in the tree: {nodes}"))?;
    assert_eq!(gear["health"], "Degraded", "{nodes}");

    // A HealthCheck that sorts first and cannot answer: the object is held Progressing with
    // HealthCheckFailed (it does not fall through to the valid one), and InvalidHealthCheck names
    // the rule at once, for the Application already synced, with no new commit.
    health_checks
        .create(
            &PostParams::default(),
            &check(
                &format!("{ns}-a-invalid"),
                json!([{"expression": "object.status.phase", "state": "Healthy"}]),
            )?,
        )
        .await?;
    let message = env.wait_ready("widgets", "False", "Progressing").await?;
    assert!(message.contains("HealthCheckFailed") && message.contains("a-invalid"), "{message}");
    let events = env.wait_event("widgets", "InvalidHealthCheck").await?;
    let raised: Vec<_> = events.iter().filter(|(_, r, _)| r == "InvalidHealthCheck").collect();
    assert_eq!(raised.len(), 1, "reported once, not on every reconcile: {raised:?}");
    assert!(raised[0].2.contains(&format!("{ns}-a-invalid")), "{raised:?}");
    // The next sync (a new attempt) raises it again.
    let next = env
        .push(&[("apps/w/widget.yaml", serde_json::to_string(&widget(4))?)], "a bigger Widget")
        .await?;
    env.wait_synced("widgets", &next).await?;
    let events = env.wait_event("widgets", "InvalidHealthCheck").await?;
    let (_, _, note) =
        events.iter().find(|(_, reason, _)| reason == "InvalidHealthCheck").expect("the event");
    assert!(
        note.contains(&format!("{ns}-a-invalid")) && note.contains("spec.rules[0].expression"),
        "{note}"
    );
    Ok(())
}

/// A rule whose cost grows with the map it walks — every key against every key — passes
/// admission (two nested comprehensions, a few nodes) and runs on small objects, but on a
/// Widget with 2,000 keys its estimated cost is over the budget: the object is held Progressing,
/// diagnosed `HealthCheckFailed` naming the HealthCheck and the cost budget, the rule is never run to the end, the
/// controller keeps its PID and a bounded peak RSS, and another Application keeps syncing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_quadratic_in_a_maps_size_is_stopped_by_its_budget() -> Result<()> {
    let env = env("health-cost", true).await?;
    let ns = env.namespace.clone();
    let widgets_kind = env.custom_kind("Widget", "widgets").await?;
    let group = widgets_kind.group.clone();
    let health_checks = Api::<HealthCheck>::all(env.cluster.client());
    let check: HealthCheck = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "HealthCheck",
        "metadata": {"name": format!("{ns}-pairs")},
        "spec": {"group": group, "kind": "Widget", "rules": [
            {"expression": "object.spec.data.all(k, object.spec.data.exists(j, k == j))",
             "state": "Healthy", "message": "every key has a partner"},
        ]},
    }))?;
    health_checks.create(&PostParams::default(), &check).await?;

    let widget = |name: &str, keys: usize| {
        let data: serde_json::Map<String, serde_json::Value> =
            (0..keys).map(|i| (format!("key-{i}"), json!("v"))).collect();
        json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
               "metadata": {"name": name}, "spec": {"data": data}})
    };
    let crd = serde_json::to_string(&widgets_kind.crd)?;
    let commit = env
        .push(
            &[
                ("apps/small/crd.yaml", crd.clone()),
                ("apps/small/widget.yaml", serde_json::to_string(&widget("small", 20))?),
                ("apps/large/widget.yaml", serde_json::to_string(&widget("large", 2_000))?),
                ("apps/other/cm.yaml", config_map("other", "1", json!({}))),
            ],
            "widgets and a neighbour",
        )
        .await?;
    env.create_app("small", "apps/small", json!({"health": {"timeout": "10m"}})).await?;
    env.wait_ready("small", "True", "Healthy").await?;
    let pid = env.controller.as_ref().context("controller")?.pid();
    let before = proc_status_kib(pid, "VmHWM").context("VmHWM")?;

    env.create_app("large", "apps/large", json!({"health": {"timeout": "10m"}})).await?;
    env.wait_synced("large", &commit).await?;
    // Health is Progressing, and the diagnosis names the rule and its budget.
    env.wait_app("large", "health Progressing, diagnosed as over the cost budget", |app| {
        app.status.as_ref().is_some_and(|s| {
            s.health.state == kuvryn_sync_api::HealthState::Progressing
                && s.diagnosis.iter().any(|d| {
                    d.reason == "HealthCheckFailed"
                        && d.message.contains(&format!("{ns}-pairs"))
                        && d.message.contains("exceeds its cost budget")
                })
        })
    })
    .await?;

    // Meanwhile the neighbour syncs, twice.
    env.create_app("other", "apps/other", json!({})).await?;
    env.wait_synced("other", &commit).await?;
    let next =
        env.push(&[("apps/other/cm.yaml", config_map("other", "2", json!({})))], "v2").await?;
    env.wait_synced("other", &next).await?;
    assert!(alive(pid), "the controller {pid} is gone");
    let after = proc_status_kib(pid, "VmHWM").context("VmHWM")?;
    println!("controller VmHWM {before} KiB -> {after} KiB");
    assert!(after < 300 * 1024, "the controller's peak RSS reached {after} KiB");
    Ok(())
}
