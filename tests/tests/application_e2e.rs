//! The Application reconciler end to end: the real controller binary against the API (an
//! in-process ksync-sandbox, or a real cluster through KSYNC_E2E_KUBECONFIG), a real Git server
//! (git daemon), `kubectl` for the client-side apply. Automatic sync of a YAML path as the
//! Application's service account: Revisions with plans, only changed objects applied, pruning
//! with high-risk and opted-out objects kept, conflicts and adoption, identity and validation
//! failures, Secret values kept out of every output, and a controller killed between the apply
//! and the status write.

use std::collections::BTreeSet;

use anyhow::{Context, Result, ensure};
use base64::Engine as _;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim, Secret, Service};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kuvryn_sync_api::{Application, PlanAction, Revision, RevisionPhase, keys};
use kuvryn_sync_tests::application::{
    DEADLINE, FAULT_EXIT_CODE, apply_cluster_rbac, cluster_binding, config_map, env, managers,
    revision_annotation,
};
use kuvryn_sync_tests::apply::DEPLOYER;
use serde_json::json;

const CANARY: &str = "canary-desired-secret-7c41e2";

/// A 20-object application is applied with our labels, annotation and field manager; a change
/// in Git plans and applies only that object; a removed object is pruned; a removed Namespace,
/// PVC, Secret and `prune: disabled` object are kept with `PruneSkipped` and plan warnings; a
/// Secret's value never shows in the Revision, status, Events or the controller's logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syncs_only_changes_prunes_and_keeps_high_risk_objects() -> Result<()> {
    let env = env("app-sync", true).await?;
    let ns = env.namespace.clone();
    let extra_namespace = format!("{ns}-extra");
    let mut files: Vec<(String, String)> = (0..16)
        .map(|n| {
            let annotations =
                if n == 15 { json!({ keys::PRUNE: keys::PRUNE_DISABLED }) } else { json!({}) };
            (
                format!("apps/web/cm-{n:02}.yaml"),
                config_map(&format!("cm-{n:02}"), "one", annotations),
            )
        })
        .collect();
    files.push((
        "apps/web/secret.yaml".into(),
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  token: {CANARY}\n"
        ),
    ));
    files.push((
        "apps/web/service.yaml".into(),
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector:\n    app: web\n  ports:\n    - port: 80\n"
            .into(),
    ));
    files.push((
        "apps/web/pvc.yaml".into(),
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\nspec:\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: 1Gi\n"
            .into(),
    ));
    files.push((
        "apps/web/namespace.yaml".into(),
        format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {extra_namespace}\n"),
    ));
    let refs: Vec<(&str, String)> = files.iter().map(|(p, c)| (p.as_str(), c.clone())).collect();
    let first = env.push(&refs, "twenty objects").await?;
    env.create_app("web", "apps/web", json!({})).await?;
    let app = env.wait_synced("web", &first).await?;
    let status = app.status.clone().context("status")?;
    assert_eq!(status.service_account_name.as_deref(), Some(DEPLOYER));
    assert_eq!(status.deployed_revision_short.as_deref(), Some(&first[..12]));
    let kinds: BTreeSet<String> = status.managed_kinds.iter().map(|k| k.kind.clone()).collect();
    assert_eq!(
        kinds,
        ["ConfigMap", "Namespace", "PersistentVolumeClaim", "Secret", "Service"]
            .map(String::from)
            .into()
    );
    let first_revision = env.revision("web", &first).await?;
    let plan = first_revision.status.as_ref().and_then(|s| s.plan.clone()).context("plan")?;
    assert_eq!((plan.create, plan.update, plan.delete, plan.unchanged), (20, 0, 0, 0));
    assert!(plan.digest.starts_with("sha256:"), "{}", plan.digest);
    // Applied; Healthy once health is observed (the PVC stays Pending here, so it waits).
    let phase = first_revision.status.as_ref().and_then(|s| s.phase);
    assert!(matches!(phase, Some(RevisionPhase::Observing | RevisionPhase::Healthy)), "{phase:?}");

    // Labels, annotation and the Application's field manager as the only manager.
    let manager = format!("kuvryn-sync/{ns}/web");
    let cms = env.api::<ConfigMap>();
    let cm = cms.get("cm-04").await?;
    assert_eq!(cm.labels().get(keys::APPLICATION).map(String::as_str), Some("web"));
    assert_eq!(cm.labels().get(keys::APPLICATION_NAMESPACE).map(String::as_str), Some(ns.as_str()));
    assert_eq!(revision_annotation(&cm), Some(first_revision.name_any()));
    assert_eq!(managers(&cm), vec![manager.clone()]);
    let namespace = Api::<Namespace>::all(env.cluster.client()).get(&extra_namespace).await?;
    assert_eq!(namespace.labels().get(keys::APPLICATION).map(String::as_str), Some("web"));
    env.api::<Service>().get("web").await?;
    env.api::<PersistentVolumeClaim>().get("data").await?;
    let untouched_version = cm.resource_version();

    // One field changed in Git: one Update, naming the field; only that object is applied.
    let second = env
        .push(&[("apps/web/cm-03.yaml", config_map("cm-03", "two", json!({})))], "change cm-03")
        .await?;
    env.wait_synced("web", &second).await?;
    let second_revision = env.revision("web", &second).await?;
    let plan = second_revision.status.as_ref().and_then(|s| s.plan.clone()).context("plan")?;
    assert_eq!((plan.create, plan.update, plan.delete, plan.unchanged), (0, 1, 0, 19));
    let updated: Vec<_> = plan.changes.iter().filter(|c| c.action == PlanAction::Update).collect();
    assert_eq!(updated.len(), 1);
    assert_eq!(updated[0].resource.name, "cm-03");
    assert!(updated[0].fields.contains(&".data.value".to_owned()), "{:?}", updated[0].fields);
    let changed = cms.get("cm-03").await?;
    assert_eq!(
        changed.data.clone().unwrap_or_default().get("value").map(String::as_str),
        Some("two")
    );
    assert_eq!(revision_annotation(&changed), Some(second_revision.name_any()));
    let untouched = cms.get("cm-04").await?;
    assert_eq!(untouched.resource_version(), untouched_version, "cm-04 was written");
    assert_eq!(revision_annotation(&untouched), Some(first_revision.name_any()));

    // Removed from Git: cm-00 is pruned; the Namespace, PVC, Secret and cm-15 (prune: disabled)
    // are kept, listed as Unchanged with a warning, and named in one PruneSkipped Event.
    let third = env
        .push_removal(
            &[
                "apps/web/cm-00.yaml",
                "apps/web/cm-15.yaml",
                "apps/web/secret.yaml",
                "apps/web/pvc.yaml",
                "apps/web/namespace.yaml",
            ],
            "remove five",
        )
        .await?;
    let app = env.wait_synced("web", &third).await?;
    assert!(cms.get_opt("cm-00").await?.is_none(), "cm-00 was not pruned");
    assert!(cms.get_opt("cm-15").await?.is_some(), "cm-15 (prune: disabled) was pruned");
    assert!(env.api::<Secret>().get_opt("db").await?.is_some(), "the Secret was pruned");
    assert!(env.api::<PersistentVolumeClaim>().get_opt("data").await?.is_some(), "PVC pruned");
    assert!(
        Api::<Namespace>::all(env.cluster.client()).get_opt(&extra_namespace).await?.is_some(),
        "the Namespace was pruned"
    );
    let third_revision = env.revision("web", &third).await?;
    let plan = third_revision.status.as_ref().and_then(|s| s.plan.clone()).context("plan")?;
    assert_eq!(plan.delete, 1);
    let warned: BTreeSet<String> = plan
        .changes
        .iter()
        .filter(|c| c.action == PlanAction::Unchanged && c.warning.is_some())
        .map(|c| format!("{}/{}", c.resource.kind, c.resource.name))
        .collect();
    assert_eq!(
        warned,
        [
            "ConfigMap/cm-15".to_owned(),
            format!("Namespace/{extra_namespace}"),
            "PersistentVolumeClaim/data".to_owned(),
            "Secret/db".to_owned()
        ]
        .into()
    );
    let events = env.wait_event("web", "PruneSkipped").await?;
    let skipped: Vec<_> = events.iter().filter(|(_, r, _)| r == "PruneSkipped").collect();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].0, "Warning");
    for name in ["cm-15", "Secret", "PersistentVolumeClaim", extra_namespace.as_str()] {
        assert!(skipped[0].2.contains(name), "{name} not named: {}", skipped[0].2);
    }
    // Kept objects keep the Application's labels, so their kinds stay in the inventory.
    let kinds: BTreeSet<String> =
        app.status.context("status")?.managed_kinds.iter().map(|k| k.kind.clone()).collect();
    assert!(kinds.contains("Secret") && kinds.contains("Namespace"), "{kinds:?}");

    // The canary never leaves the Secret.
    let encoded = base64::engine::general_purpose::STANDARD.encode(CANARY);
    let revisions = env.api::<Revision>().list(&ListParams::default()).await?;
    let app = env.api::<Application>().get("web").await?;
    let events = env.events_for("web").await?;
    let outputs = [
        ("Revisions", serde_json::to_string(&revisions.items)?),
        ("Application", serde_json::to_string(&app)?),
        ("Events", format!("{events:?}")),
        ("controller log", env.controller_log()),
    ];
    for (what, text) in outputs {
        ensure!(!text.contains(CANARY) && !text.contains(&encoded), "the canary is in the {what}");
    }
    ensure!(env.controller_log().contains("synced"), "the controller log is empty");
    Ok(())
}

