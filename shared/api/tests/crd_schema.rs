//! The generated CRDs carry the defaults, enums and rules the API server enforces, and the
//! kubectl experience the spec asks for. CEL rules are evaluated with kube's client-side CEL
//! validator (the same rules the API server runs).

use kube_core::CustomResourceExt;
use kube_core::cel::Validator;
use kuvryn_sync_api::{
    Application, DURATION_PATTERN, HealthCheck, ImagePolicy, NotificationSink,
    RELEASE_NAME_PATTERN, Repository, Revision, crds,
};
use regex::Regex;
use serde_json::{Value, json};

fn schema_of<K: CustomResourceExt>() -> Value {
    let crd = K::crd();
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("schema"),
    )
    .expect("json")
}

/// The schema node at a dotted path of property names (`spec.source.render`), looking through
/// array `items`.
fn node<'a>(schema: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(schema, |node, part| {
        let node = if node["type"] == "array" { &node["items"] } else { node };
        let next = &node["properties"][part];
        assert!(!next.is_null(), "no property {part} in path {path}");
        next
    })
}

#[test]
fn documented_defaults_are_in_the_schema() {
    let repo = schema_of::<Repository>();
    assert_eq!(node(&repo, "spec.applicationConfigPaths")["default"], json!([".ksync.yaml"]));
    assert_eq!(node(&repo, "spec.type")["default"], "git");
    for allowance in ["allowAutomatic", "allowPrune", "allowAdopt", "allowDeleteManagedResources"] {
        assert_eq!(node(&repo, &format!("spec.applicationPolicy.{allowance}"))["default"], false);
    }

    let app = schema_of::<Application>();
    assert_eq!(node(&app, "spec.sync.conflictPolicy")["default"], "fail");
    assert_eq!(node(&app, "spec.sync")["default"]["conflictPolicy"], "fail");
    assert_eq!(node(&app, "spec.strategy.failurePolicy.action")["default"], "pause");
    assert_eq!(node(&app, "spec.strategy.failurePolicy.maxAttempts")["default"], 1);
    assert_eq!(node(&app, "spec.strategy")["default"]["failurePolicy"]["maxAttempts"], 1);
    assert_eq!(node(&app, "spec.strategy.type")["default"], "rolling");
    assert_eq!(node(&app, "spec.deletionPolicy")["default"], "Orphan");
    assert_eq!(node(&app, "spec.source.render.helm.releaseName")["default"], "kuvryn-sync");
    assert_eq!(node(&app, "spec.source.render.helm.valuesFrom.key")["default"], "values.yaml");

    let image = schema_of::<ImagePolicy>();
    assert_eq!(node(&image, "spec.interval")["default"], "5m");
    assert_eq!(node(&image, "spec.policy.tagPattern.order")["default"], "alphabetical");
}

#[test]
fn closed_sets_are_enums() {
    let app = schema_of::<Application>();
    let repo = schema_of::<Repository>();
    let image = schema_of::<ImagePolicy>();
    let sink = schema_of::<NotificationSink>();
    let hc = schema_of::<HealthCheck>();
    let rev = schema_of::<Revision>();
    let cases: Vec<(&Value, &str, Vec<&str>)> = vec![
        (&repo, "spec.type", vec!["git"]),
        (&repo, "status.state", vec!["Unknown", "Ready", "Failed"]),
        (&app, "spec.source.render.type", vec!["yaml", "kustomize", "helm"]),
        (&app, "spec.sync.conflictPolicy", vec!["fail", "adopt"]),
        (&app, "spec.deletionPolicy", vec!["Orphan", "DeleteManagedResources"]),
        (&app, "spec.strategy.type", vec!["rolling"]),
        (&app, "spec.strategy.failurePolicy.action", vec!["pause", "rollback"]),
        (&app, "spec.decryption.provider", vec!["sops"]),
        (&app, "spec.source.render.helm.valuesFrom.kind", vec!["ConfigMap", "Secret"]),
        (
            &app,
            "spec.notifications.events",
            vec!["AwaitingApproval", "Healthy", "Failed", "RolledBack"],
        ),
        (
            &app,
            "status.sync.state",
            vec![
                "Unknown",
                "Synced",
                "OutOfSync",
                "Drifted",
                "Planning",
                "AwaitingApproval",
                "Applying",
                "Pruning",
            ],
        ),
        (
            &app,
            "status.health.state",
            vec!["Healthy", "Suspended", "Progressing", "Unknown", "Degraded"],
        ),
        (&sink, "spec.type", vec!["webhook", "slack"]),
        (&hc, "spec.rules.state", vec!["Healthy", "Progressing", "Degraded"]),
        (&image, "spec.policy.tagPattern.order", vec!["alphabetical", "numerical"]),
        (
            &rev,
            "status.phase",
            vec![
                "Pending",
                "Planning",
                "AwaitingApproval",
                "Applying",
                "Observing",
                "Healthy",
                "Failed",
                "RollingBack",
                "RolledBack",
                "Cancelled",
            ],
        ),
    ];
    for (schema, path, expected) in cases {
        let leaf = node(schema, path);
        let leaf = if leaf["type"] == "array" { &leaf["items"] } else { leaf };
        let got: Vec<&str> = leaf["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{path} has no enum"))
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(got, expected, "enum of {path}");
    }
}

