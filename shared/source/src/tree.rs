//! Reading files out of a checked-out Git tree without ever leaving it: symlinks are followed
//! only while they resolve inside the tree (the rule is `discovery::resolve_within_root`, pure, in
//! `kuvryn-sync-core`), a bounded number of hops, and files above a size limit are refused
//! unread.

use std::path::{Path, PathBuf};

use kuvryn_sync_core::discovery::{
    ConfigFileRead, DiscoveryError, MAX_CONFIG_FILE_BYTES, MAX_SYMLINK_HOPS, resolve_within_root,
};

/// Read one configured `.ksync.yaml` from a checked-out tree, following symlinks only while they
/// stay inside the tree.
pub fn read_config_file(root: &Path, path: &str) -> ConfigFileRead {
    let refused = |error: DiscoveryError| ConfigFileRead::Refused(error);
    let mut pending: Vec<String> = path.split('/').map(str::to_owned).collect();
    pending.reverse();
    let mut resolved: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(component) = pending.pop() {
        let candidate: PathBuf = resolved.iter().chain(std::iter::once(&component)).collect();
        let full = root.join(&candidate);
        let meta = match std::fs::symlink_metadata(&full) {
            Ok(meta) => meta,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return ConfigFileRead::Missing;
            }
            Err(_) => return refused(DiscoveryError::NotAFile { path: path.to_owned() }),
        };
        if meta.file_type().is_symlink() {
            hops += 1;
            let target = match std::fs::read_link(&full) {
                Ok(target) if hops <= MAX_SYMLINK_HOPS => target,
                _ => return refused(DiscoveryError::SymlinkEscapes { path: path.to_owned() }),
            };
            let dir: Vec<&str> = resolved.iter().map(String::as_str).collect();
            let Some(target) = target.to_str().and_then(|t| resolve_within_root(&dir, t)) else {
                return refused(DiscoveryError::SymlinkEscapes { path: path.to_owned() });
            };
            // Continue from the link's target, then with what was left of the path.
            resolved.clear();
            for part in target.into_iter().rev() {
                pending.push(part);
            }
            continue;
        }
        resolved.push(component);
        if !pending.is_empty() && !meta.is_dir() {
            return ConfigFileRead::Missing;
        }
        if pending.is_empty() {
            if !meta.is_file() {
                return refused(DiscoveryError::NotAFile { path: path.to_owned() });
            }
            if meta.len() > MAX_CONFIG_FILE_BYTES as u64 {
                return refused(DiscoveryError::FileTooLarge {
                    path: path.to_owned(),
                    limit: MAX_CONFIG_FILE_BYTES,
                });
            }
            return match std::fs::read_to_string(&full) {
                Ok(text) => ConfigFileRead::Text(text),
                Err(_) => refused(DiscoveryError::NotAFile { path: path.to_owned() }),
            };
        }
    }
    ConfigFileRead::Missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_files_are_read_only_through_symlinks_inside_the_tree() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("repo");
        std::fs::create_dir_all(root.join("teams/payments")).expect("mkdir");
        std::fs::create_dir_all(root.join("shared")).expect("mkdir");
        std::fs::write(root.join("teams/payments/.ksync.yaml"), "applications: []\n")
            .expect("write");
        std::fs::write(root.join("shared/.ksync.yaml"), "applications: []\n").expect("write");
        std::fs::write(dir.path().join("outside.yaml"), "secret: canary\n").expect("write");
        symlink("../shared", root.join("teams/search")).expect("symlink");
        symlink("../../outside.yaml", root.join("teams/.ksync.yaml")).expect("symlink");
        symlink("/etc", root.join("etc")).expect("symlink");
        std::fs::create_dir_all(root.join("dir/.ksync.yaml")).expect("mkdir");

        let read = |path: &str| read_config_file(&root, path);
        assert_eq!(
            read("teams/payments/.ksync.yaml"),
            ConfigFileRead::Text("applications: []\n".into())
        );
        assert_eq!(
            read("teams/search/.ksync.yaml"),
            ConfigFileRead::Text("applications: []\n".into())
        );
        assert!(matches!(
            read("teams/.ksync.yaml"),
            ConfigFileRead::Refused(DiscoveryError::SymlinkEscapes { .. })
        ));
        assert!(matches!(
            read("etc/.ksync.yaml"),
            ConfigFileRead::Refused(DiscoveryError::SymlinkEscapes { .. })
        ));
        assert!(matches!(
            read("dir/.ksync.yaml"),
            ConfigFileRead::Refused(DiscoveryError::NotAFile { .. })
        ));
        assert_eq!(read("nowhere/.ksync.yaml"), ConfigFileRead::Missing);
        assert_eq!(read(".ksync.yaml"), ConfigFileRead::Missing);
    }
}
