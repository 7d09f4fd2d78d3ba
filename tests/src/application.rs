//! The environment of the Application end-to-end tests: a namespace with service account
//! `deployer`, a Git repository served by git daemon, a Repository for it, and the controller
//! binary with its output in a log file; helpers to push commits and wait on Applications.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kuvryn_sync_api::{Application, Repository, Revision, RevisionPhase, keys};
use serde_json::{Value, json};

use crate::apply::{DEPLOYER, grant_deployer};
use crate::cluster::{ControllerProcess, TestCluster, events_regarding, wait_for};
use crate::servers::{BareRepo, GitDaemon};

/// How long a test waits for the controller to get somewhere.
pub const DEADLINE: Duration = Duration::from_secs(60);
/// The exit code of the controller at a test fault point (`controller/src/fault.rs`).
pub const FAULT_EXIT_CODE: i32 = 86;

/// A test namespace with a Git repository, a Repository for it and a controller.
pub struct Env {
    pub cluster: TestCluster,
    pub controller: Option<ControllerProcess>,
    pub namespace: String,
    pub repo: BareRepo,
    _daemon: GitDaemon,
    _root: tempfile::TempDir,
    logs: tempfile::TempDir,
}

/// A namespace with service account `deployer` (rights on the kinds the tests use, and on
/// Namespaces cluster-wide), a Git repository served by git daemon, a Repository for it, and —
/// unless `start` is false — a controller whose output goes to a log file.
pub async fn env(prefix: &str, start: bool) -> Result<Env> {
    env_on(TestCluster::start().await?, prefix, start).await
}

/// [`env`] on a cluster whose workloads run (`TestCluster::start_with_workloads`).
pub async fn env_with_workloads(prefix: &str, start: bool) -> Result<Env> {
    env_on(TestCluster::start_with_workloads().await?, prefix, start).await
}

async fn env_on(cluster: TestCluster, prefix: &str, start: bool) -> Result<Env> {
    let namespace = cluster.namespace(prefix).await?;
    let admin = cluster.client();
    grant_deployer(
        &admin,
        &namespace,
        &["configmaps", "secrets", "services", "persistentvolumeclaims", "serviceaccounts"],
    )
    .await?;
    apply_cluster_rbac(
        &admin,
        &[
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": format!("{namespace}-namespaces")},
                   "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["*"]}]}),
            cluster_binding(&namespace, &format!("{namespace}-namespaces")),
        ],
    )
    .await?;
    let root = tempfile::tempdir()?;
    let repo = BareRepo::create(root.path(), "apps")?;
    let daemon = GitDaemon::start(root.path())?;
    let repository: Repository = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
        "metadata": {"name": "apps"},
        "spec": {"type": "git", "git": {"url": daemon.url(&repo.name), "revision": "main"}},
    }))?;
    Api::<Repository>::namespaced(admin, &namespace)
        .create(&PostParams::default(), &repository)
        .await?;
    let mut env = Env {
        cluster,
        controller: None,
        namespace,
        repo,
        _daemon: daemon,
        _root: root,
        logs: tempfile::tempdir()?,
    };
    if start {
        env.start_controller(&[])?;
    }
    Ok(env)
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

impl Env {
    pub fn log_path(&self) -> PathBuf {
        self.logs.path().join("controller.log")
    }

    pub fn start_controller(&mut self, env: &[(&str, &str)]) -> Result<()> {
        self.start_controller_with(&[], env)
    }

    /// [`Env::start_controller`] with extra flags.
    pub fn start_controller_with(&mut self, flags: &[&str], env: &[(&str, &str)]) -> Result<()> {
        // A long poll interval: every new commit in these tests is announced by the annotation.
        let mut args = vec!["--default-poll-interval", "1h"];
        args.extend_from_slice(flags);
        let log = self.log_path();
        self.controller = Some(ControllerProcess::start_logged(&self.cluster, &args, env, &log)?);
        Ok(())
    }

