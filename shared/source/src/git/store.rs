//! The on-disk cache: layout, per-key locking, read-only trees and least-recently-used eviction.
//!
//! ```text
//! ROOT/locks/KEY.lock          exclusive while a process works on KEY (never deleted)
//! ROOT/KEY/used                mtime = last use of KEY
//! ROOT/KEY/repo/               bare repository (gix), shallow
//! ROOT/KEY/trees/COMMIT/       read-only checkout of COMMIT's tree
//! ROOT/KEY/trees/COMMIT.lock   shared while a CheckedOutTree is alive; mtime = last use
//! ```

use std::{
    collections::{HashMap, HashSet},
    ffi::OsStr,
    fs::{self, File},
    os::unix::{
        ffi::OsStrExt,
        fs::{OpenOptionsExt, PermissionsExt},
    },
    path::{Path, PathBuf},
    sync::{
        Condvar, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::SystemTime,
};

use gix::ObjectId;

use super::{FetchRequest, GitError, Resolved, cache_key, fetch, is_full_commit, key_dir};
use kuvryn_sync_core::checkout::{CheckoutBudget, CheckoutLimitExceeded, CheckoutLimits};
use kuvryn_sync_core::redact::Redactor;

/// Deepest directory nesting [`TreeIds`] looks through.
const MAX_TREE_DEPTH: usize = 256;

/// Refused checkouts remembered (key and commit), so a poll of a refused commit does not walk
/// its tree again; cleared when full.
const MAX_REFUSED: usize = 1024;

/// Counters over the lifetime of a [`GitCache`], for tests, benchmarks and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Ref listings made (one per remote interaction).
    pub ref_listings: u64,
    /// Fetches that received objects.
    pub fetches: u64,
    /// Trees checked out.
    pub trees_written: u64,
    /// Trees and repositories removed to stay under the size bound.
    pub evictions: u64,
}

#[derive(Debug, Default)]
struct Counters {
    ref_listings: AtomicU64,
    fetches: AtomicU64,
    trees_written: AtomicU64,
    evictions: AtomicU64,
}

/// The Git cache. Cheap to share behind an `Arc`; every method blocks.
#[derive(Debug)]
pub struct GitCache {
    root: PathBuf,
    max_bytes: u64,
    limits: CheckoutLimits,
    refused: Mutex<HashMap<String, String>>,
    busy: Mutex<HashSet<String>>,
    released: Condvar,
    counters: Counters,
}

/// A read-only directory holding a commit's tree. The cache does not evict it while this value is
/// alive (in this or any other process).
#[derive(Debug)]
pub struct CheckedOutTree {
    path: PathBuf,
    commit: String,
    _lock: File,
}

impl CheckedOutTree {
    /// The directory; everything in it is read-only.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The full commit id.
    pub fn commit(&self) -> &str {
        &self.commit
    }

    /// The Git object ids of paths in this commit's tree ([`TreeIds`]), read from the cache's
    /// repository; `None` when it cannot be opened.
    pub fn tree_ids(&self) -> Option<TreeIds> {
        TreeIds::of_checkout(&self.path)
    }

    /// The Git id of the tree (or file) at the repository-relative `path`, when its content is
    /// all in the repository ([`TreeIds::id`]).
    pub fn tree_id(&self, path: &str) -> Option<String> {
        self.tree_ids()?.id(path)
    }
}

/// Git object ids of paths in one commit, read from the cache's bare repository: two commits that
/// leave a directory untouched give it the same id, so whatever was made from that directory can
/// be reused. Blocking (reads objects from disk); not shared between threads.
pub struct TreeIds {
    repo: gix::Repository,
    root: ObjectId,
}

impl std::fmt::Debug for TreeIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeIds").field("root", &self.root.to_string()).finish()
    }
}

/// One entry of a tree: its kind and id.
type TreeEntry = (gix::object::tree::EntryKind, ObjectId);

impl TreeIds {
    /// The ids of the commit checked out at `dir`, a directory [`GitCache::tree`] handed out
    /// (`ROOT/KEY/trees/COMMIT`); `None` for any other directory or when the repository or the
    /// commit cannot be read.
    pub fn of_checkout(dir: &Path) -> Option<TreeIds> {
        let commit = dir.file_name()?.to_str()?;
        let trees = dir.parent()?;
        if !is_full_commit(commit) || trees.file_name()? != "trees" {
            return None;
        }
        let repo_dir = trees.parent()?.join("repo");
        let repo = gix::open_opts(&repo_dir, gix::open::Options::isolated()).ok()?;
        let id = ObjectId::from_hex(commit.as_bytes()).ok()?;
        let root = repo.find_commit(id).ok()?.tree_id().ok()?.detach();
        Some(TreeIds { repo, root })
    }

    /// The hex id of the tree or file at the repository-relative `path` (`.` or empty for the
    /// root). `None` when the path is missing, climbs with `..`, passes through a symbolic link,
    /// or names a tree holding a symbolic link or submodule anywhere below it: such content is
    /// not covered by the id, so nothing may be keyed on it.
    pub fn id(&self, path: &str) -> Option<String> {
        use gix::object::tree::EntryKind;
        let (kind, id) = self.entry(path)?;
        match kind {
            EntryKind::Blob | EntryKind::BlobExecutable => Some(id.to_string()),
            EntryKind::Tree => {
                self.self_contained(id, 0, &mut HashSet::new()).then(|| id.to_string())
            }
            EntryKind::Link | EntryKind::Commit => None,
        }
    }

