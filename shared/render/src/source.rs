//! One Application's render, whatever its type: the objects `spec.source` declares at a checked-out
//! commit, with SOPS files decrypted when `spec.decryption` gives keys. Blocking: run it on a
//! blocking thread.
//!
//! The steps:
//! 1. `type: yaml` without keys reads the checkout in place (it is read-only and the YAML reader
//!    follows no symlink out of it). Every other render works on a private [`Workspace`] copy.
//! 2. With keys, every SOPS file in the copy is decrypted before any engine runs, so kustomize
//!    generators and Helm values files see plaintext.
//! 3. The copy is sealed read-only and the engine runs on it (kustomize, or the Helm engine).
//! 4. Secrets whose `data` values are base64 SOPS documents are decrypted.
//! 5. Without keys, a SOPS document in the output is a `DecryptionFailure`, never applied.
//!
//! Every decrypted value is returned so the caller masks it everywhere ([`SourceRender::secrets`]).

use std::path::Path;

use base64::Engine as _;
use kuvryn_sync_api::{FailureReason, RenderType};
use kuvryn_sync_core::desired::Rendered;
use serde_json::Value;

use crate::kustomize::{self, Kustomize};
use crate::sops::{self, AgeKeys, SopsFormat};
use crate::workspace::Workspace;
use crate::yaml::{self, Limits, RenderError};

/// What a render needs besides the checkout.
#[derive(Debug)]
pub struct RenderRequest<'a> {
    /// The checked-out repository.
    pub root: &'a Path,
    /// `spec.source.path`.
    pub path: &'a str,
    /// `spec.source.render.type`.
    pub render_type: RenderType,
    /// The keys of `spec.decryption`, when set.
    pub keys: Option<&'a AgeKeys>,
    /// The kustomize engine and its limits.
    pub kustomize: &'a Kustomize,
    /// Bounds of the copy and the YAML read.
    pub limits: Limits,
}

/// A render's objects and the secret values it decrypted.
#[derive(Clone, Default)]
pub struct SourceRender {
    pub objects: Vec<Rendered>,
    /// Decrypted values: mask them in every message.
    pub secrets: Vec<String>,
}

impl std::fmt::Debug for SourceRender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceRender")
            .field("objects", &self.objects.len())
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

/// Why a render failed: the reason for status, and a message safe to show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderFailure {
    pub reason: FailureReason,
    pub message: String,
}

impl RenderFailure {
    fn new(reason: FailureReason, message: impl Into<String>) -> Self {
        RenderFailure { reason, message: message.into() }
    }
}

/// Render `request` (yaml or kustomize; Helm renders through [`crate::helm`]).
pub fn render(request: &RenderRequest<'_>) -> Result<SourceRender, RenderFailure> {
    let mut out = SourceRender::default();
    let workspace = match (request.render_type, request.keys) {
        (RenderType::Yaml, None) => None,
        _ => Some(private_copy(request, &mut out, None)?),
    };
    let root = workspace.as_ref().map_or(request.root, Workspace::root);
    out.objects = match request.render_type {
        RenderType::Yaml => yaml::render(root, request.path, request.limits)
            .map_err(|e| RenderFailure::new(e.reason(), e.to_string()))?,
        RenderType::Kustomize => {
            let workspace = workspace.as_ref().expect("kustomize renders a copy");
            request
                .kustomize
                .render(workspace, request.path)
                .map_err(|e| RenderFailure::new(e.reason(), e.to_string()))?
        }
        RenderType::Helm => {
            return Err(RenderFailure::new(
                FailureReason::RenderFailure,
                "render.type helm renders through the Helm engine, not this function",
            ));
        }
    };
    finish(&mut out, request.keys)?;
    Ok(out)
}

