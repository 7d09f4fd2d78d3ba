//! Helm Applications end to end: the real controller binary renders charts with the real Helm
//! engine (`libhelm_c.so` in the `ksync-helm-render` helper) from a Git repository served by git
//! daemon, from an https Helm repository (lighttpd, basic auth, index written by the Helm engine)
//! and from an OCI registry (`docker-registry`, TLS, htpasswd), into the sandbox API server.
//!
//! What the API allows is tested here; what it refuses is tested at admission: an invalid
//! `releaseName` is refused by the CRD schema (checked with kubectl below), so an Application
//! stored with one can only come from before the rule, which the `helm_values` unit tests and
//! the controller's release-name check cover.
//!
//! Needs the Debian packages `lighttpd lighttpd-mod-openssl apache2-utils docker-registry`, the
//! helm-python-sdk wheel (`KSYNC_LIBHELM`) and
//! `cargo build -p kuvryn-sync-controller -p kuvryn-sync-helm --bins`. Nothing is skipped.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject, PostParams};
use kuvryn_sync_api::{Application, PlanAction, Revision, SyncState, keys};
use kuvryn_sync_tests::application::{Env, apply_cluster_rbac, cluster_binding, env};
use kuvryn_sync_tests::charts;
use kuvryn_sync_tests::cli::Ksync;
use kuvryn_sync_tests::cluster::ControllerProcess;
use kuvryn_sync_tests::helm::libhelm;
use kuvryn_sync_tests::servers::registry::{HttpsFiles, OciRegistry};
use serde_json::{Value, json};

/// A value only the `valuesFrom` Secret holds; the chart writes it into a ConfigMap.
const SECRET_CANARY: &str = "canary-7e2b51d0-helm-values-secret";
const USER: &str = "charts";
const PASSWORD: &str = "canary-pw-91fa-helm-e2e";
const WRONG_PASSWORD: &str = "canary-wrong-pw-55c2-helm-e2e";
const CHART: &str = "pulled";
const VERSION: &str = "1.2.3";

/// Start the controller of `env` with `args` (besides a long poll interval: each commit is
/// announced) and environment `vars`, its output in the env's log.
fn start_controller(env: &mut Env, args: &[&str], vars: &[(&str, &str)]) -> Result<()> {
    let mut all = vec!["--default-poll-interval", "1h"];
    all.extend_from_slice(args);
    let log = env.log_path();
    env.controller = Some(ControllerProcess::start_logged(&env.cluster, &all, vars, &log)?);
    Ok(())
}

/// Everything the controller wrote where users read: Revisions, Applications, the Events about
/// `apps`, and its log.
async fn visible_output(env: &Env, apps: &[&str]) -> Result<String> {
    let revisions = env.api::<Revision>().list(&Default::default()).await?;
    let applications = env.api::<Application>().list(&Default::default()).await?;
    let mut seen =
        serde_json::to_string(&revisions.items)? + &serde_json::to_string(&applications.items)?;
    for app in apps {
        seen.push_str(&format!("{:?}", env.events_for(app).await?));
    }
    seen.push_str(&env.controller_log());
    Ok(seen)
}

/// A Secret from JSON.
fn secret(name: &str, labels: Value, string_data: Value) -> Result<Secret> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "labels": labels}, "stringData": string_data,
    }))?)
}

/// The data of ConfigMap `name`, or `None` when it does not exist.
async fn config_map_data(env: &Env, name: &str) -> Result<Option<Value>> {
    let found = env.api::<ConfigMap>().get_opt(name).await?;
    Ok(found.map(|cm| json!(cm.data.unwrap_or_default())))
}

/// Run kubectl against the env's cluster off the async runtime (the sandbox serves on it);
/// whether it succeeded and what it printed.
async fn kubectl(env: &Env, args: &[&str], file: &Path) -> Result<(bool, String)> {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(env.cluster.kubeconfig()).args(args).arg("-f").arg(file);
    let output = tokio::task::spawn_blocking(move || cmd.output()).await??;
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    Ok((output.status.success(), text))
}

