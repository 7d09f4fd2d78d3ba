//! The render step's I/O: read what a render needs as the Application's service account (the
//! `spec.decryption` key Secret, Helm `valuesFrom` and chart credentials), pull a chart, run the
//! renderer on a blocking thread, and mask every value it decrypted or read from a Secret. The
//! render itself is `kuvryn_sync_render::application::render_application`, the one the CLI uses.
//!
//! Around the engine sits the render cache (`kuvryn_sync_render::cache`): after everything the
//! render reads as the service account has been read (so a tenant that lost access fails as
//! before), the key is computed from the Git ids of the paths it reads, those reads' digests,
//! the render config and the engines (the Git ids are worked out once per checked-out commit and
//! remembered, `cache::InputsMemo`, so a reconcile with nothing new does not open the repository); a hit serves the kept output (its secret values registered
//! with the redactor like a fresh render's), a miss renders and keeps the output. Every engine run
//! and every hit is counted in `kuvryn_sync_renders_total`.

use crate::step::StepResult;
use kuvryn_sync_core::failure::StepFailure;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kuvryn_sync_api::{
    Application, FailureReason, HelmChart, HelmRender, RenderType, ValuesFrom, ValuesSourceKind,
    keys,
};
use kuvryn_sync_core::credential_scope;
use kuvryn_sync_core::desired::Rendered;
use kuvryn_sync_core::helm_values::{self, ValuesFromData};
use kuvryn_sync_core::redact::Redactor;
use kuvryn_sync_helm::HelmRenderer;
use kuvryn_sync_render::application::{ApplicationRender, render_application};
use kuvryn_sync_render::cache::{
    self, CachedRender, EngineIdentity, InputDigest, KeyParts, RenderCache, RenderKey, SourceShape,
    SourceTree,
};
use kuvryn_sync_render::helm;
use kuvryn_sync_render::kustomize::Kustomize;
use kuvryn_sync_render::sops::AgeKeys;
use kuvryn_sync_render::source::{RenderFailure, SourceRender};
use kuvryn_sync_render::yaml::Limits;
use kuvryn_sync_runtime::metrics::{ControllerMetrics, RenderOutcome};
use kuvryn_sync_source::chart::{ChartCredentials, ChartPull, ChartPuller, PulledChart};
use kuvryn_sync_source::git::TreeIds;

/// The engines and their limits, from the controller's flags.
#[derive(Clone, Debug)]
pub struct Renderers {
    pub kustomize: Kustomize,
    /// The Helm engine, or why it is unavailable (said to Applications that need it).
    pub helm: Result<HelmRenderer, String>,
    /// Chart pulls, cached by digest.
    pub charts: Result<Arc<OffRuntime<ChartPuller>>, String>,
    /// Rendered outputs, keyed by everything that shaped them.
    pub cache: Arc<RenderCache>,
    /// Counts engine renders and cache hits.
    pub metrics: ControllerMetrics,
}

impl Renderers {
    /// What identifies the engines in a render key.
    fn engine_identity(&self) -> EngineIdentity {
        EngineIdentity {
            kustomize: format!("{:?}", self.kustomize.program),
            remote_bases: self.kustomize.allow_remote_bases,
            helm_library: self
                .helm
                .as_ref()
                .ok()
                .map(|helm| helm.library().to_string_lossy().into_owned()),
        }
    }
}

/// A value made and dropped on a thread of its own, never on the async runtime: the chart
/// puller's blocking HTTP client owns a runtime, which may be neither created nor dropped inside
/// another one.
pub struct OffRuntime<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> OffRuntime<T> {
    /// Run `make` on a plain thread and keep what it made.
    pub fn make<E: Send + 'static>(
        make: impl FnOnce() -> Result<T, E> + Send + 'static,
    ) -> Result<Self, E> {
        std::thread::spawn(make)
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            .map(|v| OffRuntime(Some(v)))
    }

    fn get(&self) -> &T {
        self.0.as_ref().expect("present until dropped")
    }
}

