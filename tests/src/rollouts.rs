//! Rollouts for the reliability suites (`crash_e2e`, `faults_e2e`): the desired state of
//! Application `app-N` at each commit (ConfigMaps, a Service and a Deployment that come and go,
//! so prune runs), pushing it, and the checks made once every Application converged: one
//! Revision per (commit, desired state), nothing pruned that the desired state of the time
//! declared ([`DeletionWatch`]), the live objects and the inventory exactly the last desired
//! state.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, WatchEvent, WatchParams};
use kuvryn_sync_api::{Application, HealthState, Revision, RevisionPhase, SyncState, keys};
use kuvryn_sync_core::application::revision_name;
use serde_json::json;

use crate::application::{DEADLINE, Env, config_map, ready};
use crate::cluster::wait_for;

/// One object of an Application's desired state.
#[derive(Debug, Clone)]
pub struct Object {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub name: String,
    pub manifest: String,
}

pub fn app_name(app: usize) -> String {
    format!("app-{app}")
}

/// What Application `app` deploys at commit `commit` (1-based). A window of three ConfigMaps
/// slides by one each commit (one added, two changed, one removed); the Service and the
/// Deployment come and go on different beats, so the kinds in use grow and shrink.
pub fn desired(app: usize, commit: usize) -> Vec<Object> {
    let prefix = app_name(app);
    let mut objects: Vec<Object> = (commit - 1..=commit + 1)
        .map(|n| {
            let name = format!("{prefix}-cm-{n}");
            Object {
                kind: "ConfigMap",
                api_version: "v1",
                manifest: config_map(&name, &commit.to_string(), json!({})),
                name,
            }
        })
        .collect();
    if !(commit + app).is_multiple_of(3) {
        let name = format!("{prefix}-svc");
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": prefix}, "ports": [{"port": 8000 + commit}]}});
        objects.push(Object {
            kind: "Service",
            api_version: "v1",
            manifest: serde_json::to_string(&service).expect("json"),
            name,
        });
    }
    if (commit + app) % 2 == 1 {
        let name = format!("{prefix}-web");
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": prefix}},
                     "template": {"metadata": {"labels": {"app": prefix}},
                                  "spec": {"containers": [{"name": "web",
                                      "image": format!("registry.example/web:{commit}")}]}}}});
        objects.push(Object {
            kind: "Deployment",
            api_version: "apps/v1",
            manifest: serde_json::to_string(&deployment).expect("json"),
            name,
        });
    }
    objects
}

/// Replace everything under `apps/` with the desired state of Applications `0..apps` at
/// `commit`, in one Git commit, and announce it.
pub async fn push_commit(env: &Env, apps: usize, commit: usize) -> Result<String> {
    env.repo.git(&["rm", "-r", "-q", "--ignore-unmatch", "apps"])?;
    let files: Vec<(String, String)> = (0..apps)
        .flat_map(|app| {
            desired(app, commit).into_iter().map(move |o| {
                let path = format!("apps/{}/{}-{}.yaml", app_name(app), o.kind, o.name);
                (path.to_lowercase(), o.manifest)
            })
        })
        .collect();
    let refs: Vec<(&str, String)> = files.iter().map(|(p, c)| (p.as_str(), c.clone())).collect();
    env.push(&refs, &format!("commit {commit}")).await
}

/// The names of the objects `api` lists with Application `name`'s label.
pub async fn labelled<K>(api: &Api<K>, name: &str) -> Result<BTreeSet<String>>
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    let selector = format!("{}={name}", keys::APPLICATION);
    Ok(api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .iter()
        .map(|o| o.name_any())
        .collect())
}

/// The kinds the rollouts deploy, for [`DeletionWatch`].
pub fn rollout_kinds() -> Vec<ApiResource> {
    vec![
        ApiResource::erase::<ConfigMap>(&()),
        ApiResource::erase::<Service>(&()),
        ApiResource::erase::<Deployment>(&()),
    ]
}

/// One object removed from the API (its DELETED event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    pub kind: String,
    pub name: String,
    pub resource_version: u64,
}

