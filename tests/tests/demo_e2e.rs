//! `ksync demo` as a newcomer runs it: the real binary as a process, until its "ready" line; the
//! web view at the address it prints lists the demo's Applications; then, through the kubeconfig
//! it prints, kubectl sees the automatic Applications Ready, `ksync sync
//! --yes` approves the manual one (the webhook records the approver) and it deploys, and `ksync
//! diagnose` names the missing Secret of the broken one. SIGINT stops every process the demo
//! started and removes its temporary directory.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kuvryn_sync_tests::cluster::workspace_binary;
use kuvryn_sync_tests::process_tree;
use serde_json::Value;

fn kubectl(kubeconfig: &str, args: &[&str]) -> Result<(bool, String)> {
    let output = Command::new("kubectl").arg("--kubeconfig").arg(kubeconfig).args(args).output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok((output.status.success(), text))
}

fn ksync(kubeconfig: &str, args: &[&str]) -> Result<(i32, String)> {
    let output = Command::new(workspace_binary("ksync")?)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok((output.status.code().unwrap_or(-1), text))
}

fn wait_until(
    what: &str,
    deadline: Duration,
    mut check: impl FnMut() -> Result<Option<String>>,
) -> Result<()> {
    let start = Instant::now();
    loop {
        let last = match check() {
            Ok(None) => return Ok(()),
            Ok(Some(observed)) => observed,
            Err(err) => format!("error: {err:#}"),
        };
        if start.elapsed() > deadline {
            bail!("timed out after {deadline:?} waiting for {what}; last: {last}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `GET url` (an `http://HOST:PORT/` address) over a plain connection: status line, headers and
/// body as text.
fn http_get(url: &str) -> Result<String> {
    use std::io::{Read, Write};
    let host = url.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(host)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

fn application(kubeconfig: &str, name: &str) -> Result<Value> {
    let (ok, out) = kubectl(kubeconfig, &["get", "application", name, "-n", "demo", "-o", "json"])?;
    if !ok {
        bail!("kubectl get application {name}: {out}");
    }
    Ok(serde_json::from_str(&out)?)
}

fn ready(app: &Value) -> (String, String) {
    let conditions = app["status"]["conditions"].as_array().cloned().unwrap_or_default();
    conditions
        .iter()
        .find(|c| c["type"] == "Ready")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .unwrap_or_default()
}

#[test]
fn the_demo_runs_the_whole_loop_and_leaves_nothing_behind() -> Result<()> {
    let log = tempfile::NamedTempFile::new()?;
    let mut demo = Command::new(workspace_binary("ksync")?)
        .arg("demo")
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log.reopen()?))
        .spawn()
        .context("start ksync demo")?;
    let stdout = demo.stdout.take().context("stdout")?;
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(300);
    let kubeconfig = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match received.recv_timeout(left) {
            Ok(line) => {
                if let Some(path) = line.strip_prefix("ready kubeconfig=") {
                    break path.to_owned();
                }
            }
            Err(_) => {
                let _ = demo.kill();
                bail!(
                    "ksync demo printed no ready line; its log:\n{}",
                    std::fs::read_to_string(log.path()).unwrap_or_default()
                );
            }
        }
    };
    let ui =
        received.recv_timeout(Duration::from_secs(5)).context("a line after the kubeconfig")?;
    let ui =
        ui.strip_prefix("ready ui=").with_context(|| format!("the web view's address: {ui}"))?;
    let demo_dir = PathBuf::from(&kubeconfig).parent().context("the demo's folder")?.to_path_buf();
    let started_tree = process_tree::tree(demo.id());
    assert!(started_tree.len() >= 5, "the demo started its servers: {started_tree:?}");

    let result = (|| -> Result<()> {
        // The web view the demo started answers, listing the demo's Applications.
        let page = http_get(ui)?;
        assert!(page.starts_with("HTTP/1.1 200"), "{page}");
        for name in ["guestbook", "approvals", "broken"] {
            assert!(page.contains(&format!("/apps/demo/{name}")), "the list links {name}");
        }
        for name in ["guestbook", "frontend", "api"] {
            let app = application(&kubeconfig, name)?;
            assert_eq!(ready(&app), ("True".into(), "Healthy".into()), "{name}");
        }
        // Approving the manual Application with the CLI: the webhook records the approver.
        let (code, out) = ksync(&kubeconfig, &["sync", "approvals", "-n", "demo", "--yes"])?;
        assert_eq!(code, 0, "ksync sync --yes: {out}");
        wait_until("approvals approved and deployed", Duration::from_secs(60), || {
            let app = application(&kubeconfig, "approvals")?;
            let by = app["metadata"]["annotations"]["sync.kuvryn.io/approved-by"].as_str();
            let (status, reason) = ready(&app);
            Ok(match (by, status.as_str()) {
                (Some(by), "True") if !by.is_empty() => None,
                _ => Some(format!("approved-by {by:?}, Ready {status}/{reason}")),
            })
        })?;
        let (ok, out) = kubectl(&kubeconfig, &["get", "configmap", "feature-flags", "-n", "demo"])?;
        assert!(ok, "the approved plan was applied: {out}");
        // The broken Application: a missing Secret, named by the diagnosis.
        wait_until("broken diagnosed", Duration::from_secs(60), || {
            let (code, out) = ksync(&kubeconfig, &["diagnose", "broken", "-n", "demo"])?;
            let named = code == 0 && out.contains("MissingSecret") && out.contains("db");
            Ok(if named { None } else { Some(out) })
        })?;
        Ok(())
    })();

    // SIGINT: everything stops and the temporary folder goes.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(demo.id())?),
        nix::sys::signal::Signal::SIGINT,
    )?;
    let stop_deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = demo.try_wait()? {
            break status;
        }
        if Instant::now() > stop_deadline {
            let _ = demo.kill();
            bail!("ksync demo did not stop within 30s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    result?;
    assert!(status.success(), "ksync demo exited with {status}");
    let alive: Vec<_> = started_tree.iter().filter(|p| p.is_alive()).collect();
    assert!(alive.is_empty(), "left running: {alive:?}");
    assert!(!demo_dir.exists(), "{} was not removed", demo_dir.display());
    Ok(())
}