impl<T: Send + 'static> Drop for OffRuntime<T> {
    fn drop(&mut self) {
        if let Some(value) = self.0.take() {
            std::thread::spawn(move || drop(value));
        }
    }
}

impl<T: Send + 'static> std::fmt::Debug for OffRuntime<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OffRuntime")
    }
}

/// What a render produced.
#[derive(Debug, Default)]
pub struct Output {
    pub objects: Vec<Rendered>,
    /// `sha256:<hex>` of a pulled chart archive.
    pub chart_digest: Option<String>,
}

/// What to do when the render cache has no output for the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnMiss {
    Render,
    /// Render nothing and return `None`: the caller announces the render first.
    Defer,
}

/// Render `app`'s source at the checkout `root`, as its service account's `client`; `None` when
/// the cache has no output for it and `on_miss` defers.
pub async fn render<E: From<tokio::task::JoinError>>(
    app: &Application,
    namespace: &str,
    client: &kube::Client,
    root: PathBuf,
    (renderers, on_miss): (&Renderers, OnMiss),
    redactor: &mut Redactor,
) -> StepResult<Option<Output>, E> {
    let _timer = renderers.metrics.durations.render(app.spec.source.render.render_type);
    let keys = decryption_keys(app, namespace, client).await?;
    if app.spec.source.render.render_type == RenderType::Helm {
        let engine = (renderers, on_miss);
        return render_helm(app, namespace, client, root, keys, engine, redactor).await;
    }
    let path = app.spec.source.path.clone();
    let render = app.spec.source.render.clone();
    let render_type = render.render_type;
    let destination = app.spec.destination.namespace.clone();
    let kustomize = renderers.kustomize.clone();
    let parts = key_parts(app, renderers, keys.as_ref().map(|k| k.digest), None, None);
    let cache = Arc::clone(&renderers.cache);
    let (key, found) = tokio::task::spawn_blocking(move || {
        let shape =
            SourceShape { render_type, path: &path, values_files: &[], chart_pulled: false };
        let key = render_key(&root, &shape, parts, &cache);
        if let Some(hit) = key.and_then(|key| cache.get(&key)) {
            return (key, Found::Hit(hit));
        }
        if on_miss == OnMiss::Defer {
            return (key, Found::Deferred);
        }
        let request = ApplicationRender {
            root: &root,
            path: &path,
            render: &render,
            destination_namespace: &destination,
            keys: keys.as_ref().map(|k| &k.keys),
            kustomize: &kustomize,
            helm: None,
            pulled_chart: None,
            limits: Limits::default(),
            chart_limits: helm::Limits::default(),
        };
        (key, Found::Rendered(render_application(&request, &Vec::new())))
    })
    .await?;
    Ok(settle(found, key, render_type, None, renderers, redactor)?)
}

/// Age keys and a digest of the Secret data they came from (for the render key; never the keys).
struct DecryptionKeys {
    keys: AgeKeys,
    digest: InputDigest,
}

/// A render's output: from the cache, or from the engine; or nothing, a miss deferred.
enum Found {
    Hit(Arc<CachedRender>),
    Rendered(Result<SourceRender, RenderFailure>),
    Deferred,
}

/// The parts of a render key known before the repository is read.
fn key_parts(
    app: &Application,
    renderers: &Renderers,
    decryption_keys: Option<InputDigest>,
    values_from: Option<InputDigest>,
    chart: Option<String>,
) -> KeyParts {
    KeyParts {
        source_path: app.spec.source.path.clone(),
        inputs: BTreeMap::new(),
        render: serde_json::to_value(&app.spec.source.render).unwrap_or_default(),
        destination_namespace: app.spec.destination.namespace.clone(),
        values_from,
        decryption_keys,
        chart,
        engine: renderers.engine_identity(),
    }
}

/// The Git ids of the checkout at `root`, as the render cache reads them.
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