/// Two Applications writing the same field: the second fails with ConflictFailure naming the
/// field and the manager; under `adopt` it takes the field over and its plan lists the previous
/// manager. An object created with a client-side `kubectl apply` is taken over without a
/// conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_fail_adopt_takes_over_and_client_side_apply_is_migrated() -> Result<()> {
    let env = env("app-conflict", true).await?;
    let ns = env.namespace.clone();
    let manifest = tempfile::NamedTempFile::new()?;
    std::fs::write(
        manifest.path(),
        serde_json::to_string(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "by-hand", "namespace": ns}, "data": {"value": "by hand"}}))?,
    )?;
    let kubectl = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(env.cluster.kubeconfig())
        .args(["apply", "-f"])
        .arg(manifest.path())
        .output()
        .await?;
    ensure!(kubectl.status.success(), "{}", String::from_utf8_lossy(&kubectl.stderr));

    let commit = env
        .push(
            &[
                ("apps/a/shared.yaml", config_map("shared", "from-a", json!({}))),
                ("apps/a/by-hand.yaml", config_map("by-hand", "from-git", json!({}))),
                ("apps/b/shared.yaml", config_map("shared", "from-b", json!({}))),
            ],
            "two applications, one field",
        )
        .await?;
    env.create_app("a", "apps/a", json!({})).await?;
    env.wait_synced("a", &commit).await?;
    let cms = env.api::<ConfigMap>();
    let by_hand = cms.get("by-hand").await?;
    assert_eq!(by_hand.data.unwrap_or_default().get("value").map(String::as_str), Some("from-git"));

    env.create_app("b", "apps/b", json!({"sync": {"prune": false}})).await?;
    let message = env.wait_failed("b", "ConflictFailure").await?;
    let manager_a = format!("kuvryn-sync/{ns}/a");
    assert!(message.contains(".data.value") && message.contains(&manager_a), "{message}");
    let failed = env.revision("b", &commit).await?;
    let failure = failed.status.as_ref().and_then(|s| s.failure.clone()).context("failure")?;
    assert_eq!(failure.reason, kuvryn_sync_api::FailureReason::ConflictFailure);
    assert_eq!(failed.status.as_ref().and_then(|s| s.phase), Some(RevisionPhase::Failed));
    let shared = cms.get("shared").await?;
    assert_eq!(shared.data.unwrap_or_default().get("value").map(String::as_str), Some("from-a"));
    env.wait_event("b", "ConflictFailure").await?;

    let adopt = json!({"spec": {"sync": {"conflictPolicy": "adopt"}}});
    env.api::<Application>().patch("b", &PatchParams::default(), &Patch::Merge(&adopt)).await?;
    env.wait_synced("b", &commit).await?;
    let shared = cms.get("shared").await?;
    assert_eq!(shared.data.unwrap_or_default().get("value").map(String::as_str), Some("from-b"));
    let adopted = env.revision("b", &commit).await?;
    let plan = adopted.status.and_then(|s| s.plan).context("plan")?;
    let change = plan.changes.iter().find(|c| c.resource.name == "shared").context("change")?;
    assert!(
        change.adopted.iter().any(|a| a.field == ".data.value" && a.previous_manager == manager_a),
        "{:?}",
        change.adopted
    );
    Ok(())
}

