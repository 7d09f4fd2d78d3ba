//! `ksync history APP`: the Application's Revisions, newest first, with attempts, approval
//! records, timing, and what rollbacks did (held, rolled back, rollback target, and who asked).

use anyhow::Result;
use kuvryn_sync_api::{Revision, keys};

use crate::Outcome;
use crate::cluster::Cluster;
use crate::output::{self, OutputArgs, short_commit, table, timestamp};
use crate::revisions::{name, phase, rollback_note};

/// `ksync history` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct HistoryArgs {
    /// The Application.
    pub app: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Run `ksync history`.
pub async fn run(cluster: &Cluster, args: &HistoryArgs) -> Result<Outcome> {
    let app = cluster.application(&args.app).await?;
    let revisions = cluster.revisions(&args.app).await?;
    let held = app.metadata.annotations.as_ref().and_then(|a| a.get(keys::ROLLBACK_FROM)).cloned();
    let text = match args.output.format {
        Some(format) => output::structured(format, &revisions)?,
        None if revisions.is_empty() => format!("{} has no Revision yet.\n", args.app),
        None => history_table(&revisions, held.as_deref()),
    };
    output::print(&text)?;
    Ok(Outcome::Done)
}

/// One row per Revision, in the order given; `held` is the commit a rollback holds.
pub fn history_table(revisions: &[Revision], held: Option<&str>) -> String {
    let rows: Vec<Vec<String>> = revisions
        .iter()
        .map(|r| {
            let status = r.status.clone().unwrap_or_default();
            let (by, at) = match &status.approval {
                Some(a) => (a.approved_by.clone(), timestamp(Some(&a.approved_at))),
                None => ("-".to_owned(), "-".to_owned()),
            };
            vec![
                name(r).to_owned(),
                phase(r).map_or_else(|| "-".to_owned(), |p| p.to_string()),
                short_commit(Some(&r.spec.source.revision)),
                status.attempts.to_string(),
                by,
                at,
                timestamp(status.started_at.as_ref()),
                timestamp(status.completed_at.as_ref()),
                rollback_note(r, held),
            ]
        })
        .collect();
    table(
        &[
            "NAME",
            "PHASE",
            "COMMIT",
            "ATTEMPTS",
            "APPROVED-BY",
            "APPROVED-AT",
            "STARTED",
            "COMPLETED",
            "ROLLBACK",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kuvryn_sync_api::RevisionPhase;

    #[test]
    fn each_revision_shows_phase_commit_attempts_approval_and_times() {
        let mut approved = crate::revisions::tests::revision(
            "web-2",
            "fedcba9876543210",
            1_000,
            Some(RevisionPhase::Healthy),
            Some("web-1"),
        );
        let at = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-12-01T10:00:00Z".parse().expect("time"),
        );
        if let Some(status) = approved.status.as_mut() {
            status.attempts = 1;
            status.started_at = Some(at.clone());
            status.approval = Some(kuvryn_sync_api::Approval {
                approved_by: "alice".into(),
                approved_at: at,
                plan_digest: "sha256:1".into(),
                desired_state_hash: "sha256:2".into(),
                note: None,
            });
        }
        let pending =
            crate::revisions::tests::revision("web-1", "0123456789abcdef", 900, None, None);
        let mut held = crate::revisions::tests::revision(
            "web-0",
            "1111111111111111",
            800,
            Some(RevisionPhase::Failed),
            None,
        );
        held.metadata.annotations =
            Some([(keys::ROLLBACK_REQUESTED_BY.to_owned(), "bob".to_owned())].into());
        if let Some(status) = held.status.as_mut() {
            status.conditions.push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: "RolledBack".into(),
                status: "True".into(),
                reason: "ManualRollback".into(),
                message: "rolled back".into(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    "2026-12-01T11:00:00Z".parse().expect("time"),
                ),
                observed_generation: None,
            });
        }
        let text = history_table(&[approved, pending, held.clone()], Some("1111111111111111"));
        let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(
            rows[1],
            [
                "web-2",
                "Healthy",
                "fedcba987654",
                "1",
                "alice",
                "2026-12-01T10:00:00Z",
                "2026-12-01T10:00:00Z",
                "-",
                "-"
            ]
        );
        assert_eq!(rows[2], ["web-1", "-", "0123456789ab", "0", "-", "-", "-", "-", "-"]);
        assert_eq!(&rows[3][8..], ["held", "(by", "bob)"], "the held commit's Revision");
        let later = history_table(&[held], None);
        assert!(later.contains("rolled back (by bob)"), "once the hold ended: {later}");
    }
}
