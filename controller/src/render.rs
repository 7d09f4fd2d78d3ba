//! The render step's I/O: read what a render needs as the Application's service account (the
//! `spec.decryption` key Secret, Helm `valuesFrom` and chart credentials), pull a chart, run the
//! renderer on a blocking thread, and mask every value it decrypted or read from a Secret. The
//! renders themselves are `kuvryn_sync_render::{source, helm}`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kuvryn_sync_api::{
    Application, FailureReason, HelmChart, RenderType, ValuesFrom, ValuesSourceKind, keys,
};
use kuvryn_sync_core::desired::Rendered;
use kuvryn_sync_core::helm_values::{self, ValuesFromData, ValuesInput};
use kuvryn_sync_core::redact::Redactor;
use kuvryn_sync_helm::HelmRenderer;
use kuvryn_sync_render::helm::{self, ChartSource};
use kuvryn_sync_render::kustomize::Kustomize;
use kuvryn_sync_render::sops::AgeKeys;
use kuvryn_sync_render::source::{self, RenderFailure, RenderRequest, SourceRender};
use kuvryn_sync_render::yaml::Limits;
use kuvryn_sync_source::chart::{ChartCredentials, ChartPull, ChartPuller, PulledChart};

/// The engines and their limits, from the controller's flags.
#[derive(Clone, Debug)]
pub struct Renderers {
    pub kustomize: Kustomize,
    /// The Helm engine, or why it is unavailable (said to Applications that need it).
    pub helm: Result<HelmRenderer, String>,
    /// Chart pulls, cached by digest.
    pub charts: Result<Arc<OffRuntime<ChartPuller>>, String>,
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

/// A failure for status: the reason and a message safe to show.
pub type Failure = (FailureReason, String);

/// What a render produced.
#[derive(Debug, Default)]
pub struct Output {
    pub objects: Vec<Rendered>,
    /// `sha256:<hex>` of a pulled chart archive.
    pub chart_digest: Option<String>,
}

/// Render `app`'s source at the checkout `root`, as its service account's `client`.
pub async fn render(
    app: &Application,
    namespace: &str,
    client: &kube::Client,
    root: PathBuf,
    renderers: &Renderers,
    redactor: &mut Redactor,
) -> Result<Result<Output, Failure>, tokio::task::JoinError> {
    let keys = match decryption_keys(app, namespace, client).await {
        Ok(keys) => keys,
        Err(failure) => return Ok(Err(failure)),
    };
    if app.spec.source.render.render_type == RenderType::Helm {
        return render_helm(app, namespace, client, root, keys, renderers, redactor).await;
    }
    let path = app.spec.source.path.clone();
    let render_type = app.spec.source.render.render_type;
    let kustomize = renderers.kustomize.clone();
    let rendered = tokio::task::spawn_blocking(move || {
        let request = RenderRequest {
            root: &root,
            path: &path,
            render_type,
            keys: keys.as_ref(),
            kustomize: &kustomize,
            limits: Limits::default(),
        };
        source::render(&request)
    })
    .await?;
    Ok(match rendered {
        Ok(rendered) => {
            for secret in &rendered.secrets {
                redactor.add_secret(secret);
            }
            Ok(Output { objects: rendered.objects, chart_digest: None })
        }
        Err(failure) => Err((failure.reason, redactor.redact(&failure.message))),
    })
}

/// A Helm render: the release name checked, `valuesFrom` read as the service account, the chart
/// pulled (credentials from a labelled Secret) or taken from the checkout, values files read
/// from the (decrypted) private copy, then the Helm engine.
async fn render_helm(
    app: &Application,
    namespace: &str,
    client: &kube::Client,
    root: PathBuf,
    keys: Option<AgeKeys>,
    renderers: &Renderers,
    redactor: &mut Redactor,
) -> Result<Result<Output, Failure>, tokio::task::JoinError> {
    let helm = app.spec.source.render.helm.clone().unwrap_or_default();
    if let Err(err) = helm_values::validate_release_name(&helm.release_name) {
        return Ok(Err((err.reason(), format!("spec.source.render.helm.releaseName: {err}"))));
    }
    let renderer = match &renderers.helm {
        Ok(renderer) => renderer.clone(),
        Err(why) => return Ok(Err((FailureReason::RenderFailure, why.clone()))),
    };
    let from = match values_from(&helm.values_from, namespace, client).await {
        Ok(from) => from,
        Err(failure) => return Ok(Err(failure)),
    };
    let pulled = match &helm.chart {
        None => None,
        Some(chart) => match pull_chart(chart, namespace, client, renderers).await? {
            Ok(pulled) => Some(pulled),
            Err(failure) => return Ok(Err(failure)),
        },
    };
    let path = app.spec.source.path.clone();
    let release = helm.release_name.clone();
    let destination = app.spec.destination.namespace.clone();
    let kustomize = renderers.kustomize.clone();
    let chart_digest = pulled.as_ref().map(|p| p.digest.clone());
    let rendered = tokio::task::spawn_blocking(move || -> Result<SourceRender, RenderFailure> {
        let request = RenderRequest {
            root: &root,
            path: &path,
            render_type: RenderType::Helm,
            keys: keys.as_ref(),
            kustomize: &kustomize,
            limits: Limits::default(),
        };
        let mut out = SourceRender::default();
        let workspace = source::private_copy(&request, &mut out)?;
        let failed = |reason: FailureReason, message: String| RenderFailure { reason, message };
        let files =
            helm::read_values_files(workspace.root(), &helm.values_files, helm::Limits::default())
                .map_err(|e| failed(e.reason(), e.to_string()))?;
        let input = ValuesInput { files, from, inline: helm.values.clone() };
        let values =
            helm_values::assemble_values(&input).map_err(|e| failed(e.reason(), e.to_string()))?;
        out.secrets.extend(values.secret_strings.iter().cloned());
        let chart = match &pulled {
            Some(pulled) => ChartSource::Archive(&pulled.path),
            None => ChartSource::Directory { repository_root: workspace.root(), path: &path },
        };
        out.objects = helm::render(
            &renderer,
            chart,
            &values,
            &release,
            &destination,
            helm::Limits::default(),
        )
        .map_err(|e| failed(e.reason(), e.to_string()))?;
        source::finish(&mut out, request.keys)?;
        Ok(out)
    })
    .await?;
    Ok(match rendered {
        Ok(rendered) => {
            for secret in &rendered.secrets {
                redactor.add_secret(secret);
            }
            Ok(Output { objects: rendered.objects, chart_digest })
        }
        Err(failure) => Err((failure.reason, redactor.redact(&failure.message))),
    })
}

/// `valuesFrom`, each read as the service account from the Application's namespace.
async fn values_from(
    sources: &[ValuesFrom],
    namespace: &str,
    client: &kube::Client,
) -> Result<Vec<ValuesFromData>, Failure> {
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
        let data = data.map_err(|why| {
            (
                FailureReason::RenderFailure,
                format!("{field}: {kind} {namespace}/{}: {why}", source.name),
            )
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

/// One object read as the service account; the error says what to do.
async fn read<K>(api: &Api<K>, name: &str) -> Result<K, String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(name).await {
        Ok(Some(object)) => Ok(object),
        Ok(None) => Err("does not exist".to_owned()),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            Err("the service account may not read it; grant it get".to_owned())
        }
        Err(err) => Err(format!("cannot be read: {err}")),
    }
}

/// Pull `chart` (credentials from a labelled Secret read as the service account).
async fn pull_chart(
    chart: &HelmChart,
    namespace: &str,
    client: &kube::Client,
    renderers: &Renderers,
) -> Result<Result<PulledChart, Failure>, tokio::task::JoinError> {
    let failure = |message: String| (FailureReason::RenderFailure, message);
    let puller = match &renderers.charts {
        Ok(puller) => Arc::clone(puller),
        Err(why) => return Ok(Err(failure(why.clone()))),
    };
    let credentials = match &chart.secret_ref {
        None => None,
        Some(secret_ref) => {
            let api = Api::<Secret>::namespaced(client.clone(), namespace);
            let secret = match read(&api, &secret_ref.name).await {
                Ok(secret) => secret,
                Err(why) => {
                    return Ok(Err(failure(format!(
                        "spec.source.render.helm.chart.secretRef: Secret {namespace}/{}: {why}",
                        secret_ref.name
                    ))));
                }
            };
            let labels = secret.metadata.labels.clone().unwrap_or_default();
            let data: BTreeMap<String, Vec<u8>> =
                secret.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
            match helm_values::registry_credentials(&secret_ref.name, &labels, &data) {
                Ok(credentials) => Some(ChartCredentials::from(credentials)),
                Err(err) => {
                    return Ok(Err(failure(format!(
                        "spec.source.render.helm.chart.secretRef: {err}"
                    ))));
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
    Ok(pulled.map_err(|err| (err.reason(), format!("spec.source.render.helm.chart: {err}"))))
}

/// The age keys of `spec.decryption`, read as the service account from a labelled Secret.
async fn decryption_keys(
    app: &Application,
    namespace: &str,
    client: &kube::Client,
) -> Result<Option<AgeKeys>, Failure> {
    let Some(decryption) = &app.spec.decryption else {
        return Ok(None);
    };
    let name = &decryption.secret_ref.name;
    let failure = |message: String| (FailureReason::DecryptionFailure, message);
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
    AgeKeys::from_secret_entries(&entries)
        .map(Some)
        .map_err(|err| failure(format!("spec.decryption.secretRef {name}: {err}")))
}
