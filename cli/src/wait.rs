//! `ksync wait APP --for healthy|synced [--timeout 5m]`: watch the Application until the
//! condition holds (exit 0), a failure makes it unreachable (exit 1 at once), or the timeout
//! passes (exit 1 with the last state). Each change the watch delivers is evaluated. A one-line
//! live progress is written on a terminal only.
//!
//! Ready keeps its last value while a rollout is planned, applied or observed (the API
//! reference), so Ready True/Healthy alone may still be the previous commit's. `--for healthy`
//! therefore also needs no rollout under way: no sync state `Planning`, `Applying` or `Pruning`,
//! and no Revision of the deployed commit still applying, observing or rolling back. Revisions
//! are read (listed, as `ksync history` does: a user may list them without being allowed to
//! watch them) only once Ready holds, and again every [`RECHECK_EVERY`] while one is still
//! under way, since its completion need not change the Application.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{Context, Result};
use futures::TryStreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::watcher;
use kuvryn_sync_api::{
    Application, ConditionReason, HealthState, Revision, RevisionPhase, SyncState,
};

use crate::Outcome;
use crate::cluster::Cluster;
use crate::output::condition;

/// What to wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// Ready=True with reason Healthy (or, after a completed rollback, Ready=False/RolledBack
    /// with health Healthy), and no rollout under way.
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
    /// Ready holds, but a Revision of the deployed commit is still rolling out (which one, in
    /// what phase): read the Revisions again, as their completion need not change the
    /// Application.
    RollingOut(String),
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

/// How often the Revisions are read again while Ready holds but a rollout is under way.
const RECHECK_EVERY: Duration = Duration::from_secs(2);

/// Sync states in which a rollout is under way, whatever Ready says.
const ROLLING_OUT: [SyncState; 3] = [SyncState::Planning, SyncState::Applying, SyncState::Pruning];

/// Revision phases of a rollout not finished yet (`AwaitingApproval` waits on a person, not on
/// the rollout, and is not among them).
const UNFINISHED: [RevisionPhase; 5] = [
    RevisionPhase::Pending,
    RevisionPhase::Planning,
    RevisionPhase::Applying,
    RevisionPhase::Observing,
    RevisionPhase::RollingBack,
];

/// The Revision of `app`'s deployed commit whose rollout is not finished, as "Revision NAME is
/// PHASE"; `None` when there is none.
pub fn rollout_under_way(app: &Application, revisions: &[Revision]) -> Option<String> {
    let deployed = app.status.as_ref()?.deployed_revision.as_deref()?;
    revisions
        .iter()
        .filter(|r| Some(r.spec.application_ref.name.as_str()) == app.metadata.name.as_deref())
        .filter(|r| r.spec.source.revision == deployed)
        .find_map(|r| {
            let phase = crate::revisions::phase(r).filter(|p| UNFINISHED.contains(p))?;
            Some(format!("Revision {} is {phase}", crate::revisions::name(r)))
        })
}

/// A Ready condition that reads healthy: True/Healthy, or False/RolledBack (a completed rollback
/// holds the desired commit; the reference keeps that reason whatever the health) while the
/// rolled-back-to objects are Healthy.
fn healthy_ready(ready: &Condition, health: HealthState) -> bool {
    (ready.status == "True" && ready.reason == ConditionReason::Healthy.as_str())
        || (ready.status == "False"
            && ready.reason == ConditionReason::RolledBack.as_str()
            && health == HealthState::Healthy)
}

