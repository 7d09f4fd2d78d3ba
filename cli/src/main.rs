//! `ksync`: the Kuvryn Sync command-line interface.
//!
//! Cluster commands (`status`, `plan`, `sync`, `rollback`, `history`, `diagnose`, `wait`, and the
//! web view `ui`) talk to any cluster through the usual kubeconfig rules; `render --local` needs
//! no cluster and renders with the same library functions the controller uses. Each command lives in its own module; the
//! decisions they make (which Revision, which exit code, what to print) are pure functions with
//! table tests, and the modules only fetch objects and write patches around them.
//!
//! Exit codes: 0 when the command did what it was asked, 1 on a failure or a condition not met
//! (a wait that timed out, a render refused), 2 on a usage error or a refusal (such as `sync`
//! without `--yes` and without a terminal to ask on).

mod cluster;
mod demo;
mod diagnose;
mod history;
mod output;
mod plan;
mod render;
mod revisions;
mod rollback;
mod status;
mod sync;
mod ui;
mod wait;

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::cluster::KubeArgs;

/// Exit codes, documented in `--help` and docs/cli.md.
const AFTER_HELP: &str = "Exit codes:\n  0  done\n  1  failure, or the condition waited for \
                          was not met\n  2  usage error, or the request was refused (for example \
                          `sync` without --yes and without a terminal)";

/// Kuvryn Sync: GitOps for Kubernetes that shows what will change before it changes.
#[derive(Debug, Parser)]
#[command(name = "ksync", version, about, long_about = None, after_help = AFTER_HELP)]
struct Cli {
    #[command(flatten)]
    kube: KubeArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List Applications, or show one in detail: its latest Revisions, conditions and diagnosis.
    Status(status::StatusArgs),
    /// Show a Revision's plan: what it creates, updates and deletes (default: the newest Revision).
    Plan(plan::PlanArgs),
    /// Approve the plan awaiting approval (manual Applications), or request an immediate refresh
    /// of the Repository (automatic Applications).
    Sync(sync::SyncArgs),
    /// Roll an Application back to an earlier healthy Revision (default: the previous healthy one).
    Rollback(rollback::RollbackArgs),
    /// List an Application's Revisions, newest first, with their approval records.
    History(history::HistoryArgs),
    /// Print an Application's diagnosis: each root cause and the chain of resources leading to it.
    Diagnose(diagnose::DiagnoseArgs),
    /// Wait until an Application is healthy or synced; exit 1 on timeout or on a failure.
    Wait(wait::WaitArgs),
    /// Serve the web view on loopback: Applications, resource trees, plans, history and Events,
    /// live, with approve, rollback, suspend and reconcile, all as you (your kubeconfig, --as).
    Ui(ui::UiArgs),
    /// Render and validate a folder offline, as the controller would; no cluster needed.
    Render(render::RenderArgs),
    /// Run the whole loop on this machine: an embedded Kubernetes API with simulated workloads,
    /// the webhook, the controller and a Git server with sample applications; Ctrl-C stops it all.
    /// `scripts/demo` builds every binary it needs first.
    Demo,
    /// Print every Kuvryn Sync CustomResourceDefinition as YAML, generated from the Rust types.
    Crds,
    /// Generate a CA and a serving certificate signed by it, as PEM files
    /// (ca.crt, ca.key, tls.crt, tls.key).
    Certs(CertsArgs),
    /// Print generated documentation.
    #[command(subcommand)]
    Docs(DocsCommand),
}

#[derive(Debug, Subcommand)]
enum DocsCommand {
    /// Print the Markdown API reference (`docs/api.md`): every kind and every field with its
    /// type, default, validation and description, generated from the CRD schemas.
    Api,
}

#[derive(Debug, clap::Args)]
struct CertsArgs {
    /// Directory to write the PEM files into (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// DNS name for the serving certificate; repeat for several.
    #[arg(long = "dns", value_name = "NAME")]
    dns_names: Vec<String>,
    /// IP address for the serving certificate; repeat for several.
    #[arg(long = "ip", value_name = "ADDRESS")]
    ip_addresses: Vec<IpAddr>,
    /// Days the certificates are valid.
    #[arg(long, default_value_t = 365, value_name = "DAYS")]
    validity_days: u32,
}

/// How a command ended, when it did not fail with an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done: exit 0.
    Done,
    /// The condition was not met (the command already said why): exit 1.
    NotMet,
}

/// An error that is a refusal or a usage error (exit 2) rather than a failure (exit 1).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// The process exit code for an error: 2 for a [`Refused`], 1 for anything else.
fn exit_code_of(error: &anyhow::Error) -> u8 {
    if error.downcast_ref::<Refused>().is_some() { 2 } else { 1 }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Ok(Outcome::NotMet) => ExitCode::from(1),
        Err(err) => {
            let message = kuvryn_sync_core::redact::redact_shapes(&format!("{err:#}"));
            eprintln!("error: {message}");
            ExitCode::from(exit_code_of(&err))
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<Outcome> {
    match cli.command {
        Command::Crds => {
            let yaml = kuvryn_sync_api::crds_yaml()?;
            std::io::stdout().lock().write_all(yaml.as_bytes())?;
            Ok(Outcome::Done)
        }
        Command::Docs(DocsCommand::Api) => {
            let markdown = kuvryn_sync_api::reference_markdown();
            std::io::stdout().lock().write_all(markdown.as_bytes())?;
            Ok(Outcome::Done)
        }
        Command::Certs(args) => {
            let request = kuvryn_sync_certs::CertRequest {
                dns_names: args.dns_names,
                ip_addresses: args.ip_addresses,
                validity_days: args.validity_days,
            };
            let certs = kuvryn_sync_certs::generate(&request)?;
            for path in certs.write_to(&args.out)? {
                println!("wrote {}", path.display());
            }
            Ok(Outcome::Done)
        }
        Command::Render(args) => render::run(&args, cli.kube.namespace.as_deref()),
        Command::Demo => {
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            runtime.block_on(demo::run())?;
            Ok(Outcome::Done)
        }
        Command::Status(args) => on_cluster(&cli.kube, async |c| status::run(c, &args).await),
        Command::Plan(args) => on_cluster(&cli.kube, async |c| plan::run(c, &args).await),
        Command::Sync(args) => on_cluster(&cli.kube, async |c| sync::run(c, &args).await),
        Command::Rollback(args) => on_cluster(&cli.kube, async |c| rollback::run(c, &args).await),
        Command::History(args) => on_cluster(&cli.kube, async |c| history::run(c, &args).await),
        Command::Diagnose(args) => on_cluster(&cli.kube, async |c| diagnose::run(c, &args).await),
        Command::Wait(args) => on_cluster(&cli.kube, async |c| wait::run(c, &args).await),
        Command::Ui(args) => on_cluster(&cli.kube, async |c| ui::run(c, &args).await),
    }
}

/// Connect to the cluster `kube` names and run `command` on a small runtime.
fn on_cluster(
    kube: &KubeArgs,
    command: impl AsyncFnOnce(&cluster::Cluster) -> anyhow::Result<Outcome>,
) -> anyhow::Result<Outcome> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let cluster = cluster::connect(kube).await?;
        command(&cluster).await
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_exits_2_and_any_other_error_exits_1() {
        assert_eq!(exit_code_of(&anyhow::Error::new(Refused("no".into()))), 2);
        assert_eq!(exit_code_of(&anyhow::anyhow!("boom")), 1);
        let wrapped = anyhow::Error::new(Refused("no".into())).context("while syncing");
        assert_eq!(exit_code_of(&wrapped), 2);
    }

    #[test]
    fn the_command_line_parses() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
