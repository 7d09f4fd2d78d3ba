//! `ksync docs api` prints the API reference from the CRD schemas, and `docs/api.md` is exactly
//! that output.

use std::path::PathBuf;
use std::process::Command;

const API_DOC: &str = "docs/api.md";

fn ksync_docs_api() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ksync"))
        .args(["docs", "api"])
        .output()
        .expect("run ksync");
    assert!(
        out.status.success(),
        "ksync docs api failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn docs_api_md_is_exactly_what_ksync_docs_api_prints() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(API_DOC);
    let shipped = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{} must exist: {err}", path.display()));
    let generated = ksync_docs_api();
    if shipped != generated {
        let line = shipped
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(|| "length".to_owned(), |n| format!("line {}", n + 1));
        panic!(
            "{API_DOC} is stale (first difference at {line}); regenerate it with:\n  \
             cargo run -p ksync -- docs api > {API_DOC}"
        );
    }
}

#[test]
fn the_reference_covers_every_kind_and_field() {
    let doc = ksync_docs_api();
    for kind in
        ["Repository", "Application", "Revision", "HealthCheck", "NotificationSink", "ImagePolicy"]
    {
        assert!(doc.contains(&format!("\n## {kind}\n")), "no section for {kind}");
        assert!(doc.contains(&format!("\n### {kind} fields\n")), "no field table for {kind}");
    }
    let row = doc
        .lines()
        .find(|line| line.starts_with("| `spec.sync.automatic` |"))
        .expect("a row for spec.sync.automatic");
    assert!(row.contains("| boolean |") && row.contains("`false`"), "{row}");
    let row = doc
        .lines()
        .find(|line| line.starts_with("| `spec.pollInterval` |"))
        .expect("a row for spec.pollInterval");
    assert!(row.contains("matches"), "the duration pattern is listed: {row}");
    assert!(!doc.contains("| `status.sync` | object |  |  |  | Sync state. |"));
}
