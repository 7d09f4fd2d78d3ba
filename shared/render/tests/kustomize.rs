//! The kustomize renderer against the real engine and against small fake programs (shell scripts
//! in a temporary directory) that sleep, flood, fail or record what they were given.
//!
//! The real engine is whatever `KustomizeProgram::detect(None)` finds: a `kustomize` on `PATH`,
//! else `kubectl kustomize`. On the development machine `/usr/bin/kubectl` is the Google Cloud
//! SDK's kubectl dispatcher; `kubectl kustomize` works through it without a server or kubeconfig
//! (it runs the bundled kustomize v5.5), even with the cleared environment the renderer gives it.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kuvryn_sync_api::FailureReason;
use kuvryn_sync_render::kustomize::{Kustomize, KustomizeError, KustomizeProgram};
use kuvryn_sync_render::workspace::Workspace;
use kuvryn_sync_render::yaml::Limits;
use serde_json::Value;

const CANARY: &str = "canary-41d9-outside-value";
const REMOTE: &str = "https://github.com/kubernetes-sigs/kustomize//examples/helloWorld?ref=v5.0.0";

fn write(root: &Path, relative: &str, content: &str) {
    let path = root.join(relative);
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, content).expect("write");
}

/// A sealed workspace copied from `repo`.
fn sealed(repo: &Path) -> Workspace {
    let mut workspace = Workspace::copy_of(repo, Limits::default()).expect("copy");
    workspace.seal().expect("seal");
    workspace
}

fn real_engine() -> Kustomize {
    Kustomize::new(KustomizeProgram::detect(None))
}

/// A fake kustomize: a shell script at `<dir>/bin/kustomize`.
fn fake_engine(dir: &Path, script: &str) -> Kustomize {
    let path = dir.join("bin/kustomize");
    write(dir, "bin/kustomize", &format!("#!/bin/sh\n{script}\n"));
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
    Kustomize::new(KustomizeProgram::Kustomize(path))
}

/// The objects `program` prints for `dir` when run directly, as the reference.
fn run_directly(program: &KustomizeProgram, dir: &Path) -> Vec<Value> {
    let subcommand = match program {
        KustomizeProgram::Kustomize(_) => "build",
        KustomizeProgram::Kubectl(_) => "kustomize",
    };
    let output = Command::new(program.path()).arg(subcommand).arg(dir).output().expect("run");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).expect("utf-8");
    kuvryn_sync_core::yaml::documents(&text).expect("yaml")
}

/// A repository with a base and a production overlay using every feature under test.
fn overlay_repository(root: &Path) {
    write(
        root,
        "base/kustomization.yaml",
        r#"apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - deployment.yaml
  - service.yaml
commonLabels:
  app: web
configMapGenerator:
  - name: web-config
    literals:
      - LOG_LEVEL=info
    files:
      - settings.ini
secretGenerator:
  - name: web-secret
    literals:
      - password=s3cr3t-value
"#,
    );
    write(root, "base/settings.ini", "[server]\nport = 8080\n");
    write(
        root,
        "base/deployment.yaml",
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {}
  template:
    spec:
      containers:
        - name: web
          image: nginx:1.27
          envFrom:
            - configMapRef:
                name: web-config
          volumeMounts:
            - name: secret
              mountPath: /secret
      volumes:
        - name: secret
          secret:
            secretName: web-secret
"#,
    );
    write(
        root,
        "base/service.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports:\n    - port: 80\n",
    );
    write(
        root,
        "overlays/prod/kustomization.yaml",
        r#"apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../../base
namePrefix: prod-
commonLabels:
  env: prod
patches:
  - path: replicas.yaml
  - target:
      kind: Deployment
      name: web
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/args
        value: ["--verbose"]
"#,
    );
    write(
        root,
        "overlays/prod/replicas.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n",
    );
}

