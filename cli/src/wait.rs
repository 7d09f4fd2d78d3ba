//! `ksync wait APP --for healthy|synced [--timeout 5m]`: watch the Application until the
//! condition holds (exit 0), a failure makes it unreachable (exit 1 at once), or the timeout
//! passes (exit 1 with the last state). Each change the watch delivers is evaluated; nothing is
//! polled. A one-line live progress is written on a terminal only.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{Context, Result};
use futures::TryStreamExt;
use kube::runtime::watcher;
use kuvryn_sync_api::{Application, ConditionReason, SyncState};

use crate::Outcome;
use crate::cluster::Cluster;
use crate::output::condition;

/// What to wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// Ready=True with reason Healthy.
    Healthy,
    /// Sync state Synced at the desired revision.
    Synced,
}

/// `ksync wait` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct WaitArgs {
    /// The Application.
    pub app: String,
    /// The condition to wait for.
    #[arg(long = "for", value_enum, value_name = "CONDITION")]
    pub target: Target,
    /// How long to wait, such as 90s, 5m or 1h30m.
    #[arg(long, default_value = "5m", value_parser = parse_timeout)]
    pub timeout: Duration,
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    kuvryn_sync_core::duration::parse(text).map_err(|e| e.to_string())
}

/// Where the wait stands after one read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The condition holds.
    Reached,
    /// Ready=False with a failure reason: waiting longer will not help.
    Failed(String),
    /// Not yet; the current state in one line.
    Pending(String),
}

/// The state of `app` in one line: sync, health, Ready.
pub fn state_line(app: &Application) -> String {
    let status = app.status.clone().unwrap_or_default();
    format!(
        "sync {}, health {}, Ready {}",
        status.sync.state,
        status.health.state,
        crate::output::ready_summary(app)
    )
}

/// Decide the wait for `target` from one read of `app`.
pub fn evaluate(target: Target, app: &Application) -> Verdict {
    let Some(status) = app.status.as_ref() else {
        return Verdict::Pending("no status yet".to_owned());
    };
    let ready = condition(&status.conditions, "Ready");
    let current = ready
        .is_none_or(|c| c.observed_generation.is_none_or(|g| Some(g) >= app.metadata.generation));
    let reached = match target {
        Target::Healthy => {
            ready.is_some_and(|c| {
                c.status == "True" && c.reason == ConditionReason::Healthy.as_str()
            }) && current
        }
        Target::Synced => {
            status.sync.state == SyncState::Synced
                && status.desired_revision.is_some()
                && status.desired_revision == status.deployed_revision
        }
    };
    if reached {
        return Verdict::Reached;
    }
    if let Some(c) = ready.filter(|c| {
        c.status == "False" && c.reason != ConditionReason::Progressing.as_str() && current
    }) {
        let message = if c.message.is_empty() { String::new() } else { format!(": {}", c.message) };
        return Verdict::Failed(format!("Ready is False/{}{message}", c.reason));
    }
    Verdict::Pending(state_line(app))
}

/// Run `ksync wait`.
pub async fn run(cluster: &Cluster, args: &WaitArgs) -> Result<Outcome> {
    let name = &args.app;
    // Read once first: a missing Application is an error that says how to find the name.
    let first = cluster.application(name).await?;
    let live = std::io::stderr().is_terminal();
    let mut last = first.clone();
    let watching = async {
        if let Some(outcome) = report(args, &first, live)? {
            return Ok(outcome);
        }
        let stream = watcher::watch_object(cluster.applications(), name);
        let mut stream = std::pin::pin!(stream);
        while let Some(found) = stream.try_next().await.context("cannot watch the Application")? {
            let Some(app) = found else {
                anyhow::bail!("Application {name} was deleted while waiting");
            };
            last = app.clone();
            if let Some(outcome) = report(args, &app, live)? {
                return Ok(outcome);
            }
        }
        anyhow::bail!("the watch of Application {name} ended")
    };
    match tokio::time::timeout(args.timeout, watching).await {
        Ok(outcome) => outcome,
        Err(_) => {
            end_line(
                live,
                &format!(
                    "timed out after {:?} waiting for {name} to be {}; last state: {}\n",
                    args.timeout,
                    target_word(args.target),
                    state_line(&last)
                ),
            )?;
            Ok(Outcome::NotMet)
        }
    }
}