#[derive(Debug, Default)]
struct Seen {
    deletions: Vec<Deletion>,
    /// The newest version each kind's watch has seen (events and bookmarks).
    newest: BTreeMap<String, u64>,
    /// Anything that may have made the record incomplete (`410 Gone`).
    gaps: Vec<String>,
}

/// Every deletion of objects of some kinds in a namespace, as the API server reports them: per
/// kind a watch from a listed version, resumed from the last version seen whenever it ends, so
/// no DELETED event is missed; a `410 Gone` (history compacted) is recorded as a gap, which
/// fails [`DeletionWatch::deletions_up_to`]. Stops on drop.
#[derive(Debug)]
pub struct DeletionWatch {
    seen: Arc<Mutex<Seen>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// A version as a number (the sandbox's and etcd's are).
fn version(rv: &str) -> u64 {
    rv.parse().unwrap_or_default()
}

impl DeletionWatch {
    pub async fn start(
        client: &kube::Client,
        namespace: &str,
        kinds: &[ApiResource],
    ) -> Result<Self> {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut tasks = Vec::new();
        for kind in kinds {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, kind);
            let listed = api.list(&ListParams::default().limit(1)).await?;
            let mut rv = listed.metadata.resource_version.context("a list version")?;
            let seen = seen.clone();
            let kind_name = kind.kind.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    // Short watches: each ends with a bookmark at the newest version.
                    let params = WatchParams::default().timeout(5);
                    let stream = match api.watch(&params, &rv).await {
                        Ok(stream) => stream,
                        Err(_) => {
                            // Back off before watching again (not a synchronisation).
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    };
                    let mut stream = std::pin::pin!(stream);
                    while let Some(event) = stream.next().await {
                        let Ok(event) = event else { break };
                        let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                        let at = match &event {
                            WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                                o.resource_version().unwrap_or_default()
                            }
                            WatchEvent::Deleted(o) => {
                                let at = o.resource_version().unwrap_or_default();
                                seen.deletions.push(Deletion {
                                    kind: kind_name.clone(),
                                    name: o.name_any(),
                                    resource_version: version(&at),
                                });
                                at
                            }
                            WatchEvent::Bookmark(b) => b.metadata.resource_version.clone(),
                            WatchEvent::Error(status) => {
                                seen.gaps.push(format!(
                                    "{kind_name} watch from {rv}: {} {}",
                                    status.code, status.message
                                ));
                                return;
                            }
                        };
                        if !at.is_empty() {
                            let n = seen.newest.entry(kind_name.clone()).or_default();
                            *n = (*n).max(version(&at));
                            rv = at;
                        }
                    }
                }
            }));
        }
        Ok(DeletionWatch { seen, tasks })
    }

    /// Wait until every kind's watch has seen version `at` (a list's version), then the
    /// deletions so far; an error if the record may be incomplete.
    pub async fn deletions_up_to(&self, at: u64, kinds: usize) -> Result<Vec<Deletion>> {
        wait_for(&format!("the deletion watches to reach version {at}"), DEADLINE, || async {
            let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            let done = seen.newest.len() == kinds && seen.newest.values().all(|n| *n >= at);
            Ok((done.then_some(()), format!("{:?}", seen.newest)))
        })
        .await?;
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        anyhow::ensure!(seen.gaps.is_empty(), "the deletion record has gaps: {:?}", seen.gaps);
        Ok(seen.deletions.clone())
    }
}

