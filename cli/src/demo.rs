//! `ksync demo`: the whole loop on this machine, on loopback. It starts the embedded Kubernetes
//! API with simulated workloads (`ksync-sandbox`), the admission webhook (a CA and serving
//! certificate from `kuvryn-sync-certs`, registered as the chart registers it), the controller,
//! and `git daemon` serving a sample repository the demo writes; creates a Repository and the
//! sample Applications; shows progress until the automatic ones are Healthy; starts the web view
//! (`ksync ui`, this same binary, on a free loopback port); prints its address and what to try
//! next; and on Ctrl-C stops everything it started and removes its temporary directory.
//!
//! The sibling binaries (`ksync-sandbox`, `kuvryn-sync-webhook`, `kuvryn-sync-controller`) are
//! looked up beside this one: `scripts/demo` builds them all first.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use kuvryn_sync_api::Application;
use serde_json::{Value, json};

/// The namespace the demo's Applications live in.
pub const NAMESPACE: &str = "demo";
/// How long the automatic Applications may take to become Healthy.
const READY_DEADLINE: Duration = Duration::from_secs(180);

/// Processes the demo started, stopped (SIGTERM, then SIGKILL) on drop in reverse order.
struct Started {
    children: Vec<(&'static str, Child)>,
}

impl Drop for Started {
    fn drop(&mut self) {
        for (_, child) in self.children.iter_mut().rev() {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for (_, child) in self.children.iter_mut().rev() {
            while Instant::now() < deadline {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Run the demo until Ctrl-C (or SIGTERM).
pub async fn run() -> Result<()> {
    let binaries = Binaries::beside_this_one()?;
    let git = which("git").context(
        "the demo needs `git` (it serves the sample repository with `git daemon`); install git",
    )?;
    let dir = tempfile::Builder::new().prefix("ksync-demo-").tempdir()?;
    let mut started = Started { children: Vec::new() };
    say("starting the embedded Kubernetes API (simulated workloads)");
    let kubeconfig = dir.path().join("kubeconfig");
    let sandbox = spawn_ready(
        Command::new(&binaries.sandbox)
            .args(["serve", "--simulate-workloads", "--kubeconfig"])
            .arg(&kubeconfig),
        &dir.path().join("sandbox.log"),
    )?;
    started.children.push(("sandbox", sandbox.0));
    let client = client_for(&kubeconfig).await?;
    install_crds(&client).await?;

    say("starting the admission webhook");
    let certs = kuvryn_sync_certs::generate(&kuvryn_sync_certs::CertRequest {
        dns_names: vec!["localhost".into()],
        ip_addresses: vec!["127.0.0.1".parse()?],
        validity_days: 7,
    })?;
    let tls = dir.path().join("webhook-tls");
    certs.write_to(&tls)?;
    let (webhook, ready) = spawn_ready(
        Command::new(&binaries.webhook)
            .args(["--listen", "127.0.0.1:0", "--receiver-listen", "127.0.0.1:0"])
            .args(["--metrics-bind-address", "127.0.0.1:0"])
            .arg("--tls-cert-file")
            .arg(tls.join("tls.crt"))
            .arg("--tls-key-file")
            .arg(tls.join("tls.key"))
            .env("KUBECONFIG", &kubeconfig),
        &dir.path().join("webhook.log"),
    )?;
    started.children.push(("webhook", webhook));
    let https = ready.split_whitespace().nth(1).context("the webhook's address")?.to_owned();
    register_webhooks(&client, &https, &certs.ca_cert_pem).await?;

    say("writing the sample repository and serving it with git daemon");
    let repos = dir.path().join("git");
    write_sample_repository(&git, &repos.join("demo.git"), &dir.path().join("work"))?;
    let port = free_port()?;
    let daemon = Command::new(&git)
        .args(["daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1"])
        .arg(format!("--port={port}"))
        .arg(format!("--base-path={}", repos.display()))
        .arg(&repos)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start git daemon")?;
    started.children.push(("git daemon", daemon));

    say("starting the controller");
    let controller = Command::new(&binaries.controller)
        .env("KUBECONFIG", &kubeconfig)
        .env("POD_NAME", "ksync-demo")
        .args(["--metrics-bind-address", "127.0.0.1:0", "--leader-election-namespace", "default"])
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .args(binaries.helm_args())
        .stdin(Stdio::null())
        .stdout(log_file(&dir.path().join("controller.log"))?)
        .stderr(log_file(&dir.path().join("controller.log"))?)
        .spawn()
        .context("start kuvryn-sync-controller")?;
    started.children.push(("controller", controller));

    create_demo_objects(&client, port, binaries.helm_library.is_some()).await?;
    wait_until_healthy(&client, &automatic_apps(binaries.helm_library.is_some())).await?;

    say("starting the web view (ksync ui)");
    let (ui, ui_ready) = spawn_ready(
        Command::new(std::env::current_exe()?).arg("--kubeconfig").arg(&kubeconfig).args([
            "-n",
            NAMESPACE,
            "ui",
            "--listen",
            "127.0.0.1:0",
        ]),
        &dir.path().join("ui.log"),
    )?;
    started.children.push(("ui", ui));
    let ui_url = ui_ready.strip_prefix("ready ").context("the web view's address")?.to_owned();
    print_next_steps(&kubeconfig, &ui_url, binaries.helm_library.is_none())?;

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    say("stopping");
    drop(started);
    dir.close().context("removing the demo's temporary directory")?;
    say("stopped; nothing is left running");
    Ok(())
}

fn say(text: &str) {
    eprintln!("ksync demo: {text}");
}

/// The sibling binaries, and the Helm engine when it is installed.
struct Binaries {
    sandbox: PathBuf,
    webhook: PathBuf,
    controller: PathBuf,
    helm_library: Option<PathBuf>,
}

impl Binaries {
    fn beside_this_one() -> Result<Self> {
        let dir = std::env::current_exe()?.parent().context("this binary's folder")?.to_path_buf();
        let find = |name: &str| -> Result<PathBuf> {
            let path = dir.join(name);
            if path.is_file() {
                Ok(path)
            } else {
                bail!(
                    "{} is missing: build every binary first (`scripts/demo` does, or `cargo build \
                     --release --bins`)",
                    path.display()
                )
            }
        };
        let helm_library = std::env::var_os(kuvryn_sync_helm::LIBHELM_ENV)
            .map(PathBuf::from)
            .or_else(|| {
                let cwd = std::env::current_dir().ok()?;
                kuvryn_sync_helm::find_libhelm(&cwd).ok()
            })
            .filter(|p| p.is_file());
        Ok(Binaries {
            sandbox: find("ksync-sandbox")?,
            webhook: find("kuvryn-sync-webhook")?,
            controller: find("kuvryn-sync-controller")?,
            helm_library,
        })
    }

    fn helm_args(&self) -> Vec<String> {
        match &self.helm_library {
            Some(library) => vec!["--helm-library".into(), library.display().to_string()],
            None => Vec::new(),
        }
    }
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).map(|p| p.join(program)).find(|p| p.is_file())
    })
}

fn log_file(path: &Path) -> Result<std::fs::File> {
    Ok(std::fs::OpenOptions::new().create(true).append(true).open(path)?)
}

/// Start `command` and wait for its `ready ...` line on stdout; its stderr goes to `log`.
fn spawn_ready(command: &mut Command, log: &Path) -> Result<(Child, String)> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file(log)?)
        .spawn()
        .with_context(|| format!("start {:?}", command.get_program()))?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    if !line.starts_with("ready") {
        let _ = child.kill();
        bail!("{:?} did not start (see {}): {line:?}", command.get_program(), log.display());
    }
    Ok((child, line.trim().to_owned()))
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

async fn client_for(kubeconfig: &Path) -> Result<kube::Client> {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(kube::Client::try_from(config)?)
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    let api_version =
        if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version,
        kind: kind.into(),
        plural: plural.into(),
    }
}

async fn apply(
    client: &kube::Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    body: &Value,
) -> Result<()> {
    let name = body["metadata"]["name"].as_str().context("a name")?;
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    api.patch(name, &PatchParams::apply("ksync-demo").force(), &Patch::Apply(body))
        .await
        .with_context(|| format!("applying {} {name}", resource.kind))?;
    Ok(())
}

async fn install_crds(client: &kube::Client) -> Result<()> {
    let crd = resource(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    );
    for definition in kuvryn_sync_api::crds() {
        apply(client, &crd, None, &serde_json::to_value(&definition)?).await?;
    }
    // Established before anything uses them.
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &crd);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = api.list(&Default::default()).await?;
        let established = list.items.iter().filter(|c| {
            c.data["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True")
            })
        });
        if established.count() >= kuvryn_sync_api::crds().len() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the Kuvryn Sync CRDs did not become Established within 30s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The two admission webhooks, failing closed, as the chart registers them.