/// The local chart's files, under `apps/chart` in the repository, and one values file outside
/// it. Every value says where it was last set, so the rendered ConfigMap shows the precedence.
fn local_chart(group: &str) -> Vec<(&'static str, String)> {
    let keys =
        ["chartOnly", "fileInChart", "fileElsewhere", "fromConfigMap", "fromSecret", "inline"];
    let defaults: String = keys.iter().map(|k| format!("{k}: chart-default\n")).collect();
    let settings: String =
        keys.iter().map(|k| format!("  {k}: {{{{ .Values.{k} | quote }}}}\n")).collect();
    vec![
        ("apps/chart/Chart.yaml", "apiVersion: v2\nname: widgets\nversion: 0.1.0\n".to_owned()),
        ("apps/chart/values.yaml", format!("{defaults}token: none\nfailWith: false\n")),
        (
            "apps/chart/values-team.yaml",
            "fileInChart: file-in-chart\nfileElsewhere: file-in-chart\nfromConfigMap: \
             file-in-chart\nfromSecret: file-in-chart\ninline: file-in-chart\n"
                .to_owned(),
        ),
        (
            "config/prod.yaml",
            "fileElsewhere: file-elsewhere\nfromConfigMap: file-elsewhere\n".to_owned(),
        ),
        (
            "apps/chart/templates/settings.yaml",
            format!(
                "{{{{- if .Values.failWith }}}}{{{{ fail (printf \"refusing token %s\" .Values.token) }}}}\
                 {{{{- end }}}}\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{{{ .Release.Name }}}}-settings\n\
                 data:\n{settings}  token: {{{{ .Values.token | quote }}}}\n"
            ),
        ),
        (
            "apps/chart/templates/widget.yaml",
            format!(
                "apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: {{{{ .Release.Name }}}}-gear\n\
                 spec:\n  size: 3\n"
            ),
        ),
        (
            "apps/chart/crds/widgets.yaml",
            format!(
                "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
                 metadata:\n  name: widgets.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n\
                 \x20 names: {{plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}}\n\
                 \x20 versions:\n  - name: v1\n    served: true\n    storage: true\n\
                 \x20   schema:\n      openAPIV3Schema:\n        type: object\n\
                 \x20       properties:\n          spec:\n            type: object\n\
                 \x20           properties: {{size: {{type: integer}}}}\n"
            ),
        ),
    ]
}

