//! The render temporary directory: emptied at controller start-up (what a crash left behind,
//! sealed read-only workspaces with decrypted files included), then used by every render.
//! Its own test binary: the directory is a process-wide setting.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use kuvryn_sync_render::sandbox::{empty_temp_root, temp_root, use_temp_root};
use kuvryn_sync_render::workspace::Workspace;
use kuvryn_sync_render::yaml::Limits;

fn write(root: &Path, relative: &str, content: &str) {
    let path = root.join(relative);
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, content).expect("write");
}

#[test]
fn leftovers_are_removed_at_start_up_and_renders_use_the_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("render-tmp");
    // What a crashed controller left: a sealed workspace holding a decrypted file, an engine
    // home, a stray file.
    write(&root, "ksync-render-abc/repo/app/secret.yaml", "password: decrypted-4f1e\n");
    write(&root, "ksync-kustomize-home-x/config/a", "");
    write(&root, "stray", "");
    for (path, mode) in [
        ("ksync-render-abc/repo/app/secret.yaml", 0o444),
        ("ksync-render-abc/repo/app", 0o555),
        ("ksync-render-abc/repo", 0o555),
    ] {
        fs::set_permissions(root.join(path), fs::Permissions::from_mode(mode)).expect("chmod");
    }
    // Something outside the directory is never touched.
    write(dir.path(), "keep.txt", "keep");

    assert_eq!(empty_temp_root(&root).expect("emptied"), 3);
    assert_eq!(fs::read_dir(&root).expect("read").count(), 0);
    assert_eq!(fs::metadata(&root).expect("meta").permissions().mode() & 0o777, 0o700);
    assert!(dir.path().join("keep.txt").exists());
    // A missing directory is created.
    let fresh = dir.path().join("new/render-tmp");
    assert_eq!(empty_temp_root(&fresh).expect("created"), 0);
    assert!(fresh.is_dir());

    use_temp_root(root.clone()).expect("first setting");
    assert_eq!(temp_root(), root);
    let repo = dir.path().join("repo");
    write(&repo, "app/cm.yaml", "kind: ConfigMap\n");
    let mut workspace = Workspace::copy_of(&repo, Limits::default()).expect("copy");
    assert!(workspace.root().starts_with(&root), "{}", workspace.root().display());
    workspace.seal().expect("seal");
    let held = fs::read_dir(&root).expect("read").count();
    assert_eq!(held, 1);
    drop(workspace);
    assert_eq!(fs::read_dir(&root).expect("read").count(), 0, "removed after the render");
}
