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

mod check;
mod cluster;
mod demo;
mod diagnose;
mod diff;
mod events;
mod get;
mod history;
mod install;
mod listing;
mod logs;
mod output;
mod plan;
mod render;
mod revisions;
mod rollback;
mod status;
mod suspend;
mod sync;
mod tree;
mod ui;
mod version;
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
    /// Diagnostic log level on standard error (error, warn, info, debug, trace, or tracing
    /// directives such as `kube=debug`); default warn. RUST_LOG, when set, wins.
    #[arg(long, global = true, value_name = "LEVEL", value_parser = log_level)]
    log_level: Option<String>,
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
    /// Suspend an Application (spec.suspend): nothing is applied, pruned or repaired until resumed.
    Suspend(suspend::SuspendArgs),
    /// Resume a suspended Application: the controller rolls out its desired revision again.
    Resume(suspend::SuspendArgs),
    /// List Repositories or ImagePolicies.
    Get(get::GetArgs),
    /// Draw an Application's managed objects as a tree, with health, sync state and diagnosis.
    Tree(tree::TreeArgs),
    /// List the Events of an Application and its Revisions (or all of the controller's); -w follows.
    Events(events::EventsArgs),
    /// Print the logs of the Pods of an Application's workloads.
    Logs(logs::LogsArgs),
    /// Plan a working copy against the cluster as the Application's service account (server-side
    /// dry run) and print what would change; --exit-code exits 1 when something would.
    Diff(diff::DiffArgs),
    /// Print this client's version and the controller's and webhook's in the cluster.
    Version(version::VersionArgs),
    /// Check the installation: CRDs, controller, webhook and its certificate, and what you may do.
    Check(check::CheckArgs),
    /// Print a shell completion script: `source <(ksync completion bash)`.
    Completion(CompletionArgs),
    /// Print the manual page (roff), or write one per command into a folder.
    Man(ManArgs),
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
struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
struct ManArgs {
    /// Write `ksync.1` and one `ksync-COMMAND.1` per command into this folder instead.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

impl Command {
    /// Whether the command honours `-A`; the others refuse it rather than ignore it.
    fn honours_all_namespaces(&self) -> bool {
        matches!(self, Command::Status(_) | Command::Get(_) | Command::Events(_) | Command::Ui(_))
    }
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

/// A clap value parser for `--log-level`.
fn log_level(text: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(text)
        .map(|_| text.to_owned())
        .map_err(|err| format!("{err}: use error, warn, info, debug or trace"))
}

/// Diagnostics on standard error: `RUST_LOG` when set, else `--log-level`, else warn.
fn init_logging(flag: Option<&str>) {
    let rust_log = std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty());
    let wanted = rust_log.as_deref().or(flag).unwrap_or("warn");
    let filter = tracing_subscriber::EnvFilter::try_new(wanted)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_level.as_deref());
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
    if cli.kube.all_namespaces && !cli.command.honours_all_namespaces() {
        return Err(Refused(
            "-A/--all-namespaces applies to `status`, `get` and `events` only; this command acts \
             in one namespace: name it with -n"
                .to_owned(),
        )
        .into());
    }
    match cli.command {
        Command::Completion(args) => {
            use clap::CommandFactory;
            let mut command = Cli::command();
            clap_complete::generate(args.shell, &mut command, "ksync", &mut std::io::stdout());
            Ok(Outcome::Done)
        }
        Command::Man(args) => man(args.out.as_deref()),
        Command::Version(args) if args.client => version::client_only(&args),
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
        Command::Suspend(args) => {
            on_cluster(&cli.kube, async |c| suspend::run(c, &args, true).await)
        }
        Command::Resume(args) => {
            on_cluster(&cli.kube, async |c| suspend::run(c, &args, false).await)
        }
        Command::Get(args) => on_cluster(&cli.kube, async |c| get::run(c, &args).await),
        Command::Tree(args) => on_cluster(&cli.kube, async |c| tree::run(c, &args).await),
        Command::Events(args) => on_cluster(&cli.kube, async |c| events::run(c, &args).await),
        Command::Logs(args) => on_cluster(&cli.kube, async |c| logs::run(c, &args).await),
        Command::Diff(args) => on_cluster(&cli.kube, async |c| diff::run(c, &args).await),
        Command::Version(args) => on_cluster(&cli.kube, async |c| version::run(c, &args).await),
        Command::Check(args) => on_cluster(&cli.kube, async |c| check::run(c, &args).await),
    }
}

/// The manual page on standard output, or every command's page written into `out`.
fn man(out: Option<&std::path::Path>) -> anyhow::Result<Outcome> {
    use clap::CommandFactory;
    let command = Cli::command();
    match out {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            clap_mangen::generate_to(command, dir)?;
            println!("wrote the manual pages into {}", dir.display());
        }
        None => clap_mangen::Man::new(command).render(&mut std::io::stdout())?,
    }
    Ok(Outcome::Done)
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
    fn all_namespaces_is_refused_by_commands_that_act_in_one_namespace() {
        let cli = Cli::try_parse_from(["ksync", "-A", "tree", "web"]).expect("parses");
        let err = run(cli).expect_err("refused");
        assert_eq!(exit_code_of(&err), 2);
        assert!(err.to_string().contains("-n"), "{err}");
    }

    #[test]
    fn the_man_page_and_completions_name_every_command() {
        use clap::CommandFactory;
        let mut page = Vec::new();
        clap_mangen::Man::new(Cli::command()).render(&mut page).expect("man");
        let page = String::from_utf8(page).expect("utf-8");
        let mut script = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut Cli::command(),
            "ksync",
            &mut script,
        );
        let script = String::from_utf8(script).expect("utf-8");
        for sub in Cli::command().get_subcommands() {
            let name = sub.get_name();
            assert!(page.contains(name), "the man page lacks {name}");
            assert!(script.contains(name), "the completion lacks {name}");
        }
    }

    #[test]
    fn docs_cli_md_covers_every_command() {
        use clap::CommandFactory;
        let doc = include_str!("../../docs/cli.md");
        for sub in Cli::command().get_subcommands() {
            let name = sub.get_name();
            if name == "help" {
                continue;
            }
            assert!(
                doc.contains(&format!("`ksync {name}")),
                "docs/cli.md does not cover `ksync {name}`"
            );
        }
    }

    #[test]
    fn the_command_line_parses() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