/// Cases 1–3 of Helm acceptance on a chart in Git: values precedence, a `valuesFrom` Secret's
/// value kept out of everything users read, `crds/` applied before the custom resource, the
/// default release name, and the schema refusing an invalid release name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_chart_layers_values_applies_its_crd_first_and_keeps_secret_values_hidden()
-> Result<()> {
    let mut env = env("helm-local", false).await?;
    let ns = env.namespace.clone();
    let group = format!("{ns}.example.com");
    apply_cluster_rbac(
        &env.cluster.client(),
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
    let library = libhelm();
    start_controller(&mut env, &["--helm-library", &library.to_string_lossy()], &[])?;
    let commit = env.push(&local_chart(&group), "a chart with a CRD").await?;

    // valuesFrom: a ConfigMap (default key) and an unlabelled Secret (another key), both read
    // as the deployer, which may get ConfigMaps and Secrets in its namespace.
    let team: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "team-values"},
        "data": {"values.yaml": "fromConfigMap: from-configmap\nfromSecret: from-configmap\n\
                                 inline: from-configmap\n"},
    }))?;
    env.api::<ConfigMap>().create(&PostParams::default(), &team).await?;
    let from_secret = secret(
        "secret-values",
        json!({}),
        json!({"override.yaml": format!("fromSecret: from-secret\ninline: from-secret\n\
                                         token: {SECRET_CANARY}\n")}),
    )?;
    env.api::<Secret>().create(&PostParams::default(), &from_secret).await?;

    let helm = |inline: Value| {
        json!({"source": {"render": {"type": "helm", "helm": {
            "valuesFiles": ["apps/chart/values-team.yaml", "config/prod.yaml"],
            "valuesFrom": [{"kind": "ConfigMap", "name": "team-values"},
                           {"kind": "Secret", "name": "secret-values", "key": "override.yaml"}],
            "values": inline,
        }}}})
    };
    env.create_app("web", "apps/chart", helm(json!({"inline": "inline"}))).await?;
    // The same chart made to fail with the Secret's value in Helm's error message.
    env.create_app("leaky", "apps/chart", helm(json!({"inline": "inline", "failWith": true})))
        .await?;
    env.wait_synced("web", &commit).await?;

    // Precedence: inline > valuesFrom (in order) > values files (in order) > chart defaults; and
    // `.Release.Name` is the default `kuvryn-sync`.
    let settings = config_map_data(&env, "kuvryn-sync-settings")
        .await?
        .context("ConfigMap kuvryn-sync-settings (named after the default release) exists")?;
    assert_eq!(
        settings,
        json!({
            "chartOnly": "chart-default",
            "fileInChart": "file-in-chart",
            "fileElsewhere": "file-elsewhere",
            "fromConfigMap": "from-configmap",
            "fromSecret": "from-secret",
            "inline": "inline",
            "token": SECRET_CANARY,
        })
    );

    // The CRD from crds/ and the custom resource the chart templates: both planned, both exist
    // (the Widget could only be created once its CRD was served).
    let plan = env.revision("web", &commit).await?.status.and_then(|s| s.plan).context("plan")?;
    let planned: Vec<(String, String, PlanAction)> = plan
        .changes
        .iter()
        .map(|c| (c.resource.kind.clone(), c.resource.name.clone(), c.action))
        .collect();
    for (kind, name) in [
        ("CustomResourceDefinition", format!("widgets.{group}")),
        ("Widget", "kuvryn-sync-gear".into()),
    ] {
        assert!(
            planned.contains(&(kind.to_owned(), name.clone(), PlanAction::Create)),
            "{kind} {name} is planned as a Create: {planned:?}"
        );
    }
    let widgets: Api<DynamicObject> = Api::namespaced_with(
        env.cluster.client(),
        &ns,
        &kube::api::ApiResource {
            group: group.clone(),
            version: "v1".into(),
            api_version: format!("{group}/v1"),
            kind: "Widget".into(),
            plural: "widgets".into(),
        },
    );
    let gear = widgets.get("kuvryn-sync-gear").await?;
    assert_eq!(gear.data["spec"]["size"], json!(3));
    assert_eq!(
        gear.metadata.labels.unwrap_or_default().get(keys::APPLICATION),
        Some(&"web".into())
    );

    // The valuesFrom Secret's value is in the cluster's ConfigMap only: not in the failure
    // message of the chart that printed it, nor anywhere else users read.
    let message = env.wait_failed("leaky", "RenderFailure").await?;
    assert!(message.contains("refusing token"), "Helm's own error is reported: {message}");
    let seen = visible_output(&env, &["web", "leaky"]).await?;
    assert!(!seen.contains(SECRET_CANARY), "a value from a valuesFrom Secret leaked");

    cli_renders_the_chart_as_the_controller_does(&env, &group, &library).await?;

    // An invalid release name never gets stored: the CRD schema refuses it, naming the field.
    let dir = tempfile::tempdir()?;
    let bad = dir.path().join("bad-release.yaml");
    let app = json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "bad-release", "namespace": ns},
        "spec": {"serviceAccountName": "deployer",
                 "source": {"repositoryRef": {"name": "apps"}, "path": "apps/chart",
                            "render": {"type": "helm", "helm": {"releaseName": "Web_Release"}}},
                 "destination": {"namespace": ns}},
    });
    std::fs::write(&bad, serde_json::to_string(&app)?)?;
    let (ok, out) = kubectl(&env, &["create"], &bad).await?;
    assert!(!ok, "an Application with releaseName Web_Release was accepted: {out}");
    assert!(out.contains("spec.source.render.helm.releaseName"), "{out}");
    assert!(env.api::<Application>().get_opt("bad-release").await?.is_none());

    // A valuesFrom ConfigMap that changes is rendered again within seconds, not at the resync
    // five minutes later: Applications are woken by the objects they read by name.
    let patch = json!({"data": {"values.yaml": "fromConfigMap: changed\nfromSecret: from-configmap\n\
                                               inline: from-configmap\n"}});
    env.api::<ConfigMap>()
        .patch("team-values", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
        .await?;
    kuvryn_sync_tests::cluster::wait_for(
        "the changed valuesFrom ConfigMap rendered",
        std::time::Duration::from_secs(30),
        || async {
            let data = config_map_data(&env, "kuvryn-sync-settings").await?;
            let value = data.as_ref().map(|d| d["fromConfigMap"].clone());
            Ok((value.clone().filter(|v| v == "changed"), format!("{value:?}")))
        },
    )
    .await?;
    Ok(())
}

