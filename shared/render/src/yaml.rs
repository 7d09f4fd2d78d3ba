//! `render.type: yaml`: every `.yaml`, `.yml` and `.json` file under the Application's
//! `spec.source.path`, recursively, in a stable order (byte order of the path relative to the
//! repository), each file possibly holding several YAML documents.
//!
//! - `.ksync.yaml` files and anything whose name starts with a dot (files and directories) are
//!   skipped; empty documents are skipped; a `kind: List` (`v1`) contributes its `items`.
//! - The path and every file read must stay inside the repository: the source path must be
//!   repository-relative (no leading `/`, no `..`), and every symlink is resolved and refused when
//!   it leads outside the repository (a link to a directory inside is followed once; a link cycle
//!   is refused). Such a refusal is `ValidationFailure`, since the Git content is unsafe.
//! - Unreadable files and YAML or JSON syntax errors are `RenderFailure`. Messages name the file
//!   and the line and column, never the file's content. YAML is read by
//!   [`kuvryn_sync_core::yaml`], within its budgets per file (nodes with aliases expanded, depth,
//!   documents, bytes); over budget is `RenderFailure` naming the file and the limit. Empty
//!   documents are skipped and not numbered (`path#n` counts the non-empty documents).
//! - Bounded: at most [`Limits::max_files`] files and [`Limits::max_total_bytes`] bytes, so a
//!   huge or endless tree fails the render instead of the controller. Every render type's
//!   objects are checked as JSON before they go further ([`check_rendered_size`]): each at most
//!   [`MAX_OBJECT_BYTES`] (the API server's request limit), all at most [`MAX_RENDERED_BYTES`].

use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};

use kuvryn_sync_api::FailureReason;
use kuvryn_sync_core::desired::Rendered;
use serde_json::Value;

/// Bounds of one render.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_files: usize,
    pub max_total_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_files: 10_000, max_total_bytes: 64 * 1024 * 1024 }
    }
}

/// Why a render failed; messages are safe to show (paths, positions, never contents).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error("spec.source.path {path:?} must be a path inside the repository (relative, no '..')")]
    PathNotRelative { path: String },
    #[error("spec.source.path {path:?} does not exist in the repository at this commit")]
    PathMissing { path: String },
    #[error("{path}: a symbolic link leading outside the repository is not followed")]
    SymlinkEscapes { path: String },
    #[error("{path}: symbolic links form a cycle")]
    SymlinkCycle { path: String },
    #[error("{path}: cannot be read: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("{path}: invalid {format} at line {line}, column {column}: {problem}")]
    Syntax { path: String, format: &'static str, line: usize, column: usize, problem: String },
    #[error("{path}: YAML budget exceeded: {exceeded}")]
    YamlBudget { path: String, exceeded: kuvryn_sync_core::yaml::Exceeded },
    #[error("{path}: a kind: List must hold an items list")]
    BadList { path: String },
    #[error(
        "{origin}: the object takes more than {limit} bytes as JSON, more than the API server \
         accepts; make it smaller (check for YAML aliases that repeat large parts)"
    )]
    ObjectTooLarge { origin: String, limit: u64 },
    #[error(
        "the rendered manifests take more than {limit} bytes as JSON; render fewer objects or \
         split the Application"
    )]
    RenderedTooLarge { limit: u64 },
    #[error("the source path holds more than {limit} files to render")]
    TooManyFiles { limit: usize },
    #[error("the source path holds more than {limit} bytes to render")]
    TooLarge { limit: u64 },
}

impl RenderError {
    /// The failure reason for conditions and status.
    pub fn reason(&self) -> FailureReason {
        match self {
            RenderError::PathNotRelative { .. }
            | RenderError::SymlinkEscapes { .. }
            | RenderError::SymlinkCycle { .. } => FailureReason::ValidationFailure,
            _ => FailureReason::RenderFailure,
        }
    }
}

/// The most bytes one rendered object may take as JSON: the Kubernetes API server refuses larger
/// request bodies (3 MiB), so such an object (an alias-expanded manifest, say) is never sent.
pub const MAX_OBJECT_BYTES: u64 = 3 * 1024 * 1024;

