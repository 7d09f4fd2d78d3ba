//! Which configured paths are acceptable, and where a symlink in the tree leads: both decided
//! before any file is read.

use std::collections::BTreeSet;

use kuvryn_sync_api::repository::DEFAULT_APPLICATION_CONFIG_PATH;

use super::{DiscoveryError, DiscoveryRefusal, clip};

/// File name every configured path must end with.
pub const CONFIG_FILE_NAME: &str = ".ksync.yaml";
/// Largest `.ksync.yaml` read.
pub const MAX_CONFIG_FILE_BYTES: usize = 1024 * 1024;
/// Most symlinks followed while resolving one path.
pub const MAX_SYMLINK_HOPS: usize = 40;

/// Check `spec.applicationConfigPaths` before any file is read. Returns the paths to read (the
/// root `.ksync.yaml` when the list is empty), or every problem found.
pub fn validate_config_paths(paths: &[String]) -> Result<Vec<String>, DiscoveryRefusal> {
    if paths.is_empty() {
        return Ok(vec![DEFAULT_APPLICATION_CONFIG_PATH.to_owned()]);
    }
    let mut errors = Vec::new();
    let mut seen = BTreeSet::new();
    for (index, path) in paths.iter().enumerate() {
        if let Err(rule) = check_config_path(path) {
            errors.push(DiscoveryError::InvalidConfigPath { index, path: clip(path, 200), rule });
        } else if !seen.insert(path.as_str()) {
            errors.push(DiscoveryError::DuplicateConfigPath { index, path: path.clone() });
        }
    }
    if errors.is_empty() { Ok(paths.to_vec()) } else { Err(DiscoveryRefusal { errors }) }
}

fn check_config_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("is empty");
    }
    if path.chars().any(char::is_control) {
        return Err("contains control characters");
    }
    if path.starts_with('/') {
        return Err("must be repository-relative, not an absolute path");
    }
    if path.contains('\\') {
        return Err("must use / as separator, not backslashes");
    }
    let components: Vec<&str> = path.split('/').collect();
    if components.contains(&"..") {
        return Err("must not contain .. (it would escape the repository)");
    }
    if components.iter().any(|c| c.is_empty() || *c == ".") {
        return Err("must not contain empty or . components");
    }
    if components.last() != Some(&CONFIG_FILE_NAME) {
        return Err("must name a file called .ksync.yaml");
    }
    Ok(())
}

/// Resolve a symlink found in the tree: `link_dir` holds the repository-relative components of
/// the directory containing the link, `target` is the link's content. Returns the normalized
/// repository-relative components of the target, or `None` when the target is absolute, empty or
/// climbs above the repository root — the I/O layer then reports
/// [`DiscoveryError::SymlinkEscapes`]. The I/O layer walks a path component by component, calls
/// this for every symlink (in a directory or as the final file), continues from the result and
/// gives up after [`MAX_SYMLINK_HOPS`] links, so chains that leave and re-enter the root are
/// refused as soon as they leave.
pub fn resolve_within_root(link_dir: &[&str], target: &str) -> Option<Vec<String>> {
    if target.is_empty()
        || target.starts_with('/')
        || target.contains('\\')
        || target.contains('\0')
    {
        return None;
    }
    let mut out: Vec<String> = Vec::with_capacity(link_dir.len() + 4);
    for component in link_dir.iter().copied().chain(target.split('/')) {
        match component {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            other => out.push(other.to_owned()),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    // Table tests spell their row types out.
    #![allow(clippy::type_complexity)]

    use super::*;

    const ROOT: &str = ".ksync.yaml";
    const TEAM: &str = "teams/payments/.ksync.yaml";
    const SEARCH: &str = "teams/search/.ksync.yaml";

    #[test]
    fn config_path_rules() {
        let ok: &[(&[&str], &[&str])] =
            &[(&[], &[ROOT]), (&[ROOT], &[ROOT]), (&[TEAM, SEARCH], &[TEAM, SEARCH])];
        for (paths, expected) in ok {
            let paths: Vec<String> = paths.iter().map(|p| (*p).to_owned()).collect();
            assert_eq!(
                validate_config_paths(&paths),
                Ok(expected.iter().map(|p| (*p).to_owned()).collect())
            );
        }
        let refused: &[(&str, &str)] = &[
            ("", "is empty"),
            ("/etc/.ksync.yaml", "must be repository-relative, not an absolute path"),
            ("../.ksync.yaml", "must not contain .. (it would escape the repository)"),
            ("a/../../.ksync.yaml", "must not contain .."),
            ("a/../.ksync.yaml", "must not contain .."),
            ("./.ksync.yaml", "must not contain empty or . components"),
            ("a//.ksync.yaml", "must not contain empty or . components"),
            ("a/.ksync.yaml/", "must not contain empty or . components"),
            ("teams/ksync.yaml", "must name a file called .ksync.yaml"),
            ("teams/.ksync.yml", "must name a file called .ksync.yaml"),
            ("teams", "must name a file called .ksync.yaml"),
            ("teams\\.ksync.yaml", "must use / as separator"),
            ("a\n/.ksync.yaml", "contains control characters"),
        ];
        for (path, rule) in refused {
            let err = validate_config_paths(&[(*path).to_owned()])
                .err()
                .map(|r| r.to_string())
                .unwrap_or_default();
            assert!(
                err.contains(&format!("spec.applicationConfigPaths[0] {path:?}: {rule}")),
                "{path:?}: {err}"
            );
        }
        let dup = validate_config_paths(&[TEAM.into(), SEARCH.into(), TEAM.into()])
            .err()
            .map(|r| r.to_string());
        assert_eq!(
            dup.as_deref(),
            Some(
                "discovery refused, no Application was changed: spec.applicationConfigPaths[2] \"teams/payments/.ksync.yaml\": listed more than once"
            )
        );
    }

    #[test]
    fn symlink_resolution_stays_within_the_root() {
        let cases: &[(&[&str], &str, Option<&[&str]>)] = &[
            (&["teams"], "shared/.ksync.yaml", Some(&["teams", "shared", ".ksync.yaml"])),
            (
                &["teams", "payments"],
                "../common/.ksync.yaml",
                Some(&["teams", "common", ".ksync.yaml"]),
            ),
            (&["a"], "./b/../c", Some(&["a", "c"])),
            (&[], "x", Some(&["x"])),
            (&["a"], "..", Some(&[])),
            (&[], "../x", None),
            (&["a"], "../../x", None),
            (&["a"], "../../a/x", None), // leaves and re-enters: refused
            (&["a"], "/etc/passwd", None),
            (&["a"], "", None),
            (&["a"], "..\\x", None),
        ];
        for (dir, target, expected) in cases {
            let got = resolve_within_root(dir, target);
            let expected = expected.map(|e| e.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
            assert_eq!(got, expected, "{dir:?} -> {target:?}");
        }
    }
}
