//! What the controller keeps of a live object it listed or watched: everything a plan, a health
//! check, a prune and a diagnosis read, less two parts none of them read which make an object
//! several times larger. The controller holds every managed object in memory
//! (`kuvryn_sync_apply::shared_inventory`), so these parts are what its memory grows with.
//!
//! - **`metadata.managedFields`**: every entry keeps its `manager`, `operation` and
//!   `subresource` (what [`imperative_managers`](super::imperative_managers) reads); only the
//!   entries of the Application's own field manager by `Apply` keep their `apiVersion` and
//!   `fieldsV1` (what [`apply_fingerprint`](super::apply_fingerprint) hashes). The other
//!   managers' field sets, `fieldsType` and `time` go.
//! - **the annotation [`LAST_APPLIED`]**: the copy of the whole object a client-side
//!   `kubectl apply` writes. [`changed_fields`](super::changed_fields) does not compare it:
//!   server-side apply rewrites it from the applied body on objects that carry it, so it is
//!   never a change of the desired state.
//!
//! Everything else (spec, status, labels, the other annotations, owner references) is kept:
//! HealthCheck rules may read any of it.

use serde_json::Value;

/// The annotation a client-side `kubectl apply` records the applied object in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Trim `object` in place to what the controller reads of it, `manager` being the field
/// manager of the Application it belongs to (see the module documentation).
pub fn trim_live(object: &mut Value, manager: &str) {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(Value::Object(annotations)) = metadata.get_mut("annotations") {
        // The map stays, empty or not: an object without annotations differs from one whose
        // only annotation is ignored.
        annotations.remove(LAST_APPLIED);
    }
    if let Some(Value::Array(entries)) = metadata.get_mut("managedFields") {
        for entry in entries.iter_mut().filter_map(Value::as_object_mut) {
            let own = entry.get("manager").and_then(Value::as_str) == Some(manager)
                && entry.get("operation").and_then(Value::as_str) == Some("Apply");
            entry.retain(|key, _| match key.as_str() {
                "manager" | "operation" | "subresource" => true,
                "apiVersion" | "fieldsV1" => own,
                _ => false,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kstatus;
    use crate::plan::{apply_fingerprint, changed_fields, imperative_managers};

    const MANAGER: &str = "kuvryn-sync/team/web";

    /// A Deployment as the API server lists it: applied by the Application, its status written
    /// by the Deployment controller, one field edited by hand, once applied by `kubectl apply`.
    fn listed() -> Value {
        let entry = |manager: &str, operation: &str, subresource: Option<&str>, fields: Value| {
            let mut entry = json!({"manager": manager, "operation": operation,
                "apiVersion": "apps/v1", "time": "2026-12-05T01:00:00Z",
                "fieldsType": "FieldsV1", "fieldsV1": fields});
            if let Some(subresource) = subresource {
                entry["subresource"] = json!(subresource);
            }
            entry
        };
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "team", "uid": "u-1", "resourceVersion": "42",
                "generation": 3,
                "labels": {"sync.kuvryn.io/application": "web", "app": "web"},
                "annotations": {
                    "deployment.kubernetes.io/revision": "2",
                    "sync.kuvryn.io/revision": "web-abc-1",
                    LAST_APPLIED: "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\"}",
                },
                "managedFields": [
                    entry(MANAGER, "Apply", None,
                          json!({"f:spec": {"f:replicas": {}, "f:template": {}}})),
                    entry("kube-controller-manager", "Update", Some("status"),
                          json!({"f:status": {"f:conditions": {}, "f:replicas": {}}})),
                    entry("kubectl-edit", "Update", None,
                          json!({"f:spec": {"f:minReadySeconds": {}}})),
                    entry("kubectl-client-side-apply", "Update", None,
                          json!({"f:metadata": {"f:annotations": {}}})),
                ],
            },
            "spec": {"replicas": 2, "minReadySeconds": 5,
                     "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "web:2"}]}}},
            "status": {"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2,
                       "readyReplicas": 2, "availableReplicas": 2,
                       "conditions": [{"type": "Available", "status": "True"},
                                      {"type": "Progressing", "status": "True",
                                       "reason": "NewReplicaSetAvailable"}]},
        })
    }

    fn trimmed() -> Value {
        let mut object = listed();
        trim_live(&mut object, MANAGER);
        object
    }

    #[test]
    fn keeps_what_plan_health_and_prune_read() {
        let (full, trimmed) = (listed(), trimmed());
        let body = json!({"spec": {"replicas": 2}});
        assert!(apply_fingerprint(&full, &body, MANAGER).is_some());
        assert_eq!(
            apply_fingerprint(&trimmed, &body, MANAGER),
            apply_fingerprint(&full, &body, MANAGER),
            "the dry-run memo's fingerprint"
        );
        assert_eq!(imperative_managers(&trimmed), imperative_managers(&full));
        assert_eq!(kstatus::health(&trimmed), kstatus::health(&full));
        assert_eq!(changed_fields(&trimmed, &full), Vec::<String>::new(), "no change to plan");
        for part in ["spec", "status", "apiVersion", "kind"] {
            assert_eq!(trimmed[part], full[part], "{part}");
        }
        for field in ["name", "namespace", "uid", "resourceVersion", "generation", "labels"] {
            assert_eq!(trimmed["metadata"][field], full["metadata"][field], "{field}");
        }
        let annotations = &trimmed["metadata"]["annotations"];
        assert_eq!(annotations["deployment.kubernetes.io/revision"], "2", "read by diagnosis");
        assert_eq!(annotations["sync.kuvryn.io/revision"], "web-abc-1", "read by the plan");
    }

    #[test]
    fn drops_other_managers_field_sets_times_and_the_last_applied_copy() {
        let trimmed = trimmed();
        let entries = trimmed["metadata"]["managedFields"].as_array().expect("entries");
        assert_eq!(entries.len(), 4, "every manager is still named");
        assert_eq!(
            entries[0],
            json!({"manager": MANAGER, "operation": "Apply", "apiVersion": "apps/v1",
                   "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {}}}})
        );
        assert_eq!(
            entries[1],
            json!({"manager": "kube-controller-manager", "operation": "Update",
                   "subresource": "status"})
        );
        assert_eq!(entries[2], json!({"manager": "kubectl-edit", "operation": "Update"}));
        assert!(trimmed["metadata"]["annotations"].get(LAST_APPLIED).is_none());
        let size = |value: &Value| value.to_string().len();
        assert!(size(&trimmed) < size(&listed()));
        let mut again = trimmed.clone();
        trim_live(&mut again, MANAGER);
        assert_eq!(again, trimmed, "trimming twice changes nothing");
    }

    #[test]
    fn another_applications_object_keeps_no_field_set() {
        let mut object = listed();
        trim_live(&mut object, "kuvryn-sync/team/other");
        let entries = object["metadata"]["managedFields"].as_array().expect("entries");
        assert!(entries.iter().all(|e| e.get("fieldsV1").is_none()));
    }
}
