//! Discovery end to end: every rule refuses the whole discovery; creates, updates and deletes.

// Table tests spell their row types out.
#![allow(clippy::type_complexity)]

use std::collections::BTreeMap;

use serde_json::{Value as Json, json};

use kuvryn_sync_api::{
    Application, ApplicationPolicy, ApplicationSpec, DeletionPolicy, FailureReason, Repository,
    RepositorySpec, keys,
};

use super::*;

const REPO: &str = "platform";
const NS: &str = "default";
const SA: &str = "payments-deployer";
const ROOT: &str = ".ksync.yaml";
const TEAM: &str = "teams/payments/.ksync.yaml";
const SEARCH: &str = "teams/search/.ksync.yaml";

fn repository(policy: ApplicationPolicy, sa: Option<&str>, paths: &[&str]) -> Repository {
    let spec: RepositorySpec = serde_json::from_value(json!({
        "type": "git",
        "git": { "url": "https://example.com/platform.git" },
        "applicationConfigPaths": paths,
        "applicationServiceAccountName": sa,
        "applicationPolicy": policy,
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let mut repo = Repository::new(REPO, spec);
    repo.metadata.namespace = Some(NS.into());
    repo
}

fn strict() -> Repository {
    repository(ApplicationPolicy::default(), Some(SA), &[TEAM, SEARCH])
}

fn allow_all() -> ApplicationPolicy {
    ApplicationPolicy {
        allow_automatic: true,
        allow_prune: true,
        allow_adopt: true,
        allow_delete_managed_resources: true,
    }
}

fn merge(base: &mut Json, extra: Json) {
    match (base, extra) {
        (Json::Object(b), Json::Object(e)) => {
            for (k, v) in e {
                match b.get_mut(&k) {
                    Some(slot) if v.is_object() => merge(slot, v),
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, e) => *b = e,
    }
}

/// A valid list entry named `name`, with `extra` merged in.
fn entry(name: &str, extra: Json) -> Json {
    let mut e = json!({
        "metadata": { "name": name },
        "spec": {
            "source": { "path": format!("apps/{name}"), "render": { "type": "kustomize" } },
            "destination": { "namespace": name },
        }
    });
    merge(&mut e, extra);
    e
}

fn list(entries: &[Json]) -> String {
    json!({ "applications": entries }).to_string()
}

fn files(pairs: &[(&str, String)]) -> BTreeMap<String, ConfigFileRead> {
    pairs.iter().map(|(p, t)| ((*p).to_owned(), ConfigFileRead::Text(t.clone()))).collect()
}

/// The two configured files, with `team` in the payments file and an empty search file.
fn team(entries: &[Json]) -> BTreeMap<String, ConfigFileRead> {
    files(&[(TEAM, list(entries)), (SEARCH, String::new())])
}

/// An existing Application, optionally labelled for `owner`.
fn existing(name: &str, owner: Option<&str>) -> Application {
    let entry = entry(name, json!({}));
    let mut spec = entry["spec"].clone();
    merge(&mut spec, json!({ "source": { "repositoryRef": { "name": owner.unwrap_or("x") } } }));
    let spec: ApplicationSpec = serde_json::from_value(spec).unwrap_or_else(|e| panic!("{e}"));
    let mut app = Application::new(name, spec);
    app.metadata.namespace = Some(NS.into());
    app.metadata.uid = Some(format!("uid-{name}"));
    if let Some(owner) = owner {
        app.metadata.labels =
            Some(BTreeMap::from([(keys::REPOSITORY.to_owned(), owner.to_owned())]));
    }
    app
}

fn refusal(result: Result<DiscoveryPlan, DiscoveryRefusal>) -> DiscoveryRefusal {
    match result {
        Ok(plan) => panic!("expected a refusal, got {plan:?}"),
        Err(refusal) => refusal,
    }
}

fn plan(result: Result<DiscoveryPlan, DiscoveryRefusal>) -> DiscoveryPlan {
    result.unwrap_or_else(|e| panic!("{e}"))
}

fn names(apps: &[Application]) -> Vec<&str> {
    apps.iter().filter_map(|a| a.metadata.name.as_deref()).collect()
}

#[test]
fn every_rule_refuses_the_whole_discovery() {
    let no_sa = repository(ApplicationPolicy::default(), None, &[TEAM, SEARCH]);
    let valid = entry("search", json!({}));
    // (rule, repository, files, existing, expected message)
    let cases: Vec<(&str, Repository, BTreeMap<String, ConfigFileRead>, Vec<Application>, String)> = vec![
        (
            "automatic",
            strict(),
            team(&[entry("payments", json!({ "spec": { "sync": { "automatic": true } } }))]),
            vec![],
            format!("{TEAM}: Application payments sets spec.sync.automatic, which needs spec.applicationPolicy.allowAutomatic on Repository platform"),
        ),
        (
            "prune",
            strict(),
            team(&[entry("payments", json!({ "spec": { "sync": { "prune": true } } }))]),
            vec![],
            format!("{TEAM}: Application payments sets spec.sync.prune, which needs spec.applicationPolicy.allowPrune on Repository platform"),
        ),
        (
            "adopt",
            strict(),
            team(&[entry("payments", json!({ "spec": { "sync": { "conflictPolicy": "adopt" } } }))]),
            vec![],
            format!("{TEAM}: Application payments sets spec.sync.conflictPolicy: adopt, which needs spec.applicationPolicy.allowAdopt on Repository platform"),
        ),
        (
            "DeleteManagedResources",
            strict(),
            team(&[entry("payments", json!({ "spec": { "deletionPolicy": "DeleteManagedResources" } }))]),
            vec![],
            format!("{TEAM}: Application payments sets spec.deletionPolicy: DeleteManagedResources, which needs spec.applicationPolicy.allowDeleteManagedResources on Repository platform"),
        ),
        (
            "foreign service account",
            strict(),
            team(&[entry("payments", json!({ "spec": { "serviceAccountName": "cluster-admin" } }))]),
            vec![],
            format!("{TEAM}: Application payments sets spec.serviceAccountName cluster-admin, but Repository platform only allows spec.applicationServiceAccountName payments-deployer"),
        ),
        (
            "service account when the Repository sets none",
            no_sa.clone(),
            team(&[entry("payments", json!({ "spec": { "serviceAccountName": SA } }))]),
            vec![],
            format!("{TEAM}: Application payments sets spec.serviceAccountName payments-deployer, but Repository platform sets no spec.applicationServiceAccountName"),
        ),
        (
            "foreign namespace",
            strict(),
            team(&[entry("payments", json!({ "metadata": { "namespace": "kube-system" } }))]),
            vec![],
            format!("{TEAM}: Application payments sets metadata.namespace kube-system, but discovered Applications live in the Repository's namespace default"),
        ),
        (
            "other Repository in repositoryRef",
            strict(),
            team(&[entry("payments", json!({ "spec": { "source": { "repositoryRef": { "name": "infra" } } } }))]),
            vec![],
            format!("{TEAM}: Application payments sets spec.source.repositoryRef.name infra, but Repository platform may only discover its own Applications"),
        ),
        (
            "path escaping the repository",
            repository(ApplicationPolicy::default(), Some(SA), &["../other/.ksync.yaml"]),
            BTreeMap::new(),
            vec![],
            "spec.applicationConfigPaths[0] \"../other/.ksync.yaml\": must not contain .. (it would escape the repository)".into(),
        ),
        (
            "duplicate names across files",
            strict(),
            files(&[(TEAM, list(&[entry("payments", json!({}))])), (SEARCH, list(&[entry("payments", json!({}))]))]),
            vec![],
            format!("{SEARCH}: Application payments is also defined in {TEAM}; names must be unique across all configured files"),
        ),
        (
            "duplicate names in one file",
            strict(),
            team(&[entry("payments", json!({})), entry("payments", json!({}))]),
            vec![],
            format!("{TEAM}: Application payments is also defined in {TEAM}"),
        ),
        (
            "hand-made collision",
            strict(),
            team(&[entry("payments", json!({}))]),
            vec![existing("payments", None)],
            format!("{TEAM}: Application payments already exists in namespace default without the sync.kuvryn.io/repository label; discovery never takes over"),
        ),
        (
            "other-Repository collision",
            strict(),
            team(&[entry("payments", json!({}))]),
            vec![existing("payments", Some("infra"))],
            format!("{TEAM}: Application payments already exists and belongs to Repository infra"),
        ),
        (
            "missing name",
            strict(),
            team(&[valid.clone(), entry("x", json!({ "metadata": { "name": null } }))]),
            vec![],
            format!("{TEAM}: applications[1] has no metadata.name, which is required"),
        ),
        (
            "invalid name",
            strict(),
            team(&[entry("Payments_App", json!({}))]),
            vec![],
            format!("{TEAM}: Application name \"Payments_App\" is not a valid DNS subdomain"),
        ),
        (
            "missing render.type",
            strict(),
            team(&[entry("payments", json!({ "spec": { "source": { "render": { "type": null } } } }))]),
            vec![],
            format!("{TEAM}: Application payments has no spec.source.render.type, which is required"),
        ),
        (
            "missing spec",
            strict(),
            files(&[(TEAM, "applications:\n  - metadata:\n      name: payments\n".into())]),
            vec![],
            format!("{TEAM}: Application payments has no spec.source.render.type"),
        ),
        (
            "undecodable spec",
            strict(),
            team(&[entry("payments", json!({ "spec": { "destination": null } }))]),
            vec![],
            format!("{TEAM}: Application payments has an invalid spec: "),
        ),
        (
            "unknown top-level keys",
            strict(),
            files(&[
                (TEAM, "applications: []\nextra: 1\nstatus: {}\n".into()),
                (SEARCH, list(std::slice::from_ref(&valid))),
            ]),
            vec![],
            format!("{TEAM}: unknown keys extra, status at the top level; allowed: applications"),
        ),
        (
            "unknown entry keys",
            strict(),
            team(&[entry("payments", json!({ "status": { "state": "Healthy" } }))]),
            vec![],
            format!("{TEAM}: unknown key status at applications[0]; allowed: metadata, spec"),
        ),
        (
            "unknown metadata keys",
            strict(),
            team(&[entry("payments", json!({ "metadata": { "ownerReferences": [], "finalizers": [] } }))]),
            vec![],
            format!("{TEAM}: unknown keys finalizers, ownerReferences at applications[0].metadata"),
        ),
        (
            "reserved annotation (approval from Git)",
            strict(),
            team(&[entry("payments", json!({ "metadata": { "annotations": { "sync.kuvryn.io/approved-revision": "abc" } } }))]),
            vec![],
            format!("{TEAM}: Application payments sets annotation sync.kuvryn.io/approved-revision; the sync.kuvryn.io/ domain is reserved"),
        ),
        (
            "reserved label (ownership from Git)",
            strict(),
            team(&[entry("payments", json!({ "metadata": { "labels": { "sync.kuvryn.io/repository": "infra" } } }))]),
            vec![],
            format!("{TEAM}: Application payments sets label sync.kuvryn.io/repository"),
        ),
        (
            "wrong kind in the single form",
            strict(),
            files(&[(TEAM, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n".into())]),
            vec![],
            format!("{TEAM}: the top level must have apiVersion: sync.kuvryn.io/v1alpha1 and kind: Application"),
        ),
        (
            "not YAML",
            strict(),
            files(&[(TEAM, "applications: [\n".into())]),
            vec![],
            format!("{TEAM}: not a single valid YAML document"),
        ),
        (
            "configured file missing",
            strict(),
            files(&[(SEARCH, list(std::slice::from_ref(&valid)))]),
            vec![],
            format!("{TEAM}: listed in spec.applicationConfigPaths but not found at this revision"),
        ),
        (
            "symlink escape reported by the I/O layer",
            strict(),
            BTreeMap::from([
                (TEAM.to_owned(), ConfigFileRead::Refused(DiscoveryError::SymlinkEscapes { path: TEAM.into() })),
                (SEARCH.to_owned(), ConfigFileRead::Text(list(std::slice::from_ref(&valid)))),
            ]),
            vec![],
            format!("{TEAM}: resolves through a symlink that leaves the repository"),
        ),
    ];
    for (rule, repo, files, existing_apps, expected) in cases {
        // A valid new entry and a removed Application ride along: neither may happen.
        let mut existing_apps = existing_apps;
        existing_apps.push(existing("removed", Some(REPO)));
        let refusal = refusal(discover(&repo, &files, &existing_apps));
        let message = refusal.to_string();
        assert!(
            message.contains(&expected),
            "{rule}:\n  got      {message}\n  expected {expected}"
        );
        assert!(message.starts_with("discovery refused, no Application was changed: "), "{rule}");
        assert_eq!(refusal.reason(), FailureReason::ValidationFailure, "{rule}");
    }
}

#[test]
fn several_violations_are_all_listed() {
    let repo = repository(ApplicationPolicy::default(), None, &[TEAM]);
    let bad = entry(
        "payments",
        json!({ "spec": { "serviceAccountName": "admin", "sync": { "automatic": true, "prune": true } } }),
    );
    let refusal = refusal(discover(&repo, &files(&[(TEAM, list(&[bad]))]), &[]));
    assert_eq!(refusal.errors.len(), 3, "{refusal}");
    let message = refusal.to_string();
    for part in ["spec.serviceAccountName admin", "allowAutomatic", "allowPrune"] {
        assert!(message.contains(part), "{message}");
    }
}

#[test]
fn allowances_permit_their_fields() {
    let repo = repository(allow_all(), Some(SA), &[TEAM]);
    let e = entry(
        "payments",
        json!({ "spec": {
            "serviceAccountName": SA,
            "sync": { "automatic": true, "prune": true, "conflictPolicy": "adopt" },
            "deletionPolicy": "DeleteManagedResources",
            "source": { "repositoryRef": { "name": REPO } }
        }, "metadata": { "namespace": NS, "labels": { "team": "payments" } } }),
    );
    let plan = plan(discover(&repo, &files(&[(TEAM, list(&[e]))]), &[]));
    assert_eq!(names(&plan.create), ["payments"]);
    let app = &plan.create[0];
    assert!(app.spec.sync.automatic && app.spec.sync.prune);
    assert_eq!(
        app.metadata.labels.as_ref().and_then(|l| l.get("team")).map(String::as_str),
        Some("payments")
    );
}

#[test]
fn creates_with_defaults_label_and_annotation() {
    let repo = strict();
    let plan = plan(discover(&repo, &team(&[entry("payments", json!({}))]), &[]));
    assert!(plan.update.is_empty() && plan.delete.is_empty());
    let app = &plan.create[0];
    assert_eq!(app.metadata.name.as_deref(), Some("payments"));
    assert_eq!(app.metadata.namespace.as_deref(), Some(NS));
    assert_eq!(app.spec.source.repository_ref.name, REPO);
    assert_eq!(app.spec.service_account_name.as_deref(), Some(SA));
    assert_eq!(
        app.metadata.labels.as_ref().and_then(|l| l.get(keys::REPOSITORY)).map(String::as_str),
        Some(REPO)
    );
    assert_eq!(
        app.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::DISCOVERED_FROM))
            .map(String::as_str),
        Some(TEAM)
    );
    // Without a Repository service account none is set.
    let no_sa = repository(ApplicationPolicy::default(), None, &[TEAM]);
    let plan = plan_discovery_from(&no_sa, TEAM, &list(&[entry("payments", json!({}))]), &[]);
    assert_eq!(plan.create[0].spec.service_account_name, None);
}

fn plan_discovery_from(
    repo: &Repository,
    path: &str,
    text: &str,
    existing: &[Application],
) -> DiscoveryPlan {
    let entries = parse_config_file(path, text).unwrap_or_else(|e| panic!("{e}"));
    plan(plan_discovery(repo, &entries, existing))
}

#[test]
fn accepts_the_spec_example_and_a_single_full_application() {
    let repo = repository(
        ApplicationPolicy { allow_automatic: true, ..Default::default() },
        Some(SA),
        &[],
    );
    let example = "applications:
  - metadata:
      name: payments
    spec:
      source:
        path: apps/payments
        render:
          type: kustomize
      destination:
        namespace: payments
      sync:
        automatic: true
        conflictPolicy: fail
";
    let plan = plan(discover(&repo, &files(&[(ROOT, example.into())]), &[]));
    assert_eq!(names(&plan.create), ["payments"]);

    let single = "apiVersion: sync.kuvryn.io/v1alpha1
kind: Application
metadata:
  name: payments
  namespace: default
spec:
  serviceAccountName: payments-deployer
  source:
    repositoryRef:
      name: platform
    path: apps/payments
    render:
      type: helm
      helm:
        releaseName: payments
  destination:
    namespace: payments
";
    let entries = parse_config_file(ROOT, single).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].repository_ref.as_deref(), Some(REPO));
    let plan = plan_discovery_from(&repo, ROOT, single, &[]);
    assert_eq!(names(&plan.create), ["payments"]);
    assert_eq!(
        plan.create[0]
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::DISCOVERED_FROM))
            .map(String::as_str),
        Some(ROOT)
    );
}

#[test]
fn unchanged_applications_are_not_updated() {
    let repo = strict();
    let unchanged =
        team(&[entry("payments", json!({ "metadata": { "labels": { "team": "p" } } }))]);
    let first = plan(discover(&repo, &unchanged, &[]));
    let mut stored = first.create[0].clone();
    // Fields others own do not count as a change.
    stored.metadata.uid = Some("uid-1".into());
    stored
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(keys::APPROVED_REVISION.into(), "abc".into());
    let again = plan(discover(&repo, &unchanged, std::slice::from_ref(&stored)));
    assert!(again.is_empty(), "{again:?}");

    // A changed spec, a moved file and a changed label are updates.
    let changed = team(&[entry(
        "payments",
        json!({ "metadata": { "labels": { "team": "p" } }, "spec": { "source": { "path": "apps/v2" } } }),
    )]);
    assert_eq!(
        names(&plan(discover(&repo, &changed, std::slice::from_ref(&stored))).update),
        ["payments"]
    );
    let moved = files(&[
        (SEARCH, list(&[entry("payments", json!({ "metadata": { "labels": { "team": "p" } } }))])),
        (TEAM, String::new()),
    ]);
    let update = plan(discover(&repo, &moved, std::slice::from_ref(&stored))).update;
    assert_eq!(
        update[0]
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::DISCOVERED_FROM))
            .map(String::as_str),
        Some(SEARCH)
    );
    let relabelled =
        team(&[entry("payments", json!({ "metadata": { "labels": { "team": "q" } } }))]);
    assert_eq!(names(&plan(discover(&repo, &relabelled, &[stored])).update), ["payments"]);
}