    /// The bytes of the regular file at `path`, if it is one and holds at most `max_bytes`.
    pub fn file(&self, path: &str, max_bytes: u64) -> Option<Vec<u8>> {
        use gix::object::tree::EntryKind;
        let (kind, id) = self.entry(path)?;
        if !matches!(kind, EntryKind::Blob | EntryKind::BlobExecutable) {
            return None;
        }
        if self.repo.find_header(id).ok()?.size() > max_bytes {
            return None; // refused unread
        }
        Some(self.repo.find_blob(id).ok()?.data.to_vec())
    }

    /// Whether `path` names a directory (a tree) in this commit.
    pub fn is_dir(&self, path: &str) -> bool {
        self.entry(path).is_some_and(|(kind, _)| kind == gix::object::tree::EntryKind::Tree)
    }

    /// The entry at `path`, following no symbolic link.
    fn entry(&self, path: &str) -> Option<TreeEntry> {
        use gix::object::tree::EntryKind;
        let mut current = (EntryKind::Tree, self.root);
        for component in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
            if component == ".." || current.0 != EntryKind::Tree {
                return None;
            }
            // Found in place: a monorepo folder may hold thousands of entries, and every
            // Application's render key looks one up.
            let tree = self.repo.find_tree(current.1).ok()?;
            let found = tree.find_entry(component)?;
            current = (found.mode().kind(), found.oid().to_owned());
        }
        Some(current)
    }

    /// The entries of tree `id`: name, kind, id.
    fn entries(
        &self,
        id: ObjectId,
    ) -> Option<Vec<(Vec<u8>, gix::object::tree::EntryKind, ObjectId)>> {
        let tree = self.repo.find_tree(id).ok()?;
        let decoded = tree.decode().ok()?;
        Some(
            decoded
                .entries
                .iter()
                .map(|e| (e.filename.to_vec(), e.mode.kind(), e.oid.to_owned()))
                .collect(),
        )
    }

    /// Whether tree `id` holds only files and trees (no symbolic link or submodule) all the way
    /// down. Each distinct subtree is looked at once (`seen`), so trees that share subtrees
    /// cost their distinct objects, not their paths.
    fn self_contained(&self, id: ObjectId, depth: usize, seen: &mut HashSet<ObjectId>) -> bool {
        use gix::object::tree::EntryKind;
        if depth > MAX_TREE_DEPTH {
            return false;
        }
        if !seen.insert(id) {
            return true; // already found self-contained (a failure stops the walk)
        }
        let Some(entries) = self.entries(id) else { return false };
        entries.into_iter().all(|(_, kind, child)| match kind {
            EntryKind::Blob | EntryKind::BlobExecutable => true,
            EntryKind::Tree => self.self_contained(child, depth + 1, seen),
            EntryKind::Link | EntryKind::Commit => false,
        })
    }
}

/// Exclusive use of one key: in-process set membership plus the key's lock file.
struct KeyGuard<'a> {
    cache: &'a GitCache,
    key: String,
    _file: File,
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        let mut busy = self.cache.busy.lock().unwrap_or_else(|p| p.into_inner());
        busy.remove(&self.key);
        self.cache.released.notify_all();
    }
}

fn io_err(
    redactor: &Redactor,
    context: &str,
    path: &Path,
) -> impl FnOnce(std::io::Error) -> GitError {
    let redactor = redactor.clone();
    let context = context.to_owned();
    let path = path.to_owned();
    move |e| GitError::cache_io(&redactor, &context, &path, e)
}

fn touch(path: &Path) {
    let file = fs::OpenOptions::new().create(true).truncate(false).write(true).open(path);
    if let Ok(file) = file {
        let _ = file.set_modified(SystemTime::now());
    }
}

fn modified(path: &Path) -> SystemTime {
    fs::metadata(path).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH)
}

