//! List and watch semantics of kube-apiserver v1.33, driven over HTTP (raw requests with the
//! kubeconfig's CA and token, kube-rs, and the real kubectl). Each test names the Kubernetes test
//! or document section it ports; the tests are our own.
//!
//! Documents: <https://kubernetes.io/docs/reference/using-api/api-concepts/> (sections "Resource
//! versions", "Semantics for get and list", "Semantics for watch", "Watch bookmarks", "Streaming
//! lists", "Retrieving large results sets in chunks", "410 Gone responses").

mod common;

use base64::Engine;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use ksync_sandbox::{Sandbox, SandboxOptions};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CMS: &str = "/api/v1/namespaces/default/configmaps";

/// Raw HTTPS requests with the admin's bearer token, trusting the sandbox CA.
struct Raw {
    http: reqwest::Client,
    base: String,
    token: String,
}

struct Reply {
    code: u16,
    headers: reqwest::header::HeaderMap,
    body: Value,
}

impl Raw {
    fn new(sb: &Sandbox) -> Raw {
        let kc: Value = kuvryn_sync_core::yaml::from_str(
            &std::fs::read_to_string(sb.kubeconfig_path()).expect("read kubeconfig"),
        )
        .expect("kubeconfig yaml");
        let token = kc["users"][0]["user"]["token"].as_str().expect("token").to_string();
        let ca = base64::engine::general_purpose::STANDARD
            .decode(
                kc["clusters"][0]["cluster"]["certificate-authority-data"].as_str().expect("ca"),
            )
            .expect("ca base64");
        let mut roots = rustls::RootCertStore::empty();
        use rustls::pki_types::{CertificateDer, pem::PemObject};
        for c in CertificateDer::pem_slice_iter(&ca) {
            roots.add(c.expect("ca pem")).expect("add ca");
        }
        let tls =
            rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .no_proxy()
            .build()
            .expect("http client");
        Raw { http, base: sb.url(), token }
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Reply {
        let mut rq = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .timeout(Duration::from_secs(30));
        if let Some(b) = body {
            rq = rq.header("content-type", "application/json").body(b.to_string());
        }
        let r = rq.send().await.expect("request");
        let code = r.status().as_u16();
        let headers = r.headers().clone();
        let bytes = r.bytes().await.expect("body");
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply { code, headers, body }
    }

    async fn get(&self, path: &str) -> Reply {
        self.send(reqwest::Method::GET, path, None).await
    }

    /// Create a ConfigMap in `default`; returns its resourceVersion.
    async fn create(&self, name: &str, labels: Value) -> u64 {
        let body = json!({"metadata": {"name": name, "labels": labels}, "data": {"v": "1"}});
        let r = self.send(reqwest::Method::POST, CMS, Some(body)).await;
        assert_eq!(r.code, 201, "create {name}: {}", r.body);
        rv(&r.body)
    }

    async fn update_data(&self, name: &str, v: &str) -> u64 {
        let r = self
            .http
            .patch(format!("{}{CMS}/{name}", self.base))
            .bearer_auth(&self.token)
            .header("content-type", "application/merge-patch+json")
            .body(json!({"data": {"v": v}}).to_string())
            .send()
            .await
            .expect("patch");
        assert_eq!(r.status().as_u16(), 200);
        rv(&r.json::<Value>().await.expect("json"))
    }

    async fn relabel(&self, name: &str, labels: Value) -> u64 {
        let r = self
            .http
            .patch(format!("{}{CMS}/{name}", self.base))
            .bearer_auth(&self.token)
            .header("content-type", "application/merge-patch+json")
            .body(json!({"metadata": {"labels": labels}}).to_string())
            .send()
            .await
            .expect("patch");
        assert_eq!(r.status().as_u16(), 200);
        rv(&r.json::<Value>().await.expect("json"))
    }

    async fn delete(&self, path: &str) -> Reply {
        self.send(reqwest::Method::DELETE, path, None).await
    }

    /// Open a watch: once the response head is back, the server follows the changes.
    async fn open(&self, path: &str) -> WatchStream {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("watch request");
        assert_eq!(resp.status().as_u16(), 200, "watch {path}");
        WatchStream { resp, buf: Vec::new(), t0: Instant::now() }
    }

    /// Read a watch stream until `done` says so, the server ends it, or `within` passes.
    /// Returns the events, with the time each arrived, and whether the server ended the stream.
    async fn watch(
        &self,
        path: &str,
        within: Duration,
        done: impl FnMut(&[(Value, Duration)]) -> bool,
    ) -> (Vec<(Value, Duration)>, bool) {
        self.open(path).await.read(within, done).await
    }
}

struct WatchStream {
    resp: reqwest::Response,
    buf: Vec<u8>,
    t0: Instant,
}

impl WatchStream {
    async fn read(
        &mut self,
        within: Duration,
        mut done: impl FnMut(&[(Value, Duration)]) -> bool,
    ) -> (Vec<(Value, Duration)>, bool) {
        let mut evs = vec![];
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if done(&evs) {
                return (evs, false);
            }
            let chunk = match tokio::time::timeout_at(deadline, self.resp.chunk()).await {
                Err(_) => return (evs, false),
                Ok(c) => c.expect("watch chunk"),
            };
            let Some(chunk) = chunk else { return (evs, true) };
            self.buf.extend_from_slice(&chunk);
            while let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                let v: Value = serde_json::from_slice(&line).expect("watch line is JSON");
                evs.push((v, self.t0.elapsed()));
            }
        }
    }
}