/// Show `app`'s state; the outcome once the wait is decided.
fn report(args: &WaitArgs, app: &Application, live: bool) -> Result<Option<Outcome>> {
    let name = &args.app;
    if live {
        eprint!("\r\x1b[2K{name}: {}", state_line(app));
        std::io::stderr().flush()?;
    }
    match evaluate(args.target, app) {
        Verdict::Reached => {
            end_line(
                live,
                &format!("{name} is {}: {}\n", target_word(args.target), state_line(app)),
            )?;
            Ok(Some(Outcome::Done))
        }
        Verdict::Failed(why) => {
            end_line(
                live,
                &format!("{name} failed: {why}; `ksync diagnose {name}` may say why\n"),
            )?;
            Ok(Some(Outcome::NotMet))
        }
        Verdict::Pending(_) => Ok(None),
    }
}

fn end_line(live: bool, line: &str) -> Result<()> {
    if live {
        eprintln!();
    }
    crate::output::print(line)
}

fn target_word(target: Target) -> &'static str {
    match target {
        Target::Healthy => "healthy",
        Target::Synced => "synced",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn app(status: Value) -> Application {
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "web", "namespace": "team-a", "generation": 2},
            "spec": {"source": {"repositoryRef": {"name": "apps"}, "render": {"type": "yaml"}},
                     "destination": {"namespace": "team-a"}},
            "status": status,
        }))
        .expect("application")
    }

    fn ready(status: &str, reason: &str, generation: i64) -> Value {
        json!([{"type": "Ready", "status": status, "reason": reason, "message": "m",
                "observedGeneration": generation, "lastTransitionTime": "2026-12-01T10:00:00Z"}])
    }

    #[test]
    fn healthy_needs_a_current_ready_true_healthy_and_fails_fast_on_a_failure() {
        let cases = [
            (json!({}), "pending"),
            (json!({"conditions": ready("True", "Healthy", 2)}), "reached"),
            (json!({"conditions": ready("True", "Healthy", 1)}), "pending"),
            (json!({"conditions": ready("False", "Progressing", 2)}), "pending"),
            (json!({"conditions": ready("False", "ValidationFailure", 2)}), "failed"),
            (json!({"conditions": ready("False", "HealthFailure", 1)}), "pending"),
        ];
        for (status, want) in cases {
            let got = match evaluate(Target::Healthy, &app(status.clone())) {
                Verdict::Reached => "reached",
                Verdict::Failed(_) => "failed",
                Verdict::Pending(_) => "pending",
            };
            assert_eq!(got, want, "{status}");
        }
    }

    #[test]
    fn synced_needs_the_deployed_revision_to_be_the_desired_one() {
        let cases = [
            (
                json!({"sync": {"state": "Synced"}, "desiredRevision": "c2", "deployedRevision": "c2"}),
                "reached",
            ),
            (
                json!({"sync": {"state": "Synced"}, "desiredRevision": "c2", "deployedRevision": "c1"}),
                "pending",
            ),
            (
                json!({"sync": {"state": "Applying"}, "desiredRevision": "c2", "deployedRevision": "c2"}),
                "pending",
            ),
            (
                json!({"sync": {"state": "OutOfSync"}, "desiredRevision": "c2",
                    "conditions": ready("False", "RenderFailure", 2)}),
                "failed",
            ),
        ];
        for (status, want) in cases {
            let got = match evaluate(Target::Synced, &app(status.clone())) {
                Verdict::Reached => "reached",
                Verdict::Failed(_) => "failed",
                Verdict::Pending(_) => "pending",
            };
            assert_eq!(got, want, "{status}");
        }
    }

    #[test]
    fn the_failure_names_the_reason_and_message() {
        let verdict = evaluate(
            Target::Healthy,
            &app(json!({"conditions": ready("False", "HealthFailure", 2)})),
        );
        assert_eq!(verdict, Verdict::Failed("Ready is False/HealthFailure: m".into()));
    }
}