/// Bytes used by files below `path` (symlinks not followed).
fn dir_size(path: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![path.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}

/// Make everything below `path` writable again and remove it.
fn remove_tree(path: &Path) -> std::io::Result<()> {
    let mut stack = vec![path.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(meta) = dir.symlink_metadata() else { continue };
        if !meta.is_dir() {
            continue;
        }
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
        for entry in fs::read_dir(&dir)?.flatten() {
            stack.push(entry.path());
        }
    }
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn open_lock_file(path: &Path) -> std::io::Result<File> {
    fs::OpenOptions::new().create(true).truncate(false).read(true).write(true).open(path)
}

impl GitCache {
    /// A cache under `dir` (created if missing) that evicts least recently used data above
    /// `max_bytes`. The process must have installed a rustls crypto provider first (HTTPS
    /// remotes need it); without one this is an error, not a panic at the first fetch.
    pub fn new(dir: impl Into<PathBuf>, max_bytes: u64) -> Result<Self, GitError> {
        let root = dir.into();
        let redactor = Redactor::new();
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            return Err(GitError::Cache {
                message: "no rustls crypto provider is installed in this process; install one \
                          before creating the Git cache \
                          (kuvryn_sync_runtime::tls::install_crypto_provider)"
                    .to_owned(),
            });
        }
        fs::create_dir_all(root.join("locks")).map_err(io_err(&redactor, "creating", &root))?;
        Ok(Self {
            root,
            max_bytes,
            limits: CheckoutLimits::default(),
            refused: Mutex::new(HashMap::new()),
            busy: Mutex::new(HashSet::new()),
            released: Condvar::new(),
            counters: Counters::default(),
        })
    }

    /// This cache with `limits` on every checkout [`GitCache::tree`] writes (default:
    /// [`CheckoutLimits::default`]).
    pub fn with_limits(mut self, limits: CheckoutLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The checkout limits in force.
    pub fn limits(&self) -> CheckoutLimits {
        self.limits
    }

    /// The message a checkout of `commit` under `key` was refused with earlier, if any.
    fn refused(&self, key: &str, commit: &str) -> Option<String> {
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        refused.get(&format!("{key}/{commit}")).cloned()
    }

    fn remember_refused(&self, key: &str, commit: &str, message: &str) {
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if refused.len() >= MAX_REFUSED {
            refused.clear();
        }
        refused.insert(format!("{key}/{commit}"), message.to_owned());
    }

    /// The cache directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where `req`'s fetched data lives (one directory per URL and credential identity).
    pub fn entry_dir(&self, req: &FetchRequest) -> PathBuf {
        key_dir(&self.root, &cache_key(&req.url, &req.cache_identity))
    }

    /// Counters since this cache was created.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            ref_listings: self.counters.ref_listings.load(Ordering::Relaxed),
            fetches: self.counters.fetches.load(Ordering::Relaxed),
            trees_written: self.counters.trees_written.load(Ordering::Relaxed),
            evictions: self.counters.evictions.load(Ordering::Relaxed),
        }
    }

    /// Bytes the cache uses on disk now.
    pub fn size_on_disk(&self) -> u64 {
        dir_size(&self.root)
    }

    /// Resolve `req.revision` on the remote to a commit, fetching it (shallowly) only when the
    /// cache lacks it. A poll with nothing new lists refs once and fetches nothing.
    pub fn resolve(&self, req: &FetchRequest) -> Result<Resolved, GitError> {
        let redactor = req.redactor();
        let shown_url = redactor.redact(&req.url);
        let key = cache_key(&req.url, &req.cache_identity);
        let outcome = {
            let _guard = self.lock_key(&key, &redactor)?;
            let mut repo = self.open_repo(&key, &redactor)?;
            let outcome = fetch::resolve(&mut repo, req, &redactor, &shown_url)?;
            touch(&key_dir(&self.root, &key).join("used"));
            outcome
        };
        self.counters.ref_listings.fetch_add(u64::from(outcome.refs_listed), Ordering::Relaxed);
        if outcome.fetched {
            self.counters.fetches.fetch_add(1, Ordering::Relaxed);
            self.enforce_bound(&key);
        }
        Ok(Resolved {
            commit: outcome.commit.to_string(),
            fetched: outcome.fetched,
            refs_listed: outcome.refs_listed,
        })
    }

    /// A read-only checkout of `commit`'s tree, written once per commit; fetches the commit first
    /// if the cache lacks it.
    pub fn tree(&self, req: &FetchRequest, commit: &str) -> Result<CheckedOutTree, GitError> {
        let redactor = req.redactor();
        if !is_full_commit(commit) {
            return Err(GitError::InvalidRevision {
                revision: redactor.redact(commit),
                rule: "a checkout needs a full 40-hex commit id",
            });
        }
        let commit = commit.to_ascii_lowercase();
        let key = cache_key(&req.url, &req.cache_identity);
        let entry = key_dir(&self.root, &key);
        let trees = entry.join("trees");
        let dir = trees.join(&commit);
        let lock_path = trees.join(format!("{commit}.lock"));
        let (lock, wrote, fetched) = {
            let _guard = self.lock_key(&key, &redactor)?;
            let mut wrote = false;
            let mut fetched = false;
            if !dir.is_dir() {
                let mut repo = self.open_repo(&key, &redactor)?;
                let id = ObjectId::from_hex(commit.as_bytes())
                    .map_err(|e| GitError::cache(&redactor, "commit id", e))?;
                if !repo.has_object(id) {
                    let mut by_commit = req.clone();
                    by_commit.revision = commit.clone();
                    let shown_url = redactor.redact(&req.url);
                    let outcome = fetch::resolve(&mut repo, &by_commit, &redactor, &shown_url)?;
                    self.counters
                        .ref_listings
                        .fetch_add(u64::from(outcome.refs_listed), Ordering::Relaxed);
                    if outcome.fetched {
                        self.counters.fetches.fetch_add(1, Ordering::Relaxed);
                        fetched = true;
                    }
                }
                fs::create_dir_all(&trees).map_err(io_err(&redactor, "creating", &trees))?;
                // Leftovers of a writer that died; we hold the key, so no writer is active.
                if let Ok(entries) = fs::read_dir(&trees) {
                    for e in entries.flatten() {
                        if e.file_name().as_bytes().starts_with(b".tmp-") {
                            let _ = remove_tree(&e.path());
                        }
                    }
                }
                let tmp = trees.join(format!(".tmp-{commit}-{}", std::process::id()));
                let tree_id = repo
                    .find_commit(id)
                    .and_then(|c| c.tree_id().map(|t| t.detach()))
                    .map_err(|e| GitError::cache(&redactor, "reading the commit", e))?;
                if let Some(refused) = self.refused(&key, &commit) {
                    return Err(GitError::CheckoutLimit {
                        commit: commit.clone(),
                        message: refused,
                    });
                }
                match check_limits(&repo, tree_id, self.limits) {
                    Ok(()) => {}
                    Err(CheckoutError::Limit(exceeded)) => {
                        let message = redactor.redact(&exceeded.to_string());
                        self.remember_refused(&key, &commit, &message);
                        return Err(GitError::CheckoutLimit { commit: commit.clone(), message });
                    }
                    Err(CheckoutError::Read(e)) => {
                        return Err(GitError::cache(&redactor, "reading the tree", e));
                    }
                }
                let mut buf = Vec::new();
                if let Err(e) = write_tree(&repo, tree_id, &tmp, 0, self.limits.max_depth, &mut buf)
                {
                    let _ = remove_tree(&tmp);
                    return Err(GitError::cache(&redactor, "checking out the tree", e));
                }
                fs::rename(&tmp, &dir).map_err(io_err(&redactor, "renaming", &tmp))?;
                self.counters.trees_written.fetch_add(1, Ordering::Relaxed);
                wrote = true;
            }
            let lock =
                open_lock_file(&lock_path).map_err(io_err(&redactor, "opening", &lock_path))?;
            lock.lock_shared().map_err(io_err(&redactor, "locking", &lock_path))?;
            let _ = lock.set_modified(SystemTime::now());
            touch(&entry.join("used"));
            (lock, wrote, fetched)
        };
        if wrote || fetched {
            self.enforce_bound(&key);
        }
        Ok(CheckedOutTree { path: dir, commit, _lock: lock })
    }

    /// Wait for exclusive use of `key` in this process, then in all processes.
    fn lock_key(&self, key: &str, redactor: &Redactor) -> Result<KeyGuard<'_>, GitError> {
        {
            let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
            while busy.contains(key) {
                busy = self.released.wait(busy).unwrap_or_else(|p| p.into_inner());
            }
            busy.insert(key.to_owned());
        }
        let release = |cache: &GitCache| {
            let mut busy = cache.busy.lock().unwrap_or_else(|p| p.into_inner());
            busy.remove(key);
            cache.released.notify_all();
        };
        let path = self.root.join("locks").join(format!("{key}.lock"));
        let file = match open_lock_file(&path).and_then(|f| f.lock().map(|()| f)) {
            Ok(file) => file,
            Err(e) => {
                release(self);
                return Err(GitError::cache_io(redactor, "locking", &path, e));
            }
        };
        Ok(KeyGuard { cache: self, key: key.to_owned(), _file: file })
    }

    /// Exclusive use of `key` only if nobody holds it now.
    fn try_lock_key(&self, key: &str) -> Option<KeyGuard<'_>> {
        {
            let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
            if busy.contains(key) {
                return None;
            }
            busy.insert(key.to_owned());
        }
        let path = self.root.join("locks").join(format!("{key}.lock"));
        let file = open_lock_file(&path).ok().filter(|f| f.try_lock().is_ok());
        match file {
            Some(file) => Some(KeyGuard { cache: self, key: key.to_owned(), _file: file }),
            None => {
                let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
                busy.remove(key);
                self.released.notify_all();
                None
            }
        }
    }

    /// Open the key's bare repository, creating it (or recreating a broken one).
    fn open_repo(&self, key: &str, redactor: &Redactor) -> Result<gix::Repository, GitError> {
        let path = key_dir(&self.root, key).join("repo");
        if path.join("HEAD").is_file()
            && let Ok(repo) = gix::open_opts(&path, gix::open::Options::isolated())
        {
            return Ok(repo);
        }
        let _ = remove_tree(&path);
        fs::create_dir_all(&path).map_err(io_err(redactor, "creating", &path))?;
        gix::ThreadSafeRepository::init_opts(
            &path,
            gix::create::Kind::Bare,
            gix::create::Options::default(),
            gix::open::Options::isolated(),
        )
        .map(|r| r.to_thread_local())
        .map_err(|e| GitError::cache(redactor, "creating the cache repository", e))
    }

    /// Remove least recently used trees and repositories until the cache fits `max_bytes`. Never
    /// removes `current`'s repository, a tree in use, or anything of a key another thread or
    /// process holds.
    fn enforce_bound(&self, current: &str) {
        struct Unit {
            key: String,
            tree: Option<String>,
            used: SystemTime,
            size: u64,
        }
        let Ok(entries) = fs::read_dir(&self.root) else { return };
        let mut units = Vec::new();
        let mut total = 0u64;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(key) = name.to_str() else { continue };
            if key == "locks" || !entry.path().is_dir() {
                continue;
            }
            let dir = entry.path();
            let repo_size = dir_size(&dir.join("repo"));
            total += repo_size;
            units.push(Unit {
                key: key.to_owned(),
                tree: None,
                used: modified(&dir.join("used")),
                size: repo_size,
            });
            let Ok(trees) = fs::read_dir(dir.join("trees")) else { continue };
            for tree in trees.flatten() {
                let tname = tree.file_name();
                let Some(commit) = tname.to_str() else { continue };
                if !is_full_commit(commit) || !tree.path().is_dir() {
                    continue;
                }
                let size = dir_size(&tree.path());
                total += size;
                units.push(Unit {
                    key: key.to_owned(),
                    tree: Some(commit.to_owned()),
                    used: modified(&dir.join("trees").join(format!("{commit}.lock"))),
                    size,
                });
            }
        }
        if total <= self.max_bytes {
            return;
        }
        units.sort_by_key(|u| u.used);
        let mut removed_trees: HashMap<String, HashSet<String>> = HashMap::new();
        let mut removed_keys: HashSet<String> = HashSet::new();
        let tree_sizes: HashMap<(String, String), u64> = units
            .iter()
            .filter_map(|u| u.tree.clone().map(|t| ((u.key.clone(), t), u.size)))
            .collect();
        for unit in &units {
            if total <= self.max_bytes {
                break;
            }
            if removed_keys.contains(&unit.key) {
                continue;
            }
            if unit.tree.is_none() && unit.key == current {
                continue;
            }
            let Some(_guard) = self.try_lock_key(&unit.key) else { continue };
            let dir = key_dir(&self.root, &unit.key);
            match &unit.tree {
                Some(commit) => {
                    if removed_trees.get(&unit.key).is_some_and(|s| s.contains(commit)) {
                        continue;
                    }
                    let lock_path = dir.join("trees").join(format!("{commit}.lock"));
                    let Ok(lock) = open_lock_file(&lock_path) else { continue };
                    if lock.try_lock().is_err() {
                        continue; // in use
                    }
                    if remove_tree(&dir.join("trees").join(commit)).is_ok() {
                        total = total.saturating_sub(unit.size);
                        removed_trees.entry(unit.key.clone()).or_default().insert(commit.clone());
                        self.counters.evictions.fetch_add(1, Ordering::Relaxed);
                    }
                }
                None => {
                    // The whole key, only when none of its trees is in use.
                    let mut locks = Vec::new();
                    let mut in_use = false;
                    let mut remaining = 0u64;
                    if let Ok(trees) = fs::read_dir(dir.join("trees")) {
                        for t in trees.flatten() {
                            let n = t.file_name();
                            let Some(c) = n.to_str().and_then(|n| n.strip_suffix(".lock")) else {
                                continue;
                            };
                            match open_lock_file(&t.path()) {
                                Ok(lock) if lock.try_lock().is_ok() => locks.push(lock),
                                _ => in_use = true,
                            }
                            if !removed_trees.get(&unit.key).is_some_and(|s| s.contains(c)) {
                                remaining += tree_sizes
                                    .get(&(unit.key.clone(), c.to_owned()))
                                    .copied()
                                    .unwrap_or(0);
                            }
                        }
                    }
                    if in_use {
                        continue;
                    }
                    if remove_tree(&dir).is_ok() {
                        total = total.saturating_sub(unit.size + remaining);
                        removed_keys.insert(unit.key.clone());
                        self.counters.evictions.fetch_add(1, Ordering::Relaxed);
                    }
                    drop(locks);
                }
            }
        }
    }
}