#[test]
fn helm_release_name_is_a_lowercase_dns_subdomain_of_at_most_53_characters() {
    let app = schema_of::<Application>();
    let release = node(&app, "spec.source.render.helm.releaseName");
    assert_eq!(release["maxLength"], 53);
    assert_eq!(release["pattern"], RELEASE_NAME_PATTERN);
    let pattern = Regex::new(RELEASE_NAME_PATTERN).expect("pattern compiles");
    let ok = ["kuvryn-sync", "a", "web.v2", "x1-y2.z3", &"a".repeat(53)];
    let bad = ["Web", "-web", "web-", "web..v2", "web_v2", ".web", "web.", "", "wéb"];
    for name in ok {
        assert!(pattern.is_match(name) && name.len() <= 53, "{name:?} should be accepted");
    }
    for name in bad {
        assert!(!pattern.is_match(name), "{name:?} should be rejected");
    }
    assert!("a".repeat(54).len() > 53);
}

fn cel_errors(schema: &Value, object: Value) -> Vec<String> {
    match Validator::new().validate(schema, &object, None) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.to_string().lines().map(str::to_owned).collect(),
    }
}

fn image_policy(policy: Value) -> Value {
    json!({"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "ImagePolicy",
           "metadata": {"name": "api"}, "spec": {"image": "ghcr.io/acme/api", "policy": policy}})
}

#[test]
fn image_policy_needs_exactly_one_of_semver_tag_pattern_or_digest() {
    let schema = schema_of::<ImagePolicy>();
    let ok = [
        json!({"semver": {"range": ">=1.2.0 <2.0.0"}}),
        json!({"tagPattern": {"regex": "^main-(\\d+)$", "order": "numerical"}}),
        json!({"digest": {"tag": "main"}}),
    ];
    for policy in ok {
        assert_eq!(
            cel_errors(&schema, image_policy(policy.clone())),
            Vec::<String>::new(),
            "{policy}"
        );
    }
    let bad = [
        json!({}),
        json!({"semver": {"range": "1.x"}, "digest": {"tag": "main"}}),
        json!({"semver": {"range": "1.x"}, "tagPattern": {"regex": "x"}, "digest": {"tag": "main"}}),
    ];
    for policy in bad {
        let errors = cel_errors(&schema, image_policy(policy.clone()));
        assert!(
            errors.iter().any(|e| e.contains("set exactly one of spec.policy.semver")),
            "{policy} must be refused, got {errors:?}"
        );
    }
}

fn helm_app(repository: &str) -> Value {
    json!({"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application", "metadata": {"name": "a"},
           "spec": {"source": {"repositoryRef": {"name": "r"}, "path": "",
                    "render": {"type": "helm", "helm": {"chart": {"repository": repository, "name": "web", "version": "1.0.0"}}}},
                    "destination": {"namespace": "web"}}})
}

#[test]
fn chart_repositories_must_be_https_or_oci() {
    let schema = schema_of::<Application>();
    for ok in ["https://charts.example.com", "oci://registry.example.com/charts"] {
        assert_eq!(cel_errors(&schema, helm_app(ok)), Vec::<String>::new(), "{ok}");
    }
    for bad in ["http://charts.example.com", "file:///etc", "charts.example.com", "s3://bucket"] {
        let errors = cel_errors(&schema, helm_app(bad));
        assert!(
            errors.iter().any(|e| e.contains("https:// Helm repository or an oci://")),
            "{bad}: {errors:?}"
        );
    }
    let mut yaml_with_helm = helm_app("https://charts.example.com");
    yaml_with_helm["spec"]["source"]["render"]["type"] = json!("yaml");
    let errors = cel_errors(&schema, yaml_with_helm);
    assert!(errors.iter().any(|e| e.contains("render.helm may only be set")), "{errors:?}");
}