impl Drop for DeletionWatch {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Wait until every Application of `names` is Synced at `last`, Ready=True/Healthy, and its
/// Revision of `last` is Healthy: a rollout suite's convergence.
pub async fn wait_converged(env: &Env, names: &[String], last: &str) -> Result<()> {
    for name in names {
        env.wait_app(name, &format!("Synced at {last}, Ready=True/Healthy"), |app| {
            app.status.as_ref().is_some_and(|s| {
                s.deployed_revision.as_deref() == Some(last)
                    && s.sync.state == SyncState::Synced
                    && s.health.state == HealthState::Healthy
            }) && ready(app).is_some_and(|(s, r, _)| s == "True" && r == "Healthy")
        })
        .await?;
        wait_for(&format!("the Revision of {name} at {last} is Healthy"), DEADLINE, || async {
            let phase = env.revision(name, last).await?.status.and_then(|s| s.phase);
            Ok(((phase == Some(RevisionPhase::Healthy)).then_some(()), format!("{phase:?}")))
        })
        .await
        .with_context(|| format!("controller log, last lines:\n{}", env.log_tail(40)))?;
    }
    Ok(())
}

/// The API's current version, as a list in `namespace` reports it.
pub async fn current_version(env: &Env) -> Result<u64> {
    let listed = env.api::<ConfigMap>().list(&ListParams::default().limit(1)).await?;
    Ok(version(&listed.metadata.resource_version.unwrap_or_default()))
}

/// Deletions that removed an object the desired state of their round still declared. Round
/// `k` (1-based) runs from `round_ends[k-2]` (0 for the first) to `round_ends[k-1]`: after
/// every Application was Synced at commit `k-1`, only commit `k` was being rolled out, so
/// only an object absent from `desired(app, k)` may be deleted then.
pub fn wrong_prunes(apps: usize, deletions: &[Deletion], round_ends: &[u64]) -> Vec<String> {
    let mut problems = Vec::new();
    for d in deletions {
        let Some(app) = (0..apps).find(|a| d.name.starts_with(&format!("{}-", app_name(*a))))
        else {
            continue;
        };
        let round = round_ends.iter().position(|end| d.resource_version <= *end).map(|i| i + 1);
        let Some(round) = round else {
            problems.push(format!(
                "{} {} deleted after the last round, at {}",
                d.kind, d.name, d.resource_version
            ));
            continue;
        };
        let declared = desired(app, round).iter().any(|o| o.kind == d.kind && o.name == d.name);
        if declared {
            problems.push(format!(
                "{} {} was deleted at version {} during the rollout of commit {round}, which \
                 declares it",
                d.kind, d.name, d.resource_version
            ));
        }
    }
    problems
}

/// One Revision per (Application, commit, desired-state hash), under the deterministic name,
/// and one per commit of `commits`; the problems found.
pub async fn revision_problems(
    env: &Env,
    names: &[String],
    commits: &[String],
) -> Result<Vec<String>> {
    let revisions = env.api::<Revision>().list(&ListParams::default()).await?.items;
    let mut problems = Vec::new();
    let mut per_pair: BTreeMap<(String, String, String), Vec<String>> = BTreeMap::new();
    for revision in &revisions {
        let app = revision.labels().get(keys::APPLICATION).cloned().unwrap_or_default();
        if app != revision.spec.application_ref.name {
            problems.push(format!(
                "Revision {} is labelled for {app:?} but belongs to {}",
                revision.name_any(),
                revision.spec.application_ref.name
            ));
        }
        let key =
            (app, revision.spec.source.revision.clone(), revision.spec.desired_state_hash.clone());
        per_pair.entry(key).or_default().push(revision.name_any());
    }
    let listing: Vec<String> = revisions
        .iter()
        .map(|r| {
            format!(
                "{} commit={} hash={} phase={:?} attempts={}",
                r.name_any(),
                r.spec.source.revision,
                r.spec.desired_state_hash,
                r.status.as_ref().and_then(|s| s.phase),
                r.status.as_ref().map_or(0, |s| s.attempts)
            )
        })
        .collect();
    for ((app, commit, hash), found) in &per_pair {
        if found.len() != 1 {
            problems.push(format!(
                "{} Revisions of {app} at commit {commit}, hash {hash}: {found:?}",
                found.len()
            ));
        }
        let expected = revision_name(app, commit, hash);
        if found[0] != expected {
            problems.push(format!(
                "Revision {} of {app} at {commit} should be named {expected}",
                found[0]
            ));
        }
    }
    let mut expected: Vec<&String> = commits.iter().collect();
    expected.sort();
    for name in names {
        let of_app: Vec<&String> = per_pair.keys().filter(|k| &k.0 == name).map(|k| &k.1).collect();
        let mut at: Vec<&String> = of_app.clone();
        at.sort();
        at.dedup();
        if of_app.len() != at.len() {
            problems
                .push(format!("{name} has two desired-state hashes for one commit: {listing:#?}"));
        }
        if at != expected {
            problems.push(format!(
                "{name} should have one Revision per commit {commits:?}: {listing:#?}"
            ));
        }
    }
    Ok(problems)
}

/// Against the last desired state (commit `last`, 1-based): no orphan, nothing missing, every
/// object at the last commit's content, objects of earlier commits gone (labelled or not), and
/// `status.managedKinds` exactly the last desired state's kinds; the problems found.
pub async fn inventory_problems(env: &Env, apps: usize, last: usize) -> Result<Vec<String>> {
    let cms = env.api::<ConfigMap>();
    let services = env.api::<Service>();
    let deployments = env.api::<Deployment>();
    let mut problems = Vec::new();
    for app in 0..apps {
        let name = app_name(app);
        let wanted = desired(app, last);
        let wanted_of = |kind: &str| -> BTreeSet<String> {
            wanted.iter().filter(|o| o.kind == kind).map(|o| o.name.clone()).collect()
        };
        let live = [
            ("ConfigMap", labelled(&cms, &name).await?),
            ("Service", labelled(&services, &name).await?),
            ("Deployment", labelled(&deployments, &name).await?),
        ];
        for (kind, found) in live {
            let expected = wanted_of(kind);
            let orphans: Vec<&String> = found.difference(&expected).collect();
            let missing: Vec<&String> = expected.difference(&found).collect();
            if !orphans.is_empty() || !missing.is_empty() {
                problems
                    .push(format!("{name}'s {kind}s: orphaned {orphans:?}, missing {missing:?}"));
            }
        }
        let removed: BTreeSet<(&str, String)> = (1..last)
            .flat_map(|c| desired(app, c))
            .map(|o| (o.kind, o.name))
            .filter(|(kind, object)| !wanted_of(kind).contains(object))
            .collect();
        for (kind, object) in &removed {
            let present = match *kind {
                "ConfigMap" => cms.get_opt(object).await?.is_some(),
                "Service" => services.get_opt(object).await?.is_some(),
                _ => deployments.get_opt(object).await?.is_some(),
            };
            if present {
                problems.push(format!("{kind} {object} of {name} was removed from Git but lives"));
            }
        }
        for object in &wanted {
            let (content, expected) = match object.kind {
                "ConfigMap" => (
                    cms.get_opt(&object.name).await?.and_then(|cm| cm.data?.get("value").cloned()),
                    last.to_string(),
                ),
                "Service" => (
                    services
                        .get_opt(&object.name)
                        .await?
                        .and_then(|s| s.spec?.ports?.first().map(|p| p.port.to_string())),
                    (8000 + last).to_string(),
                ),
                _ => (
                    deployments
                        .get_opt(&object.name)
                        .await?
                        .and_then(|d| d.spec?.template.spec?.containers.first()?.image.clone()),
                    format!("registry.example/web:{last}"),
                ),
            };
            if content.as_deref() != Some(expected.as_str()) {
                problems.push(format!(
                    "{} {} of {name}: {content:?} instead of the last commit's {expected:?}",
                    object.kind, object.name
                ));
            }
        }
        let status = env.api::<Application>().get(&name).await?.status.context("status")?;
        let kinds: BTreeSet<(String, String)> =
            status.managed_kinds.iter().map(|k| (k.api_version.clone(), k.kind.clone())).collect();
        let expected: BTreeSet<(String, String)> =
            wanted.iter().map(|o| (o.api_version.to_owned(), o.kind.to_owned())).collect();
        if kinds != expected {
            problems.push(format!(
                "{name}'s status.managedKinds is {kinds:?}, the kinds of its last desired state \
                 {expected:?}"
            ));
        }
    }
    Ok(problems)
}
