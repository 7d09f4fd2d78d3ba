//! Image write-back for Repositories with `spec.imageUpdate`: commit the ImagePolicy selections
//! into the YAML files of the branch, so a new image becomes a reviewed Git commit and then a
//! rollout.
//!
//! It runs as the first step of each Repository reconcile ([`ImageWriteBack::run`]), before the
//! Repository resolves its revision, so a commit pushed here is fetched and deployed by that same
//! reconcile. Running inside the Repository reconcile also makes that reconcile the only writer
//! of `status.conditions`: the CRD's conditions list is atomic (no `x-kubernetes-list-type: map`),
//! so a second field manager applying only `ImagesUpdated` would replace the whole list (and
//! drop `Ready`), and a read-modify-write by another task would race the Repository's own status
//! writes. The condition and Events are decided by
//! [`decide_write_back`](kuvryn_sync_core::image_writeback::decide_write_back).
//!
//! What triggers it: every Repository reconcile (spec or annotation change, the poll), and a
//! change of any ImagePolicy's `status.latestImage` ([`ImageWriteBack::policy_changes`], which
//! reconciles the Repositories with `spec.imageUpdate`). A reconcile whose inputs are the ones a
//! previous successful write-back already handled (the same Repository generation and observed
//! commit, the same selection of every ImagePolicy) clones nothing and reports `UpToDate`.
//!
//! One write-back ([`write_back`]), when the controller runs with `--image-write-back`:
//! 1. `spec.imageUpdate.path` is checked ([`check_path`]) and `spec.git.url` parsed;
//! 2. the push credentials: the Secret `spec.imageUpdate.secretRef` in the Repository's
//!    namespace, labelled `sync.kuvryn.io/git-credentials: "true"`, read with the same rules as
//!    `spec.git.auth` ([`GitCredentials::from_secret`]). A `git://` remote has no
//!    authentication: the Secret must still exist and carry the label, and the push is
//!    anonymous;
//! 3. [`push_update`] on a blocking thread: a fresh shallow clone of `spec.imageUpdate.branch`,
//!    the edit, one commit as `authorName <authorEmail>`, the push (retried on a moved branch);
//! 4. the edit walks the YAML files (`.yaml`, `.yml`) under the path in name order, without
//!    following any symlink (a symlinked file or folder is left alone; a path that passes
//!    through one is refused) and skipping `.git`; it runs [`update_file`] on each with a lookup
//!    of the ImagePolicies by `NAMESPACE:NAME` from the reflector store (a marker may name a
//!    policy of another namespace; it is used when it exists and has a selection), writes the
//!    files that changed, and returns [`commit_message`]. Bounds: [`MAX_FILES`] files visited,
//!    files over [`MAX_FILE_BYTES`] skipped.
//!
//! Without `--image-write-back` nothing is read or pushed and the condition is `Disabled`.
//! Every message goes through the reconcile's redactor, which holds every value of the push
//! Secret.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kuvryn_sync_api::{ImagePolicy, Repository};
use kuvryn_sync_core::credentials::{self, GitAuth, GitCredentials};
use kuvryn_sync_core::image_update::{Change, PolicyImage, PolicyRef, commit_message, update_file};
use kuvryn_sync_core::image_writeback::{WriteBackOutcome, check_path};
use kuvryn_sync_core::redact::Redactor;
use kuvryn_sync_core::url::{GitUrl, GitUrlKind};
use kuvryn_sync_source::git::{PushOutcome, PushRequest, push_update};

/// Most files the edit visits under `spec.imageUpdate.path`.
pub const MAX_FILES: usize = 20_000;
/// Largest YAML file edited; larger ones are left alone.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// ImagePolicy selections by policy, as the edit looks them up.
type Selections = HashMap<PolicyRef, PolicyImage>;

/// Image write-back, shared by the Repository reconciles.
pub struct ImageWriteBack {
    client: kube::Client,
    mode: Mode,
}

enum Mode {
    /// Without `--image-write-back`.
    Disabled,
    Enabled(Box<Enabled>),
}