/// The render key of `shape` at the checkout `root`, or `None` when the render may not be cached
/// (the checkout is not the Git cache's, or some content read is not covered by a Git id).
/// Blocking: reads Git objects the first time a checkout is keyed, from `cache`'s memo after.
fn render_key(
    root: &Path,
    shape: &SourceShape<'_>,
    mut parts: KeyParts,
    cache: &RenderCache,
) -> Option<RenderKey> {
    parts.inputs = cache.inputs().get_or_compute(root, shape, || {
        let tree = GitTree(TreeIds::of_checkout(root)?);
        Some(cache::source_inputs(&tree, shape))
    })?;
    Some(parts.key())
}

/// Count the render, register its secret values with the redactor, keep a fresh output under
/// `key`, and turn a failure into a masked status message; `None` for a deferred miss.
fn settle(
    found: Found,
    key: Option<RenderKey>,
    render_type: RenderType,
    chart_digest: Option<String>,
    renderers: &Renderers,
    redactor: &mut Redactor,
) -> Result<Option<Output>, StepFailure> {
    let output = match found {
        Found::Deferred => return Ok(None),
        Found::Hit(hit) => {
            renderers.metrics.count_render(render_type, RenderOutcome::CacheHit);
            hit
        }
        Found::Rendered(rendered) => {
            renderers.metrics.count_render(render_type, RenderOutcome::Rendered);
            let rendered = match rendered {
                Ok(rendered) => rendered,
                Err(failure) => {
                    return Err(StepFailure::new(
                        failure.reason,
                        redactor.redact(&failure.message),
                    ));
                }
            };
            let output = Arc::new(CachedRender {
                objects: rendered.objects,
                secrets: rendered.secrets,
                chart_digest,
            });
            if let Some(key) = key {
                renderers.cache.insert(key, Arc::clone(&output));
            }
            output
        }
    };
    for secret in &output.secrets {
        redactor.add_secret(secret);
    }
    let objects = output.objects.clone();
    Ok(Some(Output { objects, chart_digest: output.chart_digest.clone() }))
}

/// A Helm render's I/O: the release name checked, `valuesFrom` read as the service account and
/// the chart pulled (credentials from a labelled Secret) when it is not taken from the checkout;
/// then the render key, and on a miss the shared render (`render_application`).
async fn render_helm<E: From<tokio::task::JoinError>>(
    app: &Application,
    namespace: &str,
    client: &kube::Client,
    root: PathBuf,
    keys: Option<DecryptionKeys>,
    (renderers, on_miss): (&Renderers, OnMiss),
    redactor: &mut Redactor,
) -> StepResult<Option<Output>, E> {
    let HelmInputs { helm, renderer, from, pulled } =
        helm_inputs(app, namespace, client, renderers).await?;
    let path = app.spec.source.path.clone();
    let render = app.spec.source.render.clone();
    let destination = app.spec.destination.namespace.clone();
    let kustomize = renderers.kustomize.clone();
    let chart_digest = pulled.as_ref().map(|p| p.digest.clone());
    let values_digest = values_from_digest(&from);
    let chart_identity = helm.chart.as_ref().zip(chart_digest.as_ref()).map(|(chart, digest)| {
        format!("{}\n{}\n{}\n{digest}", chart.repository, chart.name, chart.version)
    });
    let parts = key_parts(
        app,
        renderers,
        keys.as_ref().map(|k| k.digest),
        Some(values_digest),
        chart_identity,
    );
    let cache = Arc::clone(&renderers.cache);
    let (key, found) = tokio::task::spawn_blocking(move || {
        let shape = SourceShape {
            render_type: RenderType::Helm,
            path: &path,
            values_files: &helm.values_files,
            chart_pulled: pulled.is_some(),
        };
        let key = render_key(&root, &shape, parts, &cache);
        if let Some(hit) = key.and_then(|key| cache.get(&key)) {
            return (key, Found::Hit(hit));
        }
        if on_miss == OnMiss::Defer {
            return (key, Found::Deferred);
        }
        let request = ApplicationRender {
            root: &root,
            path: &path,
            render: &render,
            destination_namespace: &destination,
            keys: keys.as_ref().map(|k| &k.keys),
            kustomize: &kustomize,
            helm: Some(&renderer),
            pulled_chart: pulled.as_ref().map(|p| p.path.as_path()),
            limits: Limits::default(),
            chart_limits: helm::Limits::default(),
        };
        (key, Found::Rendered(render_application(&request, &from)))
    })
    .await?;
    Ok(settle(found, key, RenderType::Helm, chart_digest, renderers, redactor)?)
}

