//! Throughput over TLS on loopback with 16 concurrent kube-rs clients: server-side applies/s and
//! gets/s. Run with `cargo bench -p ksync-sandbox --bench throughput`.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::time::Instant;

const CLIENTS: usize = 16;
const PER_CLIENT: usize = 400;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let sb = ksync_sandbox::Sandbox::start(Default::default()).await?;
    let mut apis = vec![];
    for _ in 0..CLIENTS {
        // One client (one connection pool) per worker, as separate controllers would have.
        apis.push(Api::<ConfigMap>::namespaced(sb.client().await?, "default"));
    }
    let start = Instant::now();
    let mut tasks = vec![];
    for (w, api) in apis.iter().cloned().enumerate() {
        tasks.push(tokio::spawn(async move {
            let pp = PatchParams::apply(&format!("bench-{w}")).force();
            for i in 0..PER_CLIENT {
                // Half create new objects, half re-apply changed data to existing ones.
                let name = format!("w{w}-o{}", i % (PER_CLIENT / 2));
                let cfg = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"worker": w.to_string()}}, "data": {"i": i.to_string(), "payload": "x".repeat(256)}});
                api.patch(&name, &pp, &Patch::Apply(cfg)).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let secs = start.elapsed().as_secs_f64();
    let applies = (CLIENTS * PER_CLIENT) as f64;
    println!(
        "server-side applies: {} in {:.2}s = {:.0} applies/s ({CLIENTS} clients)",
        applies,
        secs,
        applies / secs
    );

    let start = Instant::now();
    let mut tasks = vec![];
    for (w, api) in apis.iter().cloned().enumerate() {
        tasks.push(tokio::spawn(async move {
            for i in 0..PER_CLIENT {
                api.get(&format!("w{w}-o{}", i % (PER_CLIENT / 2))).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let secs = start.elapsed().as_secs_f64();
    let gets = (CLIENTS * PER_CLIENT) as f64;
    println!("gets: {} in {:.2}s = {:.0} gets/s ({CLIENTS} clients)", gets, secs, gets / secs);
    Ok(())
}
