//! The Helm chart `charts/kuvryn-sync`, rendered by the real Helm engine (libhelm_c.so) in each
//! certificate mode, asserted on the parsed objects.
//!
//! The chart registers an admission webhook exactly for the paths the webhook serves, and wires
//! each (CA bundle, cert-manager injection, rules) in every certificate mode.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use kuvryn_sync_helm::HelmError;
use kuvryn_sync_tests::helm::{
    ADMISSION_PATHS, ChartRender, NAMESPACE, chart_dir, copy_dir, render_chart, render_chart_at,
};
use serde_json::{Value, json};
use x509_parser::prelude::*;

const CONTROLLER: &str = "kuvryn-sync-controller";
const WEBHOOK: &str = "kuvryn-sync-webhook";
const WEBHOOK_TLS_SECRET: &str = "kuvryn-sync-webhook-tls";
const RECEIVERS: &str = "kuvryn-sync-webhook-receivers";
const VALIDATING: &str = "kuvryn-sync-healthchecks";
const MUTATING: &str = "kuvryn-sync-applications";

/// The admission paths the render registers a webhook configuration for.
fn registered_paths(r: &ChartRender) -> BTreeSet<String> {
    ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"]
        .into_iter()
        .flat_map(|kind| r.of_kind(kind))
        .flat_map(|cfg| cfg["webhooks"].as_array().cloned().unwrap_or_default())
        .map(|hook| hook["clientConfig"]["service"]["path"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn render(values: Value) -> ChartRender {
    render_chart(values).unwrap_or_else(|e| panic!("chart render failed: {e}"))
}

fn mode(mode: &str) -> Value {
    json!({"webhook": {"certificates": {"mode": mode}}})
}

fn kind_counts(r: &ChartRender) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for d in &r.docs {
        *counts.entry(d.kind().to_owned()).or_insert(0) += 1;
    }
    counts
}

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
}

const COMMON_KINDS: [(&str, usize); 10] = [
    ("ClusterRole", 3),
    ("ClusterRoleBinding", 3),
    ("Deployment", 2),
    ("MutatingWebhookConfiguration", 1),
    ("ValidatingWebhookConfiguration", 1),
    ("PodDisruptionBudget", 1),
    ("Role", 1),
    ("RoleBinding", 1),
    ("Service", 2),
    ("ServiceAccount", 2),
];

fn with_common(extra: &[(&str, usize)]) -> BTreeMap<String, usize> {
    let mut all = counts(&COMMON_KINDS);
    for (k, n) in extra {
        all.insert((*k).to_owned(), *n);
    }
    all
}

fn container<'a>(r: &'a ChartRender, deployment: &str) -> &'a Value {
    let containers = r.get("Deployment", deployment)["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1, "{deployment} runs one container");
    &containers[0]
}

