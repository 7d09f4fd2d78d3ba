//! `ksync diagnose APP`: `status.diagnosis` as a tree: each root cause (reason and resource, the
//! evidence), then the chain from the unhealthy managed resource down to it, indented.

use anyhow::Result;
use kuvryn_sync_api::{Application, Diagnosis, ResourceRef};

use crate::Outcome;
use crate::cluster::Cluster;
use crate::output::{self, OutputArgs, ready_summary};

/// `ksync diagnose` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct DiagnoseArgs {
    /// The Application.
    pub app: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Run `ksync diagnose`.
pub async fn run(cluster: &Cluster, args: &DiagnoseArgs) -> Result<Outcome> {
    let app = cluster.application(&args.app).await?;
    let diagnosis = app.status.as_ref().map(|s| s.diagnosis.clone()).unwrap_or_default();
    let text = match args.output.format {
        Some(format) => output::structured(format, &diagnosis)?,
        None => view(&app, &diagnosis),
    };
    output::print(&text)?;
    Ok(Outcome::Done)
}

/// The human view: the tree, or a line saying there is nothing to diagnose.
pub fn view(app: &Application, diagnosis: &[Diagnosis]) -> String {
    let name = app.metadata.name.as_deref().unwrap_or_default();
    if !diagnosis.is_empty() {
        return tree(diagnosis);
    }
    let ready = ready_summary(app);
    if ready == "True/Healthy" {
        format!("{name} is healthy, nothing to diagnose\n")
    } else {
        format!(
            "{name} has no root cause in status.diagnosis (Ready: {ready}); `ksync status {name}` \
             shows its conditions\n"
        )
    }
}

fn resource(r: &ResourceRef) -> String {
    if r.namespace.is_empty() {
        format!("{} {}", r.kind, r.name)
    } else {
        format!("{} {}/{}", r.kind, r.namespace, r.name)
    }
}

/// Every root cause with its chain, indented one step per resource.
pub fn tree(diagnosis: &[Diagnosis]) -> String {
    let mut out = String::new();
    for (i, entry) in diagnosis.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!("{}: {}\n", entry.reason, resource(&entry.resource)));
        if !entry.message.is_empty() {
            out.push_str(&format!("  {}\n", entry.message));
        }
        for (depth, link) in entry.chain.iter().enumerate() {
            let pad = "   ".repeat(depth);
            let branch = if depth == 0 { "" } else { "└─ " };
            out.push_str(&format!("  {pad}{branch}{}\n", resource(link)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(ready: &str, reason: &str) -> Application {
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "web", "namespace": "team-a"},
            "spec": {"source": {"repositoryRef": {"name": "apps"}, "render": {"type": "yaml"}},
                     "destination": {"namespace": "team-a"}},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": reason,
                                       "message": "", "lastTransitionTime": "2026-12-01T10:00:00Z"}]},
        }))
        .expect("application")
    }

    #[test]
    fn the_tree_shows_the_root_cause_then_the_chain_indented() {
        let diagnosis: Vec<Diagnosis> = serde_json::from_value(json!([{
            "resource": {"apiVersion": "v1", "kind": "Secret", "namespace": "payments", "name": "db"},
            "reason": "MissingSecret",
            "message": "Pod api-7d9f-x2k references Secret db, which does not exist",
            "chain": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "payments", "name": "api"},
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "namespace": "payments", "name": "api-7d9f"},
                {"apiVersion": "v1", "kind": "Pod", "namespace": "payments", "name": "api-7d9f-x2k"},
                {"apiVersion": "v1", "kind": "Secret", "namespace": "payments", "name": "db"},
            ],
        }]))
        .expect("diagnosis");
        let want = "\
MissingSecret: Secret payments/db
  Pod api-7d9f-x2k references Secret db, which does not exist
  Deployment payments/api
     └─ ReplicaSet payments/api-7d9f
        └─ Pod payments/api-7d9f-x2k
           └─ Secret payments/db
";
        assert_eq!(tree(&diagnosis), want);
    }

    #[test]
    fn an_empty_diagnosis_says_healthy_or_points_at_the_conditions() {
        assert_eq!(view(&app("True", "Healthy"), &[]), "web is healthy, nothing to diagnose\n");
        let failing = view(&app("False", "ValidationFailure"), &[]);
        assert!(failing.contains("Ready: False/ValidationFailure"), "{failing}");
    }
}
