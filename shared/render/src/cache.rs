//! The render cache: an Application is rendered again only when something that shapes its output
//! changed, never because the commit moved (DESIGN "Render only what changed", "Cache integrity").
//!
//! - [`KeyParts`] lists everything a render reads or depends on: the Git ids of the repository
//!   paths it reads ([`source_inputs`]: `spec.source.path`; for kustomize every local directory
//!   the reachable kustomizations reference, since an overlay reads `../base`; for Helm the chart
//!   directory and each values file), digests of the `valuesFrom` data and of the decryption keys
//!   (never the keys), the pulled chart's identity and digest, the whole `spec.source.render`,
//!   the destination namespace and the engines' identity. [`KeyParts::key`] hashes them
//!   (length-prefixed SHA-256) into a [`RenderKey`]. When a path's content is not covered by a
//!   Git id (a symbolic link, a remote kustomize base), [`source_inputs`] says so and the render
//!   is not cached at all.
//! - [`RenderCache`] maps keys to shared [`CachedRender`]s, bounded by entry count and evicting
//!   the least recently used. It is thread-safe and does no I/O. A cached output carries the
//!   secret values the render decrypted or read, so a hit registers them with the reconcile's
//!   redactor exactly like a fresh render.
//!
//! - [`InputsMemo`] remembers what [`source_inputs`] answered for a checkout: a checkout names one
//!   commit, whose content never changes, so a reconcile with nothing new computes its key
//!   without opening the repository.
//!
//! Hand-written: the LRU is a map plus a use-ordered index (about forty lines), which spares a
//! dependency for one structure; the key is our policy. The kustomization walk repeats the
//! render's pre-scan ([`crate::kustomize`]) over Git objects instead of a workspace, so no copy is
//! made just to compute a key.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use kuvryn_sync_core::desired::Rendered;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::kustomize::{
    KUSTOMIZATION_FILE_NAMES, MAX_KUSTOMIZATION_BYTES, MAX_KUSTOMIZATIONS, is_remote_entry,
};
use kuvryn_sync_api::RenderType;

/// Entries the controller keeps by default.
pub const DEFAULT_CAPACITY: usize = 1024;

/// A SHA-256 digest of some render input (values data, keys), never the input itself.
pub type InputDigest = [u8; 32];

/// The key of one render: a SHA-256 over its [`KeyParts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RenderKey([u8; 32]);

/// What identifies the engines: another program or library may render differently.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineIdentity {
    /// The kustomize program's path (and whether it runs as `kubectl kustomize`).
    pub kustomize: String,
    /// Whether remote kustomize bases are allowed.
    pub remote_bases: bool,
    /// The Helm library's path, when Helm is available.
    pub helm_library: Option<String>,
}

/// Everything that shapes one render's output.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeyParts {
    /// `spec.source.path`.
    pub source_path: String,
    /// Git object id of every repository path the render reads ([`source_inputs`]).
    pub inputs: BTreeMap<String, String>,
    /// The whole `spec.source.render`, as JSON.
    pub render: Value,
    /// `spec.destination.namespace`.
    pub destination_namespace: String,
    /// Digest of the `valuesFrom` data read ([`digest_entries`]), for Helm.
    pub values_from: Option<InputDigest>,
    /// Digest of the decryption keys' Secret data, when `spec.decryption` is set.
    pub decryption_keys: Option<InputDigest>,
    /// A pulled chart: repository, name, version and archive digest.
    pub chart: Option<String>,
    /// The engines.
    pub engine: EngineIdentity,
}

