//! Benchmark: our render path against the engine called directly on the same input, and the
//! render cache's hit. The input is a commit checked out by the Git cache from a real `git
//! daemon`: a kustomize overlay of a base (Deployment, Service, ConfigMap, a patch) and a Helm
//! chart with a values file.
//!
//! - **kustomize**: ours is what the controller runs minus Kubernetes: the render key (Git tree
//!   ids of every directory the overlay reads, `kuvryn_sync_render::cache`), a cache miss, then
//!   `source::render` (private copy of what the overlay reads, sealed, remote-reference check,
//!   `kubectl kustomize` under our supervision in its sandbox: network namespace and rlimits,
//!   parsed). Direct is `kubectl kustomize DIR` on the checkout.
//! - **helm**: ours is the key, a miss, the private copy, `helm::read_values_files`,
//!   `assemble_values`, `helm::render` (chart copied, CRDs, engine in its sandbox) and
//!   `source::finish`. Direct is `HelmRenderer::render` of the chart directory with the same
//!   values, without the sandbox.
//! - **cache hit**: the key computed again and the output found.
//! - **hardening** (`render_hardening`): what the cage around untrusted renders costs, before
//!   against after in the same run. *After* is ours as above. *Before* is ours with the cage
//!   off ([`Sandbox::UNCONFINED`]: no network namespace, no rlimits, the helper started by
//!   `posix_spawn` instead of `fork`), minus what the YAML budget adds to the parse of the
//!   engine's output (our budgeted `core::yaml` against serde-saphyr without our budgets, timed
//!   on the same text). The pairs run interleaved, alternating which goes first, and the
//!   ratio is the median of the pairs' ratios, so the machine's drift cancels out. The goal
//!   (≤ 1.05×) is printed, not enforced. The remote-reference check and the object-size checks
//!   run on both sides: they are part of the render either way and cost microseconds.
//!
//! Medians of `KSYNC_BENCH_ITERATIONS` rounds (default 7) and `KSYNC_BENCH_HARDENING_PAIRS`
//! pairs (default 15), printed as JSON lines with the ratio ours / direct; the goal of ≤ 1.1×
//! is printed, not enforced. Fails only when a render fails, ours and direct disagree on the
//! objects, or a second lookup misses.
//!
//! Needs `kubectl` on PATH, the Helm engine (`KSYNC_LIBHELM`, installed by scripts/test) and the
//! `ksync-helm-render` helper built beside the benchmark:
//!
//! ```sh
//! cargo build -p kuvryn-sync-helm --bin ksync-helm-render
//! cargo bench --profile dev -p kuvryn-sync-tests --bench render
//! ```

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use kuvryn_sync_api::RenderType;
use kuvryn_sync_core::helm_values::{self, ValuesInput};
use kuvryn_sync_render::cache::{
    CachedRender, EngineIdentity, KeyParts, RenderCache, RenderKey, SourceShape, SourceTree,
    source_inputs,
};
use kuvryn_sync_render::helm::{self, ChartSource};
use kuvryn_sync_render::kustomize::{Kustomize, KustomizeProgram};
use kuvryn_sync_render::sandbox::Sandbox;
use kuvryn_sync_render::source::{self, RenderRequest, SourceRender};
use kuvryn_sync_render::yaml::Limits;
use kuvryn_sync_source::git::{FetchRequest, GitCache, TreeIds};
use kuvryn_sync_tests::servers::{BareRepo, GitDaemon};
use serde_json::{Value, json};

