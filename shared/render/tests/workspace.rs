//! The private render workspace: what the copy holds, which symbolic links it refuses, its caps,
//! sealing, and removal.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use kuvryn_sync_api::FailureReason;
use kuvryn_sync_render::workspace::{SEALED_DIR_MODE, SEALED_FILE_MODE, Workspace};
use kuvryn_sync_render::yaml::{Limits, RenderError};

const CANARY: &str = "canary-7c1e-outside-the-repository";

fn write(root: &Path, relative: &str, content: &str) {
    let path = root.join(relative);
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, content).expect("write");
}

/// A repository at `<tmp>/repo` with a canary file next to it, outside.
fn repository() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().join("repo");
    write(&repo, "apps/web/deploy.yaml", "kind: Deployment\n");
    write(&repo, "apps/web/nested/cm.yaml", "kind: ConfigMap\n");
    write(&repo, "shared/values.yaml", "replicas: 2\n");
    write(&repo, ".git/config", "[core]\n");
    write(&repo, "apps/vendored/.git", "gitdir: ../../.git/modules/vendored\n");
    write(dir.path(), "outside.txt", CANARY);
    (dir, repo)
}

/// Every path under `root`, relative, with whether it is a symlink, a directory or a file.
fn listing(root: &Path) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).expect("read_dir") {
            let entry = entry.expect("entry");
            let kind = entry.file_type().expect("file type");
            let relative =
                entry.path().strip_prefix(root).expect("inside").to_string_lossy().into_owned();
            let label = if kind.is_symlink() {
                "link"
            } else if kind.is_dir() {
                pending.push(entry.path());
                "dir"
            } else {
                "file"
            };
            out.push((relative, label));
        }
    }
    out.sort();
    out
}

#[test]
fn the_copy_holds_files_and_link_targets_but_no_links_and_no_git() {
    let (_dir, repo) = repository();
    symlink("../shared/values.yaml", repo.join("apps/values.yaml")).expect("symlink");
    symlink("web", repo.join("apps/web-alias")).expect("symlink");
    symlink("missing.yaml", repo.join("apps/dangling.yaml")).expect("symlink");
    // A chain of links, each inside the repository.
    symlink("apps/web-alias", repo.join("entry")).expect("symlink");

    let workspace = Workspace::copy_of(&repo, Limits::default()).expect("copy");
    let root = workspace.root();
    let file = |p: &str| (p.to_owned(), "file");
    let dir = |p: &str| (p.to_owned(), "dir");
    assert_eq!(
        listing(root),
        vec![
            dir("apps"),
            file("apps/values.yaml"),
            dir("apps/vendored"),
            dir("apps/web"),
            dir("apps/web-alias"),
            file("apps/web-alias/deploy.yaml"),
            dir("apps/web-alias/nested"),
            file("apps/web-alias/nested/cm.yaml"),
            file("apps/web/deploy.yaml"),
            dir("apps/web/nested"),
            file("apps/web/nested/cm.yaml"),
            dir("entry"),
            file("entry/deploy.yaml"),
            dir("entry/nested"),
            file("entry/nested/cm.yaml"),
            dir("shared"),
            file("shared/values.yaml"),
        ]
    );
    assert_eq!(fs::read_to_string(root.join("apps/values.yaml")).expect("read"), "replicas: 2\n");
    assert_eq!(
        fs::read_to_string(root.join("entry/nested/cm.yaml")).expect("read"),
        "kind: ConfigMap\n"
    );
    assert!(!root.starts_with(&repo), "the copy is elsewhere than the checkout");
    // Before sealing the copy is writable (decryption rewrites files there).
    fs::write(root.join("apps/web/deploy.yaml"), "kind: Secret\n").expect("writable");
    assert_eq!(
        fs::read_to_string(repo.join("apps/web/deploy.yaml")).expect("read"),
        "kind: Deployment\n"
    );
}

#[test]
fn links_leaving_the_repository_are_refused_naming_the_link_only() {
    let cases: &[(&str, &str)] = &[
        ("apps/web/leak.yaml", "../../../outside.txt"),
        ("apps/web/system", "/etc"),
        ("apps/secrets.yaml", "/var/run/secrets/kubernetes.io/serviceaccount/token"),
        // Leaves and re-enters the root: refused as soon as it leaves.
        ("apps/reenter", "../../repo/shared"),
    ];
    for (link, target) in cases {
        let (_dir, repo) = repository();
        symlink(target, repo.join(link)).expect("symlink");
        let err = Workspace::copy_of(&repo, Limits::default()).expect_err("refused");
        assert_eq!(err, RenderError::SymlinkEscapes { path: (*link).to_owned() }, "{link}");
        assert_eq!(err.reason(), FailureReason::ValidationFailure);
        let message = err.to_string();
        assert!(!message.contains(CANARY), "{message}");
        assert!(!message.contains(target), "the message names the link, not where it points");
    }
}

