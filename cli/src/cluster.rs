//! Connecting to a cluster the way kubectl does (`--kubeconfig`, `KUBECONFIG`, `~/.kube/config`,
//! `--context`, in-cluster), choosing the namespace, and reading Applications and Revisions with
//! errors that say what to do next.

use std::path::PathBuf;

use anyhow::{Context, Result};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kuvryn_sync_api::{Application, Revision, keys};
use serde_json::Value;

use crate::revisions;

/// Where the cluster is and which namespace to use; accepted by every command.
#[derive(Debug, Clone, clap::Args)]
pub struct KubeArgs {
    /// Kubeconfig file to use (default: $KUBECONFIG, else ~/.kube/config, else in-cluster).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Namespace (default: the context's namespace, else `default`). For `render --local`, the
    /// destination namespace of the rendered objects.
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// List Applications of every namespace (`status`), or watch every namespace (`ui`).
    #[arg(short = 'A', long, global = true)]
    pub all_namespaces: bool,
    /// Act as this user (impersonation, as kubectl's --as): approvals and rollbacks are
    /// recorded under that name.
    #[arg(long = "as", global = true, value_name = "USER")]
    pub as_user: Option<String>,
    /// Act with this group too (repeatable, with --as).
    #[arg(long = "as-group", global = true, value_name = "GROUP")]
    pub as_groups: Vec<String>,
}

/// A connected client and the namespace the command works in.
#[derive(Clone)]
pub struct Cluster {
    /// The API client.
    pub client: kube::Client,
    /// The namespace chosen by `-n`, else the context's, else `default`.
    pub namespace: String,
    /// Whether `-A` was given.
    pub all_namespaces: bool,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

/// Connect as `args` say.
pub async fn connect(args: &KubeArgs) -> Result<Cluster> {
    let options = KubeConfigOptions { context: args.context.clone(), ..Default::default() };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).with_context(|| {
                format!("cannot read kubeconfig {}; check the --kubeconfig path", path.display())
            })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.with_context(|| {
                format!("cannot use kubeconfig {}; check --context", path.display())
            })?
        }
        None => match kube::Config::from_kubeconfig(&options).await {
            Ok(config) => config,
            Err(kubeconfig_error) if args.context.is_none() => kube::Config::incluster()
                .map_err(|_| kubeconfig_error)
                .context("no usable kubeconfig; pass --kubeconfig FILE or set KUBECONFIG")?,
            Err(error) => {
                return Err(error).context("cannot use the kubeconfig context; check --context");
            }
        },
    };
    let mut config = config;
    if let Some(user) = &args.as_user {
        config.auth_info.impersonate = Some(user.clone());
        config.auth_info.impersonate_groups =
            (!args.as_groups.is_empty()).then(|| args.as_groups.clone());
    } else if !args.as_groups.is_empty() {
        anyhow::bail!("--as-group needs --as USER: impersonating groups needs a user too");
    }
    let namespace = args.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).context("cannot build a Kubernetes client")?;
    Ok(Cluster { client, namespace, all_namespaces: args.all_namespaces })
}

impl Cluster {
    /// Applications in the chosen namespace.
    pub fn applications(&self) -> Api<Application> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Application `name`, or an error saying how to find the right name.
    pub async fn application(&self, name: &str) -> Result<Application> {
        match self.applications().get_opt(name).await {
            Ok(Some(app)) => Ok(app),
            Ok(None) => Err(anyhow::anyhow!(
                "no Application {name} in namespace {}; list them with `ksync status -A`",
                self.namespace
            )),
            Err(error) => Err(error).with_context(|| {
                format!("cannot read Application {name} in namespace {}", self.namespace)
            }),
        }
    }

    /// The Revisions of Application `name`, newest first.
    pub async fn revisions(&self, name: &str) -> Result<Vec<Revision>> {
        let api: Api<Revision> = Api::namespaced(self.client.clone(), &self.namespace);
        let selector = format!("{}={name}", keys::APPLICATION);
        let listed = api
            .list(&ListParams::default().labels(&selector))
            .await
            .with_context(|| format!("cannot list the Revisions of {name}"))?;
        let own = listed.items.into_iter().filter(|r| r.spec.application_ref.name == name);
        Ok(revisions::newest_first(own.collect()))
    }

    /// Merge-patch the annotations of object `name` through `api`, in one request.
    pub async fn annotate<K>(&self, api: &Api<K>, name: &str, annotations: Value) -> Result<K>
    where
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let patch = serde_json::json!({"metadata": {"annotations": annotations}});
        Ok(api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?)
    }
}
