//! `ksync events [APP] [-w]`: the Events the controller recorded on an Application and its
//! Revisions (or, without APP, every Event Kuvryn Sync's controller reported in the namespace,
//! or in every namespace with -A), oldest first; `-w` keeps watching and prints each new one.
//!
//! Read through `events.k8s.io/v1`, the API the controller writes with. Notes pass the redaction
//! the rest of the output does.

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use futures::TryStreamExt;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher;
use kuvryn_sync_api::{CONTROLLER_NAME, Revision, keys};

use crate::Outcome;
use crate::cluster::Cluster;
use crate::output::{self, Format, OutputArgs, table};

/// `ksync events` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct EventsArgs {
    /// The Application (default: every Event the controller reported).
    pub app: Option<String>,
    /// After the list, keep watching and print each new Event (Ctrl-C stops).
    #[arg(short = 'w', long)]
    pub watch: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Which Events are shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Filter {
    /// Regarding this Application or one of these Revisions.
    Application { name: String, revisions: BTreeSet<String> },
    /// Reported by the controller.
    Controller,
}

impl Filter {
    /// Whether `event` is shown.
    pub fn matches(&self, event: &Event) -> bool {
        let regarding = event.regarding.as_ref();
        let kind = regarding.and_then(|r| r.kind.as_deref()).unwrap_or_default();
        let name = regarding.and_then(|r| r.name.as_deref()).unwrap_or_default();
        match self {
            Filter::Application { name: app, revisions } => {
                (kind == "Application" && name == app)
                    || (kind == "Revision" && revisions.contains(name))
            }
            Filter::Controller => {
                event.reporting_controller.as_deref() == Some(CONTROLLER_NAME)
                    || event.deprecated_source.as_ref().and_then(|s| s.component.as_deref())
                        == Some(CONTROLLER_NAME)
            }
        }
    }
}

/// When the Event last happened.
pub fn last_seen(event: &Event) -> Option<Timestamp> {
    event
        .series
        .as_ref()
        .map(|s| s.last_observed_time.0)
        .or_else(|| event.deprecated_last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The Events table, oldest first; `header` false for the rows a watch prints.
pub fn events_table(events: &[Event], wide: bool, header: bool, now: Timestamp) -> String {
    let mut head = vec!["LAST-SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"];
    if wide {
        head.insert(4, "COUNT");
    }
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            let regarding = e.regarding.clone().unwrap_or_default();
            let seen = last_seen(e).map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time);
            let mut row = vec![
                output::age(now, seen.as_ref()),
                e.type_.clone().unwrap_or_default(),
                e.reason.clone().unwrap_or_default(),
                format!(
                    "{}/{}",
                    regarding.kind.unwrap_or_default().to_lowercase(),
                    regarding.name.unwrap_or_default()
                ),
                e.note.clone().unwrap_or_default().replace('\n', " "),
            ];
            if wide {
                let count = e.series.as_ref().map_or(1, |s| s.count);
                row.insert(4, count.to_string());
            }
            row
        })
        .collect();
    let text = table(&head, &rows);
    if header { text } else { text.lines().skip(1).map(|l| format!("{l}\n")).collect() }
}

async fn filter_for(cluster: &Cluster, app: Option<&str>) -> Result<Filter> {
    let Some(app) = app else { return Ok(Filter::Controller) };
    cluster.application(app).await?;
    let revisions = cluster.revisions(app).await?;
    let names = revisions.iter().filter_map(|r| r.metadata.name.clone()).collect();
    Ok(Filter::Application { name: app.to_owned(), revisions: names })
}

