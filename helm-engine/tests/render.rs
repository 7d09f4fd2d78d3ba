//! The real Helm engine (libhelm_c.so) through `HelmRenderer` and the `ksync-helm-render` helper.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use kuvryn_sync_helm::{
    HelmError, HelmRenderer, RenderEnv, RenderRequest, RenderResponse, find_libhelm,
};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The charts this crate keeps for its tests (`tests/fixtures/`, see its README).
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A chart with a helper template, values and a subchart: `tests/fixtures/sleeper`.
fn sleeper() -> PathBuf {
    fixtures().join("sleeper")
}

fn library() -> PathBuf {
    find_libhelm(&workspace_root()).unwrap_or_else(|e| {
        panic!("the Helm engine is required for these tests (scripts/test installs it): {e}")
    })
}

fn renderer_with(env: RenderEnv) -> HelmRenderer {
    HelmRenderer::new(env!("CARGO_BIN_EXE_ksync-helm-render"), library(), env).expect("renderer")
}

fn renderer() -> HelmRenderer {
    renderer_with(RenderEnv::default())
}

/// Writes a tiny chart with the given templates into a fresh directory.
fn chart(templates: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("Chart.yaml"), "apiVersion: v2\nname: probe\nversion: 0.3.0\n")
        .expect("Chart.yaml");
    std::fs::write(dir.path().join("values.yaml"), "greeting: hello\nport: 80\n")
        .expect("values.yaml");
    std::fs::create_dir(dir.path().join("templates")).expect("templates");
    for (name, text) in templates {
        std::fs::write(dir.path().join("templates").join(name), text).expect("template");
    }
    dir
}

#[test]
fn renders_the_fixture_chart_with_its_subchart() {
    let rendered =
        renderer().render(&RenderRequest::new(sleeper(), "nap", "team-a")).expect("render");
    for template in ["sleeper/templates/pod.yaml", "sleeper/charts/labels/templates/configmap.yaml"]
    {
        assert!(rendered.manifests.contains_key(template), "{:?}", rendered.manifests.keys());
    }
    let docs = rendered.documents().expect("documents");
    let pods: Vec<_> = docs.iter().filter(|d| d.kind() == "Pod").collect();
    assert_eq!(pods.len(), 1, "{docs:?}");
    let pod = &pods[0].object;
    assert_eq!(pod["apiVersion"], "v1");
    assert_eq!(pod["metadata"]["name"], "sleeper", "the name comes from the helper template");
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["name"], "waiter");
    assert_eq!(container["image"], "busybox:1.36");
    assert_eq!(container["command"], serde_json::json!(["/bin/sleep", "9000"]));
    // The subchart renders once, with the value its parent sets for it.
    let maps: Vec<_> = docs.iter().filter(|d| d.kind() == "ConfigMap").collect();
    assert_eq!(maps.len(), 1, "{docs:?}");
    assert_eq!(maps[0].object["metadata"]["name"], "nap-labels");
    assert_eq!(maps[0].object["data"], serde_json::json!({"team": "platform"}));
}

#[test]
fn values_and_release_fields_reach_the_templates_offline() {
    let dir = chart(&[
        (
            "cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\n  namespace: {{ .Release.Namespace }}\ndata:\n  greeting: {{ .Values.greeting | quote }}\n  port: {{ .Values.port | quote }}\n  revision: {{ .Release.Revision | quote }}\n  upgrade: {{ .Release.IsUpgrade | quote }}\n  lookup: {{ lookup \"v1\" \"Namespace\" \"\" \"kube-system\" | len | quote }}\n---\n# empty\n",
        ),
        ("NOTES.txt", "Installed {{ .Release.Name }}.\n"),
        ("_helpers.tpl", "{{- define \"probe.x\" -}}x{{- end -}}\n"),
    ]);
    let mut request = RenderRequest::new(dir.path(), "demo", "apps")
        .with_values(serde_json::json!({"greeting": "hi", "extra": {"a": 1}}));
    request.is_install = false;
    request.is_upgrade = true;
    request.revision = 7;
    let rendered = renderer().render(&request).expect("render");
    assert_eq!(
        rendered.manifests.get("probe/templates/NOTES.txt").map(String::as_str),
        Some("Installed demo.\n")
    );
    let docs = rendered.documents().expect("documents");
    assert_eq!(docs.len(), 1, "NOTES.txt and empty documents are skipped: {docs:?}");
    let cm = &docs[0].object;
    assert_eq!(cm["metadata"]["name"], "demo-cm");
    assert_eq!(cm["metadata"]["namespace"], "apps");
    assert_eq!(
        cm["data"],
        serde_json::json!({"greeting": "hi", "port": "80", "revision": "7", "upgrade": "true", "lookup": "0"})
    );
}

