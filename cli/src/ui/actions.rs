//! The actions of the web view, each a POST with the CSRF token, each through the CLI's own
//! function: approve (`sync::approve`, with the revision and digest the page showed), rollback
//! (`rollback::choose_target` and `rollback::request`), reconcile now (`sync::request_fetch`,
//! the `reconcile-requested-at` annotation the push receivers set), and suspend/resume (a merge
//! patch of `spec.suspend`). The answer is the Application page with a notice: done, or the
//! refusal as the API server (RBAC or the webhook) worded it.

use axum::extract::{Form, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kube::api::{Patch, PatchParams};
use serde::Deserialize;
use subtle::ConstantTimeEq;

use super::html::Notice;
use super::{Ui, anyhow_words, api_words};

/// Form fields of the approve button.
#[derive(Debug, Deserialize)]
pub struct ApproveForm {
    csrf: String,
    revision: String,
    digest: String,
}

/// Form fields of the rollback confirmation.
#[derive(Debug, Deserialize)]
pub struct RollbackForm {
    csrf: String,
    to: String,
}

/// Form fields of the suspend/resume button.
#[derive(Debug, Deserialize)]
pub struct SuspendForm {
    csrf: String,
    suspend: String,
}

/// Form fields of the reconcile button.
#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    csrf: String,
}

fn csrf_ok(ui: &Ui, token: &str) -> bool {
    bool::from(token.as_bytes().ct_eq(ui.csrf.as_bytes()))
}

fn forged() -> Response {
    (StatusCode::FORBIDDEN, "missing or wrong CSRF token: reload the page and try again")
        .into_response()
}

/// Approve the Revision and digest the page showed.
pub async fn approve(
    State(ui): State<Ui>,
    Path((ns, name)): Path<(String, String)>,
    Form(form): Form<ApproveForm>,
) -> Response {
    if !csrf_ok(&ui, &form.csrf) {
        return forged();
    }
    let cluster = ui.in_namespace(&ns);
    let notice = match crate::sync::approve(&cluster, &name, &form.revision, &form.digest).await {
        Ok(()) => Notice::Done(format!(
            "Approved Revision {} (plan {}); the webhook records you as the approver",
            form.revision, form.digest
        )),
        Err(error) => Notice::Refused(anyhow_words(&error)),
    };
    ui.app_page(&ns, &name, Some(notice)).await
}

/// Request the rollback the confirmation page showed.
pub async fn rollback(
    State(ui): State<Ui>,
    Path((ns, name)): Path<(String, String)>,
    Form(form): Form<RollbackForm>,
) -> Response {
    if !csrf_ok(&ui, &form.csrf) {
        return forged();
    }
    let cluster = ui.in_namespace(&ns);
    let all = ui.revisions(&ns, &name);
    let deployed = ui
        .application(&ns, &name)
        .and_then(|a| a.status.as_ref().and_then(|s| s.deployed_revision.clone()));
    let notice =
        match crate::rollback::choose_target(&name, &all, deployed.as_deref(), Some(&form.to)) {
            Err(refused) => Notice::Refused(refused.0),
            Ok(target) => match crate::rollback::request(&cluster, &name, target).await {
                Ok(()) => {
                    Notice::Done(format!("Requested a rollback of {name} to Revision {}", form.to))
                }
                Err(error) => Notice::Refused(anyhow_words(&error)),
            },
        };
    ui.app_page(&ns, &name, Some(notice)).await
}

/// Set `spec.suspend`.
pub async fn suspend(
    State(ui): State<Ui>,
    Path((ns, name)): Path<(String, String)>,
    Form(form): Form<SuspendForm>,
) -> Response {
    if !csrf_ok(&ui, &form.csrf) {
        return forged();
    }
    let suspend = form.suspend == "true";
    let patch = serde_json::json!({"spec": {"suspend": suspend}});
    let api = ui.in_namespace(&ns).applications();
    let result = api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await;
    let notice = match result {
        Ok(_) if suspend => {
            Notice::Done(format!("Suspended {name}: it is not synced until resumed"))
        }
        Ok(_) => Notice::Done(format!("Resumed {name}")),
        Err(error) => Notice::Refused(api_words(&error)),
    };
    ui.app_page(&ns, &name, Some(notice)).await
}

/// Ask for an immediate fetch of the Application's Repository.
pub async fn reconcile(
    State(ui): State<Ui>,
    Path((ns, name)): Path<(String, String)>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if !csrf_ok(&ui, &form.csrf) {
        return forged();
    }
    let notice = match ui.application(&ns, &name) {
        None => Notice::Refused(format!("no Application {ns}/{name} is visible to you")),
        Some(app) => match crate::sync::request_fetch(&ui.in_namespace(&ns), &app).await {
            Ok(at) => Notice::Done(format!(
                "Requested an immediate fetch of Repository {} at {at}",
                app.spec.source.repository_ref.name
            )),
            Err(error) => Notice::Refused(anyhow_words(&error)),
        },
    };
    ui.app_page(&ns, &name, Some(notice)).await
}
