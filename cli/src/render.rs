//! `ksync render --local PATH`: render and validate a folder offline with the library functions
//! the controller uses (`kuvryn_sync_render::application::render_application` for every render
//! type, then `kuvryn_sync_core::desired::normalise`), and print the objects as YAML or every
//! validation error (exit 1). The folder stands for the repository and `spec.source.path` is its
//! root, so `--values` files are relative to it as `valuesFiles` are to the repository.
//!
//! Without a cluster there is no discovery, so scopes are a fixed rule: the well-known
//! cluster-scoped built-in kinds ([`CLUSTER_SCOPED`]) and kinds whose CustomResourceDefinition is
//! rendered alongside take their real scope; every other kind is treated as namespaced. Secret
//! `data` and `stringData` values are printed as `***`: secret values never leave the CLI.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kuvryn_sync_api::{HelmRender, Render, RenderType, ValuesFrom};
use kuvryn_sync_core::desired::{self, GroupKind, Rendered, Scope, Target};
use kuvryn_sync_core::redact::{MASK, redact_shapes};
use kuvryn_sync_helm::HelmRenderer;
use kuvryn_sync_render::application::{
    ApplicationRender, ValuesReader, render_application, values_from_failure,
};
use kuvryn_sync_render::kustomize::{Kustomize, KustomizeProgram};
use serde_json::Value;

use crate::Outcome;
use crate::output;

/// Built-in kinds that are cluster-scoped, as (API group, kind).
pub const CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "ComponentStatus"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("networking.k8s.io", "IngressClass"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    ("sync.kuvryn.io", "HealthCheck"),
];

/// `ksync render` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct RenderArgs {
    /// Folder to render (a YAML folder, a kustomization or a Helm chart).
    #[arg(long = "local", value_name = "PATH")]
    pub local: PathBuf,
    /// How the folder is rendered.
    #[arg(long = "type", value_enum, default_value = "yaml")]
    pub render_type: LocalRenderType,
    /// Values file for helm, relative to PATH as `valuesFiles` are to the repository; repeat for
    /// several, later ones win.
    #[arg(long = "values", value_name = "FILE")]
    pub values: Vec<String>,
    /// Application name the objects are labelled with (default: the folder's name).
    #[arg(long = "app", value_name = "NAME")]
    pub app: Option<String>,
    /// Helm release name.
    #[arg(long, default_value = kuvryn_sync_api::DEFAULT_RELEASE_NAME)]
    pub release_name: String,
    /// `libhelm_c.so` for helm (default: $KSYNC_LIBHELM).
    #[arg(long, value_name = "FILE")]
    pub helm_library: Option<PathBuf>,
}

/// `--type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LocalRenderType {
    /// Plain YAML and JSON files.
    Yaml,
    /// `kustomize build` (kustomize, else `kubectl kustomize`).
    Kustomize,
    /// A Helm chart.
    Helm,
}

/// The scope rule used offline (see the module documentation).
pub fn offline_scope(kind: &GroupKind) -> Option<Scope> {
    let cluster = CLUSTER_SCOPED.iter().any(|(g, k)| *g == kind.group && *k == kind.kind);
    Some(if cluster { Scope::Cluster } else { Scope::Namespaced })
}

/// `object` with every Secret `data`/`stringData` value replaced by the mask.
pub fn mask_secret_values(mut object: Value) -> Value {
    let is_secret = object["kind"] == "Secret" && object["apiVersion"] == "v1";
    if is_secret {
        for field in ["data", "stringData"] {
            if let Some(map) = object.get_mut(field).and_then(Value::as_object_mut) {
                map.values_mut().for_each(|v| *v = Value::String(MASK.to_owned()));
            }
        }
    }
    object
}

/// Run `ksync render`; `namespace` is the global `-n` (default `default`).
pub fn run(args: &RenderArgs, namespace: Option<&str>) -> Result<Outcome> {
    let root = std::fs::canonicalize(&args.local)
        .with_context(|| format!("--local {}: no such folder", args.local.display()))?;
    let namespace = namespace.unwrap_or("default");
    let app = match &args.app {
        Some(app) => app.clone(),
        None => root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
    };
    let render = render_spec(args);
    let local = LocalSource {
        root: &root,
        path: "",
        render: &render,
        destination_namespace: namespace,
        helm_library: args.helm_library.as_ref(),
    };
    // `ksync render` has no flag that adds valuesFrom, so the reader is never asked.
    let rendered = render_local(&local, &|index: usize, source: &ValuesFrom| {
        Err(values_from_failure(index, source, "`ksync render --local` reads no cluster"))
    })?;
    let target = Target {
        application: &app,
        application_namespace: namespace,
        destination_namespace: namespace,
    };
    match desired::normalise(&rendered, offline_scope, target) {
        Ok(state) => {
            let mut out = String::new();
            for object in state.objects {
                out.push_str("---\n");
                out.push_str(&kuvryn_sync_core::yaml::to_string(&mask_secret_values(
                    object.object,
                ))?);
            }
            output::print(&out)?;
            Ok(Outcome::Done)
        }
        Err(refusal) => {
            eprintln!("desired state refused ({} errors):", refusal.errors.len());
            for error in &refusal.errors {
                eprintln!("  - {}", redact_shapes(&error.to_string()));
            }
            Ok(Outcome::NotMet)
        }
    }
}

