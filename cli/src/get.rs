//! `ksync get repositories|imagepolicies [NAME]`: the other Kuvryn Sync kinds as tables, with
//! `-l`, `-w`, `-A` and `-o json|yaml|wide|name` as `ksync status` has them.

use anyhow::Result;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kuvryn_sync_api::{ImagePolicy, Repository};

use crate::Outcome;
use crate::cluster::Cluster;
use crate::listing::{self, ListArgs, View};
use crate::output::{self, OutputArgs, age, condition, short_commit, table, timestamp};

/// The kinds `get` lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// Repository: where manifests come from, the commit it resolved, Ready.
    #[value(alias = "repository", alias = "repo", alias = "repos")]
    Repositories,
    /// ImagePolicy: the image scanned, the tag and digest selected, Ready.
    #[value(alias = "imagepolicy", alias = "ip")]
    Imagepolicies,
}

/// `ksync get` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct GetArgs {
    /// What to list.
    #[arg(value_enum)]
    pub kind: Kind,
    /// One object to print (default: all of them).
    pub name: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub list: ListArgs,
}

/// `True/FetchSucceeded`, or `-`.
fn ready(conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]) -> String {
    condition(conditions, "Ready")
        .map_or_else(|| "-".to_owned(), |c| format!("{}/{}", c.status, c.reason))
}

/// The Repository table; `wide` adds the last fetch time and the poll interval.
pub fn repository_table(
    items: &[Repository],
    namespaced: bool,
    wide: bool,
    now: Timestamp,
) -> String {
    let mut header = vec!["NAME", "URL", "REVISION", "COMMIT", "READY", "AGE"];
    if wide {
        header.extend(["LAST-FETCH", "POLL"]);
    }
    let rows = items
        .iter()
        .map(|r| {
            let status = r.status.clone().unwrap_or_default();
            let git = r.spec.git.as_ref();
            let mut row = vec![
                r.metadata.name.clone().unwrap_or_default(),
                git.map_or_else(|| "-".to_owned(), |g| g.url.clone()),
                git.and_then(|g| g.revision.clone()).unwrap_or_else(|| "-".into()),
                short_commit(status.observed_revision.as_deref()),
                ready(&status.conditions),
                age(now, r.metadata.creation_timestamp.as_ref()),
            ];
            if wide {
                row.push(timestamp(status.last_fetched_at.as_ref()));
                row.push(r.spec.poll_interval.clone().unwrap_or_else(|| "default".into()));
            }
            with_namespace(row, namespaced, r.metadata.namespace.as_deref())
        })
        .collect::<Vec<_>>();
    table(&headers(header, namespaced), &rows)
}

/// The ImagePolicy table; `wide` adds the digest and the last scan time.
pub fn image_policy_table(
    items: &[ImagePolicy],
    namespaced: bool,
    wide: bool,
    now: Timestamp,
) -> String {
    let mut header = vec!["NAME", "IMAGE", "LATEST-TAG", "READY", "AGE"];
    if wide {
        header.extend(["DIGEST", "LAST-SCAN"]);
    }
    let rows = items
        .iter()
        .map(|p| {
            let status = p.status.clone().unwrap_or_default();
            let mut row = vec![
                p.metadata.name.clone().unwrap_or_default(),
                p.spec.image.clone(),
                status.latest_tag.clone().unwrap_or_else(|| "-".into()),
                ready(&status.conditions),
                age(now, p.metadata.creation_timestamp.as_ref()),
            ];
            if wide {
                row.push(status.latest_digest.clone().unwrap_or_else(|| "-".into()));
                row.push(timestamp(status.last_scanned_at.as_ref()));
            }
            with_namespace(row, namespaced, p.metadata.namespace.as_deref())
        })
        .collect::<Vec<_>>();
    table(&headers(header, namespaced), &rows)
}

fn headers(mut header: Vec<&str>, namespaced: bool) -> Vec<&str> {
    if namespaced {
        header.insert(0, "NAMESPACE");
    }
    header
}

fn with_namespace(mut row: Vec<String>, namespaced: bool, namespace: Option<&str>) -> Vec<String> {
    if namespaced {
        row.insert(0, namespace.unwrap_or_default().to_owned());
    }
    row
}

