//! Sealed kustomize renders against the real engine (`kubectl kustomize`): no field of a
//! kustomization (or of a builtin generator/transformer configuration) can make a render reach
//! the network, resource limits stop a runaway render without touching its neighbours, and a
//! render copies only what it reads.
//!
//! Every remote-reference case points at a real HTTP server on 127.0.0.1 that counts the
//! connections it accepts; each case asserts it got none. The per-field cases run the engine
//! *without* network isolation, so only the check before the engine stands between the entry
//! and the server; `an_unchecked_url_reaches_the_server_without_isolation` shows the server is
//! reachable that way.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kuvryn_sync_api::{FailureReason, RenderType};
use kuvryn_sync_render::kustomize::{self, Kustomize, KustomizeError, KustomizeProgram};
use kuvryn_sync_render::sandbox::NetworkIsolation;
use kuvryn_sync_render::source::{self, RenderRequest};
use kuvryn_sync_render::workspace::Workspace;
use kuvryn_sync_render::yaml::{Limits, RenderError};

fn write(root: &Path, relative: &str, content: &str) {
    let path = root.join(relative);
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, content).expect("write");
}

/// A real HTTP server on 127.0.0.1 that answers every request with a ConfigMap manifest and
/// counts the connections it accepted.
struct CountingServer {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl CountingServer {
    fn start() -> CountingServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&accepted);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                counter.fetch_add(1, Ordering::SeqCst);
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fetched\n";
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        CountingServer { port, accepted }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// The real engine with network isolation off: only the check before the engine protects.
fn unisolated_engine() -> Kustomize {
    let mut engine = Kustomize::new(KustomizeProgram::detect(None));
    engine.sandbox.isolation = NetworkIsolation::Off;
    engine
}

fn render(
    repo: &Path,
    path: &str,
    engine: &Kustomize,
    limits: Limits,
) -> Result<source::SourceRender, source::RenderFailure> {
    source::render(&RenderRequest {
        root: repo,
        path,
        render_type: RenderType::Kustomize,
        keys: None,
        kustomize: engine,
        limits,
    })
}

/// A kustomization, the extra files beside it, and the field its refusal names.
type Case = (String, Vec<(&'static str, String)>, &'static str);

/// One case per field kustomize loads a path or URL from: the kustomization (`{u}` is the
/// server's URL), extra files, and the field the refusal must name.
#[test]
fn a_url_in_any_field_is_refused_naming_the_field_and_nothing_is_fetched() {
    let server = CountingServer::start();
    let u = server.url("x.yaml");
    let cases: Vec<Case> = vec![
        (format!("resources: [{u}]"), vec![], "resources"),
        (format!("bases: [{u}]"), vec![], "bases"),
        (format!("components: [{u}]"), vec![], "components"),
        (format!("generators: [{u}]"), vec![], "generators"),
        (format!("transformers: [{u}]"), vec![], "transformers"),
        (format!("validators: [{u}]"), vec![], "validators"),
        // The case: a ConfigMap generated from a URL (SSRF from the controller's pod).
        (
            format!("configMapGenerator:\n- name: c\n  files: [\"creds={u}\"]"),
            vec![],
            "configMapGenerator[0].files",
        ),
        (
            format!("configMapGenerator:\n- name: c\n  envs: [{u}]"),
            vec![],
            "configMapGenerator[0].envs",
        ),
        (
            format!("configMapGenerator:\n- name: c\n  env: {u}"),
            vec![],
            "configMapGenerator[0].env",
        ),
        (
            format!("secretGenerator:\n- name: s\n  files: [{u}]"),
            vec![],
            "secretGenerator[0].files",
        ),
        (format!("secretGenerator:\n- name: s\n  envs: [{u}]"), vec![], "secretGenerator[0].envs"),
        (format!("secretGenerator:\n- name: s\n  env: {u}"), vec![], "secretGenerator[0].env"),
        (format!("resources: [cm.yaml]\npatches:\n- path: {u}"), vec![], "patches[0].path"),
        (
            format!("resources: [cm.yaml]\npatchesStrategicMerge: [{u}]"),
            vec![],
            "patchesStrategicMerge",
        ),
        (
            format!(
                "resources: [cm.yaml]\npatchesJson6902:\n- target: {{version: v1, kind: ConfigMap, \
                 name: a}}\n  path: {u}"
            ),
            vec![],
            "patchesJson6902[0].path",
        ),
        (
            format!("resources: [cm.yaml]\nreplacements:\n- path: {u}"),
            vec![],
            "replacements[0].path",
        ),
        (format!("resources: [cm.yaml]\nopenapi:\n  path: {u}"), vec![], "openapi.path"),
        (format!("resources: [cm.yaml]\nconfigurations: [{u}]"), vec![], "configurations"),
        (format!("resources: [cm.yaml]\ncrds: [{u}]"), vec![], "crds"),
        (format!("helmCharts:\n- name: x\n  repo: {u}"), vec![], "helmCharts"),
        (
            format!("helmChartInflationGenerator:\n- chartName: x\n  chartRepoUrl: {u}"),
            vec![],
            "helmChartInflationGenerator",
        ),
        ("helmGlobals:\n  chartHome: charts".to_owned(), vec![], "helmGlobals"),
        // Builtin plugin configurations: in a file, inline, and in a directory of them.
        (
            "generators: [gen.yaml]".to_owned(),
            vec![(
                "gen.yaml",
                format!(
                    "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {{name: g}}\n\
                     files: [\"creds={u}\"]\n"
                ),
            )],
            "generators: ConfigMapGenerator.files",
        ),
        (
            format!(
                "resources: [cm.yaml]\ntransformers:\n- |\n  apiVersion: builtin\n  kind: \
                 PatchTransformer\n  metadata: {{name: p}}\n  path: {u}\n"
            ),
            vec![],
            "transformers: PatchTransformer.path",
        ),
        (
            "resources: [cm.yaml]\ntransformers: [plugins]".to_owned(),
            vec![
                ("plugins/kustomization.yaml", "resources: [replace.yaml]\n".to_owned()),
                (
                    "plugins/replace.yaml",
                    format!(
                        "apiVersion: builtin\nkind: ReplacementTransformer\nmetadata: {{name: \
                         r}}\nreplacements:\n- path: {u}\n"
                    ),
                ),
            ],
            // Named by the resources of the plugin directory's kustomization.
            "resources: ReplacementTransformer.replacements[0].path",
        ),
        (
            "generators: [gen.yaml]".to_owned(),
            vec![(
                "gen.yaml",
                format!(
                    "apiVersion: builtin\nkind: HelmChartInflationGenerator\nmetadata: {{name: h}}\nchartRepoUrl: {u}\n"
                ),
            )],
            "generators: HelmChartInflationGenerator",
        ),
    ];
    let engine = unisolated_engine();
    for (kustomization, files, field) in &cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = dir.path();
        write(repo, "app/kustomization.yaml", &format!("{kustomization}\n"));
        write(repo, "app/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n");
        for (path, content) in files {
            write(repo, &format!("app/{path}"), content);
        }
        let failure = render(repo, "app", &engine, Limits::default()).expect_err(field);
        assert_eq!(failure.reason, FailureReason::RenderFailure, "{field}: {}", failure.message);
        assert!(
            failure.message.contains(&format!("{field} "))
                || failure.message.contains(&format!("{field}:")),
            "{field}: {}",
            failure.message
        );
        assert!(failure.message.contains("app/"), "names the file: {}", failure.message);
        assert_eq!(server.accepted(), 0, "{field}: the server was reached");
    }
}

/// The control for the cases above: the same engine, run without the check, does fetch.
#[test]
fn an_unchecked_url_reaches_the_server_without_isolation() {
    let server = CountingServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("app");
    write(
        dir.path(),
        "app/kustomization.yaml",
        &format!("configMapGenerator:\n- name: c\n  files: [\"creds={}\"]\n", server.url("creds")),
    );
    let output = std::process::Command::new(KustomizeProgram::detect(None).path())
        .args(["kustomize", "--"])
        .arg(&dest)
        .output()
        .expect("run kubectl kustomize");
    assert!(server.accepted() >= 1, "{}", String::from_utf8_lossy(&output.stderr));
}

/// A render helper over its CPU limit, and one over its memory limit, each fail their own
/// render with a clear message while a render beside them succeeds.
#[test]
fn a_render_over_its_limits_fails_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().join("repo");
    write(&repo, "app/kustomization.yaml", "resources: [cm.yaml]\n");
    write(&repo, "app/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n");
    // A "kustomize" that only burns CPU.
    let spinner = dir.path().join("bin/kustomize");
    write(dir.path(), "bin/kustomize", "#!/bin/sh\nwhile :; do :; done\n");
    fs::set_permissions(&spinner, fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut cpu_bound = Kustomize::new(KustomizeProgram::Kustomize(spinner));
    cpu_bound.sandbox.limits.max_cpu_seconds = 1;
    let mut memory_bound = Kustomize::new(KustomizeProgram::detect(None));
    memory_bound.sandbox.limits.max_memory_bytes = 256 * 1024 * 1024;
    let normal = Kustomize::new(KustomizeProgram::detect(None));

    std::thread::scope(|scope| {
        let cpu = scope.spawn(|| render(&repo, "app", &cpu_bound, Limits::default()));
        let memory = scope.spawn(|| render(&repo, "app", &memory_bound, Limits::default()));
        let neighbours: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| render(&repo, "app", &normal, Limits::default())))
            .collect();
        let cpu = cpu.join().expect("join").expect_err("CPU limit");
        assert_eq!(cpu.reason, FailureReason::RenderFailure);
        assert!(cpu.message.contains("limit of 1 CPU seconds"), "{}", cpu.message);
        assert!(cpu.message.contains("--render-max-cpu-seconds"), "{}", cpu.message);
        let memory = memory.join().expect("join").expect_err("memory limit");
        assert!(memory.message.contains("ran out of memory"), "{}", memory.message);
        assert!(memory.message.contains("--render-max-memory"), "{}", memory.message);
        for neighbour in neighbours {
            let rendered = neighbour.join().expect("join").expect("the neighbour renders");
            assert_eq!(rendered.objects.len(), 1);
        }
    });
}