/// The most bytes a rendered manifest set may take as JSON, whatever the render type: what is
/// kept in memory and sent to the API server for one Application.
pub const MAX_RENDERED_BYTES: u64 = 64 * 1024 * 1024;

/// Check the sizes of `objects` as JSON, adding them to `total`: each at most
/// [`MAX_OBJECT_BYTES`], all at most [`MAX_RENDERED_BYTES`].
pub fn check_rendered_size(objects: &[Rendered], total: &mut u64) -> Result<(), RenderError> {
    for rendered in objects {
        let bytes = json_size(&rendered.object);
        if bytes > MAX_OBJECT_BYTES {
            return Err(RenderError::ObjectTooLarge {
                origin: rendered.origin.clone(),
                limit: MAX_OBJECT_BYTES,
            });
        }
        *total += bytes;
        if *total > MAX_RENDERED_BYTES {
            return Err(RenderError::RenderedTooLarge { limit: MAX_RENDERED_BYTES });
        }
    }
    Ok(())
}

/// The length of `value` as compact JSON, counted without building the text.
fn json_size(value: &Value) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a JSON value to a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Render the YAML and JSON files under `source_path` of the checked-out repository at `root`.
pub fn render(
    root: &Path,
    source_path: &str,
    limits: Limits,
) -> Result<Vec<Rendered>, RenderError> {
    let files = manifest_files(root, source_path, limits)?;
    let mut total = 0u64;
    let mut rendered_bytes = 0u64;
    let mut objects = Vec::new();
    for (display, real) in files {
        let text = fs::read_to_string(&real).map_err(|err| RenderError::Unreadable {
            path: display.clone(),
            reason: err.kind().to_string(),
        })?;
        total += text.len() as u64;
        if total > limits.max_total_bytes {
            return Err(RenderError::TooLarge { limit: limits.max_total_bytes });
        }
        let parsed = parse_file(&display, &text)?;
        // Checked file by file, so aliases in many files cannot pile up before the end.
        check_rendered_size(&parsed, &mut rendered_bytes)?;
        objects.extend(parsed);
    }
    Ok(objects)
}

/// The files to render, as (path relative to the repository, real path), in render order.
fn manifest_files(
    root: &Path,
    source_path: &str,
    limits: Limits,
) -> Result<Vec<(String, PathBuf)>, RenderError> {
    let relative = Path::new(source_path);
    let escapes = relative.is_absolute()
        || relative.components().any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)));
    if escapes {
        return Err(RenderError::PathNotRelative { path: source_path.to_owned() });
    }
    let root = fs::canonicalize(root).map_err(|err| RenderError::Unreadable {
        path: ".".to_owned(),
        reason: err.kind().to_string(),
    })?;
    let start = root.join(relative);
    if fs::symlink_metadata(&start).is_err() {
        return Err(RenderError::PathMissing { path: source_path.to_owned() });
    }
    let start_display = display_path(relative);
    let mut walk = Walk { root: &root, limits, visited: BTreeSet::new(), files: Vec::new() };
    walk.visit(&start, &start_display)?;
    walk.files.sort();
    Ok(walk.files)
}

struct Walk<'a> {
    root: &'a Path,
    limits: Limits,
    /// Directories entered, by real path (a symlink cycle would enter one twice).
    visited: BTreeSet<PathBuf>,
    files: Vec<(String, PathBuf)>,
}