async fn register_webhooks(client: &kube::Client, https: &str, ca_pem: &str) -> Result<()> {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let hook = |name: &str, path: &str, plural: &str, scope: &str| {
        json!({
            "name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "timeoutSeconds": 10,
            "clientConfig": {"url": format!("{https}{path}"), "caBundle": ca},
            "rules": [{"apiGroups": ["sync.kuvryn.io"], "apiVersions": ["v1alpha1"],
                       "resources": [plural], "operations": ["CREATE", "UPDATE"], "scope": scope}],
        })
    };
    let group = "admissionregistration.k8s.io";
    apply(client, &resource(group, "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations"), None, &json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "kuvryn-sync-healthchecks"},
        "webhooks": [hook("validate.healthchecks.sync.kuvryn.io", "/validate/healthchecks", "healthchecks", "Cluster")],
    })).await?;
    apply(client, &resource(group, "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations"), None, &json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "kuvryn-sync-applications"},
        "webhooks": [hook("admit.applications.sync.kuvryn.io", "/admit/applications", "applications", "Namespaced")],
    })).await?;
    Ok(())
}

/// The sample repository: plain YAML, a kustomize overlay, a local Helm chart, an app that
/// depends on another, one with manual sync, and one broken on purpose (a missing Secret).
fn write_sample_repository(git: &Path, bare: &Path, work: &Path) -> Result<()> {
    let deployment = |name: &str, extra_env: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": name, "image": format!("registry.example/{name}:1.0"),
                        "env": extra_env}]}}}})
    };
    let yaml = |value: Value| kuvryn_sync_core::yaml::to_string(&value).expect("yaml");
    let files: Vec<(&str, String)> = vec![
        ("guestbook/deployment.yaml", yaml(deployment("guestbook", json!([])))),
        ("guestbook/service.yaml", yaml(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "guestbook"},
            "spec": {"selector": {"app": "guestbook"}, "ports": [{"port": 80}]}}))),
        ("frontend/deployment.yaml", yaml(deployment("frontend", json!([{"name": "BACKEND", "value": "guestbook"}])))),
        ("overlays/base/kustomization.yaml", "resources: [deployment.yaml]\n".into()),
        ("overlays/base/deployment.yaml", yaml(deployment("api", json!([])))),
        ("overlays/prod/kustomization.yaml",
            "resources: [../base]\nnamePrefix: prod-\nconfigMapGenerator:\n- name: api-settings\n  literals: [mode=prod]\n".into()),
        ("chart/Chart.yaml", "apiVersion: v2\nname: hello\nversion: 0.1.0\n".into()),
        ("chart/values.yaml", "greeting: hello from Helm\n".into()),
        ("chart/templates/configmap.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-hello\ndata:\n  greeting: {{ .Values.greeting | quote }}\n".into()),
        ("approvals/configmap.yaml", yaml(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "feature-flags"}, "data": {"checkout": "on"}}))),
        ("broken/deployment.yaml", yaml(deployment("broken", json!([{"name": "DB_PASSWORD",
            "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}])))),
    ];
    for (path, content) in &files {
        let full = work.join(path);
        std::fs::create_dir_all(full.parent().context("a folder")?)?;
        std::fs::write(full, content)?;
    }
    let run = |args: &[&str], dir: &Path| -> Result<()> {
        let status = Command::new(git)
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "ksync demo")
            .env("GIT_AUTHOR_EMAIL", "demo@example.invalid")
            .env("GIT_COMMITTER_NAME", "ksync demo")
            .env("GIT_COMMITTER_EMAIL", "demo@example.invalid")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("git {} failed", args.join(" "));
        }
        Ok(())
    };
    std::fs::create_dir_all(bare)?;
    run(&["init", "--quiet", "--bare", "--initial-branch=main"], bare)?;
    run(&["init", "--quiet", "--initial-branch=main"], work)?;
    run(&["add", "-A"], work)?;
    run(&["commit", "--quiet", "-m", "the ksync demo's applications"], work)?;
    run(&["push", "--quiet", &bare.display().to_string(), "main"], work)?;
    Ok(())
}

/// The Applications that deploy without a person: the demo waits for them.
fn automatic_apps(with_helm: bool) -> Vec<&'static str> {
    let mut apps = vec!["guestbook", "frontend", "api"];
    if with_helm {
        apps.push("hello");
    }
    apps
}

async fn create_demo_objects(client: &kube::Client, port: u16, with_helm: bool) -> Result<()> {
    let core = |kind: &str, plural: &str| resource("", "v1", kind, plural);
    apply(
        client,
        &core("Namespace", "namespaces"),
        None,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    )
    .await?;
    apply(
        client,
        &core("ServiceAccount", "serviceaccounts"),
        Some(NAMESPACE),
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer"}}),
    )
    .await?;
    let rbac = |kind: &str, plural: &str| resource("rbac.authorization.k8s.io", "v1", kind, plural);
    apply(client, &rbac("Role", "roles"), Some(NAMESPACE), &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "deployer"},
        "rules": [{"apiGroups": ["", "apps", "batch"], "resources": ["*"], "verbs": ["*"]}],
    })).await?;
    apply(client, &rbac("RoleBinding", "rolebindings"), Some(NAMESPACE), &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "deployer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deployer"},
        "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": NAMESPACE}],
    })).await?;
    let sync = |kind: &str, plural: &str| resource("sync.kuvryn.io", "v1alpha1", kind, plural);
    apply(client, &sync("Repository", "repositories"), Some(NAMESPACE), &json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository", "metadata": {"name": "demo"},
        "spec": {"git": {"url": format!("git://127.0.0.1:{port}/demo.git"), "revision": "main"}, "pollInterval": "10s"},
    })).await?;
    let mut apps = vec![
        (
            "guestbook",
            "guestbook",
            json!({"type": "yaml"}),
            json!({"automatic": true, "prune": true}),
            json!([]),
        ),
        (
            "frontend",
            "frontend",
            json!({"type": "yaml"}),
            json!({"automatic": true, "prune": true}),
            json!([{"name": "guestbook"}]),
        ),
        (
            "api",
            "overlays/prod",
            json!({"type": "kustomize"}),
            json!({"automatic": true, "prune": true}),
            json!([]),
        ),
        ("approvals", "approvals", json!({"type": "yaml"}), json!({"automatic": false}), json!([])),
        ("broken", "broken", json!({"type": "yaml"}), json!({"automatic": true}), json!([])),
    ];
    if with_helm {
        apps.push((
            "hello",
            "chart",
            json!({"type": "helm", "helm": {"releaseName": "demo"}}),
            json!({"automatic": true}),
            json!([]),
        ));
    }
    for (name, path, render, sync_policy, depends_on) in apps {
        let mut spec = json!({
            "serviceAccountName": "deployer",
            "source": {"repositoryRef": {"name": "demo"}, "path": path, "render": render},
            "destination": {"namespace": NAMESPACE},
            "sync": sync_policy,
        });
        if depends_on.as_array().is_some_and(|d| !d.is_empty()) {
            spec["dependsOn"] = depends_on;
        }
        apply(
            client,
            &sync("Application", "applications"),
            Some(NAMESPACE),
            &json!({
                "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
                "metadata": {"name": name}, "spec": spec,
            }),
        )
        .await?;
    }
    Ok(())
}