/// `ksync render --local` and `ksync diff` render the chart through the controller's render
/// function: the same values precedence, a values file outside the chart found from the
/// repository root, the same plan for an Application waiting for approval, and `valuesFrom`
/// refused by `ksync diff` naming the field.
async fn cli_renders_the_chart_as_the_controller_does(
    env: &Env,
    group: &str,
    library: &Path,
) -> Result<()> {
    let ksync = Ksync::new(env)?;
    let library = library.to_str().context("utf-8 library path")?;
    let repo = tempfile::tempdir()?;
    charts::write_files(repo.path(), &local_chart(group))?;
    let chart = repo.path().join("apps/chart");
    let chart = chart.to_str().context("utf-8 path")?;

    let rendered = ksync
        .ok(&[
            "render",
            "--local",
            chart,
            "--type",
            "helm",
            "--values",
            "values-team.yaml",
            "--release-name",
            "local",
            "--helm-library",
            library,
        ])
        .await?;
    let objects = kuvryn_sync_core::yaml::documents(&rendered)?;
    let settings = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "local-settings")
        .with_context(|| format!("ConfigMap local-settings rendered:\n{rendered}"))?;
    assert_eq!(settings["data"]["chartOnly"], "chart-default", "{rendered}");
    assert_eq!(settings["data"]["fileElsewhere"], "file-in-chart", "{rendered}");
    assert!(objects.iter().any(|o| o["kind"] == "CustomResourceDefinition"), "{rendered}");
    assert!(objects.iter().any(|o| o["kind"] == "Widget"), "{rendered}");

    // valuesFrom is the cluster's: `ksync diff` says it does not read it.
    let refused = ksync.run(&["diff", "web", "--path", chart, "--helm-library", library]).await?;
    assert_ne!(refused.code, 0, "{refused:?}");
    assert!(
        refused.stderr.contains("spec.source.render.helm.valuesFrom[0]: ConfigMap team-values"),
        "{refused:?}"
    );

    // An Application waiting for approval (adopting, so the CRD `web` holds can be planned):
    // `ksync diff` on a working copy of the same commit plans what the controller planned,
    // `config/prod.yaml` read from the repository root above `apps/chart`.
    env.create_app(
        "manual",
        "apps/chart",
        json!({"source": {"render": {"type": "helm", "helm": {
                  "releaseName": "manual",
                  "valuesFiles": ["apps/chart/values-team.yaml", "config/prod.yaml"],
                  "values": {"inline": "inline"}}}},
               "sync": {"automatic": false, "conflictPolicy": "adopt"}}),
    )
    .await?;
    env.wait_app("manual", "AwaitingApproval", |app| {
        app.status.as_ref().is_some_and(|s| s.sync.state == SyncState::AwaitingApproval)
    })
    .await?;
    let planned = ksync.json(&["plan", "manual"]).await?;
    let diffed = ksync
        .run(&["diff", "manual", "--path", chart, "--helm-library", library, "-o", "json"])
        .await?;
    assert_eq!(diffed.code, 0, "{diffed:?}");
    let diffed: Value = serde_json::from_str(&diffed.stdout)?;
    let actions = |plan: &Value| -> Vec<(Value, Value, Value)> {
        let changes = plan["changes"].as_array().cloned().unwrap_or_default();
        let mut actions: Vec<_> = changes
            .iter()
            .map(|c| {
                (c["resource"]["kind"].clone(), c["resource"]["name"].clone(), c["action"].clone())
            })
            .collect();
        actions.sort_by_key(|a| format!("{a:?}"));
        actions
    };
    for count in ["create", "update", "delete"] {
        assert_eq!(diffed[count], planned[count], "{count}: diff {diffed} plan {planned}");
    }
    assert_eq!(actions(&diffed), actions(&planned), "diff {diffed} plan {planned}");
    assert!(planned["create"].as_u64() >= Some(2), "{planned}");
    Ok(())
}

