//! The crate layers hold: the API crate and the decisions crate depend on no async runtime, HTTP
//! stack, HTTP client, Git library or web framework, directly or through anything they pull in.
//! The rule is api ← core ← I/O crates (source, runtime) ← binaries; see docs/architecture.md.
//!
//! Read from `cargo metadata`'s resolved graph (normal dependencies only: tests and build scripts
//! of a pure crate may use anything), for the host platform.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Crates a pure layer must never reach.
const FORBIDDEN: [&str; 5] = ["tokio", "hyper", "reqwest", "gix", "axum"];

/// The pure layers.
const PURE_CRATES: [&str; 2] = ["kuvryn-sync-api", "kuvryn-sync-core"];

/// A resolved dependency graph: package name → names of its normal dependencies.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// For each crate of `FORBIDDEN` reachable from `start`, the chain that reaches it.
fn forbidden_paths(graph: &Graph, start: &str) -> Vec<Vec<String>> {
    let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
    let mut stack = vec![start];
    let mut found = Vec::new();
    while let Some(name) = stack.pop() {
        for dep in graph.get(name).into_iter().flatten() {
            if dep == start || parent.contains_key(dep.as_str()) {
                continue;
            }
            parent.insert(dep, name);
            if FORBIDDEN.contains(&dep.as_str()) {
                let mut chain = vec![dep.clone()];
                let mut at = dep.as_str();
                while let Some(up) = parent.get(at) {
                    chain.push((*up).to_owned());
                    at = up;
                }
                chain.reverse();
                found.push(chain);
            }
            stack.push(dep);
        }
    }
    found
}

fn host_triple() -> String {
    let out = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: ").map(str::to_owned))
        .expect("rustc -vV names the host")
}

/// The workspace's resolved graph for the host, by package name.
fn workspace_graph() -> Graph {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--manifest-path", manifest])
        .args(["--filter-platform", &host_triple()])
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata JSON");
    let name_of: BTreeMap<&str, &str> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().expect("id"), p["name"].as_str().expect("name")))
        .collect();
    let mut graph = Graph::new();
    for node in metadata["resolve"]["nodes"].as_array().expect("resolve.nodes") {
        let name = name_of[node["id"].as_str().expect("node id")];
        let deps = graph.entry(name.to_owned()).or_default();
        for dep in node["deps"].as_array().expect("deps") {
            let normal = dep["dep_kinds"]
                .as_array()
                .expect("dep_kinds")
                .iter()
                .any(|kind| kind["kind"].is_null());
            if normal {
                deps.insert(name_of[dep["pkg"].as_str().expect("pkg")].to_owned());
            }
        }
    }
    graph
}

#[test]
fn api_and_core_reach_no_runtime_http_git_or_web_crate() {
    let graph = workspace_graph();
    for krate in PURE_CRATES {
        assert!(graph.contains_key(krate), "{krate} is a workspace member");
        let paths = forbidden_paths(&graph, krate);
        assert!(
            paths.is_empty(),
            "{krate} must stay free of I/O crates, but reaches: {}",
            paths.iter().map(|p| p.join(" -> ")).collect::<Vec<_>>().join("; ")
        );
    }
}

#[test]
fn the_io_crates_and_binaries_sit_above_the_pure_layers() {
    let graph = workspace_graph();
    let depends = |a: &str, b: &str| graph.get(a).is_some_and(|deps| deps.contains(b));
    assert!(depends("kuvryn-sync-core", "kuvryn-sync-api"));
    for io in ["kuvryn-sync-source", "kuvryn-sync-runtime"] {
        assert!(depends(io, "kuvryn-sync-core"), "{io} builds on the decisions");
        assert!(!depends("kuvryn-sync-core", io) && !depends("kuvryn-sync-api", io), "{io}");
    }
    assert!(!depends("kuvryn-sync-api", "kuvryn-sync-core"), "api is the bottom layer");
}

#[test]
fn a_forbidden_crate_is_found_however_deep() {
    let graph: Graph = [
        ("kuvryn-sync-core", vec!["kuvryn-sync-api", "regex"]),
        ("kuvryn-sync-api", vec!["serde", "helper"]),
        ("helper", vec!["tokio"]),
        ("regex", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(
        forbidden_paths(&graph, "kuvryn-sync-core"),
        vec![vec!["kuvryn-sync-core", "kuvryn-sync-api", "helper", "tokio"]]
    );
    assert!(forbidden_paths(&graph, "regex").is_empty());
}