    pub fn controller_log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The running controller's `/metrics` text (its ops address is in its log).
    pub async fn controller_metrics_text(&self) -> Result<String> {
        metrics_text(&self.log_path()).await
    }

    /// The samples of counter `name` (such as `kuvryn_sync_renders_total`) on the running
    /// controller's `/metrics`, as (labels, value): labels as `key="value"` pairs, in order.
    pub async fn controller_counter(&self, name: &str) -> Result<Vec<(Vec<String>, u64)>> {
        counter(&self.log_path(), name).await
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + for<'de> k8s_openapi::serde::Deserialize<'de>
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        Api::namespaced(self.cluster.client(), &self.namespace)
    }

    /// Also allow `deployer` every verb on `resources` of API group `group` in the namespace.
    pub async fn grant(&self, group: &str, resources: &[&str]) -> Result<()> {
        let name = format!("{DEPLOYER}-{}", if group.is_empty() { "core" } else { group });
        let kinds = kuvryn_sync_apply::kinds::Kinds::default();
        for object in [
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": name},
                   "rules": [{"apiGroups": [group], "resources": resources, "verbs": ["*"]}]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": name},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                   "subjects": [{"kind": "ServiceAccount", "name": DEPLOYER,
                                 "namespace": self.namespace}]}),
        ] {
            crate::apply::apply_raw(
                &self.cluster.client(),
                &kinds,
                &self.namespace,
                &object,
                "test-setup",
            )
            .await?;
        }
        Ok(())
    }

    /// A namespaced custom kind for this test: group `<namespace>.example.com`, version `v1`,
    /// any fields, a status subresource; the deployer may manage CRDs and the kind. The CRD is
    /// returned to be put in Git beside objects of the kind.
    pub async fn custom_kind(&self, kind: &str, plural: &str) -> Result<CustomKind> {
        let ns = &self.namespace;
        let group = format!("{ns}.example.com");
        apply_cluster_rbac(
            &self.cluster.client(),
            &[
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": format!("{ns}-{plural}")},
                    "rules": [{"apiGroups": ["apiextensions.k8s.io"],
                               "resources": ["customresourcedefinitions"], "verbs": ["*"]},
                              {"apiGroups": [group], "resources": [plural], "verbs": ["*"]}]}),
                cluster_binding(ns, &format!("{ns}-{plural}")),
            ],
        )
        .await?;
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind,
                               "listKind": format!("{kind}List")},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                       "x-kubernetes-preserve-unknown-fields": true}}}]},
        });
        let resource = kube::api::ApiResource {
            group: group.clone(),
            version: "v1".into(),
            api_version: format!("{group}/v1"),
            kind: kind.into(),
            plural: plural.into(),
        };
        Ok(CustomKind { group, crd, resource })
    }

    /// Wait until `name`'s Ready condition has `status` and `reason`; returns its message.
    pub async fn wait_ready(&self, name: &str, status: &str, reason: &str) -> Result<String> {
        let app = self
            .wait_app(name, &format!("Ready={status}/{reason}"), |app| {
                ready(app).is_some_and(|(s, r, _)| s == status && r == reason)
            })
            .await?;
        self.wait_desired_recorded(name, &app).await?;
        Ok(ready(&app).map(|(_, _, message)| message).unwrap_or_default())
    }

    /// How many lines of the controller's log contain `text`.
    pub fn log_count(&self, text: &str) -> usize {
        self.controller_log().lines().filter(|line| line.contains(text)).count()
    }

    /// Commit `files` and have the Repository fetch the new commit at once.
    pub async fn push(&self, files: &[(&str, String)], message: &str) -> Result<String> {
        let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
        let commit = self.repo.commit(&files, message)?;
        self.announce().await?;
        Ok(commit)
    }

    /// Delete `paths` in a commit and have the Repository fetch it at once.
    pub async fn push_removal(&self, paths: &[&str], message: &str) -> Result<String> {
        let commit = self.repo.remove(paths, message)?;
        self.announce().await?;
        Ok(commit)
    }

    pub async fn announce(&self) -> Result<()> {
        let now = format!("{:?}", std::time::SystemTime::now());
        let patch = json!({"metadata": {"annotations": {keys::RECONCILE_REQUESTED_AT: now}}});
        self.api::<Repository>()
            .patch("apps", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Create Application `name` deploying `path` into the test namespace as `deployer`,
    /// automatic with prune; `overrides` is merged into the spec.
    pub async fn create_app(&self, name: &str, path: &str, overrides: Value) -> Result<()> {
        self.create_app_labelled(name, path, overrides, json!({})).await
    }

    /// [`Env::create_app`] with `labels` (a JSON object) on the Application from its creation.
    pub async fn create_app_labelled(
        &self,
        name: &str,
        path: &str,
        overrides: Value,
        labels: Value,
    ) -> Result<()> {
        let mut spec = json!({
            "serviceAccountName": DEPLOYER,
            "source": {"repositoryRef": {"name": "apps"}, "path": path, "render": {"type": "yaml"}},
            "destination": {"namespace": self.namespace},
            "sync": {"automatic": true, "prune": true},
        });
        merge(&mut spec, overrides);
        let app: Application = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "labels": labels}, "spec": spec,
        }))?;
        self.api::<Application>().create(&PostParams::default(), &app).await?;
        Ok(())
    }

    pub async fn wait_app(
        &self,
        name: &str,
        what: &str,
        done: impl Fn(&Application) -> bool,
    ) -> Result<Application> {
        let api = self.api::<Application>();
        wait_for(&format!("Application {name}: {what}"), DEADLINE, || async {
            let app = api.get(name).await?;
            let observed = format!("status {}", serde_json::to_string(&app.status)?);
            Ok((done(&app).then_some(app), observed))
        })
        .await
        .with_context(|| format!("controller log, last lines:\n{}", self.log_tail(40)))
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.controller_log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Wait until `name` is Synced at `commit` and that commit's Revision records the sync too.
    ///
    /// The controller writes the Application's status before the Revision's (a crash between
    /// them must not leave a stale inventory), so a reader can briefly see the Application
    /// Synced while its Revision still says Applying.
    pub async fn wait_synced(&self, name: &str, commit: &str) -> Result<Application> {
        let app = self
            .wait_app(name, &format!("Synced at {commit}"), |app| {
                app.status.as_ref().is_some_and(|s| {
                    s.deployed_revision.as_deref() == Some(commit)
                        && s.sync.state == kuvryn_sync_api::SyncState::Synced
                })
            })
            .await?;
        self.wait_revision_recorded(name, commit, true).await?;
        Ok(app)
    }

    /// Wait until the Revision of `name` at `commit` is past the apply phases: the controller
    /// writes the Application's status before the Revision's after a sync, so the Revision can
    /// lag it briefly. With `must_exist` false, no Revision at all also counts (a failure
    /// before planning makes none).
    async fn wait_revision_recorded(
        &self,
        name: &str,
        commit: &str,
        must_exist: bool,
    ) -> Result<()> {
        let applying = |phase: Option<RevisionPhase>| {
            matches!(
                phase,
                None | Some(
                    RevisionPhase::Pending | RevisionPhase::Planning | RevisionPhase::Applying
                )
            )
        };
        let past = |phase| !applying(phase);
        self.wait_revision_phase(name, commit, "past Applying", past, must_exist).await.map(drop)
    }

    /// Wait until `name`'s Revision at `commit` completed its rollout Healthy. Ready keeps its
    /// last value while a rollout progresses, so Ready True/Healthy after a second commit can
    /// still be the first commit's: a test that needs the new rollout finished (to roll back to
    /// it, say) waits for its Revision.
    pub async fn wait_revision_healthy(&self, name: &str, commit: &str) -> Result<Revision> {
        let healthy = |phase| phase == Some(RevisionPhase::Healthy);
        self.wait_revision_phase(name, commit, "Healthy", healthy, true)
            .await?
            .context("no Revision")
    }

    /// Wait until `name`'s Revision at `commit` has a phase `done` accepts (the Revision), or,
    /// with `must_exist` false, there is none (`None`).
    async fn wait_revision_phase(
        &self,
        name: &str,
        commit: &str,
        what: &str,
        done: impl Fn(Option<RevisionPhase>) -> bool,
        must_exist: bool,
    ) -> Result<Option<Revision>> {
        let selector = format!("{}={name}", keys::APPLICATION);
        let revisions = self.api::<Revision>();
        wait_for(&format!("Revision of {name} at {commit} {what}"), DEADLINE, || async {
            let listed = revisions.list(&ListParams::default().labels(&selector)).await?;
            let Some(revision) = at_commit(listed.items, commit) else {
                return Ok(((!must_exist).then_some(None), "no Revision".to_owned()));
            };
            let phase = revision.status.as_ref().and_then(|s| s.phase);
            Ok((done(phase).then_some(Some(revision)), format!("phase {phase:?}")))
        })
        .await
    }

    /// After a wait on the Application's own status: its desired commit's Revision agrees.
    async fn wait_desired_recorded(&self, name: &str, app: &Application) -> Result<()> {
        match app.status.as_ref().and_then(|s| s.desired_revision.clone()) {
            Some(commit) => self.wait_revision_recorded(name, &commit, false).await,
            None => Ok(()),
        }
    }

    /// Wait until `name`'s Ready condition is False with `reason`; returns its message.
    pub async fn wait_failed(&self, name: &str, reason: &str) -> Result<String> {
        let app = self
            .wait_app(name, &format!("Ready=False/{reason}"), |app| {
                ready(app).is_some_and(|(status, r, _)| status == "False" && r == reason)
            })
            .await?;
        self.wait_desired_recorded(name, &app).await?;
        Ok(ready(&app).map(|(_, _, message)| message).unwrap_or_default())
    }

    /// The Revision of Application `name` at `commit`.
    pub async fn revision(&self, name: &str, commit: &str) -> Result<Revision> {
        let selector = format!("{}={name}", keys::APPLICATION);
        let revisions =
            self.api::<Revision>().list(&ListParams::default().labels(&selector)).await?;
        at_commit(revisions.items, commit)
            .with_context(|| format!("no Revision of {name} at {commit}"))
    }

    /// The (type, reason, note) of the Events regarding `name`.
    pub async fn events_for(&self, name: &str) -> Result<Vec<(String, String, String)>> {
        events_regarding(&self.cluster.client(), &self.namespace, name).await
    }

    pub async fn wait_event(
        &self,
        name: &str,
        reason: &str,
    ) -> Result<Vec<(String, String, String)>> {
        wait_for(&format!("Event {reason} on {name}"), DEADLINE, || async {
            let events = self.events_for(name).await?;
            let found = events.iter().any(|(_, r, _)| r == reason);
            let observed = format!("{events:?}");
            Ok((found.then_some(events), observed))
        })
        .await
    }
}

