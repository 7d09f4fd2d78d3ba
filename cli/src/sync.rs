//! `ksync sync APP [--yes]`: approve the plan awaiting approval of a manual Application (after
//! showing it and, on a terminal, asking), or ask for an immediate refresh of an automatic
//! Application's Repository.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Context, Result};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kuvryn_sync_api::{Application, PlanSummary, Repository, Revision, keys};
use serde_json::json;

use crate::cluster::Cluster;
use crate::output::{self, Style};
use crate::revisions::{self, name};
use crate::{Outcome, Refused};

/// `ksync sync` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct SyncArgs {
    /// The Application.
    pub app: String,
    /// Approve without asking (needed when standard input is not a terminal).
    #[arg(short = 'y', long)]
    pub yes: bool,
}

/// Whether to approve, ask first, or refuse, from `--yes` and whether there is a terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consent {
    /// `--yes`: approve.
    Given,
    /// Ask `Approve? [y/N]` on the terminal.
    Ask,
    /// No `--yes` and no terminal to ask on: refuse (exit 2).
    Refuse,
}

/// The consent decision.
pub fn consent(yes: bool, stdin_is_terminal: bool) -> Consent {
    match (yes, stdin_is_terminal) {
        (true, _) => Consent::Given,
        (false, true) => Consent::Ask,
        (false, false) => Consent::Refuse,
    }
}

/// Whether an answer to `Approve? [y/N]` approves: `y` or `yes`, any case.
pub fn approves(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// Run `ksync sync`.
pub async fn run(cluster: &Cluster, args: &SyncArgs) -> Result<Outcome> {
    let app = cluster.application(&args.app).await?;
    if app.spec.sync.automatic {
        return refresh(cluster, &app).await;
    }
    let all = cluster.revisions(&args.app).await?;
    let (revision, plan) = pending_approval(&app, &all)?;
    output::print(&crate::plan::describe(revision, plan, Style::for_stdout()))?;
    match consent(args.yes, std::io::stdin().is_terminal()) {
        Consent::Given => {}
        Consent::Refuse => {
            return Err(Refused(format!(
                "not approved: standard input is not a terminal to ask on; pass --yes to approve \
                 Revision {} of {}",
                name(revision),
                args.app
            ))
            .into());
        }
        Consent::Ask => {
            print!("Approve? [y/N] ");
            std::io::stdout().flush()?;
            let mut answer = String::new();
            std::io::stdin().lock().read_line(&mut answer)?;
            if !approves(&answer) {
                return Err(Refused("not approved; nothing was changed".to_owned()).into());
            }
        }
    }
    approve(cluster, &args.app, name(revision), &plan.digest).await?;
    output::print(&format!(
        "approved Revision {} (plan {}); follow it with `ksync wait {} --for healthy`\n",
        name(revision),
        plan.digest,
        args.app
    ))?;
    Ok(Outcome::Done)
}

/// The Revision awaiting approval (`all` newest first) and its plan, or why there is none.
pub fn pending_approval<'a>(
    app: &Application,
    all: &'a [Revision],
) -> Result<(&'a Revision, &'a PlanSummary)> {
    let app_name = app.metadata.name.as_deref().unwrap_or_default();
    let Some(revision) = revisions::awaiting_approval(all) else {
        let state = app.status.as_ref().map(|s| s.sync.state.to_string()).unwrap_or_default();
        anyhow::bail!(
            "nothing awaits approval: no Revision of {app_name} is in AwaitingApproval (sync state \
             {state}); `ksync status {app_name}` shows where it is"
        );
    };
    let plan = revision
        .status
        .as_ref()
        .and_then(|s| s.plan.as_ref())
        .context("the Revision awaiting approval has no plan")?;
    Ok((revision, plan))
}

/// The approval of Revision `revision` with plan digest `digest`: both annotations in one
/// merge patch, so the webhook checks the digest and records who approved.
pub fn approval_annotations(revision: &str, digest: &str) -> serde_json::Value {
    json!({keys::APPROVED_REVISION: revision, keys::APPROVE_DIGEST: digest})
}

/// Approve Revision `revision` of Application `app` (in the cluster's namespace) for the plan
/// with digest `digest`: `ksync sync` and the web view both approve through this.
pub async fn approve(cluster: &Cluster, app: &str, revision: &str, digest: &str) -> Result<()> {
    cluster
        .annotate(&cluster.applications(), app, approval_annotations(revision, digest))
        .await
        .with_context(|| format!("cannot approve Revision {revision}"))?;
    Ok(())
}

/// Ask for an immediate fetch of `app`'s Repository by setting its `reconcile-requested-at`
/// annotation (as the push receivers do); returns the time written.
pub async fn request_fetch(cluster: &Cluster, app: &Application) -> Result<String> {
    let repository = &app.spec.source.repository_ref.name;
    let api: Api<Repository> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let now = Timestamp::now().round(k8s_openapi::jiff::Unit::Second)?.to_string();
    cluster
        .annotate(&api, repository, json!({keys::RECONCILE_REQUESTED_AT: now}))
        .await
        .with_context(|| {
            format!("cannot request a refresh of Repository {repository}; does it exist?")
        })?;
    Ok(now)
}

/// Ask for an immediate fetch of the Application's Repository.
async fn refresh(cluster: &Cluster, app: &Application) -> Result<Outcome> {
    let repository = &app.spec.source.repository_ref.name;
    let now = request_fetch(cluster, app).await?;
    output::print(&format!(
        "{} syncs automatically; requested an immediate fetch of Repository {repository} at {now}\n",
        app.metadata.name.as_deref().unwrap_or_default()
    ))?;
    Ok(Outcome::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consent_needs_yes_or_a_terminal() {
        let cases = [
            (true, true, Consent::Given),
            (true, false, Consent::Given),
            (false, true, Consent::Ask),
            (false, false, Consent::Refuse),
        ];
        for (yes, tty, want) in cases {
            assert_eq!(consent(yes, tty), want, "--yes {yes}, terminal {tty}");
        }
    }

    #[test]
    fn only_y_or_yes_approves() {
        for (answer, want) in [
            ("y\n", true),
            ("YES\n", true),
            (" yes ", true),
            ("\n", false),
            ("n", false),
            ("yep", false),
        ] {
            assert_eq!(approves(answer), want, "{answer:?}");
        }
    }
}
