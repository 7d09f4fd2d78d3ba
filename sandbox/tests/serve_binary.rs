//! Priority 1: the `ksync-sandbox serve` binary: ready line, kubeconfig, signals.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn serve_and_signal(signal: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = dir.path().join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ksync-sandbox"))
        .args(["serve", "--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(&kc)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn ksync-sandbox");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(l)) = lines.next() {
            let _ = tx.send(l);
        }
        // Any further stdout output would be a protocol violation.
        let rest: Vec<String> = lines.map_while(Result::ok).collect();
        assert!(rest.is_empty(), "unexpected stdout: {rest:?}");
    });
    let line = rx.recv_timeout(Duration::from_secs(20)).expect("ready line");
    let url = line.strip_prefix("ready ").expect("ready prefix");
    let port: u16 =
        url.strip_prefix("https://127.0.0.1:").expect("https loopback url").parse().expect("port");
    assert!(port > 0);

    let cfg = std::fs::read_to_string(&kc).expect("kubeconfig written");
    assert!(cfg.contains(&format!("server: {url}")), "{cfg}");
    assert!(cfg.contains("certificate-authority-data: "), "{cfg}");
    assert!(cfg.contains("token: "), "{cfg}");

    let out = Command::new(common::KUBECTL)
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["version", "-o", "json"])
        .output()
        .expect("kubectl");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["serverVersion"]["gitVersion"], "v1.33.0");

    // The admin is in system:masters: it may do anything.
    let out = Command::new(common::KUBECTL)
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["auth", "whoami", "-o", "json"])
        .output()
        .expect("kubectl");
    if out.status.success() {
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert!(
            v["status"]["userInfo"]["groups"]
                .as_array()
                .is_some_and(|g| g.iter().any(|x| x == "system:masters")),
            "{v}"
        );
    }

    let st = Command::new("kill").args([signal, &child.id().to_string()]).status().expect("kill");
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert_eq!(status.code(), Some(0), "exit status after {signal}");
            break;
        }
        assert!(Instant::now() < deadline, "did not exit after {signal}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn serve_prints_ready_and_exits_zero_on_sigterm() {
    serve_and_signal("-TERM");
}

#[test]
fn serve_exits_zero_on_sigint() {
    serve_and_signal("-INT");
}

#[test]
fn unauthenticated_requests_get_401_status() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let sb = common::sandbox().await;
        let dir = tempfile::tempdir().expect("tempdir");
        let bad = dir.path().join("kc");
        let cfg = std::fs::read_to_string(sb.kubeconfig_path()).expect("read");
        let cfg = cfg
            .lines()
            .map(|l| {
                if l.trim_start().starts_with("token:") {
                    "    token: wrong".to_string()
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(&bad, cfg).expect("write");
        let out = tokio::process::Command::new(common::KUBECTL)
            .arg("--kubeconfig")
            .arg(&bad)
            .args(["get", "cm"])
            .output()
            .await
            .expect("kubectl");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("You must be logged in to the server"), "{err}");
    });
}
