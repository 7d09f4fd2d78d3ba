//! `render.type: helm`: a chart rendered by the real Helm engine (`kuvryn-sync-helm`, which runs
//! `libhelm_c.so` in the `ksync-helm-render` helper process, offline: `lookup` returns nothing and
//! no network or DNS is reached).
//!
//! - **A fresh copy per render.** The chart is copied (a directory of the checked-out repository)
//!   or unpacked (a pulled `.tgz`) into a private temporary directory, and Helm loads that copy.
//!   Copying follows the yaml renderer's rule: every symlink is resolved and refused when it leads
//!   outside the repository (a link to a directory inside is followed; a cycle is refused), so a
//!   chart cannot read `/etc/passwd` or a service-account token through a link. Unpacking refuses
//!   entries that are absolute, contain `..`, or are links or devices, and stops at
//!   [`Limits::max_total_bytes`] of decompressed data, so a decompression bomb fails the render.
//! - **Values files** are read through the same rule ([`read_values_files`]); the pure checks and
//!   the merge order are `kuvryn_sync_core::helm_values`.
//! - **Output**: the chart's `crds/` files first (Helm installs them before anything else and never
//!   templates them), then every rendered template's objects; `NOTES.txt`, partials and empty
//!   documents are dropped. Origins are chart-relative: `crds/widgets.yaml#0`,
//!   `templates/deploy.yaml#1`, `charts/sub/templates/cm.yaml#0`. Only the top chart's `crds/`
//!   are read; CRDs shipped inside subcharts are not (yet) part of the output.
//! - **Errors** map to `RenderFailure` (a release name or path that breaks the rules is
//!   `ValidationFailure`) and pass through a redactor holding every Secret-sourced value: Helm's
//!   template errors can echo values (`{{ fail .Values.password }}`).
//!
//! The copying, unpacking and origin naming are hand-written (no crate copies a tree under a
//! containment rule); the archive format is read with `flate2` and `tar`.

use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use kuvryn_sync_api::FailureReason;
use kuvryn_sync_core::desired::Rendered;
use kuvryn_sync_core::helm_values::{
    AssembledValues, HelmValuesError, ReleaseNameError, check_values_file_path,
    validate_release_name,
};
use kuvryn_sync_core::redact::{Redactor, redact_shapes};
use kuvryn_sync_helm::{HelmRenderer, RenderRequest, split_yaml_documents};

/// Bounds of one chart copy or unpack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most files in the chart.
    pub max_files: usize,
    /// Most bytes of chart files (decompressed), and of all values files together.
    pub max_total_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_files: 10_000, max_total_bytes: 64 * 1024 * 1024 }
    }
}

/// Where the chart comes from.
#[derive(Clone, Copy, Debug)]
pub enum ChartSource<'a> {
    /// A chart directory at `path` inside the checked-out repository at `repository_root`.
    Directory {
        /// The checked-out repository.
        repository_root: &'a Path,
        /// The chart directory, relative to the repository (`spec.source.path`).
        path: &'a str,
    },
    /// A chart archive (`.tgz`), such as one pulled by `kuvryn_sync_source::chart`.
    Archive(&'a Path),
}

