//! `render.type: helm` with the real Helm engine (`libhelm_c.so` in the `ksync-helm-render`
//! helper): values precedence, CRDs, offline `lookup`, redaction of Secret values in Helm errors,
//! the release name rule and the containment of values files, chart links and archive entries.
//!
//! The helper is found next to this test executable (`target/<profile>/ksync-helm-render`, built by
//! `cargo build -p kuvryn-sync-helm`) and the library by `find_libhelm`; a missing one fails with
//! instructions, it never skips.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kuvryn_sync_api::FailureReason;
use kuvryn_sync_api::application::ValuesSourceKind;
use kuvryn_sync_core::desired::Rendered;
use kuvryn_sync_core::helm_values::{
    AssembledValues, ValuesFromData, ValuesInput, assemble_values,
};
use kuvryn_sync_helm::{HELPER_BINARY, HelmRenderer, RenderEnv, find_libhelm};
use kuvryn_sync_render::helm::{ChartSource, HelmRenderError, Limits, read_values_files, render};
use serde_json::{Value, json};

const SECRET_PASSWORD: &str = "canary-7d1e-helm-password";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture_repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/helm/repo")
}

fn renderer() -> HelmRenderer {
    let exe = std::env::current_exe().expect("test executable path");
    let helper = exe
        .ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join(HELPER_BINARY))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{HELPER_BINARY} is missing next to {exe:?}: run `cargo build -p kuvryn-sync-helm` first")
        });
    let library = find_libhelm(&workspace_root()).unwrap_or_else(|e| {
        panic!("the real Helm engine is required (scripts/test installs it): {e}")
    });
    HelmRenderer::new(helper, library, RenderEnv::default()).expect("renderer")
}

fn values_from(kind: ValuesSourceKind, name: &str, key: &str, text: &str) -> ValuesFromData {
    ValuesFromData {
        kind,
        name: name.into(),
        key: key.into(),
        data: BTreeMap::from([(key.to_owned(), text.as_bytes().to_vec())]),
    }
}

fn web(root: &Path) -> ChartSource<'_> {
    ChartSource::Directory { repository_root: root, path: "charts/web" }
}

fn render_web(values: &AssembledValues, release: &str) -> Result<Vec<Rendered>, HelmRenderError> {
    let root = fixture_repo();
    render(&renderer(), web(&root), values, release, "team-a", Limits::default())
}

fn find<'a>(objects: &'a [Rendered], kind: &str) -> &'a Value {
    &objects.iter().find(|r| r.object["kind"] == kind).unwrap_or_else(|| panic!("no {kind}")).object
}

#[test]
fn values_files_then_values_from_then_inline_values_win_in_that_order() {
    let root = fixture_repo();
    let files = read_values_files(
        &root,
        &["values/a.yaml".to_owned(), "values/b.yaml".to_owned()],
        Limits::default(),
    )
    .expect("values files");
    let all = ValuesInput {
        files: files.clone(),
        from: vec![
            values_from(
                ValuesSourceKind::ConfigMap,
                "web-values",
                "values.yaml",
                "level: configmap\nfromConfigMap: cm\nnested: {cm: 3}\n",
            ),
            values_from(
                ValuesSourceKind::Secret,
                "web-secret",
                "secret.yaml",
                &format!("level: secret\nfromSecret: s\npassword: {SECRET_PASSWORD}\n"),
            ),
        ],
        inline: Some(json!({"level": "inline", "dropped": null, "nested": {"inline": 4}})),
    };
    let values = assemble_values(&all).expect("assemble");
    assert!(values.secret_strings.contains(&SECRET_PASSWORD.to_owned()));
    let objects = render_web(&values, "demo").expect("render");
    let data = &find(&objects, "ConfigMap")["data"];
    assert_eq!(data["level"], "inline", "inline values are merged last");
    assert_eq!(data["fromChart"], "kept", "chart defaults stay under user values");
    assert_eq!(
        (&data["fromA"], &data["fromB"], &data["fromConfigMap"], &data["fromSecret"]),
        (&json!("a"), &json!("b"), &json!("cm"), &json!("s"))
    );
    assert_eq!(data["dropped"], "absent", "a null in user values deletes the chart default");
    let nested: Value =
        serde_json::from_str(data["nested"].as_str().expect("nested")).expect("json");
    assert_eq!(nested, json!({"chart": 1, "a": 1, "b": 2, "cm": 3, "inline": 4}));

    // Without inline values the Secret (the last valuesFrom) wins over the ConfigMap and files.
    let values = assemble_values(&ValuesInput { inline: None, ..all.clone() }).expect("assemble");
    let objects = render_web(&values, "demo").expect("render");
    assert_eq!(find(&objects, "ConfigMap")["data"]["level"], "secret");
    assert_eq!(find(&objects, "ConfigMap")["data"]["dropped"], "chart-default");

    // Files alone: the later file wins.
    let values = assemble_values(&ValuesInput { files, ..Default::default() }).expect("assemble");
    let objects = render_web(&values, "demo").expect("render");
    assert_eq!(find(&objects, "ConfigMap")["data"]["level"], "file-b");
}

