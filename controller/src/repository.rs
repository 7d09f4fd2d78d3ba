//! The Repository reconciler: validate the URL, read labelled credentials, resolve the revision
//! (listing refs first and fetching only when it moved), run `.ksync.yaml` discovery, and write
//! status and Events. Every decision is a pure function in `kuvryn-sync`
//! (`source::url`, `source::credentials`, `source::discovery`, `repository::decide`); this
//! module does the I/O between them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType as KubeEventType, Recorder, Reporter};
use kube::runtime::{Predicate, WatchStreamExt, predicates, reflector, watcher};
use kube::{Resource, ResourceExt};
use kuvryn_sync::api::{Application, EventType, FailureReason, Repository};
use kuvryn_sync::redact::Redactor;
use kuvryn_sync::repository::{Decision, Outcome, decide};
use kuvryn_sync::source::credentials::{self, GitCredentials};
use kuvryn_sync::source::discovery::{
    self, ConfigFileRead, DiscoveryError, DiscoveryPlan, MAX_CONFIG_FILE_BYTES, MAX_SYMLINK_HOPS,
};
use kuvryn_sync::source::git::{FetchRequest, GitCache, REMOTE_HEAD};
use kuvryn_sync::source::url::GitUrl;

/// Field manager of everything the Repository reconciler writes.
pub const FIELD_MANAGER: &str = "kuvryn-sync-controller";

/// What the reconciler needs.
pub struct RepositoryContext {
    pub client: kube::Client,
    pub cache: Arc<GitCache>,
    pub reporter: Reporter,
    /// Poll interval when `spec.pollInterval` is unset.
    pub default_poll_interval: Duration,
    /// Upper bound for one remote interaction.
    pub git_timeout: Duration,
    /// Repositories reconciled at once (a slow Git host must not stall the others, nor may
    /// thousands of Repositories fetch at the same moment).
    pub concurrency: u16,
}

/// Errors that make the reconcile retry with backoff (API server trouble); source, credential
/// and discovery problems are outcomes written to status, not errors.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("the Repository has no namespace")]
    NoNamespace,
    #[error("background task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// Run the Repository controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<RepositoryContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<Repository> = Api::all(ctx.client.clone());
    let (reader, writer) = reflector::store();
    // Reconcile on spec changes and on annotation changes (the push receivers set
    // sync.kuvryn.io/reconcile-requested-at); our own status writes do not trigger a reconcile.
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(
            predicates::generation.combine(predicates::annotations),
            Default::default(),
        );
    Controller::for_stream(stream, reader)
        .with_config(kube::runtime::controller::Config::default().concurrency(ctx.concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::warn!(%err, "repository reconcile failed");
            }
        })
        .await;
}