/// The state of write-back when it is on.
struct Enabled {
    policies: Store<ImagePolicy>,
    /// Handed to the first [`ImageWriteBack::policy_changes`] caller.
    writer: Mutex<Option<reflector::store::Writer<ImagePolicy>>>,
    git_timeout: Duration,
    scratch_dir: PathBuf,
    /// Per Repository uid, the fingerprint of the inputs of the last successful write-back.
    done: Mutex<HashMap<String, u64>>,
}

impl ImageWriteBack {
    /// Write-back switched off: Repositories with `spec.imageUpdate` get `Disabled`.
    pub fn disabled(client: kube::Client) -> Self {
        Self { client, mode: Mode::Disabled }
    }

    /// Write-back switched on; clones go under `scratch_dir`, each git command bounded by
    /// `git_timeout`.
    pub fn enabled(client: kube::Client, git_timeout: Duration, scratch_dir: PathBuf) -> Self {
        let (policies, writer) = reflector::store();
        Self {
            client,
            mode: Mode::Enabled(Box::new(Enabled {
                policies,
                writer: Mutex::new(Some(writer)),
                git_timeout,
                scratch_dir,
                done: Mutex::new(HashMap::new()),
            })),
        }
    }

    /// With write-back on, a watch of every ImagePolicy feeding the lookup store, as the stream
    /// of Repositories (those with `spec.imageUpdate`, from `repositories`) to reconcile each
    /// time a policy's `status.latestImage` changes. `None` when off, or on a second call.
    pub fn policy_changes(
        &self,
        repositories: Store<Repository>,
    ) -> Option<impl Stream<Item = ObjectRef<Repository>> + Send + 'static> {
        let Mode::Enabled(enabled) = &self.mode else { return None };
        let writer = enabled.writer.lock().ok()?.take()?;
        let api = Api::<ImagePolicy>::all(self.client.clone());
        let changes = watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .applied_objects()
            .predicate_filter(latest_image, Default::default())
            .filter_map(|policy| async move { policy.ok() })
            .flat_map(move |_policy| {
                let wanted: Vec<ObjectRef<Repository>> = repositories
                    .state()
                    .iter()
                    .filter(|repo| repo.spec.image_update.is_some())
                    .map(|repo| ObjectRef::from_obj(repo.as_ref()))
                    .collect();
                futures::stream::iter(wanted)
            });
        Some(changes)
    }

    /// The write-back of `repo` (see the module docs), or `None` when it has no
    /// `spec.imageUpdate`. `redactor` learns every value of the push Secret.
    pub async fn run(
        &self,
        repo: &Repository,
        namespace: &str,
        redactor: &mut Redactor,
    ) -> Result<Option<WriteBackOutcome>, kube::Error> {
        if repo.spec.image_update.is_none() {
            return Ok(None);
        }
        let Mode::Enabled(enabled) = &self.mode else {
            return Ok(Some(WriteBackOutcome::Disabled));
        };
        let Enabled { policies, git_timeout, scratch_dir, done, .. } = enabled.as_ref();
        let selections = selections(policies);
        let uid = repo.uid().unwrap_or_default();
        let fingerprint = fingerprint(repo, &selections);
        if done.lock().is_ok_and(|done| done.get(&uid) == Some(&fingerprint)) {
            return Ok(Some(WriteBackOutcome::UpToDate { notes: Vec::new() }));
        }
        let request = match self
            .request(repo, namespace, *git_timeout, scratch_dir, redactor)
            .await?
        {
            Ok(request) => request,
            Err(message) => {
                return Ok(Some(WriteBackOutcome::Failed { message: redactor.redact(&message) }));
            }
        };
        let outcome = write_back(repo, request, selections).await;
        let outcome = match outcome {
            WriteBackOutcome::Failed { message } => {
                WriteBackOutcome::Failed { message: redactor.redact(&message) }
            }
            other => {
                if let Ok(mut done) = done.lock() {
                    done.insert(uid, fingerprint);
                }
                other
            }
        };
        match &outcome {
            WriteBackOutcome::Committed { commit, branch, changes, .. } => tracing::info!(
                namespace,
                repository = %repo.name_any(),
                commit,
                branch,
                changes,
                "image write-back committed"
            ),
            WriteBackOutcome::Failed { message } => tracing::info!(
                namespace,
                repository = %repo.name_any(),
                error = %message,
                "image write-back failed"
            ),
            _ => {}
        }
        Ok(Some(outcome))
    }

    /// Steps 1 and 2: the push request, or why there is none.
    async fn request(
        &self,
        repo: &Repository,
        namespace: &str,
        timeout: Duration,
        scratch_dir: &Path,
        redactor: &mut Redactor,
    ) -> Result<Result<PushRequest, String>, kube::Error> {
        let Some(update) = repo.spec.image_update.as_ref() else {
            return Ok(Err("spec.imageUpdate is not set".into()));
        };
        if let Err(err) = check_path(update.path.as_deref()) {
            return Ok(Err(err.to_string()));
        }
        let Some(git) = repo.spec.git.as_ref() else {
            return Ok(Err("spec.git is required for image write-back".into()));
        };
        let url = match GitUrl::parse(&git.url) {
            Ok(url) => url,
            Err(err) => return Ok(Err(format!("spec.git.url: {err}"))),
        };
        let secret_name = &update.secret_ref.name;
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let Some(secret) = secrets.get_opt(secret_name).await? else {
            return Ok(Err(format!(
                "spec.imageUpdate.secretRef: Secret {namespace}/{secret_name} not found; create it with the push credentials, labelled sync.kuvryn.io/git-credentials: \"true\""
            )));
        };
        redactor.add_secret_data(credentials::secret_values(&secret).values().map(Vec::as_slice));
        let mut request = PushRequest::new(
            git.url.clone(),
            update.branch.clone(),
            update.author_name.clone(),
            update.author_email.clone(),
        );
        request.timeout = timeout;
        request.scratch_dir = Some(scratch_dir.to_owned());
        if let Err(err) = with_credentials(&mut request, &secret, &url) {
            return Ok(Err(format!("spec.imageUpdate.secretRef: {err}")));
        }
        if let Err(err) = std::fs::create_dir_all(scratch_dir) {
            return Ok(Err(format!(
                "cannot create the write-back scratch directory {}: {err}",
                scratch_dir.display()
            )));
        }
        Ok(Ok(request))
    }
}

