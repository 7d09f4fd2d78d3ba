//! Render one Application: the objects its `spec.source` declares at a checked-out tree, whatever
//! its `render.type`, with SOPS files decrypted when keys are given. The controller and the CLI
//! (`ksync render --local`, `ksync diff`) both call [`render_application`], so a chart, an overlay
//! or a folder renders the same way in both. Blocking: run it on a blocking thread.
//!
//! What needs the cluster or the network stays with the caller and comes in ready: the age keys
//! of `spec.decryption`, the pulled chart archive of `helm.chart`, and the `valuesFrom` data,
//! which the render asks a [`ValuesReader`] for (the controller reads them as the Application's
//! service account; a caller without a cluster refuses them with its own explanation). The
//! engines arrive configured with their sandbox (network isolation, rlimits) and time limits.
//!
//! `yaml` and `kustomize` are [`crate::source::render`]. `helm` takes these steps:
//! 1. `releaseName` checked (`ValidationFailure`), the engine present, `valuesFrom` read in order.
//! 2. A sealed private copy of what the render reads (the chart directory unless pulled, and the
//!    values files), SOPS files decrypted in it ([`crate::source::private_copy`]).
//! 3. Values files read from the copy, values assembled (`core::helm_values`: files, then
//!    `valuesFrom`, then inline `values`), the chart rendered ([`crate::helm::render`]).
//! 4. Secret data decrypted or SOPS left in the output refused ([`crate::source::finish`]).
//!
//! Every value read from a Secret or decrypted is returned in [`SourceRender::secrets`] so the
//! caller masks it everywhere.

use std::path::Path;

use kuvryn_sync_api::{FailureReason, Render, RenderType, ValuesFrom, ValuesSourceKind};
use kuvryn_sync_core::helm_values::{self, ValuesFromData, ValuesInput};
use kuvryn_sync_helm::HelmRenderer;

use crate::helm::{self, ChartSource};
use crate::kustomize::Kustomize;
use crate::sops::AgeKeys;
use crate::source::{self, RenderFailure, RenderRequest, SourceRender};
use crate::yaml::Limits;

/// Everything one Application's render needs besides its `valuesFrom` data.
#[derive(Clone, Copy, Debug)]
pub struct ApplicationRender<'a> {
    /// The checked-out repository.
    pub root: &'a Path,
    /// `spec.source.path`, relative to `root`.
    pub path: &'a str,
    /// `spec.source.render`.
    pub render: &'a Render,
    /// `spec.destination.namespace`: Helm's `.Release.Namespace`.
    pub destination_namespace: &'a str,
    /// The keys of `spec.decryption`, when set.
    pub keys: Option<&'a AgeKeys>,
    /// The kustomize engine, with its sandbox and limits.
    pub kustomize: &'a Kustomize,
    /// The Helm engine, with its sandbox; `None` where it is not available.
    pub helm: Option<&'a HelmRenderer>,
    /// The archive of `spec.source.render.helm.chart`, pulled by the caller.
    pub pulled_chart: Option<&'a Path>,
    /// Bounds of the private copy and of the YAML read.
    pub limits: Limits,
    /// Bounds of the chart copy or unpack and of the values files.
    pub chart_limits: helm::Limits,
}

/// Where `valuesFrom` data comes from.
pub trait ValuesReader {
    /// The data of `spec.source.render.helm.valuesFrom[index]` (`source`), or why it cannot be
    /// read: the message names the field and the object, and says what to do.
    fn read(&self, index: usize, source: &ValuesFrom) -> Result<ValuesFromData, RenderFailure>;
}

/// A closure reads values too.
impl<F> ValuesReader for F
where
    F: Fn(usize, &ValuesFrom) -> Result<ValuesFromData, RenderFailure>,
{
    fn read(&self, index: usize, source: &ValuesFrom) -> Result<ValuesFromData, RenderFailure> {
        self(index, source)
    }
}

/// Data read beforehand (the controller reads it as the service account before the render, for
/// the render key), one entry per `valuesFrom` entry in order.
impl ValuesReader for Vec<ValuesFromData> {
    fn read(&self, index: usize, source: &ValuesFrom) -> Result<ValuesFromData, RenderFailure> {
        self.get(index)
            .filter(|data| data.kind == source.kind && data.name == source.name)
            .cloned()
            .ok_or_else(|| {
                values_from_failure(index, source, "was not read before the render; render again")
            })
    }
}