/// Show progress until every automatic Application is Ready=True/Healthy.
async fn wait_until_healthy(client: &kube::Client, apps: &[&str]) -> Result<()> {
    let api: Api<Application> = Api::namespaced(client.clone(), NAMESPACE);
    let started = Instant::now();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    loop {
        let mut healthy = Vec::new();
        let mut waiting = Vec::new();
        for name in apps {
            let ready = api
                .get_opt(name)
                .await?
                .and_then(|app| app.status?.conditions.into_iter().find(|c| c.type_ == "Ready"));
            match ready {
                Some(c) if c.status == "True" => healthy.push(*name),
                Some(c) => waiting.push(format!("{name} ({})", c.reason)),
                None => waiting.push(format!("{name} (starting)")),
            }
        }
        let line = format!(
            "{}/{} Healthy after {}s{}",
            healthy.len(),
            apps.len(),
            started.elapsed().as_secs(),
            if waiting.is_empty() {
                String::new()
            } else {
                format!("; waiting for {}", waiting.join(", "))
            }
        );
        if tty {
            eprint!("\r\x1b[2Kksync demo: {line}");
        }
        if waiting.is_empty() {
            if tty {
                eprintln!();
            }
            say(&line);
            return Ok(());
        }
        if started.elapsed() > READY_DEADLINE {
            bail!("the demo's Applications were not Healthy within {READY_DEADLINE:?}: {line}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn print_next_steps(kubeconfig: &Path, ui_url: &str, without_helm: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let k = kubeconfig.display();
    writeln!(out, "ready kubeconfig={k}")?;
    writeln!(out, "ready ui={ui_url}")?;
    writeln!(
        out,
        "
Kuvryn Sync is running on this machine.

Open the web view: {ui_url}
  (Applications, the broken one's tree down to its missing Secret, the plan waiting for
  approval and its Approve button; it acts as the demo's kubeconfig user.)

Or, in another terminal:

  export KUBECONFIG={k}
  kubectl get kuvryn -A                     # Repositories, Applications, Revisions
  ksync status -n {NAMESPACE}                     # every Application at a glance
  ksync plan approvals -n {NAMESPACE}             # the plan waiting for approval
  ksync sync approvals -n {NAMESPACE}             # approve it (the webhook records who)
  kubectl get application approvals -n {NAMESPACE} -o jsonpath='{{.metadata.annotations}}'
  ksync diagnose broken -n {NAMESPACE}            # why 'broken' is not Healthy: a missing Secret
  kubectl create secret generic db -n {NAMESPACE} --from-literal=password=s3cr3t   # fix it
  ksync wait broken -n {NAMESPACE} --for healthy

The sample repository is served by git daemon; the Applications follow its main branch.
Press Ctrl-C to stop everything the demo started."
    )?;
    if without_helm {
        writeln!(
            out,
            "(The Helm sample is left out: the Helm engine was not found. Set {}=/path/to/\
             libhelm_c.so or run scripts/test once to install it into .tools/.)",
            kuvryn_sync_helm::LIBHELM_ENV,
        )?;
    }
    out.flush()?;
    Ok(())
}