/// A service account without rights gives Forbidden naming the verb and the resource; no
/// service account and no default gives ServiceAccountRequired, a missing one
/// ServiceAccountFailure; a foreign namespace, a duplicate and a bad hook value give
/// ValidationFailure with nothing applied; manual sync plans and waits for approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_and_validation_failures_apply_nothing() -> Result<()> {
    let env = env("app-refuse", true).await?;
    let ns = env.namespace.clone();
    let nobody: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "nobody"}}))?;
    env.api().create(&PostParams::default(), &nobody).await?;
    let commit = env
        .push(
            &[
                ("apps/ok/cm.yaml", config_map("ok", "1", json!({}))),
                ("apps/manual/cm.yaml", config_map("manual", "1", json!({}))),
                ("apps/foreign/innocent.yaml", config_map("innocent-1", "1", json!({}))),
                (
                    "apps/foreign/cm.yaml",
                    serde_json::to_string(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "elsewhere", "namespace": "kube-system"}}))?,
                ),
                ("apps/dupes/a.yaml", config_map("twice", "1", json!({}))),
                ("apps/dupes/b.yaml", config_map("twice", "2", json!({}))),
                ("apps/dupes/innocent.yaml", config_map("innocent-2", "1", json!({}))),
                ("apps/hook/innocent.yaml", config_map("innocent-3", "1", json!({}))),
                (
                    "apps/hook/job.yaml",
                    config_map("hooked", "1", json!({ keys::HOOK: "mid-sync" })),
                ),
            ],
            "refusals",
        )
        .await?;

    env.create_app("denied", "apps/ok", json!({"serviceAccountName": "nobody"})).await?;
    let message = env.wait_failed("denied", "Forbidden").await?;
    assert!(message.contains("patch") && message.contains("ConfigMap"), "{message}");
    assert!(message.contains(&format!("{ns}/ok")), "{message}");

    env.create_app("anonymous", "apps/ok", json!({"serviceAccountName": null})).await?;
    let message = env.wait_failed("anonymous", "ServiceAccountRequired").await?;
    assert!(message.contains("--default-service-account"), "{message}");
    env.create_app("ghost", "apps/ok", json!({"serviceAccountName": "ghost"})).await?;
    let message = env.wait_failed("ghost", "ServiceAccountFailure").await?;
    assert!(message.contains("ghost"), "{message}");
    // The account appearing re-checks the Application: it now acts as ghost, which has no rights.
    let ghost: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "ghost"}}))?;
    env.api().create(&PostParams::default(), &ghost).await?;
    let message = env.wait_failed("ghost", "Forbidden").await?;
    assert!(message.contains("patch") && message.contains("ConfigMap"), "{message}");

    for (name, path, says) in [
        ("foreign", "apps/foreign", "kube-system"),
        ("dupes", "apps/dupes", "declared twice"),
        ("hook", "apps/hook", "mid-sync"),
    ] {
        env.create_app(name, path, json!({})).await?;
        let message = env.wait_failed(name, "ValidationFailure").await?;
        assert!(message.contains(says), "{name}: {message}");
    }
    let cms = env.api::<ConfigMap>();
    for name in ["ok", "innocent-1", "innocent-2", "innocent-3", "twice", "hooked"] {
        assert!(cms.get_opt(name).await?.is_none(), "{name} was applied");
    }
    let selector = format!("{}=denied", keys::APPLICATION);
    assert!(
        env.api::<Revision>()
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .is_empty(),
        "a failure before the plan made a Revision"
    );

    // Manual sync: the plan waits for approval, nothing is applied.
    env.create_app("manual", "apps/manual", json!({"sync": {"automatic": false}})).await?;
    env.wait_app("manual", "AwaitingApproval", |app| {
        app.status
            .as_ref()
            .is_some_and(|s| s.sync.state == kuvryn_sync_api::SyncState::AwaitingApproval)
    })
    .await?;
    let waiting = env.revision("manual", &commit).await?;
    assert_eq!(waiting.status.and_then(|s| s.phase), Some(RevisionPhase::AwaitingApproval));
    env.wait_event("manual", "ApprovalRequired").await?;
    assert!(cms.get_opt("manual").await?.is_none(), "a manual plan was applied");
    Ok(())
}

