use super::*;
use serde_json::json;

const TARGET: Target<'static> =
    Target { application: "web", application_namespace: "team", destination_namespace: "web" };

fn served(gk: &GroupKind) -> Option<Scope> {
    match (gk.group.as_str(), gk.kind.as_str()) {
        ("", "ConfigMap" | "Secret" | "Service") | ("apps", "Deployment") => {
            Some(Scope::Namespaced)
        }
        ("", "Namespace") | ("rbac.authorization.k8s.io", "ClusterRole") => Some(Scope::Cluster),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => Some(Scope::Cluster),
        _ => None,
    }
}

fn rendered(objects: Vec<Value>) -> Vec<Rendered> {
    objects
        .into_iter()
        .enumerate()
        .map(|(n, object)| Rendered { origin: format!("app.yaml#{n}"), object })
        .collect()
}

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}})
}

fn run(objects: Vec<Value>) -> Result<DesiredState, Refusal> {
    normalise(&rendered(objects), served, TARGET)
}

fn errors(objects: Vec<Value>) -> Vec<String> {
    run(objects).expect_err("refused").errors.iter().map(ToString::to_string).collect()
}

#[test]
fn namespaced_objects_get_the_destination_and_cluster_scoped_ones_keep_none() {
    let state = run(vec![
        config_map("settings"),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api", "namespace": "web"}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "web", "namespace": "x"}}),
    ])
    .expect("valid");
    let placed: Vec<(String, Option<String>)> = state
        .objects
        .iter()
        .map(|o| (o.key.to_string(), o.object["metadata"]["namespace"].as_str().map(str::to_owned)))
        .collect();
    assert_eq!(
        placed,
        vec![
            ("ConfigMap web/settings".to_owned(), Some("web".to_owned())),
            ("Namespace web".to_owned(), None),
            ("Service web/api".to_owned(), Some("web".to_owned())),
        ]
    );
}

#[test]
fn our_labels_replace_what_the_manifest_says() {
    let mut cm = config_map("settings");
    cm["metadata"]["labels"] = json!({"team": "a", keys::APPLICATION: "someone-else"});
    let state = run(vec![cm]).expect("valid");
    let labels = &state.objects[0].object["metadata"]["labels"];
    assert_eq!(labels["team"], "a");
    assert_eq!(labels[keys::APPLICATION], "web");
    assert_eq!(labels[keys::APPLICATION_NAMESPACE], "team");
    assert!(state.objects[0].object["metadata"]["annotations"][keys::REVISION].is_null());
    let applied = state.objects[0].for_revision("web-abc123");
    assert_eq!(applied["metadata"]["annotations"][keys::REVISION], "web-abc123");
}

#[test]
fn every_rule_is_a_validation_failure_and_all_are_reported_at_once() {
    // (objects, the messages expected, in order)
    let hooked = |value: &str| {
        let mut cm = config_map("job");
        cm["metadata"]["annotations"] = json!({keys::HOOK: value});
        cm
    };
    let waved = |value: &str| {
        let mut cm = config_map("w");
        cm["metadata"]["annotations"] = json!({keys::SYNC_WAVE: value});
        cm
    };
    let cases: Vec<(Vec<Value>, Vec<&str>)> = vec![
        (vec![json!("text")], vec!["app.yaml#0: not an object"]),
        (
            vec![json!({"kind": "ConfigMap", "metadata": {"name": "x"}})],
            vec!["apiVersion is required"],
        ),
        (vec![json!({"apiVersion": "v1", "metadata": {"name": "x"}})], vec!["kind is required"]),
        (
            vec![json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})],
            vec!["metadata.name is required"],
        ),
        (
            vec![
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "kube-system"}}),
            ],
            vec![
                "ConfigMap kube-system/x names namespace \"kube-system\", but this Application deploys only to \"web\"",
            ],
        ),
        (
            vec![config_map("a"), config_map("a")],
            vec!["app.yaml#1: ConfigMap web/a is declared twice (first in app.yaml#0)"],
        ),
        (
            vec![hooked("PreSync")],
            vec![
                "has sync.kuvryn.io/hook: \"PreSync\"; allowed values are pre-sync, post-sync and skip",
            ],
        ),
        (
            vec![waved("first")],
            vec!["has sync.kuvryn.io/sync-wave: \"first\"; a sync wave is an integer"],
        ),
        (
            vec![
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
            ],
            vec![
                "kind Widget.example.com is not served by the API server and no CustomResourceDefinition",
            ],
        ),
        (
            vec![hooked("later"), config_map("b"), config_map("b"), waved("1.5")],
            vec!["hook: \"later\"", "declared twice", "sync-wave: \"1.5\""],
        ),
    ];
    for (objects, expected) in cases {
        let found = errors(objects);
        assert_eq!(found.len(), expected.len(), "{found:?}");
        for (message, part) in found.iter().zip(&expected) {
            assert!(message.contains(part), "{message:?} should contain {part:?}");
        }
    }
}