/// Run `ksync events`.
pub async fn run(cluster: &Cluster, args: &EventsArgs) -> Result<Outcome> {
    if args.app.is_some() && cluster.all_namespaces {
        return Err(crate::Refused(
            "-A with an APP: an Application lives in one namespace; drop -A (and use -n), or \
             drop APP to see every namespace's Events"
                .into(),
        )
        .into());
    }
    if args.output.format == Some(Format::Name) {
        return Err(crate::Refused("-o name is not offered for Events; use -o json".into()).into());
    }
    let mut filter = filter_for(cluster, args.app.as_deref()).await?;
    let api: Api<Event> = if cluster.all_namespaces {
        Api::all(cluster.client.clone())
    } else {
        Api::namespaced(cluster.client.clone(), &cluster.namespace)
    };
    let wide = args.output.wide();
    let stream = watcher::watcher(api, watcher::Config::default());
    let mut stream = std::pin::pin!(stream);
    let mut initial = Vec::new();
    while let Some(event) = stream.try_next().await.context("cannot read Events")? {
        match event {
            watcher::Event::Init => initial.clear(),
            watcher::Event::InitApply(e) => initial.push(e),
            watcher::Event::InitDone => {
                let mut shown: Vec<Event> = std::mem::take(&mut initial)
                    .into_iter()
                    .filter(|e| filter.matches(e))
                    .collect();
                shown.sort_by_key(last_seen);
                print_events(&shown, args, wide, true)?;
                if !args.watch {
                    return Ok(Outcome::Done);
                }
            }
            watcher::Event::Apply(e) => {
                learn_revision(cluster, &mut filter, &e).await;
                if filter.matches(&e) {
                    print_events(&[e], args, wide, false)?;
                }
            }
            watcher::Event::Delete(_) => {}
        }
    }
    Ok(Outcome::Done)
}

fn print_events(events: &[Event], args: &EventsArgs, wide: bool, header: bool) -> Result<()> {
    match args.output.structured() {
        Some(format) if header => output::print(&output::structured(format, &events)?),
        Some(format) => {
            for event in events {
                output::print(&output::structured(format, event)?)?;
            }
            Ok(())
        }
        None if events.is_empty() && header => output::print("No Events.\n"),
        None => output::print(&events_table(events, wide, header, Timestamp::now())),
    }
}

/// During a watch, a Revision made after the list started: read it once to see whose it is.
async fn learn_revision(cluster: &Cluster, filter: &mut Filter, event: &Event) {
    let Filter::Application { name, revisions } = filter else { return };
    let Some(regarding) = event.regarding.as_ref() else { return };
    let (Some("Revision"), Some(revision)) = (regarding.kind.as_deref(), regarding.name.as_deref())
    else {
        return;
    };
    if revisions.contains(revision) {
        return;
    }
    let api: Api<Revision> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    if let Ok(Some(found)) = api.get_opt(revision).await
        && found.labels().get(keys::APPLICATION) == Some(name)
    {
        revisions.insert(revision.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(kind: &str, name: &str, reason: &str, at: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{name}.{reason}"), "namespace": "team-a"},
            "eventTime": at, "type": "Normal", "reason": reason, "note": "the note",
            "reportingController": CONTROLLER_NAME, "reportingInstance": "x", "action": "Reconcile",
            "regarding": {"kind": kind, "name": name, "namespace": "team-a"},
        }))
        .expect("event")
    }

    #[test]
    fn an_application_filter_takes_its_own_and_its_revisions_events_only() {
        let filter = Filter::Application {
            name: "web".into(),
            revisions: ["web-abc".to_owned()].into_iter().collect(),
        };
        let at = "2026-12-01T10:00:00.000000Z";
        assert!(filter.matches(&event("Application", "web", "SyncSucceeded", at)));
        assert!(filter.matches(&event("Revision", "web-abc", "RolloutComplete", at)));
        assert!(!filter.matches(&event("Application", "api", "SyncSucceeded", at)));
        assert!(!filter.matches(&event("Revision", "api-abc", "RolloutComplete", at)));
        assert!(Filter::Controller.matches(&event("Application", "api", "SyncSucceeded", at)));
    }

    #[test]
    fn the_table_shows_age_type_reason_object_and_note() {
        let now: Timestamp = "2026-12-01T10:01:00Z".parse().expect("time");
        let e = event("Application", "web", "SyncSucceeded", "2026-12-01T10:00:00.000000Z");
        let text = events_table(std::slice::from_ref(&e), false, true, now);
        assert_eq!(
            text,
            "LAST-SEEN   TYPE     REASON          OBJECT            MESSAGE\n\
             60s         Normal   SyncSucceeded   application/web   the note\n"
        );
        let rows = events_table(&[e], true, false, now);
        assert!(rows.starts_with("60s") && rows.contains(" 1 "), "{rows}");
    }
}