/// The controller dies between the apply and the status write (a test fault point). The
/// inventory written before the apply names the new kind, so after a restart the sync
/// completes, and an object of that kind removed from Git is pruned, not orphaned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_after_apply_loses_no_inventory() -> Result<()> {
    let mut env = env("app-crash", false).await?;
    let commit = env
        .push(
            &[
                ("apps/web/cm.yaml", config_map("settings", "1", json!({}))),
                (
                    "apps/web/service.yaml",
                    "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports:\n    - port: 80\n"
                        .to_owned(),
                ),
            ],
            "a ConfigMap and a Service",
        )
        .await?;
    env.start_controller(&[("KSYNC_TEST_FAULT_POINT", "after-apply")])?;
    env.create_app("web", "apps/web", json!({})).await?;
    let exit = env.controller.as_mut().context("controller")?.wait_exit(DEADLINE).await?;
    assert_eq!(exit.code(), Some(FAULT_EXIT_CODE), "{}", env.controller_log());

    // Applied, but the final status was never written: the inventory came first.
    let services = env.api::<Service>();
    assert!(services.get_opt("web").await?.is_some(), "the Service was not applied");
    let app = env.api::<Application>().get("web").await?;
    let status = app.status.context("status")?;
    assert_eq!(status.sync.state, kuvryn_sync_api::SyncState::Applying);
    let kinds: BTreeSet<String> = status.managed_kinds.iter().map(|k| k.kind.clone()).collect();
    assert_eq!(kinds, ["ConfigMap", "Service"].map(String::from).into());
    let revision = env.revision("web", &commit).await?;
    assert_eq!(revision.status.and_then(|s| s.phase), Some(RevisionPhase::Applying));

    env.start_controller(&[])?;
    env.wait_synced("web", &commit).await?;
    let settled = env.revision("web", &commit).await?;
    let phase = settled.status.and_then(|s| s.phase);
    assert!(matches!(phase, Some(RevisionPhase::Observing | RevisionPhase::Healthy)), "{phase:?}");

    let removed = env.push_removal(&["apps/web/service.yaml"], "remove the Service").await?;
    let app = env.wait_synced("web", &removed).await?;
    assert!(services.get_opt("web").await?.is_none(), "the Service was orphaned");
    let kinds: BTreeSet<String> =
        app.status.context("status")?.managed_kinds.iter().map(|k| k.kind.clone()).collect();
    assert_eq!(kinds, ["ConfigMap".to_owned()].into());
    Ok(())
}