#[test]
fn removed_applications_are_deleted_with_the_right_policy() {
    let mut dmr = existing("old-dmr", Some(REPO));
    dmr.spec.deletion_policy = DeletionPolicy::DeleteManagedResources;
    let orphan = existing("old-orphan", Some(REPO));
    let mut terminating = existing("old-terminating", Some(REPO));
    terminating.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
    let apps = vec![
        dmr,
        orphan,
        terminating,
        existing("hand-made", None),
        existing("infra-app", Some("infra")),
        {
            let mut other_ns = existing("other-ns", Some(REPO));
            other_ns.metadata.namespace = Some("elsewhere".into());
            other_ns
        },
    ];
    // (policy, expected deletes: name, deletion_policy, needs_orphan_patch)
    let cases: Vec<(ApplicationPolicy, Vec<(&str, DeletionPolicy, bool)>)> = vec![
        (
            ApplicationPolicy::default(),
            vec![
                ("old-dmr", DeletionPolicy::Orphan, true),
                ("old-orphan", DeletionPolicy::Orphan, false),
            ],
        ),
        (
            ApplicationPolicy { allow_delete_managed_resources: true, ..Default::default() },
            vec![
                ("old-dmr", DeletionPolicy::DeleteManagedResources, false),
                ("old-orphan", DeletionPolicy::Orphan, false),
            ],
        ),
    ];
    for (policy, expected) in cases {
        let repo = repository(policy, Some(SA), &[TEAM]);
        let plan =
            plan(discover(&repo, &files(&[(TEAM, list(&[entry("payments", json!({}))]))]), &apps));
        assert_eq!(names(&plan.create), ["payments"]);
        let got: Vec<(&str, DeletionPolicy, bool)> = plan
            .delete
            .iter()
            .map(|d| (d.name.as_str(), d.deletion_policy, d.needs_orphan_patch()))
            .collect();
        assert_eq!(got, expected);
        assert_eq!(plan.delete[0].uid.as_deref(), Some("uid-old-dmr"));
    }
    // A missing root .ksync.yaml proposes nothing: everything of ours goes, Orphan.
    let repo = repository(ApplicationPolicy::default(), Some(SA), &[]);
    let plan = plan(discover(&repo, &BTreeMap::new(), &apps));
    assert!(plan.create.is_empty());
    assert_eq!(plan.delete.len(), 2);
}

