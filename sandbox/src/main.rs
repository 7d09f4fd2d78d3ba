//! `ksync-sandbox serve --listen 127.0.0.1:PORT --kubeconfig FILE [--simulate-workloads]
//! [--event-history N]`.

use clap::{Parser, Subcommand};
use ksync_sandbox::{Sandbox, SandboxOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(name = "ksync-sandbox", about = "An embedded single-process Kubernetes API server")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Serve the Kubernetes API until SIGTERM or SIGINT.
    Serve {
        /// Address to listen on; port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Where to write the admin kubeconfig.
        #[arg(long)]
        kubeconfig: PathBuf,
        /// Run the kwok-like workload simulator.
        #[arg(long)]
        simulate_workloads: bool,
        /// How many change events the store keeps: watches and paged or exact lists at older
        /// versions get 410 Gone.
        #[arg(long, default_value_t = SandboxOptions::default().watch_history)]
        event_history: usize,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KSYNC_SANDBOX_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Serve { listen, kubeconfig, simulate_workloads, event_history } => {
            let opts = SandboxOptions {
                listen,
                kubeconfig: Some(kubeconfig),
                simulate_workloads,
                watch_history: event_history,
                ..Default::default()
            };
            let sb = Sandbox::start(opts).await?;
            {
                let mut out = std::io::stdout().lock();
                writeln!(out, "ready {}", sb.url())?;
                out.flush()?;
            }
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            sb.shutdown();
            Ok(())
        }
    }
}
