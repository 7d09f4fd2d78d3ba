//! `ksync crds` prints every CRD from the Rust types, and the chart ships exactly that output.

use std::path::PathBuf;
use std::process::Command;

const CHART_CRDS: &str = "charts/kuvryn-sync/crds/kuvryn-sync-crds.yaml";

fn ksync_crds() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ksync")).arg("crds").output().expect("run ksync");
    assert!(out.status.success(), "ksync crds failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn chart_crds_are_exactly_what_ksync_crds_prints() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(CHART_CRDS);
    let shipped = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{} must exist: {err}", path.display()));
    let generated = ksync_crds();
    if shipped != generated {
        let line = shipped
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(|| "length".to_owned(), |n| format!("line {}", n + 1));
        panic!(
            "{CHART_CRDS} is stale (first difference at {line}); regenerate it with:\n  \
             cargo run -p ksync -- crds > {CHART_CRDS}"
        );
    }
}

#[test]
fn ksync_crds_prints_all_six_kinds_in_the_kuvryn_category() {
    let yaml = ksync_crds();
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
    serde_yaml::from_str(doc).expect("CRD YAML parses")
}