/// A `RenderFailure` for `valuesFrom[index]`: the field, the object, then `why`.
pub fn values_from_failure(index: usize, source: &ValuesFrom, why: &str) -> RenderFailure {
    let kind = match source.kind {
        ValuesSourceKind::ConfigMap => "ConfigMap",
        ValuesSourceKind::Secret => "Secret",
    };
    RenderFailure {
        reason: FailureReason::RenderFailure,
        message: format!(
            "spec.source.render.helm.valuesFrom[{index}]: {kind} {}: {why}",
            source.name
        ),
    }
}

/// Render the Application described by `request`; `values` is asked for each `valuesFrom` entry
/// of a Helm render (see the module documentation).
pub fn render_application(
    request: &ApplicationRender<'_>,
    values: &dyn ValuesReader,
) -> Result<SourceRender, RenderFailure> {
    match request.render.render_type {
        RenderType::Helm => render_helm(request, values),
        render_type => source::render(&source_request(request, render_type)),
    }
}

/// The [`RenderRequest`] of the shared steps (copy, decryption, finish).
fn source_request<'a>(
    request: &ApplicationRender<'a>,
    render_type: RenderType,
) -> RenderRequest<'a> {
    RenderRequest {
        root: request.root,
        path: request.path,
        render_type,
        keys: request.keys,
        kustomize: request.kustomize,
        limits: request.limits,
    }
}

fn failed(reason: FailureReason, message: String) -> RenderFailure {
    RenderFailure { reason, message }
}

/// `render.type: helm` (steps 1 to 4 of the module documentation).
fn render_helm(
    request: &ApplicationRender<'_>,
    values: &dyn ValuesReader,
) -> Result<SourceRender, RenderFailure> {
    let spec = request.render.helm.clone().unwrap_or_default();
    helm_values::validate_release_name(&spec.release_name).map_err(|err| {
        failed(err.reason(), format!("spec.source.render.helm.releaseName: {err}"))
    })?;
    let renderer = request.helm.ok_or_else(|| {
        failed(
            FailureReason::RenderFailure,
            "render.type helm needs the Helm engine, which is not available here".to_owned(),
        )
    })?;
    let chart = pulled_chart(&spec, request.pulled_chart)?;
    let from = spec
        .values_from
        .iter()
        .enumerate()
        .map(|(index, source)| values.read(index, source))
        .collect::<Result<Vec<_>, _>>()?;
    // What the render reads from the repository: the chart directory (unless pulled) and the
    // values files.
    let reads: Vec<String> = chart
        .is_none()
        .then(|| request.path.to_owned())
        .into_iter()
        .chain(spec.values_files.iter().cloned())
        .collect();
    let source_request = source_request(request, RenderType::Helm);
    let mut out = SourceRender::default();
    let workspace = source::private_copy(&source_request, &mut out, Some(&reads))?;
    let files = helm::read_values_files(workspace.root(), &spec.values_files, request.chart_limits)
        .map_err(|e| failed(e.reason(), e.to_string()))?;
    let input = ValuesInput { files, from, inline: spec.values.clone() };
    let assembled =
        helm_values::assemble_values(&input).map_err(|e| failed(e.reason(), e.to_string()))?;
    let chart = match chart {
        Some(archive) => ChartSource::Archive(archive),
        None => ChartSource::Directory { repository_root: workspace.root(), path: request.path },
    };
    out.objects = helm::render(
        renderer,
        chart,
        &assembled,
        &spec.release_name,
        request.destination_namespace,
        request.chart_limits,
    )
    .map_err(|e| failed(e.reason(), e.to_string()))?;
    out.secrets.extend(assembled.secret_strings);
    source::finish(&mut out, request.keys)?;
    Ok(out)
}

