//! `ksync logs APP`: the logs of the Pods of an Application's workloads.
//!
//! The workloads are the Application's managed Deployments, StatefulSets, DaemonSets, ReplicaSets
//! and Jobs (found by its labels in the destination namespace); their Pods are the ones their
//! `spec.selector` selects, as the workload controllers select them. Each container's log is read
//! through `pods/log` and printed with a `[pod/container]` prefix, redacted like every output.

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DynamicObject, ListParams, LogParams};
use kube::discovery::pinned_kind;
use kuvryn_sync_api::keys;

use crate::Outcome;
use crate::cluster::Cluster;
use crate::output;

/// The workload kinds whose Pods are read, as (group, version, kind).
pub const WORKLOADS: &[(&str, &str, &str)] = &[
    ("apps", "v1", "Deployment"),
    ("apps", "v1", "StatefulSet"),
    ("apps", "v1", "DaemonSet"),
    ("apps", "v1", "ReplicaSet"),
    ("batch", "v1", "Job"),
];

/// `ksync logs` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct LogsArgs {
    /// The Application.
    pub app: String,
    /// Only this container of each Pod (default: every container).
    #[arg(short = 'c', long, value_name = "NAME")]
    pub container: Option<String>,
    /// Lines from the end of each log (default: all).
    #[arg(long, value_name = "N")]
    pub tail: Option<i64>,
    /// The previous (terminated) instance of each container, as kubectl logs --previous.
    #[arg(short = 'p', long)]
    pub previous: bool,
}

/// A label selector as the `labelSelector` query text; `None` for a selector that selects
/// nothing usable (empty, which would select every Pod).
pub fn selector_text(selector: &LabelSelector) -> Option<String> {
    let mut parts: Vec<String> =
        selector.match_labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            _ => return None,
        });
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

/// `line` of the log of `pod`/`container`, prefixed.
pub fn prefixed(pod: &str, container: &str, log: &str) -> String {
    log.lines().map(|line| format!("[{pod}/{container}] {line}\n")).collect()
}

/// The selectors of the Application's workloads in `namespace`.
async fn workload_selectors(
    cluster: &Cluster,
    app: &str,
    namespace: &str,
) -> Result<BTreeSet<String>> {
    let by_app = ListParams::default().labels(&format!("{}={app}", keys::APPLICATION));
    let mut selectors = BTreeSet::new();
    for (group, version, kind) in WORKLOADS {
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        let Ok((resource, _)) = pinned_kind(&cluster.client, &gvk).await else { continue };
        let api: Api<DynamicObject> =
            Api::namespaced_with(cluster.client.clone(), namespace, &resource);
        let listed =
            api.list(&by_app).await.with_context(|| format!("cannot list {}", resource.plural))?;
        for object in listed.items {
            let selector: Option<LabelSelector> =
                serde_json::from_value(object.data["spec"]["selector"].clone()).ok();
            if let Some(text) = selector.as_ref().and_then(selector_text) {
                selectors.insert(text);
            }
        }
    }
    Ok(selectors)
}

/// Run `ksync logs`.
pub async fn run(cluster: &Cluster, args: &LogsArgs) -> Result<Outcome> {
    let app = cluster.application(&args.app).await?;
    let namespace = app.spec.destination.namespace.clone();
    let selectors = workload_selectors(cluster, &args.app, &namespace).await?;
    if selectors.is_empty() {
        output::print(&format!(
            "{} manages no workload (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job) in \
             namespace {namespace}; there are no Pods to read\n",
            args.app
        ))?;
        return Ok(Outcome::NotMet);
    }
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), &namespace);
    let mut seen = BTreeSet::new();
    for selector in &selectors {
        let listed =
            pods.list(&ListParams::default().labels(selector)).await.context("cannot list Pods")?;
        for pod in listed.items {
            let name = pod.metadata.name.clone().unwrap_or_default();
            if seen.insert(name.clone()) {
                print_pod(&pods, &pod, &name, args).await?;
            }
        }
    }
    if seen.is_empty() {
        output::print(&format!("no Pods yet for the workloads of {}\n", args.app))?;
        return Ok(Outcome::NotMet);
    }
    Ok(Outcome::Done)
}

async fn print_pod(pods: &Api<Pod>, pod: &Pod, name: &str, args: &LogsArgs) -> Result<()> {
    let containers: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter().map(|c| c.name.clone()))
        .filter(|c| args.container.as_ref().is_none_or(|want| want == c))
        .collect();
    for container in containers {
        let params = LogParams {
            container: Some(container.clone()),
            tail_lines: args.tail,
            previous: args.previous,
            ..Default::default()
        };
        match pods.logs(name, &params).await {
            Ok(log) => output::print(&prefixed(name, &container, &log))?,
            Err(err) => eprintln!(
                "{}",
                kuvryn_sync_core::redact::redact_shapes(&format!(
                    "[{name}/{container}] no log: {err}"
                ))
            ),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_become_query_text() {
        let s: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]},
                                  {"key": "canary", "operator": "DoesNotExist"}],
        }))
        .expect("selector");
        assert_eq!(selector_text(&s).as_deref(), Some("app=web,tier in (a,b),!canary"));
        assert_eq!(selector_text(&LabelSelector::default()), None);
    }

    #[test]
    fn each_line_is_prefixed_with_pod_and_container() {
        assert_eq!(prefixed("web-1", "app", "a\nb\n"), "[web-1/app] a\n[web-1/app] b\n");
    }
}
