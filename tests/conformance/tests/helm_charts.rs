//! Helm's own test charts (`$KSYNC_CONFORMANCE_DATA/fixtures/helm/helm-testdata/`) rendered with
//! the real engine through `kuvryn-sync-helm`.

use kuvryn_sync_conformance::{fixture, helm_renderer};
use kuvryn_sync_helm::RenderRequest;

#[test]
fn renders_the_signtest_chart_directory() {
    let dir = fixture("helm/helm-testdata/signtest-dir");
    let rendered =
        helm_renderer().render(&RenderRequest::new(&dir, "signed", "team-a")).expect("render");
    assert!(
        rendered.manifests.contains_key("signtest/templates/pod.yaml"),
        "{:?}",
        rendered.manifests.keys()
    );
    let docs = rendered.documents().expect("documents");
    // `alpine/` sits beside `templates/`, not under `charts/`: it is not a subchart.
    let pods: Vec<_> = docs.iter().filter(|d| d.kind() == "Pod").collect();
    assert_eq!(pods.len(), 1, "{docs:?}");
    let pod = &pods[0].object;
    assert_eq!(pod["apiVersion"], "v1");
    assert_eq!(pod["metadata"]["name"], "signtest");
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["name"], "waiter");
    assert_eq!(container["image"], "alpine:3.3");
    assert_eq!(container["command"], serde_json::json!(["/bin/sleep", "9000"]));
}

#[test]
fn the_packaged_signtest_chart_renders_like_its_directory() {
    let renderer = helm_renderer();
    let render = |chart| {
        renderer.render(&RenderRequest::new(chart, "signed", "team-a")).expect("render").manifests
    };
    let packaged = render(fixture("helm/helm-testdata/signtest-0.1.0.tgz"));
    let directory = render(fixture("helm/helm-testdata/signtest-dir"));
    assert!(!packaged.is_empty());
    assert_eq!(packaged, directory);
}

#[test]
fn a_chart_with_only_a_partial_renders_no_objects() {
    let chart = fixture("helm/helm-testdata/compressedchart-0.1.0.tgz");
    let rendered = helm_renderer().render(&RenderRequest::new(chart, "r", "ns")).expect("render");
    let docs = rendered.documents().expect("documents");
    assert!(docs.is_empty(), "{docs:?}");
}