#[test]
fn repository_urls_must_be_remote_git_urls() {
    let schema = schema_of::<Repository>();
    let repo = |url: &str| {
        json!({"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository", "metadata": {"name": "r"},
               "spec": {"type": "git", "git": {"url": url}}})
    };
    for ok in [
        "https://github.com/example/platform.git",
        "http://git.internal/platform.git",
        "ssh://git@github.com/example/platform.git",
        "git@github.com:example/platform.git",
        "git://127.0.0.1:9418/platform.git",
    ] {
        assert_eq!(cel_errors(&schema, repo(ok)), Vec::<String>::new(), "{ok}");
    }
    for bad in [
        "/srv/git/platform",
        "file:///srv/git/platform",
        "ext::sh -c touch% /tmp/pwned",
        "./platform",
        "ftp://host/x",
    ] {
        let errors = cel_errors(&schema, repo(bad));
        assert!(
            errors.iter().any(|e| e.contains("filesystem paths and file:// are not allowed")),
            "{bad}: {errors:?}"
        );
    }
    let no_git = json!({"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
                        "metadata": {"name": "r"}, "spec": {"type": "git"}});
    assert!(cel_errors(&schema, no_git).iter().any(|e| e.contains("spec.git is required")));
}

#[test]
fn status_subresource_on_every_kind_with_a_status() {
    for crd in crds() {
        let version = &crd.spec.versions[0];
        let has_status = version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some();
        let expected = crd.spec.names.kind != "NotificationSink";
        assert_eq!(has_status, expected, "status subresource of {}", crd.spec.names.kind);
    }
}

#[test]
fn printer_columns_short_names_and_category() {
    let columns = |kind: &str| -> Vec<(String, String)> {
        let crd = crds().into_iter().find(|c| c.spec.names.kind == kind).expect("crd");
        crd.spec.versions[0]
            .additional_printer_columns
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.name, c.json_path))
            .collect()
    };
    let names = |cols: Vec<(String, String)>| cols.into_iter().map(|c| c.0).collect::<Vec<_>>();
    assert_eq!(names(columns("Application")), ["Sync", "Health", "Revision", "Ready", "Age"]);
    assert_eq!(names(columns("Repository")), ["State", "Revision", "Age"]);
    assert_eq!(names(columns("Revision")), ["Application", "Phase", "Source", "Age"]);
    assert!(names(columns("ImagePolicy")).starts_with(&["Image".to_owned(), "Ready".to_owned()]));
    assert!(names(columns("HealthCheck")).starts_with(&["Group".to_owned(), "Kind".to_owned()]));
    assert!(columns("Application").contains(&(
        "Ready".to_owned(),
        ".status.conditions[?(@.type==\"Ready\")].status".to_owned()
    )));

    // Short names and plurals of Argo CD, Flux and Carvel kapp-controller that ours must not reuse.
    let taken = [
        "app",
        "apps",
        "application",
        "applications",
        "appproj",
        "appprojs",
        "appset",
        "appsets",
        "gitrepo",
        "gitrepos",
        "ks",
        "kustomization",
        "hr",
        "helmrelease",
        "helmrepo",
        "ocirepo",
        "imgpol",
        "imagepol",
        "imagepolicy",
        "imagerepo",
        "imgrepo",
        "imgupd",
        "alert",
        "provider",
        "receiver",
        "pkgi",
        "pkgr",
        "pkg",
        "pkgm",
        "repo",
        "rev",
        "hc",
    ];
    let mut seen = std::collections::BTreeSet::new();
    for crd in crds() {
        assert_eq!(crd.spec.names.categories.as_deref(), Some(&["kuvryn".to_owned()][..]));
        for short in crd.spec.names.short_names.clone().unwrap_or_default() {
            assert!(!taken.contains(&short.as_str()), "{short} collides with another GitOps tool");
            assert!(seen.insert(short.clone()), "{short} used twice");
        }
    }
    assert_eq!(seen.len(), 6, "every kind has a short name");
}