const OVERLAY: &str = "overlays/prod";
const CHART: &str = "charts/web";
const VALUES_FILE: &str = "values/prod.yaml";
const RELEASE: &str = "web";
const NAMESPACE: &str = "bench";
/// The hardening ratio this benchmark aims for (printed, not enforced).
const HARDENING_GOAL: f64 = 1.05;
/// Parses timed per side when measuring the YAML budget's cost.
const PARSES: usize = 200;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The repository's files: a kustomize base and overlay, a chart and a values file.
fn files() -> Vec<(&'static str, String)> {
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}},
    });
    let service = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
    });
    let config = json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-config"},
        "data": {"mode": "base"},
    });
    vec![
        ("base/deployment.yaml", deployment.to_string()),
        ("base/service.yaml", service.to_string()),
        ("base/config.yaml", config.to_string()),
        (
            "base/kustomization.yaml",
            "resources:\n- deployment.yaml\n- service.yaml\n- config.yaml\n".to_owned(),
        ),
        (
            "overlays/prod/kustomization.yaml",
            "resources:\n- ../../base\nnamePrefix: prod-\ncommonLabels:\n  tier: prod\n\
             patches:\n- path: replicas.yaml\n"
                .to_owned(),
        ),
        (
            "overlays/prod/replicas.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n"
                .to_owned(),
        ),
        ("charts/web/Chart.yaml", "apiVersion: v2\nname: web\nversion: 1.0.0\n".to_owned()),
        ("charts/web/values.yaml", "replicas: 1\nimage: nginx:1.27\nmode: base\n".to_owned()),
        (
            "charts/web/templates/deployment.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\n\
             spec:\n  replicas: {{ .Values.replicas }}\n  selector:\n    matchLabels:\n      \
             app: {{ .Release.Name }}\n  template:\n    metadata:\n      labels:\n        \
             app: {{ .Release.Name }}\n    spec:\n      containers:\n      - name: web\n        \
             image: {{ .Values.image }}\n"
                .to_owned(),
        ),
        (
            "charts/web/templates/config.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-config\n\
             data:\n  mode: {{ .Values.mode | quote }}\n"
                .to_owned(),
        ),
        (VALUES_FILE, "replicas: 3\nmode: prod\n".to_owned()),
    ]
}

/// The Git cache's ids, as the render cache reads them (the controller's adapter, too).
struct GitTree(TreeIds);

impl SourceTree for GitTree {
    fn id(&self, path: &str) -> Option<String> {
        self.0.id(path)
    }
    fn file(&self, path: &str, max_bytes: u64) -> Option<Vec<u8>> {
        self.0.file(path, max_bytes)
    }
    fn is_dir(&self, path: &str) -> bool {
        self.0.is_dir(path)
    }
}

/// The render key, as the controller computes it.
fn key(root: &Path, shape: &SourceShape<'_>, engine: &EngineIdentity) -> Result<RenderKey> {
    let tree = GitTree(TreeIds::of_checkout(root).context("the checkout's ids")?);
    let inputs = source_inputs(&tree, shape).context("the render is cacheable")?;
    let render = match shape.render_type {
        RenderType::Helm => json!({"type": "helm", "helm": {"releaseName": RELEASE,
            "valuesFiles": shape.values_files}}),
        _ => json!({"type": "kustomize"}),
    };
    let parts = KeyParts {
        source_path: shape.path.to_owned(),
        inputs,
        render,
        destination_namespace: NAMESPACE.to_owned(),
        engine: engine.clone(),
        ..KeyParts::default()
    };
    Ok(parts.key())
}

/// The objects, comparable: sorted by their JSON.
fn objects(values: impl IntoIterator<Item = Value>) -> Vec<String> {
    let mut out: Vec<String> = values.into_iter().map(|v| v.to_string()).collect();
    out.sort();
    out
}

