//! `ksync docs api` prints the API reference from the CRD schemas, and `docs/api.md` is exactly
//! that output.

mod common;

#[test]
fn docs_api_md_is_exactly_what_ksync_docs_api_prints() {
    common::assert_committed_output("docs/api.md", &["docs", "api"]);
}

#[test]
fn the_reference_covers_every_kind_and_field() {
    let doc = common::ksync(&["docs", "api"]);
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