/// Whether a tree entry name is safe to create in a directory.
fn safe_component(name: &[u8]) -> bool {
    !(name.is_empty()
        || name == b"."
        || name == b".."
        || name.eq_ignore_ascii_case(b".git")
        || name.contains(&b'/')
        || name.contains(&0))
}

/// The paths of `root`'s tree, charged to a [`CheckoutBudget`] before anything is written: each
/// entry once, blob and link sizes from the object header (the blob is not read). A tree that
/// names a shared subtree many times is refused after `max_files` entries, never expanded.
fn check_limits(
    repo: &gix::Repository,
    root: ObjectId,
    limits: CheckoutLimits,
) -> Result<(), CheckoutError> {
    use gix::object::tree::EntryKind;
    let mut budget = CheckoutBudget::new(limits);
    // A blob named many times (a bomb's leaves) has its header read once.
    let mut sizes: HashMap<ObjectId, u64> = HashMap::new();
    let mut stack: Vec<(ObjectId, usize, String)> = vec![(root, 0, String::new())];
    while let Some((id, depth, prefix)) = stack.pop() {
        let tree = repo.find_tree(id).map_err(|e| CheckoutError::Read(e.to_string()))?;
        let decoded = tree.decode().map_err(|e| CheckoutError::Read(e.to_string()))?;
        for entry in &decoded.entries {
            let path = if prefix.is_empty() {
                String::from_utf8_lossy(entry.filename).into_owned()
            } else {
                format!("{prefix}/{}", String::from_utf8_lossy(entry.filename))
            };
            let kind = entry.mode.kind();
            let size = match kind {
                EntryKind::Blob | EntryKind::BlobExecutable | EntryKind::Link => {
                    let oid = entry.oid.to_owned();
                    Some(match sizes.get(&oid) {
                        Some(size) => *size,
                        None => {
                            let size = repo
                                .find_header(oid)
                                .map_err(|e| CheckoutError::Read(e.to_string()))?
                                .size();
                            sizes.insert(oid, size);
                            size
                        }
                    })
                }
                EntryKind::Tree | EntryKind::Commit => None,
            };
            budget.charge(&path, depth + 1, size).map_err(CheckoutError::Limit)?;
            if kind == EntryKind::Tree {
                stack.push((entry.oid.to_owned(), depth + 1, path));
            }
        }
    }
    Ok(())
}