/// A tree on disk to render as an Application's `spec.source` would be.
#[derive(Debug)]
pub struct LocalSource<'a> {
    /// The repository root (or the folder standing in for it).
    pub root: &'a Path,
    /// `spec.source.path`, relative to `root`.
    pub path: &'a str,
    /// `spec.source.render`.
    pub render: &'a Render,
    /// `spec.destination.namespace` (Helm's `.Release.Namespace`).
    pub destination_namespace: &'a str,
    /// `--helm-library`, else $KSYNC_LIBHELM; read only for `type: helm`.
    pub helm_library: Option<&'a PathBuf>,
}

/// Render `local` with the controller's function (`render_application`); `values_from` answers
/// `valuesFrom` entries. Nothing is decrypted (no keys), so SOPS content is refused as the
/// controller refuses it without `spec.decryption`.
pub fn render_local(
    local: &LocalSource<'_>,
    values_from: &dyn ValuesReader,
) -> Result<Vec<Rendered>> {
    let kustomize = Kustomize::new(KustomizeProgram::detect(None));
    let helm = match local.render.render_type {
        RenderType::Helm => Some(helm_engine(local.helm_library)?),
        RenderType::Yaml | RenderType::Kustomize => None,
    };
    let request = ApplicationRender {
        root: local.root,
        path: local.path,
        render: local.render,
        destination_namespace: local.destination_namespace,
        keys: None,
        kustomize: &kustomize,
        helm: helm.as_ref(),
        pulled_chart: None,
        limits: Default::default(),
        chart_limits: Default::default(),
    };
    let rendered = render_application(&request, values_from)
        .map_err(|f| anyhow::anyhow!("{}: {}", f.reason, redact_shapes(&f.message)))?;
    Ok(rendered.objects)
}

/// The Helm engine: the `ksync-helm-render` helper beside this binary, loading `library`.
fn helm_engine(library: Option<&PathBuf>) -> Result<HelmRenderer> {
    let library = library
        .cloned()
        .or_else(|| std::env::var_os(kuvryn_sync_helm::LIBHELM_ENV).map(PathBuf::from))
        .context(
            "rendering a Helm chart needs the Helm engine: pass --helm-library FILE \
             (libhelm_c.so from the helm-python-sdk wheel) or set KSYNC_LIBHELM",
        )?;
    let helper = std::env::current_exe()?.with_file_name(kuvryn_sync_helm::HELPER_BINARY);
    HelmRenderer::new(helper, library, Default::default())
        .map_err(|e| anyhow::anyhow!("cannot start the Helm engine: {e}"))
}

/// `--type` and the Helm flags as `spec.source.render`.
fn render_spec(args: &RenderArgs) -> Render {
    match args.render_type {
        LocalRenderType::Yaml => Render { render_type: RenderType::Yaml, helm: None },
        LocalRenderType::Kustomize => Render { render_type: RenderType::Kustomize, helm: None },
        LocalRenderType::Helm => Render {
            render_type: RenderType::Helm,
            helm: Some(HelmRender {
                release_name: args.release_name.clone(),
                values_files: args.values.clone(),
                ..HelmRender::default()
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn well_known_cluster_kinds_are_cluster_scoped_and_the_rest_namespaced() {
        let cases = [
            ("", "Namespace", Scope::Cluster),
            ("rbac.authorization.k8s.io", "ClusterRole", Scope::Cluster),
            ("apiextensions.k8s.io", "CustomResourceDefinition", Scope::Cluster),
            ("", "ConfigMap", Scope::Namespaced),
            ("apps", "Deployment", Scope::Namespaced),
            ("example.com", "Widget", Scope::Namespaced),
            ("rbac.authorization.k8s.io", "Role", Scope::Namespaced),
        ];
        for (group, kind, want) in cases {
            assert_eq!(offline_scope(&GroupKind::new(group, kind)), Some(want), "{group}/{kind}");
        }
    }

    #[test]
    fn secret_values_are_masked_and_other_objects_untouched() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
                            "data": {"password": "aHVudGVyMg=="}, "stringData": {"token": "t0k3n"}});
        let masked = mask_secret_values(secret);
        assert_eq!(masked["data"]["password"], MASK);
        assert_eq!(masked["stringData"]["token"], MASK);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                        "data": {"password": "visible"}});
        assert_eq!(mask_secret_values(cm.clone()), cm);
    }

    fn args(dir: &Path) -> RenderArgs {
        RenderArgs {
            local: dir.to_owned(),
            render_type: LocalRenderType::Yaml,
            values: Vec::new(),
            app: Some("web".into()),
            release_name: "r".into(),
            helm_library: None,
        }
    }

    #[test]
    fn a_yaml_folder_renders_and_a_duplicate_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: '1'\n";
        std::fs::write(dir.path().join("cm.yaml"), cm).expect("write");
        assert_eq!(run(&args(dir.path()), Some("team-a")).expect("render"), Outcome::Done);
        std::fs::write(dir.path().join("again.yaml"), cm).expect("write");
        assert_eq!(run(&args(dir.path()), Some("team-a")).expect("render"), Outcome::NotMet);
    }
}