fn rv(o: &Value) -> u64 {
    o["metadata"]["resourceVersion"].as_str().expect("resourceVersion").parse().expect("numeric")
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|o| o["metadata"]["name"].as_str().expect("name").to_string())
        .collect()
}

fn types(evs: &[(Value, Duration)]) -> Vec<String> {
    evs.iter().map(|(e, _)| e["type"].as_str().unwrap_or_default().to_string()).collect()
}

async fn sandbox_with_history(n: usize) -> Sandbox {
    common::sandbox_with(SandboxOptions { watch_history: n, ..Default::default() }).await
}

/// A 422 from ListOptions validation, as `errors.NewInvalid(meta.k8s.io/ListOptions, "", errs)`.
async fn assert_list_options_invalid(raw: &Raw, query: &str, field: &str, body: &str) {
    let r = raw.get(&format!("{CMS}?{query}")).await;
    assert_eq!(r.code, 422, "{query}: {}", r.body);
    assert_eq!(r.body["reason"], "Invalid");
    assert_eq!(
        r.body["message"],
        format!("ListOptions.meta.k8s.io \"\" is invalid: {field}: {body}"),
        "{query}"
    );
    assert_eq!(r.body["details"]["kind"], "ListOptions");
    assert_eq!(r.body["details"]["group"], "meta.k8s.io");
    assert_eq!(r.body["details"]["causes"][0]["field"], field);
    assert_eq!(r.body["details"]["causes"][0]["message"], body);
}

// ---------------------------------------------------------------------------------------------
// Paged lists: one snapshot.

/// Ports k8s.io/apiserver/pkg/storage/testing/store_tests.go `RunTestListContinuation` and API
/// concepts "Retrieving large results sets in chunks": every chunk is served from the snapshot
/// of the first one — creations, deletions and updates after it do not show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paged_list_pages_share_one_snapshot() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    for i in 0..10 {
        raw.create(&format!("c{i:02}"), json!({"app": "snap"})).await;
    }
    let first = raw.get(&format!("{CMS}?labelSelector=app%3Dsnap&limit=4")).await;
    assert_eq!(first.code, 200);
    let snap_rv = rv(&first.body);
    let mut got = names(&first.body);
    // remainingItemCount is not set for lists with a label selector (ListMeta).
    assert_eq!(first.body["metadata"]["remainingItemCount"], Value::Null);
    // Changes between the pages, all in the part not yet listed.
    raw.create("c05a", json!({"app": "snap"})).await;
    assert_eq!(raw.delete(&format!("{CMS}/c07")).await.code, 200);
    raw.update_data("c08", "2").await;
    let mut cont = first.body["metadata"]["continue"].as_str().expect("continue").to_string();
    let mut c08 = None;
    loop {
        let page =
            raw.get(&format!("{CMS}?labelSelector=app%3Dsnap&limit=4&continue={cont}")).await;
        assert_eq!(page.code, 200, "{}", page.body);
        assert_eq!(rv(&page.body), snap_rv, "every page reports the snapshot's version");
        for o in page.body["items"].as_array().expect("items") {
            if o["metadata"]["name"] == "c08" {
                c08 = Some(o["data"]["v"].clone());
            }
        }
        got.extend(names(&page.body));
        match page.body["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => cont = c.to_string(),
            _ => break,
        }
    }
    let want: Vec<String> = (0..10).map(|i| format!("c{i:02}")).collect();
    assert_eq!(got, want, "the snapshot: no c05a, c07 still there");
    assert_eq!(c08, Some(json!("1")), "c08 as it was at the snapshot");
    // A new list sees the changes.
    let now = raw.get(&format!("{CMS}?labelSelector=app%3Dsnap")).await;
    let n = names(&now.body);
    assert!(n.contains(&"c05a".to_string()) && !n.contains(&"c07".to_string()), "{n:?}");
}

/// Ports store_tests.go `RunTestListInconsistentContinuation`: a continue token older than the
/// history gets 410 Expired whose Status carries a continue token for the newest state; that
/// token lists the remainder from the newest state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_continue_token_is_410_with_a_token_for_the_newest_state() {
    let sb = sandbox_with_history(5).await;
    let raw = Raw::new(&sb);
    for i in 0..6 {
        raw.create(&format!("c{i:02}"), json!({"app": "exp"})).await;
    }
    let first = raw.get(&format!("{CMS}?labelSelector=app%3Dexp&limit=2")).await;
    let cont = first.body["metadata"]["continue"].as_str().expect("continue").to_string();
    for i in 0..8 {
        raw.create(&format!("d{i:02}"), json!({"app": "exp"})).await;
    }
    let r = raw.get(&format!("{CMS}?labelSelector=app%3Dexp&limit=2&continue={cont}")).await;
    assert_eq!(r.code, 410, "{}", r.body);
    assert_eq!(r.body["reason"], "Expired");
    assert_eq!(
        r.body["message"],
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
    );
    let fresh = r.body["metadata"]["continue"].as_str().expect("a continue token in the Status");
    let rest = raw.get(&format!("{CMS}?labelSelector=app%3Dexp&continue={fresh}")).await;
    assert_eq!(rest.code, 200, "{}", rest.body);
    let mut want: Vec<String> = (2..6).map(|i| format!("c{i:02}")).collect();
    want.extend((0..8).map(|i| format!("d{i:02}")));
    assert_eq!(names(&rest.body), want, "the remainder, from the newest state");
    assert!(rv(&rest.body) >= rv(&first.body));
}

// ---------------------------------------------------------------------------------------------
// resourceVersion / resourceVersionMatch on lists.