/// Run `ksync get`.
pub async fn run(cluster: &Cluster, args: &GetArgs) -> Result<Outcome> {
    if args.name.is_some() && (cluster.all_namespaces || args.list.selector.is_some()) {
        return Err(crate::Refused(
            "a NAME with -A or -l: name one object in one namespace, or list with -A/-l".into(),
        )
        .into());
    }
    let all = cluster.all_namespaces;
    let scope =
        if all { "any namespace".to_owned() } else { format!("namespace {}", cluster.namespace) };
    match args.kind {
        Kind::Repositories => {
            let api: Api<Repository> = scoped(cluster);
            let table = move |items: &[Repository], wide: bool| {
                repository_table(items, all, wide, Timestamp::now())
            };
            let view = View {
                resource: "repository.sync.kuvryn.io",
                table: &table,
                empty: format!("No Repositories in {scope}."),
            };
            one_or_all(api, args, &view).await
        }
        Kind::Imagepolicies => {
            let api: Api<ImagePolicy> = scoped(cluster);
            let table = move |items: &[ImagePolicy], wide: bool| {
                image_policy_table(items, all, wide, Timestamp::now())
            };
            let view = View {
                resource: "imagepolicy.sync.kuvryn.io",
                table: &table,
                empty: format!("No ImagePolicies in {scope}."),
            };
            one_or_all(api, args, &view).await
        }
    }
}

fn scoped<K>(cluster: &Cluster) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    if cluster.all_namespaces {
        Api::all(cluster.client.clone())
    } else {
        Api::namespaced(cluster.client.clone(), &cluster.namespace)
    }
}

async fn one_or_all<K>(api: Api<K>, args: &GetArgs, view: &View<'_, K>) -> Result<Outcome>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + 'static,
{
    let Some(name) = &args.name else {
        return listing::show(api, &args.list, args.output.format, view).await;
    };
    if args.list.watch {
        return Err(
            crate::Refused("-w with a NAME: watch the list (`ksync get KIND -w`)".into()).into()
        );
    }
    let object = api.get_opt(name).await?.ok_or_else(|| {
        anyhow::anyhow!(
            "no {} named {name}; list them with `ksync get {}`",
            view.resource,
            view.resource.split('.').next().unwrap_or_default()
        )
    })?;
    output::print(&listing::render(&[object], args.output.format, view, true)?)?;
    Ok(Outcome::Done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2026-12-01T10:05:00Z".parse().expect("time")
    }

    #[test]
    fn repositories_show_url_revision_commit_and_ready() {
        let repo: Repository = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
            "metadata": {"name": "apps", "namespace": "team-a", "creationTimestamp": "2026-12-01T10:00:00Z"},
            "spec": {"type": "git", "git": {"url": "https://git.example/apps.git", "revision": "main"}},
            "status": {"state": "Ready", "observedRevision": "0123456789abcdef",
                       "conditions": [{"type": "Ready", "status": "True", "reason": "FetchSucceeded",
                                       "message": "", "lastTransitionTime": "2026-12-01T10:01:00Z"}]},
        }))
        .expect("repository");
        let text = repository_table(std::slice::from_ref(&repo), false, false, now());
        let row: Vec<&str> = text.lines().nth(1).expect("row").split_whitespace().collect();
        assert_eq!(
            row,
            [
                "apps",
                "https://git.example/apps.git",
                "main",
                "0123456789ab",
                "True/FetchSucceeded",
                "5m"
            ]
        );
        let wide = repository_table(&[repo], true, true, now());
        assert!(wide.starts_with("NAMESPACE"), "{wide}");
        assert!(wide.lines().next().is_some_and(|h| h.ends_with("POLL")), "{wide}");
    }

    #[test]
    fn image_policies_show_image_tag_and_ready() {
        let policy: ImagePolicy = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "ImagePolicy",
            "metadata": {"name": "web", "namespace": "team-a"},
            "spec": {"image": "registry.example/web", "policy": {"semver": {"range": ">=1.0.0"}}},
            "status": {"latestTag": "1.2.3"},
        }))
        .expect("policy");
        let text = image_policy_table(&[policy], false, false, now());
        let row: Vec<&str> = text.lines().nth(1).expect("row").split_whitespace().collect();
        assert_eq!(row, ["web", "registry.example/web", "1.2.3", "-", "<unknown>"]);
    }
}
