//! `ksync status [APP]`: a table of Applications, or one Application in detail.

use anyhow::Result;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kuvryn_sync_api::{Application, Revision};

use crate::Outcome;
use crate::cluster::Cluster;
use crate::listing::{self, ListArgs, View};
use crate::output::{self, OutputArgs, age, ready_summary, short_commit, table};
use crate::revisions::{name, phase};

/// How many Revisions the detail view lists.
const LATEST_REVISIONS: usize = 5;

/// `ksync status` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct StatusArgs {
    /// The Application to show in detail; omit to list them all.
    pub app: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub list: ListArgs,
}

/// Run `ksync status`.
pub async fn run(cluster: &Cluster, args: &StatusArgs) -> Result<Outcome> {
    match &args.app {
        None => list(cluster, args).await,
        Some(_) if args.list.watch || args.list.selector.is_some() => Err(crate::Refused(
            "-w and -l apply to the list (`ksync status` without APP); to follow one \
             Application use `ksync wait APP` or `ksync events APP -w`"
                .to_owned(),
        )
        .into()),
        Some(app) => detail(cluster, app, args).await,
    }
}

async fn list(cluster: &Cluster, args: &StatusArgs) -> Result<Outcome> {
    let api: Api<Application> = if cluster.all_namespaces {
        Api::all(cluster.client.clone())
    } else {
        cluster.applications()
    };
    let scope = if cluster.all_namespaces {
        "any namespace".to_owned()
    } else {
        format!("namespace {}", cluster.namespace)
    };
    let with_namespace = cluster.all_namespaces;
    let table = move |apps: &[Application], wide: bool| {
        application_table(apps, with_namespace, wide, Timestamp::now())
    };
    let view = View {
        resource: "application.sync.kuvryn.io",
        table: &table,
        empty: format!("No Applications in {scope}."),
    };
    listing::show(api, &args.list, args.output.format, &view).await
}

/// The list view: one row per Application.
/// `wide` adds the mode, the service account and the resource counts.
pub fn application_table(
    apps: &[Application],
    with_namespace: bool,
    wide: bool,
    now: Timestamp,
) -> String {
    let mut header = vec!["NAME", "SYNC", "HEALTH", "DESIRED", "DEPLOYED", "READY", "AGE"];
    if wide {
        header.extend(["MODE", "SUSPENDED", "SERVICE-ACCOUNT", "RESOURCES"]);
    }
    if with_namespace {
        header.insert(0, "NAMESPACE");
    }
    let rows: Vec<Vec<String>> = apps
        .iter()
        .map(|app| {
            let status = app.status.clone().unwrap_or_default();
            let mut row = vec![
                app.metadata.name.clone().unwrap_or_default(),
                status.sync.state.to_string(),
                status.health.state.to_string(),
                short_commit(status.desired_revision.as_deref()),
                short_commit(status.deployed_revision.as_deref()),
                ready_summary(app),
                age(now, app.metadata.creation_timestamp.as_ref()),
            ];
            if wide {
                let r = &status.resources;
                row.extend([
                    if app.spec.sync.automatic { "automatic" } else { "manual" }.to_owned(),
                    app.spec.suspend.to_string(),
                    status.service_account_name.clone().unwrap_or_else(|| "-".into()),
                    format!("{}/{}/{}/{}", r.healthy, r.progressing, r.degraded, r.unknown),
                ]);
            }
            if with_namespace {
                row.insert(0, app.metadata.namespace.clone().unwrap_or_default());
            }
            row
        })
        .collect();
    table(&header, &rows)
}

async fn detail(cluster: &Cluster, app_name: &str, args: &StatusArgs) -> Result<Outcome> {
    let app = cluster.application(app_name).await?;
    if let Some(format) = args.output.format {
        return print_done(&output::structured(format, &app)?);
    }
    let revisions = cluster.revisions(app_name).await?;
    print_done(&application_detail(&app, &revisions, Timestamp::now()))
}