/// The `/metrics` text of the controller whose output is in `log` (its ops address is there).
pub async fn metrics_text(log: &std::path::Path) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let addr = text
        .split_whitespace()
        .rev()
        .find_map(|word| word.strip_prefix("ops_addr="))
        .with_context(|| format!("the controller log {} names its ops address", log.display()))?
        .to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr).await?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response)
}

/// The samples of counter `name` on the `/metrics` of the controller whose output is in `log`,
/// as (labels, value): labels as `key="value"` pairs, in order.
pub async fn counter(log: &std::path::Path, name: &str) -> Result<Vec<(Vec<String>, u64)>> {
    let response = metrics_text(log).await?;
    let mut samples = Vec::new();
    for line in response.lines() {
        let Some(rest) = line.strip_prefix(name) else { continue };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(rest) => rest.split_once("} ").context("a sample line")?,
            None => ("", rest.trim_start()),
        };
        let labels = labels.split(',').filter(|l| !l.is_empty()).map(str::to_owned).collect();
        samples.push((labels, value.trim().parse::<u64>()?));
    }
    Ok(samples)
}

/// Server-side apply cluster-scoped RBAC objects as the admin.
pub async fn apply_cluster_rbac(admin: &kube::Client, objects: &[Value]) -> Result<()> {
    let kinds = kuvryn_sync_apply::kinds::Kinds::default();
    for object in objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let served = kinds
            .resolve(admin, "rbac.authorization.k8s.io/v1", kind)
            .await?
            .context("RBAC kinds are served")?;
        let api: Api<kube::api::DynamicObject> = Api::all_with(admin.clone(), &served.resource);
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        api.patch(&name, &PatchParams::apply("test-setup"), &Patch::Apply(object)).await?;
    }
    Ok(())
}