/// Ports store_tests.go `RunTestList` (the `ResourceVersionMatchExact` cases) and API concepts
/// "Semantics for get and list" (Exact: "Return data at the exact resource version provided").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_exact_reads_the_state_at_an_older_version() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    let rv1 = raw.create("a", json!({"app": "ex"})).await;
    raw.update_data("a", "2").await;
    raw.create("b", json!({"app": "ex"})).await;
    let r = raw
        .get(&format!(
            "{CMS}?labelSelector=app%3Dex&resourceVersion={rv1}&resourceVersionMatch=Exact"
        ))
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(rv(&r.body), rv1);
    assert_eq!(names(&r.body), vec!["a"]);
    assert_eq!(r.body["items"][0]["data"]["v"], "1");
    assert_eq!(r.body["items"][0]["metadata"]["resourceVersion"], rv1.to_string());
}

/// Ports store_tests.go `RunTestList` (exact read of a compacted revision) and the etcd3 store's
/// `interpretListError`: 410 Expired, "The resourceVersion for the provided list is too old."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_exact_older_than_the_history_is_410() {
    let sb = sandbox_with_history(3).await;
    let raw = Raw::new(&sb);
    let rv1 = raw.create("a", json!({})).await;
    for i in 0..5 {
        raw.create(&format!("x{i}"), json!({})).await;
    }
    let r = raw.get(&format!("{CMS}?resourceVersion={rv1}&resourceVersionMatch=Exact")).await;
    assert_eq!(r.code, 410, "{}", r.body);
    assert_eq!(r.body["reason"], "Expired");
    assert_eq!(r.body["message"], "The resourceVersion for the provided list is too old.");
}

/// Ports API concepts "Semantics for get and list", the table row "resourceVersionMatch unset,
/// limit set": a specific resourceVersion is an Exact read (legacy paginated lists), and
/// store_tests.go `RunTestList` ("test List with limit ... and resource version").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_with_limit_and_a_resource_version_reads_that_snapshot() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    let rv1 = raw.create("a", json!({"app": "lim"})).await;
    raw.create("b", json!({"app": "lim"})).await;
    let r = raw.get(&format!("{CMS}?labelSelector=app%3Dlim&resourceVersion={rv1}&limit=5")).await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(names(&r.body), vec!["a"]);
    assert_eq!(rv(&r.body), rv1);
}

/// Ports API concepts "Semantics for get and list" (NotOlderThan, and unset match without a
/// limit: "Return data at least as new as the provided resourceVersion").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_not_older_than_serves_the_newest_state() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    let rv1 = raw.create("a", json!({"app": "nt"})).await;
    let rv2 = raw.create("b", json!({"app": "nt"})).await;
    for q in [
        format!("resourceVersion={rv1}&resourceVersionMatch=NotOlderThan"),
        format!("resourceVersion={rv1}"),
        "resourceVersion=0&resourceVersionMatch=NotOlderThan".to_string(),
    ] {
        let r = raw.get(&format!("{CMS}?labelSelector=app%3Dnt&{q}")).await;
        assert_eq!(r.code, 200, "{q}: {}", r.body);
        assert_eq!(names(&r.body), vec!["a", "b"], "{q}");
        assert!(rv(&r.body) >= rv2, "{q}");
    }
}

/// Ports API concepts "Semantics for get and list": resourceVersion="0" with a limit is "Any"
/// (the newest is served here), and the continue of such a list carries no resourceVersion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_resource_version_zero_with_limit_pages_the_newest_state() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    for i in 0..5 {
        raw.create(&format!("z{i}"), json!({"app": "zero"})).await;
    }
    let r = raw.get(&format!("{CMS}?labelSelector=app%3Dzero&resourceVersion=0&limit=3")).await;
    assert_eq!(r.code, 200);
    assert_eq!(names(&r.body), vec!["z0", "z1", "z2"]);
    assert_eq!(rv(&r.body), sb_current_rv(&raw).await);
    let cont = r.body["metadata"]["continue"].as_str().expect("continue");
    // resourceVersion=0 may accompany continue (storage ValidateListOptions allows "" and "0").
    let r2 = raw
        .get(&format!("{CMS}?labelSelector=app%3Dzero&resourceVersion=0&limit=3&continue={cont}"))
        .await;
    assert_eq!(r2.code, 200, "{}", r2.body);
    assert_eq!(names(&r2.body), vec!["z3", "z4"]);
}

async fn sb_current_rv(raw: &Raw) -> u64 {
    // A consistent list of namespaces reports the newest resourceVersion.
    rv(&raw.get("/api/v1/namespaces").await.body)
}

