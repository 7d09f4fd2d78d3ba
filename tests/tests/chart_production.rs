//! Production values of `charts/kuvryn-sync`, rendered by the real Helm engine: image digest,
//! logLevel and extraEnv, overridable securityContext, checkout and render limits as flags,
//! the webhook's topology spread, the opt-in NetworkPolicies and PodMonitor, and
//! `values.schema.json` refusing a wrong type with its message.

use kuvryn_sync_helm::HelmError;
use kuvryn_sync_tests::helm::{ChartRender, render_chart};
use serde_json::{Value, json};

const CONTROLLER: &str = "kuvryn-sync-controller";
const WEBHOOK: &str = "kuvryn-sync-webhook";

fn render(values: Value) -> ChartRender {
    render_chart(values).unwrap_or_else(|e| panic!("chart render failed: {e}"))
}

fn container<'a>(r: &'a ChartRender, deployment: &str) -> &'a Value {
    &r.get("Deployment", deployment)["spec"]["template"]["spec"]["containers"][0]
}

fn env_value(c: &Value, name: &str) -> Option<String> {
    c["env"].as_array()?.iter().find(|e| e["name"] == name)?["value"].as_str().map(str::to_owned)
}

fn args(r: &ChartRender, deployment: &str) -> Vec<String> {
    let list = container(r, deployment)["args"].as_array().cloned().unwrap_or_default();
    list.iter().filter_map(|a| a.as_str().map(str::to_owned)).collect()
}

#[test]
fn chart_image_digest_is_appended_and_checked() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let r = render(json!({"controller": {"image": {"digest": digest}}}));
    let image = container(&r, CONTROLLER)["image"].as_str().unwrap_or_default().to_owned();
    assert_eq!(image, format!("kuvryn/kuvryn-sync-controller:0.1.0@{digest}"));
    let webhook = container(&r, WEBHOOK)["image"].as_str().unwrap_or_default().to_owned();
    assert_eq!(webhook, "kuvryn/kuvryn-sync-webhook:0.1.0", "no digest: tag only");
    let message = match render_chart(json!({"webhook": {"image": {"digest": "latest"}}})) {
        Err(HelmError::Engine { message, .. }) => message,
        other => panic!("a malformed digest must fail, got {other:?}"),
    };
    assert!(message.contains("digest"), "{message}");
}