/// The chart pulled from both remote sources: one archive, published by the Helm engine.
fn package_pulled_chart(work: &Path) -> Result<std::path::PathBuf> {
    let chart = work.join("src").join(CHART);
    charts::write_files(
        &chart,
        &[
            ("Chart.yaml", format!("apiVersion: v2\nname: {CHART}\nversion: {VERSION}\n")),
            ("values.yaml", "origin: chart-default\n".to_owned()),
            (
                "templates/cm.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-pulled\n\
                 data:\n  origin: {{ .Values.origin | quote }}\n"
                    .to_owned(),
            ),
        ],
    )?;
    charts::package(&chart, &work.join("out"))
}

/// Cases 4–5: a chart pulled from an https Helm repository and from an OCI registry, with
/// credentials from a labelled Secret declaring the repository in its `url` key, deploys and
/// records the archive's digest; an unlabelled credentials Secret, a wrong password, a Secret
/// declared for another host or one declaring none fails the render, applies nothing and leaks
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulled_charts_deploy_with_their_digest_and_bad_credentials_fail_the_render() -> Result<()>
{
    let work = tempfile::tempdir()?;
    let archive = package_pulled_chart(work.path())?;
    let digest = charts::sha256_digest(&archive)?;
    let files = HttpsFiles::start(USER, PASSWORD)?;
    std::fs::copy(&archive, files.root().join(archive.file_name().context("archive name")?))?;
    charts::index(files.root())?;
    let registry = OciRegistry::start(USER, PASSWORD)?;
    charts::push(&archive, &registry, "team/charts", USER, PASSWORD)?;
    let ca_file = work.path().join("registry-ca.pem");
    std::fs::write(&ca_file, format!("{}\n{}", files.ca_pem, registry.ca_pem))?;

    let mut env = env("helm-pull", false).await?;
    let library = libhelm();
    start_controller(
        &mut env,
        &[
            "--helm-library",
            &library.to_string_lossy(),
            "--registry-ca-file",
            &ca_file.to_string_lossy(),
        ],
        &[],
    )?;
    let commit = env
        .push(&[("apps/pulled/README.md", "The chart is pulled.\n".to_owned())], "a path")
        .await?;
    let labelled = json!({keys::REGISTRY_CREDENTIALS: keys::TRUE});
    let https = files.url("");
    let oci = registry.oci_url("team/charts");
    // Each Secret declares the repository it is for (its url key).
    for (name, labels, password, url) in [
        ("chart-credentials", labelled.clone(), PASSWORD, https.as_str()),
        ("oci-credentials", labelled.clone(), PASSWORD, oci.as_str()),
        ("unlabelled-credentials", json!({}), PASSWORD, https.as_str()),
        ("wrong-credentials", labelled.clone(), WRONG_PASSWORD, https.as_str()),
    ] {
        let data = json!({"username": USER, "password": password, "url": url});
        let credentials = secret(name, labels, data)?;
        env.api::<Secret>().create(&PostParams::default(), &credentials).await?;
    }
    // Without a declared url, a chart Secret goes nowhere.
    let undeclared = secret(
        "undeclared-credentials",
        labelled,
        json!({"username": USER, "password": PASSWORD}),
    )?;
    env.api::<Secret>().create(&PostParams::default(), &undeclared).await?;
    let cases = [
        ("from-https", https.as_str(), "chart-credentials"),
        ("from-oci", oci.as_str(), "oci-credentials"),
        ("unlabelled", https.as_str(), "unlabelled-credentials"),
        ("wrong-password", https.as_str(), "wrong-credentials"),
        // The https repository's Secret named with the registry: another host.
        ("other-host", oci.as_str(), "chart-credentials"),
        ("undeclared", https.as_str(), "undeclared-credentials"),
    ];
    for (app, repository, credentials) in cases {
        // The release is named after the Application, so its ConfigMap says who applied it.
        let helm = json!({
            "releaseName": app,
            "values": {"origin": app},
            "chart": {"repository": repository, "name": CHART, "version": VERSION,
                      "secretRef": {"name": credentials}},
        });
        let spec = json!({"source": {"render": {"type": "helm", "helm": helm}}});
        env.create_app(app, "apps/pulled", spec).await?;
    }

    for app in ["from-https", "from-oci"] {
        env.wait_synced(app, &commit).await?;
        let data = config_map_data(&env, &format!("{app}-pulled")).await?;
        assert_eq!(data, Some(json!({"origin": app})), "{app} deployed the pulled chart");
        let status = env.revision(app, &commit).await?.status.context("Revision status")?;
        assert_eq!(status.chart_digest.as_deref(), Some(digest.as_str()), "{app}");
    }
    let message = env.wait_failed("unlabelled", "RenderFailure").await?;
    assert!(message.contains("sync.kuvryn.io/registry-credentials"), "{message}");
    let message = env.wait_failed("wrong-password", "RenderFailure").await?;
    assert!(message.contains("authentication failed"), "{message}");
    let message = env.wait_failed("other-host", "RenderFailure").await?;
    assert!(message.contains("url key") && message.contains("does not cover"), "{message}");
    let message = env.wait_failed("undeclared", "RenderFailure").await?;
    assert!(message.contains("has no url key"), "{message}");
    for app in ["unlabelled", "wrong-password", "other-host", "undeclared"] {
        let data = config_map_data(&env, &format!("{app}-pulled")).await?;
        assert_eq!(data, None, "{app} applied nothing");
    }

    let seen = visible_output(
        &env,
        &["from-https", "from-oci", "unlabelled", "wrong-password", "other-host", "undeclared"],
    )
    .await?;
    assert!(!seen.contains(PASSWORD), "the registry password leaked");
    assert!(!seen.contains(WRONG_PASSWORD), "the wrong password leaked");
    Ok(())
}

/// Case 6: a controller without the Helm engine (no `--helm-library`, `KSYNC_LIBHELM` empty)
/// fails Helm Applications with a RenderFailure saying how to enable Helm, and applies nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_helm_engine_a_helm_application_fails_saying_how_to_enable_it() -> Result<()> {
    let mut env = env("helm-off", false).await?;
    start_controller(&mut env, &[], &[(kuvryn_sync_helm::LIBHELM_ENV, "")])?;
    env.push(
        &[
            ("apps/chart/Chart.yaml", "apiVersion: v2\nname: off\nversion: 0.1.0\n".to_owned()),
            (
                "apps/chart/templates/cm.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-off\n"
                    .to_owned(),
            ),
        ],
        "a chart",
    )
    .await?;
    env.create_app("off", "apps/chart", json!({"source": {"render": {"type": "helm"}}})).await?;
    let message = env.wait_failed("off", "RenderFailure").await?;
    assert!(message.contains("--helm-library"), "{message}");
    assert_eq!(config_map_data(&env, "kuvryn-sync-off").await?, None, "nothing applied");
    Ok(())
}