/// A CustomResourceDefinition and a custom resource of its kind in one Application: the custom
/// resource is planned as a Create before its kind is served, takes its scope from the rendered
/// CRD, and is applied once the CRD is Established.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_and_its_custom_resource_sync_together() -> Result<()> {
    let env = env("app-crd", true).await?;
    let ns = env.namespace.clone();
    let group = format!("{ns}.example.com");
    let admin = env.cluster.client();
    apply_cluster_rbac(
        &admin,
        &[
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": format!("{ns}-crds")},
                "rules": [{"apiGroups": ["apiextensions.k8s.io"],
                           "resources": ["customresourcedefinitions"], "verbs": ["*"]},
                          {"apiGroups": [group], "resources": ["widgets"], "verbs": ["*"]}]}),
            cluster_binding(&ns, &format!("{ns}-crds")),
        ],
    )
    .await?;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                           "listKind": "WidgetList"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "spec": {"type": "object", "properties": {
                                       "size": {"type": "integer"}}}}}}}]},
    });
    let widget = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
                        "metadata": {"name": "gear"}, "spec": {"size": 3}});
    let commit = env
        .push(
            &[
                ("apps/crd/crd.yaml", serde_json::to_string(&crd)?),
                ("apps/crd/widget.yaml", serde_json::to_string(&widget)?),
            ],
            "a CRD and a Widget",
        )
        .await?;
    env.create_app("widgets", "apps/crd", json!({})).await?;
    env.wait_synced("widgets", &commit).await?;
    let plan =
        env.revision("widgets", &commit).await?.status.and_then(|s| s.plan).context("plan")?;
    assert_eq!((plan.create, plan.update), (2, 0));
    let resource = kube::api::ApiResource {
        group: group.clone(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<kube::api::DynamicObject> = Api::namespaced_with(admin, &ns, &resource);
    let gear = widgets.get("gear").await?;
    assert_eq!(gear.data["spec"]["size"], json!(3));
    assert_eq!(gear.labels().get(keys::APPLICATION).map(String::as_str), Some("widgets"));
    Ok(())
}