/// What a Helm render reads besides the checkout.
struct HelmInputs {
    /// `spec.source.render.helm`, its release name checked.
    helm: HelmRender,
    renderer: HelmRenderer,
    /// The `valuesFrom` data, read as the service account.
    from: Vec<ValuesFromData>,
    /// The chart, when it is pulled rather than taken from the checkout.
    pulled: Option<PulledChart>,
}

/// Check the release name, take the Helm engine, read `valuesFrom` as the service account and
/// pull the chart (when it is not taken from the checkout); the first failure ends it.
async fn helm_inputs<E: From<tokio::task::JoinError>>(
    app: &Application,
    namespace: &str,
    client: &kube::Client,
    renderers: &Renderers,
) -> StepResult<HelmInputs, E> {
    let helm = app.spec.source.render.helm.clone().unwrap_or_default();
    helm_values::validate_release_name(&helm.release_name).map_err(|err| {
        StepFailure::new(err.reason(), format!("spec.source.render.helm.releaseName: {err}"))
    })?;
    let renderer = match &renderers.helm {
        Ok(renderer) => renderer.clone(),
        Err(why) => return Err(StepFailure::new(FailureReason::RenderFailure, why).into()),
    };
    let from = values_from(&helm.values_from, namespace, client).await?;
    let pulled = match &helm.chart {
        None => None,
        Some(chart) => Some(pull_chart(chart, namespace, client, renderers).await?),
    };
    Ok(HelmInputs { helm, renderer, from, pulled })
}

/// A digest of the `valuesFrom` data read: which source, which key, and every byte.
fn values_from_digest(from: &[ValuesFromData]) -> InputDigest {
    let kind = |kind: ValuesSourceKind| match kind {
        ValuesSourceKind::ConfigMap => "ConfigMap",
        ValuesSourceKind::Secret => "Secret",
    };
    let described: Vec<(String, &[u8])> = from
        .iter()
        .enumerate()
        .flat_map(|(index, source)| {
            let head = format!("{index}\n{}\n{}\n{}", kind(source.kind), source.name, source.key);
            let data = source
                .data
                .iter()
                .map(move |(key, value)| (format!("{index}\ndata\n{key}"), value.as_slice()));
            std::iter::once((head, &[][..])).chain(data)
        })
        .collect();
    cache::digest_entries(described.iter().map(|(name, value)| (name.as_str(), *value)))
}

/// `valuesFrom`, each read as the service account from the Application's namespace.
async fn values_from(
    sources: &[ValuesFrom],
    namespace: &str,
    client: &kube::Client,
) -> Result<Vec<ValuesFromData>, StepFailure> {
    let mut found = Vec::new();
    for (index, source) in sources.iter().enumerate() {
        let field = format!("spec.source.render.helm.valuesFrom[{index}]");
        let kind = match source.kind {
            ValuesSourceKind::ConfigMap => "ConfigMap",
            ValuesSourceKind::Secret => "Secret",
        };
        let data = match source.kind {
            ValuesSourceKind::ConfigMap => {
                let api = Api::<ConfigMap>::namespaced(client.clone(), namespace);
                read(&api, &source.name).await.map(|cm| {
                    let mut data: BTreeMap<String, Vec<u8>> = cm
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.into_bytes()))
                        .collect();
                    data.extend(
                        cm.binary_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)),
                    );
                    data
                })
            }
            ValuesSourceKind::Secret => {
                let api = Api::<Secret>::namespaced(client.clone(), namespace);
                read(&api, &source.name).await.map(|secret| {
                    secret.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect()
                })
            }
        };
        let data = data.map_err(|failure| StepFailure {
            message: format!("{field}: {kind} {namespace}/{}: {}", source.name, failure.message),
            ..failure
        })?;
        found.push(ValuesFromData {
            kind: source.kind,
            name: source.name.clone(),
            key: source.key.clone(),
            data,
        });
    }
    Ok(found)
}

