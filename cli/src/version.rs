//! `ksync version`: this client's version, and the controller's and webhook's as the cluster
//! shows them (see [`crate::install`] for where each is read).

use anyhow::Result;
use serde::Serialize;

use crate::Outcome;
use crate::cluster::Cluster;
use crate::install::{self, Component, InstallArgs, Leader};
use crate::output::{self, OutputArgs};

/// `ksync version` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct VersionArgs {
    /// Print the client version only; do not contact a cluster.
    #[arg(long)]
    pub client: bool,
    #[command(flatten)]
    pub install: InstallArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The client's version.
pub const CLIENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Everything `version` reports.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Versions {
    pub client: String,
    pub leader: Option<Leader>,
    pub components: Vec<Component>,
}

/// The human view.
pub fn describe(v: &Versions, namespace: &str) -> String {
    let mut out = format!("Client:     ksync {}\n", v.client);
    let controller = match &v.leader {
        Some(l) => format!(
            "{} (leader {}{})",
            l.version.as_deref().unwrap_or("unknown: the leader has not recorded its version"),
            l.holder.as_deref().unwrap_or("-"),
            if l.current { "" } else { ", Lease not renewed: no leader running" }
        ),
        None => format!("no leader Lease in namespace {namespace}"),
    };
    out.push_str(&format!("Controller: {controller}\n"));
    let deployed = |name: &str| v.components.iter().find(|c| c.component == name);
    for name in ["controller", "webhook"] {
        let label = format!("{}{}:", &name[..1].to_uppercase(), &name[1..]);
        let line = match deployed(name) {
            Some(c) => format!(
                "{} (Deployment {}, image {}, {}/{} ready)",
                c.version.as_deref().unwrap_or("unknown"),
                c.name,
                c.image.as_deref().unwrap_or("-"),
                c.ready_replicas,
                c.replicas
            ),
            None => format!(
                "no Deployment labelled app.kubernetes.io/component={name} in namespace {namespace}"
            ),
        };
        let label = if name == "controller" { "  deployed:".to_owned() } else { label };
        out.push_str(&format!("{label:<11} {line}\n"));
    }
    out
}

/// Run `ksync version --client` (no cluster).
pub fn client_only(args: &VersionArgs) -> Result<Outcome> {
    let v = Versions { client: CLIENT_VERSION.into(), leader: None, components: vec![] };
    match args.output.structured() {
        Some(format) => output::print(&output::structured(format, &v)?)?,
        None => output::print(&format!("Client:     ksync {CLIENT_VERSION}\n"))?,
    }
    Ok(Outcome::Done)
}

/// Run `ksync version`.
pub async fn run(cluster: &Cluster, args: &VersionArgs) -> Result<Outcome> {
    let namespace = &args.install.install_namespace;
    // What cannot be read (no access to the install namespace, say) is said, not fatal: the
    // client's version and whatever else could be read are still printed.
    let leader = install::leader(&cluster.client, namespace).await.unwrap_or_else(|err| {
        eprintln!("cannot read the controller's Lease in {namespace}: {err}");
        None
    });
    let components = install::components(&cluster.client, namespace).await.unwrap_or_else(|err| {
        eprintln!("cannot list the Deployments in {namespace}: {err}");
        Vec::new()
    });
    let v = Versions { client: CLIENT_VERSION.into(), leader, components };
    match args.output.format {
        Some(format) => output::print(&output::structured(format, &v)?)?,
        None => output::print(&describe(&v, namespace))?,
    }
    Ok(Outcome::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_names_each_version_and_where_it_came_from() {
        let v = Versions {
            client: "0.1.0".into(),
            leader: Some(Leader {
                holder: Some("pod-a".into()),
                version: Some("0.1.0".into()),
                renewed_seconds_ago: Some(2),
                current: true,
            }),
            components: vec![Component {
                component: "webhook".into(),
                name: "ks-webhook".into(),
                version: Some("0.1.0".into()),
                image: Some("img:0.1.0".into()),
                ready_replicas: 2,
                replicas: 2,
            }],
        };
        let text = describe(&v, "kuvryn-system");
        assert!(text.contains("Client:     ksync 0.1.0\n"), "{text}");
        assert!(text.contains("Controller: 0.1.0 (leader pod-a)\n"), "{text}");
        assert!(
            text.contains("Webhook:    0.1.0 (Deployment ks-webhook, image img:0.1.0, 2/2 ready)"),
            "{text}"
        );
        assert!(
            text.contains(
                "  deployed: no Deployment labelled app.kubernetes.io/component=controller"
            ),
            "{text}"
        );
    }
}
