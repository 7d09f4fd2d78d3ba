//! What the Repository and Application reconcilers share about a Repository's Git source: the
//! checked URL and the credentials of its labelled Secret, as a [`FetchRequest`]. A problem with
//! either is a [`StepFailure`] (a failure reason and a message for status); API-server trouble
//! is a `kube::Error` and retries.

use crate::step::StepResult;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kuvryn_sync_api::{FailureReason, Repository};
use kuvryn_sync_core::credentials::{self, GitAuth, GitCredentials};
use kuvryn_sync_core::failure::StepFailure;
use kuvryn_sync_core::redact::Redactor;
use kuvryn_sync_core::url::GitUrl;
use kuvryn_sync_source::git::{FetchRequest, REMOTE_HEAD};

/// The request that fetches `repo`'s `revision` (its `spec.git.revision` when `None`), with its
/// credentials. `redactor` learns every value of the credential Secret before anything can echo
/// it, usable or not.
pub async fn fetch_request<E: From<kube::Error>>(
    client: &kube::Client,
    repo: &Repository,
    namespace: &str,
    revision: Option<&str>,
    timeout: std::time::Duration,
    redactor: &mut Redactor,
) -> StepResult<FetchRequest, E> {
    let (url, git_url) = check_spec(repo)?;
    let revision = revision
        .map(str::to_owned)
        .or_else(|| repo.spec.git.as_ref().and_then(|g| g.revision.clone()))
        .unwrap_or_else(|| REMOTE_HEAD.into());
    let mut request = FetchRequest::new(url, revision);
    request.timeout = timeout;
    if let Some(creds) = read_credentials(client, repo, namespace, &git_url, redactor).await? {
        request.cache_identity = creds.identity.clone();
        request.ca_certs_pem = match &creds.auth {
            GitAuth::Basic(basic) => basic.ca_bundle.clone(),
            GitAuth::Ssh(_) => None,
        };
        request.credentials = Some(creds.auth);
    }
    Ok(request)
}

/// The Git URL, as written and parsed.
fn check_spec(repo: &Repository) -> Result<(String, GitUrl), StepFailure> {
    let Some(git) = repo.spec.git.as_ref() else {
        return Err(StepFailure::new(
            FailureReason::ValidationFailure,
            "spec.git is required for type git",
        ));
    };
    match GitUrl::parse(&git.url) {
        Ok(parsed) => Ok((git.url.clone(), parsed)),
        Err(err) => Err(StepFailure::new(FailureReason::ValidationFailure, err.to_string())),
    }
}

/// The credentials of `spec.git.auth`, if any.
async fn read_credentials<E: From<kube::Error>>(
    client: &kube::Client,
    repo: &Repository,
    namespace: &str,
    url: &GitUrl,
    redactor: &mut Redactor,
) -> StepResult<Option<GitCredentials>, E> {
    let Some(auth) = repo.spec.git.as_ref().and_then(|git| git.auth.as_ref()) else {
        return Ok(None);
    };
    let secret_name = &auth.secret_ref.name;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let Some(secret) = secrets.get_opt(secret_name).await? else {
        let message =
            format!("spec.git.auth.secretRef: Secret {namespace}/{secret_name} not found");
        return Err(StepFailure::new(FailureReason::AuthenticationFailure, message).into());
    };
    redactor.add_secret_data(credentials::secret_values(&secret).values().map(Vec::as_slice));
    let credentials = GitCredentials::from_secret(&secret, url)
        .map_err(|err| StepFailure::new(err.reason(), err.to_string()))?;
    Ok(Some(credentials))
}