#[test]
fn an_application_with_an_invalid_release_name_still_decodes() {
    // Stored before the schema rule: the controller must decode it to report ValidationFailure.
    let app: Application = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "legacy", "namespace": "default"},
        "spec": {"source": {"repositoryRef": {"name": "r"}, "path": "chart",
                 "render": {"type": "helm", "helm": {"releaseName": "Not_A_Valid.Name"}}},
                 "destination": {"namespace": "web"}}
    }))
    .expect("lenient decode");
    let helm = app.spec.source.render.helm.expect("helm");
    assert_eq!(helm.release_name, "Not_A_Valid.Name");
    assert_eq!(app.spec.sync.conflict_policy, kuvryn_sync_api::ConflictPolicy::Fail);
    assert_eq!(app.spec.strategy.failure_policy.max_attempts, 1);
    assert_eq!(app.spec.deletion_policy, kuvryn_sync_api::DeletionPolicy::Orphan);
}

/// Every property below `schema` (through `items` and `additionalProperties`), with its path.
fn properties<'a>(schema: &'a Value, path: &str, out: &mut Vec<(String, &'a Value)>) {
    if let Some(props) = schema["properties"].as_object() {
        for (name, prop) in props {
            let path = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
            out.push((path.clone(), prop));
            properties(prop, &path, out);
        }
    }
    if schema["items"].is_object() {
        properties(&schema["items"], &format!("{path}[]"), out);
    }
    if schema["additionalProperties"].is_object() {
        properties(&schema["additionalProperties"], &format!("{path}{{}}"), out);
    }
}

fn crd_schemas() -> Vec<(String, Value)> {
    crds()
        .into_iter()
        .map(|crd| {
            let schema = crd.spec.versions[0]
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .expect("schema");
            (crd.spec.names.kind.clone(), serde_json::to_value(schema).expect("json"))
        })
        .collect()
}

#[test]
fn every_property_of_every_kind_explains_itself() {
    let mut count = 0;
    for (kind, schema) in crd_schemas() {
        let mut all = Vec::new();
        properties(&schema, "", &mut all);
        for name in ["apiVersion", "kind", "metadata", "spec"] {
            assert!(all.iter().any(|(path, _)| path == name), "{kind} has no {name}");
        }
        for (path, prop) in &all {
            let description = prop["description"].as_str().unwrap_or_default().trim();
            assert!(!description.is_empty(), "{kind} {path} has no description");
            assert!(
                !description.contains("\n") || description.contains("\n\n"),
                "{kind} {path}: a description is reflowed into paragraphs: {description:?}"
            );
        }
        count += all.len();

        // `kubectl explain <kind>.spec` must describe the spec, not repeat the kind.
        let own = schema["description"].as_str().expect("kind description");
        for part in ["spec", "status"] {
            let Some(description) = schema["properties"][part]["description"].as_str() else {
                continue;
            };
            assert_ne!(description, own, "{kind} {part} repeats the kind's description");
            assert!(!description.ends_with(" status."), "{kind} {part}: {description:?}");
        }
    }
    assert!(count > 250, "only {count} properties: is the walk broken?");
}

#[test]
fn every_duration_field_carries_the_grammar() {
    let durations = [
        ("Repository", "spec.pollInterval"),
        ("ImagePolicy", "spec.interval"),
        ("Application", "spec.health.timeout"),
        ("Application", "spec.strategy.failurePolicy.timeout"),
    ];
    let mut found = Vec::new();
    for (kind, schema) in crd_schemas() {
        let mut all = Vec::new();
        properties(&schema, "", &mut all);
        for (path, prop) in all {
            let named = durations.contains(&(kind.as_str(), path.as_str()));
            if prop["pattern"] == DURATION_PATTERN || named {
                assert_eq!(prop["pattern"], DURATION_PATTERN, "{kind} {path} pattern");
                let description = prop["description"].as_str().unwrap_or_default();
                assert!(
                    description.contains("ms, s, m or h") && description.contains("1h30m"),
                    "{kind} {path} must describe the duration grammar: {description:?}"
                );
                found.push((kind.clone(), path));
            }
        }
    }
    assert_eq!(found.len(), durations.len(), "duration fields: {found:?}");
}

#[test]
fn the_duration_pattern_accepts_exactly_the_grammar() {
    let pattern = Regex::new(DURATION_PATTERN).expect("pattern compiles");
    let good = ["90s", "5m", "1h30m", "1.5m", "500ms", "1h", "0s", "2h45m30s", "1m500ms", "10.25s"];
    let bad = [
        "", "5", "5d", "-5s", "5 s", " 5s", "5s ", "1.s", ".5s", "5S", "1h 30m", "5ms5", "s", "1w",
    ];
    for text in good {
        assert!(pattern.is_match(text), "{text:?} is a duration");
    }
    for text in bad {
        assert!(!pattern.is_match(text), "{text:?} is not a duration");
    }
}