/// One object read as the service account; the error says what to do, with its reason: a read
/// RBAC refuses is `Forbidden`, any other failure `RenderFailure`.
async fn read<K>(api: &Api<K>, name: &str) -> Result<K, StepFailure>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(name).await {
        Ok(Some(object)) => Ok(object),
        Ok(None) => Err(StepFailure::new(FailureReason::RenderFailure, "does not exist")),
        Err(kube::Error::Api(status)) if status.code == 403 => Err(StepFailure::new(
            FailureReason::Forbidden,
            "forbidden: the service account may not read it; grant it get",
        )),
        Err(err) => {
            Err(StepFailure::new(FailureReason::RenderFailure, format!("cannot be read: {err}")))
        }
    }
}

/// Pull `chart` (credentials from a labelled Secret read as the service account).
async fn pull_chart<E: From<tokio::task::JoinError>>(
    chart: &HelmChart,
    namespace: &str,
    client: &kube::Client,
    renderers: &Renderers,
) -> StepResult<PulledChart, E> {
    let failure = |message: String| StepFailure::new(FailureReason::RenderFailure, message);
    let puller = match &renderers.charts {
        Ok(puller) => Arc::clone(puller),
        Err(why) => return Err(failure(why.clone()).into()),
    };
    let credentials = match &chart.secret_ref {
        None => None,
        Some(secret_ref) => {
            let api = Api::<Secret>::namespaced(client.clone(), namespace);
            let secret = read(&api, &secret_ref.name).await.map_err(|failure| StepFailure {
                message: format!(
                    "spec.source.render.helm.chart.secretRef: Secret {namespace}/{}: {}",
                    secret_ref.name, failure.message
                ),
                ..failure
            })?;
            match credential_scope::chart_credentials(&secret, &chart.repository) {
                Ok(credentials) => Some(ChartCredentials::from(credentials)),
                Err(why) => {
                    let message = format!("spec.source.render.helm.chart.secretRef: {why}");
                    return Err(failure(message).into());
                }
            }
        }
    };
    let request = ChartPull {
        repository: chart.repository.clone(),
        name: chart.name.clone(),
        version: chart.version.clone(),
        credentials,
    };
    let pulled = tokio::task::spawn_blocking(move || puller.get().pull(&request)).await?;
    let pulled = pulled.map_err(|err| {
        StepFailure::new(err.reason(), format!("spec.source.render.helm.chart: {err}"))
    })?;
    Ok(pulled)
}