#[test]
fn repository_without_identity_is_refused() {
    let mut repo = strict();
    repo.metadata.namespace = None;
    let refusal = refusal(plan_discovery(&repo, &[], &[]));
    assert_eq!(refusal.errors, vec![DiscoveryError::InvalidRepository]);
}

#[test]
fn discovered_applications_take_the_repository_shard() {
    let shard_of =
        |app: &Application| app.metadata.labels.as_ref().and_then(|l| l.get(keys::SHARD)).cloned();
    let unlabelled = plan(discover(&strict(), &team(&[entry("payments", json!({}))]), &[]));
    assert_eq!(shard_of(&unlabelled.create[0]), None);
    let mut repo = strict();
    repo.metadata.labels = Some(BTreeMap::from([(keys::SHARD.to_owned(), "eu".to_owned())]));
    let labelled = plan(discover(&repo, &team(&[entry("payments", json!({}))]), &[]));
    assert_eq!(shard_of(&labelled.create[0]).as_deref(), Some("eu"));
    // An existing discovered Application without the label is updated to carry it.
    let existing = unlabelled.create[0].clone();
    let moved = plan(discover(&repo, &team(&[entry("payments", json!({}))]), &[existing]));
    assert_eq!(moved.update.len(), 1, "{moved:?}");
    assert_eq!(shard_of(&moved.update[0]).as_deref(), Some("eu"));
}
