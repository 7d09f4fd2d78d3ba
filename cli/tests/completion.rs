//! `ksync completion SHELL` prints scripts the shells load, and `ksync man` a roff page.

use std::process::Command;

/// The standard output of `ksync ARGS`, which must succeed.
fn ksync(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ksync")).args(args).output().expect("run ksync");
    assert!(out.status.success(), "ksync {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn the_bash_completion_loads_in_bash_and_registers_ksync() {
    let script = ksync(&["completion", "bash"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ksync.bash");
    std::fs::write(&path, script).expect("write");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("source {} && complete -p ksync", path.display()))
        .output()
        .expect("run bash");
    assert!(out.status.success(), "bash: {}", String::from_utf8_lossy(&out.stderr));
    let registered = String::from_utf8_lossy(&out.stdout);
    assert!(
        registered.contains("_ksync") && registered.trim_end().ends_with(" ksync"),
        "{registered}"
    );
}

#[test]
fn the_zsh_and_fish_completions_and_the_man_page_name_the_new_commands() {
    for shell in ["zsh", "fish"] {
        let script = ksync(&["completion", shell]);
        for command in ["suspend", "resume", "tree", "diff", "events", "logs", "check"] {
            assert!(script.contains(command), "{shell} completion lacks {command}");
        }
    }
    let page = ksync(&["man"]);
    assert!(page.starts_with(".ie") || page.contains(".TH ksync 1"), "{page}");
    let dir = tempfile::tempdir().expect("tempdir");
    ksync(&["man", "--out", dir.path().to_str().expect("utf-8")]);
    assert!(dir.path().join("ksync.1").exists());
    assert!(dir.path().join("ksync-diff.1").exists());
}