/// Ports k8s.io/apiserver/pkg/storage/cacher/cacher_test.go `TestTooLargeResourceVersionList`
/// and storage/errors.go `NewTooLargeResourceVersionError`: a version the server has not reached
/// is 504 Timeout with a ResourceVersionTooLarge cause, after the watch cache's wait (3 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_future_resource_version_is_504_too_large() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    let cur = sb_current_rv(&raw).await;
    let future = cur + 1000;
    for m in ["NotOlderThan", "Exact"] {
        let t0 = Instant::now();
        let r = raw.get(&format!("{CMS}?resourceVersion={future}&resourceVersionMatch={m}")).await;
        assert_eq!(r.code, 504, "{m}: {}", r.body);
        assert!(t0.elapsed() >= Duration::from_millis(2500), "waited for freshness first");
        assert_eq!(r.body["reason"], "Timeout");
        assert_eq!(
            r.body["message"],
            format!("Timeout: Too large resource version: {future}, current: {cur}")
        );
        assert_eq!(r.body["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
        assert_eq!(r.body["details"]["causes"][0]["message"], "Too large resource version");
        assert_eq!(r.body["details"]["retryAfterSeconds"], 1);
        assert_eq!(r.headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    }
}

/// Ports cacher/watch_cache_test.go `TestWaitUntilFreshAndList`: a list for a version the store
/// reaches while the request waits is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_waits_for_a_version_reached_during_the_wait() {
    let sb = common::sandbox().await;
    let raw = Arc::new(Raw::new(&sb));
    let next = sb_current_rv(&raw).await + 1;
    let lister = raw.clone();
    let list = tokio::spawn(async move {
        lister.get(&format!("{CMS}?resourceVersion={next}&resourceVersionMatch=NotOlderThan")).await
    });
    raw.create("late", json!({})).await;
    let r = list.await.expect("list task");
    assert_eq!(r.code, 200, "{}", r.body);
    assert!(rv(&r.body) >= next);
    assert!(names(&r.body).contains(&"late".to_string()));
}

// ---------------------------------------------------------------------------------------------
// ListOptions validation (apimachinery internalversion/validation, validation_test.go
// `TestValidateListOptions`, WatchList enabled).

/// Ports validation_test.go `TestValidateListOptions` ("resourceVersionMatch without
/// resourceVersion").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_match_without_resource_version_is_invalid() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    assert_list_options_invalid(
        &raw,
        "resourceVersionMatch=NotOlderThan",
        "resourceVersionMatch",
        "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
    )
    .await;
}

/// Ports validation_test.go `TestValidateListOptions` ("Exact with resourceVersion=0").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_exact_with_resource_version_zero_is_invalid() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    assert_list_options_invalid(
        &raw,
        "resourceVersion=0&resourceVersionMatch=Exact",
        "resourceVersionMatch",
        "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
    )
    .await;
}

/// Ports validation_test.go `TestValidateListOptions` (unsupported match value).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_unknown_match_is_unsupported() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    assert_list_options_invalid(
        &raw,
        "resourceVersion=5&resourceVersionMatch=Newest",
        "resourceVersionMatch",
        "Unsupported value: \"Newest\": supported values: \"Exact\", \"NotOlderThan\", \"\"",
    )
    .await;
}

/// Ports validation_test.go `TestValidateListOptions` ("sendInitialEvents is forbidden for
/// list").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_with_send_initial_events_is_invalid() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    assert_list_options_invalid(
        &raw,
        "sendInitialEvents=true",
        "sendInitialEvents",
        "Forbidden: sendInitialEvents is forbidden for list",
    )
    .await;
}

/// Ports validation_test.go `TestValidateListOptions` (watch: "sendInitialEvents requires
/// setting resourceVersionMatch to NotOlderThan").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_send_initial_events_without_match_is_invalid() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    assert_list_options_invalid(
        &raw,
        "watch=true&sendInitialEvents=true",
        "resourceVersionMatch",
        "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
    )
    .await;
}

/// Ports validation_test.go `TestValidateListOptions` (watch: "resourceVersionMatch is forbidden
/// for watch unless sendInitialEvents is provided").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_match_without_send_initial_events_is_invalid() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    assert_list_options_invalid(
        &raw,
        "watch=true&resourceVersionMatch=NotOlderThan",
        "resourceVersionMatch",
        "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
    )
    .await;
}

/// Ports store_tests.go `RunTestListContinuation`'s storage checks (storage
/// `ValidateListOptions`): continue with a resourceVersion other than "" or "0" is 400, and
/// continue with resourceVersionMatch fails validation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_with_a_resource_version_is_rejected() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    for i in 0..3 {
        raw.create(&format!("k{i}"), json!({})).await;
    }
    let first = raw.get(&format!("{CMS}?limit=1")).await;
    let cont = first.body["metadata"]["continue"].as_str().expect("continue").to_string();
    let r = raw
        .get(&format!("{CMS}?limit=1&continue={cont}&resourceVersion={}", rv(&first.body)))
        .await;
    assert_eq!(r.code, 400, "{}", r.body);
    assert_eq!(r.body["reason"], "BadRequest");
    assert_eq!(r.body["message"], "specifying resource version is not allowed when using continue");
    let r = raw
        .get(&format!(
            "{CMS}?limit=1&continue={cont}&resourceVersion=5&resourceVersionMatch=NotOlderThan"
        ))
        .await;
    assert_eq!(r.code, 422, "{}", r.body);
    assert!(
        r.body["message"].as_str().is_some_and(
            |m| m.contains("resourceVersionMatch is forbidden when continue is provided")
        ),
        "{}",
        r.body
    );
}