#[test]
fn an_overlay_renders_exactly_as_the_engine_run_directly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().join("repo");
    overlay_repository(&repo);
    let engine = real_engine();
    let workspace = sealed(&repo);

    let rendered = engine.render(&workspace, "overlays/prod").expect("render");

    let objects: Vec<Value> = rendered.iter().map(|r| r.object.clone()).collect();
    assert_eq!(objects, run_directly(&engine.program, &repo.join("overlays/prod")));
    let origins: Vec<&str> = rendered.iter().map(|r| r.origin.as_str()).collect();
    assert_eq!(
        origins,
        ["overlays/prod#0", "overlays/prod#1", "overlays/prod#2", "overlays/prod#3"]
    );
    // What the features did, so an engine that ignored the overlay could not pass.
    let find = |kind: &str| {
        objects.iter().find(|o| o["kind"] == kind).unwrap_or_else(|| panic!("no {kind}"))
    };
    let deployment = find("Deployment");
    assert_eq!(deployment["metadata"]["name"], "prod-web");
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["args"][0], "--verbose");
    assert_eq!(deployment["metadata"]["labels"]["env"], "prod");
    assert_eq!(deployment["metadata"]["labels"]["app"], "web");
    let config = find("ConfigMap")["metadata"]["name"].as_str().expect("name").to_owned();
    let secret = find("Secret")["metadata"]["name"].as_str().expect("name").to_owned();
    assert!(config.starts_with("prod-web-config-") && config.len() > "prod-web-config-".len());
    assert!(secret.starts_with("prod-web-secret-") && secret.len() > "prod-web-secret-".len());
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["envFrom"][0]["configMapRef"]["name"], config.as_str());
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], secret.as_str());
}

#[test]
fn a_remote_base_is_refused_before_anything_runs_naming_file_and_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().join("repo");
    overlay_repository(&repo);
    // The remote entry sits in a component reached through a local overlay.
    write(
        &repo,
        "overlays/remote/kustomization.yaml",
        "resources:\n  - ../../base\ncomponents:\n  - ../../components/extra\n",
    );
    write(
        &repo,
        "components/extra/kustomization.yaml",
        &format!(
            "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources:\n  - {REMOTE}\n"
        ),
    );
    let marker = dir.path().join("ran");
    let engine = fake_engine(
        dir.path(),
        &format!("touch {}\necho 'apiVersion: v1'\necho 'kind: ConfigMap'", marker.display()),
    );
    let workspace = sealed(&repo);

    let err = engine.render(&workspace, "overlays/remote").expect_err("refused");
    assert_eq!(
        err,
        KustomizeError::RemoteBaseRefused {
            file: "components/extra/kustomization.yaml".into(),
            field: "resources".into(),
            entry: REMOTE.into(),
        }
    );
    assert_eq!(err.reason(), FailureReason::RenderFailure);
    assert!(err.to_string().contains("copy it into the repository"), "{err}");
    assert!(!marker.exists(), "the engine must not run");

    let allowing = Kustomize { allow_remote_bases: true, ..engine };
    let rendered = allowing.render(&workspace, "overlays/remote").expect("reaches the engine");
    assert!(marker.exists(), "with remote bases allowed the engine runs");
    assert_eq!(rendered.len(), 1);
}

#[test]
fn local_entries_leaving_the_repository_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().join("repo");
    write(dir.path(), "outside/kustomization.yaml", "resources: []\n");
    for (entry, field) in [("../../outside", "resources"), ("/etc", "bases")] {
        write(&repo, "app/kustomization.yaml", &format!("{field}:\n  - {entry}\n"));
        let err = real_engine().render(&sealed(&repo), "app").expect_err("refused");
        assert_eq!(
            err,
            KustomizeError::EntryEscapes {
                file: "app/kustomization.yaml".into(),
                field: field.into(),
                entry: entry.into()
            }
        );
    }
}

#[test]
fn generators_reading_outside_the_kustomization_fail_without_echoing_contents() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().join("repo");
    let outside = dir.path().join("outside.env");
    write(dir.path(), "outside.env", &format!("TOKEN={CANARY}\n"));
    // (entry, whether the check before the engine refuses it, as leaving the repository; the
    // others reach the engine, whose load restrictor refuses them)
    let sources = [
        ("../../outside.env".to_owned(), true),
        (outside.display().to_string(), true),
        ("/proc/self/environ".to_owned(), true),
        // Inside the repository but outside this kustomization's root.
        ("../shared/values.env".to_owned(), false),
    ];
    write(&repo, "shared/values.env", &format!("TOKEN={CANARY}\n"));
    for (source, by_scan) in sources {
        write(
            &repo,
            "app/kustomization.yaml",
            &format!("secretGenerator:\n  - name: stolen\n    envs:\n      - {source}\n"),
        );
        let workspace = sealed(&repo);
        let err = real_engine().render(&workspace, "app").expect_err("load restrictor");
        let message = err.to_string();
        assert!(!message.contains(CANARY), "{message}");
        if by_scan {
            assert!(matches!(err, KustomizeError::EntryEscapes { .. }), "{source}: {message}");
            assert!(message.contains("secretGenerator[0].envs"), "{message}");
            assert_eq!(err.reason(), FailureReason::ValidationFailure);
        } else {
            assert!(matches!(err, KustomizeError::EngineFailed { .. }), "{source}: {message}");
            assert!(message.contains("is not in or below 'app'"), "{message}");
            assert_eq!(err.reason(), FailureReason::RenderFailure);
        }
        let root = workspace.root().to_string_lossy().into_owned();
        assert!(!message.contains(&root), "no machine path of the workspace: {message}");
    }
}