impl KeyParts {
    /// The key: every part, length-prefixed and in a fixed order, through SHA-256.
    pub fn key(&self) -> RenderKey {
        let mut hasher = Sha256::new();
        let mut field = |name: &str, value: &[u8]| {
            for part in [name.as_bytes(), value] {
                hasher.update((part.len() as u64).to_be_bytes());
                hasher.update(part);
            }
        };
        field("source.path", self.source_path.as_bytes());
        for (path, id) in &self.inputs {
            field("input.path", path.as_bytes());
            field("input.id", id.as_bytes());
        }
        field("render", self.render.to_string().as_bytes());
        field("destination.namespace", self.destination_namespace.as_bytes());
        field("valuesFrom", &optional(self.values_from.as_ref().map(|d| &d[..])));
        field("decryption", &optional(self.decryption_keys.as_ref().map(|d| &d[..])));
        field("chart", &optional(self.chart.as_deref().map(str::as_bytes)));
        field("engine.kustomize", self.engine.kustomize.as_bytes());
        field("engine.remoteBases", &[u8::from(self.engine.remote_bases)]);
        field("engine.helm", &optional(self.engine.helm_library.as_deref().map(str::as_bytes)));
        RenderKey(hasher.finalize().into())
    }
}

/// `None` and `Some(empty)` encoded differently.
fn optional(value: Option<&[u8]>) -> Vec<u8> {
    match value {
        None => vec![0],
        Some(bytes) => [&[1u8][..], bytes].concat(),
    }
}

/// A digest of named byte strings (Secret or ConfigMap data, values sources), independent of
/// their order.
pub fn digest_entries<'a>(entries: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> InputDigest {
    let sorted: BTreeMap<&str, &[u8]> = entries.into_iter().collect();
    let mut hasher = Sha256::new();
    for (name, value) in sorted {
        for part in [name.as_bytes(), value] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
    }
    hasher.finalize().into()
}

/// Read access to one commit's tree, by repository-relative path (`/`-separated).
pub trait SourceTree {
    /// The Git object id of the file or directory at `path`, or `None` when it is missing or its
    /// content is not all in the repository (a symbolic link in or below it).
    fn id(&self, path: &str) -> Option<String>;
    /// The bytes of the regular file at `path`, if it holds at most `max_bytes`.
    fn file(&self, path: &str, max_bytes: u64) -> Option<Vec<u8>>;
    /// Whether `path` is a directory.
    fn is_dir(&self, path: &str) -> bool;
}

/// What a render reads from the repository, for [`source_inputs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceShape<'a> {
    /// `spec.source.render.type`.
    pub render_type: RenderType,
    /// `spec.source.path`.
    pub path: &'a str,
    /// Helm `valuesFiles` (repository-relative).
    pub values_files: &'a [String],
    /// Whether the Helm chart is pulled (then the chart is not read from the repository).
    pub chart_pulled: bool,
}

/// The Git id of every repository path `shape`'s render reads, or `None` when the render may not
/// be cached (some content is not covered by a Git id, or the paths cannot be worked out: the
/// render itself reports why).
pub fn source_inputs(
    tree: &impl SourceTree,
    shape: &SourceShape<'_>,
) -> Option<BTreeMap<String, String>> {
    let source = normalise(shape.path)?;
    let paths: BTreeSet<String> = match shape.render_type {
        RenderType::Yaml => BTreeSet::from([source]),
        RenderType::Kustomize => kustomize_dirs(tree, &source)?,
        RenderType::Helm => {
            let mut paths = BTreeSet::new();
            if !shape.chart_pulled {
                paths.insert(source);
            }
            for file in shape.values_files {
                paths.insert(normalise(file)?);
            }
            paths
        }
    };
    paths.into_iter().map(|path| tree.id(&path).map(|id| (path, id))).collect()
}

/// A repository-relative path in one spelling (`a/b`, `.` for the root); `None` when it is
/// absolute or climbs with `..`.
fn normalise(path: &str) -> Option<String> {
    if path.starts_with('/') {
        return None;
    }
    let mut parts = Vec::new();
    for part in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if part == ".." {
            return None;
        }
        parts.push(part);
    }
    Some(if parts.is_empty() { ".".to_owned() } else { parts.join("/") })
}

