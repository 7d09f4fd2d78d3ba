//! A private render workspace: a fresh temporary copy of what one render reads from the
//! checked-out repository tree ([`Workspace::materialise`] path by path, or [`Workspace::copy_of`]
//! the whole tree), made for one render that runs an engine (kustomize, Helm) or decrypts files,
//! and removed afterwards. It lives under [`crate::sandbox::temp_root`], which the controller
//! empties at start-up.
//!
//! Why a copy rather than the checkout itself:
//! - every render gets its own directory, so one Application's engine never sees another's
//!   decrypted files or leftovers, and an engine that writes (caches, temporary files) cannot
//!   change the shared checkout;
//! - symbolic links are resolved while copying, with the same rule as the `type: yaml` renderer and
//!   discovery (`kuvryn_sync_core::discovery::resolve_within_root`, at most
//!   [`MAX_SYMLINK_HOPS`] hops): a link that stays inside the repository becomes a copy of what it
//!   points to, a link that leaves it (or cannot be resolved within the hop limit) refuses the whole
//!   copy with [`RenderError::SymlinkEscapes`] or [`RenderError::SymlinkCycle`], naming the link,
//!   never the content. The copy holds no symbolic link at all, so an engine cannot be tricked into
//!   reading outside it through one;
//! - [`Workspace::seal`] makes the copy read-only (files `0444`, directories `0555`) once
//!   decryption is done, before an engine runs.
//!
//! `.git` entries are skipped; fifos, sockets and devices are skipped; a link whose target does not
//! exist inside the repository is skipped (it points at nothing that could leak). The copy is
//! bounded by [`Limits`]: at most `max_files` entries (files and directories) and `max_total_bytes`
//! bytes, so a huge tree or a link that copies a big directory many times fails the render with a
//! clear error instead of filling the disk.
//!
//! Hand-written: the copy must apply our symlink rule while walking, which no directory-copy crate
//! does; the temporary directory itself comes from `tempfile`.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use kuvryn_sync_core::discovery::{MAX_SYMLINK_HOPS, resolve_within_root};

use crate::yaml::{Limits, RenderError};

/// Mode of every file once sealed.
pub const SEALED_FILE_MODE: u32 = 0o444;
/// Mode of every directory once sealed.
pub const SEALED_DIR_MODE: u32 = 0o555;
const WRITABLE_FILE_MODE: u32 = 0o644;
const WRITABLE_DIR_MODE: u32 = 0o755;
const PRIVATE_DIR_MODE: u32 = 0o700;
/// Shown as the path of the workspace itself in errors that concern no repository path.
const WORKSPACE_DISPLAY: &str = "(render workspace)";

/// A private temporary copy of (parts of) a repository tree; removed when dropped.
#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    sealed: bool,
    /// The checked-out repository copied from (canonical).
    source: PathBuf,
    limits: Limits,
    /// Entries and bytes copied so far, against `limits`.
    entries: usize,
    bytes: u64,
    /// Repository-relative paths copied whole (everything below them is present).
    copied: Vec<PathBuf>,
    // Declared last: dropped after `Drop::drop` has made the copy writable again.
    dir: tempfile::TempDir,
}

impl Workspace {
    /// Copy the checked-out tree at `repo_root` into a fresh private temporary directory, resolving
    /// symbolic links inside the repository and refusing any that leave it.
    pub fn copy_of(repo_root: &Path, limits: Limits) -> Result<Workspace, RenderError> {
        let mut workspace = Workspace::empty(repo_root, limits)?;
        workspace.materialise(Path::new(""))?;
        Ok(workspace)
    }

    /// A fresh, empty private temporary directory (under [`crate::sandbox::temp_root`]) to copy
    /// parts of the checked-out tree at `repo_root` into with [`Workspace::materialise`].
    pub fn empty(repo_root: &Path, limits: Limits) -> Result<Workspace, RenderError> {
        let source = fs::canonicalize(repo_root).map_err(|err| unreadable(".", &err))?;
        let dir = crate::sandbox::temp_dir("ksync-render-")
            .map_err(|err| unreadable(WORKSPACE_DISPLAY, &err))?;
        // The temporary directory is private (0700); the copy is a directory inside it, so
        // sealing the copy never opens it to other users.
        let parent =
            fs::canonicalize(dir.path()).map_err(|err| unreadable(WORKSPACE_DISPLAY, &err))?;
        set_mode(&parent, PRIVATE_DIR_MODE, WORKSPACE_DISPLAY)?;
        let root = parent.join("repo");
        fs::create_dir(&root).map_err(|err| unreadable(WORKSPACE_DISPLAY, &err))?;
        set_mode(&root, WRITABLE_DIR_MODE, WORKSPACE_DISPLAY)?;
        Ok(Workspace {
            root,
            sealed: false,
            source,
            limits,
            entries: 0,
            bytes: 0,
            copied: Vec::new(),
            dir,
        })
    }