#[test]
fn hooks_and_waves_are_read_and_skipped_objects_are_left_out() {
    let annotated = |name: &str, annotations: Value| {
        let mut cm = config_map(name);
        cm["metadata"]["annotations"] = annotations;
        cm
    };
    let state = run(vec![
        annotated("migrate", json!({keys::HOOK: "pre-sync", keys::SYNC_WAVE: "-1"})),
        annotated("smoke", json!({keys::HOOK: "post-sync"})),
        annotated("manual", json!({keys::HOOK: "skip"})),
        annotated("late", json!({keys::SYNC_WAVE: " 5 "})),
        config_map("plain"),
    ])
    .expect("valid");
    let staged: Vec<(&str, Stage, i64)> =
        state.objects.iter().map(|o| (o.key.name.as_str(), o.stage, o.wave)).collect();
    assert_eq!(
        staged,
        vec![
            ("late", Stage::Main, 5),
            ("migrate", Stage::PreSync, -1),
            ("plain", Stage::Main, 0),
            ("smoke", Stage::PostSync, 0),
        ]
    );
}

#[test]
fn custom_resources_take_their_scope_from_a_crd_rendered_alongside() {
    let crd = |scope: &str| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "widgets.example.com"},
               "spec": {"group": "example.com", "scope": scope,
                        "names": {"kind": "Widget", "plural": "widgets"}}})
    };
    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                        "metadata": {"name": "w", "namespace": "web"}});
    let namespaced = run(vec![crd("Namespaced"), widget.clone()]).expect("valid");
    assert_eq!(namespaced.objects[1].key.to_string(), "Widget.example.com web/w");
    // The rendered CRD wins over discovery: a cluster-scoped Widget keeps no namespace.
    let cluster = run(vec![crd("Cluster"), widget]).expect("valid");
    assert_eq!(cluster.objects[1].key.to_string(), "Widget.example.com w");
    assert!(cluster.objects[1].object["metadata"]["namespace"].is_null());
}

#[test]
fn the_hash_ignores_file_and_key_order_and_follows_content() {
    let a = config_map("a");
    let b = json!({"data": {"x": "2", "a": "1"}, "metadata": {"name": "b"}, "kind": "ConfigMap", "apiVersion": "v1"});
    let b_reordered = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"a": "1", "x": "2"}});
    let first = run(vec![a.clone(), b]).expect("valid").hash;
    let second = run(vec![b_reordered, a.clone()]).expect("valid").hash;
    assert_eq!(first, second);
    assert!(first.starts_with("sha256:") && first.len() == "sha256:".len() + 64, "{first}");
    let mut changed = a;
    changed["data"]["a"] = json!("2");
    let third = run(vec![changed, config_map("b")]).expect("valid").hash;
    assert_ne!(first, third);
    // The destination is part of the state: the same files for another Application differ.
    let elsewhere = normalise(
        &rendered(vec![config_map("a")]),
        served,
        Target { destination_namespace: "other", ..TARGET },
    )
    .expect("valid")
    .hash;
    assert_ne!(run(vec![config_map("a")]).expect("valid").hash, elsewhere);
}

#[test]
fn group_of_reads_the_api_version() {
    for (api_version, group) in
        [("v1", ""), ("apps/v1", "apps"), ("example.com/v1beta1", "example.com")]
    {
        assert_eq!(group_of(api_version), group);
    }
}

#[test]
fn a_kind_not_served_alone_is_a_plan_failure_and_with_invalid_objects_a_validation_failure() {
    let gadget = json!({"apiVersion": "nowhere.example.com/v1", "kind": "Gadget",
                        "metadata": {"name": "g"}});
    let unserved = run(vec![config_map("a"), gadget.clone()]).expect_err("refused");
    assert_eq!(unserved.reason(), FailureReason::PlanFailure);
    let both = run(vec![config_map("a"), config_map("a"), gadget]).expect_err("refused");
    assert_eq!(both.reason(), FailureReason::ValidationFailure);
    let invalid = run(vec![config_map("a"), config_map("a")]).expect_err("refused");
    assert_eq!(invalid.reason(), FailureReason::ValidationFailure);
}