/// Why a Helm render failed; every message is safe to show (redacted, never file contents).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HelmRenderError {
    /// The release name breaks Helm's rule.
    #[error(transparent)]
    ReleaseName(#[from] ReleaseNameError),
    /// Values could not be assembled.
    #[error(transparent)]
    Values(#[from] HelmValuesError),
    /// A path must be relative and stay inside the repository.
    #[error("{field} {path:?} must be a path inside the repository (relative, no '..')")]
    PathNotRelative {
        /// The spec field.
        field: &'static str,
        /// The path.
        path: String,
    },
    /// A file or directory does not exist.
    #[error("{path} does not exist in the repository at this commit")]
    Missing {
        /// Repository-relative path.
        path: String,
    },
    /// A symbolic link leads outside the repository (or nowhere).
    #[error("{path}: a symbolic link leading outside the repository is not followed")]
    SymlinkEscapes {
        /// Repository-relative path.
        path: String,
    },
    /// Symbolic links form a cycle.
    #[error("{path}: symbolic links form a cycle")]
    SymlinkCycle {
        /// Repository-relative path.
        path: String,
    },
    /// The chart is larger than the limits.
    #[error("the chart is larger than the limit of {limit}")]
    TooLarge {
        /// The limit that was hit, in words.
        limit: String,
    },
    /// The archive is not a usable chart archive.
    #[error("chart archive: {problem}")]
    Archive {
        /// What is wrong.
        problem: String,
    },
    /// Reading or writing the render copy failed.
    #[error("{path}: cannot be read: {reason}")]
    Io {
        /// The path (repository-relative or archive entry).
        path: String,
        /// The I/O error kind.
        reason: String,
    },
    /// A file in `crds/` is not a list of YAML objects.
    #[error("{path}: invalid CRD document: {problem}")]
    Crd {
        /// Chart-relative path.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// The Helm engine failed (chart load or template error), redacted.
    #[error("helm: {message}")]
    Engine {
        /// Helm's message with Secret values masked.
        message: String,
    },
}

impl HelmRenderError {
    /// The failure reason for conditions and status.
    pub fn reason(&self) -> FailureReason {
        match self {
            HelmRenderError::ReleaseName(e) => e.reason(),
            HelmRenderError::Values(e) => e.reason(),
            HelmRenderError::PathNotRelative { .. }
            | HelmRenderError::SymlinkEscapes { .. }
            | HelmRenderError::SymlinkCycle { .. } => FailureReason::ValidationFailure,
            _ => FailureReason::RenderFailure,
        }
    }
}

/// Reads `valuesFiles` from the checked-out repository, in order: each path must pass
/// `check_values_file_path` and resolve (symlinks included) inside the repository.
pub fn read_values_files(
    repository_root: &Path,
    paths: &[String],
    limits: Limits,
) -> Result<Vec<(String, Vec<u8>)>, HelmRenderError> {
    let root = canonical_root(repository_root)?;
    let mut total = 0u64;
    let mut files = Vec::with_capacity(paths.len());
    for (index, path) in paths.iter().enumerate() {
        check_values_file_path(index, path)?;
        let real = resolve_inside(&root, &root.join(path), path)?;
        let meta = fs::metadata(&real).map_err(|e| io_error(path, &e))?;
        if !meta.is_file() {
            return Err(HelmRenderError::Io { path: path.clone(), reason: "not a file".into() });
        }
        total += meta.len();
        if total > limits.max_total_bytes {
            return Err(too_large(limits));
        }
        files.push((path.clone(), fs::read(&real).map_err(|e| io_error(path, &e))?));
    }
    Ok(files)
}

/// Renders a chart with the assembled values for `release_name` in `namespace`: the chart's CRDs
/// first, then its templates' objects (see the module documentation).
pub fn render(
    renderer: &HelmRenderer,
    chart: ChartSource<'_>,
    values: &AssembledValues,
    release_name: &str,
    namespace: &str,
    limits: Limits,
) -> Result<Vec<Rendered>, HelmRenderError> {
    validate_release_name(release_name)?;
    let redactor = values.redactor();
    let work =
        crate::sandbox::temp_dir("ksync-chart-").map_err(|e| io_error("render directory", &e))?;
    let chart_dir = match chart {
        ChartSource::Directory { repository_root, path } => {
            copy_chart(repository_root, path, &work.path().join("chart"), limits)?
        }
        ChartSource::Archive(archive) => unpack_chart(archive, &work.path().join("chart"), limits)?,
    };
    let mut objects = crd_objects(&chart_dir)?;
    let request =
        RenderRequest::new(&chart_dir, release_name, namespace).with_values(values.values.clone());
    let rendered = renderer.render(&request).map_err(|e| engine_error(&redactor, &e))?;
    let documents = rendered.documents().map_err(|e| engine_error(&redactor, &e))?;
    let mut previous: Option<(String, usize)> = None;
    for document in documents {
        let origin_path = chart_relative(&document.template);
        let n = match &previous {
            Some((template, n)) if *template == origin_path => n + 1,
            _ => 0,
        };
        objects.push(Rendered { origin: format!("{origin_path}#{n}"), object: document.object });
        previous = Some((origin_path, n));
    }
    Ok(objects)
}

/// Helm names templates `<chart>/templates/x.yaml`; origins drop the chart name.
fn chart_relative(template: &str) -> String {
    template.split_once('/').map_or(template, |(_, rest)| rest).to_owned()
}

fn engine_error(redactor: &Redactor, error: &kuvryn_sync_helm::HelmError) -> HelmRenderError {
    let message = match error {
        kuvryn_sync_helm::HelmError::Engine { message, .. } => message.clone(),
        // The helper died: of the render helpers' CPU or memory limit, say so plainly.
        kuvryn_sync_helm::HelmError::HelperFailed { status, stderr } => {
            let lower = stderr.to_ascii_lowercase();
            if status.contains("SIGXCPU") || status.contains("SIGKILL") {
                format!(
                    "the Helm engine was stopped ({status}), by its CPU time limit unless \
                     something else killed it: lower what the chart needs, or ask the operator \
                     to raise --render-max-cpu-seconds"
                )
            } else if ["out of memory", "cannot allocate memory", "failed to reserve"]
                .iter()
                .any(|marker| lower.contains(marker))
            {
                "the Helm engine ran out of memory under the render helpers' address-space limit: \
                 lower what the chart needs, or ask the operator to raise --render-max-memory"
                    .to_owned()
            } else {
                error.to_string()
            }
        }
        other => other.to_string(),
    };
    HelmRenderError::Engine { message: redact_shapes(&redactor.redact(&message)) }
}

fn io_error(path: &str, error: &std::io::Error) -> HelmRenderError {
    HelmRenderError::Io { path: path.to_owned(), reason: error.kind().to_string() }
}

fn too_large(limits: Limits) -> HelmRenderError {
    HelmRenderError::TooLarge {
        limit: format!("{} files or {} bytes", limits.max_files, limits.max_total_bytes),
    }
}

fn canonical_root(root: &Path) -> Result<PathBuf, HelmRenderError> {
    fs::canonicalize(root).map_err(|e| io_error(".", &e))
}

/// The real path of `path`, refused unless it exists and lies inside `root` (canonical).
fn resolve_inside(root: &Path, path: &Path, display: &str) -> Result<PathBuf, HelmRenderError> {
    if fs::symlink_metadata(path).is_err() {
        return Err(HelmRenderError::Missing { path: display.to_owned() });
    }
    let real = fs::canonicalize(path)
        .map_err(|_| HelmRenderError::SymlinkEscapes { path: display.to_owned() })?;
    if !real.starts_with(root) {
        return Err(HelmRenderError::SymlinkEscapes { path: display.to_owned() });
    }
    Ok(real)
}

/// Copies the chart at `path` of the repository into `dest`, resolving every symlink inside the
/// repository. Returns `dest`.
fn copy_chart(
    repository_root: &Path,
    path: &str,
    dest: &Path,
    limits: Limits,
) -> Result<PathBuf, HelmRenderError> {
    let relative = Path::new(path);
    if relative.is_absolute()
        || relative.components().any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
    {
        return Err(HelmRenderError::PathNotRelative {
            field: "spec.source.path",
            path: path.to_owned(),
        });
    }
    let root = canonical_root(repository_root)?;
    let display = path.trim_matches('/').to_owned();
    let display = if display.is_empty() { ".".to_owned() } else { display };
    let real = resolve_inside(&root, &root.join(relative), &display)?;
    let mut copy = ChartCopy { root: &root, limits, visited: BTreeSet::new(), files: 0, bytes: 0 };
    copy.directory(&real, dest, &display)?;
    Ok(dest.to_owned())
}

struct ChartCopy<'a> {
    root: &'a Path,
    limits: Limits,
    visited: BTreeSet<PathBuf>,
    files: usize,
    bytes: u64,
}

impl ChartCopy<'_> {
    fn directory(
        &mut self,
        real: &Path,
        dest: &Path,
        display: &str,
    ) -> Result<(), HelmRenderError> {
        if !fs::metadata(real).map_err(|e| io_error(display, &e))?.is_dir() {
            return Err(HelmRenderError::Io {
                path: display.to_owned(),
                reason: "not a directory".into(),
            });
        }
        if !self.visited.insert(real.to_owned()) {
            return Err(HelmRenderError::SymlinkCycle { path: display.to_owned() });
        }
        fs::create_dir_all(dest).map_err(|e| io_error(display, &e))?;
        let mut names: Vec<_> = fs::read_dir(real)
            .map_err(|e| io_error(display, &e))?
            .filter_map(Result::ok)
            .map(|entry| entry.file_name())
            .collect();
        names.sort();
        for name in names {
            let child_display = match display {
                "." => name.to_string_lossy().into_owned(),
                _ => format!("{display}/{}", name.to_string_lossy()),
            };
            let child = resolve_inside(self.root, &real.join(&name), &child_display)?;
            let meta = fs::metadata(&child).map_err(|e| io_error(&child_display, &e))?;
            if meta.is_dir() {
                self.directory(&child, &dest.join(&name), &child_display)?;
            } else if meta.is_file() {
                self.files += 1;
                self.bytes += meta.len();
                if self.files > self.limits.max_files || self.bytes > self.limits.max_total_bytes {
                    return Err(too_large(self.limits));
                }
                fs::copy(&child, dest.join(&name)).map_err(|e| io_error(&child_display, &e))?;
            }
            // Sockets, FIFOs and devices are not chart content: skipped.
        }
        self.visited.remove(real);
        Ok(())
    }
}