fn ours_kustomize(
    root: &Path,
    kustomize: &Kustomize,
    cache: &RenderCache,
    engine: &EngineIdentity,
) -> Result<SourceRender> {
    let shape = SourceShape {
        render_type: RenderType::Kustomize,
        path: OVERLAY,
        values_files: &[],
        chart_pulled: false,
    };
    let key = key(root, &shape, engine)?;
    ensure!(cache.get(&key).is_none(), "a fresh cache misses");
    let request = RenderRequest {
        root,
        path: OVERLAY,
        render_type: RenderType::Kustomize,
        keys: None,
        kustomize,
        limits: Limits::default(),
    };
    let rendered = source::render(&request).map_err(|f| anyhow::anyhow!("{}", f.message))?;
    cache.insert(
        key,
        Arc::new(CachedRender {
            objects: rendered.objects.clone(),
            secrets: rendered.secrets.clone(),
            chart_digest: None,
        }),
    );
    Ok(rendered)
}

fn direct_kustomize(root: &Path) -> Result<Vec<Value>> {
    let output = Command::new("kubectl").arg("kustomize").arg(root.join(OVERLAY)).output()?;
    if !output.status.success() {
        bail!("kubectl kustomize: {}", String::from_utf8_lossy(&output.stderr));
    }
    let text = String::from_utf8(output.stdout)?;
    Ok(kuvryn_sync_core::yaml::documents(&text)?)
}

fn ours_helm(
    root: &Path,
    renderer: &kuvryn_sync_helm::HelmRenderer,
    kustomize: &Kustomize,
    cache: &RenderCache,
    engine: &EngineIdentity,
) -> Result<SourceRender> {
    let values_files = vec![VALUES_FILE.to_owned()];
    let shape = SourceShape {
        render_type: RenderType::Helm,
        path: CHART,
        values_files: &values_files,
        chart_pulled: false,
    };
    let key = key(root, &shape, engine)?;
    ensure!(cache.get(&key).is_none(), "a fresh cache misses");
    let request = RenderRequest {
        root,
        path: CHART,
        render_type: RenderType::Helm,
        keys: None,
        kustomize,
        limits: Limits::default(),
    };
    let mut out = SourceRender::default();
    let reads = [CHART.to_owned(), VALUES_FILE.to_owned()];
    let workspace = source::private_copy(&request, &mut out, Some(&reads))
        .map_err(|f| anyhow::anyhow!("{}", f.message))?;
    let files = helm::read_values_files(workspace.root(), &values_files, helm::Limits::default())?;
    let values = helm_values::assemble_values(&ValuesInput { files, from: vec![], inline: None })?;
    out.secrets.extend(values.secret_strings.iter().cloned());
    let chart = ChartSource::Directory { repository_root: workspace.root(), path: CHART };
    out.objects =
        helm::render(renderer, chart, &values, RELEASE, NAMESPACE, helm::Limits::default())?;
    source::finish(&mut out, None).map_err(|f| anyhow::anyhow!("{}", f.message))?;
    cache.insert(
        key,
        Arc::new(CachedRender {
            objects: out.objects.clone(),
            secrets: out.secrets.clone(),
            chart_digest: None,
        }),
    );
    Ok(out)
}

fn direct_helm(root: &Path, renderer: &kuvryn_sync_helm::HelmRenderer) -> Result<Vec<Value>> {
    let values: Value =
        kuvryn_sync_core::yaml::document(&std::fs::read_to_string(root.join(VALUES_FILE))?)?;
    let request = kuvryn_sync_helm::RenderRequest::new(root.join(CHART), RELEASE, NAMESPACE)
        .with_values(values);
    let rendered = renderer.render(&request)?;
    Ok(rendered.documents()?.into_iter().map(|d| d.object).collect())
}