/// A render copies its path and what its kustomizations name, not the whole repository: a big
/// file elsewhere (over the copy limit) fails nobody's render.
#[test]
fn a_neighbours_big_file_is_not_copied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().join("repo");
    write(&repo, "base/kustomization.yaml", "resources: [cm.yaml]\n");
    write(&repo, "base/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n");
    write(
        &repo,
        "apps/web/kustomization.yaml",
        "resources: [../../base]\nconfigMapGenerator:\n- name: g\n  files: [app.properties]\n",
    );
    write(&repo, "apps/web/app.properties", "a=b\n");
    // The neighbour: 2 MiB, sparse, against a 1 MiB copy limit.
    let big = repo.join("tenants/other/big.bin");
    fs::create_dir_all(big.parent().expect("parent")).expect("mkdir");
    fs::File::create(&big).expect("create").set_len(2 * 1024 * 1024).expect("sparse");
    let limits = Limits { max_total_bytes: 1024 * 1024, ..Limits::default() };

    // Copying everything, as renders did, fails on the neighbour's file.
    assert!(matches!(Workspace::copy_of(&repo, limits), Err(RenderError::TooLarge { .. })));

    let mut workspace = Workspace::empty(&repo, limits).expect("workspace");
    kustomize::materialise(&mut workspace, "apps/web", false).expect("materialise");
    let root = workspace.root();
    assert!(root.join("apps/web/app.properties").is_file());
    assert!(root.join("base/cm.yaml").is_file());
    assert!(!root.join("tenants").exists(), "the neighbour's directory is not copied");
    assert!(workspace.bytes_copied() < 1024);

    let rendered =
        render(&repo, "apps/web", &Kustomize::new(KustomizeProgram::detect(None)), limits)
            .expect("renders despite the neighbour");
    let kinds: Vec<&str> =
        rendered.objects.iter().filter_map(|o| o.object["kind"].as_str()).collect();
    assert_eq!(kinds, ["ConfigMap", "ConfigMap"]);

    // The render's own files still count: its path over the limit fails with the limit named.
    write(&repo, "apps/web/own.bin", &"x".repeat(2 * 1024 * 1024));
    let failure =
        render(&repo, "apps/web", &Kustomize::new(KustomizeProgram::detect(None)), limits)
            .expect_err("own file over the limit");
    assert!(failure.message.contains("1048576"), "{}", failure.message);
}

/// Remote bases stay allowed with --allow-remote-bases (the engine then runs without network
/// isolation), but a URL in a file field is refused even then.
#[test]
fn allowing_remote_bases_never_allows_remote_files() {
    let server = CountingServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "app/kustomization.yaml",
        &format!("secretGenerator:\n- name: s\n  files: [\"k={}\"]\n", server.url("k")),
    );
    let mut engine = Kustomize::new(KustomizeProgram::detect(None));
    engine.allow_remote_bases = true;
    let failure = render(dir.path(), "app", &engine, Limits::default()).expect_err("refused");
    assert!(failure.message.contains("secretGenerator[0].files"), "{}", failure.message);
    assert_eq!(server.accepted(), 0);
    let err = KustomizeError::RemoteReferenceRefused {
        file: "f".into(),
        field: "crds".into(),
        entry: "e".into(),
    };
    assert_eq!(err.reason(), FailureReason::RenderFailure);
}
