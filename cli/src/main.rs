//! `ksync`: the Kuvryn Sync command-line interface.

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Kuvryn Sync: GitOps for Kubernetes that shows what will change before it changes.
#[derive(Debug, Parser)]
#[command(name = "ksync", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Crds => {
            let yaml = kuvryn_sync_api::crds_yaml()?;
            std::io::stdout().lock().write_all(yaml.as_bytes())?;
        }
        Command::Docs(DocsCommand::Api) => {
            let markdown = kuvryn_sync_api::reference_markdown();
            std::io::stdout().lock().write_all(markdown.as_bytes())?;
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
        }
    }
    Ok(())
}
