//! Every input kept for a fuzz target replays through its harness on the stable toolchain: the
//! seed corpus (`fuzz/corpus/<target>/`) and each crash the fuzzers found
//! (`fuzz/regressions/<target>/`, one file per crash, kept forever). Also holds the targets, the
//! corpora and the cargo-fuzz binaries to one list, so a harness cannot be added without a target
//! and seeds, nor a folder left behind without a harness.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kuvryn_sync_fuzzing::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> =
        entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

fn names_in(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .filter(|name| !name.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_corpus_and_regression_input_replays_without_a_panic() {
    for (name, harness) in TARGETS {
        let seeds = files_in(&fuzz_dir().join("corpus").join(name));
        assert!(!seeds.is_empty(), "fuzz/corpus/{name}/ has no seed inputs");
        let regressions = files_in(&fuzz_dir().join("regressions").join(name));
        for input in seeds.iter().chain(&regressions) {
            let bytes = std::fs::read(input).expect("readable input");
            let outcome = std::panic::catch_unwind(|| harness(&bytes));
            assert!(outcome.is_ok(), "{name}: {} makes the harness fail", input.display());
        }
    }
}

#[test]
fn every_harness_has_a_target_and_a_corpus_and_nothing_else_does() {
    let harnesses: BTreeSet<String> = TARGETS.iter().map(|(name, _)| (*name).to_owned()).collect();
    let binaries: BTreeSet<String> = names_in(&fuzz_dir().join("fuzz_targets"))
        .into_iter()
        .filter_map(|file| file.strip_suffix(".rs").map(str::to_owned))
        .collect();
    assert_eq!(binaries, harnesses, "fuzz/fuzz_targets/*.rs");
    assert_eq!(names_in(&fuzz_dir().join("corpus")), harnesses, "fuzz/corpus/");
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for name in &harnesses {
        assert!(manifest.contains(&format!("name = \"{name}\"")), "fuzz/Cargo.toml lacks {name}");
    }
    let regressions = names_in(&fuzz_dir().join("regressions"));
    assert!(regressions.is_subset(&harnesses), "fuzz/regressions/: {regressions:?}");
}