fn error_policy(
    _repo: Arc<Repository>,
    err: &ReconcileError,
    _ctx: Arc<RepositoryContext>,
) -> Action {
    tracing::warn!(%err, "repository reconcile will be retried");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(
    repo: Arc<Repository>,
    ctx: Arc<RepositoryContext>,
) -> Result<Action, ReconcileError> {
    let namespace = repo.namespace().ok_or(ReconcileError::NoNamespace)?;
    let name = repo.name_any();
    let (outcome, redactor) = observe(&repo, &namespace, &ctx).await?;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let decision = decide(repo.status.as_ref(), repo.metadata.generation, &outcome, &now);
    write(&repo, &namespace, &name, &decision, &redactor, &ctx).await?;
    Ok(Action::requeue(poll_interval(&repo, ctx.default_poll_interval)))
}

/// Resolve the source and run discovery; the outcome to record, and the redactor that masks the
/// credentials this reconcile touched.
async fn observe(
    repo: &Repository,
    namespace: &str,
    ctx: &RepositoryContext,
) -> Result<(Outcome, Redactor), ReconcileError> {
    let failed = |reason: FailureReason, message: String| Outcome::Failed { reason, message };
    let Some(git) = repo.spec.git.as_ref() else {
        let message = "spec.git is required for type git".to_owned();
        return Ok((failed(FailureReason::ValidationFailure, message), Redactor::new()));
    };
    let url = match GitUrl::parse(&git.url) {
        Ok(url) => url,
        Err(err) => {
            return Ok((
                failed(FailureReason::ValidationFailure, err.to_string()),
                Redactor::new(),
            ));
        }
    };

    let mut request = FetchRequest::new(
        git.url.clone(),
        git.revision.clone().unwrap_or_else(|| REMOTE_HEAD.into()),
    );
    request.timeout = ctx.git_timeout;
    let mut redactor = Redactor::new();
    if let Some(auth) = git.auth.as_ref() {
        let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
        let secret_name = &auth.secret_ref.name;
        let secret = match secrets.get_opt(secret_name).await? {
            Some(secret) => secret,
            None => {
                let message =
                    format!("spec.git.auth.secretRef: Secret {namespace}/{secret_name} not found");
                return Ok((failed(FailureReason::AuthenticationFailure, message), redactor));
            }
        };
        // Mask every value of the Secret, usable or not, before anything can echo it.
        redactor.add_secret_data(credentials::secret_values(&secret).values().map(Vec::as_slice));
        match GitCredentials::from_secret(&secret, &url) {
            Ok(creds) => {
                request.cache_identity = creds.identity.clone();
                request.ca_certs_pem = match &creds.auth {
                    credentials::GitAuth::Basic(basic) => basic.ca_bundle.clone(),
                    credentials::GitAuth::Ssh(_) => None,
                };
                request.credentials = Some(creds.auth.clone());
            }
            Err(err) => {
                return Ok((failed(err.reason(), redactor.redact(&err.to_string())), redactor));
            }
        }
    }

    let cache = Arc::clone(&ctx.cache);
    let resolve_request = request.clone();
    let resolved = tokio::task::spawn_blocking(move || cache.resolve(&resolve_request)).await?;
    let commit = match resolved {
        Ok(resolved) => resolved.commit,
        Err(err) => return Ok((failed(err.reason(), redactor.redact(&err.to_string())), redactor)),
    };

    // Discovery: read the configured files from the commit's tree, then decide.
    let paths = match discovery::validate_config_paths(&repo.spec.application_config_paths) {
        Ok(paths) => paths,
        Err(refusal) => {
            return Ok((
                Outcome::DiscoveryRefused { commit, message: refusal.to_string() },
                redactor,
            ));
        }
    };
    let cache = Arc::clone(&ctx.cache);
    let tree_commit = commit.clone();
    let files =
        tokio::task::spawn_blocking(move || -> Result<BTreeMap<String, ConfigFileRead>, String> {
            let tree = cache.tree(&request, &tree_commit).map_err(|e| e.to_string())?;
            Ok(paths.iter().map(|p| (p.clone(), read_config(tree.path(), p))).collect())
        })
        .await?;
    let files = match files {
        Ok(files) => files,
        Err(message) => {
            return Ok((failed(FailureReason::SourceFailure, redactor.redact(&message)), redactor));
        }
    };
    let applications: Api<Application> = Api::namespaced(ctx.client.clone(), namespace);
    let existing = applications.list(&ListParams::default()).await?.items;
    match discovery::discover(repo, &files, &existing) {
        Ok(plan) => {
            apply_plan(&applications, repo, &plan).await?;
            Ok((Outcome::Resolved { commit }, redactor))
        }
        Err(refusal) => Ok((
            Outcome::DiscoveryRefused { commit, message: redactor.redact(&refusal.to_string()) },
            redactor,
        )),
    }
}

/// Read one configured `.ksync.yaml` from a checked-out tree, following symlinks only while they
/// stay inside the tree.
fn read_config(root: &Path, path: &str) -> ConfigFileRead {
    let refused = |error: DiscoveryError| ConfigFileRead::Refused(error);
    let mut pending: Vec<String> = path.split('/').map(str::to_owned).collect();
    pending.reverse();
    let mut resolved: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(component) = pending.pop() {
        let candidate: PathBuf = resolved.iter().chain(std::iter::once(&component)).collect();
        let full = root.join(&candidate);
        let meta = match std::fs::symlink_metadata(&full) {
            Ok(meta) => meta,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return ConfigFileRead::Missing;
            }
            Err(_) => return refused(DiscoveryError::NotAFile { path: path.to_owned() }),
        };
        if meta.file_type().is_symlink() {
            hops += 1;
            let target = match std::fs::read_link(&full) {
                Ok(target) if hops <= MAX_SYMLINK_HOPS => target,
                _ => return refused(DiscoveryError::SymlinkEscapes { path: path.to_owned() }),
            };
            let dir: Vec<&str> = resolved.iter().map(String::as_str).collect();
            let Some(target) =
                target.to_str().and_then(|t| discovery::resolve_within_root(&dir, t))
            else {
                return refused(DiscoveryError::SymlinkEscapes { path: path.to_owned() });
            };
            // Continue from the link's target, then with what was left of the path.
            resolved.clear();
            for part in target.into_iter().rev() {
                pending.push(part);
            }
            continue;
        }
        resolved.push(component);
        if !pending.is_empty() && !meta.is_dir() {
            return ConfigFileRead::Missing;
        }
        if pending.is_empty() {
            if !meta.is_file() {
                return refused(DiscoveryError::NotAFile { path: path.to_owned() });
            }
            if meta.len() > MAX_CONFIG_FILE_BYTES as u64 {
                return refused(DiscoveryError::FileTooLarge {
                    path: path.to_owned(),
                    limit: MAX_CONFIG_FILE_BYTES,
                });
            }
            return match std::fs::read_to_string(&full) {
                Ok(text) => ConfigFileRead::Text(text),
                Err(_) => refused(DiscoveryError::NotAFile { path: path.to_owned() }),
            };
        }
    }
    ConfigFileRead::Missing
}

