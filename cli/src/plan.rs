//! `ksync plan APP [REVISION]`: a Revision's plan as a per-resource change list.
//!
//! The plan comes from `Revision.status.plan`, which the controller already bounded and redacted;
//! the view prints field paths only, never values.

use anyhow::{Result, bail};
use kuvryn_sync_api::{PlanAction, PlanSummary, ResourceRef, Revision};

use crate::Outcome;
use crate::cluster::Cluster;
use crate::output::{self, Colour, OutputArgs, Style, short_commit};
use crate::revisions::{self, name, phase};

/// `ksync plan` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct PlanArgs {
    /// The Application.
    pub app: String,
    /// Revision name, or a commit prefix of at least 7 characters (default: the newest Revision).
    pub revision: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Run `ksync plan`.
pub async fn run(cluster: &Cluster, args: &PlanArgs) -> Result<Outcome> {
    cluster.application(&args.app).await?;
    let all = cluster.revisions(&args.app).await?;
    let revision = match &args.revision {
        Some(query) => revisions::find(&all, query).ok_or_else(|| {
            anyhow::anyhow!(
                "Application {} has no Revision {query}; list them with `ksync history {}`",
                args.app,
                args.app
            )
        })?,
        None => all.first().ok_or_else(|| {
            anyhow::anyhow!(
                "Application {} has no Revision yet; wait for the controller to plan one \
                 (`ksync status {}` shows why it has not)",
                args.app,
                args.app
            )
        })?,
    };
    let Some(plan) = revision.status.as_ref().and_then(|s| s.plan.as_ref()) else {
        bail!(
            "Revision {} has no plan yet (phase {}); try again once it is planned",
            name(revision),
            phase(revision).map_or_else(|| "-".to_owned(), |p| p.to_string())
        );
    };
    if let Some(format) = args.output.format {
        output::print(&output::structured(format, plan)?)?;
    } else {
        output::print(&describe(revision, plan, Style::for_stdout()))?;
    }
    Ok(Outcome::Done)
}

/// `apps/v1 Deployment team-a/web`.
pub fn resource(r: &ResourceRef) -> String {
    if r.namespace.is_empty() {
        format!("{} {} {}", r.api_version, r.kind, r.name)
    } else {
        format!("{} {} {}/{}", r.api_version, r.kind, r.namespace, r.name)
    }
}

/// The header line and the plan of `revision`.
pub fn describe(revision: &Revision, plan: &PlanSummary, style: Style) -> String {
    format!(
        "Revision {} (commit {}, {})\n{}",
        name(revision),
        short_commit(Some(&revision.spec.source.revision)),
        phase(revision).map_or_else(|| "-".to_owned(), |p| p.to_string()),
        plan_text(plan, style)
    )
}

/// A plan as readable lines: `+ create`, `~ update` with the changed field paths, `- delete`,
/// then the counts, warnings, adopted fields and the digest.
pub fn plan_text(plan: &PlanSummary, style: Style) -> String {
    let mut out = String::new();
    for change in &plan.changes {
        let (mark, word, colour) = match change.action {
            PlanAction::Create => ("+", "create", Colour::Green),
            PlanAction::Update => ("~", "update", Colour::Yellow),
            PlanAction::Delete => ("-", "delete", Colour::Red),
            PlanAction::Unchanged => ("=", "unchanged", Colour::Dim),
        };
        if change.action == PlanAction::Unchanged && change.warning.is_none() {
            continue; // counted below; listed only when a warning explains it
        }
        let wave =
            if change.wave == 0 { String::new() } else { format!(" (wave {})", change.wave) };
        let head = format!("{mark} {word} {}{wave}", resource(&change.resource));
        out.push_str(&style.paint(colour, &head));
        out.push('\n');
        for field in &change.fields {
            out.push_str(&format!("    {field}\n"));
        }
    }
    if plan.truncated {
        out.push_str("  … more changes than the plan summary keeps (at most 100 are listed)\n");
    }
    out.push_str(&format!(
        "Plan: {} to create, {} to update, {} to delete, {} unchanged\n",
        plan.create, plan.update, plan.delete, plan.unchanged
    ));
    let warnings: Vec<_> =
        plan.changes.iter().filter_map(|c| Some((c, c.warning.as_ref()?))).collect();
    if !warnings.is_empty() {
        out.push_str("Warnings:\n");
        for (change, warning) in warnings {
            let line = format!("  ! {}: {warning}", resource(&change.resource));
            out.push_str(&style.paint(Colour::Yellow, &line));
            out.push('\n');
        }
    }
    let adopted: Vec<_> =
        plan.changes.iter().flat_map(|c| c.adopted.iter().map(move |a| (c, a))).collect();
    if !adopted.is_empty() {
        out.push_str("Adopted fields:\n");
        for (change, field) in adopted {
            out.push_str(&format!(
                "  {} {} (from {})\n",
                resource(&change.resource),
                field.field,
                field.previous_manager
            ));
        }
    }
    out.push_str(&format!("Digest: {}\n", plan.digest));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan() -> PlanSummary {
        serde_json::from_value(json!({
            "digest": "sha256:abc", "create": 1, "update": 1, "delete": 1, "unchanged": 2,
            "changes": [
                {"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "team-a",
                              "name": "settings"}, "action": "Create"},
                {"resource": {"apiVersion": "apps/v1", "kind": "Deployment",
                              "namespace": "team-a", "name": "web"},
                 "action": "Update", "wave": 2, "fields": [".spec.replicas"],
                 "adopted": [{"field": ".spec.replicas", "previousManager": "kubectl-edit"}]},
                {"resource": {"apiVersion": "v1", "kind": "Service", "namespace": "team-a",
                              "name": "old"}, "action": "Delete"},
                {"resource": {"apiVersion": "v1", "kind": "Secret", "namespace": "team-a",
                              "name": "keep"}, "action": "Unchanged",
                 "warning": "Secret is a high-risk kind and is never pruned"},
                {"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "team-a",
                              "name": "same"}, "action": "Unchanged"},
            ],
        }))
        .expect("plan")
    }

    #[test]
    fn the_plan_lists_each_change_the_counts_warnings_adoptions_and_digest() {
        let text = plan_text(&plan(), Style { colour: false });
        let want = "\
+ create v1 ConfigMap team-a/settings
~ update apps/v1 Deployment team-a/web (wave 2)
    .spec.replicas
- delete v1 Service team-a/old
= unchanged v1 Secret team-a/keep
Plan: 1 to create, 1 to update, 1 to delete, 2 unchanged
Warnings:
  ! v1 Secret team-a/keep: Secret is a high-risk kind and is never pruned
Adopted fields:
  apps/v1 Deployment team-a/web .spec.replicas (from kubectl-edit)
Digest: sha256:abc
";
        assert_eq!(text, want);
        assert!(!text.contains('\x1b'), "no colour without a terminal");
    }

    #[test]
    fn colour_marks_the_actions_on_a_terminal() {
        let text = plan_text(&plan(), Style { colour: true });
        assert!(text.contains("\x1b[32m+ create"), "{text}");
        assert!(text.contains("\x1b[31m- delete"), "{text}");
    }

    #[test]
    fn a_truncated_plan_says_so() {
        let mut truncated = plan();
        truncated.truncated = true;
        assert!(plan_text(&truncated, Style { colour: false }).contains("at most 100"));
    }
}