#[test]
fn crds_come_first_then_templates_without_notes_or_empty_documents() {
    let objects = render_web(&AssembledValues::default(), "demo").expect("render");
    let summary: Vec<(String, String)> = objects
        .iter()
        .map(|r| (r.origin.clone(), r.object["kind"].as_str().unwrap_or_default().to_owned()))
        .collect();
    let expected = [
        ("crds/widgets.yaml#0", "CustomResourceDefinition"),
        ("templates/configmap.yaml#0", "ConfigMap"),
        ("templates/widget.yaml#0", "Widget"),
        ("templates/widget.yaml#1", "Widget"),
    ];
    let expected: Vec<(String, String)> =
        expected.iter().map(|(o, k)| ((*o).to_owned(), (*k).to_owned())).collect();
    assert_eq!(summary, expected);
    let cm = find(&objects, "ConfigMap");
    assert_eq!(cm["metadata"]["name"], "demo-web");
    assert_eq!(cm["metadata"]["namespace"], "team-a");
    assert_eq!(objects[3].object["metadata"]["name"], "demo-web-spare");
}

#[test]
fn lookup_returns_nothing_during_rendering() {
    let objects = render_web(&AssembledValues::default(), "demo").expect("render");
    assert_eq!(find(&objects, "ConfigMap")["data"]["lookupCount"], "0");
}

/// A copy of the fixture repository in a temporary directory, for tests that add files or links.
fn repo_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_tree(&fixture_repo(), &dir.path().join("repo"));
    dir
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

#[test]
fn a_secret_value_printed_by_a_failing_template_is_masked_in_the_error() {
    let dir = repo_copy();
    let root = dir.path().join("repo");
    std::fs::write(
        root.join("charts/web/templates/fail.yaml"),
        "{{ fail (printf \"bad password %s\" .Values.password) }}\n",
    )
    .expect("template");
    let values = assemble_values(&ValuesInput {
        from: vec![values_from(
            ValuesSourceKind::Secret,
            "web-secret",
            "values.yaml",
            &format!("password: {SECRET_PASSWORD}\n"),
        )],
        ..Default::default()
    })
    .expect("assemble");
    let err = render(&renderer(), web(&root), &values, "demo", "team-a", Limits::default())
        .expect_err("fail must fail the render");
    let text = err.to_string();
    assert!(matches!(err, HelmRenderError::Engine { .. }), "{err:?}");
    assert_eq!(err.reason(), FailureReason::RenderFailure);
    assert!(text.contains("bad password ***"), "{text}");
    assert!(!text.contains(SECRET_PASSWORD), "{text}");
}

#[test]
fn an_invalid_release_name_fails_validation_before_rendering() {
    let err = render_web(&AssembledValues::default(), "My_Release").expect_err("invalid name");
    assert_eq!(err.reason(), FailureReason::ValidationFailure);
    let text = err.to_string();
    assert!(
        text.contains("releaseName \"My_Release\"") && text.contains("\"my-release\""),
        "{text}"
    );
    assert!(render_web(&AssembledValues::default(), &"a".repeat(54)).is_err());
}

