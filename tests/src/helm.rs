//! The real Helm engine for tests: finds the `ksync-helm-render` helper and `libhelm_c.so`, and
//! renders this repository's chart.
//!
//! Nothing here skips: a missing helper or library is a test failure with instructions.

use std::path::{Path, PathBuf};

use kuvryn_sync_helm::{
    HELPER_BINARY, HelmError, HelmRenderer, RenderEnv, RenderRequest, RenderedDocument,
    find_libhelm,
};

/// Release name used for chart renders in tests.
pub const RELEASE: &str = "kuvryn-sync";
/// Release namespace used for chart renders in tests.
pub const NAMESPACE: &str = "kuvryn-system";

/// The cargo workspace root (the folder holding `charts/`, `tests/`, ...).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `charts/kuvryn-sync`.
pub fn chart_dir() -> PathBuf {
    workspace_root().join("charts/kuvryn-sync")
}

/// The `ksync-helm-render` binary of this build: next to the running test executable's
/// `deps/` folder (`target/<profile>/ksync-helm-render`). Panics with instructions when it was
/// not built.
pub fn helper_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the running test executable");
    let mut searched = Vec::new();
    for dir in exe.ancestors().skip(1).take(2) {
        let candidate = dir.join(HELPER_BINARY);
        if candidate.is_file() {
            return candidate;
        }
        searched.push(candidate);
    }
    panic!(
        "the Helm render helper `{HELPER_BINARY}` is missing (looked at {searched:?}); \
         build it first with `cargo build -p kuvryn-sync-helm` (scripts/test builds the workspace)"
    );
}

/// `libhelm_c.so`: `$KSYNC_LIBHELM`, else the wheel under `<workspace>/.tools/venv`. Panics with
/// instructions when neither is there.
pub fn libhelm() -> PathBuf {
    find_libhelm(&workspace_root()).unwrap_or_else(|e| {
        panic!(
            "the real Helm engine is required: {e}. Run scripts/test (it installs the \
             helm-python-sdk wheel into .tools/venv) or set KSYNC_LIBHELM"
        )
    })
}

/// A renderer on the real engine with default limits.
pub fn renderer() -> HelmRenderer {
    HelmRenderer::new(helper_binary(), libhelm(), RenderEnv::default())
        .expect("Helm renderer (helper and library exist)")
}

/// One render of a chart, split into objects.
#[derive(Debug, Clone)]
pub struct ChartRender {
    /// Template path → YAML as Helm returned it.
    pub manifests: std::collections::BTreeMap<String, String>,
    /// The objects (NOTES.txt and empty documents skipped).
    pub docs: Vec<RenderedDocument>,
}

impl ChartRender {
    /// All objects of a kind.
    pub fn of_kind(&self, kind: &str) -> Vec<&serde_json::Value> {
        self.docs.iter().filter(|d| d.kind() == kind).map(|d| &d.object).collect()
    }

    /// The one object of this kind and name; panics naming what exists otherwise.
    pub fn get(&self, kind: &str, name: &str) -> &serde_json::Value {
        let found: Vec<_> =
            self.docs.iter().filter(|d| d.kind() == kind && d.name() == name).collect();
        match found.as_slice() {
            [one] => &one.object,
            _ => panic!(
                "expected exactly one {kind} {name}, found {}; objects: {:?}",
                found.len(),
                self.docs.iter().map(|d| format!("{}/{}", d.kind(), d.name())).collect::<Vec<_>>()
            ),
        }
    }

    /// The one object of this kind; panics otherwise.
    pub fn single(&self, kind: &str) -> &serde_json::Value {
        let all = self.of_kind(kind);
        assert_eq!(all.len(), 1, "expected exactly one {kind}");
        all[0]
    }
}

/// Renders the chart at `chart` as release [`RELEASE`] in [`NAMESPACE`] with these values.
pub fn render_chart_at(chart: &Path, values: serde_json::Value) -> Result<ChartRender, HelmError> {
    render_chart_in(chart, NAMESPACE, values)
}

/// Renders the chart at `chart` as release [`RELEASE`] in `namespace` with these values.
pub fn render_chart_in(
    chart: &Path,
    namespace: &str,
    values: serde_json::Value,
) -> Result<ChartRender, HelmError> {
    let rendered =
        renderer().render(&RenderRequest::new(chart, RELEASE, namespace).with_values(values))?;
    let docs = rendered.documents()?;
    Ok(ChartRender { manifests: rendered.manifests, docs })
}

/// Renders this repository's `charts/kuvryn-sync` with these values.
pub fn render_chart(values: serde_json::Value) -> Result<ChartRender, HelmError> {
    render_chart_at(&chart_dir(), values)
}

/// Every admission path the chart knows how to register a webhook configuration for.
pub const ADMISSION_PATHS: [&str; 2] = ["/validate/healthchecks", "/admit/applications"];

/// Copy a directory tree.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}