/// A ClusterRoleBinding of ClusterRole `role` to `deployer` in `namespace`.
pub fn cluster_binding(namespace: &str, role: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
           "metadata": {"name": role},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
           "subjects": [{"kind": "ServiceAccount", "name": DEPLOYER, "namespace": namespace}]})
}

pub fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                merge(into.entry(key).or_insert(Value::Null), value);
            }
        }
        (into, from) => *into = from,
    }
}

/// The Ready condition's (status, reason, message).
pub fn ready(app: &Application) -> Option<(String, String, String)> {
    app.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

pub fn config_map(name: &str, value: &str, annotations: Value) -> String {
    serde_json::to_string(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "annotations": annotations},
        "data": {"value": value},
    }))
    .expect("json")
}

/// The managers of `object`'s fields.
pub fn managers(object: &impl kube::Resource) -> Vec<String> {
    object.meta().managed_fields.iter().flatten().filter_map(|m| m.manager.clone()).collect()
}

pub fn revision_annotation(object: &impl kube::Resource) -> Option<String> {
    object.meta().annotations.as_ref()?.get(keys::REVISION).cloned()
}

/// What [`Env::custom_kind`] made.
#[derive(Debug, Clone)]
pub struct CustomKind {
    /// `<namespace>.example.com`.
    pub group: String,
    /// The CustomResourceDefinition, to commit to Git.
    pub crd: Value,
    /// For clients of the kind.
    pub resource: kube::api::ApiResource,
}