#[test]
fn values_files_may_not_leave_the_repository() {
    let dir = repo_copy();
    let root = dir.path().join("repo");
    std::fs::write(dir.path().join("outside.yaml"), "stolen: canary-outside\n").expect("write");
    std::os::unix::fs::symlink("../outside.yaml", root.join("values/link.yaml")).expect("link");
    std::os::unix::fs::symlink("/etc/hostname", root.join("values/abs.yaml")).expect("link");
    let cases = [
        ("../outside.yaml", FailureReason::ValidationFailure),
        ("/etc/passwd", FailureReason::ValidationFailure),
        ("-f", FailureReason::ValidationFailure),
        ("values/link.yaml", FailureReason::ValidationFailure),
        ("values/abs.yaml", FailureReason::ValidationFailure),
        ("values/missing.yaml", FailureReason::RenderFailure),
    ];
    for (path, reason) in cases {
        let err = read_values_files(&root, &[path.to_owned()], Limits::default()).expect_err(path);
        assert_eq!(err.reason(), reason, "{path}: {err}");
        assert!(!err.to_string().contains("canary-outside"), "{err}");
    }
    std::os::unix::fs::symlink("a.yaml", root.join("values/inside.yaml")).expect("link");
    let files = read_values_files(&root, &["values/inside.yaml".to_owned()], Limits::default())
        .expect("a link inside the repository is followed");
    assert!(String::from_utf8_lossy(&files[0].1).contains("fromA: a"));
}

#[test]
fn a_chart_file_linking_outside_the_repository_is_refused() {
    let dir = repo_copy();
    let root = dir.path().join("repo");
    std::os::unix::fs::symlink("/etc/hostname", root.join("charts/web/templates/host.yaml"))
        .expect("link");
    let err = render(
        &renderer(),
        web(&root),
        &AssembledValues::default(),
        "demo",
        "team-a",
        Limits::default(),
    )
    .expect_err("escape");
    assert!(
        matches!(err, HelmRenderError::SymlinkEscapes { ref path } if path == "charts/web/templates/host.yaml"),
        "{err:?}"
    );
    assert_eq!(err.reason(), FailureReason::ValidationFailure);
}

/// A tar.gz of `entries` (name, bytes); names are written raw, so `../x` is possible.
fn archive(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    for (name, data) in entries {
        let mut header = tar::Header::new_gnu();
        let raw = &mut header.as_gnu_mut().expect("gnu header").name;
        raw[..name.len()].copy_from_slice(name.as_bytes());
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        builder.append(&header, *data).expect("append");
    }
    builder.into_inner().expect("tar").finish().expect("gzip")
}

fn chart_files() -> Vec<(String, Vec<u8>)> {
    let base = fixture_repo().join("charts/web");
    let mut out = Vec::new();
    for rel in [
        "Chart.yaml",
        "values.yaml",
        "crds/widgets.yaml",
        "templates/_helpers.tpl",
        "templates/NOTES.txt",
        "templates/configmap.yaml",
        "templates/widget.yaml",
    ] {
        out.push((format!("web/{rel}"), std::fs::read(base.join(rel)).expect("read")));
    }
    out
}

fn render_archive(bytes: &[u8], limits: Limits) -> Result<Vec<Rendered>, HelmRenderError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("web-0.1.0.tgz");
    std::fs::write(&path, bytes).expect("write");
    render(
        &renderer(),
        ChartSource::Archive(&path),
        &AssembledValues::default(),
        "demo",
        "team-a",
        limits,
    )
}

#[test]
fn an_archive_renders_like_its_directory() {
    let files = chart_files();
    let entries: Vec<(&str, &[u8])> =
        files.iter().map(|(n, b)| (n.as_str(), b.as_slice())).collect();
    let from_archive = render_archive(&archive(&entries), Limits::default()).expect("archive");
    let from_directory = render_web(&AssembledValues::default(), "demo").expect("directory");
    assert_eq!(from_archive, from_directory);
}