/// Unpacks a gzip'd tar chart archive into `dest`, refusing unsafe entries and stopping at the
/// limits. Returns the chart directory (the one holding `Chart.yaml`).
fn unpack_chart(archive: &Path, dest: &Path, limits: Limits) -> Result<PathBuf, HelmRenderError> {
    let file = fs::File::open(archive).map_err(|e| io_error("chart archive", &e))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let archive_error = |problem: String| HelmRenderError::Archive { problem };
    let entries =
        tar.entries().map_err(|e| archive_error(format!("not a tar.gz archive ({})", e.kind())))?;
    let (mut files, mut bytes) = (0usize, 0u64);
    for entry in entries {
        let mut entry =
            entry.map_err(|e| archive_error(format!("unreadable entry ({})", e.kind())))?;
        let name = entry
            .path()
            .map_err(|_| archive_error("an entry name is not a valid path".into()))?
            .into_owned();
        let display = name.to_string_lossy().into_owned();
        let safe = !name.as_os_str().is_empty()
            && name.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        let kind = entry.header().entry_type();
        if kind.is_pax_global_extensions() || kind.is_pax_local_extensions() {
            continue;
        }
        if !safe {
            return Err(archive_error(format!(
                "entry {display:?} leaves the chart (absolute or '..')"
            )));
        }
        let target = dest.join(&name);
        if kind.is_dir() {
            fs::create_dir_all(&target).map_err(|e| io_error(&display, &e))?;
            continue;
        }
        if !kind.is_file() {
            return Err(archive_error(format!(
                "entry {display:?} is a link or special file; charts hold only files and directories"
            )));
        }
        files += 1;
        if files > limits.max_files {
            return Err(too_large(limits));
        }
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(|e| io_error(&display, &e))?;
        }
        let remaining = limits.max_total_bytes.saturating_sub(bytes);
        let mut out = fs::File::create(&target).map_err(|e| io_error(&display, &e))?;
        let written =
            std::io::copy(&mut (&mut entry).take(remaining + 1), &mut out).map_err(|e| {
                archive_error(format!("entry {display:?} cannot be unpacked ({})", e.kind()))
            })?;
        bytes += written;
        if bytes > limits.max_total_bytes {
            return Err(too_large(limits));
        }
    }
    chart_root(dest)
}