    /// Copy the repository entry at the relative path `relative` (a file, or a directory and
    /// everything below it; `""` for the whole tree) into the copy, at the same place, with the
    /// symlink rule of [`Workspace::copy_of`]. Parent directories are created as plain
    /// directories; what is already copied is not copied again; a path that does not exist in
    /// the repository copies nothing. The [`Limits`] count everything copied into this workspace.
    pub fn materialise(&mut self, relative: &Path) -> Result<(), RenderError> {
        if self.sealed {
            return Err(unreadable(
                WORKSPACE_DISPLAY,
                &std::io::ErrorKind::ReadOnlyFilesystem.into(),
            ));
        }
        let components: Vec<String> = relative
            .components()
            .filter_map(|c| match c {
                std::path::Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        let normal: PathBuf = components.iter().collect();
        if self.copied.iter().any(|done| normal.starts_with(done)) {
            return Ok(());
        }
        let mut copy = Copy {
            source: &self.source,
            limits: self.limits,
            entries: self.entries,
            bytes: self.bytes,
            copying: Vec::new(),
        };
        let display = components.join("/");
        let result = if components.is_empty() {
            copy.copy_dir(&[], &self.root, "")
        } else {
            let dest = self.root.join(&normal);
            match dest.parent() {
                Some(parent) if !parent.is_dir() => fs::create_dir_all(parent)
                    .map_err(|err| unreadable(&display, &err))
                    .and_then(|()| copy.copy_entry(&components, &dest, &display)),
                _ => copy.copy_entry(&components, &dest, &display),
            }
        };
        self.entries = copy.entries;
        self.bytes = copy.bytes;
        result?;
        self.copied.push(normal);
        Ok(())
    }

    /// Bytes copied into the workspace so far.
    pub fn bytes_copied(&self) -> u64 {
        self.bytes
    }

    /// The copy's root directory (absolute, without symbolic links).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether [`Workspace::seal`] has run.
    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    /// Make the whole copy read-only (files `0444`, directories `0555`), before an engine runs on
    /// it. Decryption, which rewrites files, happens before this.
    pub fn seal(&mut self) -> Result<(), RenderError> {
        set_modes(&self.root, SEALED_FILE_MODE, SEALED_DIR_MODE)?;
        self.sealed = true;
        Ok(())
    }

    /// `path` (inside the copy) as a repository-relative path for messages: the copy's location on
    /// this machine is never shown.
    pub fn display_path(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(relative) if relative.as_os_str().is_empty() => ".".to_owned(),
            Ok(relative) => relative.to_string_lossy().into_owned(),
            Err(_) => path.to_string_lossy().into_owned(),
        }
    }

    /// `text` with every mention of the copy's location replaced by repository-relative paths
    /// (`<root>/apps/x` → `apps/x`, `<root>` → `.`), for engine messages.
    pub fn hide_location(&self, text: &str) -> String {
        let root = self.root.to_string_lossy();
        let mut out = text.replace(&format!("{root}/"), "").replace(root.as_ref(), ".");
        for parent in [self.root.parent(), Some(self.dir.path())].into_iter().flatten() {
            out = out.replace(parent.to_string_lossy().as_ref(), WORKSPACE_DISPLAY);
        }
        out
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        // Read-only directories cannot be emptied by a non-root owner: make them writable again so
        // `TempDir` can remove everything. Errors are ignored: `TempDir` reports nothing either.
        if self.sealed {
            let _ = set_modes(&self.root, WRITABLE_FILE_MODE, WRITABLE_DIR_MODE);
        }
    }
}

/// Copy state: bounds and the chain of source directories being copied (a link to one of them
/// would copy it into itself forever).
struct Copy<'a> {
    source: &'a Path,
    limits: Limits,
    entries: usize,
    bytes: u64,
    copying: Vec<Vec<String>>,
}

