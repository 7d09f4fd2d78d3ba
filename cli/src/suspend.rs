//! `ksync suspend APP` and `ksync resume APP`: set or clear `spec.suspend`. While it is set the
//! controller applies, prunes and repairs nothing and keeps the Application's status as it was;
//! new commits are not rolled out until `resume`.

use anyhow::{Context, Result};
use kube::api::{Patch, PatchParams};

use crate::Outcome;
use crate::cluster::Cluster;

/// `ksync suspend` and `ksync resume` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct SuspendArgs {
    /// The Application.
    pub app: String,
}

/// The merge patch that sets `spec.suspend` to `suspend`.
pub fn patch(suspend: bool) -> serde_json::Value {
    serde_json::json!({"spec": {"suspend": suspend}})
}

/// What to print after the change (or when there was none to make).
pub fn message(app: &str, suspend: bool, was: bool) -> String {
    match (suspend, was) {
        (true, true) => format!("{app} was already suspended\n"),
        (false, false) => format!("{app} was not suspended\n"),
        (true, false) => format!(
            "{app} suspended: nothing is applied, pruned or repaired until `ksync resume {app}`\n"
        ),
        (false, true) => format!("{app} resumed: the controller rolls out the desired revision\n"),
    }
}

/// Set `spec.suspend` of the Application to `suspend`.
pub async fn run(cluster: &Cluster, args: &SuspendArgs, suspend: bool) -> Result<Outcome> {
    let app = cluster.application(&args.app).await?;
    let was = app.spec.suspend;
    if was != suspend {
        cluster
            .applications()
            .patch(&args.app, &PatchParams::default(), &Patch::Merge(&patch(suspend)))
            .await
            .with_context(|| format!("cannot set spec.suspend of Application {}", args.app))?;
    }
    crate::output::print(&message(&args.app, suspend, was))?;
    Ok(Outcome::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_sets_only_spec_suspend_and_the_message_says_what_changed() {
        assert_eq!(patch(true), serde_json::json!({"spec": {"suspend": true}}));
        assert!(message("web", true, false).contains("ksync resume web"));
        assert!(message("web", true, true).contains("already"));
        assert!(message("web", false, true).starts_with("web resumed"));
        assert!(message("web", false, false).contains("not suspended"));
    }
}