/// Time `ours`, `direct` and a cache hit for one engine over `rounds`; print one JSON line.
fn measure(
    engine_name: &str,
    rounds: usize,
    mut ours: impl FnMut(&RenderCache) -> Result<SourceRender>,
    mut direct: impl FnMut() -> Result<Vec<Value>>,
    hit: impl Fn(&RenderCache) -> Result<RenderKey>,
) -> Result<()> {
    let (mut ours_ms, mut direct_ms, mut hit_ms) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let cache = RenderCache::new(16);
        let start = Instant::now();
        let rendered = ours(&cache)?;
        ours_ms.push(ms(start.elapsed()));
        let start = Instant::now();
        let direct_objects = direct()?;
        direct_ms.push(ms(start.elapsed()));
        if round == 0 {
            let ours_objects = objects(rendered.objects.iter().map(|r| r.object.clone()));
            let direct_objects = objects(direct_objects);
            ensure!(
                ours_objects == direct_objects,
                "{engine_name}: ours and the engine disagree:\n{ours_objects:#?}\n{direct_objects:#?}"
            );
        }
        let start = Instant::now();
        let key = hit(&cache)?;
        let found = cache.get(&key);
        hit_ms.push(ms(start.elapsed()));
        ensure!(found.is_some(), "{engine_name}: the second lookup finds the output");
    }
    let (ours, direct, hit) = (median(ours_ms), median(direct_ms), median(hit_ms));
    println!(
        "{}",
        json!({
            "bench": "render", "engine": engine_name, "rounds": rounds,
            "ours_ms": (ours * 100.0).round() / 100.0,
            "direct_ms": (direct * 100.0).round() / 100.0,
            "ratio": (ours / direct * 100.0).round() / 100.0, "goal_ratio": 1.1,
            "cache_hit_ms": (hit * 1000.0).round() / 1000.0,
        })
    );
    Ok(())
}