/// `entry` resolved against directory `dir`, lexically; `None` when it leaves the repository.
fn join(dir: &str, entry: &str) -> Option<String> {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| *p != ".").collect();
    if entry.starts_with('/') {
        return None;
    }
    for part in entry.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if part == ".." {
            parts.pop()?;
        } else {
            parts.push(part);
        }
    }
    Some(if parts.is_empty() { ".".to_owned() } else { parts.join("/") })
}

/// Every directory (and file outside them) that the kustomization at `root` reads: itself and,
/// transitively, the local entries of its reference fields. `None` when a kustomization cannot be
/// read, an entry is remote or leaves the repository, or there are too many.
pub fn kustomize_dirs(tree: &impl SourceTree, root: &str) -> Option<BTreeSet<String>> {
    let mut read = BTreeSet::new();
    let mut pending = vec![root.to_owned()];
    let mut visited = 0usize;
    while let Some(dir) = pending.pop() {
        if !read.insert(dir.clone()) {
            continue;
        }
        visited += 1;
        if visited > MAX_KUSTOMIZATIONS {
            return None;
        }
        let text = KUSTOMIZATION_FILE_NAMES
            .iter()
            .find_map(|name| tree.file(&join(&dir, name)?, MAX_KUSTOMIZATION_BYTES))?;
        let kustomization: Value =
            kuvryn_sync_core::yaml::document(std::str::from_utf8(&text).ok()?).ok()?;
        for entry in reference_entries(&kustomization) {
            if is_remote_entry(&entry) {
                return None;
            }
            let target = join(&dir, entry.trim())?;
            if tree.is_dir(&target) {
                pending.push(target);
            } else if !target.starts_with(&format!("{dir}/")) {
                read.insert(target);
            }
        }
    }
    Some(read)
}

/// The local paths a kustomization names ([`crate::references`]), inline entries left out; for
/// a remote entry of any field, that entry (so the render is not cached).
fn reference_entries(kustomization: &Value) -> Vec<String> {
    crate::references::kustomization_references(kustomization)
        .references
        .into_iter()
        .filter(|reference| !reference.inline)
        .map(|reference| crate::references::entry_path(reference.kind, &reference.entry).to_owned())
        .collect()
}

/// One render's output, as kept in the cache.
#[derive(Clone, Default)]
pub struct CachedRender {
    /// The rendered objects.
    pub objects: Vec<Rendered>,
    /// Values the render decrypted or read from Secrets: register them with the redactor on
    /// every use.
    pub secrets: Vec<String>,
    /// `sha256:<hex>` of a pulled chart archive.
    pub chart_digest: Option<String>,
}

impl std::fmt::Debug for CachedRender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedRender")
            .field("objects", &self.objects.len())
            .field("secrets", &self.secrets.len())
            .field("chart_digest", &self.chart_digest)
            .finish()
    }
}

/// What [`source_inputs`] answers: the Git id of every path read, or `None` (not cacheable).
pub type SourceInputs = Option<BTreeMap<String, String>>;

/// [`source_inputs`] remembered per checkout and shape, so that a reconcile whose inputs are
/// unchanged computes its render key without opening the Git repository.
///
/// A checkout directory names one commit of one repository (the Git cache hands out
/// `ROOT/KEY/trees/COMMIT`, `KEY` standing for the URL and credentials): its content never
/// changes, so an answer holds for as long as that commit is the one checked out. Each entry is
/// keyed by the checkout's parent (the repository) and the shape, and keeps the commit it was
/// worked out for: a new commit is worked out afresh and replaces it, so there is about one entry
/// per Application whatever the number of commits. Everything else in a render key
/// (`spec.source.render`, `valuesFrom` data, decryption keys, engines) is read on every reconcile
/// and never memoised here. Bounded by entry count, emptied when full (refilling costs one
/// repository open per Application).
#[derive(Debug)]
pub struct InputsMemo {
    capacity: usize,
    entries: Mutex<HashMap<InputsKey, (PathBuf, SourceInputs)>>,
}

