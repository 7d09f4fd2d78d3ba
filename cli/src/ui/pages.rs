//! The pages as pure functions: objects in, HTML out. The handlers in `mod.rs` fetch the objects
//! (from the watch stores, or from the API as the user) and wrap the result in `html::page`.
//!
//! Plans, diagnoses and history use the CLI's own functions (`plan::resource`,
//! `diagnose::tree`, `revisions::rollback_note`, `revisions::hold_summary`,
//! `output::ready_summary`), so the page and `ksync` say the same thing.

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kuvryn_sync_api::{
    Application, HealthState, ImagePolicy, PlanAction, PlanSummary, Repository, Revision,
    RevisionPhase, SyncState, keys,
};

use super::html::{badge, csrf_field, esc, facts, health_badge, seg};
use super::tree::Node;
use crate::output::ready_summary;
use crate::output::{short_commit, timestamp};
use crate::revisions::{self, name, phase, rollback_note};

/// The list filters (query parameters `ns`, `state`, `q`).
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub struct Filter {
    #[serde(default)]
    pub ns: String,
    /// A sync or health state, such as `OutOfSync` or `Degraded`.
    #[serde(default)]
    pub state: String,
    /// Text in the name, namespace or Ready reason.
    #[serde(default)]
    pub q: String,
}

impl Filter {
    /// Whether `app` passes the filter.
    pub fn keeps(&self, app: &Application) -> bool {
        let ns = app.metadata.namespace.as_deref().unwrap_or_default();
        let name = app.metadata.name.as_deref().unwrap_or_default();
        let status = app.status.clone().unwrap_or_default();
        let state_ok = self.state.is_empty()
            || status.sync.state.as_str() == self.state
            || status.health.state.as_str() == self.state;
        let q = self.q.to_lowercase();
        let text_ok = q.is_empty()
            || [ns, name, &ready_summary(app)].iter().any(|t| t.to_lowercase().contains(&q));
        (self.ns.is_empty() || ns == self.ns) && state_ok && text_ok
    }
}