#[test]
fn a_link_inside_a_linked_directory_resolves_from_where_it_really_lives() {
    let (_dir, repo) = repository();
    // deep/dir/values.yaml -> ../../shared/values.yaml is inside the repository from deep/dir;
    // seen through `alias -> deep/dir` at the top it would climb out if resolved from the alias.
    fs::create_dir_all(repo.join("deep/dir")).expect("mkdir");
    symlink("../../shared/values.yaml", repo.join("deep/dir/values.yaml")).expect("symlink");
    symlink("deep/dir", repo.join("alias")).expect("symlink");
    let workspace = Workspace::copy_of(&repo, Limits::default()).expect("copy");
    for path in ["alias/values.yaml", "deep/dir/values.yaml"] {
        let text = fs::read_to_string(workspace.root().join(path)).expect("read");
        assert_eq!(text, "replicas: 2\n", "{path}");
    }
}

#[test]
fn link_cycles_are_refused() {
    let cases: &[(&str, &str, RenderError)] = &[
        ("apps/web/loop", "..", RenderError::SymlinkCycle { path: "apps/web/loop".into() }),
        ("apps/self", "self", RenderError::SymlinkCycle { path: "apps/self".into() }),
        ("apps/root", ".", RenderError::SymlinkCycle { path: "apps/root".into() }),
    ];
    for (link, target, expected) in cases {
        let (_dir, repo) = repository();
        symlink(target, repo.join(link)).expect("symlink");
        let err = Workspace::copy_of(&repo, Limits::default()).expect_err("refused");
        assert_eq!(&err, expected, "{link} -> {target}");
    }
}

#[test]
fn the_copy_is_bounded_in_entries_and_bytes() {
    let (_dir, repo) = repository();
    // apps, apps/vendored, apps/web, deploy.yaml, nested, cm.yaml, shared, values.yaml = 8.
    let fits = Limits { max_files: 8, max_total_bytes: 1024 };
    assert!(Workspace::copy_of(&repo, fits).is_ok());
    let too_many = Limits { max_files: 7, max_total_bytes: 1024 };
    assert_eq!(
        Workspace::copy_of(&repo, too_many).expect_err("too many"),
        RenderError::TooManyFiles { limit: 7 }
    );
    let total = "kind: Deployment\n".len() + "kind: ConfigMap\n".len() + "replicas: 2\n".len();
    let too_large = Limits { max_files: 100, max_total_bytes: total as u64 - 1 };
    assert_eq!(
        Workspace::copy_of(&repo, too_large).expect_err("too large"),
        RenderError::TooLarge { limit: total as u64 - 1 }
    );
    // A link copying a directory again counts again: links cannot multiply the tree for free.
    symlink("web", repo.join("apps/web-again")).expect("symlink");
    let exact = Limits { max_files: 100, max_total_bytes: total as u64 };
    assert!(matches!(Workspace::copy_of(&repo, exact), Err(RenderError::TooLarge { .. })));
}

#[test]
fn a_sealed_workspace_is_read_only_and_removed_on_drop() {
    let (_dir, repo) = repository();
    let mut workspace = Workspace::copy_of(&repo, Limits::default()).expect("copy");
    assert!(!workspace.is_sealed());
    workspace.seal().expect("seal");
    assert!(workspace.is_sealed());
    let root = workspace.root().to_path_buf();
    let mut checked = 0;
    let mut pending = vec![root.clone()];
    while let Some(path) = pending.pop() {
        let meta = fs::symlink_metadata(&path).expect("meta");
        let mode = meta.permissions().mode() & 0o777;
        if meta.is_dir() {
            assert_eq!(mode, SEALED_DIR_MODE, "{}", path.display());
            pending.extend(fs::read_dir(&path).expect("read_dir").map(|e| e.expect("e").path()));
        } else {
            assert_eq!(mode, SEALED_FILE_MODE, "{}", path.display());
        }
        checked += 1;
    }
    assert_eq!(checked, 9, "the root and its 8 entries");
    // The directory holding the copy stays private to this user.
    let parent = root.parent().expect("parent");
    assert_eq!(fs::metadata(parent).expect("meta").permissions().mode() & 0o077, 0);

    drop(workspace);
    assert!(!root.exists(), "the copy is removed on drop");
    assert!(!parent.exists(), "its private directory too");
}

#[test]
fn messages_show_repository_paths_instead_of_the_workspace_location() {
    let (_dir, repo) = repository();
    let workspace = Workspace::copy_of(&repo, Limits::default()).expect("copy");
    let root = workspace.root().to_string_lossy().into_owned();
    let text = format!("error: {root}/apps/web/kustomization.yaml: not in or below {root}");
    let shown = workspace.hide_location(&text);
    assert_eq!(shown, "error: apps/web/kustomization.yaml: not in or below .");
    let outside = format!("{}/outside.txt", workspace.root().parent().expect("p").display());
    assert!(!workspace.hide_location(&outside).contains(&root));
    assert_eq!(workspace.display_path(&workspace.root().join("apps/web")), "apps/web");
    assert_eq!(workspace.display_path(workspace.root()), ".");
}

#[test]
fn a_missing_repository_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = Workspace::copy_of(&dir.path().join("nowhere"), Limits::default()).expect_err("err");
    assert!(matches!(err, RenderError::Unreadable { ref path, .. } if path == "."), "{err}");
}
