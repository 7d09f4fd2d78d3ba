//! Finding `libhelm_c.so`.

use std::path::{Path, PathBuf};

use crate::HelmError;

/// Environment variable naming the library file explicitly; it wins over any search.
pub const LIBHELM_ENV: &str = "KSYNC_LIBHELM";

/// The library inside a `helm-python-sdk` wheel, relative to a Python `site-packages`.
const WHEEL_LIBRARY: &str = "helm_python/lib/libhelm_c.so";

/// Finds `libhelm_c.so`: `$KSYNC_LIBHELM` when set (it must then name an existing file; there
/// is no silent fallback), else `<workspace_root>/.tools/venv/lib/python3*/site-packages/
/// helm_python/lib/libhelm_c.so` (the place `scripts/test` installs the wheel to).
pub fn find_libhelm(workspace_root: &Path) -> Result<PathBuf, HelmError> {
    find_libhelm_with(std::env::var_os(LIBHELM_ENV).map(PathBuf::from), workspace_root)
}

/// [`find_libhelm`] with the environment value passed in (testable without touching the
/// process environment).
pub fn find_libhelm_with(
    explicit: Option<PathBuf>,
    workspace_root: &Path,
) -> Result<PathBuf, HelmError> {
    if let Some(path) = explicit.filter(|p| !p.as_os_str().is_empty()) {
        let path = std::path::absolute(&path).unwrap_or(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(HelmError::LibraryNotFound { searched: vec![path] })
        };
    }
    let lib_dir = workspace_root.join(".tools/venv/lib");
    let mut pythons: Vec<PathBuf> = std::fs::read_dir(&lib_dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    pythons.sort();
    let mut searched = Vec::new();
    for python in pythons {
        let candidate = python.join("site-packages").join(WHEEL_LIBRARY);
        if candidate.is_file() {
            return Ok(std::path::absolute(&candidate).unwrap_or(candidate));
        }
        searched.push(candidate);
    }
    if searched.is_empty() {
        searched.push(lib_dir.join("python3*/site-packages").join(WHEEL_LIBRARY));
    }
    Err(HelmError::LibraryNotFound { searched })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_path_wins_and_must_exist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lib = dir.path().join("libhelm_c.so");
        std::fs::write(&lib, b"x").expect("write");
        assert_eq!(
            find_libhelm_with(Some(lib.clone()), Path::new("/nonexistent")).expect("found"),
            lib
        );
        let missing = dir.path().join("missing.so");
        let err = find_libhelm_with(Some(missing.clone()), dir.path()).expect_err("missing");
        assert!(
            matches!(err, HelmError::LibraryNotFound { searched } if searched == vec![missing])
        );
    }

    #[test]
    fn finds_the_wheel_under_the_workspace_tools_venv() {
        let ws = tempfile::tempdir().expect("tempdir");
        let lib_dir = ws.path().join(".tools/venv/lib/python3.12/site-packages/helm_python/lib");
        std::fs::create_dir_all(&lib_dir).expect("mkdir");
        std::fs::write(lib_dir.join("libhelm_c.so"), b"x").expect("write");
        let found = find_libhelm_with(None, ws.path()).expect("found");
        assert_eq!(found, lib_dir.join("libhelm_c.so"));
    }

    #[test]
    fn reports_where_it_looked() {
        let ws = tempfile::tempdir().expect("tempdir");
        let err = find_libhelm_with(None, ws.path()).expect_err("nothing there");
        let text = err.to_string();
        assert!(text.contains("KSYNC_LIBHELM"), "{text}");
        assert!(text.contains(".tools/venv/lib/python3*"), "{text}");
    }
}
