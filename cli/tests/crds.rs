//! `ksync crds` prints every CRD from the Rust types, and the chart ships exactly that output.

mod common;

#[test]
fn chart_crds_are_exactly_what_ksync_crds_prints() {
    common::assert_committed_output("charts/kuvryn-sync/crds/kuvryn-sync-crds.yaml", &["crds"]);
}

#[test]
fn ksync_crds_prints_all_six_kinds_in_the_kuvryn_category() {
    let yaml = common::ksync(&["crds"]);
    let docs: Vec<serde_json::Value> = yaml
        .split("\n---\n")
        .filter(|doc| doc.contains("kind: CustomResourceDefinition"))
        .map(parse_yaml)
        .collect();
    let mut kinds: Vec<(String, String)> = docs
        .iter()
        .map(|d| {
            (
                d["spec"]["names"]["kind"].as_str().expect("kind").to_owned(),
                d["spec"]["scope"].as_str().expect("scope").to_owned(),
            )
        })
        .collect();
    kinds.sort();
    let expected = [
        ("Application", "Namespaced"),
        ("HealthCheck", "Cluster"),
        ("ImagePolicy", "Namespaced"),
        ("NotificationSink", "Namespaced"),
        ("Repository", "Namespaced"),
        ("Revision", "Namespaced"),
    ];
    let expected: Vec<(String, String)> =
        expected.iter().map(|(k, s)| ((*k).to_owned(), (*s).to_owned())).collect();
    assert_eq!(kinds, expected);
    for doc in &docs {
        assert_eq!(doc["spec"]["group"], "sync.kuvryn.io");
        assert_eq!(doc["spec"]["names"]["categories"][0], "kuvryn");
        assert_eq!(doc["spec"]["versions"][0]["name"], "v1alpha1");
    }
}

fn parse_yaml(doc: &str) -> serde_json::Value {
    kuvryn_sync_core::yaml::document(doc).expect("CRD YAML parses")
}
