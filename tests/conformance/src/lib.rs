//! The conformance suite: checks of this project against data published by others (the API
//! reference's tables, fixture charts from Helm's own test data), kept outside the repository.
//!
//! Every test reads the directory named by [`DATA_ENV`], laid out as
//! `spec/kuvryn-sync-api-reference.txt` and `fixtures/...`. `scripts/test` sets it when a
//! `../shared/` folder sits beside the checkout and leaves this package out of the run otherwise.
//! Run by hand, a test without the variable fails and says how to run it: the suite never passes
//! without having looked at the data. See `docs/testing.md#conformance-suite`.

use std::path::{Path, PathBuf};

use kuvryn_sync_helm::{HELPER_BINARY, HelmRenderer, RenderEnv, find_libhelm};

/// The environment variable naming the conformance data directory.
pub const DATA_ENV: &str = "KSYNC_CONFORMANCE_DATA";

/// The API reference, relative to the data directory.
pub const API_REFERENCE: &str = "spec/kuvryn-sync-api-reference.txt";

/// The data directory from [`DATA_ENV`]. Panics with instructions when the variable is unset or
/// does not name a directory holding the API reference.
pub fn data_dir() -> PathBuf {
    data_dir_from(std::env::var_os(DATA_ENV).map(PathBuf::from))
        .unwrap_or_else(|message| panic!("{message}"))
}

/// [`data_dir`] with the variable's value passed in; the error is the message to show.
pub fn data_dir_from(value: Option<PathBuf>) -> Result<PathBuf, String> {
    let how = format!(
        "the conformance suite reads third-party data from the directory named by {DATA_ENV} \
         (laid out as `{API_REFERENCE}` and `fixtures/...`); run it with \
         `{DATA_ENV}=/path/to/data cargo nextest run -p kuvryn-sync-conformance`, or run \
         scripts/test with that data in `../shared/` beside the checkout"
    );
    let Some(dir) = value.filter(|v| !v.as_os_str().is_empty()) else {
        return Err(format!("{DATA_ENV} is not set: {how}"));
    };
    if !dir.join(API_REFERENCE).is_file() {
        return Err(format!("{DATA_ENV}={} has no `{API_REFERENCE}`: {how}", dir.display()));
    }
    Ok(dir)
}

/// The text of the API reference.
pub fn api_reference() -> String {
    let path = data_dir().join(API_REFERENCE);
    std::fs::read_to_string(&path).unwrap_or_else(|err| {
        panic!("the API reference must be readable at {}: {err}", path.display())
    })
}

/// `fixtures/<relative>` in the data directory; panics when it is missing.
pub fn fixture(relative: &str) -> PathBuf {
    let path = data_dir().join("fixtures").join(relative);
    assert!(path.exists(), "conformance fixture {} is missing", path.display());
    path
}

/// The cargo workspace root.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A renderer on the real Helm engine: the `ksync-helm-render` helper of this build and
/// `libhelm_c.so` (`KSYNC_LIBHELM`, else `.tools/venv`). Panics with instructions when either is
/// missing.
pub fn helm_renderer() -> HelmRenderer {
    let exe = std::env::current_exe().expect("path of the running test executable");
    // Test executables live in `target/<profile>/deps/`, binaries one level up.
    let helper = exe
        .ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join(HELPER_BINARY))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "the Helm render helper `{HELPER_BINARY}` was not built next to {}: run \
                 `cargo build -p kuvryn-sync-helm` first (scripts/test builds the workspace)",
                exe.display()
            )
        });
    let library = find_libhelm(&workspace_root()).unwrap_or_else(|e| {
        panic!(
            "the real Helm engine is required: {e}. Run scripts/test (it installs the \
             helm-python-sdk wheel into .tools/venv) or set KSYNC_LIBHELM"
        )
    });
    HelmRenderer::new(helper, library, RenderEnv::default()).expect("Helm renderer")
}