/// The Revision at `commit` among `revisions`: the one of a rendered desired state when there is
/// one, else the one recording failures before any (its desired-state hash is empty).
fn at_commit(revisions: Vec<Revision>, commit: &str) -> Option<Revision> {
    let mut found: Vec<Revision> =
        revisions.into_iter().filter(|r| r.spec.source.revision == commit).collect();
    found.sort_by_key(|r| r.spec.desired_state_hash.is_empty());
    found.into_iter().next()
}

/// Shard Lease name → holder, of the unexpired shard Leases (`--shards N`) in `default`.
pub async fn shard_holders(env: &Env) -> Result<std::collections::BTreeMap<String, String>> {
    use k8s_openapi::api::coordination::v1::Lease;
    let leases: Api<Lease> = Api::namespaced(env.cluster.client(), "default");
    let selector = format!("{}=shard", keys::SHARD_LEASE);
    let listed = leases.list(&ListParams::default().labels(&selector)).await?;
    let now = std::time::SystemTime::now();
    Ok(listed
        .items
        .into_iter()
        .filter_map(|lease| {
            let spec = lease.spec?;
            let holder = spec.holder_identity.filter(|h| !h.is_empty())?;
            let renewed = std::time::SystemTime::from(spec.renew_time?.0);
            let duration =
                std::time::Duration::from_secs(u64::try_from(spec.lease_duration_seconds?).ok()?);
            (renewed + duration > now).then(|| (lease.metadata.name.unwrap_or_default(), holder))
        })
        .collect())
}
