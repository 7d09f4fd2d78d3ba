//! `ksync ui`: the web view. It serves server-rendered pages of Applications (list, resource
//! tree, plan, history, Events), Repositories and ImagePolicies on loopback, keeps them live from
//! watches (server-sent events), and performs approve, rollback, suspend/resume and reconcile
//! through the same functions as `ksync sync` and `ksync rollback`.
//!
//! Every read and write uses the client built from the user's kubeconfig and flags (`--as`
//! included), so Kubernetes RBAC and the admission webhook judge each action as the user's own;
//! a refusal is shown as the API server worded it. The process holds no other credential.
//!
//! Requests must name the listening address in `Host` (no DNS rebinding); state-changing requests
//! are POSTs that carry the per-process CSRF token and, when the browser sends `Origin`, come from
//! this origin. The assets (CSS, a small script) are compiled into the binary.

mod actions;
mod html;
mod live;
mod pages;
mod tree;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use kuvryn_sync_api::{Application, Revision};

use crate::Outcome;
use crate::cluster::Cluster;
use html::{Header, Notice, Section};

const CSS: &str = include_str!("assets/ui.css");
const JS: &str = include_str!("assets/ui.js");

/// `ksync ui` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct UiArgs {
    /// Address to listen on. Loopback by default: the view acts with your credentials, so
    /// anything else exposes them to whoever can reach the address.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDRESS")]
    pub listen: SocketAddr,
}

/// What every handler shares.
#[derive(Clone)]
struct Ui {
    cluster: Cluster,
    live: live::Live,
    /// The random token every form carries.
    csrf: Arc<str>,
    /// `Host` values the server answers to.
    hosts: Arc<[String]>,
    header: Arc<Header>,
}

impl std::fmt::Debug for Ui {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ui").field("cluster", &self.cluster).finish_non_exhaustive()
    }
}

/// Run `ksync ui` until Ctrl-C or SIGTERM.
pub async fn run(cluster: &Cluster, args: &UiArgs) -> Result<Outcome> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}; pick another --listen", args.listen))?;
    let address = listener.local_addr()?;
    if !address.ip().is_loopback() {
        eprintln!(
            "ksync ui: warning: listening on {address}, beyond loopback; anyone who reaches it acts \
             with your Kubernetes credentials"
        );
    }
    let namespace = (!cluster.all_namespaces).then_some(cluster.namespace.as_str());
    let live = live::Live::start(&cluster.client, namespace);
    let user = whoami(&cluster.client).await;
    live.settle(Duration::from_secs(5)).await;
    let scope =
        namespace.map_or_else(|| "all namespaces".to_owned(), |ns| format!("namespace {ns}"));
    let ui = Ui {
        cluster: cluster.clone(),
        live,
        csrf: uuid::Uuid::new_v4().simple().to_string().into(),
        hosts: allowed_hosts(address).into(),
        header: Arc::new(Header { user, scope, watch_errors: Vec::new() }),
    };
    println!("ready http://{address}/");
    eprintln!("ksync ui: serving http://{address}/ ; Ctrl-C stops it");
    let router = router(ui);
    axum::serve(listener, router).with_graceful_shutdown(shutdown()).await?;
    Ok(Outcome::Done)
}

async fn shutdown() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// The `Host` header values that name this server: the bound address, and `localhost:PORT` for
/// a loopback address.
fn allowed_hosts(address: SocketAddr) -> Vec<String> {
    let mut hosts = vec![address.to_string()];
    if address.ip().is_loopback() {
        hosts.push(format!("localhost:{}", address.port()));
    }
    hosts
}

fn router(ui: Ui) -> Router {
    Router::new()
        .route("/", get(list_page))
        .route("/apps/{ns}/{name}", get(app_page))
        .route("/apps/{ns}/{name}/rollback", get(rollback_page).post(actions::rollback))
        .route("/apps/{ns}/{name}/approve", post(actions::approve))
        .route("/apps/{ns}/{name}/suspend", post(actions::suspend))
        .route("/apps/{ns}/{name}/reconcile", post(actions::reconcile))
        .route("/repositories", get(repositories_page))
        .route("/imagepolicies", get(image_policies_page))
        .route("/live", get(|State(ui): State<Ui>| async move { ui.live.events() }))
        .route("/assets/ui.css", get(|| async { ([(header::CONTENT_TYPE, "text/css")], CSS) }))
        .route("/assets/ui.js", get(|| async { ([(header::CONTENT_TYPE, "text/javascript")], JS) }))
        .layer(middleware::from_fn_with_state(ui.clone(), guard))
        .with_state(ui)
}