#[test]
fn template_failure_is_an_engine_error_with_helms_message() {
    let dir = chart(&[("bad.yaml", "{{ fail \"the answer is not 42\" }}\n")]);
    let err = renderer().render(&RenderRequest::new(dir.path(), "r", "ns")).expect_err("must fail");
    match err {
        HelmError::Engine { code, message } => {
            assert!(code < 0, "{code}");
            assert!(message.contains("the answer is not 42"), "{message}");
        }
        other => panic!("expected an engine error, got {other:?}"),
    }
}

#[test]
fn missing_chart_is_an_engine_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = renderer()
        .render(&RenderRequest::new(dir.path().join("nope"), "r", "ns"))
        .expect_err("must fail");
    assert!(matches!(err, HelmError::Engine { .. }), "{err:?}");
}

#[test]
fn invalid_values_are_refused_before_spawning() {
    let dir = sleeper();
    let err = renderer()
        .render(&RenderRequest::new(&dir, "r", "ns").with_values(serde_json::json!("text")))
        .expect_err("must fail");
    assert!(matches!(err, HelmError::InvalidRequest(_)), "{err:?}");
}

#[test]
fn time_limit_kills_the_helper() {
    let dir = sleeper();
    // Starting a Go runtime and mapping an 85 MB library takes far longer than a millisecond.
    let env = RenderEnv { timeout: Duration::from_millis(1), ..RenderEnv::default() };
    let err =
        renderer_with(env).render(&RenderRequest::new(&dir, "r", "ns")).expect_err("must time out");
    assert!(matches!(err, HelmError::Timeout(d) if d == Duration::from_millis(1)), "{err:?}");
}

#[test]
fn output_cap_is_enforced() {
    let dir = chart(&[(
        "big.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n{{- range until 2000 }}\n  k{{ . }}: {{ repeat 100 \"x\" | quote }}\n{{- end }}\n",
    )]);
    let env = RenderEnv { max_output_bytes: 64 * 1024, ..RenderEnv::default() };
    let err = renderer_with(env)
        .render(&RenderRequest::new(dir.path(), "r", "ns"))
        .expect_err("must exceed");
    assert!(matches!(err, HelmError::OutputTooLarge { limit: 65536 }), "{err:?}");
    // The same chart is fine under the default cap.
    let docs = renderer()
        .render(&RenderRequest::new(dir.path(), "r", "ns"))
        .expect("render")
        .documents()
        .expect("documents");
    assert_eq!(docs[0].object["data"].as_object().map(|m| m.len()), Some(2000));
}

#[test]
fn helper_refuses_to_load_the_engine_without_its_environment() {
    let dir = sleeper();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ksync-helm-render"))
        .env_clear()
        .env("KSYNC_LIBHELM", library())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let request = serde_json::to_vec(&RenderRequest::new(&dir, "r", "ns")).expect("json");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), &request).expect("write");
    let output = child.wait_with_output().expect("wait");
    assert_eq!(output.status.code(), Some(2));
    let response: RenderResponse = serde_json::from_slice(&output.stdout).expect("response");
    assert!(response.manifests.is_none());
    let error = response.error.expect("error");
    assert!(error.contains("SSL_CERT_FILE"), "{error}");
}