/// Create, update and delete discovered Applications as `plan` says.
async fn apply_plan(
    api: &Api<Application>,
    repo: &Repository,
    plan: &DiscoveryPlan,
) -> Result<(), kube::Error> {
    let owner = repo.controller_owner_ref(&()).map(|mut owner| {
        // A reference for garbage collection when the Repository goes, not a controller claim.
        owner.controller = Some(false);
        owner.block_owner_deletion = Some(false);
        owner
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for app in plan.create.iter().chain(&plan.update) {
        let mut app = app.clone();
        app.metadata.owner_references = owner.clone().map(|o| vec![o]);
        let name = app.name_any();
        api.patch(&name, &params, &Patch::Apply(&app)).await?;
        tracing::info!(application = %name, "discovered Application applied");
    }
    for delete in &plan.delete {
        if delete.needs_orphan_patch() {
            let patch = serde_json::json!({"spec": {"deletionPolicy": delete.deletion_policy}});
            api.patch(&delete.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: delete.uid.clone(), resource_version: None }),
            ..DeleteParams::default()
        };
        match api.delete(&delete.name, &params).await {
            Ok(_) => {
                tracing::info!(application = %delete.name, "Application removed from .ksync.yaml deleted")
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// Patch the status when it changed, and record the Events.
async fn write(
    repo: &Repository,
    namespace: &str,
    name: &str,
    decision: &Decision,
    redactor: &Redactor,
    ctx: &RepositoryContext,
) -> Result<(), kube::Error> {
    if decision.status_changed {
        let api: Api<Repository> = Api::namespaced(ctx.client.clone(), namespace);
        let patch = serde_json::json!({"status": decision.status});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    if decision.events.is_empty() {
        return Ok(());
    }
    let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
    let reference = repo.object_ref(&());
    for (reason, message) in &decision.events {
        let event = Event {
            type_: match reason.event_type() {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: reason.as_str().to_owned(),
            note: Some(redactor.redact(message)),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        if let Err(err) = recorder.publish(&event, &reference).await {
            tracing::warn!(%err, reason = reason.as_str(), "cannot record Event");
        }
    }
    Ok(())
}

/// `spec.pollInterval`, or the default when unset or unparsable.
fn poll_interval(repo: &Repository, default: Duration) -> Duration {
    repo.spec.poll_interval.as_deref().and_then(parse_duration).unwrap_or(default)
}

/// Parse a Go-style duration as the CRD pattern allows (`1h30m`, `90s`, `1.5m`, `500ms`).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (number, tail) = rest.split_at(number_len);
        let value: f64 = number.parse().ok()?;
        let (unit, tail) = if let Some(tail) = tail.strip_prefix("ms") {
            (0.001, tail)
        } else if let Some(tail) = tail.strip_prefix('s') {
            (1.0, tail)
        } else if let Some(tail) = tail.strip_prefix('m') {
            (60.0, tail)
        } else if let Some(tail) = tail.strip_prefix('h') {
            (3600.0, tail)
        } else {
            return None;
        };
        total += value * unit;
        rest = tail;
    }
    Some(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_as_the_crd_pattern_allows() {
        let cases = [
            ("60s", Some(60_000)),
            ("5m", Some(300_000)),
            ("1h30m", Some(5_400_000)),
            ("1.5m", Some(90_000)),
            ("500ms", Some(500)),
            ("", None),
            ("5", None),
            ("5d", None),
        ];
        for (text, millis) in cases {
            assert_eq!(parse_duration(text).map(|d| d.as_millis() as u64), millis, "{text:?}");
        }
    }

    #[test]
    fn config_files_are_read_only_through_symlinks_inside_the_tree() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("repo");
        std::fs::create_dir_all(root.join("teams/payments")).expect("mkdir");
        std::fs::create_dir_all(root.join("shared")).expect("mkdir");
        std::fs::write(root.join("teams/payments/.ksync.yaml"), "applications: []\n")
            .expect("write");
        std::fs::write(root.join("shared/.ksync.yaml"), "applications: []\n").expect("write");
        std::fs::write(dir.path().join("outside.yaml"), "secret: canary\n").expect("write");
        symlink("../shared", root.join("teams/search")).expect("symlink");
        symlink("../../outside.yaml", root.join("teams/.ksync.yaml")).expect("symlink");
        symlink("/etc", root.join("etc")).expect("symlink");
        std::fs::create_dir_all(root.join("dir/.ksync.yaml")).expect("mkdir");

        let read = |path: &str| read_config(&root, path);
        assert_eq!(
            read("teams/payments/.ksync.yaml"),
            ConfigFileRead::Text("applications: []\n".into())
        );
        assert_eq!(
            read("teams/search/.ksync.yaml"),
            ConfigFileRead::Text("applications: []\n".into())
        );
        assert!(matches!(
            read("teams/.ksync.yaml"),
            ConfigFileRead::Refused(DiscoveryError::SymlinkEscapes { .. })
        ));
        assert!(matches!(
            read("etc/.ksync.yaml"),
            ConfigFileRead::Refused(DiscoveryError::SymlinkEscapes { .. })
        ));
        assert!(matches!(
            read("dir/.ksync.yaml"),
            ConfigFileRead::Refused(DiscoveryError::NotAFile { .. })
        ));
        assert_eq!(read("nowhere/.ksync.yaml"), ConfigFileRead::Missing);
        assert_eq!(read(".ksync.yaml"), ConfigFileRead::Missing);
    }
}