/// Refuse a request whose `Host` is not this server (DNS rebinding), and a POST without this
/// origin; add the headers that keep pages out of frames and caches.
async fn guard(State(ui): State<Ui>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if !host_allowed(headers, &ui.hosts) {
        return (StatusCode::MISDIRECTED_REQUEST, "this server answers only to its own address")
            .into_response();
    }
    if request.method() == axum::http::Method::POST && !same_origin(headers, &ui.hosts) {
        return (StatusCode::FORBIDDEN, "cross-origin request refused").into_response();
    }
    let mut response = next.run(request).await;
    let out = response.headers_mut();
    out.insert("x-frame-options", header::HeaderValue::from_static("DENY"));
    out.insert("cache-control", header::HeaderValue::from_static("no-store"));
    out.insert(
        "content-security-policy",
        header::HeaderValue::from_static(
            "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    response
}

fn host_allowed(headers: &HeaderMap, hosts: &[String]) -> bool {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    hosts.iter().any(|h| h == host)
}

/// A POST is same-origin when `Origin` (if sent) and `Sec-Fetch-Site` (if sent) say so.
fn same_origin(headers: &HeaderMap, hosts: &[String]) -> bool {
    let text = |name| headers.get(name).and_then(|v: &header::HeaderValue| v.to_str().ok());
    let origin_ok = match text(header::ORIGIN.as_str()) {
        None => true,
        Some(origin) => hosts.iter().any(|h| origin == format!("http://{h}")),
    };
    let site_ok = matches!(text("sec-fetch-site"), None | Some("same-origin") | Some("none"));
    origin_ok && site_ok
}

/// The words of the API server when `error` carries its Status, else the error chain; redacted.
pub fn api_words(error: &(dyn std::error::Error + 'static)) -> String {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(kube::Error::Api(status)) = e.downcast_ref::<kube::Error>() {
            return kuvryn_sync_core::redact::redact_shapes(&status.message);
        }
        if let Some(status) = e.downcast_ref::<kube::core::Status>() {
            return kuvryn_sync_core::redact::redact_shapes(&status.message);
        }
        current = e.source();
    }
    kuvryn_sync_core::redact::redact_shapes(&error.to_string())
}

/// [`api_words`] for an `anyhow::Error`.
pub fn anyhow_words(error: &anyhow::Error) -> String {
    for cause in error.chain() {
        if cause.downcast_ref::<kube::Error>().is_some() {
            return api_words(cause);
        }
    }
    kuvryn_sync_core::redact::redact_shapes(&format!("{error:#}"))
}

impl Ui {
    fn header(&self) -> Header {
        Header { watch_errors: self.live.errors(), ..(*self.header).clone() }
    }

    fn page(
        &self,
        title: &str,
        section: Section,
        notice: Option<&Notice>,
        body: &str,
    ) -> Html<String> {
        Html(html::page(title, section, &self.header(), notice, body, None))
    }

    /// The cluster handle for namespace `ns` (actions on an Application use its namespace).
    fn in_namespace(&self, ns: &str) -> Cluster {
        Cluster { namespace: ns.to_owned(), ..self.cluster.clone() }
    }

    fn application(&self, ns: &str, name: &str) -> Option<Arc<Application>> {
        self.live.applications.state().into_iter().find(|a| {
            a.metadata.namespace.as_deref() == Some(ns) && a.metadata.name.as_deref() == Some(name)
        })
    }

    /// The Revisions of Application `ns/name`, newest first, from the watch.
    fn revisions(&self, ns: &str, name: &str) -> Vec<Revision> {
        let own = self.live.revisions.state().into_iter().filter(|r| {
            r.metadata.namespace.as_deref() == Some(ns) && r.spec.application_ref.name == name
        });
        crate::revisions::newest_first(own.map(|r| (*r).clone()).collect())
    }

    async fn app_page(&self, ns: &str, name: &str, notice: Option<Notice>) -> Response {
        let Some(app) = self.application(ns, name) else {
            let body = format!(
                "<h1>Not found</h1><p>No Application {}/{} is visible to you.</p>",
                html::esc(ns),
                html::esc(name)
            );
            let page = self.page("Not found", Section::Applications, notice.as_ref(), &body);
            return (StatusCode::NOT_FOUND, page).into_response();
        };
        let revisions = self.revisions(ns, name);
        let tree = tree::fetch(&self.cluster.client, &app).await.map_err(|e| anyhow_words(&e));
        let events = self.events(ns, name).await;
        let view = pages::AppView { revisions: &revisions, tree, events, csrf: &self.csrf };
        let body = pages::application_page(&app, &view);
        let canonical = notice.is_some().then(|| pages::app_href(ns, name));
        let page = html::page(
            &format!("{ns}/{name}"),
            Section::Applications,
            &self.header(),
            notice.as_ref(),
            &body,
            canonical.as_deref(),
        );
        Html(page).into_response()
    }

    async fn events(&self, ns: &str, name: &str) -> Result<Vec<Event>, String> {
        let api: Api<Event> = Api::namespaced(self.cluster.client.clone(), ns);
        let selector = format!("involvedObject.kind=Application,involvedObject.name={name}");
        let mut events = api
            .list(&ListParams::default().fields(&selector))
            .await
            .map_err(|e| format!("cannot list Events: {}", api_words(&e)))?
            .items;
        events.sort_by_key(|e| std::cmp::Reverse(event_time(e)));
        events.truncate(50);
        Ok(events)
    }
}

async fn list_page(State(ui): State<Ui>, Query(filter): Query<pages::Filter>) -> Html<String> {
    let all = ui.live.applications.state();
    let mut apps: Vec<&Application> = all.iter().map(Arc::as_ref).collect();
    apps.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    let mut namespaces: Vec<String> =
        apps.iter().filter_map(|a| a.metadata.namespace.clone()).collect();
    namespaces.dedup();
    ui.page(
        "Applications",
        Section::Applications,
        None,
        &pages::application_list(&apps, &filter, &namespaces),
    )
}

async fn app_page(State(ui): State<Ui>, Path((ns, name)): Path<(String, String)>) -> Response {
    ui.app_page(&ns, &name, None).await
}

#[derive(Debug, serde::Deserialize)]
struct RollbackQuery {
    to: Option<String>,
}

async fn rollback_page(
    State(ui): State<Ui>,
    Path((ns, name)): Path<(String, String)>,
    Query(query): Query<RollbackQuery>,
) -> Response {
    let Some(app) = ui.application(&ns, &name) else {
        return ui.app_page(&ns, &name, None).await;
    };
    let all = ui.revisions(&ns, &name);
    let deployed = app.status.as_ref().and_then(|s| s.deployed_revision.as_deref());
    let target = crate::rollback::choose_target(&name, &all, deployed, query.to.as_deref())
        .map_err(|refused| refused.0);
    let body = pages::rollback_page(&app, target, &ui.csrf);
    ui.page(&format!("Roll back {name}"), Section::Applications, None, &body).into_response()
}

async fn repositories_page(State(ui): State<Ui>) -> Html<String> {
    let repos = ui.live.repositories.state();
    let mut repos: Vec<_> = repos.iter().map(Arc::as_ref).collect();
    repos.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    let apps = ui.live.applications.state();
    let apps: Vec<_> = apps.iter().map(Arc::as_ref).collect();
    ui.page("Repositories", Section::Repositories, None, &pages::repository_list(&repos, &apps))
}

async fn image_policies_page(State(ui): State<Ui>) -> Html<String> {
    let policies = ui.live.image_policies.state();
    let mut policies: Vec<_> = policies.iter().map(Arc::as_ref).collect();
    policies.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    ui.page("Image policies", Section::ImagePolicies, None, &pages::image_policy_list(&policies))
}

/// When an Event last happened: `lastTimestamp` (core Events), else the series' last
/// observation or `eventTime` (events.k8s.io, as kube's recorder writes them), else
/// `firstTimestamp`.
pub fn event_time(event: &Event) -> Option<k8s_openapi::jiff::Timestamp> {
    let series = event.series.as_ref().and_then(|s| s.last_observed_time.as_ref()).map(|t| t.0);
    let micro = event.event_time.as_ref().map(|t| t.0);
    let first = event.first_timestamp.as_ref().map(|t| t.0);
    event.last_timestamp.as_ref().map(|t| t.0).or(series).or(micro).or(first)
}

/// Who the client is, from a SelfSubjectReview; a note when the server does not say.
async fn whoami(client: &kube::Client) -> String {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = SelfSubjectReview::default();
    match api.create(&Default::default(), &review).await {
        Ok(review) => review
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)
            .unwrap_or_else(|| "(unknown user)".to_owned()),
        Err(_) => "(unknown user: SelfSubjectReview refused)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().expect("header"));
        }
        map
    }

    #[test]
    fn only_this_servers_host_and_origin_are_accepted() {
        let hosts = allowed_hosts("127.0.0.1:8080".parse().expect("addr"));
        assert!(host_allowed(&headers(&[("host", "127.0.0.1:8080")]), &hosts));
        assert!(host_allowed(&headers(&[("host", "localhost:8080")]), &hosts));
        assert!(!host_allowed(&headers(&[("host", "evil.example:8080")]), &hosts));
        assert!(!host_allowed(&headers(&[]), &hosts));
        let cases = [
            (vec![], true),
            (vec![("origin", "http://127.0.0.1:8080"), ("sec-fetch-site", "same-origin")], true),
            (vec![("origin", "http://evil.example")], false),
            (vec![("sec-fetch-site", "cross-site")], false),
            (vec![("origin", "null")], false),
        ];
        for (pairs, want) in cases {
            assert_eq!(same_origin(&headers(&pairs), &hosts), want, "{pairs:?}");
        }
    }
}