/// Add the push credentials in `secret` to `request`. `git://` cannot authenticate: the Secret
/// is only checked for the opt-in label.
fn with_credentials(
    request: &mut PushRequest,
    secret: &Secret,
    url: &GitUrl,
) -> Result<(), String> {
    if url.kind == GitUrlKind::Git {
        return credentials::check_label(secret).map_err(|err| err.to_string());
    }
    let creds = GitCredentials::from_secret(secret, url).map_err(|err| err.to_string())?;
    if let GitAuth::Basic(basic) = &creds.auth {
        request.ca_certs_pem = basic.ca_bundle.clone();
    }
    request.credentials = Some(creds.auth);
    Ok(())
}

/// Hash of an ImagePolicy's `status.latestImage`, the change that matters to write-back.
fn latest_image(policy: &ImagePolicy) -> Option<u64> {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    policy.status.as_ref().and_then(|s| s.latest_image.as_deref()).hash(&mut hasher);
    Some(hasher.finish())
}

/// Every ImagePolicy's selection in the store.
fn selections(policies: &Store<ImagePolicy>) -> Selections {
    policies
        .state()
        .iter()
        .filter_map(|policy| {
            let image = PolicyImage::from_status(policy.status.as_ref()?)?;
            let reference = PolicyRef { namespace: policy.namespace()?, name: policy.name_any() };
            Some((reference, image))
        })
        .collect()
}

/// The inputs a write-back of `repo` depends on, hashed.
fn fingerprint(repo: &Repository, selections: &Selections) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    repo.metadata.generation.hash(&mut hasher);
    repo.status.as_ref().and_then(|s| s.observed_revision.as_deref()).hash(&mut hasher);
    let sorted: BTreeMap<&PolicyRef, String> =
        selections.iter().map(|(reference, image)| (reference, image.reference())).collect();
    sorted.hash(&mut hasher);
    hasher.finish()
}