#[test]
fn a_kustomization_cycle_ends_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().join("repo");
    write(&repo, "a/kustomization.yaml", "resources:\n  - ../b\n");
    write(&repo, "b/kustomization.yml", "resources:\n  - ../c\n");
    write(&repo, "c/Kustomization", "resources:\n  - ../a\n");
    write(&repo, "self/kustomization.yaml", "resources:\n  - .\n");
    let workspace = sealed(&repo);
    let engine = real_engine();
    assert_eq!(
        engine.render(&workspace, "a").expect_err("cycle"),
        KustomizeError::KustomizationCycle {
            file: "c/Kustomization".into(),
            field: "resources".into(),
            entry: "../a".into()
        }
    );
    assert_eq!(
        engine.render(&workspace, "self").expect_err("cycle"),
        KustomizeError::KustomizationCycle {
            file: "self/kustomization.yaml".into(),
            field: "resources".into(),
            entry: ".".into()
        }
    );
    // A base shared by two overlays (a diamond) is no cycle.
    write(&repo, "base/kustomization.yaml", "resources:\n  - cm.yaml\n");
    write(&repo, "base/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n");
    write(&repo, "left/kustomization.yaml", "resources:\n  - ../base\nnamePrefix: l-\n");
    write(&repo, "right/kustomization.yaml", "resources:\n  - ../base\nnamePrefix: r-\n");
    write(&repo, "both/kustomization.yaml", "resources:\n  - ../left\n  - ../right\n");
    let rendered = engine.render(&sealed(&repo), "both").expect("diamond");
    assert_eq!(rendered.len(), 2);
}

/// Whether process `pid` has ended (gone, or a zombie waiting for its new parent to reap it).
fn ended(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

fn poll_until(what: &str, deadline: Duration, mut done: impl FnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !done() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_time_limit_kills_the_engine_and_its_children() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().join("repo");
    write(&repo, "app/kustomization.yaml", "resources: []\n");
    let pid_file = dir.path().join("grandchild.pid");
    let engine = fake_engine(
        dir.path(),
        &format!("sleep 300 &\necho $! > {}\nsleep 300", pid_file.display()),
    );
    let engine = Kustomize { timeout: Duration::from_secs(1), ..engine };
    let started = Instant::now();
    let err = engine.render(&sealed(&repo), "app").expect_err("timed out");
    assert_eq!(err, KustomizeError::TimedOut { engine: "kustomize build", seconds: 1 });
    assert_eq!(err.to_string(), "kustomize build did not finish within 1 s and was stopped");
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    let pid: u32 = fs::read_to_string(&pid_file).expect("pid").trim().parse().expect("number");
    poll_until("the background child to be killed", Duration::from_secs(10), || ended(pid));
}

#[test]
fn output_beyond_the_cap_stops_the_engine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().join("repo");
    write(&repo, "app/kustomization.yaml", "resources: []\n");
    let engine = fake_engine(dir.path(), "while :; do echo '# filler filler filler'; done");
    let engine = Kustomize { max_output_bytes: 64 * 1024, ..engine };
    let err = engine.render(&sealed(&repo), "app").expect_err("too large");
    assert_eq!(err, KustomizeError::OutputTooLarge { engine: "kustomize build", limit: 64 * 1024 });
}