/// The repository and the shape of one memoised answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct InputsKey {
    repository: PathBuf,
    render_type: RenderType,
    path: String,
    values_files: Vec<String>,
    chart_pulled: bool,
}

impl InputsMemo {
    /// A memo of at most `capacity` answers (0 remembers nothing).
    pub fn new(capacity: usize) -> InputsMemo {
        InputsMemo { capacity, entries: Mutex::new(HashMap::new()) }
    }

    /// The inputs of `shape` at the checkout `checkout`: remembered, or worked out by `compute`,
    /// which answers `None` when the checkout's repository cannot be read (then nothing is
    /// remembered and `None`, not cacheable, is returned).
    pub fn get_or_compute(
        &self,
        checkout: &Path,
        shape: &SourceShape<'_>,
        compute: impl FnOnce() -> Option<SourceInputs>,
    ) -> SourceInputs {
        let key = InputsKey {
            repository: checkout.parent().unwrap_or(checkout).to_path_buf(),
            render_type: shape.render_type,
            path: shape.path.to_owned(),
            values_files: shape.values_files.to_vec(),
            chart_pulled: shape.chart_pulled,
        };
        if let Some((at, inputs)) = self.lock().get(&key)
            && at == checkout
        {
            return inputs.clone();
        }
        let inputs = compute()?;
        if self.capacity > 0 {
            let mut entries = self.lock();
            if entries.len() >= self.capacity && !entries.contains_key(&key) {
                entries.clear();
            }
            entries.insert(key, (checkout.to_path_buf(), inputs.clone()));
        }
        inputs
    }

    /// How many answers are remembered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<InputsKey, (PathBuf, SourceInputs)>> {
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A bounded, thread-safe map from render keys to outputs, evicting the least recently used,
/// with the [`InputsMemo`] its keys are computed through.
#[derive(Debug)]
pub struct RenderCache {
    capacity: usize,
    inner: Mutex<Lru>,
    inputs: InputsMemo,
}

#[derive(Debug, Default)]
struct Lru {
    /// Key to output and the tick of its last use.
    entries: HashMap<RenderKey, (Arc<CachedRender>, u64)>,
    /// Tick of last use to key: the first is the least recently used.
    by_use: BTreeMap<u64, RenderKey>,
    tick: u64,
}

impl Lru {
    /// Mark `key` used now.
    fn touch(&mut self, key: RenderKey) -> Option<Arc<CachedRender>> {
        self.tick += 1;
        let tick = self.tick;
        let (value, used) = self.entries.get_mut(&key)?;
        self.by_use.remove(used);
        *used = tick;
        self.by_use.insert(tick, key);
        Some(Arc::clone(value))
    }
}

impl RenderCache {
    /// A cache of at most `capacity` outputs (0 keeps nothing), whose [`InputsMemo`] keeps as
    /// many answers (about one per Application).
    pub fn new(capacity: usize) -> RenderCache {
        RenderCache {
            capacity,
            inner: Mutex::new(Lru::default()),
            inputs: InputsMemo::new(capacity),
        }
    }

    /// The memo of [`source_inputs`] answers the keys of this cache are computed through.
    pub fn inputs(&self) -> &InputsMemo {
        &self.inputs
    }

    /// The output stored under `key`, now the most recently used.
    pub fn get(&self, key: &RenderKey) -> Option<Arc<CachedRender>> {
        self.lock().touch(*key)
    }

    /// Store `output` under `key`, evicting the least recently used beyond the capacity.
    pub fn insert(&self, key: RenderKey, output: Arc<CachedRender>) {
        if self.capacity == 0 {
            return;
        }
        let mut lru = self.lock();
        if let Some((_, used)) = lru.entries.remove(&key) {
            lru.by_use.remove(&used);
        }
        lru.tick += 1;
        let tick = lru.tick;
        lru.entries.insert(key, (output, tick));
        lru.by_use.insert(tick, key);
        while lru.entries.len() > self.capacity {
            let Some((_, oldest)) = lru.by_use.pop_first() else { break };
            lru.entries.remove(&oldest);
        }
    }