/// The detail view of one Application and its newest Revisions.
pub fn application_detail(app: &Application, revisions: &[Revision], now: Timestamp) -> String {
    let status = app.status.clone().unwrap_or_default();
    let mut out = format!(
        "Application {}/{}\n",
        app.metadata.namespace.as_deref().unwrap_or_default(),
        app.metadata.name.as_deref().unwrap_or_default()
    );
    let mode = if app.spec.sync.automatic { "automatic" } else { "manual (needs approval)" };
    let lines = [
        ("Sync", status.sync.state.to_string()),
        ("Health", status.health.state.to_string()),
        ("Ready", ready_summary(app)),
        ("Mode", mode.to_owned()),
        ("Desired", status.desired_revision.clone().unwrap_or_else(|| "-".into())),
        ("Deployed", status.deployed_revision.clone().unwrap_or_else(|| "-".into())),
        (
            "Resources",
            format!(
                "{} healthy, {} progressing, {} degraded, {} unknown",
                status.resources.healthy,
                status.resources.progressing,
                status.resources.degraded,
                status.resources.unknown
            ),
        ),
    ];
    for (label, value) in lines {
        out.push_str(&format!("  {:<10} {value}\n", format!("{label}:")));
    }
    if let Some(hold) = crate::revisions::hold_summary(app, revisions) {
        out.push_str(&hold);
    }
    out.push_str("\nRevisions (newest first):\n");
    if revisions.is_empty() {
        out.push_str("  none yet\n");
    } else {
        let rows: Vec<Vec<String>> = revisions
            .iter()
            .take(LATEST_REVISIONS)
            .map(|r| {
                vec![
                    name(r).to_owned(),
                    phase(r).map_or_else(|| "-".to_owned(), |p| p.to_string()),
                    short_commit(Some(&r.spec.source.revision)),
                    age(now, r.metadata.creation_timestamp.as_ref()),
                ]
            })
            .collect();
        out.push_str(&indent(&table(&["NAME", "PHASE", "COMMIT", "AGE"], &rows)));
    }
    out.push_str("\nConditions:\n");
    if status.conditions.is_empty() {
        out.push_str("  none yet\n");
    }
    for c in &status.conditions {
        out.push_str(&format!("  {} {} {}", c.type_, c.status, c.reason));
        if !c.message.is_empty() {
            out.push_str(&format!(": {}", c.message));
        }
        out.push('\n');
    }
    if !status.diagnosis.is_empty() {
        out.push_str("\nDiagnosis:\n");
        out.push_str(&indent(&crate::diagnose::tree(&status.diagnosis)));
    }
    out
}

/// `text` with every line indented by two spaces.
pub fn indent(text: &str) -> String {
    text.lines().map(|line| format!("  {line}\n")).collect()
}

fn print_done(text: &str) -> Result<Outcome> {
    output::print(text)?;
    Ok(Outcome::Done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(name: &str, status: serde_json::Value) -> Application {
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": "team-a",
                         "creationTimestamp": "2026-12-01T10:00:00Z"},
            "spec": {"source": {"repositoryRef": {"name": "apps"}, "render": {"type": "yaml"}},
                     "destination": {"namespace": "team-a"}},
            "status": status,
        }))
        .expect("application")
    }

    fn now() -> Timestamp {
        "2026-12-01T10:05:00Z".parse().expect("time")
    }

    #[test]
    fn the_list_shows_states_short_commits_ready_and_age() {
        let web = app(
            "web",
            json!({"sync": {"state": "Synced"}, "health": {"state": "Healthy"},
                   "desiredRevision": "0123456789abcdef0123", "deployedRevision": "0123456789abcdef0123",
                   "conditions": [{"type": "Ready", "status": "True", "reason": "Healthy",
                                   "message": "", "lastTransitionTime": "2026-12-01T10:01:00Z"}]}),
        );
        let fresh = app("fresh", json!({}));
        let text = application_table(&[web, fresh], false, false, now());
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("NAME"), "{text}");
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["web", "Synced", "Healthy", "0123456789ab", "0123456789ab", "True/Healthy", "5m"]
        );
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["fresh", "Unknown", "Unknown", "-", "-", "-", "5m"]
        );
        let all = application_table(&[app("web", json!({}))], true, false, now());
        let wide = application_table(&[app("web", json!({}))], false, true, now());
        assert!(wide.lines().next().is_some_and(|h| h.ends_with("RESOURCES")), "{wide}");
        assert!(all.lines().nth(1).is_some_and(|l| l.starts_with("team-a")), "{all}");
    }

    #[test]
    fn the_detail_lists_revisions_conditions_and_diagnosis() {
        let web = app(
            "web",
            json!({"sync": {"state": "Synced"}, "health": {"state": "Degraded"},
                   "conditions": [{"type": "Ready", "status": "False", "reason": "HealthFailure",
                                   "message": "Deployment web is Degraded",
                                   "lastTransitionTime": "2026-12-01T10:01:00Z"}],
                   "diagnosis": [{"resource": {"apiVersion": "v1", "kind": "Secret",
                                               "namespace": "team-a", "name": "db"},
                                  "reason": "MissingSecret", "message": "secret db not found",
                                  "chain": []}]}),
        );
        let revisions = vec![crate::revisions::tests::revision(
            "web-1",
            "0123456789abcdef",
            now().as_second() - 60,
            Some(kuvryn_sync_api::RevisionPhase::Healthy),
            None,
        )];
        let text = application_detail(&web, &revisions, now());
        assert!(text.contains("Ready:     False/HealthFailure"), "{text}");
        assert!(text.contains("Ready False HealthFailure: Deployment web is Degraded"), "{text}");
        assert!(text.contains("web-1   Healthy   0123456789ab   60s"), "{text}");
        assert!(text.contains("MissingSecret"), "{text}");
    }
}
