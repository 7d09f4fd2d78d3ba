//! What ships together stays together: the chart's version and appVersion equal the workspace
//! version (which `scripts/image` tags the images with); the Containerfiles pin every base image
//! by digest and lay the images out as `scripts/image` does; and the kind workflow
//! (`.github/workflows/e2e-kind.yml`, which cannot run here) parses and names only scripts and
//! paths that exist.

use std::collections::BTreeSet;

use kuvryn_sync_tests::helm::{chart_dir, workspace_root};
use serde_json::Value;

fn read(path: &str) -> String {
    std::fs::read_to_string(workspace_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_chart_version_and_app_version_are_the_workspace_version() {
    let chart: Value = kuvryn_sync_core::yaml::document(
        &std::fs::read_to_string(chart_dir().join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml parses");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(chart["version"], version, "Chart.yaml version (scripts/release checks it too)");
    assert_eq!(chart["appVersion"], version, "Chart.yaml appVersion: the images' tag");
}

#[test]
fn containerfiles_pin_their_bases_by_digest_and_match_the_offline_layout() {
    let script = read("scripts/image");
    for (file, entrypoint) in [
        ("images/controller.Containerfile", "/usr/local/bin/kuvryn-sync-controller"),
        ("images/webhook.Containerfile", "/usr/local/bin/kuvryn-sync-webhook"),
    ] {
        let text = read(file);
        let images: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("ARG ").and_then(|a| a.split_once("_IMAGE=")))
            .map(|(_, image)| image)
            .collect();
        assert!(images.len() >= 2, "{file}: base images are ARGs");
        for image in images {
            let digest = image.split_once("@sha256:").map(|(_, d)| d).unwrap_or_default();
            assert!(
                digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit()),
                "{file}: {image} is not pinned by digest"
            );
        }
        assert!(text.contains(&format!("ENTRYPOINT [\"{entrypoint}\"]")), "{file}: entrypoint");
        assert!(
            script.contains(&format!("--entrypoint {entrypoint}")),
            "scripts/image: {entrypoint}"
        );
        assert!(text.contains("USER 65532:65532"), "{file}: non-root user");
        for label in ["source", "version", "revision"] {
            assert!(
                text.contains(&format!("org.opencontainers.image.{label}=")),
                "{file}: {label}"
            );
        }
    }
    let controller = read("images/controller.Containerfile");
    for path in ["/usr/local/lib/kuvryn-sync/libhelm_c.so", "/usr/local/bin/kubectl"] {
        assert!(controller.contains(path), "controller Containerfile: {path}");
    }
    assert!(script.contains("KSYNC_LIBHELM=/usr/local/lib/kuvryn-sync/libhelm_c.so"));
}

/// Every word of `text` that names a path under one of the repository's top-level folders.
fn named_paths(text: &str) -> BTreeSet<String> {
    const ROOTS: [&str; 7] =
        ["scripts/", "charts/", "docs/", "images/", "tests/", ".github/", "target/"];
    text.split(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ':' | '=' | '(' | ')' | ','))
        .filter(|w| ROOTS.iter().any(|r| w.starts_with(r)))
        .map(|w| w.trim_end_matches(['.', ';']).to_owned())
        .collect()
}

#[test]
fn the_kind_workflow_parses_and_names_only_what_exists() {
    let text = read(".github/workflows/e2e-kind.yml");
    let workflow: Value = kuvryn_sync_core::yaml::document(&text).expect("the workflow parses");
    let steps = workflow["jobs"]["e2e"]["steps"].as_array().expect("jobs.e2e.steps");
    let runs: Vec<&str> = steps.iter().filter_map(|s| s["run"].as_str()).collect();
    let all = runs.join("\n");
    for needed in [
        "scripts/image",
        "kind load image-archive",
        "helm install",
        "KSYNC_E2E_KUBECONFIG",
        "cargo nextest run",
    ] {
        assert!(all.contains(needed), "the workflow runs {needed}");
    }
    let paths = named_paths(&all);
    assert!(paths.len() >= 5, "paths named: {paths:?}");
    for path in paths {
        // target/ is what the workflow builds; only its parent must be the build's.
        if path.starts_with("target/") {
            continue;
        }
        let on_disk = workspace_root().join(&path);
        let exists =
            on_disk.exists() || path.contains('*') && on_disk.parent().is_some_and(|p| p.exists());
        assert!(exists, "the workflow names {path}, which does not exist");
    }
}

/// The chart with default values runs exactly the images `scripts/image` names (checked without
/// building them; `images.rs` checks the built ones where it can run).
#[test]
fn the_chart_defaults_name_the_images_scripts_image_builds() {
    let out = std::process::Command::new(workspace_root().join("scripts/image"))
        .arg("--print-references")
        .env_remove("KSYNC_IMAGE_PREFIX")
        .output()
        .expect("scripts/image --print-references");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut built: Vec<String> =
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
    built.sort();
    let render = kuvryn_sync_tests::helm::render_chart(serde_json::json!({})).expect("render");
    let mut named: Vec<String> = render
        .of_kind("Deployment")
        .iter()
        .filter_map(|d| d["spec"]["template"]["spec"]["containers"][0]["image"].as_str())
        .map(str::to_owned)
        .collect();
    named.sort();
    assert_eq!(named, built);
}