/// Steps 3 and 4, on a blocking thread.
async fn write_back(
    repo: &Repository,
    request: PushRequest,
    selections: Selections,
) -> WriteBackOutcome {
    let path = repo.spec.image_update.as_ref().and_then(|u| u.path.clone());
    let branch = request.branch.clone();
    let joined = tokio::task::spawn_blocking(move || {
        let components = check_path(path.as_deref()).unwrap_or_default();
        let mut report = EditReport::default();
        let result = push_update(&request, |root| {
            report = EditReport::default();
            edit_tree(root, &components, &selections, &mut report)
        });
        (result, report)
    })
    .await;
    let (result, report) = match joined {
        Ok(done) => done,
        Err(err) => {
            return WriteBackOutcome::Failed {
                message: format!("the write-back task failed: {err}"),
            };
        }
    };
    match result {
        Ok(PushOutcome::UpToDate) => WriteBackOutcome::UpToDate { notes: report.notes },
        Ok(PushOutcome::Committed { commit }) => WriteBackOutcome::Committed {
            commit,
            branch,
            changes: report.changes,
            notes: report.notes,
        },
        Err(err) => WriteBackOutcome::Failed { message: err.to_string() },
    }
}

/// What one edit did besides the files: values changed and markers left alone.
#[derive(Default)]
struct EditReport {
    changes: usize,
    notes: Vec<String>,
}

/// The edit: set every marked value under `components` of the checkout at `root`; the commit
/// message, or `None` when nothing changed.
fn edit_tree(
    root: &Path,
    components: &[String],
    selections: &Selections,
    report: &mut EditReport,
) -> Result<Option<String>, String> {
    let shown = if components.is_empty() { ".".to_owned() } else { components.join("/") };
    let mut base = root.to_owned();
    for component in components {
        base.push(component);
        match std::fs::symlink_metadata(&base) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(format!(
                    "spec.imageUpdate.path {shown:?} passes through a symlink, which write-back does not follow; point it at a real folder"
                ));
            }
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(format!(
                    "spec.imageUpdate.path {shown:?} is not a folder on the branch; point it at a folder"
                ));
            }
            Err(_) => {
                return Err(format!(
                    "spec.imageUpdate.path {shown:?} does not exist on the branch; create it or fix the path"
                ));
            }
        }
    }
    let files = yaml_files(root, &base)?;
    let mut changes: BTreeMap<String, Vec<Change>> = BTreeMap::new();
    for (relative, full) in files {
        let Ok(text) = std::fs::read_to_string(&full) else {
            report.notes.push(format!("{relative}: not UTF-8 text, left alone"));
            continue;
        };
        let updated = update_file(&text, |reference| selections.get(reference).cloned());
        for skipped in &updated.skipped {
            report.notes.push(format!("{relative}: {skipped}"));
        }
        if updated.changes.is_empty() {
            continue;
        }
        std::fs::write(&full, updated.text.as_bytes())
            .map_err(|err| format!("cannot write {relative} in the checkout: {err}"))?;
        report.changes += updated.changes.len();
        changes.insert(relative, updated.changes);
    }
    Ok((!changes.is_empty()).then(|| commit_message(&changes)))
}