    /// How many outputs are stored.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most outputs kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Default for RenderCache {
    fn default() -> Self {
        RenderCache::new(DEFAULT_CAPACITY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A tree as a map: a path to `(id, Some(content))` for files, `(id, None)` for directories;
    /// an id of `""` stands for content a Git id does not cover (a symbolic link below).
    struct FakeTree(BTreeMap<&'static str, (&'static str, Option<&'static str>)>);

    impl SourceTree for FakeTree {
        fn id(&self, path: &str) -> Option<String> {
            self.0.get(path).map(|(id, _)| id.to_string()).filter(|id| !id.is_empty())
        }
        fn file(&self, path: &str, max_bytes: u64) -> Option<Vec<u8>> {
            let content = self.0.get(path)?.1?;
            (content.len() as u64 <= max_bytes).then(|| content.as_bytes().to_vec())
        }
        fn is_dir(&self, path: &str) -> bool {
            self.0.get(path).is_some_and(|(_, content)| content.is_none())
        }
    }

    fn monorepo() -> FakeTree {
        FakeTree(BTreeMap::from([
            ("apps/a", ("t-a", None)),
            ("apps/a/cm.yaml", ("b-a", Some("kind: ConfigMap"))),
            ("base", ("t-base", None)),
            ("base/kustomization.yaml", ("b-k", Some("resources: [cm.yaml]"))),
            ("overlays/one", ("t-one", None)),
            (
                "overlays/one/kustomization.yaml",
                ("b-1", Some("resources:\n- ../../base\n- ../../extra.yaml\n- local.yaml\n")),
            ),
            ("extra.yaml", ("b-extra", Some("kind: ConfigMap"))),
            ("remote", ("t-remote", None)),
            (
                "remote/kustomization.yaml",
                ("b-r", Some("resources: [github.com/example/repo//base?ref=v1]")),
            ),
            ("linked", ("", None)),
            ("linked/kustomization.yaml", ("b-l", Some("resources: [x.yaml]"))),
            ("cycle/a", ("t-ca", None)),
            ("cycle/a/kustomization.yaml", ("b-ca", Some("resources: [../b]"))),
            ("cycle/b", ("t-cb", None)),
            ("cycle/b/kustomization.yaml", ("b-cb", Some("resources: [../a]"))),
            ("escape", ("t-e", None)),
            ("escape/kustomization.yaml", ("b-e", Some("resources: [../../outside]"))),
            ("charts/web", ("t-web", None)),
            ("values/prod.yaml", ("b-prod", Some("replicas: 3"))),
        ]))
    }

    /// What [`source_inputs`] answers.
    type Inputs = Option<BTreeMap<String, String>>;
    /// One change to the parts of a key.
    type Change = fn(&mut KeyParts);

    fn inputs(pairs: &[(&str, &str)]) -> Inputs {
        Some(pairs.iter().map(|(p, i)| (p.to_string(), i.to_string())).collect())
    }

    #[test]
    fn inputs_are_worked_out_once_per_checkout_and_again_for_a_new_commit() {
        let memo = InputsMemo::new(8);
        let shape = SourceShape {
            render_type: RenderType::Yaml,
            path: "apps/a",
            values_files: &[],
            chart_pulled: false,
        };
        let counter = std::cell::Cell::new(0);
        let computed = &counter;
        let answer = |id: &'static str| {
            move || {
                computed.set(computed.get() + 1);
                Some(inputs(&[("apps/a", id)]))
            }
        };
        let first = Path::new("/cache/KEY/trees/c1");
        assert_eq!(memo.get_or_compute(first, &shape, answer("t-1")), inputs(&[("apps/a", "t-1")]));
        assert_eq!(
            memo.get_or_compute(first, &shape, answer("ignored")),
            inputs(&[("apps/a", "t-1")])
        );
        assert_eq!(computed.get(), 1, "the same checkout is answered from the memo");
        let second = Path::new("/cache/KEY/trees/c2");
        assert_eq!(
            memo.get_or_compute(second, &shape, answer("t-2")),
            inputs(&[("apps/a", "t-2")])
        );
        assert_eq!((computed.get(), memo.len()), (2, 1), "a new commit replaces the entry");
        let other = SourceShape { path: "apps/b", ..shape };
        assert_eq!(memo.get_or_compute(second, &other, || None), None, "unreadable: not kept");
        assert_eq!(memo.len(), 1);
        assert_eq!(
            memo.get_or_compute(second, &other, answer("t-b")),
            inputs(&[("apps/a", "t-b")])
        );
        assert_eq!(memo.len(), 2);
        let none = InputsMemo::new(0);
        none.get_or_compute(first, &shape, answer("t-1"));
        assert!(none.is_empty(), "capacity 0 remembers nothing");
    }

    #[test]
    fn source_inputs_name_every_path_a_render_reads_or_refuse_to_cache() {
        let tree = monorepo();
        let prod = vec!["./values/prod.yaml".to_owned()];
        let shape = |render_type, path, values_files: &'static [String], chart_pulled| {
            SourceShape { render_type, path, values_files, chart_pulled }
        };
        let prod: &'static [String] = Box::leak(prod.into_boxed_slice());
        let cases: Vec<(&str, SourceShape<'_>, Inputs)> = vec![
            (
                "yaml reads its folder",
                shape(RenderType::Yaml, "apps/a/", &[], false),
                inputs(&[("apps/a", "t-a")]),
            ),
            (
                "an overlay reads its base and a file outside it",
                shape(RenderType::Kustomize, "overlays/one", &[], false),
                inputs(&[("base", "t-base"), ("extra.yaml", "b-extra"), ("overlays/one", "t-one")]),
            ),
            (
                "a remote base is not cached",
                shape(RenderType::Kustomize, "remote", &[], false),
                None,
            ),
            (
                "a symbolic link is not cached",
                shape(RenderType::Kustomize, "linked", &[], false),
                None,
            ),
            (
                "a cycle ends the walk",
                shape(RenderType::Kustomize, "cycle/a", &[], false),
                inputs(&[("cycle/a", "t-ca"), ("cycle/b", "t-cb")]),
            ),
            (
                "an entry leaving the repository is not cached",
                shape(RenderType::Kustomize, "escape", &[], false),
                None,
            ),
            ("a missing path is not cached", shape(RenderType::Yaml, "nope", &[], false), None),
            ("a climbing path is not cached", shape(RenderType::Yaml, "../x", &[], false), None),
            (
                "helm reads its chart and values files",
                shape(RenderType::Helm, "charts/web", prod, false),
                inputs(&[("charts/web", "t-web"), ("values/prod.yaml", "b-prod")]),
            ),
            (
                "a pulled chart reads only values files",
                shape(RenderType::Helm, "charts/web", prod, true),
                inputs(&[("values/prod.yaml", "b-prod")]),
            ),
        ];
        for (name, shape, want) in cases {
            assert_eq!(source_inputs(&tree, &shape), want, "{name}");
        }
    }

    fn parts() -> KeyParts {
        KeyParts {
            source_path: "apps/a".into(),
            inputs: BTreeMap::from([("apps/a".into(), "t-a".into())]),
            render: json!({"type": "yaml"}),
            destination_namespace: "team".into(),
            values_from: None,
            decryption_keys: None,
            chart: None,
            engine: EngineIdentity {
                kustomize: "kubectl".into(),
                remote_bases: false,
                helm_library: None,
            },
        }
    }

    #[test]
    fn every_part_of_the_key_changes_it_and_nothing_else_does() {
        let base = parts().key();
        assert_eq!(base, parts().key(), "the same inputs give the same key");
        let changes: Vec<(&str, Change)> = vec![
            ("a folder's content", |p| drop(p.inputs.insert("apps/a".into(), "t-a2".into()))),
            ("another path read", |p| drop(p.inputs.insert("base".into(), "t-base".into()))),
            ("the source path", |p| p.source_path = "apps/b".into()),
            ("the render config", |p| p.render = json!({"type": "yaml", "x": 1})),
            ("the destination", |p| p.destination_namespace = "other".into()),
            ("valuesFrom data", |p| p.values_from = Some([1; 32])),
            ("empty valuesFrom vs none", |p| p.values_from = Some(digest_entries([]))),
            ("the decryption keys", |p| p.decryption_keys = Some([2; 32])),
            ("the chart", |p| p.chart = Some("oci://r/c:1@sha256:ab".into())),
            ("the kustomize program", |p| p.engine.kustomize = "kustomize".into()),
            ("remote bases allowed", |p| p.engine.remote_bases = true),
            ("the helm library", |p| p.engine.helm_library = Some("/lib/helm.so".into())),
        ];
        for (name, change) in changes {
            let mut changed = parts();
            change(&mut changed);
            assert_ne!(changed.key(), base, "{name} must change the key");
        }
    }

    #[test]
    fn decryption_keys_and_values_digests_depend_on_every_byte_not_on_order() {
        let a = digest_entries([("age.agekey", &b"AGE-SECRET-KEY-1"[..]), ("x", b"y")]);
        assert_eq!(a, digest_entries([("x", &b"y"[..]), ("age.agekey", b"AGE-SECRET-KEY-1")]));
        assert_ne!(a, digest_entries([("age.agekey", &b"AGE-SECRET-KEY-2"[..]), ("x", b"y")]));
        assert_ne!(digest_entries([("ab", &b"c"[..])]), digest_entries([("a", &b"bc"[..])]));
    }

    fn output(name: &str) -> Arc<CachedRender> {
        Arc::new(CachedRender {
            objects: vec![Rendered { origin: name.into(), object: json!({"name": name}) }],
            secrets: vec![format!("secret-{name}")],
            chart_digest: None,
        })
    }

    fn key(n: u8) -> RenderKey {
        RenderKey([n; 32])
    }

    #[test]
    fn the_cache_keeps_the_most_recently_used_up_to_its_capacity() {
        let cache = RenderCache::new(2);
        cache.insert(key(1), output("one"));
        cache.insert(key(2), output("two"));
        assert_eq!(cache.get(&key(1)).expect("kept").secrets, vec!["secret-one"]);
        cache.insert(key(3), output("three"));
        assert_eq!(cache.len(), 2);
        assert!(cache.get(&key(2)).is_none(), "the least recently used is evicted");
        assert!(cache.get(&key(1)).is_some());
        assert!(cache.get(&key(3)).is_some());
        cache.insert(key(3), output("three again"));
        assert_eq!(cache.len(), 2, "replacing does not grow the cache");
        assert_eq!(cache.get(&key(3)).expect("kept").objects[0].origin, "three again");
    }

    #[test]
    fn a_cache_of_capacity_zero_keeps_nothing() {
        let cache = RenderCache::new(0);
        cache.insert(key(1), output("one"));
        assert!(cache.is_empty());
        assert!(cache.get(&key(1)).is_none());
    }

    #[test]
    fn the_cache_is_shared_between_threads() {
        let cache = Arc::new(RenderCache::new(64));
        let workers: Vec<_> = (0..4u8)
            .map(|t| {
                let cache = Arc::clone(&cache);
                std::thread::spawn(move || {
                    for n in 0..16u8 {
                        cache.insert(key(t * 16 + n), output("x"));
                        assert!(cache.get(&key(t * 16 + n)).is_some());
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("no panic");
        }
        assert_eq!(cache.len(), 64);
    }
}