/// The directory holding `Chart.yaml`: `dest` itself or its single top-level directory.
fn chart_root(dest: &Path) -> Result<PathBuf, HelmRenderError> {
    if dest.join("Chart.yaml").is_file() {
        return Ok(dest.to_owned());
    }
    let dirs: Vec<PathBuf> = fs::read_dir(dest)
        .map_err(|e| io_error("chart archive", &e))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("Chart.yaml").is_file())
        .collect();
    match dirs.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(HelmRenderError::Archive {
            problem: "expected exactly one top-level chart directory holding Chart.yaml".into(),
        }),
    }
}

/// The objects of the chart's `crds/` files (`.yaml`, `.yml`, `.json`, recursively, in path
/// order), untemplated, as Helm reads them.
fn crd_objects(chart_dir: &Path) -> Result<Vec<Rendered>, HelmRenderError> {
    let mut files = Vec::new();
    collect_files(&chart_dir.join("crds"), "crds", &mut files)?;
    files.sort();
    let mut objects = Vec::new();
    for (display, real) in files {
        let lower = display.to_ascii_lowercase();
        if ![".yaml", ".yml", ".json"].iter().any(|ext| lower.ends_with(ext)) {
            continue;
        }
        let text = fs::read_to_string(&real).map_err(|e| io_error(&display, &e))?;
        let documents =
            split_yaml_documents(&display, &text).map_err(|e| HelmRenderError::Crd {
                path: display.clone(),
                problem: match e {
                    kuvryn_sync_helm::HelmError::Manifest { message, .. } => {
                        message.split(" at line ").next().unwrap_or_default().to_owned()
                    }
                    other => other.to_string(),
                },
            })?;
        for (n, document) in documents.into_iter().enumerate() {
            let object = serde_json::to_value(&document).map_err(|_| HelmRenderError::Crd {
                path: display.clone(),
                problem: "not representable as JSON".into(),
            })?;
            objects.push(Rendered { origin: format!("{display}#{n}"), object });
        }
    }
    Ok(objects)
}