impl Walk<'_> {
    /// Visit `path` (shown to users as `display`): resolve it inside the repository, then walk a
    /// directory or take a manifest file.
    fn visit(&mut self, path: &Path, display: &str) -> Result<(), RenderError> {
        let real = fs::canonicalize(path).map_err(|_| RenderError::SymlinkEscapes {
            // A dangling link resolves nowhere; treat it like one that leaves.
            path: display.to_owned(),
        })?;
        if !real.starts_with(self.root) {
            return Err(RenderError::SymlinkEscapes { path: display.to_owned() });
        }
        let meta = fs::metadata(&real).map_err(|err| RenderError::Unreadable {
            path: display.to_owned(),
            reason: err.kind().to_string(),
        })?;
        if meta.is_dir() {
            return self.visit_dir(&real, display);
        }
        if meta.is_file() && is_manifest(display) {
            if self.files.len() >= self.limits.max_files {
                return Err(RenderError::TooManyFiles { limit: self.limits.max_files });
            }
            self.files.push((display.to_owned(), real));
        }
        Ok(())
    }

    fn visit_dir(&mut self, real: &Path, display: &str) -> Result<(), RenderError> {
        if !self.visited.insert(real.to_owned()) {
            return Err(RenderError::SymlinkCycle { path: display.to_owned() });
        }
        let entries = fs::read_dir(real).map_err(|err| RenderError::Unreadable {
            path: display.to_owned(),
            reason: err.kind().to_string(),
        })?;
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| !name.starts_with('.'))
            .collect();
        names.sort();
        for name in names {
            let child_display =
                if display.is_empty() { name.clone() } else { format!("{display}/{name}") };
            self.visit(&real.join(&name), &child_display)?;
        }
        self.visited.remove(real);
        Ok(())
    }
}

fn display_path(relative: &Path) -> String {
    relative
        .components()
        .filter_map(|c| match c {
            Component::Normal(part) => part.to_str(),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether a file is rendered: `.yaml`, `.yml` or `.json`, not a dot-file (which covers
/// `.ksync.yaml`).
fn is_manifest(display: &str) -> bool {
    let name = display.rsplit('/').next().unwrap_or(display);
    !name.starts_with('.')
        && [".yaml", ".yml", ".json"].iter().any(|ext| name.to_ascii_lowercase().ends_with(ext))
}

/// The objects of one file; documents are numbered from 0 in origins (`path#n`).
fn parse_file(path: &str, text: &str) -> Result<Vec<Rendered>, RenderError> {
    let documents: Vec<Value> = if path.to_ascii_lowercase().ends_with(".json") {
        let value = serde_json::from_str(text).map_err(|err| RenderError::Syntax {
            path: path.to_owned(),
            format: "JSON",
            line: err.line(),
            column: err.column(),
            problem: json_problem(&err),
        })?;
        vec![value]
    } else {
        yaml_documents(path, text)?
    };
    let mut objects = Vec::new();
    for (n, document) in documents.into_iter().enumerate() {
        let origin = format!("{path}#{n}");
        match document {
            Value::Null => {}
            list if is_list(&list) => {
                let Some(items) = list.get("items").and_then(Value::as_array) else {
                    return Err(RenderError::BadList { path: origin });
                };
                objects.extend(items.iter().enumerate().map(|(i, item)| Rendered {
                    origin: format!("{origin}.items[{i}]"),
                    object: item.clone(),
                }));
            }
            object => objects.push(Rendered { origin, object }),
        }
    }
    Ok(objects)
}

fn is_list(value: &Value) -> bool {
    value["kind"] == "List" && value["apiVersion"] == "v1"
}

fn yaml_documents(path: &str, text: &str) -> Result<Vec<Value>, RenderError> {
    kuvryn_sync_core::yaml::documents(text).map_err(|err| yaml_error(path, &err))
}

/// A YAML error of the file at `path` as a render error (over budget, or the position).
pub(crate) fn yaml_error(path: &str, err: &kuvryn_sync_core::yaml::YamlError) -> RenderError {
    match err.exceeded() {
        Some(exceeded) => RenderError::YamlBudget { path: path.to_owned(), exceeded },
        None => {
            let (line, column) = err.position();
            RenderError::Syntax {
                path: path.to_owned(),
                format: "YAML",
                line,
                column,
                problem: err.problem(),
            }
        }
    }
}

fn json_problem(err: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match err.classify() {
        Category::Syntax => "syntax error".to_owned(),
        Category::Eof => "unexpected end of file".to_owned(),
        Category::Data | Category::Io => "invalid data".to_owned(),
    }
}

#[cfg(test)]
mod tests;