fn app_name(app: &Application) -> (&str, &str) {
    (
        app.metadata.namespace.as_deref().unwrap_or_default(),
        app.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// The link to an Application's page.
pub fn app_href(ns: &str, name: &str) -> String {
    format!("/apps/{}/{}", seg(ns), seg(name))
}

fn sync_class(state: SyncState) -> &'static str {
    match state {
        SyncState::Synced => "good",
        SyncState::OutOfSync | SyncState::Drifted | SyncState::AwaitingApproval => "warn",
        SyncState::Planning | SyncState::Applying | SyncState::Pruning => "busy",
        SyncState::Unknown => "neutral",
    }
}

fn sync_badge(state: SyncState) -> String {
    badge(sync_class(state), state.as_str())
}

/// The newest of an Application's transition times: when its state last changed.
fn last_change(app: &Application) -> Option<Time> {
    let status = app.status.as_ref()?;
    let times =
        [status.sync.last_transition_time.clone(), status.health.last_transition_time.clone()];
    let conditions = status.conditions.iter().map(|c| Some(c.last_transition_time.clone()));
    times.into_iter().chain(conditions).flatten().max_by_key(|t| t.0)
}

/// The Application list: the filter form, then one row per Application that passes it.
pub fn application_list(apps: &[&Application], filter: &Filter, namespaces: &[String]) -> String {
    let mut rows = String::with_capacity(apps.len() * 600);
    let mut shown = 0usize;
    for app in apps.iter().filter(|a| filter.keeps(a)) {
        shown += 1;
        rows.push_str(&application_row(app));
    }
    format!(
        r#"<h1>Applications</h1>
{form}
<p id="count" role="status">{shown} of {total} Applications</p>
<table class="list" id="applications">
<caption class="sr-only">Applications, with sync state, health, Ready condition, revision and last change</caption>
<thead><tr><th scope="col">Namespace</th><th scope="col">Name</th><th scope="col">Sync</th><th scope="col">Health</th><th scope="col">Ready</th><th scope="col">Revision</th><th scope="col">Last change</th></tr></thead>
<tbody>
{rows}</tbody>
</table>"#,
        form = filter_form(filter, namespaces),
        total = apps.len(),
    )
}

/// One row, kept small (about ten elements): a thousand of them must render in well under a
/// second, so states are cell classes rather than badge elements.
fn application_row(app: &Application) -> String {
    let (ns, name) = app_name(app);
    let status = app.status.clone().unwrap_or_default();
    let revision = short_commit(status.deployed_revision.as_deref());
    let desired = short_commit(status.desired_revision.as_deref());
    let revision = if desired != revision && desired != "-" {
        format!("{} → {}", esc(&revision), esc(&desired))
    } else {
        esc(&revision)
    };
    format!(
        r#"<tr data-app="{ns}/{name}"><td>{ns}</td><td><a href="{href}">{name}</a></td><td class="sync {sync_class}">{sync}</td><td class="health {health_class}">{health}</td><td>{ready}</td><td class="mono">{revision}</td><td>{changed}</td></tr>
"#,
        ns = esc(ns),
        name = esc(name),
        href = app_href(ns, name),
        sync = status.sync.state.as_str(),
        sync_class = sync_class(status.sync.state),
        health = status.health.state.as_str(),
        health_class = super::html::health_class(status.health.state),
        ready = esc(&ready_summary(app)),
        changed = esc(&timestamp(last_change(app).as_ref())),
    )
}

fn filter_form(filter: &Filter, namespaces: &[String]) -> String {
    let option = |value: &str, label: &str, current: &str| {
        let selected = if value == current { " selected" } else { "" };
        format!(r#"<option value="{}"{selected}>{}</option>"#, esc(value), esc(label))
    };
    let ns_options: String = std::iter::once(option("", "All namespaces", &filter.ns))
        .chain(namespaces.iter().map(|n| option(n, n, &filter.ns)))
        .collect();
    let states: Vec<&str> = [SyncState::Synced, SyncState::OutOfSync, SyncState::AwaitingApproval]
        .iter()
        .map(|s| s.as_str())
        .chain(
            [HealthState::Healthy, HealthState::Progressing, HealthState::Degraded]
                .iter()
                .map(|s| s.as_str()),
        )
        .collect();
    let state_options: String = std::iter::once(option("", "Any state", &filter.state))
        .chain(states.iter().map(|s| option(s, s, &filter.state)))
        .collect();
    format!(
        r#"<form class="filters" method="get" action="/" role="search" aria-label="Filter Applications">
<label for="f-ns">Namespace</label><select id="f-ns" name="ns">{ns_options}</select>
<label for="f-state">State</label><select id="f-state" name="state">{state_options}</select>
<label for="f-q">Text</label><input id="f-q" name="q" type="search" value="{q}">
<button type="submit">Filter</button>
</form>"#,
        q = esc(&filter.q)
    )
}

/// What the Application page shows besides the Application.
#[derive(Debug)]
pub struct AppView<'a> {
    pub revisions: &'a [Revision],
    pub tree: Result<Vec<Node>, String>,
    pub events: Result<Vec<Event>, String>,
    pub csrf: &'a str,
}

/// The Application page: summary and actions, diagnosis, resource tree, plan, history, Events.
pub fn application_page(app: &Application, view: &AppView<'_>) -> String {
    let (ns, name) = app_name(app);
    [
        format!("<h1>Application {}/{}</h1>", esc(ns), esc(name)),
        summary(app, view.revisions),
        actions(app, view.revisions, view.csrf),
        diagnosis(app),
        tree_section(&view.tree),
        plan_section(view.revisions),
        history(app, view.revisions),
        events(&view.events),
    ]
    .concat()
}

fn section(id: &str, title: &str, body: &str) -> String {
    format!(
        r#"<section aria-labelledby="h-{id}" id="s-{id}"><h2 id="h-{id}">{title}</h2>{body}</section>"#
    )
}

fn summary(app: &Application, all: &[Revision]) -> String {
    let status = app.status.clone().unwrap_or_default();
    let mode = if app.spec.sync.automatic { "automatic" } else { "manual (needs approval)" };
    let suspended = if app.spec.suspend { "yes (spec.suspend)" } else { "no" };
    let counts = &status.resources;
    let mut rows = vec![
        ("Sync", sync_badge(status.sync.state)),
        ("Health", health_badge(status.health.state)),
        ("Ready", format!(r#"<span id="ready">{}</span>"#, esc(&ready_summary(app)))),
        ("Mode", esc(mode)),
        ("Suspended", esc(suspended)),
        (
            "Desired",
            format!("<code>{}</code>", esc(status.desired_revision.as_deref().unwrap_or("-"))),
        ),
        (
            "Deployed",
            format!("<code>{}</code>", esc(status.deployed_revision.as_deref().unwrap_or("-"))),
        ),
        (
            "Resources",
            esc(&format!(
                "{} healthy, {} progressing, {} degraded, {} unknown",
                counts.healthy, counts.progressing, counts.degraded, counts.unknown
            )),
        ),
    ];
    let annotations = app.metadata.annotations.clone().unwrap_or_default();
    if let Some(by) = annotations.get(keys::APPROVED_BY) {
        let at = annotations.get(keys::APPROVED_AT).map_or("-", String::as_str);
        rows.push((
            "Last approval",
            format!(r#"<span id="approved-by">{}</span> at {}"#, esc(by), esc(at)),
        ));
    }
    if let Some(hold) = revisions::hold_summary(app, all) {
        rows.push((
            "Rollback",
            esc(hold.trim().trim_start_matches("Held:").trim_start_matches("Rollback:").trim()),
        ));
    }
    let conditions: String = status
        .conditions
        .iter()
        .map(|c| {
            format!(
                "<li><strong>{}</strong> {} {}: {}</li>",
                esc(&c.type_),
                esc(&c.status),
                esc(&c.reason),
                esc(&c.message)
            )
        })
        .collect();
    let body =
        format!("{}<h3>Conditions</h3><ul class=\"conditions\">{conditions}</ul>", facts(&rows));
    section("summary", "Summary", &body)
}

fn actions(app: &Application, all: &[Revision], csrf: &str) -> String {
    let (ns, name) = app_name(app);
    let href = app_href(ns, name);
    let mut out = String::new();
    if let Ok((revision, plan)) = crate::sync::pending_approval(app, all) {
        out.push_str(&format!(
            r#"<form method="post" action="{href}/approve" class="action">{csrf}<input type="hidden" name="revision" value="{rev}"><input type="hidden" name="digest" value="{digest}"><button type="submit" id="approve">Approve Revision {rev}</button> <span>plan digest <code>{digest}</code></span></form>"#,
            csrf = csrf_field(csrf),
            rev = esc(revisions::name(revision)),
            digest = esc(&plan.digest),
        ));
    }
    let (value, label) = if app.spec.suspend { ("false", "Resume") } else { ("true", "Suspend") };
    out.push_str(&format!(
        r#"<form method="post" action="{href}/suspend" class="action">{csrf}<input type="hidden" name="suspend" value="{value}"><button type="submit" id="suspend">{label}</button></form>"#,
        csrf = csrf_field(csrf),
    ));
    out.push_str(&format!(
        r#"<form method="post" action="{href}/reconcile" class="action">{csrf}<button type="submit" id="reconcile">Reconcile now</button></form>"#,
        csrf = csrf_field(csrf),
    ));
    out.push_str(&format!(
        r#"<p><a href="{href}/rollback" id="rollback">Roll back…</a> (shows the plan first)</p>"#
    ));
    section("actions", "Actions", &out)
}

fn diagnosis(app: &Application) -> String {
    let diagnosis = app.status.as_ref().map(|s| s.diagnosis.clone()).unwrap_or_default();
    let body = if diagnosis.is_empty() {
        format!("<p>{}</p>", esc(crate::diagnose::view(app, &diagnosis).trim()))
    } else {
        format!(
            r#"<pre class="diagnosis" id="diagnosis-text">{}</pre>"#,
            esc(&crate::diagnose::tree(&diagnosis))
        )
    };
    section("diagnosis", "Diagnosis", &body)
}

fn tree_section(tree: &Result<Vec<Node>, String>) -> String {
    let body = match tree {
        Err(error) => format!(r#"<p class="notice refused" role="alert">{}</p>"#, esc(error)),
        Ok(nodes) if nodes.is_empty() => "<p>No managed resources yet.</p>".to_owned(),
        Ok(nodes) => format!(
            r#"<p class="legend"><span class="chain-mark">Highlighted</span> resources are on the diagnosis chain.</p><ul class="tree" id="tree">{}</ul>"#,
            nodes.iter().map(node).collect::<String>()
        ),
    };
    section("tree", "Resources", &body)
}

fn node(n: &Node) -> String {
    let health = match &n.health {
        Some((state, message)) if message.is_empty() => health_badge(*state),
        Some((state, message)) => {
            format!("{} <span class=\"muted\">{}</span>", health_badge(*state), esc(message))
        }
        None => badge("bad", "not found"),
    };
    let cause = n.root_cause.as_ref().map_or_else(String::new, |r| {
        format!(r#" <strong class="cause">root cause: {}</strong>"#, esc(r))
    });
    let class = if n.on_chain { r#" class="on-chain""# } else { "" };
    let chain_note =
        if n.on_chain { r#"<span class="sr-only"> (on the diagnosis chain)</span>"# } else { "" };
    let children = if n.children.is_empty() {
        String::new()
    } else {
        format!("<ul>{}</ul>", n.children.iter().map(node).collect::<String>())
    };
    format!(
        r#"<li{class} data-kind="{kind}" data-name="{name}"><span class="node"><span class="kind">{kind}</span> {name}{chain_note} {health}{cause}</span>{children}</li>"#,
        kind = esc(&n.kind),
        name = esc(&n.name),
    )
}

/// A plan as a table of changes with the counts, warnings and digest (values never shown: the
/// plan holds field paths only, already redacted by the controller).
pub fn plan_table(plan: &PlanSummary) -> String {
    let rows: String = plan
        .changes
        .iter()
        .filter(|c| c.action != PlanAction::Unchanged || c.warning.is_some())
        .map(|c| {
            let fields: String =
                c.fields.iter().map(|f| format!("<code>{}</code> ", esc(f))).collect();
            let warning = c.warning.as_ref().map_or_else(String::new, |w| {
                format!(r#"<br><span class="warn-text">{}</span>"#, esc(w))
            });
            format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{fields}{warning}</td></tr>",
                esc(&format!("{:?}", c.action)),
                esc(&crate::plan::resource(&c.resource)),
                c.wave
            )
        })
        .collect();
    let truncated = if plan.truncated {
        "<p>More changes than the plan summary keeps (at most 100 are listed).</p>"
    } else {
        ""
    };
    format!(
        r#"<table class="plan"><thead><tr><th scope="col">Change</th><th scope="col">Resource</th><th scope="col">Wave</th><th scope="col">Fields</th></tr></thead><tbody>{rows}</tbody></table>{truncated}<p>Plan: {} to create, {} to update, {} to delete, {} unchanged</p><p>Digest: <code class="digest">{}</code></p>"#,
        plan.create,
        plan.update,
        plan.delete,
        plan.unchanged,
        esc(&plan.digest)
    )
}

fn plan_section(all: &[Revision]) -> String {
    let body = match all.first() {
        None => "<p>No Revision yet.</p>".to_owned(),
        Some(r) => match r.status.as_ref().and_then(|s| s.plan.as_ref()) {
            None => format!("<p>Revision {} has no plan yet.</p>", esc(name(r))),
            Some(plan) => format!(
                "<p>Revision {} (commit <code>{}</code>, {})</p>{}",
                esc(name(r)),
                esc(&short_commit(Some(&r.spec.source.revision))),
                esc(&phase(r).map_or_else(|| "-".to_owned(), |p| p.to_string())),
                plan_table(plan)
            ),
        },
    };
    section("plan", "Current plan", &body)
}

fn history(app: &Application, all: &[Revision]) -> String {
    let held = app.metadata.annotations.as_ref().and_then(|a| a.get(keys::ROLLBACK_FROM)).cloned();
    let (ns, app_name) = app_name(app);
    let rows: String = all
        .iter()
        .map(|r| {
            let status = r.status.clone().unwrap_or_default();
            let (by, at) = status.approval.as_ref().map_or(("-".to_owned(), "-".to_owned()), |a| {
                (a.approved_by.clone(), timestamp(Some(&a.approved_at)))
            });
            let target = if revisions::was_deployed(r) {
                format!(r#"<a href="{}/rollback?to={}">Roll back to this</a>"#, app_href(ns, app_name), seg(name(r)))
            } else {
                String::new()
            };
            format!(
                "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} {target}</td></tr>",
                esc(name(r)),
                esc(&phase(r).map_or_else(|| "-".to_owned(), |p| p.to_string())),
                esc(&short_commit(Some(&r.spec.source.revision))),
                status.attempts,
                esc(&by),
                esc(&at),
                esc(&timestamp(status.started_at.as_ref())),
                esc(&timestamp(status.completed_at.as_ref())),
                esc(&rollback_note(r, held.as_deref())),
            )
        })
        .collect();
    let body = format!(
        r#"<table class="history" id="history"><thead><tr><th scope="col">Revision</th><th scope="col">Phase</th><th scope="col">Commit</th><th scope="col">Attempts</th><th scope="col">Approved by</th><th scope="col">Approved at</th><th scope="col">Started</th><th scope="col">Completed</th><th scope="col">Rollback</th></tr></thead><tbody>{rows}</tbody></table>"#
    );
    section("history", "Revision history", &body)
}

fn events(events: &Result<Vec<Event>, String>) -> String {
    let body = match events {
        Err(error) => format!(r#"<p class="notice refused" role="alert">{}</p>"#, esc(error)),
        Ok(list) if list.is_empty() => "<p>No Events.</p>".to_owned(),
        Ok(list) => {
            let rows: String = list
                .iter()
                .map(|e| {
                    let when = super::event_time(e).map(|t| t.to_string());
                    format!(
                        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                        esc(e.type_.as_deref().unwrap_or("-")),
                        esc(e.reason.as_deref().unwrap_or("-")),
                        esc(e.message.as_deref().unwrap_or_default()),
                        e.count.unwrap_or(1),
                        esc(when.as_deref().unwrap_or("-")),
                    )
                })
                .collect();
            format!(
                r#"<table class="events"><thead><tr><th scope="col">Type</th><th scope="col">Reason</th><th scope="col">Message</th><th scope="col">Count</th><th scope="col">Last seen</th></tr></thead><tbody>{rows}</tbody></table>"#
            )
        }
    };
    section("events", "Events", &body)
}

/// The rollback page: the target's plan (what its rollout changed), then the confirmation.
pub fn rollback_page(app: &Application, target: Result<&Revision, String>, csrf: &str) -> String {
    let (ns, name) = app_name(app);
    let body = match target {
        Err(refusal) => format!(r#"<p class="notice refused" role="alert">{}</p>"#, esc(&refusal)),
        Ok(target) => {
            let plan = target
                .status
                .as_ref()
                .and_then(|s| s.plan.as_ref())
                .map_or_else(|| "<p>The target Revision keeps no plan.</p>".to_owned(), plan_table);
            format!(
                r#"<p>Roll {app} back to Revision <strong>{rev}</strong> (commit <code>{commit}</code>, {phase}). Its plan, what its rollout changed:</p>{plan}
<form method="post" action="{href}/rollback">{csrf}<input type="hidden" name="to" value="{rev}"><button type="submit" id="confirm-rollback">Roll back to {rev}</button> <a href="{href}">Cancel</a></form>"#,
                app = esc(name),
                rev = esc(crate::revisions::name(target)),
                commit = esc(&short_commit(Some(&target.spec.source.revision))),
                phase = esc(phase(target).unwrap_or(RevisionPhase::Healthy).as_str()),
                href = app_href(ns, name),
                csrf = csrf_field(csrf),
            )
        }
    };
    format!("<h1>Roll back {}/{}</h1>{body}", esc(ns), esc(name))
}

/// Repositories with their state and the Applications they discovered or feed.
pub fn repository_list(repositories: &[&Repository], apps: &[&Application]) -> String {
    let items: String = repositories.iter().map(|r| repository(r, apps)).collect();
    let body = if items.is_empty() { "<p>No Repositories.</p>".to_owned() } else { items };
    format!("<h1>Repositories</h1>{body}")
}

fn repository(repo: &Repository, apps: &[&Application]) -> String {
    let ns = repo.metadata.namespace.as_deref().unwrap_or_default();
    let name = repo.metadata.name.as_deref().unwrap_or_default();
    let status = repo.status.clone().unwrap_or_default();
    let ready = crate::output::condition(&status.conditions, "Ready")
        .map_or_else(|| "-".to_owned(), |c| format!("{}/{}: {}", c.status, c.reason, c.message));
    let git = repo.spec.git.clone().unwrap_or_default();
    let same_ns = apps.iter().filter(|a| a.metadata.namespace.as_deref() == Some(ns));
    let link = |a: &&&Application| {
        let (ans, aname) = app_name(a);
        format!(r#"<li><a href="{}">{}</a></li>"#, app_href(ans, aname), esc(aname))
    };
    let discovered: Vec<String> = same_ns
        .clone()
        .filter(|a| {
            a.metadata.labels.as_ref().and_then(|l| l.get(keys::REPOSITORY)).map(String::as_str)
                == Some(name)
        })
        .map(|a| link(&a))
        .collect();
    let fed: Vec<String> =
        same_ns.filter(|a| a.spec.source.repository_ref.name == name).map(|a| link(&a)).collect();
    let list = |items: Vec<String>| {
        if items.is_empty() {
            "<p>none</p>".to_owned()
        } else {
            format!("<ul>{}</ul>", items.concat())
        }
    };
    let rows = [
        ("URL", format!("<code>{}</code>", esc(&git.url))),
        ("Revision", esc(git.revision.as_deref().unwrap_or("default branch"))),
        ("State", esc(status.state.as_str())),
        (
            "Observed commit",
            format!("<code>{}</code>", esc(&short_commit(status.observed_revision.as_deref()))),
        ),
        ("Last fetched", esc(&timestamp(status.last_fetched_at.as_ref()))),
        ("Ready", esc(&ready)),
    ];
    format!(
        r#"<section class="card" aria-label="Repository {ns}/{name}"><h2>{ns}/{name}</h2>{facts}<h3>Discovered Applications</h3>{discovered}<h3>Applications using it</h3>{fed}</section>"#,
        ns = esc(ns),
        name = esc(name),
        facts = facts(&rows),
        discovered = list(discovered),
        fed = list(fed),
    )
}

/// ImagePolicies with their policy and what they selected.
pub fn image_policy_list(policies: &[&ImagePolicy]) -> String {
    let rows: String = policies
        .iter()
        .map(|p| {
            let status = p.status.clone().unwrap_or_default();
            let policy = &p.spec.policy;
            let rule = match (&policy.semver, &policy.tag_pattern, &policy.digest) {
                (Some(s), _, _) => format!("semver {}", s.range),
                (_, Some(t), _) => format!("tags matching {} ({:?})", t.regex, t.order),
                (_, _, Some(d)) => format!("digest of tag {}", d.tag),
                _ => "-".to_owned(),
            };
            let ready = crate::output::condition(&status.conditions, "Ready")
                .map_or_else(|| "-".to_owned(), |c| format!("{}/{}: {}", c.status, c.reason, c.message));
            format!(
                "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td><code>{}</code></td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                esc(p.metadata.namespace.as_deref().unwrap_or_default()),
                esc(p.metadata.name.as_deref().unwrap_or_default()),
                esc(&p.spec.image),
                esc(&rule),
                esc(status.latest_tag.as_deref().unwrap_or("-")),
                esc(status.latest_digest.as_deref().unwrap_or("-")),
                esc(&timestamp(status.last_scanned_at.as_ref())),
                esc(&ready),
            )
        })
        .collect();
    format!(
        r#"<h1>Image policies</h1><table class="list" id="imagepolicies"><thead><tr><th scope="col">Namespace</th><th scope="col">Name</th><th scope="col">Image</th><th scope="col">Policy</th><th scope="col">Selected tag</th><th scope="col">Digest</th><th scope="col">Last scanned</th><th scope="col">Ready</th></tr></thead><tbody>{rows}</tbody></table>"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(ns: &str, name: &str, sync: &str, health: &str, reason: &str) -> Application {
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"source": {"repositoryRef": {"name": "apps"}, "render": {"type": "yaml"}},
                     "destination": {"namespace": ns}},
            "status": {"sync": {"state": sync, "lastTransitionTime": "2026-12-01T10:00:00Z"},
                       "health": {"state": health, "lastTransitionTime": "2026-12-01T10:05:00Z"},
                       "deployedRevision": "0123456789abcdef", "desiredRevision": "fedcba9876543210",
                       "conditions": [{"type": "Ready", "status": "False", "reason": reason,
                                       "message": "", "lastTransitionTime": "2026-12-01T10:02:00Z"}]},
        }))
        .expect("application")
    }

    #[test]
    fn filters_keep_by_namespace_state_and_text() {
        let apps = [
            app("a", "web", "Synced", "Healthy", "Healthy"),
            app("b", "api", "AwaitingApproval", "Unknown", "Progressing"),
            app("b", "db", "Synced", "Degraded", "HealthFailure"),
        ];
        let kept = |f: Filter| {
            apps.iter()
                .filter(|a| f.keeps(a))
                .map(|a| a.metadata.name.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        };
        let filter = |ns: &str, state: &str, q: &str| Filter {
            ns: ns.into(),
            state: state.into(),
            q: q.into(),
        };
        assert_eq!(kept(filter("", "", "")), ["web", "api", "db"]);
        assert_eq!(kept(filter("b", "", "")), ["api", "db"]);
        assert_eq!(kept(filter("", "AwaitingApproval", "")), ["api"]);
        assert_eq!(kept(filter("", "Degraded", "")), ["db"], "health states filter too");
        assert_eq!(kept(filter("", "", "healthfail")), ["db"], "text matches the Ready reason");
        assert_eq!(kept(filter("a", "Synced", "WE")), ["web"]);
    }

    #[test]
    fn a_row_shows_states_ready_revisions_and_the_last_change_escaped() {
        let mut odd = app("a", "web", "Synced", "Degraded", "HealthFailure");
        odd.metadata.name = Some("<web>".into());
        let html = application_list(&[&odd], &Filter::default(), &["a".into()]);
        assert!(
            html.contains(
                r#"<td class="sync good">Synced</td><td class="health bad">Degraded</td>"#
            ),
            "{html}"
        );
        assert!(html.contains("<td>False/HealthFailure</td>"), "{html}");
        assert!(html.contains("0123456789ab → fedcba987654"), "deployed → desired: {html}");
        assert!(html.contains("2026-12-01T10:05:00Z"), "the newest transition: {html}");
        assert!(html.contains("&lt;web&gt;") && !html.contains("<web>"), "{html}");
        assert!(html.contains("1 of 1 Applications"), "{html}");
    }

    #[test]
    fn a_rollback_refusal_is_shown_and_offers_no_button() {
        let web = app("a", "web", "Synced", "Healthy", "Healthy");
        let html =
            rollback_page(&web, Err("Application web has no earlier Healthy Revision".into()), "t");
        assert!(html.contains(r#"role="alert""#) && html.contains("no earlier Healthy Revision"));
        assert!(!html.contains("<form"), "{html}");
    }

    #[test]
    fn the_plan_table_lists_changes_fields_warnings_and_the_digest() {
        let plan: PlanSummary = serde_json::from_value(json!({
            "digest": "sha256:abc", "create": 0, "update": 1, "delete": 0, "unchanged": 2,
            "changes": [
                {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "a", "name": "web"},
                 "action": "Update", "fields": [".spec.replicas"]},
                {"resource": {"apiVersion": "v1", "kind": "Secret", "namespace": "a", "name": "keep"},
                 "action": "Unchanged", "warning": "never pruned"},
                {"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "a", "name": "same"},
                 "action": "Unchanged"},
            ],
        }))
        .expect("plan");
        let html = plan_table(&plan);
        assert!(html.contains("<td>Update</td><td>apps/v1 Deployment a/web</td>"), "{html}");
        assert!(
            html.contains("<code>.spec.replicas</code>") && html.contains("never pruned"),
            "{html}"
        );
        assert!(!html.contains("a/same"), "unchanged without a warning is only counted");
        assert!(html.contains(r#"<code class="digest">sha256:abc</code>"#), "{html}");
    }
}