fn collect_files(
    dir: &Path,
    display: &str,
    out: &mut Vec<(String, PathBuf)>,
) -> Result<(), HelmRenderError> {
    let Ok(entries) = fs::read_dir(dir) else { return Ok(()) };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let child = format!("{display}/{name}");
        // The copy holds only regular files and directories.
        if path.is_dir() {
            collect_files(&path, &child, out)?;
        } else {
            out.push((child, path));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_drop_the_chart_name() {
        let cases = [
            ("web/templates/deploy.yaml", "templates/deploy.yaml"),
            ("web/charts/sub/templates/cm.yaml", "charts/sub/templates/cm.yaml"),
            ("odd", "odd"),
        ];
        for (template, want) in cases {
            assert_eq!(chart_relative(template), want);
        }
    }

    #[test]
    fn reasons() {
        let cases = [
            (
                HelmRenderError::SymlinkEscapes { path: "x".into() },
                FailureReason::ValidationFailure,
            ),
            (
                HelmRenderError::PathNotRelative { field: "f", path: "/x".into() },
                FailureReason::ValidationFailure,
            ),
            (HelmRenderError::Engine { message: "m".into() }, FailureReason::RenderFailure),
            (HelmRenderError::Archive { problem: "p".into() }, FailureReason::RenderFailure),
        ];
        for (error, reason) in cases {
            assert_eq!(error.reason(), reason, "{error}");
        }
    }
}
