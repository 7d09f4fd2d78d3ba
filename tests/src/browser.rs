//! Debian's `chromium`, headless, driven through the Chrome DevTools protocol (CDP) over its
//! WebSocket: navigate, evaluate JavaScript, press keys, take screenshots.
//!
//! A thin client on `tokio-tungstenite` rather than a CDP crate: the tests need five commands,
//! and the maintained CDP crates generate the whole protocol (minutes of build on a small
//! machine). One page target, attached with a flattened session; every command waits for its
//! own answer, and events in between are skipped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A headless chromium with one page, stopped (with its helper processes) on drop.
pub struct Browser {
    child: Child,
    socket: Socket,
    session: String,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser").field("pid", &self.child.id()).finish_non_exhaustive()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        crate::process_tree::kill_tree(&mut self.child, Duration::from_secs(5));
    }
}

/// The flags for a root user on a machine without a display, GPU or network beyond loopback.
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
    "--window-size=1280,900",
];

impl Browser {
    /// Start `chromium` with a fresh profile and attach to a blank page.
    pub async fn start() -> Result<Browser> {
        let profile = tempfile::tempdir()?;
        let mut child = Command::new("chromium")
            .args(FLAGS)
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("start chromium (scripts/test installs the Debian package)")?;
        let stderr = child.stderr.take().context("chromium's stderr")?;
        let url = tokio::task::spawn_blocking(move || devtools_url(stderr)).await??;
        let (socket, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .with_context(|| format!("connect to {url}"))?;
        let mut browser =
            Browser { child, socket, session: String::new(), next_id: 0, _profile: profile };
        let target =
            browser.send(None, "Target.createTarget", json!({"url": "about:blank"})).await?;
        let target_id = target["targetId"].as_str().context("a targetId")?.to_owned();
        let attached = browser
            .send(None, "Target.attachToTarget", json!({"targetId": target_id, "flatten": true}))
            .await?;
        browser.session = attached["sessionId"].as_str().context("a sessionId")?.to_owned();
        browser.call("Page.enable", json!({})).await?;
        browser
            .call(
                "Emulation.setDeviceMetricsOverride",
                json!({"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
            )
            .await?;
        Ok(browser)
    }

    async fn send(
        &mut self,
        session: Option<String>,
        method: &str,
        params: Value,
    ) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = Value::String(session);
        }
        self.socket.send(Message::text(message.to_string())).await?;
        let deadline = Duration::from_secs(30);
        loop {
            let next = tokio::time::timeout(deadline, self.socket.next())
                .await
                .with_context(|| format!("no answer to {method} within {deadline:?}"))?;
            let Some(frame) = next else { bail!("chromium closed the DevTools connection") };
            let Message::Text(text) = frame? else { continue };
            let reply: Value = serde_json::from_str(&text)?;
            if reply["id"] != id {
                continue; // an event, or an answer to nobody
            }
            if let Some(error) = reply.get("error") {
                bail!("{method}: {error}");
            }
            return Ok(reply["result"].clone());
        }
    }

    /// Send CDP command `method` to the page.
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let session = self.session.clone();
        self.send(Some(session), method, params).await
    }

    /// Evaluate `expression` in the page (promises awaited) and return its value.
    pub async fn eval(&mut self, expression: &str) -> Result<Value> {
        let params = json!({"expression": expression, "returnByValue": true, "awaitPromise": true});
        let result = self.call("Runtime.evaluate", params).await?;
        if let Some(exception) = result.get("exceptionDetails") {
            bail!("{expression}: {exception}");
        }
        Ok(result["result"]["value"].clone())
    }

    /// Navigate to `url` and wait until the page has loaded.
    pub async fn goto(&mut self, url: &str) -> Result<()> {
        self.call("Page.navigate", json!({"url": url})).await?;
        let check =
            format!("document.readyState === 'complete' && location.href === {}", json!(url));
        self.wait_for(&format!("{url} loaded"), &check, Duration::from_secs(15)).await?;
        Ok(())
    }

    /// Poll `expression` until it is truthy; the error names `what` and the last value.
    pub async fn wait_for(
        &mut self,
        what: &str,
        expression: &str,
        deadline: Duration,
    ) -> Result<Value> {
        let start = Instant::now();
        loop {
            let last = match self.eval(expression).await {
                Ok(v) if truthy(&v) => return Ok(v),
                Ok(v) => v.to_string(),
                Err(e) => format!("error: {e:#}"),
            };
            if start.elapsed() > deadline {
                bail!("timed out after {deadline:?} waiting for {what}; last: {last}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Press and release `key` (such as `Tab` or `Enter`), as a keyboard user would.
    pub async fn press(&mut self, key: &str, code: i64) -> Result<()> {
        for kind in ["keyDown", "keyUp"] {
            let mut params = json!({"type": kind, "key": key, "code": key,
                                    "windowsVirtualKeyCode": code});
            if key == "Enter" && kind == "keyDown" {
                params["text"] = json!("\r");
            }
            self.call("Input.dispatchKeyEvent", params).await?;
        }
        Ok(())
    }

    /// Write a PNG of the visible part of the page (1280×900) to `path`.
    pub async fn screenshot(&mut self, path: &Path) -> Result<()> {
        use base64::Engine as _;
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"})).await?;
        let data = shot["data"].as_str().context("screenshot data")?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, base64::engine::general_purpose::STANDARD.decode(data)?)?;
        Ok(())
    }
}

fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        _ => true,
    }
}

/// The browser's DevTools WebSocket URL, from the line chromium prints on standard error.
fn devtools_url(stderr: std::process::ChildStderr) -> Result<String> {
    let mut seen = Vec::new();
    let mut lines = BufReader::new(stderr).lines();
    while let Some(line) = lines.next() {
        let line = line?;
        if let Some(url) = line.strip_prefix("DevTools listening on ") {
            // Keep reading, so chromium never writes into a closed pipe.
            std::thread::spawn(move || lines.for_each(drop));
            return Ok(url.trim().to_owned());
        }
        seen.push(line);
    }
    bail!("chromium exited without a DevTools address:\n{}", seen.join("\n"))
}