/// Ports k8s.io/apiserver/pkg/storage/continue_test.go `Test_decodeContinue`: malformed tokens,
/// a zero resourceVersion and an unknown encoding version are 400 "invalid continue token";
/// tokens are unpadded URL-safe base64, usable in a URL as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_continue_tokens_are_400() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    let enc = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let cases = [
        ("%21%21".to_string(), None),
        (
            enc(json!({"v": "meta.k8s.io/v1", "rv": 0, "start": "default/a"})),
            Some(": incorrect encoded start resourceVersion (version meta.k8s.io/v1)"),
        ),
        (
            enc(json!({"v": "v0", "rv": 5, "start": "default/a"})),
            Some(": server does not recognize this encoded version"),
        ),
        (
            enc(json!({"v": "meta.k8s.io/v1", "rv": 5, "start": ""})),
            Some(": encoded start key empty (version meta.k8s.io/v1)"),
        ),
    ];
    for (tok, why) in cases {
        let r = raw.get(&format!("{CMS}?limit=1&continue={tok}")).await;
        assert_eq!(r.code, 400, "{tok}: {}", r.body);
        let msg = r.body["message"].as_str().expect("message");
        assert!(msg.starts_with("invalid continue token: continue key is not valid"), "{msg}");
        if let Some(why) = why {
            assert_eq!(msg, format!("invalid continue token: continue key is not valid{why}"));
        }
    }
    for i in 0..3 {
        raw.create(&format!("t{i}"), json!({})).await;
    }
    let r = raw.get(&format!("{CMS}?limit=1")).await;
    let tok = r.body["metadata"]["continue"].as_str().expect("continue");
    assert!(tok.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'), "{tok}");
}

/// Ports kubectl's handling of the same validation (`kubectl get --raw`): the Status message
/// reaches the user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reports_list_options_validation() {
    let sb = common::sandbox().await;
    let out = common::kubectl(
        &sb,
        &["get", "--raw", "/api/v1/configmaps?resourceVersion=0&resourceVersionMatch=Exact"],
    )
    .await;
    assert!(!out.status.success());
    let err = common::stderr(&out);
    assert!(
        err.contains("resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Watch streams.

/// Ports cacher/cache_watcher_test.go `TestCacheWatcherHandlesFiltering`: an object that stops
/// matching the selector yields DELETED with its last matching state (at the event's version).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_watch_deleted_carries_the_last_matching_state() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    let rv0 = raw.create("a", json!({"tier": "web", "team": "x"})).await;
    let path = format!("{CMS}?watch=true&labelSelector=tier%3Dweb&resourceVersion={rv0}");
    let mut w = raw.open(&path).await;
    let moved = raw.relabel("a", json!({"tier": "db", "team": "y"})).await;
    let (evs, _) = w.read(Duration::from_secs(20), |evs| !evs.is_empty()).await;
    assert_eq!(types(&evs), vec!["DELETED"]);
    let o = &evs[0].0["object"];
    assert_eq!(o["metadata"]["labels"], json!({"tier": "web", "team": "x"}));
    assert_eq!(o["metadata"]["resourceVersion"], moved.to_string());
}

/// Ports cache_watcher_test.go `TestCacheWatcherHandlesFiltering`: an object that starts
/// matching yields ADDED with its new state, later changes MODIFIED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_watch_added_when_an_object_starts_matching() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    let rv0 = raw.create("a", json!({"tier": "db"})).await;
    let joined = raw.relabel("a", json!({"tier": "web"})).await;
    let changed = raw.update_data("a", "2").await;
    let path = format!("{CMS}?watch=true&labelSelector=tier%3Dweb&resourceVersion={rv0}");
    let (evs, _) = raw.watch(&path, Duration::from_secs(20), |evs| evs.len() >= 2).await;
    assert_eq!(types(&evs), vec!["ADDED", "MODIFIED"]);
    assert_eq!(evs[0].0["object"]["metadata"]["labels"]["tier"], "web");
    assert_eq!(evs[0].0["object"]["metadata"]["resourceVersion"], joined.to_string());
    assert_eq!(evs[1].0["object"]["metadata"]["resourceVersion"], changed.to_string());
}

/// Ports storage/testing/watcher_tests.go `RunTestWatchDeleteEventObjectHaveLatestRV`: the
/// DELETED object carries the deletion's resourceVersion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_delete_event_has_the_deletion_resource_version() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    let rv0 = raw.create("a", json!({})).await;
    let del = raw.delete(&format!("{CMS}/a")).await;
    assert_eq!(del.code, 200);
    let path = format!("{CMS}?watch=true&resourceVersion={rv0}");
    let (evs, _) = raw.watch(&path, Duration::from_secs(20), |evs| !evs.is_empty()).await;
    assert_eq!(types(&evs), vec!["DELETED"]);
    assert!(rv(&evs[0].0["object"]) > rv0);
    assert_eq!(rv(&evs[0].0["object"]), sb_current_rv(&raw).await);
    assert_eq!(evs[0].0["object"]["data"]["v"], "1");
}

fn crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    })
}

/// Ports apiextensions-apiserver test/integration/basic_test.go
/// `TestDeRegistrationAndReRegistration`: deleting a CRD ends its custom resources' watches
/// (after their DELETED events) and the resource answers 404 afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_deletion_closes_watches_and_the_resource_is_404() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let r = raw.send(reqwest::Method::POST, crds, Some(crd())).await;
    assert_eq!(r.code, 201, "{}", r.body);
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}});
    let created = common::wait_for("widgets served", Duration::from_secs(10), || {
        let (raw, w) = (&raw, w.clone());
        async move {
            let r = raw.send(reqwest::Method::POST, widgets, Some(w)).await;
            (r.code == 201).then_some(r.body)
        }
    })
    .await;
    let path = format!("{widgets}?watch=true&resourceVersion={}", rv(&created));
    let mut w = raw.open(&path).await;
    raw.send(
        reqwest::Method::POST,
        widgets,
        Some(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w2"}})),
    )
    .await;
    let r = raw.delete(&format!("{crds}/widgets.example.com")).await;
    assert_eq!(r.code, 200, "{}", r.body);
    let (evs, ended) = w.read(Duration::from_secs(20), |_| false).await;
    assert!(ended, "the server ended the watch: {evs:?}");
    assert_eq!(types(&evs)[0], "ADDED");
    let t = types(&evs);
    assert_eq!(t.iter().filter(|t| *t == "DELETED").count(), 2, "{t:?}");
    for path in [format!("{widgets}?watch=true"), widgets.to_string()] {
        let r = raw.get(&path).await;
        assert_eq!(r.code, 404, "{path}: {}", r.body);
    }
}

