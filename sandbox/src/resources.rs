//! The resource registry: built-in kinds the sandbox serves and the CRDs created at run time.

use kube::core::cel::CompiledSchema;
use serde_json::{Value, json};

/// One served resource (a group/version/plural) and what discovery says about it.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Has a `/status` subresource.
    pub status: bool,
    /// Has a `/scale` subresource: (specReplicasPath, statusReplicasPath, labelSelectorPath).
    pub scale: Option<(String, String, Option<String>)>,
    /// `metadata.generation` is maintained (bumped on spec changes).
    pub generation: bool,
    /// Only `create` (the access reviews).
    pub create_only: bool,
    /// Served from a CustomResourceDefinition.
    pub custom: bool,
    /// This version is the CRD's storage version (or the only version of a built-in).
    pub storage: bool,
    /// CRD `additionalPrinterColumns` for this version.
    pub printer_columns: Vec<Value>,
    /// CRD `openAPIV3Schema` for this version (shared: a ResourceInfo is cloned per request).
    pub schema: Option<std::sync::Arc<Value>>,
    /// The schema's CEL rules, compiled; `None` without rules.
    pub cel: Option<std::sync::Arc<kube::core::cel::CompiledSchema>>,
    /// CRD `selectableFields` JSON paths.
    pub selectable_fields: Vec<String>,
}

impl ResourceInfo {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The storage key shared by every version of the resource.
    pub fn store_key(&self) -> String {
        if crate::convert::is_events_api(&self.group, &self.plural) {
            // Same storage as core Events.
            return "/events".to_string();
        }
        format!("{}/{}", self.group, self.plural)
    }

