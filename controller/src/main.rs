//! `kuvryn-sync-controller`: the controller binary. It parses the flags, sets up logging and the
//! signal handlers, and runs the controller library ([`kuvryn_sync_controller::run`]) until
//! SIGTERM or SIGINT.

use anyhow::Context;
use clap::Parser;
use kuvryn_sync_controller::Args;
use kuvryn_sync_runtime::{logging, signals};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    logging::init(args.log_format, args.log_level.as_deref());
    let stop = signals::shutdown_signal().context("cannot install signal handlers")?;
    let config = async {
        kube::Config::infer()
            .await
            .context("cannot build a Kubernetes client from the in-cluster config or KUBECONFIG")
    };
    kuvryn_sync_controller::run(args, stop, config).await
}