/// Ports cacher/cacher_test.go `testCacherSendBookmarkEvents` and cache_watcher.go
/// `nextBookmarkTime`: with allowWatchBookmarks, a BOOKMARK comes about 2 s before the watch's
/// timeoutSeconds ends (the periodic interval being far away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmark_two_seconds_before_the_watch_timeout() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    let cur = sb_current_rv(&raw).await;
    let path =
        format!("{CMS}?watch=true&resourceVersion={cur}&allowWatchBookmarks=true&timeoutSeconds=4");
    let (evs, ended) = raw.watch(&path, Duration::from_secs(15), |_| false).await;
    assert!(ended, "the stream ends at timeoutSeconds");
    assert_eq!(types(&evs), vec!["BOOKMARK"]);
    let at = evs[0].1;
    assert!(at >= Duration::from_millis(1500) && at < Duration::from_millis(3500), "{at:?}");
    assert_eq!(evs[0].0["object"]["metadata"]["resourceVersion"], cur.to_string());
    assert_eq!(evs[0].0["object"]["kind"], "ConfigMap");
}

/// Ports cacher_test.go `testCacherSendBookmarkEvents` (allowWatchBookmarks=false: no
/// bookmarks) and the WatchList rule that the initial-events-end marker is a bookmark: without
/// allowWatchBookmarks neither periodic nor initial-events-end bookmarks are sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_bookmarks_without_allow_watch_bookmarks() {
    let sb = common::sandbox_with(SandboxOptions {
        bookmark_interval: Duration::from_millis(100),
        ..Default::default()
    })
    .await;
    let raw = Raw::new(&sb);
    raw.create("a", json!({"app": "nb"})).await;
    let path = format!(
        "{CMS}?watch=true&labelSelector=app%3Dnb&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=3"
    );
    let (evs, ended) = raw.watch(&path, Duration::from_secs(15), |_| false).await;
    assert!(ended);
    assert_eq!(types(&evs), vec!["ADDED"], "no BOOKMARK of any kind");
}

/// Ports storage/testing/watcher_tests.go `RunWatchSemantics` (sendInitialEvents=true,
/// NotOlderThan) and API concepts "Streaming lists": initial ADDED events, then a BOOKMARK
/// annotated `k8s.io/initial-events-end: "true"` at the state's resourceVersion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_list_ends_initial_events_with_an_annotated_bookmark() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    for i in 0..3 {
        raw.create(&format!("s{i}"), json!({"app": "sl"})).await;
    }
    let cur = sb_current_rv(&raw).await;
    let path = format!(
        "{CMS}?watch=true&labelSelector=app%3Dsl&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    );
    let (evs, _) = raw.watch(&path, Duration::from_secs(20), |evs| evs.len() >= 4).await;
    assert_eq!(types(&evs), vec!["ADDED", "ADDED", "ADDED", "BOOKMARK"]);
    let bm = &evs[3].0["object"];
    assert_eq!(bm["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    assert_eq!(bm["metadata"]["resourceVersion"], cur.to_string());
}

/// Ports cacher_test.go `TestWaitUntilWatchCacheFreshAndForceAllEvents`: a streaming list for a
/// version the server never reaches fails with 504 "Too large resource version" instead of a
/// stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_list_from_a_future_version_is_504() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    let cur = sb_current_rv(&raw).await;
    let future = cur + 500;
    let r = raw
        .get(&format!(
            "{CMS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion={future}"
        ))
        .await;
    assert_eq!(r.code, 504, "{}", r.body);
    assert_eq!(r.body["reason"], "Timeout");
    assert_eq!(
        r.body["message"],
        format!("Timeout: Too large resource version: {future}, current: {cur}")
    );
}

/// Ports cacher_test.go `TestEmptyWatchEventCache` (the "RV+1" case): a plain watch from a
/// version the server has not reached is accepted at once and delivers only changes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_ahead_of_the_store_delivers_only_later_changes() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    let cur = sb_current_rv(&raw).await;
    let mut w = raw.open(&format!("{CMS}?watch=true&resourceVersion={}", cur + 2)).await;
    let mut made = vec![];
    for name in ["one", "two", "three"] {
        made.push(raw.create(name, json!({})).await);
    }
    assert_eq!(made[1], cur + 2, "nothing else writes meanwhile");
    let (evs, _) = w.read(Duration::from_secs(20), |evs| !evs.is_empty()).await;
    assert_eq!(types(&evs), vec!["ADDED"]);
    assert_eq!(evs[0].0["object"]["metadata"]["name"], "three");
}

/// Ports watcher_tests.go `RunWatchSemantics` (sendInitialEvents=false with resourceVersion
/// unset): no initial state, only changes from now on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_without_initial_events_starts_from_now() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    raw.create("old", json!({"app": "ni"})).await;
    let path = format!(
        "{CMS}?watch=true&labelSelector=app%3Dni&sendInitialEvents=false&resourceVersionMatch=NotOlderThan"
    );
    let mut w = raw.open(&path).await;
    raw.create("new", json!({"app": "ni"})).await;
    let (evs, _) = w.read(Duration::from_secs(20), |evs| !evs.is_empty()).await;
    assert_eq!(types(&evs), vec!["ADDED"]);
    assert_eq!(evs[0].0["object"]["metadata"]["name"], "new");
}