/// Decide the wait for `target` from one read of `app` (for `--for healthy`, the Revisions
/// decide too: [`rollout_under_way`]).
pub fn evaluate(target: Target, app: &Application) -> Verdict {
    let Some(status) = app.status.as_ref() else {
        return Verdict::Pending("no status yet".to_owned());
    };
    let ready = condition(&status.conditions, "Ready");
    let current = ready
        .is_none_or(|c| c.observed_generation.is_none_or(|g| Some(g) >= app.metadata.generation));
    let reached = match target {
        Target::Healthy => {
            ready.is_some_and(|c| healthy_ready(c, status.health.state))
                && current
                && !ROLLING_OUT.contains(&status.sync.state)
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
        c.status == "False"
            && c.reason != ConditionReason::Progressing.as_str()
            && current
            && !(c.reason == ConditionReason::RolledBack.as_str()
                && status.health.state == HealthState::Progressing)
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
        let stream = watcher::watch_object(cluster.applications(), name);
        let mut stream = std::pin::pin!(stream);
        let mut app = first.clone();
        loop {
            let verdict = judge(cluster, args, &app).await?;
            let recheck = matches!(verdict, Verdict::RollingOut(_));
            if let Some(outcome) = report(args, &app, verdict, live)? {
                return Ok(outcome);
            }
            let next = if recheck {
                match tokio::time::timeout(RECHECK_EVERY, stream.try_next()).await {
                    Ok(next) => next,
                    // Nothing changed on the Application: read the Revisions again.
                    Err(_) => continue,
                }
            } else {
                stream.try_next().await
            };
            match next.context("cannot watch the Application")? {
                Some(Some(changed)) => app = changed,
                Some(None) => anyhow::bail!("Application {name} was deleted while waiting"),
                None => anyhow::bail!("the watch of Application {name} ended"),
            }
            last = app.clone();
        }
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

/// [`evaluate`], then for `--for healthy` once Ready holds, whether a Revision of the deployed
/// commit is still rolling out.
async fn judge(cluster: &Cluster, args: &WaitArgs, app: &Application) -> Result<Verdict> {
    let verdict = evaluate(args.target, app);
    if verdict != Verdict::Reached || args.target != Target::Healthy {
        return Ok(verdict);
    }
    let revisions = cluster.revisions(&args.app).await?;
    Ok(rollout_under_way(app, &revisions).map_or(Verdict::Reached, Verdict::RollingOut))
}

/// Show `app`'s state; the outcome once the wait is decided.
fn report(
    args: &WaitArgs,
    app: &Application,
    verdict: Verdict,
    live: bool,
) -> Result<Option<Outcome>> {
    let name = &args.app;
    if live {
        eprint!("\r\x1b[2K{name}: {}", state_line(app));
        std::io::stderr().flush()?;
    }
    match verdict {
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
        Verdict::Pending(_) | Verdict::RollingOut(_) => Ok(None),
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

    fn rolled_back(health: &str) -> Value {
        json!({"health": {"state": health}, "conditions": ready("False", "RolledBack", 2)})
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
            // Ready keeps its value while a new commit is planned or applied.
            (
                json!({"sync": {"state": "Planning"}, "conditions": ready("True", "Healthy", 2)}),
                "pending",
            ),
            (
                json!({"sync": {"state": "Applying"}, "conditions": ready("True", "Healthy", 2)}),
                "pending",
            ),
            (
                json!({"sync": {"state": "Pruning"}, "conditions": ready("True", "Healthy", 2)}),
                "pending",
            ),
            (
                json!({"sync": {"state": "Drifted"}, "conditions": ready("True", "Healthy", 2)}),
                "reached",
            ),
            (
                json!({"sync": {"state": "AwaitingApproval"}, "conditions": ready("True", "Healthy", 2)}),
                "reached",
            ),
            // A completed rollback: Ready False/RolledBack, and the health says the rest.
            (rolled_back("Healthy"), "reached"),
            (rolled_back("Progressing"), "pending"),
            (rolled_back("Degraded"), "failed"),
        ];
        for (status, want) in cases {
            let got = match evaluate(Target::Healthy, &app(status.clone())) {
                Verdict::Reached => "reached",
                Verdict::Failed(_) => "failed",
                Verdict::Pending(_) | Verdict::RollingOut(_) => "pending",
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
                Verdict::Pending(_) | Verdict::RollingOut(_) => "pending",
            };
            assert_eq!(got, want, "{status}");
        }
    }

    fn revision(name: &str, app: &str, commit: &str, phase: Option<&str>) -> Revision {
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Revision",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"applicationRef": {"name": app},
                     "source": {"repositoryRef": {"name": "apps"}, "revision": commit, "path": ".",
                                "render": {"type": "yaml"}},
                     "desiredStateHash": "sha256:1"},
            "status": phase.map(|p| json!({"phase": p})),
        }))
        .expect("revision")
    }

    #[test]
    fn a_rollout_is_under_way_while_a_revision_of_the_deployed_commit_is_unfinished() {
        let deployed =
            app(json!({"deployedRevision": "c2", "conditions": ready("True", "Healthy", 2)}));
        let cases: [(&str, Vec<Revision>, Option<&str>); 8] = [
            ("no Revision", vec![], None),
            (
                "observing",
                vec![revision("web-c2", "web", "c2", Some("Observing"))],
                Some("Revision web-c2 is Observing"),
            ),
            (
                "applying",
                vec![revision("web-c2", "web", "c2", Some("Applying"))],
                Some("Revision web-c2 is Applying"),
            ),
            (
                "rolling back",
                vec![revision("web-c2", "web", "c2", Some("RollingBack"))],
                Some("Revision web-c2 is RollingBack"),
            ),
            ("healthy", vec![revision("web-c2", "web", "c2", Some("Healthy"))], None),
            (
                "awaiting approval waits on a person",
                vec![revision("web-c2", "web", "c2", Some("AwaitingApproval"))],
                None,
            ),
            ("another commit's", vec![revision("web-c1", "web", "c1", Some("Observing"))], None),
            (
                "another Application's",
                vec![revision("api-c2", "api", "c2", Some("Observing"))],
                None,
            ),
        ];
        for (what, revisions, want) in cases {
            assert_eq!(rollout_under_way(&deployed, &revisions).as_deref(), want, "{what}");
        }
        let nothing_deployed = app(json!({"conditions": ready("True", "Healthy", 2)}));
        let observing = [revision("web-c2", "web", "c2", Some("Observing"))];
        assert_eq!(rollout_under_way(&nothing_deployed, &observing), None);
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
