//! Helpers for end-to-end tests that work against any `kube::Client`: the sandbox or a real
//! cluster. Waits poll with a deadline; none sleeps a fixed time to synchronise.

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use std::future::Future;
use std::time::{Duration, Instant};

/// The field manager of the harness's server-side applies.
const FIELD_MANAGER: &str = "ksync-sandbox-harness";

/// How long a CustomResourceDefinition may take to become `Established`.
const CRD_DEADLINE: Duration = Duration::from_secs(30);

/// Create a fresh namespace `<prefix>-<random suffix>` and return its name.
pub async fn create_namespace(client: &kube::Client, prefix: &str) -> anyhow::Result<String> {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let name = format!("{prefix}-{}", &suffix[..10]);
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
    }))?;
    api.create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("create namespace {name}"))?;
    Ok(name)
}

/// Server-side apply each CustomResourceDefinition and wait (with a deadline) until it is
/// `Established`.
pub async fn install_crds(
    client: &kube::Client,
    crds: impl IntoIterator<Item = CustomResourceDefinition>,
) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for crd in crds {
        let name = crd.metadata.name.clone().context("CRD without a name")?;
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .with_context(|| format!("apply CRD {name}"))?;
        tokio::time::timeout(
            CRD_DEADLINE,
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .with_context(|| format!("CRD {name} not Established within {CRD_DEADLINE:?}"))??;
    }
    Ok(())
}

/// Poll `check` until it returns `Some` or `deadline` passes. `check` also returns what it
/// observed (or fails); the error names what was awaited and the last observation.
pub async fn wait_for<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<(Option<T>, String)>>,
{
    let start = Instant::now();
    loop {
        let last = match check().await {
            Ok((Some(value), _)) => return Ok(value),
            Ok((None, observed)) => observed,
            Err(err) => format!("error: {err:#}"),
        };
        if start.elapsed() > deadline {
            bail!("timed out after {deadline:?} waiting for {what}; last observed: {last}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