#[test]
fn chart_log_level_and_extra_env_reach_both_containers() {
    let r = render(json!({
        "controller": {"logLevel": "debug,kube=info",
                       "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]},
        "webhook": {"logLevel": "warn", "extraEnv": [{"name": "TZ", "value": "UTC"}]},
    }));
    for (deployment, level) in [(CONTROLLER, "debug,kube=info"), (WEBHOOK, "warn")] {
        let args = args(&r, deployment);
        assert!(args.contains(&format!("--log-level={level}")), "{deployment}: {args:?}");
        // RUST_LOG would win over the flag: the chart never sets it.
        assert_eq!(env_value(container(&r, deployment), "RUST_LOG"), None, "{deployment}");
    }
    assert_eq!(
        env_value(container(&r, CONTROLLER), "HTTPS_PROXY").as_deref(),
        Some("http://proxy:3128")
    );
    assert_eq!(env_value(container(&r, WEBHOOK), "TZ").as_deref(), Some("UTC"));
    let defaults = render(json!({}));
    assert_eq!(env_value(container(&defaults, WEBHOOK), "TZ"), None);
}

#[test]
fn chart_security_context_is_overridable() {
    let defaults = render(json!({}));
    let sc = &container(&defaults, CONTROLLER)["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["runAsUser"], 65532);
    let r = render(json!({
        "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "readOnlyRootFilesystem": true},
        "podSecurityContext": {"runAsNonRoot": true, "fsGroup": 1000},
    }));
    for deployment in [CONTROLLER, WEBHOOK] {
        assert_eq!(container(&r, deployment)["securityContext"]["runAsUser"], 1000);
        let pod = &r.get("Deployment", deployment)["spec"]["template"]["spec"]["securityContext"];
        assert_eq!(pod["fsGroup"], 1000, "{deployment}");
    }
}

#[test]
fn chart_checkout_and_render_limits_become_flags_only_when_set() {
    let defaults = args(&render(json!({})), CONTROLLER);
    assert!(!defaults.iter().any(|a| a.starts_with("--checkout-") || a.starts_with("--render-")));
    let r = render(json!({"controller": {
        "checkoutLimits": {"maxFiles": 200000, "maxBytes": 2147483648u64},
        "render": {"timeout": "90s", "networkIsolation": "required", "cacheSize": 0},
    }}));
    let a = args(&r, CONTROLLER);
    for flag in [
        "--checkout-max-files=200000",
        "--checkout-max-bytes=2147483648",
        "--render-timeout=90s",
        "--render-network-isolation=required",
        "--render-cache-size=0",
    ] {
        assert!(a.iter().any(|x| x == flag), "{flag} missing from {a:?}");
    }
}

#[test]
fn chart_webhook_replicas_spread_over_nodes_and_zones() {
    let r = render(json!({}));
    let spec = &r.get("Deployment", WEBHOOK)["spec"]["template"]["spec"];
    let keys: Vec<&str> = spec["topologySpreadConstraints"]
        .as_array()
        .expect("topologySpreadConstraints")
        .iter()
        .map(|c| c["topologyKey"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(keys, ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]);
    assert_eq!(spec["topologySpreadConstraints"][0]["whenUnsatisfiable"], "ScheduleAnyway");
    assert_eq!(
        spec["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"]["app.kubernetes.io/component"],
        "webhook"
    );
    let off = render(json!({"webhook": {"topologySpread": {"enabled": false}}}));
    assert!(
        off.get("Deployment", WEBHOOK)["spec"]["template"]["spec"]["topologySpreadConstraints"]
            .is_null()
    );
}

#[test]
fn chart_network_policies_are_opt_in_and_open_the_needed_ports() {
    assert!(render(json!({})).of_kind("NetworkPolicy").is_empty(), "off by default");
    let r = render(json!({"networkPolicy": {"enabled": true,
        "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]}}));
    let webhook = r.get("NetworkPolicy", WEBHOOK);
    let ports: Vec<i64> = webhook["spec"]["ingress"][0]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["port"].as_i64())
        .collect();
    assert_eq!(ports, [9443, 9444], "admission and receivers");
    assert!(
        webhook["spec"]["ingress"][0]["from"].is_null(),
        "the API server may call from anywhere"
    );
    assert_eq!(
        webhook["spec"]["ingress"][1]["from"][0]["namespaceSelector"]["matchLabels"]["name"],
        "monitoring"
    );
    let controller = r.get("NetworkPolicy", CONTROLLER);
    assert_eq!(controller["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    let egress: Vec<i64> = controller["spec"]["egress"][1]["ports"]
        .as_array()
        .expect("egress ports")
        .iter()
        .filter_map(|p| p["port"].as_i64())
        .collect();
    assert_eq!(egress, [443, 6443, 22, 9418, 80]);
}

#[test]
fn chart_pod_monitor_is_opt_in_and_scrapes_both_components() {
    assert!(render(json!({})).of_kind("PodMonitor").is_empty());
    let r = render(json!({"podMonitor": {"enabled": true, "labels": {"release": "prom"}}}));
    let monitor = r.single("PodMonitor");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prom");
    assert_eq!(monitor["spec"]["podMetricsEndpoints"][0]["port"], "metrics");
    assert!(monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"].is_null());
}

#[test]
fn chart_values_of_the_wrong_type_fail_with_the_schema_message() {
    for (values, field) in [
        (json!({"controller": {"logLevel": 5}}), "logLevel"),
        (json!({"webhook": {"replicas": "two"}}), "replicas"),
        (json!({"controller": {"render": {"networkIsolation": "sometimes"}}}), "networkIsolation"),
    ] {
        match render_chart(values.clone()) {
            Err(HelmError::Engine { message, .. }) => {
                assert!(message.contains("schema"), "{values}: {message}");
                assert!(message.contains(field), "{values}: {message}");
            }
            other => panic!("{values} must fail against values.schema.json, got {other:?}"),
        }
    }
}