impl Copy<'_> {
    /// Copy the source directory at repository-relative components `real` into `dest`; `display`
    /// is the repository-relative path the copy stands for (it differs from `real` below a link).
    fn copy_dir(&mut self, real: &[String], dest: &Path, display: &str) -> Result<(), RenderError> {
        if self.copying.iter().any(|dir| dir.as_slice() == real) {
            return Err(RenderError::SymlinkCycle { path: display_or_root(display) });
        }
        self.copying.push(real.to_vec());
        let source_dir = self.source_path(real);
        let entries =
            fs::read_dir(&source_dir).map_err(|err| unreadable(&display_or_root(display), &err))?;
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| name != ".git")
            .collect();
        names.sort();
        for name in names {
            let child_display =
                if display.is_empty() { name.clone() } else { format!("{display}/{name}") };
            let mut child_real = real.to_vec();
            child_real.push(name.clone());
            self.copy_entry(&child_real, &dest.join(&name), &child_display)?;
        }
        self.copying.pop();
        Ok(())
    }

    /// Copy one entry, following it when it is a symbolic link.
    fn copy_entry(
        &mut self,
        real: &[String],
        dest: &Path,
        display: &str,
    ) -> Result<(), RenderError> {
        let Some(real) = self.resolve(real, display)? else {
            return Ok(()); // dangling inside the repository: nothing to copy
        };
        let source = self.source_path(&real);
        let meta = fs::metadata(&source).map_err(|err| unreadable(display, &err))?;
        if meta.is_dir() {
            // A directory already made (the parent of something copied before) is completed.
            if !dest.is_dir() {
                self.count_entry()?;
                fs::create_dir(dest).map_err(|err| unreadable(display, &err))?;
                set_mode(dest, WRITABLE_DIR_MODE, display)?;
            }
            self.copy_dir(&real, dest, display)
        } else if dest.exists() {
            Ok(()) // copied before
        } else if meta.is_file() {
            self.count_entry()?;
            self.copy_file(&source, dest, display, meta.len())
        } else {
            Ok(()) // fifo, socket, device: never content of a manifest
        }
    }

    /// Follow symbolic links from repository-relative `path` until it names a real entry, only
    /// while every link resolves inside the repository. `None` when the target does not exist.
    fn resolve(&self, path: &[String], display: &str) -> Result<Option<Vec<String>>, RenderError> {
        let mut pending: Vec<String> = path.iter().rev().cloned().collect();
        let mut resolved: Vec<String> = Vec::new();
        let mut hops = 0;
        while let Some(component) = pending.pop() {
            resolved.push(component);
            let full = self.source_path(&resolved);
            let meta = match fs::symlink_metadata(&full) {
                Ok(meta) => meta,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(err) => return Err(unreadable(display, &err)),
            };
            if !meta.file_type().is_symlink() {
                if !pending.is_empty() && !meta.is_dir() {
                    return Ok(None); // a file used as a directory: resolves to nothing
                }
                continue;
            }
            hops += 1;
            if hops > MAX_SYMLINK_HOPS {
                return Err(RenderError::SymlinkCycle { path: display.to_owned() });
            }
            let target = fs::read_link(&full).map_err(|err| unreadable(display, &err))?;
            resolved.pop();
            let link_dir: Vec<&str> = resolved.iter().map(String::as_str).collect();
            let Some(target) = target.to_str().and_then(|t| resolve_within_root(&link_dir, t))
            else {
                return Err(RenderError::SymlinkEscapes { path: display.to_owned() });
            };
            // Continue from the link's target, then with what was left of the path.
            resolved.clear();
            pending.extend(target.into_iter().rev());
        }
        Ok(Some(resolved))
    }

    fn copy_file(
        &mut self,
        source: &Path,
        dest: &Path,
        display: &str,
        len: u64,
    ) -> Result<(), RenderError> {
        let limit = self.limits.max_total_bytes;
        if self.bytes.saturating_add(len) > limit {
            return Err(RenderError::TooLarge { limit });
        }
        let input = fs::File::open(source).map_err(|err| unreadable(display, &err))?;
        let mut output = fs::File::create(dest).map_err(|err| unreadable(display, &err))?;
        // Read at most what is left of the budget plus one byte: a file growing while it is
        // copied cannot take more.
        let budget = limit - self.bytes;
        let copied = std::io::copy(&mut input.take(budget + 1), &mut output)
            .and_then(|n| output.flush().map(|()| n))
            .map_err(|err| unreadable(display, &err))?;
        if copied > budget {
            return Err(RenderError::TooLarge { limit });
        }
        self.bytes += copied;
        set_mode(dest, WRITABLE_FILE_MODE, display)
    }

    fn count_entry(&mut self) -> Result<(), RenderError> {
        if self.entries >= self.limits.max_files {
            return Err(RenderError::TooManyFiles { limit: self.limits.max_files });
        }
        self.entries += 1;
        Ok(())
    }

    fn source_path(&self, components: &[String]) -> PathBuf {
        components.iter().fold(self.source.to_path_buf(), |path, part| path.join(part))
    }
}

/// Set `file_mode` on every file and `dir_mode` on every directory under `root` (and on `root`).
/// Directories are made writable/searchable before their children are visited when opening up,
/// and closed after their children when sealing, so the walk never locks itself out.
fn set_modes(root: &Path, file_mode: u32, dir_mode: u32) -> Result<(), RenderError> {
    let display = WORKSPACE_DISPLAY;
    let opening = dir_mode & 0o200 != 0;
    if opening {
        set_mode(root, dir_mode, display)?;
    }
    let entries = fs::read_dir(root).map_err(|err| unreadable(display, &err))?;
    for entry in entries {
        let entry = entry.map_err(|err| unreadable(display, &err))?;
        let kind = entry.file_type().map_err(|err| unreadable(display, &err))?;
        if kind.is_dir() {
            set_modes(&entry.path(), file_mode, dir_mode)?;
        } else if kind.is_file() {
            set_mode(&entry.path(), file_mode, display)?;
        }
    }
    if !opening {
        set_mode(root, dir_mode, display)?;
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32, display: &str) -> Result<(), RenderError> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|err| unreadable(display, &err))
}

fn display_or_root(display: &str) -> String {
    if display.is_empty() { ".".to_owned() } else { display.to_owned() }
}

/// An I/O failure, naming the repository path and the kind of error only.
fn unreadable(display: &str, err: &std::io::Error) -> RenderError {
    RenderError::Unreadable { path: display.to_owned(), reason: err.kind().to_string() }
}