/// Ports API concepts "410 Gone responses" (and the watch cache's `getAllEventsSinceLocked`,
/// "too old resource version"): with a small event history (`SandboxOptions::watch_history`), a
/// watch from a version that fell out of it gets an ERROR event with 410 Expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_a_version_outside_the_event_history_is_410() {
    let sb = sandbox_with_history(5).await;
    let raw = Raw::new(&sb);
    let rv1 = raw.create("a", json!({})).await;
    for i in 0..10 {
        raw.create(&format!("b{i}"), json!({})).await;
    }
    let (evs, ended) = raw
        .watch(&format!("{CMS}?watch=true&resourceVersion={rv1}"), Duration::from_secs(10), |_| {
            false
        })
        .await;
    assert!(ended);
    assert_eq!(types(&evs), vec!["ERROR"]);
    assert_eq!(evs[0].0["object"]["code"], 410);
    assert_eq!(evs[0].0["object"]["reason"], "Expired");
}

/// `ksync-sandbox serve --event-history N` bounds the window for kubectl too (API concepts "410
/// Gone responses", watched with `kubectl get --raw`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_event_history_flag_bounds_the_window() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = dir.path().join("kubeconfig");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ksync-sandbox"))
        .args(["serve", "--listen", "127.0.0.1:0", "--event-history", "3", "--kubeconfig"])
        .arg(&kc)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn ksync-sandbox");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("ready");
    assert!(line.starts_with("ready "), "{line}");
    let kubectl = |args: &[&str]| {
        std::process::Command::new(common::KUBECTL)
            .arg("--kubeconfig")
            .arg(&kc)
            .args(args)
            .output()
            .expect("kubectl")
    };
    let out =
        kubectl(&["create", "configmap", "first", "-o", "jsonpath={.metadata.resourceVersion}"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rv1 = String::from_utf8_lossy(&out.stdout).to_string();
    for i in 0..5 {
        assert!(kubectl(&["create", "configmap", &format!("more{i}")]).status.success());
    }
    let out = kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv1}"),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let ev: Value = serde_json::from_str(text.lines().next().expect("one event")).expect("json");
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["code"], 410);
    let _ = child.kill();
    let _ = child.wait();
}

/// Ports API concepts "Retrieving large results sets in chunks" (`kubectl get --chunk-size`):
/// kubectl pages through continue tokens and shows every object once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_chunked_get_lists_every_object_once() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    for i in 0..11 {
        raw.create(&format!("k{i:02}"), json!({"app": "chunk"})).await;
    }
    let out =
        common::kubectl_ok(&sb, &["get", "cm", "-l", "app=chunk", "--chunk-size=3", "-o", "name"])
            .await;
    let got: Vec<&str> = out.lines().collect();
    let want: Vec<String> = (0..11).map(|i| format!("configmap/k{i:02}")).collect();
    assert_eq!(got, want);
}