/// The `.yaml` and `.yml` files under `base` (inside `root`), as (path from `root` with `/`,
/// full path), in name order; symlinks and `.git` are skipped.
fn yaml_files(root: &Path, base: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let mut found = Vec::new();
    let mut pending = vec![base.to_owned()];
    let mut visited = 0usize;
    while let Some(dir) = pending.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|err| format!("cannot list a folder of the checkout: {err}"))?
            .filter_map(Result::ok)
            .collect();
        entries.sort_by_key(|entry| entry.file_name());
        // Folders are pushed in reverse so that they are walked in name order.
        let mut folders = Vec::new();
        for entry in entries {
            visited += 1;
            if visited > MAX_FILES {
                return Err(format!(
                    "spec.imageUpdate.path has more than {MAX_FILES} files; point it at the folder holding the marked manifests"
                ));
            }
            let Ok(kind) = entry.file_type() else { continue };
            let path = entry.path();
            if kind.is_symlink() {
                continue;
            }
            if kind.is_dir() {
                if entry.file_name() != ".git" {
                    folders.push(path);
                }
                continue;
            }
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !kind.is_file() || !(name.ends_with(".yaml") || name.ends_with(".yml")) {
                continue;
            }
            if entry.metadata().map(|m| m.len()).unwrap_or(u64::MAX) > MAX_FILE_BYTES {
                continue;
            }
            let Ok(relative) = path.strip_prefix(root) else { continue };
            let relative: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            found.push((relative.join("/"), path));
        }
        pending.extend(folders.into_iter().rev());
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selection() -> Selections {
        let mut map = HashMap::new();
        map.insert(
            PolicyRef { namespace: "apps".into(), name: "web".into() },
            PolicyImage {
                image: "ghcr.io/acme/web".into(),
                tag: "1.3.0".into(),
                digest: format!("sha256:{}", "a".repeat(64)),
            },
        );
        map
    }

    const MARKED: &str = "image: ghcr.io/acme/web:1.2.0 # {\"$imagepolicy\": \"apps:web\"}\n";
    const UPDATED: &str = "image: ghcr.io/acme/web:1.3.0@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa # {\"$imagepolicy\": \"apps:web\"}\n";

    #[test]
    fn edits_yaml_files_under_the_path_and_never_follows_symlinks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("checkout");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(root.join("deploy/prod")).expect("fixture");
        std::fs::create_dir_all(root.join(".git")).expect("fixture");
        std::fs::create_dir_all(&outside).expect("fixture");
        std::fs::write(root.join("deploy/prod/web.yaml"), MARKED).expect("fixture");
        std::fs::write(root.join("deploy/web.yml"), MARKED).expect("fixture");
        std::fs::write(root.join("deploy/notes.txt"), MARKED).expect("fixture");
        std::fs::write(root.join(".git/x.yaml"), MARKED).expect("fixture");
        std::fs::write(root.join("other.yaml"), MARKED).expect("fixture");
        std::fs::write(outside.join("escape.yaml"), MARKED).expect("fixture");
        std::os::unix::fs::symlink(&outside, root.join("deploy/link")).expect("fixture");
        std::os::unix::fs::symlink(outside.join("escape.yaml"), root.join("deploy/file.yaml"))
            .expect("fixture");
        std::fs::write(
            root.join("deploy/unknown.yaml"),
            "image: x:1 # {\"$imagepolicy\": \"apps:missing\"}\n",
        )
        .expect("fixture");

        let mut report = EditReport::default();
        let message = edit_tree(&root, &["deploy".into()], &selection(), &mut report)
            .expect("edit")
            .expect("changed");
        assert_eq!(report.changes, 2);
        assert!(message.contains("deploy/prod/web.yaml:1:"), "{message}");
        assert!(message.contains("deploy/web.yml:1:"), "{message}");
        let read = |p: &Path| std::fs::read_to_string(p).expect("fixture");
        assert_eq!(read(&root.join("deploy/prod/web.yaml")), UPDATED);
        assert_eq!(read(&root.join("deploy/web.yml")), UPDATED);
        for untouched in ["deploy/notes.txt", ".git/x.yaml", "other.yaml"] {
            assert_eq!(read(&root.join(untouched)), MARKED, "{untouched}");
        }
        assert_eq!(read(&outside.join("escape.yaml")), MARKED, "symlinks are not followed");
        assert_eq!(report.notes.len(), 1, "{:?}", report.notes);
        assert!(report.notes[0].starts_with("deploy/unknown.yaml: line 1:"), "{:?}", report.notes);

        // Nothing left to change.
        let mut report = EditReport::default();
        assert_eq!(edit_tree(&root, &["deploy".into()], &selection(), &mut report), Ok(None));

        // A path through a symlink, or to nothing, is refused.
        let err = edit_tree(&root, &["deploy".into(), "link".into()], &selection(), &mut report)
            .expect_err("symlink");
        assert!(err.contains("passes through a symlink"), "{err}");
        let err =
            edit_tree(&root, &["nope".into()], &selection(), &mut report).expect_err("missing");
        assert!(err.contains("does not exist"), "{err}");
    }
}