/// The age keys of `spec.decryption`, read as the service account from a labelled Secret.
async fn decryption_keys(
    app: &Application,
    namespace: &str,
    client: &kube::Client,
) -> Result<Option<DecryptionKeys>, StepFailure> {
    let Some(decryption) = &app.spec.decryption else {
        return Ok(None);
    };
    let name = &decryption.secret_ref.name;
    let failure = |message: String| StepFailure::new(FailureReason::DecryptionFailure, message);
    let secret = match Api::<Secret>::namespaced(client.clone(), namespace).get_opt(name).await {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            return Err(failure(format!(
                "spec.decryption.secretRef: Secret {namespace}/{name} does not exist"
            )));
        }
        Err(kube::Error::Api(status)) if status.code == 403 => {
            return Err(failure(format!(
                "spec.decryption.secretRef: the service account may not read Secret \
                 {namespace}/{name}; grant it get on that Secret"
            )));
        }
        Err(err) => {
            return Err(failure(format!("spec.decryption.secretRef: cannot read {name}: {err}")));
        }
    };
    let labelled = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(keys::DECRYPTION_KEY))
        .is_some_and(|value| value == keys::TRUE);
    if !labelled {
        return Err(failure(format!(
            "spec.decryption.secretRef: Secret {namespace}/{name} is not labelled {}: \"{}\"; \
             label it to allow its use as SOPS keys",
            keys::DECRYPTION_KEY,
            keys::TRUE
        )));
    }
    let entries: BTreeMap<String, Vec<u8>> =
        secret.data.unwrap_or_default().into_iter().map(|(key, value)| (key, value.0)).collect();
    let digest = cache::digest_entries(entries.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
    AgeKeys::from_secret_entries(&entries)
        .map(|keys| Some(DecryptionKeys { keys, digest }))
        .map_err(|err| failure(format!("spec.decryption.secretRef {name}: {err}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kuvryn_sync_render::kustomize::KustomizeProgram;

    fn renderers() -> Renderers {
        Renderers {
            kustomize: Kustomize::new(KustomizeProgram::Kubectl("kubectl".into())),
            helm: Err("no Helm engine in this test".into()),
            charts: Err("no chart pulls in this test".into()),
            cache: Arc::new(RenderCache::new(4)),
            metrics: ControllerMetrics::default(),
        }
    }

    fn app(spec: serde_json::Value) -> Application {
        let mut full = serde_json::json!({
            "source": {"repositoryRef": {"name": "apps"}, "path": "apps/a",
                "render": {"type": "kustomize"}},
            "destination": {"namespace": "team-a"},
        });
        if let (Some(full), Some(spec)) = (full.as_object_mut(), spec.as_object()) {
            for (key, value) in spec {
                full.insert(key.clone(), value.clone());
            }
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "a", "namespace": "team-a"}, "spec": full,
        }))
        .expect("a valid Application")
    }

    /// A cache hit is counted as one, and its secret values are masked in this reconcile's
    /// messages exactly as a fresh render's would be; a fresh render is kept under its key.
    #[test]
    fn a_hit_registers_its_secrets_and_a_fresh_render_is_kept() {
        let renderers = renderers();
        let secret = "decrypted-canary-7f3a9b";
        let fresh = SourceRender { objects: Vec::new(), secrets: vec![secret.to_owned()] };
        let key = key_parts(&app(serde_json::json!({})), &renderers, None, None, None).key();
        let mut redactor = Redactor::new();
        let rendered = Found::Rendered(Ok(fresh));
        settle(rendered, Some(key), RenderType::Kustomize, None, &renderers, &mut redactor)
            .expect("rendered");
        let hit = renderers.cache.get(&key).expect("the fresh render is kept");
        let mut next_reconcile = Redactor::new();
        settle(
            Found::Hit(hit),
            Some(key),
            RenderType::Kustomize,
            None,
            &renderers,
            &mut next_reconcile,
        )
        .expect("served");
        let shown = next_reconcile.redact(&format!("apply failed: {secret}"));
        assert!(!shown.contains(secret), "{shown}");
    }

    /// The same path read by a tenant with other keys, another render config or another
    /// destination must never be served the first one's output.
    #[test]
    fn the_key_changes_with_keys_render_config_destination_and_engine() {
        let renderers = renderers();
        let base = key_parts(&app(serde_json::json!({})), &renderers, None, None, None).key();
        let same = key_parts(&app(serde_json::json!({})), &renderers, None, None, None).key();
        assert_eq!(base, same);
        let keys_a = cache::digest_entries([("age.agekey", &b"AGE-SECRET-KEY-A"[..])]);
        let keys_b = cache::digest_entries([("age.agekey", &b"AGE-SECRET-KEY-B"[..])]);
        let with_a = key_parts(&app(serde_json::json!({})), &renderers, Some(keys_a), None, None);
        let with_b = key_parts(&app(serde_json::json!({})), &renderers, Some(keys_b), None, None);
        let render = serde_json::json!({"source": {"repositoryRef": {"name": "apps"},
            "path": "apps/a", "render": {"type": "yaml"}}});
        let destination = serde_json::json!({"destination": {"namespace": "team-b"}});
        let mut remote = renderers.clone();
        remote.kustomize.allow_remote_bases = true;
        let others = [
            ("other decryption keys", with_a.key(), with_b.key()),
            ("decryption keys at all", base, with_a.key()),
            (
                "another render config",
                base,
                key_parts(&app(render), &renderers, None, None, None).key(),
            ),
            (
                "another destination",
                base,
                key_parts(&app(destination), &renderers, None, None, None).key(),
            ),
            (
                "remote bases allowed",
                base,
                key_parts(&app(serde_json::json!({})), &remote, None, None, None).key(),
            ),
        ];
        for (what, one, other) in others {
            assert_ne!(one, other, "{what} must change the key");
        }
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("utf-8").trim().to_owned()
    }

    /// Commit `files` in `work`, push to the cache's bare repository and lay out its checkout
    /// directory `KEY/trees/COMMIT` as the Git cache does; returns that directory.
    fn commit(root: &Path, work: &Path, files: &[(&str, &str)]) -> PathBuf {
        for (path, content) in files {
            let file = work.join(path);
            std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
            std::fs::write(file, content).expect("write");
        }
        git(work, &["add", "--all"]);
        git(work, &["commit", "--quiet", "-m", "change"]);
        let repo = root.join("KEY/repo");
        git(work, &["push", "--quiet", repo.to_str().expect("utf-8"), "HEAD:refs/heads/main"]);
        let checkout = root.join("KEY/trees").join(git(work, &["rev-parse", "HEAD"]));
        std::fs::create_dir_all(&checkout).expect("checkout dir");
        checkout
    }

    /// The key of an unchanged checkout is computed without opening the repository (it still
    /// comes out the same with the repository gone), and a real change still changes it: a new
    /// commit that changes the Application's folder gives a new key, one that leaves it alone
    /// keeps the key.
    #[test]
    fn an_unchanged_checkout_is_keyed_without_the_repository_and_a_change_still_invalidates() {
        let root = tempfile::tempdir().expect("tempdir");
        let work = root.path().join("work");
        std::fs::create_dir_all(&work).expect("work");
        git(&work, &["init", "--quiet", "--initial-branch=main"]);
        git(root.path(), &["init", "--quiet", "--bare", "KEY/repo"]);
        let first = commit(
            root.path(),
            &work,
            &[("apps/a/cm.yaml", "a: 1\n"), ("apps/b/cm.yaml", "b: 1\n")],
        );
        let renderers = renderers();
        let shape = |path| SourceShape {
            render_type: RenderType::Yaml,
            path,
            values_files: &[],
            chart_pulled: false,
        };
        let parts = || key_parts(&app(serde_json::json!({})), &renderers, None, None, None);
        let key =
            |checkout: &Path, path| render_key(checkout, &shape(path), parts(), &renderers.cache);
        let a1 = key(&first, "apps/a").expect("a Git checkout is cacheable");
        let b1 = key(&first, "apps/b").expect("cacheable");
        assert_ne!(a1, b1);

        // Unchanged inputs: the memo answers; the repository is not opened (it is gone).
        let hidden = root.path().join("KEY/repo-hidden");
        std::fs::rename(root.path().join("KEY/repo"), &hidden).expect("hide the repository");
        assert_eq!(key(&first, "apps/a"), Some(a1), "the same checkout, the same key");
        std::fs::rename(&hidden, root.path().join("KEY/repo")).expect("restore");

        // A real change to apps/a: a new key for a, the same for b.
        let second = commit(root.path(), &work, &[("apps/a/cm.yaml", "a: 2\n")]);
        let a2 = key(&second, "apps/a").expect("cacheable");
        assert_ne!(a2, a1, "a changed folder must change the key");
        assert_eq!(key(&second, "apps/b"), Some(b1), "an untouched folder keeps its key");
        assert_eq!(key(&first, "apps/a"), Some(a1), "the older commit is worked out again");
    }
}
