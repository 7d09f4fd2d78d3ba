//! `ksync rollback APP [--to REVISION]`: request a manual rollback by setting
//! `rollback-revision`, `rollback-target-revision` and `rollback-kind: manual` in one patch. The
//! webhook checks the target and records who asked; the controller rolls back. The target's
//! plan is shown first, and the request needs `--yes` or a `y` on the terminal.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Context, Result};
use kuvryn_sync_api::{Revision, keys};
use serde_json::json;

use crate::cluster::Cluster;
use crate::output;
use crate::revisions::{self, name};
use crate::{Outcome, Refused};

/// `ksync rollback` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct RollbackArgs {
    /// The Application.
    pub app: String,
    /// Revision to return to: a Revision name or a commit prefix of at least 7 characters
    /// (default: the newest Healthy Revision of another commit than the deployed one).
    #[arg(long = "to", value_name = "REVISION")]
    pub to: Option<String>,
    /// Request the rollback without asking (needed when standard input is not a terminal).
    #[arg(long)]
    pub yes: bool,
}

/// The rollback target, or why there is none.
pub fn choose_target<'a>(
    app: &str,
    all: &'a [Revision],
    deployed_commit: Option<&str>,
    to: Option<&str>,
) -> Result<&'a Revision, Refused> {
    match to {
        Some(query) => {
            let target = revisions::find(all, query).ok_or_else(|| {
                Refused(format!(
                    "Application {app} has no Revision {query}; list them with `ksync history {app}`"
                ))
            })?;
            if !revisions::was_deployed(target) {
                return Err(Refused(format!(
                    "Revision {} never completed a healthy rollout, so there is nothing to roll \
                     back to; pick a Healthy one from `ksync history {app}`",
                    name(target)
                )));
            }
            Ok(target)
        }
        None => revisions::previous_healthy(all, deployed_commit).ok_or_else(|| {
            Refused(format!(
                "Application {app} has no earlier Healthy Revision to roll back to; `ksync history \
                 {app}` lists its Revisions, and --to REVISION picks one"
            ))
        }),
    }
}

/// The annotations of a manual rollback to `target`.
pub fn rollback_annotations(target: &Revision) -> serde_json::Value {
    json!({
        keys::ROLLBACK_REVISION: target.spec.source.revision,
        keys::ROLLBACK_TARGET_REVISION: name(target),
        keys::ROLLBACK_KIND: keys::ROLLBACK_KIND_MANUAL,
    })
}

/// Request the rollback of Application `app` (in the cluster's namespace) to `target`:
/// `ksync rollback` and the web view both request through this.
pub async fn request(cluster: &Cluster, app: &str, target: &Revision) -> Result<()> {
    cluster
        .annotate(&cluster.applications(), app, rollback_annotations(target))
        .await
        .with_context(|| format!("cannot request the rollback of {app}"))?;
    Ok(())
}

/// Run `ksync rollback`.
pub async fn run(cluster: &Cluster, args: &RollbackArgs) -> Result<Outcome> {
    let app = cluster.application(&args.app).await?;
    let all = cluster.revisions(&args.app).await?;
    let deployed = app.status.as_ref().and_then(|s| s.deployed_revision.as_deref());
    let target = choose_target(&args.app, &all, deployed, args.to.as_deref())?;
    // The target's plan first: what its last rollout changed, the desired state it returns to.
    if let Some(plan) = target.status.as_ref().and_then(|s| s.plan.as_ref()) {
        output::print(&crate::plan::describe(target, plan, crate::output::Style::for_stdout()))?;
    }
    match crate::sync::consent(args.yes, std::io::stdin().is_terminal()) {
        crate::sync::Consent::Given => {}
        crate::sync::Consent::Refuse => {
            return Err(Refused(format!(
                "no rollback requested: standard input is not a terminal to ask on; pass --yes \
                 to roll {} back to Revision {}",
                args.app,
                name(target)
            ))
            .into());
        }
        crate::sync::Consent::Ask => {
            print!("Roll {} back to Revision {}? [y/N] ", args.app, name(target));
            std::io::stdout().flush()?;
            let mut answer = String::new();
            std::io::stdin().lock().read_line(&mut answer)?;
            if !crate::sync::approves(&answer) {
                return Err(Refused("no rollback requested; nothing was changed".to_owned()).into());
            }
        }
    }
    request(cluster, &args.app, target).await?;
    output::print(&format!(
        "requested a rollback of {} to Revision {} (commit {}); follow it with `ksync wait {} \
         --for healthy`\n",
        args.app,
        name(target),
        output::short_commit(Some(&target.spec.source.revision)),
        args.app
    ))?;
    Ok(Outcome::Done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::revisions::tests::revision;
    use kuvryn_sync_api::RevisionPhase::*;

    #[test]
    fn the_target_is_the_previous_healthy_or_the_one_named() {
        let all = revisions::newest_first(vec![
            revision("web-1", "1111111111", 10, Some(Healthy), None),
            revision("web-2", "2222222222", 20, Some(Failed), Some("web-1")),
            revision("web-3", "3333333333", 30, Some(Healthy), Some("web-1")),
        ]);
        let pick = |deployed, to| choose_target("web", &all, deployed, to).map(name);
        assert_eq!(pick(Some("3333333333"), None).ok(), Some("web-1"));
        assert_eq!(pick(Some("3333333333"), Some("web-3")).ok(), Some("web-3"));
        assert_eq!(pick(Some("3333333333"), Some("1111111")).ok(), Some("web-1"));
        let failed = pick(Some("3333333333"), Some("web-2")).expect_err("never healthy");
        assert!(failed.0.contains("never completed a healthy rollout"), "{failed}");
        let missing = pick(None, Some("web-9")).expect_err("missing");
        assert!(missing.0.contains("ksync history web"), "{missing}");
        let only = revisions::newest_first(vec![revision("a", "c1", 1, Some(Healthy), None)]);
        let none = choose_target("web", &only, Some("c1"), None).expect_err("no target");
        assert!(none.0.contains("no earlier Healthy Revision"), "{none}");
    }

    #[test]
    fn the_patch_names_the_commit_the_revision_and_a_manual_kind() {
        let target = revision("web-1", "1111111111", 10, Some(Healthy), None);
        assert_eq!(
            rollback_annotations(&target),
            json!({
                "sync.kuvryn.io/rollback-revision": "1111111111",
                "sync.kuvryn.io/rollback-target-revision": "web-1",
                "sync.kuvryn.io/rollback-kind": "manual",
            })
        );
    }
}