    pub fn verbs(&self) -> Vec<&'static str> {
        if self.create_only {
            vec!["create"]
        } else {
            vec!["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        }
    }

    /// An `APIResource` entry for `/api/v1` or `/apis/G/V`, followed by its subresources.
    pub fn discovery_entries(&self) -> Vec<Value> {
        let mut main = json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": self.verbs(),
        });
        if !self.short_names.is_empty() {
            main["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            main["categories"] = json!(self.categories);
        }
        let mut out = vec![main];
        if self.status {
            out.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if self.group.is_empty() && self.plural == "pods" {
            out.push(json!({"name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"]}));
        }
        if self.scale.is_some() {
            out.push(json!({
                "name": format!("{}/scale", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
        out
    }
}

struct B<'a> {
    g: &'a str,
    v: &'a str,
    plural: &'a str,
    kind: &'a str,
    ns: bool,
    short: &'a [&'a str],
    status: bool,
    generation: bool,
}

fn builtin(b: B<'_>) -> ResourceInfo {
    let all = matches!(
        b.plural,
        "pods"
            | "services"
            | "deployments"
            | "replicasets"
            | "statefulsets"
            | "daemonsets"
            | "jobs"
            | "cronjobs"
    );
    let scale = match b.plural {
        "deployments" | "replicasets" | "statefulsets" | "replicationcontrollers" => Some((
            ".spec.replicas".to_string(),
            ".status.replicas".to_string(),
            Some(".status.selector".to_string()),
        )),
        _ => None,
    };
    ResourceInfo {
        group: b.g.into(),
        version: b.v.into(),
        plural: b.plural.into(),
        singular: b.kind.to_lowercase(),
        kind: b.kind.into(),
        namespaced: b.ns,
        short_names: b.short.iter().map(|s| s.to_string()).collect(),
        categories: if all { vec!["all".to_string()] } else { vec![] },
        status: b.status,
        scale,
        generation: b.generation,
        create_only: matches!(
            b.plural,
            "selfsubjectaccessreviews"
                | "subjectaccessreviews"
                | "selfsubjectreviews"
                | "selfsubjectrulesreviews"
        ),
        custom: false,
        storage: true,
        printer_columns: vec![],
        schema: None,
        cel: None,
        selectable_fields: vec![],
    }
}

/// The built-in kinds the sandbox serves.
pub fn builtins() -> Vec<ResourceInfo> {
    #[rustfmt::skip]
    #[allow(clippy::type_complexity)]
    let table: &[(&str, &str, &str, &str, bool, &[&str], bool, bool)] = &[
        ("", "v1", "namespaces", "Namespace", false, &["ns"], true, false),
        ("", "v1", "configmaps", "ConfigMap", true, &["cm"], false, false),
        ("", "v1", "secrets", "Secret", true, &[], false, false),
        ("", "v1", "serviceaccounts", "ServiceAccount", true, &["sa"], false, false),
        ("", "v1", "services", "Service", true, &["svc"], true, false),
        ("", "v1", "endpoints", "Endpoints", true, &["ep"], false, false),
        ("", "v1", "replicationcontrollers", "ReplicationController", true, &["rc"], true, true),
        ("", "v1", "pods", "Pod", true, &["po"], true, false),
        ("", "v1", "nodes", "Node", false, &["no"], true, false),
        ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", true, &["pvc"], true, false),
        ("", "v1", "persistentvolumes", "PersistentVolume", false, &["pv"], true, false),
        ("", "v1", "resourcequotas", "ResourceQuota", true, &["quota"], true, false),
        ("", "v1", "events", "Event", true, &["ev"], false, false),
        ("events.k8s.io", "v1", "events", "Event", true, &["ev"], false, false),
        ("apps", "v1", "deployments", "Deployment", true, &["deploy"], true, true),
        ("apps", "v1", "replicasets", "ReplicaSet", true, &["rs"], true, true),
        ("apps", "v1", "statefulsets", "StatefulSet", true, &["sts"], true, true),
        ("apps", "v1", "daemonsets", "DaemonSet", true, &["ds"], true, true),
        ("apps", "v1", "controllerrevisions", "ControllerRevision", true, &[], false, false),
        ("batch", "v1", "jobs", "Job", true, &[], true, true),
        ("batch", "v1", "cronjobs", "CronJob", true, &["cj"], true, true),
        ("networking.k8s.io", "v1", "ingresses", "Ingress", true, &["ing"], true, true),
        ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", true, &["pdb"], true, true),
        ("rbac.authorization.k8s.io", "v1", "roles", "Role", true, &[], false, false),
        ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", true, &[], false, false),
        ("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", false, &[], false, false),
        ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", false, &[], false, false),
        ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", false, &[], false, true),
        ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", false, &[], false, true),
        ("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", false, &["crd", "crds"], true, true),
        ("coordination.k8s.io", "v1", "leases", "Lease", true, &[], false, false),
        ("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", false, &[], false, false),
        ("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", false, &[], false, false),
        ("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", false, &[], false, false),
        ("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", false, &[], false, false),
    ];
    table
        .iter()
        .map(|&(g, v, plural, kind, ns, short, status, generation)| {
            builtin(B { g, v, plural, kind, ns, short, status, generation })
        })
        .collect()
}

/// The resources a CustomResourceDefinition serves (one per served version).
pub fn from_crd(crd: &Value) -> Vec<ResourceInfo> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default().to_string();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or_default().to_string();
    let kind = names["kind"].as_str().unwrap_or_default().to_string();
    let singular =
        names["singular"].as_str().map(str::to_string).unwrap_or_else(|| kind.to_lowercase());
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    let mut out = vec![];
    for ver in spec["versions"].as_array().into_iter().flatten() {
        if ver["served"].as_bool() == Some(false) {
            continue;
        }
        let sub = &ver["subresources"];
        let scale = sub.get("scale").filter(|s| s.is_object()).map(|s| {
            (
                s["specReplicasPath"].as_str().unwrap_or(".spec.replicas").to_string(),
                s["statusReplicasPath"].as_str().unwrap_or(".status.replicas").to_string(),
                s["labelSelectorPath"].as_str().map(str::to_string),
            )
        });
        out.push(ResourceInfo {
            group: group.clone(),
            version: ver["name"].as_str().unwrap_or_default().to_string(),
            plural: plural.clone(),
            singular: singular.clone(),
            kind: kind.clone(),
            namespaced,
            short_names: strs(&names["shortNames"]),
            categories: strs(&names["categories"]),
            status: sub.get("status").is_some_and(|s| s.is_object()),
            scale,
            generation: true,
            create_only: false,
            custom: true,
            storage: ver["storage"].as_bool().unwrap_or(false),
            printer_columns: ver["additionalPrinterColumns"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
            schema: ver.pointer("/schema/openAPIV3Schema").cloned().map(std::sync::Arc::new),
            cel: ver.pointer("/schema/openAPIV3Schema").and_then(compile_rules),
            selectable_fields: ver["selectableFields"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| {
                    f["jsonPath"].as_str().map(|s| s.trim_start_matches('.').to_string())
                })
                .collect(),
        });
    }
    out
}

/// The `x-kubernetes-validations` rules of a CRD version's schema, compiled once when the CRD
/// is read (as kube-apiserver compiles them when it loads the CRD), not on every write; `None`
/// when the schema has no rule, so writes skip CEL altogether.
fn compile_rules(schema: &Value) -> Option<std::sync::Arc<CompiledSchema>> {
    fn has_rules(c: &CompiledSchema) -> bool {
        // A rule that failed to compile (or a schema too deep) counts: it reports an error.
        !c.validations.is_empty()
            || c.properties.values().any(has_rules)
            || c.items.as_deref().is_some_and(has_rules)
            || c.additional_properties.as_deref().is_some_and(has_rules)
            || c.all_of.iter().chain(&c.one_of).chain(&c.any_of).any(has_rules)
    }
    let compiled = kube::core::cel::compile_schema(schema);
    has_rules(&compiled).then(|| std::sync::Arc::new(compiled))
}