fn args(r: &ChartRender, deployment: &str) -> Vec<String> {
    container(r, deployment)["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("arg is a string").to_owned())
        .collect()
}

fn webhook_client_configs(r: &ChartRender) -> Vec<(&'static str, &Value)> {
    let v = &r.get("ValidatingWebhookConfiguration", VALIDATING)["webhooks"][0]["clientConfig"];
    let m = &r.get("MutatingWebhookConfiguration", MUTATING)["webhooks"][0]["clientConfig"];
    vec![(VALIDATING, v), (MUTATING, m)]
}

fn tls_volume_secret(r: &ChartRender) -> String {
    let volumes = r.get("Deployment", WEBHOOK)["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .clone();
    let tls = volumes.iter().find(|v| v["name"] == "tls").expect("tls volume");
    tls["secret"]["secretName"].as_str().expect("secretName").to_owned()
}

fn pem_der(pem_text: &[u8]) -> Vec<u8> {
    let (rest, pem) = x509_parser::pem::parse_x509_pem(pem_text).expect("PEM certificate");
    assert!(String::from_utf8_lossy(rest).trim().is_empty(), "exactly one PEM block");
    assert_eq!(pem.label, "CERTIFICATE");
    pem.contents
}

fn render_error(values: Value) -> String {
    match render_chart(values) {
        Ok(_) => panic!("rendering must fail"),
        Err(HelmError::Engine { message, .. }) => message,
        Err(other) => panic!("expected a Helm template error, got {other:?}"),
    }
}

#[test]
fn chart_generated_mode_renders_the_expected_objects() {
    let r = render(json!({}));
    assert_eq!(kind_counts(&r), with_common(&[("Secret", 1)]));
    assert!(r.manifests.contains_key("kuvryn-sync/templates/NOTES.txt"));
    for d in &r.docs {
        let cluster_scoped = matches!(
            d.kind(),
            "ClusterRole"
                | "ClusterRoleBinding"
                | "ValidatingWebhookConfiguration"
                | "MutatingWebhookConfiguration"
        );
        let ns = d.object["metadata"]["namespace"].as_str();
        if cluster_scoped {
            assert_eq!(ns, None, "{} {} is cluster-scoped", d.kind(), d.name());
        } else {
            assert_eq!(ns, Some(NAMESPACE), "{} {} namespace", d.kind(), d.name());
        }
        assert_eq!(
            d.object["metadata"]["labels"]["app.kubernetes.io/instance"],
            "kuvryn-sync",
            "{} {} labels",
            d.kind(),
            d.name()
        );
    }
    let secret = r.get("Secret", WEBHOOK_TLS_SECRET);
    assert_eq!(secret["type"], "kubernetes.io/tls");
    assert_eq!(tls_volume_secret(&r), WEBHOOK_TLS_SECRET);
}

#[test]
fn chart_deployments_are_hardened_with_probes_and_resources() {
    let r = render(json!({}));
    for name in [CONTROLLER, WEBHOOK] {
        let deploy = r.get("Deployment", name);
        let pod = &deploy["spec"]["template"]["spec"];
        let selector = &deploy["spec"]["selector"]["matchLabels"];
        for (k, v) in selector.as_object().expect("matchLabels") {
            assert_eq!(
                &deploy["spec"]["template"]["metadata"]["labels"][k], v,
                "{name} selector matches pod labels"
            );
        }
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
        assert_eq!(pod["securityContext"]["runAsUser"], 65532, "{name}");
        assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault", "{name}");
        assert_eq!(pod["serviceAccountName"], name, "{name} runs as its own ServiceAccount");
        r.get("ServiceAccount", name);

        let c = container(&r, name);
        let sc = &c["securityContext"];
        assert_eq!(sc["runAsNonRoot"], true, "{name}");
        assert_eq!(sc["runAsUser"], 65532, "{name}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "{name}");
        assert!(sc["capabilities"].get("add").is_none(), "{name} adds no capability");
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{name}");
        assert_ne!(sc["privileged"], true, "{name}");

        for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
            assert_eq!(c[probe]["httpGet"]["path"], path, "{name} {probe}");
            assert_eq!(c[probe]["httpGet"]["port"], "metrics", "{name} {probe}");
        }
        let ports = c["ports"].as_array().expect("ports");
        assert!(
            ports.iter().any(|p| p["name"] == "metrics" && p["containerPort"] == 8080),
            "{name} exposes metrics on 8080: {ports:?}"
        );
        for section in ["requests", "limits"] {
            for resource in ["cpu", "memory"] {
                assert!(
                    c["resources"][section][resource].is_string(),
                    "{name} sets resources.{section}.{resource}"
                );
            }
        }
        let mounts = c["volumeMounts"].as_array().expect("volumeMounts");
        assert!(mounts.iter().any(|m| m["mountPath"] == "/tmp"), "{name} has a writable /tmp");
    }

    let controller = container(&r, CONTROLLER);
    let mounts = controller["volumeMounts"].as_array().expect("mounts");
    let cache = mounts
        .iter()
        .find(|m| m["mountPath"] == "/var/cache/kuvryn-sync")
        .expect("Git cache mount");
    let volumes = r.get("Deployment", CONTROLLER)["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .clone();
    for mount_name in [cache["name"].clone(), json!("tmp")] {
        let v = volumes.iter().find(|v| v["name"] == mount_name).expect("volume");
        assert!(v["emptyDir"].is_object(), "{mount_name} is an emptyDir: {v}");
    }

    let webhook = container(&r, WEBHOOK);
    let tls = webhook["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["mountPath"] == "/tls")
        .expect("TLS mount")
        .clone();
    assert_eq!(tls["readOnly"], true);
    assert!(
        webhook["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|p| p["name"] == "https" && p["containerPort"] == 9443)
    );
    assert!(
        webhook["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|p| p["name"] == "receivers" && p["containerPort"] == 9444)
    );
    assert_eq!(webhook["image"], "kuvryn/kuvryn-sync-webhook:0.1.0");
    assert_eq!(controller["image"], "kuvryn/kuvryn-sync-controller:0.1.0");

    let custom =
        render(json!({"controller": {"image": {"repository": "registry.test/ctl", "tag": "v9"}}}));
    assert_eq!(container(&custom, CONTROLLER)["image"], "registry.test/ctl:v9");
}

#[test]
fn chart_container_args() {
    let r = render(json!({}));
    assert_eq!(
        args(&r, CONTROLLER),
        [
            "--metrics-bind-address=0.0.0.0:8080",
            format!("--leader-election-namespace={NAMESPACE}").as_str(),
            "--cache-dir=/var/cache/kuvryn-sync",
            "--log-format=json",
            "--log-level=info",
        ]
    );
    assert_eq!(
        args(&r, WEBHOOK),
        [
            "--listen=0.0.0.0:9443",
            "--receiver-listen=0.0.0.0:9444",
            "--tls-cert-file=/tls/tls.crt",
            "--tls-key-file=/tls/tls.key",
            "--metrics-bind-address=0.0.0.0:8080",
            "--log-format=json",
            "--log-level=info",
        ]
    );
    let debug = render(json!({"controller": {"logLevel": "debug"}}));
    assert!(args(&debug, CONTROLLER).contains(&"--log-level=debug".to_owned()));
    let with_sa = render(json!({"controller": {"defaultServiceAccount": "deployer"}}));
    let a = args(&with_sa, CONTROLLER);
    assert_eq!(a.last().map(String::as_str), Some("--default-service-account=deployer"));
    assert_eq!(a.iter().filter(|x| x.starts_with("--default-service-account")).count(), 1);
}

#[test]
fn chart_image_automation_values() {
    let r = render(json!({}));
    let controller = container(&r, CONTROLLER);
    assert!(!args(&r, CONTROLLER).iter().any(|a| a.starts_with("--image-write-back")));
    assert!(!args(&r, CONTROLLER).iter().any(|a| a.starts_with("--registry-ca-file")));
    assert!(!controller["env"].to_string().contains("SSL_CERT"));
    assert!(!controller["volumeMounts"].to_string().contains("registry-ca"));

    let r = render(json!({"controller": {
        "imageWriteBack": true,
        "registryCA": {"secretName": "corp-registry-ca", "key": "bundle.pem"}}}));
    let a = args(&r, CONTROLLER);
    assert!(a.contains(&"--image-write-back".to_owned()), "{a:?}");
    assert!(a.contains(&"--registry-ca-file=/etc/kuvryn-sync/registry-ca/bundle.pem".to_owned()));
    let controller = container(&r, CONTROLLER);
    let env = controller["env"].as_array().expect("env");
    assert!(
        env.contains(&json!({"name": "SSL_CERT_DIR", "value": "/etc/kuvryn-sync/registry-ca"})),
        "{env:?}"
    );
    assert!(!env.iter().any(|e| e["name"] == "SSL_CERT_FILE"), "the system bundle stays");
    let mounts = controller["volumeMounts"].as_array().expect("mounts");
    assert!(mounts.contains(&json!({"name": "registry-ca",
        "mountPath": "/etc/kuvryn-sync/registry-ca", "readOnly": true})));
    let volumes = r.get("Deployment", CONTROLLER)["spec"]["template"]["spec"]["volumes"].clone();
    assert!(
        volumes.as_array().expect("volumes").contains(&json!({"name": "registry-ca",
            "secret": {"secretName": "corp-registry-ca",
                       "items": [{"key": "bundle.pem", "path": "bundle.pem"}]}})),
        "{volumes}"
    );
}

fn rules(r: &ChartRender, kind: &str, name: &str) -> Value {
    r.get(kind, name)["rules"].clone()
}

#[test]
fn chart_rbac_is_exact_and_least_privilege() {
    let r = render(json!({}));
    let group = "sync.kuvryn.io";
    assert_eq!(
        rules(&r, "ClusterRole", CONTROLLER),
        json!([
            {"apiGroups": [group], "resources": ["applications", "revisions"],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": [group], "resources": ["repositories", "imagepolicies"],
             "verbs": ["get", "list", "watch", "update", "patch"]},
            {"apiGroups": [group], "resources": ["applications/status", "revisions/status", "repositories/status", "imagepolicies/status"],
             "verbs": ["get", "update", "patch"]},
            {"apiGroups": [group], "resources": ["applications/finalizers", "repositories/finalizers"],
             "verbs": ["update"]},
            {"apiGroups": [group], "resources": ["healthchecks", "notificationsinks"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
            {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]},
            {"apiGroups": [""], "resources": ["groups"], "verbs": ["impersonate"],
             "resourceNames": ["system:serviceaccounts"]},
        ])
    );
    let watch = format!("{CONTROLLER}-watch");
    assert_eq!(
        rules(&r, "ClusterRole", &watch),
        json!([
            {"apiGroups": [""], "verbs": ["list", "watch"],
             "resources": ["configmaps", "services", "serviceaccounts", "persistentvolumeclaims", "namespaces"]},
            {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "daemonsets"],
             "verbs": ["list", "watch"]},
            {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": ["list", "watch"]},
            {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "networkpolicies"],
             "verbs": ["list", "watch"]},
        ])
    );
    assert_eq!(
        rules(&r, "ClusterRole", WEBHOOK),
        json!([
            {"apiGroups": [group], "resources": ["revisions"], "verbs": ["get"]},
            {"apiGroups": [group], "resources": ["repositories", "imagepolicies"], "verbs": ["get", "patch"]},
            {"apiGroups": [group], "resources": ["applications", "imagepolicies"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
        ])
    );
    let lease_role = r.get("Role", "kuvryn-sync-controller-leader-election");
    assert_eq!(lease_role["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        lease_role["rules"],
        json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "create", "update", "patch"]}])
    );

    // Invariants over every rule, so a new rule cannot quietly widen access.
    for kind in ["ClusterRole", "Role"] {
        for role in r.of_kind(kind) {
            // The managed-kind watch role may name workload kinds, for list and watch only.
            let watch_role = role["metadata"]["name"] == json!(watch);
            for rule in role["rules"].as_array().expect("rules") {
                for field in ["apiGroups", "resources", "verbs", "resourceNames"] {
                    for v in rule[field].as_array().into_iter().flatten() {
                        assert!(!v.as_str().expect("string").contains('*'), "wildcard in {rule}");
                    }
                }
                let resources = rule["resources"].as_array().expect("resources");
                let verbs = rule["verbs"].as_array().expect("verbs");
                if resources.contains(&json!("secrets")) {
                    assert_eq!(verbs, &vec![json!("get")], "secrets are get-only: {rule}");
                }
                if verbs.contains(&json!("impersonate")) {
                    assert_eq!(verbs.len(), 1, "{rule}");
                    let res = resources[0].as_str().expect("resource");
                    assert!(
                        resources.len() == 1 && (res == "serviceaccounts" || res == "groups"),
                        "{rule}"
                    );
                    if res == "groups" {
                        for name in
                            rule["resourceNames"].as_array().expect("groups need resourceNames")
                        {
                            assert!(
                                name.as_str().expect("name").starts_with("system:serviceaccounts"),
                                "{rule}"
                            );
                        }
                    }
                }
                if watch_role {
                    assert_eq!(verbs, &vec![json!("list"), json!("watch")], "{rule}");
                    assert!(!resources.contains(&json!("secrets")), "{rule}");
                    continue;
                }
                if resources.contains(&json!("leases")) {
                    assert_eq!(kind, "Role", "Leases only through the namespaced Role");
                }
                for g in rule["apiGroups"].as_array().expect("apiGroups") {
                    assert!(
                        ["", group, "events.k8s.io", "coordination.k8s.io"]
                            .contains(&g.as_str().expect("group")),
                        "no workload API groups: {rule}"
                    );
                }
                if rule["apiGroups"] == json!([""]) {
                    for res in resources {
                        assert!(
                            ["configmaps", "secrets", "events", "serviceaccounts", "groups"]
                                .contains(&res.as_str().expect("res")),
                            "no core workloads: {rule}"
                        );
                        if res == "configmaps" {
                            assert_eq!(verbs, &vec![json!("get")], "ConfigMaps by name: {rule}");
                        }
                    }
                }
            }
        }
    }

    // Bindings give each role to its own ServiceAccount only.
    for (kind, name, role_kind, role) in [
        ("ClusterRoleBinding", CONTROLLER, "ClusterRole", CONTROLLER),
        ("ClusterRoleBinding", WEBHOOK, "ClusterRole", WEBHOOK),
        ("ClusterRoleBinding", &watch, "ClusterRole", &watch),
        (
            "RoleBinding",
            "kuvryn-sync-controller-leader-election",
            "Role",
            "kuvryn-sync-controller-leader-election",
        ),
    ] {
        let b = r.get(kind, name);
        assert_eq!(
            b["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role})
        );
        let sa = if name.starts_with(WEBHOOK) { WEBHOOK } else { CONTROLLER };
        assert_eq!(
            b["subjects"],
            json!([{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}])
        );
    }

    // The watch role can be switched off, and refuses Secrets.
    let unwatched = render(json!({"controller": {"rbac": {"watchManagedKinds": []}}}));
    assert!(
        unwatched
            .of_kind("ClusterRole")
            .iter()
            .all(|role| role["metadata"]["name"] != json!(watch))
    );
    let refused = render_chart(json!({"controller": {"rbac": {"watchManagedKinds": [
        {"apiGroups": [""], "resources": ["configmaps", "secrets"]}]}}}))
    .expect_err("secrets refused");
    assert!(refused.to_string().contains("must not name secrets"), "{refused}");

    let extra = render(
        json!({"controller": {"rbac": {"impersonateGroupNamespaces": ["team-a", "team-b"]}}}),
    );
    let controller_rules = rules(&extra, "ClusterRole", CONTROLLER);
    let groups = controller_rules
        .as_array()
        .expect("rules")
        .iter()
        .find(|rule| rule["resources"] == json!(["groups"]))
        .expect("groups rule");
    assert_eq!(
        groups["resourceNames"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:team-a",
            "system:serviceaccounts:team-b"
        ])
    );
}

#[test]
fn chart_webhook_configurations_and_service() {
    let r = render(json!({}));
    let validating = &r.get("ValidatingWebhookConfiguration", VALIDATING)["webhooks"];
    let mutating = &r.get("MutatingWebhookConfiguration", MUTATING)["webhooks"];
    assert_eq!(validating.as_array().map(Vec::len), Some(1));
    assert_eq!(mutating.as_array().map(Vec::len), Some(1));
    for (hook, path, resource, scope) in [
        (&validating[0], "/validate/healthchecks", "healthchecks", "Cluster"),
        (&mutating[0], "/admit/applications", "applications", "Namespaced"),
    ] {
        assert_eq!(hook["clientConfig"]["service"]["name"], WEBHOOK);
        assert_eq!(hook["clientConfig"]["service"]["namespace"], NAMESPACE);
        assert_eq!(hook["clientConfig"]["service"]["path"], path);
        assert_eq!(hook["clientConfig"]["service"]["port"], 443);
        assert_eq!(hook["sideEffects"], "None");
        assert_eq!(hook["admissionReviewVersions"], json!(["v1"]));
        let timeout = hook["timeoutSeconds"].as_i64().expect("timeoutSeconds");
        assert!((1..=30).contains(&timeout), "{timeout}");
        assert_eq!(
            hook["rules"],
            json!([{"apiGroups": ["sync.kuvryn.io"], "apiVersions": ["v1alpha1"], "resources": [resource],
                    "operations": ["CREATE", "UPDATE"], "scope": scope}])
        );
    }
    assert_eq!(mutating[0]["failurePolicy"], "Fail", "the approval/rollback audit fails closed");

    let svc = r.get("Service", WEBHOOK);
    assert_eq!(
        svc["spec"]["ports"],
        json!([{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}])
    );
    let receivers = r.get("Service", RECEIVERS);
    assert_eq!(receivers["spec"]["type"], "ClusterIP");
    assert_eq!(
        receivers["spec"]["ports"],
        json!([{"name": "https", "port": 443, "targetPort": "receivers", "protocol": "TCP"}]),
        "the receivers' Service reaches the receivers' listener, not admission"
    );
    let pod_labels = &r.get("Deployment", WEBHOOK)["spec"]["template"]["metadata"]["labels"];
    for svc in [svc, receivers] {
        for (k, v) in svc["spec"]["selector"].as_object().expect("selector") {
            assert_eq!(&pod_labels[k], v, "Service selects the webhook pods");
        }
    }
    assert_eq!(
        r.get("Deployment", CONTROLLER)["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"],
        "controller",
        "the webhook Service does not select controller pods"
    );
}

#[test]
fn chart_generated_mode_ca_bundle_is_the_pem_ca_of_the_serving_certificate() {
    let r = render(mode("generated"));
    let bundles: Vec<String> = webhook_client_configs(&r)
        .into_iter()
        .map(|(name, cc)| {
            cc["caBundle"].as_str().unwrap_or_else(|| panic!("{name} has a caBundle")).to_owned()
        })
        .collect();
    assert_eq!(bundles[0], bundles[1], "both configurations trust the same CA");
    let ca_pem = B64.decode(&bundles[0]).expect("caBundle is base64");
    let ca_der = pem_der(&ca_pem);
    let (_, ca) = X509Certificate::from_der(&ca_der).expect("CA certificate");
    assert!(ca.is_ca(), "caBundle holds a CA certificate");

    let secret = r.get("Secret", WEBHOOK_TLS_SECRET);
    assert_eq!(secret["data"]["ca.crt"].as_str(), Some(bundles[0].as_str()));
    let crt_pem = B64.decode(secret["data"]["tls.crt"].as_str().expect("tls.crt")).expect("base64");
    let key_pem = B64.decode(secret["data"]["tls.key"].as_str().expect("tls.key")).expect("base64");
    assert!(String::from_utf8_lossy(&key_pem).contains("PRIVATE KEY-----"));
    let crt_der = pem_der(&crt_pem);
    let (_, crt) = X509Certificate::from_der(&crt_der).expect("serving certificate");
    assert!(!crt.is_ca());
    crt.verify_signature(Some(ca.public_key()))
        .expect("the serving certificate is signed by the caBundle CA");
    let sans: Vec<String> = crt
        .subject_alternative_name()
        .expect("SAN extension parses")
        .expect("SAN extension present")
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::DNSName(d) => Some((*d).to_owned()),
            _ => None,
        })
        .collect();
    assert!(sans.contains(&format!("{WEBHOOK}.{NAMESPACE}.svc")), "{sans:?}");
    assert!(sans.contains(&format!("{WEBHOOK}.{NAMESPACE}.svc.cluster.local")), "{sans:?}");
    assert!(sans.contains(&format!("{RECEIVERS}.{NAMESPACE}.svc")), "{sans:?}");

    // Each install generates its own CA.
    let again = render(mode("generated"));
    assert_ne!(
        webhook_client_configs(&again)[0].1["caBundle"],
        json!(bundles[0]),
        "a fresh render generates a fresh CA"
    );
}

#[test]
fn chart_provided_mode_uses_the_given_secret_and_ca_bundle() {
    // A real PEM CA: the one the generated mode makes.
    let generated = render(mode("generated"));
    let ca_bundle =
        webhook_client_configs(&generated)[0].1["caBundle"].as_str().expect("caBundle").to_owned();
    let values = json!({"webhook": {"certificates": {
        "mode": "provided", "existingSecret": "my-webhook-tls", "caBundle": ca_bundle}}});
    assert_eq!(kind_counts(&render(values.clone())), with_common(&[]), "no Secret or cert-manager");
    let r = render(values);
    for (name, cc) in webhook_client_configs(&r) {
        assert_eq!(cc["caBundle"].as_str(), Some(ca_bundle.as_str()), "{name}");
    }
    assert_eq!(tls_volume_secret(&r), "my-webhook-tls");
}

#[test]
fn chart_provided_mode_without_its_values_fails_with_a_clear_message() {
    let message = render_error(mode("provided"));
    assert!(message.contains("webhook.certificates.existingSecret is required"), "{message}");
    let message = render_error(
        json!({"webhook": {"certificates": {"mode": "provided", "existingSecret": "s"}}}),
    );
    assert!(message.contains("webhook.certificates.caBundle is required"), "{message}");
    let not_pem = B64.encode("not a certificate");
    let message = render_error(json!({"webhook": {"certificates": {
        "mode": "provided", "existingSecret": "s", "caBundle": not_pem}}}));
    assert!(message.contains("caBundle must be the base64 encoding of a PEM CA"), "{message}");
    let message = render_error(mode("self-signed-please"));
    assert!(message.contains("webhook.certificates.mode must be one of"), "{message}");
}

#[test]
fn chart_cert_manager_mode_issues_and_injects_the_ca() {
    let r = render(mode("cert-manager"));
    assert_eq!(
        kind_counts(&render(mode("cert-manager"))),
        with_common(&[("Certificate", 2), ("Issuer", 2)])
    );
    let serving = r.get("Certificate", WEBHOOK);
    assert_eq!(serving["apiVersion"], "cert-manager.io/v1");
    assert_eq!(serving["spec"]["secretName"], WEBHOOK_TLS_SECRET);
    assert_eq!(tls_volume_secret(&r), WEBHOOK_TLS_SECRET);
    assert_eq!(
        serving["spec"]["dnsNames"],
        json!([
            format!("{WEBHOOK}.{NAMESPACE}.svc"),
            format!("{WEBHOOK}.{NAMESPACE}.svc.cluster.local"),
            format!("{RECEIVERS}.{NAMESPACE}.svc"),
            format!("{RECEIVERS}.{NAMESPACE}.svc.cluster.local"),
        ])
    );
    assert_eq!(
        serving["spec"]["issuerRef"],
        json!({"name": "kuvryn-sync-ca", "kind": "Issuer", "group": "cert-manager.io"})
    );
    let ca = r.get("Certificate", "kuvryn-sync-ca");
    assert_eq!(ca["spec"]["isCA"], true);
    assert_eq!(ca["spec"]["issuerRef"]["name"], "kuvryn-sync-selfsigned");
    assert!(r.get("Issuer", "kuvryn-sync-selfsigned")["spec"]["selfSigned"].is_object());
    assert_eq!(
        r.get("Issuer", "kuvryn-sync-ca")["spec"]["ca"]["secretName"],
        ca["spec"]["secretName"]
    );

    let inject = format!("{NAMESPACE}/{WEBHOOK}");
    for (kind, name) in
        [("ValidatingWebhookConfiguration", VALIDATING), ("MutatingWebhookConfiguration", MUTATING)]
    {
        let cfg = r.get(kind, name);
        assert_eq!(
            cfg["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            inject.as_str(),
            "{name}"
        );
    }
    for (name, cc) in webhook_client_configs(&r) {
        assert!(cc.get("caBundle").is_none(), "{name}: cert-manager injects the CA");
    }

    let own = render(json!({"webhook": {"certificates": {"mode": "cert-manager",
        "certManager": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}}}}}));
    assert_eq!(kind_counts(&own), with_common(&[("Certificate", 1)]), "no chart-made issuers");
    assert_eq!(
        own.get("Certificate", WEBHOOK)["spec"]["issuerRef"],
        json!({"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"})
    );
}

#[test]
fn chart_metrics_services_are_optional() {
    let r = render(json!({}));
    assert_eq!(r.of_kind("Service").len(), 2, "only the webhook's two Services by default");
    let r = render(json!({"controller": {"metrics": {"service": {"enabled": true}}},
                          "webhook": {"metrics": {"service": {"enabled": true}}}}));
    for (svc, component) in [
        ("kuvryn-sync-controller-metrics", "controller"),
        ("kuvryn-sync-webhook-metrics", "webhook"),
    ] {
        let s = r.get("Service", svc);
        assert_eq!(
            s["spec"]["ports"],
            json!([{"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}])
        );
        assert_eq!(s["spec"]["selector"]["app.kubernetes.io/component"], component);
    }
}

#[test]
fn chart_crds_directory_is_not_templated() {
    // The real chart: nothing from crds/ in the render, and no CRD objects.
    let r = render(json!({}));
    assert!(
        r.manifests.keys().all(|k| k.starts_with("kuvryn-sync/templates/")),
        "{:?}",
        r.manifests.keys()
    );
    assert!(r.of_kind("CustomResourceDefinition").is_empty());

    // A copy with a file in crds/ that would fail if it were templated: Helm must leave it alone.
    let dir = tempfile::tempdir().expect("tempdir");
    let chart = dir.path().join("kuvryn-sync");
    copy_dir(&chart_dir(), &chart);
    std::fs::create_dir_all(chart.join("crds")).expect("crds dir");
    std::fs::write(
        chart.join("crds/zz-canary.yaml"),
        "# {{ fail \"crds/ must not be templated\" }}\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: canaries.test.kuvryn.io\n",
    )
    .expect("canary");
    let copy = render_chart_at(&chart, json!({})).expect("crds/ is not templated");
    assert!(copy.manifests.keys().all(|k| !k.contains("/crds/")), "{:?}", copy.manifests.keys());
    assert!(copy.of_kind("CustomResourceDefinition").is_empty());
    assert_eq!(kind_counts(&copy), kind_counts(&r));
}

#[test]
fn chart_registers_exactly_the_admission_paths_the_webhook_serves() {
    let served: BTreeSet<String> =
        kuvryn_sync_webhook::routes::admission_paths().map(str::to_owned).collect();
    for values in [json!({}), mode("generated"), mode("cert-manager")] {
        let r = render(values.clone());
        assert_eq!(
            registered_paths(&r),
            served,
            "the chart registers exactly the admission paths the webhook serves ({values})"
        );
    }
    // Both admission paths are served and registered.
    let all: BTreeSet<String> = ADMISSION_PATHS.iter().map(|p| (*p).to_owned()).collect();
    assert_eq!(served, all);
}

#[test]
fn chart_receivers_ingress_is_optional_and_routes_only_hooks() {
    let r = render(json!({}));
    assert!(r.of_kind("Ingress").is_empty(), "no Ingress by default");

    let values = json!({"webhook": {"receivers": {"ingress": {
        "enabled": true, "className": "nginx",
        "annotations": {"nginx.ingress.kubernetes.io/backend-protocol": "HTTPS"},
        "hosts": ["hooks.example.com"],
        "tls": [{"secretName": "hooks-tls", "hosts": ["hooks.example.com"]}],
    }}}});
    let r = render(values);
    let ingress = r.get("Ingress", RECEIVERS);
    assert_eq!(ingress["apiVersion"], "networking.k8s.io/v1");
    assert_eq!(ingress["metadata"]["namespace"], NAMESPACE);
    assert_eq!(ingress["spec"]["ingressClassName"], "nginx");
    assert_eq!(
        ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/backend-protocol"],
        "HTTPS"
    );
    assert_eq!(
        ingress["spec"]["tls"],
        json!([{"secretName": "hooks-tls", "hosts": ["hooks.example.com"]}])
    );
    assert_eq!(
        ingress["spec"]["rules"],
        json!([{"host": "hooks.example.com", "http": {"paths": [{
            "path": "/hooks/", "pathType": "Prefix",
            "backend": {"service": {"name": RECEIVERS, "port": {"name": "https"}}},
        }]}}]),
        "only the receiver paths, only on the receivers' Service"
    );
    // Every receiver path is under the Ingress's prefix; no admission path is.
    for route in kuvryn_sync_webhook::routes::ROUTES {
        use kuvryn_sync_webhook::routes::RouteKind;
        match route.kind {
            RouteKind::Receiver => assert!(route.path.starts_with("/hooks/"), "{route:?}"),
            RouteKind::Admission => assert!(!route.path.starts_with("/hooks/"), "{route:?}"),
            RouteKind::Health => {}
        }
    }

    let message = render_error(
        json!({"webhook": {"receivers": {"ingress": {"enabled": true, "hosts": []}}}}),
    );
    assert!(message.contains("webhook.receivers.ingress.hosts"), "{message}");
}

#[test]
fn chart_webhook_pod_disruption_budget_keeps_one_replica_when_there_are_several() {
    let r = render(json!({}));
    let pdb = r.get("PodDisruptionBudget", WEBHOOK);
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert_eq!(pdb["metadata"]["namespace"], NAMESPACE);
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    let deployment = r.get("Deployment", WEBHOOK);
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"], deployment["spec"]["selector"]["matchLabels"],
        "the budget covers exactly the webhook Pods"
    );

    for values in [
        json!({"webhook": {"replicas": 1}}),
        json!({"webhook": {"podDisruptionBudget": {"enabled": false}}}),
    ] {
        let r = render(values.clone());
        assert!(r.of_kind("PodDisruptionBudget").is_empty(), "{values}");
    }
    let three =
        render(json!({"webhook": {"replicas": 3, "podDisruptionBudget": {"minAvailable": 2}}}));
    assert_eq!(three.get("PodDisruptionBudget", WEBHOOK)["spec"]["minAvailable"], 2);
}

#[test]
fn chart_admission_client_ca_is_mounted_and_passed_when_named() {
    let r = render(json!({}));
    assert!(args(&r, WEBHOOK).iter().all(|a| !a.starts_with("--admission-client-ca")));

    let r =
        render(json!({"webhook": {"admissionClientCA": {"configMapName": "apiserver-client-ca"}}}));
    assert!(
        args(&r, WEBHOOK).contains(
            &"--admission-client-ca=/etc/kuvryn-sync/admission-client-ca/ca.crt".to_owned()
        ),
        "{:?}",
        args(&r, WEBHOOK)
    );
    let pod = &r.get("Deployment", WEBHOOK)["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "admission-client-ca")
        .expect("client CA volume")
        .clone();
    assert_eq!(
        volume["configMap"],
        json!({"name": "apiserver-client-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]})
    );
    let mount = container(&r, WEBHOOK)["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["name"] == "admission-client-ca")
        .expect("client CA mount")
        .clone();
    assert_eq!(mount["mountPath"], "/etc/kuvryn-sync/admission-client-ca");
    assert_eq!(mount["readOnly"], true);
}

#[test]
fn chart_monitoring_add_ons_are_opt_in() {
    let r = render(json!({}));
    assert!(r.of_kind("PrometheusRule").is_empty(), "no PrometheusRule by default");
    assert!(
        r.of_kind("ConfigMap").iter().all(|c| c["metadata"]["name"] != "kuvryn-sync-dashboard")
    );
    let r = render(
        json!({"metrics": {"prometheusRule": {"enabled": true, "labels": {"release": "prom"}},
                                      "dashboard": {"enabled": true}}}),
    );
    let rule = r.get("PrometheusRule", "kuvryn-sync");
    assert_eq!(rule["metadata"]["labels"]["release"], "prom");
    let alerts: Vec<&str> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert!(alerts.contains(&"KuvrynSyncApplicationsNotReady"), "{alerts:?}");
    let summary = rule["spec"]["groups"][0]["rules"][0]["annotations"]["summary"].as_str();
    assert!(
        summary.is_some_and(|s| s.contains("{{ $labels.reason }}")),
        "Prometheus templates survive Helm: {summary:?}"
    );
    let dashboard = r.get("ConfigMap", "kuvryn-sync-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: Value =
        serde_json::from_str(dashboard["data"]["kuvryn-sync.json"].as_str().expect("data"))
            .expect("the dashboard is JSON");
    assert_eq!(json["uid"], "kuvryn-sync");
    assert!(json["panels"].as_array().is_some_and(|p| p.len() > 10));
}

#[test]
fn chart_label_shards_run_one_deployment_per_shard_beside_the_unlabelled_one() {
    let r = render(json!({"controller": {"shards": ["eu", "us-1"], "replicas": 2}}));
    assert_eq!(kind_counts(&r)["Deployment"], 4, "webhook, main controller and two shards");
    let main = args(&r, CONTROLLER);
    assert!(main.contains(&"--shard-unlabelled".to_owned()), "{main:?}");
    assert!(!main.iter().any(|a| a.starts_with("--shard=")), "{main:?}");
    for shard in ["eu", "us-1"] {
        let name = format!("{CONTROLLER}-shard-{shard}");
        let a = args(&r, &name);
        assert_eq!(
            a.iter().filter(|x| x.starts_with("--shard")).collect::<Vec<_>>(),
            [&format!("--shard={shard}")]
        );
        let deploy = r.get("Deployment", &name);
        assert_eq!(deploy["spec"]["replicas"], 2);
        assert_eq!(deploy["spec"]["selector"]["matchLabels"]["sync.kuvryn.io/shard"], shard);
        assert_eq!(deploy["spec"]["template"]["metadata"]["labels"]["sync.kuvryn.io/shard"], shard);
        // Same component: the NetworkPolicy, metrics Service and PodMonitor cover shard pods.
        assert_eq!(
            deploy["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"],
            "controller"
        );
    }
    // Without shards the controller is unsharded, as before.
    let plain = args(&render(json!({})), CONTROLLER);
    assert!(!plain.iter().any(|a| a.starts_with("--shard")), "{plain:?}");
}

#[test]
fn chart_automatic_shards_and_bad_shard_names() {
    let r = render(json!({"controller": {"automaticShards": 3, "replicas": 3}}));
    assert_eq!(kind_counts(&r)["Deployment"], 2);
    assert!(args(&r, CONTROLLER).contains(&"--shards=3".to_owned()));
    let both = render_error(json!({"controller": {"shards": ["eu"], "automaticShards": 3}}));
    assert!(both.contains("cannot be combined"), "{both}");
    let bad = render_error(json!({"controller": {"shards": ["EU_1"]}}));
    assert!(bad.contains("shards"), "{bad}");
}