/// The pulled archive when `helm.chart` is set (refused when the caller pulled none), else `None`:
/// the chart is the directory at `spec.source.path`.
fn pulled_chart<'a>(
    spec: &kuvryn_sync_api::HelmRender,
    pulled: Option<&'a Path>,
) -> Result<Option<&'a Path>, RenderFailure> {
    match (&spec.chart, pulled) {
        (Some(_), Some(archive)) => Ok(Some(archive)),
        (Some(chart), None) => Err(failed(
            FailureReason::RenderFailure,
            format!(
                "spec.source.render.helm.chart: chart {} {} from {} was not pulled; this render \
                 reads charts from the repository only",
                chart.name, chart.version, chart.repository
            ),
        )),
        (None, _) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kustomize::KustomizeProgram;
    use kuvryn_sync_api::HelmRender;

    fn kustomize() -> Kustomize {
        Kustomize::new(KustomizeProgram::Kubectl("kubectl".into()))
    }

    fn request<'a>(
        root: &'a Path,
        render: &'a Render,
        kustomize: &'a Kustomize,
    ) -> ApplicationRender<'a> {
        ApplicationRender {
            root,
            path: "app",
            render,
            destination_namespace: "team-a",
            keys: None,
            kustomize,
            helm: None,
            pulled_chart: None,
            limits: Limits::default(),
            chart_limits: helm::Limits::default(),
        }
    }

    fn no_values(index: usize, source: &ValuesFrom) -> Result<ValuesFromData, RenderFailure> {
        Err(values_from_failure(index, source, "not read in this test"))
    }

    fn helm_render(helm: HelmRender) -> Render {
        Render { render_type: RenderType::Helm, helm: Some(helm) }
    }

    #[test]
    fn a_yaml_folder_renders_through_the_source_steps() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("app")).expect("mkdir");
        let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n";
        std::fs::write(dir.path().join("app/cm.yaml"), cm).expect("write");
        let render = Render { render_type: RenderType::Yaml, helm: None };
        let kustomize = kustomize();
        let out = render_application(&request(dir.path(), &render, &kustomize), &no_values)
            .expect("rendered");
        assert_eq!(out.objects.len(), 1);
        assert_eq!(out.objects[0].object["metadata"]["name"], "settings");
    }

    /// Helm refusals that come before any engine runs: each names its field and its reason.
    #[test]
    fn helm_refusals_name_the_field_and_reason() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kustomize = kustomize();
        // Files where the engine's parts are expected: it is only started by a render, and every
        // case here is refused before that.
        let (helper, library) = (dir.path().join("helper"), dir.path().join("libhelm_c.so"));
        std::fs::write(&helper, "").expect("write");
        std::fs::write(&library, "").expect("write");
        let engine = HelmRenderer::new(helper, library, Default::default()).expect("engine");
        let chart = kuvryn_sync_api::HelmChart {
            repository: "oci://registry.example/charts".into(),
            name: "web".into(),
            version: "1.0.0".into(),
            secret_ref: None,
        };
        let cases: Vec<(&str, HelmRender, bool, FailureReason, &str)> = vec![
            (
                "bad release name",
                HelmRender { release_name: "Web_Release".into(), ..Default::default() },
                true,
                FailureReason::ValidationFailure,
                "spec.source.render.helm.releaseName",
            ),
            (
                "no engine",
                HelmRender::default(),
                false,
                FailureReason::RenderFailure,
                "needs the Helm engine",
            ),
            (
                "chart not pulled",
                HelmRender { chart: Some(chart), ..Default::default() },
                true,
                FailureReason::RenderFailure,
                "spec.source.render.helm.chart: chart web 1.0.0",
            ),
            (
                "valuesFrom refused by the reader",
                HelmRender {
                    values_from: vec![ValuesFrom {
                        kind: ValuesSourceKind::Secret,
                        name: "team-values".into(),
                        key: "values.yaml".into(),
                    }],
                    ..Default::default()
                },
                true,
                FailureReason::RenderFailure,
                "spec.source.render.helm.valuesFrom[0]: Secret team-values: not read in this test",
            ),
        ];
        for (what, helm, with_engine, reason, message) in cases {
            let render = helm_render(helm);
            let mut request = request(dir.path(), &render, &kustomize);
            if with_engine {
                request.helm = Some(&engine);
            }
            let failure = render_application(&request, &no_values).expect_err(what);
            assert_eq!(failure.reason, reason, "{what}: {}", failure.message);
            assert!(failure.message.contains(message), "{what}: {}", failure.message);
        }
    }

    #[test]
    fn data_read_beforehand_is_served_by_index_and_checked_by_name() {
        let read = vec![ValuesFromData {
            kind: ValuesSourceKind::ConfigMap,
            name: "team".into(),
            key: "values.yaml".into(),
            data: [("values.yaml".to_owned(), b"a: 1\n".to_vec())].into(),
        }];
        let source = |kind, name: &str| ValuesFrom { kind, name: name.into(), key: "k".into() };
        let reader: &dyn ValuesReader = &read;
        let found = reader.read(0, &source(ValuesSourceKind::ConfigMap, "team")).expect("read");
        assert_eq!(found.name, "team");
        for (index, wrong) in [
            (0, source(ValuesSourceKind::Secret, "team")),
            (0, source(ValuesSourceKind::ConfigMap, "other")),
            (1, source(ValuesSourceKind::ConfigMap, "team")),
        ] {
            let failure = reader.read(index, &wrong).expect_err("not what was read");
            assert!(failure.message.contains("was not read before the render"), "{failure:?}");
        }
    }
}
