//! Test harness: a sandbox per test on a free port, the real `/usr/bin/kubectl` pointed at its
//! kubeconfig, and condition waits with deadlines (never fixed sleeps).
#![allow(dead_code)]

use ksync_sandbox::{Sandbox, SandboxOptions};
use std::future::Future;
use std::process::Output;
use std::time::Duration;

pub const KUBECTL: &str = "/usr/bin/kubectl";

pub async fn sandbox() -> Sandbox {
    Sandbox::start(SandboxOptions::default()).await.expect("sandbox starts")
}

pub async fn sandbox_with(opts: SandboxOptions) -> Sandbox {
    Sandbox::start(opts).await.expect("sandbox starts")
}

/// Run kubectl against the sandbox, feeding `stdin` when given.
pub async fn kubectl_in(sb: &Sandbox, args: &[&str], stdin: Option<&str>) -> Output {
    use tokio::io::AsyncWriteExt;
    let mut cmd = tokio::process::Command::new(KUBECTL);
    cmd.arg("--kubeconfig").arg(sb.kubeconfig_path()).args(args);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd.env("KUBECACHEDIR", sb.kubeconfig_path().with_file_name("kubecache"));
    let mut child = cmd.spawn().expect("kubectl runs");
    let mut si = child.stdin.take().expect("stdin");
    if let Some(s) = stdin {
        si.write_all(s.as_bytes()).await.expect("write stdin");
    }
    drop(si);
    tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("kubectl finished in time")
        .expect("kubectl output")
}

pub async fn kubectl(sb: &Sandbox, args: &[&str]) -> Output {
    kubectl_in(sb, args, None).await
}

/// kubectl that must succeed; returns stdout.
pub async fn kubectl_ok(sb: &Sandbox, args: &[&str]) -> String {
    let out = kubectl(sb, args).await;
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub async fn kubectl_stdin_ok(sb: &Sandbox, args: &[&str], stdin: &str) -> String {
    let out = kubectl_in(sb, args, Some(stdin)).await;
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Poll `cond` until it returns Some or the deadline passes.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut cond: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = cond().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