#[test]
fn unsafe_archives_are_refused() {
    let files = chart_files();
    let mut entries: Vec<(&str, &[u8])> =
        files.iter().map(|(n, b)| (n.as_str(), b.as_slice())).collect();
    entries.push(("web/../../escaped.yaml", b"kind: X\n"));
    let err = render_archive(&archive(&entries), Limits::default()).expect_err("dot-dot entry");
    assert!(err.to_string().contains("leaves the chart"), "{err}");

    // A small archive that inflates past the limit: a decompression bomb.
    let zeros = vec![0u8; 2 * 1024 * 1024];
    let mut entries: Vec<(&str, &[u8])> =
        files.iter().map(|(n, b)| (n.as_str(), b.as_slice())).collect();
    entries.push(("web/templates/big.txt", &zeros));
    let bomb = archive(&entries);
    assert!(bomb.len() < 64 * 1024, "{}", bomb.len());
    let limits = Limits { max_total_bytes: 1024 * 1024, ..Limits::default() };
    let err = render_archive(&bomb, limits).expect_err("bomb");
    assert!(matches!(err, HelmRenderError::TooLarge { .. }), "{err:?}");
    assert_eq!(err.reason(), FailureReason::RenderFailure);

    // A link entry (it could point anywhere once unpacked).
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    for (name, data) in &files {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append_data(&mut header, name, data.as_slice()).expect("append");
    }
    let mut link = tar::Header::new_gnu();
    link.set_entry_type(tar::EntryType::Symlink);
    link.set_size(0);
    builder
        .append_link(
            &mut link,
            "web/templates/token.yaml",
            "/var/run/secrets/kubernetes.io/serviceaccount/token",
        )
        .expect("link");
    let linked = builder.into_inner().expect("tar").finish().expect("gzip");
    let err = render_archive(&linked, Limits::default()).expect_err("link entry");
    assert!(err.to_string().contains("is a link or special file"), "{err}");

    let err = render_archive(b"not gzip at all", Limits::default()).expect_err("garbage");
    assert!(matches!(err, HelmRenderError::Archive { .. }), "{err:?}");
}

/// The Helm helper in the controller's sandbox: with network isolation required it renders as
/// without; under an address-space limit too small for its Go runtime it fails that render.
#[test]
fn the_helper_renders_in_the_sandbox_and_fails_alone_over_its_memory_limit() {
    use kuvryn_sync_render::sandbox::{
        IsolationSupport, NetworkIsolation, ResourceLimits, Sandbox,
    };
    let root = fixture_repo();
    let values = AssembledValues::default();
    let isolated = Sandbox { isolation: NetworkIsolation::Required, ..Sandbox::default() };
    assert_eq!(
        isolated.probe(renderer().helper(), &["--help"]),
        IsolationSupport::Isolated,
        "this machine runs the tests as root: isolation must be available"
    );
    let sandboxed = renderer().with_command_hook(move |command| isolated.apply(command));
    let inside = render(&sandboxed, web(&root), &values, "demo", "team-a", Limits::default())
        .expect("renders in the sandbox");
    let outside = render_web(&values, "demo").expect("renders");
    let objects = |rendered: &[Rendered]| -> Vec<Value> {
        rendered.iter().map(|r| r.object.clone()).collect()
    };
    assert_eq!(objects(&inside), objects(&outside));

    let starved = Sandbox {
        limits: ResourceLimits { max_memory_bytes: 128 * 1024 * 1024, ..ResourceLimits::default() },
        ..isolated
    };
    let tight = renderer().with_command_hook(move |command| starved.apply(command));
    let err = render(&tight, web(&root), &values, "demo", "team-a", Limits::default())
        .expect_err("over its memory limit");
    assert_eq!(err.reason(), FailureReason::RenderFailure, "{err}");
    assert!(err.to_string().contains("--render-max-memory"), "{err}");
    // The neighbour with the default limits is unaffected.
    render(&sandboxed, web(&root), &values, "demo", "team-a", Limits::default()).expect("renders");
}