fn main() -> Result<()> {
    let rounds: usize = std::env::var("KSYNC_BENCH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7)
        .max(1);
    kuvryn_sync_runtime::tls::install_crypto_provider();
    let work = tempfile::tempdir()?;
    let repo = BareRepo::create(work.path(), "render")?;
    let files = files();
    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
    repo.commit(&files, "render inputs")?;
    let daemon = GitDaemon::start(work.path())?;
    let git = GitCache::new(work.path().join("cache"), 1 << 30)?;
    let request = FetchRequest::new(daemon.url(&repo.name), "main");
    let commit = git.resolve(&request)?.commit;
    let tree = git.tree(&request, &commit)?;
    let root = tree.path();

    // The same engine on both sides: kubectl's built-in kustomize, found on PATH.
    let kustomize = Kustomize::new(KustomizeProgram::Kubectl("kubectl".into()));
    let renderer = kuvryn_sync_tests::helm::renderer();
    let engine = EngineIdentity {
        kustomize: format!("{:?}", kustomize.program),
        remote_bases: false,
        helm_library: Some(renderer.library().to_string_lossy().into_owned()),
    };
    let kustomize_shape = SourceShape {
        render_type: RenderType::Kustomize,
        path: OVERLAY,
        values_files: &[],
        chart_pulled: false,
    };
    measure(
        "kustomize",
        rounds,
        |cache| ours_kustomize(root, &kustomize, cache, &engine),
        || direct_kustomize(root),
        |_| key(root, &kustomize_shape, &engine),
    )?;
    // Ours runs the Helm helper in the controller's sandbox (network namespace, rlimits).
    let sandbox = kustomize.sandbox;
    let sandboxed = renderer.clone().with_command_hook(move |command| sandbox.apply(command));
    let values_files = vec![VALUES_FILE.to_owned()];
    let helm_shape = SourceShape {
        render_type: RenderType::Helm,
        path: CHART,
        values_files: &values_files,
        chart_pulled: false,
    };
    measure(
        "helm",
        rounds,
        |cache| ours_helm(root, &sandboxed, &kustomize, cache, &engine),
        || direct_helm(root, &renderer),
        |_| key(root, &helm_shape, &engine),
    )?;

    // Before and after the hardening, pair by pair.
    let pairs: usize = std::env::var("KSYNC_BENCH_HARDENING_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15)
        .max(1);
    let unconfined = Kustomize { sandbox: Sandbox::UNCONFINED, ..kustomize.clone() };
    hardening(
        "kustomize",
        pairs,
        || ours_kustomize(root, &kustomize, &RenderCache::new(16), &engine),
        || ours_kustomize(root, &unconfined, &RenderCache::new(16), &engine),
    )?;
    hardening(
        "helm",
        pairs,
        || ours_helm(root, &sandboxed, &kustomize, &RenderCache::new(16), &engine),
        || ours_helm(root, &renderer, &unconfined, &RenderCache::new(16), &engine),
    )?;
    drop(daemon);
    Ok(())
}

/// One render, timed.
fn timed(render: &mut impl FnMut() -> Result<SourceRender>) -> Result<(f64, SourceRender)> {
    let start = Instant::now();
    let rendered = render()?;
    Ok((ms(start.elapsed()), rendered))
}

/// `hardened` against `unconfined` over `pairs` interleaved pairs (which goes first alternates),
/// less the YAML budget's cost on the engine's output; print one JSON line.
fn hardening(
    engine_name: &str,
    pairs: usize,
    mut hardened: impl FnMut() -> Result<SourceRender>,
    mut unconfined: impl FnMut() -> Result<SourceRender>,
) -> Result<()> {
    let (mut after_ms, mut before_ms, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut output = None;
    for pair in 0..pairs {
        let (after, before) = if pair % 2 == 0 {
            let after = timed(&mut hardened)?;
            (after, timed(&mut unconfined)?)
        } else {
            let before = timed(&mut unconfined)?;
            (timed(&mut hardened)?, before)
        };
        ensure!(
            objects(after.1.objects.iter().map(|r| r.object.clone()))
                == objects(before.1.objects.iter().map(|r| r.object.clone())),
            "{engine_name}: the cage changed the rendered objects"
        );
        output.get_or_insert(after.1);
        after_ms.push(after.0);
        before_ms.push(before.0);
        ratios.push(after.0 / before.0);
    }
    let output = output.context("at least one pair")?;
    let text = output
        .objects
        .iter()
        .map(|o| kuvryn_sync_core::yaml::to_string(&o.object))
        .collect::<Result<Vec<_>, _>>()?
        .join("---\n");
    let (budgeted_ms, plain_ms) = parse_costs(&text)?;
    let budget_ms = (budgeted_ms - plain_ms).max(0.0);
    let (after, before) = (median(after_ms), median(before_ms));
    let cage_ratio = median(ratios);
    // Before = after / cage ratio, less what the budget adds to the one parse of the output.
    let before_all = (after / cage_ratio - budget_ms).max(f64::MIN_POSITIVE);
    let round2 = |v: f64| (v * 100.0).round() / 100.0;
    println!(
        "{}",
        json!({
            "bench": "render_hardening", "engine": engine_name, "pairs": pairs,
            "after_ms": round2(after), "unconfined_ms": round2(before),
            "cage_ratio": (cage_ratio * 1000.0).round() / 1000.0,
            "parse_budgeted_ms": (budgeted_ms * 1000.0).round() / 1000.0,
            "parse_plain_ms": (plain_ms * 1000.0).round() / 1000.0,
            "hardening_ratio": ((after / before_all) * 1000.0).round() / 1000.0,
            "goal_ratio": HARDENING_GOAL,
        })
    );
    Ok(())
}

/// Median milliseconds of one parse of `text`: our budgeted parser, then serde-saphyr without
/// our budgets, interleaved in batches.
fn parse_costs(text: &str) -> Result<(f64, f64)> {
    let (mut budgeted, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..PARSES {
        let start = Instant::now();
        let ours = kuvryn_sync_core::yaml::documents(text)?;
        budgeted.push(ms(start.elapsed()));
        let start = Instant::now();
        let theirs: Vec<Value> = serde_saphyr::from_multiple(text)?;
        plain.push(ms(start.elapsed()));
        ensure!(ours.len() == theirs.len(), "both parsers read every document");
    }
    Ok((median(budgeted), median(plain)))
}
