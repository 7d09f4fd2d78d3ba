//! Unit-level checks of managedFields bookkeeping.

use ksync_sandbox::fields::{self, Who};
use ksync_sandbox::schema::Node;
use serde_json::json;

#[test]
fn create_records_an_update_entry() {
    let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"app": "web"}}, "data": {"k": "v"}});
    let who = Who {
        manager: "kubectl-create",
        api_version: "v1",
        subresource: "",
        now: "2026-01-01T00:00:00Z",
        custom: false,
    };
    fields::record_update(None, &mut obj, Node::builtin("", "v1", "ConfigMap"), &who);
    let mf = &obj["metadata"]["managedFields"][0];
    assert_eq!(mf["manager"], "kubectl-create", "{obj:#}");
    assert_eq!(
        mf["fieldsV1"],
        json!({"f:data": {".": {}, "f:k": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}})
    );
}