/// A sealed private copy of what the render reads, SOPS files decrypted in it when there are
/// keys. Only that is copied, never the whole commit: `reads` when given (Helm: the chart
/// directory unless pulled, and the values files), else `spec.source.path` for `type: yaml`
/// and Helm, and for kustomize the path and what its kustomizations name
/// ([`crate::kustomize::materialise`]).
pub fn private_copy(
    request: &RenderRequest<'_>,
    out: &mut SourceRender,
    reads: Option<&[String]>,
) -> Result<Workspace, RenderFailure> {
    let failed = |e: RenderError| RenderFailure::new(e.reason(), e.to_string());
    let mut workspace = Workspace::empty(request.root, request.limits).map_err(failed)?;
    match request.render_type {
        RenderType::Kustomize if reads.is_none() => {
            kustomize::materialise(
                &mut workspace,
                request.path,
                request.kustomize.allow_remote_bases,
            )
            .map_err(|e| RenderFailure::new(e.reason(), e.to_string()))?;
        }
        _ => {
            let default = [request.path.to_owned()];
            // Unsafe paths are left for the renderer to refuse with its own message.
            for path in reads.unwrap_or(&default) {
                if let Some(relative) = inside_relative(path) {
                    workspace.materialise(&relative).map_err(failed)?;
                }
            }
        }
    }
    if let Some(keys) = request.keys {
        let decrypted = sops::decrypt_tree(workspace.root(), keys)
            .map_err(|e| RenderFailure::new(e.reason(), e.to_string()))?;
        out.secrets.extend(decrypted.secrets);
    }
    workspace.seal().map_err(|e| RenderFailure::new(e.reason(), e.to_string()))?;
    Ok(workspace)
}

/// `path` as a relative path inside the repository, or `None` when it is absolute or climbs.
fn inside_relative(path: &str) -> Option<std::path::PathBuf> {
    let relative = Path::new(path);
    let plain = !relative.is_absolute()
        && relative
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir));
    plain.then(|| relative.to_path_buf())
}

/// Decrypt Secret data that is a SOPS document (with keys), or refuse any SOPS document left
/// in the output (without).
pub fn finish(out: &mut SourceRender, keys: Option<&AgeKeys>) -> Result<(), RenderFailure> {
    yaml::check_rendered_size(&out.objects, &mut 0)
        .map_err(|e| RenderFailure::new(e.reason(), e.to_string()))?;
    for rendered in &mut out.objects {
        match keys {
            Some(keys) => {
                let before = secret_data_values(&rendered.object);
                sops::decrypt_secret_data(&mut rendered.object, keys)
                    .map_err(|e| RenderFailure::new(e.reason(), e.to_string()))?;
                let after = secret_data_values(&rendered.object);
                out.secrets.extend(after.into_iter().filter(|v| !before.contains(v)));
            }
            None => {
                if let Some(what) = sops_content(&rendered.object) {
                    return Err(RenderFailure::new(
                        FailureReason::DecryptionFailure,
                        format!(
                            "{}: {what} is SOPS-encrypted, but the Application has no \
                             spec.decryption; add spec.decryption with a Secret of age keys \
                             labelled sync.kuvryn.io/decryption-key: \"true\"",
                            rendered.origin
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// What in `object` is SOPS-encrypted, if anything.
fn sops_content(object: &Value) -> Option<String> {
    if object.get("sops").and_then(Value::as_object).is_some_and(|m| m.contains_key("mac")) {
        return Some("the document".to_owned());
    }
    let is_secret = object["kind"] == "Secret" && object["apiVersion"] == "v1";
    let data = object.get("data").and_then(Value::as_object).filter(|_| is_secret)?;
    data.iter().find_map(|(key, value)| {
        let bytes = base64::engine::general_purpose::STANDARD.decode(value.as_str()?).ok()?;
        sops::is_encrypted(&bytes, SopsFormat::for_path(Path::new(key)))
            .then(|| format!("Secret data key {key:?}"))
    })
}

/// The decoded `data` values of a Secret, as text.
fn secret_data_values(object: &Value) -> Vec<String> {
    let Some(data) = object.get("data").and_then(Value::as_object) else {
        return Vec::new();
    };
    let texts = data
        .values()
        .filter_map(|v| base64::engine::general_purpose::STANDARD.decode(v.as_str()?).ok())
        .filter_map(|bytes| String::from_utf8(bytes).ok());
    // A dotenv document's values are secrets one by one, too.
    texts
        .flat_map(|text| {
            let values: Vec<String> = text
                .lines()
                .filter_map(|line| line.split_once('=').map(|(_, v)| v.trim().to_owned()))
                .filter(|v| !v.is_empty())
                .collect();
            std::iter::once(text).chain(values)
        })
        .collect()
}
