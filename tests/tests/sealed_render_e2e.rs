//! Sealed renders end to end: through the real controller binary, a kustomization whose
//! `configMapGenerator` names a URL (server-side request forgery from the controller's pod, say
//! to a cloud metadata endpoint) fails with `RenderFailure` naming the field, a real HTTP server
//! at that URL receives no request, and another Application of the same repository keeps
//! syncing new commits.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Result;
use k8s_openapi::api::core::v1::ConfigMap;
use kuvryn_sync_tests::application::env;
use serde_json::json;

/// A real HTTP server on 127.0.0.1 that records every request line it receives.
fn recording_server() -> (u16, Arc<AtomicUsize>, Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (counter, lines) = (Arc::clone(&accepted), Arc::clone(&log));
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            counter.fetch_add(1, Ordering::SeqCst);
            let mut request = [0u8; 4096];
            let n = stream.read(&mut request).unwrap_or(0);
            let first = String::from_utf8_lossy(&request[..n]).lines().next().map(str::to_owned);
            lines.lock().expect("log").push(first.unwrap_or_default());
            let body = "token=metadata-credentials-7d2a\n";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, accepted, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generator_url_fails_its_render_fetches_nothing_and_the_neighbour_keeps_syncing()
-> Result<()> {
    let (port, accepted, log) = recording_server();
    let env = env("sealed", true).await?;
    let kustomize = json!({"source": {"render": {"type": "kustomize"}}});
    let good = |value: &str| {
        (
            "apps/good/kustomization.yaml",
            format!(
                "configMapGenerator:\n- name: settings\n  literals: [mode={value}]\n  options: {{disableNameSuffixHash: true}}\n"
            ),
        )
    };
    let commit = env
        .push(
            &[
                (
                    "apps/ssrf/kustomization.yaml",
                    format!(
                        "configMapGenerator:\n- name: stolen\n  files: [\"creds=http://127.0.0.1:{port}/latest/meta-data/iam\"]\n"
                    ),
                ),
                good("one"),
            ],
            "a generator naming a URL, and a neighbour",
        )
        .await?;
    env.create_app("ssrf", "apps/ssrf", kustomize.clone()).await?;
    env.create_app("good", "apps/good", kustomize.clone()).await?;

    let message = env.wait_failed("ssrf", "RenderFailure").await?;
    assert!(message.contains("configMapGenerator[0].files"), "{message}");
    assert!(message.contains("apps/ssrf/kustomization.yaml"), "{message}");
    env.wait_synced("good", &commit).await?;

    // The neighbour keeps following new commits while the other Application fails.
    let next = env.push(&[good("two")], "the neighbour changes").await?;
    env.wait_synced("good", &next).await?;
    let settings = env.api::<ConfigMap>().get("settings").await?;
    assert_eq!(settings.data.unwrap_or_default().get("mode").map(String::as_str), Some("two"));
    env.wait_failed("ssrf", "RenderFailure").await?;

    assert!(env.api::<ConfigMap>().get_opt("stolen").await?.is_none(), "nothing applied");
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "requests: {:?}", log.lock().expect("log"));
    // We run as root here: the default policy (auto) must have found isolation available.
    assert!(
        env.controller_log().contains("render helpers run in their own network namespace"),
        "{}",
        env.log_tail(20)
    );
    Ok(())
}

/// Start-up empties --render-temp-dir: a sealed workspace with a decrypted file that a crashed
/// controller left behind is removed before any render, and renders then work in that directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_removes_what_a_crash_left_in_the_render_temp_dir() -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut env = env("sealed-tmp", false).await?;
    let temp = tempfile::tempdir()?;
    let leftover = temp.path().join("ksync-render-crashed/repo/app");
    std::fs::create_dir_all(&leftover)?;
    std::fs::write(leftover.join("secret.yaml"), "password: decrypted-left-behind\n")?;
    for (path, mode) in [(leftover.join("secret.yaml"), 0o444), (leftover.clone(), 0o555)] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    let dir = temp.path().to_string_lossy().into_owned();
    env.start_controller_with(&["--render-temp-dir", &dir], &[])?;
    let commit = env
        .push(
            &[(
                "apps/web/kustomization.yaml",
                "configMapGenerator:\n- name: web\n  literals: [a=b]\n".to_owned(),
            )],
            "a kustomization",
        )
        .await?;
    env.create_app("web", "apps/web", json!({"source": {"render": {"type": "kustomize"}}})).await?;
    env.wait_synced("web", &commit).await?;
    assert!(!temp.path().join("ksync-render-crashed").exists(), "the leftover is removed");
    assert!(env.controller_log().contains("removed render files left by an earlier run"));
    let mode = std::fs::metadata(temp.path())?.permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    Ok(())
}

/// `required` isolation cannot be combined with remote bases (the engine must fetch them): the
/// controller refuses to start, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_isolation_with_remote_bases_refuses_to_start() -> Result<()> {
    let mut env = env("sealed-flags", false).await?;
    env.start_controller_with(
        &["--render-network-isolation", "required", "--allow-remote-bases"],
        &[],
    )?;
    let controller = env.controller.as_mut().expect("started");
    let status = controller.wait_exit(std::time::Duration::from_secs(60)).await?;
    assert!(!status.success());
    let log = env.controller_log();
    assert!(log.contains("cannot be combined with --allow-remote-bases"), "{log}");
    Ok(())
}
