//! Helpers for the tests of generated files: run the real `ksync` and compare its output with the
//! file committed in the repository.

use std::path::PathBuf;
use std::process::Command;

/// The standard output of `ksync ARGS`, which must succeed.
pub fn ksync(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ksync")).args(args).output().expect("run ksync");
    assert!(
        out.status.success(),
        "ksync {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Fail, naming the first differing line and the command that regenerates it, unless the
/// repository file `committed` (relative to the workspace root) is exactly `ksync ARGS`'s output.
pub fn assert_committed_output(committed: &str, args: &[&str]) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(committed);
    let shipped = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{} must exist: {err}", path.display()));
    let generated = ksync(args);
    if shipped != generated {
        let line = shipped
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(|| "length".to_owned(), |n| format!("line {}", n + 1));
        panic!(
            "{committed} is stale (first difference at {line}); regenerate it with:\n  \
             cargo run -p ksync -- {} > {committed}",
            args.join(" ")
        );
    }
}
