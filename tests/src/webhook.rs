//! The real `kuvryn-sync-webhook` binary for end-to-end tests: started with a serving
//! certificate of its own CA and the test cluster's kubeconfig, and registered with the API server
//! through the same admission paths and rules the chart uses.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use kuvryn_sync_webhook::routes::{ADMIT_APPLICATIONS, VALIDATE_HEALTHCHECKS};
use serde_json::json;

use crate::cluster::{TestCluster, workspace_binary};

/// A running webhook, killed on drop.
#[derive(Debug)]
pub struct WebhookProcess {
    child: Child,
    /// `https://127.0.0.1:PORT`: the admission listener.
    pub https: String,
    /// `https://127.0.0.1:PORT`: the receivers' listener.
    pub receivers: String,
    /// `http://127.0.0.1:PORT` (`/metrics`, `/readyz`).
    pub metrics: String,
    /// The PEM CA that signed the serving certificate.
    pub ca_pem: String,
    _dir: tempfile::TempDir,
}

impl Drop for WebhookProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl WebhookProcess {
    /// Start the webhook against `cluster`.
    pub fn start(cluster: &TestCluster) -> Result<Self> {
        Self::start_with_args(cluster, &[])
    }

    /// Start the webhook against `cluster` with extra flags (limits, timeouts).
    pub fn start_with_args(cluster: &TestCluster, args: &[&str]) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let certs = crate::localhost_certs()?;
        certs.write_to(dir.path())?;
        Self::start_with(cluster, dir, certs.ca_cert_pem, args)
    }

    fn start_with(
        cluster: &TestCluster,
        dir: tempfile::TempDir,
        ca_pem: String,
        args: &[&str],
    ) -> Result<Self> {
        let mut child = Command::new(workspace_binary("kuvryn-sync-webhook")?)
            .args(["--listen", "127.0.0.1:0", "--receiver-listen", "127.0.0.1:0"])
            .args(["--metrics-bind-address", "127.0.0.1:0"])
            .arg("--tls-cert-file")
            .arg(dir.path().join("tls.crt"))
            .arg("--tls-key-file")
            .arg(dir.path().join("tls.key"))
            .args(args)
            .env("KUBECONFIG", cluster.kubeconfig())
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("start kuvryn-sync-webhook")?;
        let stdout = child.stdout.take().context("stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let words: Vec<&str> = line.split_whitespace().collect();
        // "ready https://ADMISSION metrics http://OPS receivers https://RECEIVERS"
        if words.first() != Some(&"ready") || words.len() < 6 {
            bail!("the webhook did not start: first line {line:?}");
        }
        Ok(Self {
            child,
            https: words[1].to_owned(),
            metrics: words[3].to_owned(),
            receivers: words[5].to_owned(),
            ca_pem,
            _dir: dir,
        })
    }

    /// Register the HealthCheck validating and the Application mutating webhooks, both failing
    /// closed, under names unique to `suffix`.
    pub async fn register(&self, cluster: &TestCluster, suffix: &str) -> Result<()> {
        use base64::Engine;
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        let hook = |name: &str, path: &str, resource: &str, scope: &str| {
            json!({
                "name": name,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "clientConfig": {"url": format!("{}{path}", self.https), "caBundle": ca},
                "rules": [{
                    "apiGroups": ["sync.kuvryn.io"], "apiVersions": ["v1alpha1"],
                    "resources": [resource], "operations": ["CREATE", "UPDATE"], "scope": scope,
                }],
            })
        };
        let configs = [
            (
                "ValidatingWebhookConfiguration",
                "validatingwebhookconfigurations",
                hook(
                    "validate.healthchecks.sync.kuvryn.io",
                    VALIDATE_HEALTHCHECKS,
                    "healthchecks",
                    "Cluster",
                ),
            ),
            (
                "MutatingWebhookConfiguration",
                "mutatingwebhookconfigurations",
                hook(
                    "admit.applications.sync.kuvryn.io",
                    ADMIT_APPLICATIONS,
                    "applications",
                    "Namespaced",
                ),
            ),
        ];
        for (kind, plural, webhook) in configs {
            let resource = ApiResource {
                group: "admissionregistration.k8s.io".into(),
                version: "v1".into(),
                api_version: "admissionregistration.k8s.io/v1".into(),
                kind: kind.into(),
                plural: plural.into(),
            };
            let api: Api<DynamicObject> = Api::all_with(cluster.client(), &resource);
            let name = format!("kuvryn-sync-e2e-{suffix}");
            let body = json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                "metadata": {"name": name}, "webhooks": [webhook],
            });
            api.patch(&name, &PatchParams::apply("e2e").force(), &Patch::Apply(&body)).await?;
        }
        Ok(())
    }

    /// The process id (for `/proc/PID/status`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The webhook's `/metrics` text.
    pub async fn metrics_text(&self) -> Result<String> {
        let text = tokio::task::spawn_blocking({
            let url = format!("{}/metrics", self.metrics);
            move || -> Result<String> {
                let output =
                    Command::new("curl").args(["-sS", "--max-time", "5", &url]).output()?;
                if !output.status.success() {
                    bail!("curl {url}: {}", String::from_utf8_lossy(&output.stderr));
                }
                Ok(String::from_utf8(output.stdout)?)
            }
        })
        .await??;
        Ok(text)
    }
}