#[test]
fn the_engine_sees_a_cleared_environment_and_only_our_arguments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().join("repo");
    write(&repo, "app/kustomization.yaml", "resources: []\n");
    let env_file = dir.path().join("env.txt");
    let args_file = dir.path().join("args.txt");
    let stdin_file = dir.path().join("stdin.txt");
    let engine = fake_engine(
        dir.path(),
        &format!(
            "env > {}\nfor a in \"$@\"; do echo \"$a\"; done > {}\ncat > {}",
            env_file.display(),
            args_file.display(),
            stdin_file.display()
        ),
    );
    // Set by cargo for this test process: the canary that must not reach the engine.
    let canary = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let workspace = sealed(&repo);
    assert_eq!(engine.render(&workspace, "app").expect("render"), vec![]);

    let env = fs::read_to_string(&env_file).expect("env");
    let vars: Vec<(&str, &str)> = env.lines().filter_map(|line| line.split_once('=')).collect();
    let names: BTreeSet<&str> = vars.iter().map(|(name, _)| *name).collect();
    // The shell adds PWD (and may add SHLVL and _) itself.
    let allowed = ["PATH", "HOME", "XDG_CONFIG_HOME", "KUBECONFIG", "LANG", "PWD", "SHLVL", "_"];
    assert!(names.iter().all(|name| allowed.contains(name)), "{names:?}");
    assert!(!env.contains(&canary), "the test process's environment leaked: {env}");
    let value = |name: &str| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
    let home = value("HOME").expect("HOME");
    assert_ne!(Some(home.to_owned()), std::env::var("HOME").ok());
    assert!(value("KUBECONFIG").expect("KUBECONFIG").starts_with(home));
    assert!(value("XDG_CONFIG_HOME").expect("XDG_CONFIG_HOME").starts_with(home));
    assert_eq!(value("LANG"), Some("C"));
    assert!(!Path::new(home).exists(), "the engine's home is removed after the run");

    let args = fs::read_to_string(&args_file).expect("args");
    let app = workspace.root().join("app").display().to_string();
    assert_eq!(
        args.lines().collect::<Vec<_>>(),
        ["build", "--load-restrictor", "LoadRestrictionsRootOnly", "--", app.as_str()]
    );
    assert_eq!(fs::read_to_string(&stdin_file).expect("stdin"), "", "stdin is empty");
}

#[test]
fn engine_failures_show_repository_paths_and_mask_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().join("repo");
    write(&repo, "app/kustomization.yaml", "resources: []\n");
    let engine = fake_engine(
        dir.path(),
        "for last; do :; done\n\
         echo \"Error: $last/kustomization.yaml: fetching https://bot:hunter2-token@example.com/x\" >&2\n\
         exit 1",
    );
    let err = engine.render(&sealed(&repo), "app").expect_err("failed");
    assert_eq!(
        err,
        KustomizeError::EngineFailed {
            engine: "kustomize build",
            message: "Error: app/kustomization.yaml: fetching https://bot:***@example.com/x".into()
        }
    );
}

#[test]
fn bad_paths_and_unsealed_workspaces_are_refused_before_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().join("repo");
    write(&repo, "app/kustomization.yaml", "resources: []\n");
    write(&repo, "plain/cm.yaml", "kind: ConfigMap\n");
    let marker = dir.path().join("ran");
    let engine = fake_engine(dir.path(), &format!("touch {}", marker.display()));
    let workspace = sealed(&repo);
    let refused = |path: &str| engine.render(&workspace, path).expect_err(path);
    assert!(matches!(refused("--enable-exec"), KustomizeError::PathLooksLikeFlag { .. }));
    assert_eq!(refused("../repo/app").reason(), FailureReason::ValidationFailure);
    assert_eq!(refused("/etc").reason(), FailureReason::ValidationFailure);
    assert!(refused("missing").to_string().contains("does not exist"));
    assert_eq!(refused("plain"), KustomizeError::NoKustomization { path: "plain".into() });
    let unsealed = Workspace::copy_of(&repo, Limits::default()).expect("copy");
    assert_eq!(engine.render(&unsealed, "app"), Err(KustomizeError::NotSealed));
    assert!(!marker.exists(), "the engine must not run");
}

#[test]
fn a_missing_program_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().join("repo");
    write(&repo, "app/kustomization.yaml", "resources: []\n");
    let program = KustomizeProgram::Kustomize(PathBuf::from("/nonexistent/kustomize"));
    let err = Kustomize::new(program).render(&sealed(&repo), "app").expect_err("missing");
    assert!(matches!(err, KustomizeError::EngineNotStarted { .. }), "{err}");
    assert!(err.to_string().contains("kustomize binary setting"), "{err}");
}