/// Why a tree was not checked out.
#[derive(Debug)]
enum CheckoutError {
    /// A checkout limit; nothing was written.
    Limit(CheckoutLimitExceeded),
    /// The objects could not be read.
    Read(String),
}

/// Write the tree `id` into the new directory `dir`, then make it read-only. Run only after
/// [`check_limits`] accepted the tree. Each blob is decoded into `buf`, one reused buffer no
/// larger than the largest file allowed (gix decodes packed, deltified objects whole; there is
/// no streaming read for them), and written to its file from there.
fn write_tree(
    repo: &gix::Repository,
    id: ObjectId,
    dir: &Path,
    depth: usize,
    max_depth: usize,
    buf: &mut Vec<u8>,
) -> Result<(), String> {
    use gix::object::tree::EntryKind;
    use gix::objs::Find;
    use std::io::Write;
    if depth > max_depth {
        return Err(format!("tree nesting deeper than {max_depth}"));
    }
    fs::create_dir(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let entries: Vec<(Vec<u8>, EntryKind, ObjectId)> = {
        let tree = repo.find_tree(id).map_err(|e| e.to_string())?;
        let decoded = tree.decode().map_err(|e| e.to_string())?;
        decoded
            .entries
            .iter()
            .map(|e| (e.filename.to_vec(), e.mode.kind(), e.oid.to_owned()))
            .collect()
    };
    let read_blob = |oid: ObjectId, buf: &mut Vec<u8>| -> Result<(), String> {
        match repo.objects.try_find(&oid, buf).map_err(|e| e.to_string())? {
            Some(data) if data.kind == gix::object::Kind::Blob => Ok(()),
            Some(_) => Err(format!("object {oid} is not a blob")),
            None => Err(format!("object {oid} is missing")),
        }
    };
    for (name, kind, oid) in entries {
        if !safe_component(&name) {
            return Err(format!(
                "unsafe path component {:?} in the tree",
                String::from_utf8_lossy(&name)
            ));
        }
        let path = dir.join(OsStr::from_bytes(&name));
        match kind {
            EntryKind::Tree => write_tree(repo, oid, &path, depth + 1, max_depth, buf)?,
            EntryKind::Blob | EntryKind::BlobExecutable => {
                read_blob(oid, buf)?;
                let mode = if kind == EntryKind::BlobExecutable { 0o555 } else { 0o444 };
                let mut file = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(mode)
                    .open(&path)
                    .map_err(|e| format!("creating {}: {e}", path.display()))?;
                file.write_all(buf).map_err(|e| format!("writing {}: {e}", path.display()))?;
            }
            EntryKind::Link => {
                read_blob(oid, buf)?;
                std::os::unix::fs::symlink(OsStr::from_bytes(buf), &path)
                    .map_err(|e| format!("linking {}: {e}", path.display()))?;
            }
            // Submodules are not fetched: an empty, read-only directory marks them.
            EntryKind::Commit => {
                fs::create_dir(&path).map_err(|e| e.to_string())?;
                fs::set_permissions(&path, fs::Permissions::from_mode(0o555))
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o555)).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Run the real `git` with no user or system configuration; returns its trimmed stdout.
    fn git(dir: &Path, args: &[&str]) -> String {
        let output = Command::new("git")
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .output()
            .expect("git runs");
        assert!(
            output.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("utf-8").trim().to_owned()
    }

    /// Commit `files` in `work` and push to the bare repository at `repo`; returns the commit.
    fn commit(work: &Path, repo: &Path, files: &[(&str, &str)]) -> String {
        for (path, content) in files {
            let file = work.join(path);
            fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
            fs::write(&file, content).expect("write");
        }
        git(work, &["add", "--all"]);
        git(work, &["commit", "--quiet", "--allow-empty", "-m", "c"]);
        git(work, &["push", "--quiet", &repo.to_string_lossy(), "HEAD:refs/heads/main"]);
        git(work, &["rev-parse", "HEAD"])
    }

    #[test]
    fn tree_ids_are_git_ids_that_move_only_with_their_content() {
        let root = tempfile::tempdir().expect("tempdir");
        let repo = root.path().join("KEY/repo");
        let work = root.path().join("work");
        fs::create_dir_all(&repo).expect("mkdir");
        fs::create_dir_all(&work).expect("mkdir");
        git(&repo, &["init", "--quiet", "--bare"]);
        git(&work, &["init", "--quiet"]);
        std::os::unix::fs::symlink("../a/cm.yaml", work.join("link")).expect("symlink");
        fs::create_dir_all(work.join("apps/linked")).expect("mkdir");
        std::os::unix::fs::symlink("../a/cm.yaml", work.join("apps/linked/cm.yaml"))
            .expect("symlink");
        let first =
            commit(&work, &repo, &[("apps/a/cm.yaml", "a: 1\n"), ("apps/b/cm.yaml", "b: 1\n")]);
        let ids = TreeIds::of_checkout(&root.path().join("KEY/trees").join(&first)).expect("opens");
        let a = ids.id("apps/a").expect("a tree");
        assert_eq!(a, git(&work, &["rev-parse", "HEAD:apps/a"]), "the Git tree id");
        assert_eq!(ids.id("./apps/a/"), Some(a.clone()), "spelled differently, the same path");
        assert_eq!(
            ids.id("apps/a/cm.yaml"),
            Some(git(&work, &["rev-parse", "HEAD:apps/a/cm.yaml"]))
        );
        assert_eq!(ids.file("apps/a/cm.yaml", 100), Some(b"a: 1\n".to_vec()));
        assert_eq!(ids.file("apps/a/cm.yaml", 2), None, "larger than the bound");
        assert!(ids.is_dir("apps/a") && !ids.is_dir("apps/a/cm.yaml"));
        for uncovered in ["apps/linked", "apps", ".", "link", "apps/../apps/a", "apps/none"] {
            assert_eq!(ids.id(uncovered), None, "{uncovered}: a link, a climb or missing");
        }
        let second = commit(&work, &repo, &[("apps/b/cm.yaml", "b: 2\n")]);
        let later =
            TreeIds::of_checkout(&root.path().join("KEY/trees").join(&second)).expect("opens");
        assert_eq!(later.id("apps/a"), Some(a), "an untouched folder keeps its id");
        assert_ne!(later.id("apps/b"), ids.id("apps/b"), "a changed folder gets a new id");
        assert!(TreeIds::of_checkout(&root.path().join("KEY/other").join(&second)).is_none());
        assert!(TreeIds::of_checkout(&root.path().join("KEY/trees/main")).is_none());
    }

    /// A bare repository at `req`'s cache entry, as `git` builds it, so [`GitCache::tree`] finds
    /// the commits there and fetches nothing.
    fn cache_repo(cache: &GitCache, req: &FetchRequest) -> PathBuf {
        let repo = cache.entry_dir(req).join("repo");
        fs::create_dir_all(&repo).expect("mkdir");
        git(&repo, &["init", "--quiet", "--bare"]);
        repo
    }

    /// Run `git` with `input` on stdin; returns its trimmed stdout.
    fn git_with_input(dir: &Path, args: &[&str], input: &str) -> String {
        use std::io::Write;
        let mut child = Command::new("git")
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("git runs");
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("stdin");
        let output = child.wait_with_output().expect("git ends");
        assert!(output.status.success(), "git {args:?}");
        String::from_utf8(output.stdout).expect("utf-8").trim().to_owned()
    }

    /// A commit whose tree nests `levels` trees of `width` entries, every entry of a level the
    /// same subtree, over `width` copies of one small file: `width^(levels+1)` paths in
    /// `levels + 2` objects.
    fn bomb(repo: &Path, levels: usize, width: usize) -> String {
        let blob = git_with_input(repo, &["hash-object", "-w", "--stdin"], "kind: bomb\n");
        let leaves: String = (0..width).map(|i| format!("100644 blob {blob}\tf{i}\n")).collect();
        let mut tree = git_with_input(repo, &["mktree"], &leaves);
        for _ in 0..levels {
            let dirs: String = (0..width).map(|i| format!("040000 tree {tree}\td{i}\n")).collect();
            tree = git_with_input(repo, &["mktree"], &dirs);
        }
        git_with_input(repo, &["commit-tree", &tree], "bomb\n")
    }

    /// A commit of one file `name` holding `size` zero bytes, written sparse.
    fn big_file_commit(repo: &Path, scratch: &Path, name: &str, size: u64) -> String {
        let file = scratch.join("big");
        File::create(&file).and_then(|f| f.set_len(size)).expect("sparse file");
        let blob = git(repo, &["hash-object", "-w", &file.to_string_lossy()]);
        let tree = git_with_input(repo, &["mktree"], &format!("100644 blob {blob}\t{name}\n"));
        git_with_input(repo, &["commit-tree", &tree], "big\n")
    }

    fn test_cache(dir: &Path) -> GitCache {
        kuvryn_sync_runtime::tls::install_crypto_provider();
        GitCache::new(dir.join("cache"), 1 << 40).expect("cache")
    }

    /// Nothing of `commit` (not even a temporary directory) was left under the entry's trees.
    fn assert_nothing_written(cache: &GitCache, req: &FetchRequest) {
        let trees = cache.entry_dir(req).join("trees");
        let left: Vec<_> = fs::read_dir(&trees)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.iter().all(|n| n.to_string_lossy().ends_with(".lock")), "written: {left:?}");
        assert_eq!(cache.stats().trees_written, 0);
    }

    #[test]
    fn a_git_bomb_is_refused_after_the_file_limit_without_expanding_or_writing_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = test_cache(dir.path());
        let req = FetchRequest::new("git://example.invalid/bomb.git", "main");
        let repo = cache_repo(&cache, &req);
        let commit = bomb(&repo, 9, 10); // 10^10 files
        let started = std::time::Instant::now();
        let err = cache.tree(&req, &commit).expect_err("refused");
        let took = started.elapsed();
        assert!(matches!(err, GitError::CheckoutLimit { .. }), "{err}");
        assert_eq!(err.reason(), kuvryn_sync_api::FailureReason::SourceFailure);
        let message = err.to_string();
        assert!(message.contains("more than 100000 paths"), "{message}");
        assert!(message.contains("--checkout-max-files"), "{message}");
        assert!(took < std::time::Duration::from_secs(30), "the walk took {took:?}");
        assert_nothing_written(&cache, &req);
        // Asking again answers from memory, with the same message.
        let again = cache.tree(&req, &commit).expect_err("still refused");
        assert_eq!(again.to_string(), message);
        assert_nothing_written(&cache, &req);
    }

    #[test]
    fn a_file_over_the_size_limit_is_refused_from_its_object_header() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = test_cache(dir.path());
        let req = FetchRequest::new("git://example.invalid/big.git", "main");
        let repo = cache_repo(&cache, &req);
        let limit = CheckoutLimits::default().max_file_bytes;
        let commit = big_file_commit(&repo, dir.path(), "model.bin", limit + 1);
        let err = cache.tree(&req, &commit).expect_err("refused");
        let message = err.to_string();
        assert!(message.contains(&format!("a file of {} bytes", limit + 1)), "{message}");
        assert!(message.contains("\"model.bin\""), "{message}");
        assert!(message.contains("--checkout-max-file-bytes"), "{message}");
        assert_nothing_written(&cache, &req);
    }

    #[test]
    fn trees_within_the_limits_are_written_and_the_other_limits_refuse_theirs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = CheckoutLimits {
            max_files: 12,
            max_total_bytes: 3000,
            max_file_bytes: 1024,
            max_depth: 2,
        };
        let cache = test_cache(dir.path()).with_limits(limits);
        let req = FetchRequest::new("git://example.invalid/limits.git", "main");
        let repo = cache_repo(&cache, &req);
        // 1 + 10 + ... = a root of 3 dirs of 3 files: 12 paths, 9 files of 300 bytes.
        let content = "x".repeat(299) + "\n";
        let blob = git_with_input(&repo, &["hash-object", "-w", "--stdin"], &content);
        let files: String = (0..3).map(|i| format!("100644 blob {blob}\tf{i}.yaml\n")).collect();
        let sub = git_with_input(&repo, &["mktree"], &files);
        let dirs: String = (0..3).map(|i| format!("040000 tree {sub}\td{i}\n")).collect();
        let root = git_with_input(&repo, &["mktree"], &dirs);
        let fits = git_with_input(&repo, &["commit-tree", &root], "fits\n");
        let tree = cache.tree(&req, &fits).expect("within the limits");
        let written = fs::read(tree.path().join("d2/f1.yaml")).expect("written");
        assert_eq!(written, content.as_bytes());
        let mode = fs::metadata(tree.path().join("d2/f1.yaml")).expect("meta").permissions();
        assert_eq!(mode.mode() & 0o777, 0o444, "read-only");
        drop(tree);

        // A fourth directory: 16 paths.
        let four: String = (0..4).map(|i| format!("040000 tree {sub}\td{i}\n")).collect();
        let root4 = git_with_input(&repo, &["mktree"], &four);
        let more = git_with_input(&repo, &["commit-tree", &root4], "more\n");
        let err = cache.tree(&req, &more).expect_err("too many paths");
        assert!(err.to_string().contains("--checkout-max-files"), "{err}");

        // Bigger files: 9 x 400 bytes = 3600 bytes.
        let bigger = git_with_input(&repo, &["hash-object", "-w", "--stdin"], &"y".repeat(400));
        let files: String = (0..3).map(|i| format!("100644 blob {bigger}\tf{i}\n")).collect();
        let sub = git_with_input(&repo, &["mktree"], &files);
        let dirs: String = (0..3).map(|i| format!("040000 tree {sub}\td{i}\n")).collect();
        let root = git_with_input(&repo, &["mktree"], &dirs);
        let heavy = git_with_input(&repo, &["commit-tree", &root], "heavy\n");
        let err = cache.tree(&req, &heavy).expect_err("too many bytes");
        assert!(err.to_string().contains("--checkout-max-bytes"), "{err}");

        // Three levels of directories.
        let deep = bomb(&repo, 2, 1);
        let err = cache.tree(&req, &deep).expect_err("too deep");
        assert!(err.to_string().contains("--checkout-max-depth"), "{err}");
        assert_eq!(cache.stats().trees_written, 1, "only the tree within the limits");
    }
}
