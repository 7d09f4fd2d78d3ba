//! HealthCheck rules decide the health of a kind the status conventions cannot read: the real
//! controller binary, a real git daemon, and a custom resource whose status is set with kubectl.
//! The first true rule decides (across HealthChecks in name order); a rule that cannot answer
//! holds the object Progressing with `HealthCheckFailed` and raises `InvalidHealthCheck`.

use anyhow::Result;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kuvryn_sync_api::HealthCheck;
use kuvryn_sync_tests::application::env;
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

    // A HealthCheck that sorts first and cannot answer: the object is held Progressing with
    // HealthCheckFailed (it does not fall through to the valid one), and the next sync raises
    // InvalidHealthCheck naming the rule.
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