/// Ports the reflector contract of client-go's reflector_test.go `TestReflectorListAndWatch` /
/// `TestReflectorFullListIfExpired` against the storage snapshot rule (store_tests.go
/// `RunTestListContinuation`): a kube-rs reflector listing 2,000 objects in pages of 100 while
/// objects are created, changed and deleted converges to exactly the live set, and no object
/// ever goes back to an older resourceVersion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_over_paged_lists_converges_under_churn() {
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let mk = |name: String| -> ConfigMap {
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"app": "churn"}}, "data": {"v": "0"}}),
        )
        .expect("cm")
    };
    const N: usize = 2000;
    futures::stream::iter(0..N)
        .map(|i| {
            let (cms, o) = (cms.clone(), mk(format!("o{i:04}")));
            async move { cms.create(&PostParams::default(), &o).await.map(|_| ()) }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .expect("create objects");

    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let churn = {
        let (cms, done) = (cms.clone(), done.clone());
        tokio::spawn(async move {
            // From the end of the key range down, so that the pages still to come are hit;
            // two changes per object, so that a page showing the second and a watch replaying
            // the first would take the object back in time.
            for i in 0..300usize {
                let new = format!("p{i:04}");
                cms.create(&PostParams::default(), &mk(new)).await.expect("create");
                cms.delete(&format!("o{:04}", N - 1 - 3 * i), &DeleteParams::default())
                    .await
                    .expect("delete");
                for step in 0..2 {
                    cms.patch(
                        &format!("o{:04}", N - 2 - 3 * i),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"data": {"v": format!("{i}-{step}")}})),
                    )
                    .await
                    .expect("patch");
                }
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    // Start the reflector while the churn is under way.
    common::wait_for("churn started", Duration::from_secs(30), || {
        let n = done.load(std::sync::atomic::Ordering::SeqCst);
        async move { (n >= 5).then_some(()) }
    })
    .await;

    let seen: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let regressions: Arc<Mutex<Vec<String>>> = Arc::default();
    let (reader, writer) = kube::runtime::reflector::store::<ConfigMap>();
    // Whether a full paged list ended while the churn was still going.
    let overlapped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stream = {
        let (seen, regressions) = (seen.clone(), regressions.clone());
        let (done, overlapped) = (done.clone(), overlapped.clone());
        watcher(cms.clone(), watcher::Config::default().labels("app=churn").page_size(100)).map_ok(
            move |ev| {
                let check = |o: &ConfigMap| {
                    let name = o.metadata.name.clone().unwrap_or_default();
                    let v: u64 = o
                        .metadata
                        .resource_version
                        .as_deref()
                        .and_then(|r| r.parse().ok())
                        .unwrap_or(0);
                    let mut s = seen.lock().expect("seen");
                    let last = s.entry(name.clone()).or_insert(0);
                    if v < *last {
                        regressions
                            .lock()
                            .expect("regressions")
                            .push(format!("{name}: {last} -> {v}"));
                    }
                    *last = (*last).max(v);
                };
                match &ev {
                    watcher::Event::Apply(o)
                    | watcher::Event::InitApply(o)
                    | watcher::Event::Delete(o) => check(o),
                    watcher::Event::InitDone => {
                        if done.load(std::sync::atomic::Ordering::SeqCst) < 300 {
                            overlapped.store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                    }
                    watcher::Event::Init => {}
                }
                ev
            },
        )
    };
    let rf = kube::runtime::reflector(writer, stream);
    let task = tokio::spawn(rf.for_each(|_| async {}));
    churn.await.expect("churn");

    let live: BTreeMap<String, String> = cms
        .list(&ListParams::default().labels("app=churn"))
        .await
        .expect("list")
        .items
        .into_iter()
        .map(|c| {
            (c.metadata.name.unwrap_or_default(), c.metadata.resource_version.unwrap_or_default())
        })
        .collect();
    assert_eq!(live.len(), N, "300 created, 300 deleted");
    common::wait_for("reflector converged", Duration::from_secs(60), || {
        let got: BTreeMap<String, String> = reader
            .state()
            .iter()
            .map(|c| {
                (
                    c.metadata.name.clone().unwrap_or_default(),
                    c.metadata.resource_version.clone().unwrap_or_default(),
                )
            })
            .collect();
        let ok = got == live;
        async move { ok.then_some(()) }
    })
    .await;
    task.abort();
    assert!(overlapped.load(std::sync::atomic::Ordering::SeqCst), "the list ran during the churn");
    let r = regressions.lock().expect("regressions").clone();
    assert!(r.is_empty(), "objects went back in time: {r:?}");
}

/// Ports apiserver/test/integration `TestMetadataClient` (handlers/response.go
/// `transformResponseObject`): with `Accept: ...;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`
/// a get, a list and a watch answer the objects' metadata only, as kube-rs' `get_metadata`,
/// `list_metadata` and `metadata_watcher` ask; the wrong kind of the two is 406 NotAcceptable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_get_list_and_watch() {
    let sb = common::sandbox().await;
    let raw = Raw::new(&sb);
    raw.create("a", json!({"app": "x"})).await;
    raw.create("b", json!({"app": "y"})).await;
    let client = sb.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");

    let one = cms.get_metadata("a").await.expect("get_metadata");
    let types = one.types.as_ref().expect("types");
    assert_eq!(
        (types.api_version.as_str(), types.kind.as_str()),
        ("meta.k8s.io/v1", "PartialObjectMetadata")
    );
    assert_eq!(
        one.metadata.labels.as_ref().and_then(|l| l.get("app")).map(String::as_str),
        Some("x")
    );

    let list =
        cms.list_metadata(&ListParams::default().labels("app=y")).await.expect("list_metadata");
    let names: Vec<_> = list.items.iter().filter_map(|o| o.metadata.name.clone()).collect();
    assert_eq!(names, vec!["b".to_string()]);
    assert_eq!(list.types.kind, "PartialObjectMetadataList");
    assert!(list.metadata.resource_version.is_some());

    // An `Api` of `PartialObjectMeta` watches metadata only (kube-rs' metadata watcher).
    let metadata: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::namespaced(cms.clone().into_client(), "default");
    let mut events = std::pin::pin!(watcher(metadata, watcher::Config::default().labels("app=x")));
    let first = loop {
        match events.try_next().await.expect("watch").expect("an event") {
            watcher::Event::InitApply(o) => break o,
            _ => continue,
        }
    };
    assert_eq!(first.metadata.name.as_deref(), Some("a"));
    assert_eq!(first.types.as_ref().map(|t| t.kind.as_str()), Some("PartialObjectMetadata"));

    // The same requests raw: metadata only, nothing else of the object.
    let get = |path: String, accept: &'static str| {
        let raw = &raw;
        async move {
            let r = raw
                .http
                .get(format!("{}{path}", raw.base))
                .bearer_auth(&raw.token)
                .header("accept", accept)
                .send()
                .await
                .expect("request");
            let code = r.status().as_u16();
            (code, r.json::<Value>().await.expect("json"))
        }
    };
    const OBJ: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    const LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let (code, body) = get(format!("{CMS}/a"), OBJ).await;
    assert_eq!(code, 200);
    assert_eq!(body["data"], Value::Null, "{body}");
    assert_eq!(body["metadata"]["name"], "a");
    let (code, body) = get(CMS.to_string(), LIST).await;
    assert_eq!(code, 200);
    assert_eq!(body["items"][0]["kind"], "PartialObjectMetadata", "{body}");
    assert_eq!(body["items"][0]["data"], Value::Null);
    for (path, accept, message) in [
        (
            CMS.to_string(),
            OBJ,
            "you requested PartialObjectMetadata, but the requested object is a list",
        ),
        (
            format!("{CMS}/a"),
            LIST,
            "you requested PartialObjectMetadataList, but the requested object is not a list",
        ),
    ] {
        let (code, body) = get(path, accept).await;
        assert_eq!((code, body["reason"].as_str()), (406, Some("NotAcceptable")), "{body}");
        assert!(body["message"].as_str().is_some_and(|m| m.starts_with(message)), "{body}");
    }
}
