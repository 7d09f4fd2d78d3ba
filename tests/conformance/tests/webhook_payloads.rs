//! Runs `kuvryn_sync_core::receiver` on the hook payloads that GitHub, GitLab, distribution, Harbor
//! and Docker Hub publish (`$KSYNC_CONFORMANCE_DATA/fixtures/webhooks/`).
//!
//! GitHub's documented HMAC test vector (`github/DELIVERY.yaml`) is checked first, by every test
//! that signs anything, so a signature check that agrees with itself but not with GitHub cannot
//! pass. Then every payload file is read by the parser of its sender: GitHub pushes are parsed
//! and other events acknowledged, GitLab push and tag push hooks are parsed, and registry
//! notifications yield exactly their pushes. A signature (GitHub) or token (GitLab) made for each
//! Git payload is accepted, and a one-byte change refused. A payload file no test claims fails
//! the suite, so a new fixture needs a decision.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kuvryn_sync_conformance::fixture;
use kuvryn_sync_core::receiver::{
    self, GitHookEvent, GitProvider, ImageEvent, PushEvent, RegistryFormat,
};
use serde_json::Value;

/// The hook fixtures, relative to `fixtures/`.
const WEBHOOKS: &str = "webhooks";

/// The secret of GitHub's documented vector, checked against the vector before every use.
fn github_docs_secret() -> Vec<u8> {
    let delivery: serde_json::Value = yaml(&fixture("webhooks/github/DELIVERY.yaml"));
    let vector = &delivery["hmac_test_vector_from_docs"];
    let text = |key: &str| {
        vector[key].as_str().unwrap_or_else(|| panic!("DELIVERY.yaml: vector `{key}`")).to_owned()
    };
    let (secret, payload) = (text("secret"), text("payload"));
    let header = text("X-Hub-Signature-256");
    assert_eq!(
        header,
        format!("sha256={}", text("signature_hex")),
        "the vector agrees with itself"
    );
    assert_eq!(
        receiver::github_signature(secret.as_bytes(), payload.as_bytes()),
        header,
        "our signature of GitHub's documented payload"
    );
    receiver::verify_github(secret.as_bytes(), payload.as_bytes(), Some(&header))
        .expect("GitHub's documented signature verifies");
    assert!(
        receiver::verify_github(secret.as_bytes(), b"Hello, World?", Some(&header)).is_err(),
        "a changed payload is refused"
    );
    secret.into_bytes()
}

fn yaml(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("{} must be readable: {err}", path.display()));
    kuvryn_sync_core::yaml::document(&text)
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|err| panic!("{} must be readable: {err}", path.display()))
}

/// Every payload file under `webhooks/<sender>/`, relative to `webhooks/`.
fn payloads(sender: &str) -> Vec<String> {
    let root = fixture(WEBHOOKS);
    let mut found = Vec::new();
    let mut dirs = vec![root.join(sender)];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read fixture dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if is_payload(&path) {
                found.push(relative(&root, &path));
            }
        }
    }
    found.sort();
    assert!(!found.is_empty(), "no payloads under {WEBHOOKS}/{sender}");
    found
}

fn is_payload(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("json" | "jsonc"))
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).expect("under the root").to_string_lossy().into_owned()
}

fn webhook_file(relative: &str) -> PathBuf {
    fixture(WEBHOOKS).join(relative)
}

/// The body with one byte changed, in the middle.
fn one_byte_changed(body: &[u8]) -> Vec<u8> {
    let mut changed = body.to_vec();
    let middle = changed.len() / 2;
    changed[middle] ^= 0x01;
    changed
}

/// The `X-GitHub-Event` a payload file is an example of, from its name.
fn github_event(file_name: &str) -> &'static str {
    const EVENTS: &[(&str, &str)] = &[
        ("registry_package", "registry_package"),
        ("package", "package"),
        ("push", "push"),
        ("ping", "ping"),
        ("create", "create"),
        ("delete", "delete"),
    ];
    EVENTS
        .iter()
        .find(|(prefix, _)| file_name.starts_with(prefix))
        .map(|(_, event)| *event)
        .unwrap_or_else(|| panic!("no X-GitHub-Event known for fixture {file_name}"))
}

/// What a push payload itself says it moved: `ref`, and `after` unless the ref was deleted.
fn expected_push(payload: &Value, commit_key: &str) -> PushEvent {
    let refname = payload["ref"].as_str().expect("payload ref").to_owned();
    let commit = payload[commit_key]
        .as_str()
        .filter(|c| c.chars().any(|d| d != '0'))
        .map(str::to_ascii_lowercase);
    PushEvent { refname, commit }
}

#[test]
fn github_documented_signatures_of_the_fixtures_verify() {
    let secret = github_docs_secret();
    let delivery = yaml(&fixture("webhooks/github/DELIVERY.yaml"));
    let derived = delivery["derived_signatures"].as_object().expect("derived_signatures");
    let mut verified = Vec::new();
    for (file, signature) in derived {
        let (file, Some(signature)) = (file.as_str(), signature.as_str()) else {
            panic!("derived_signatures entries are strings");
        };
        // Entries that are not payload paths (the sha1 form of the docs vector) and payloads the
        // collector described but did not ship are not checked.
        let path = fixture("webhooks/github").join(file);
        if !file.ends_with(".json") || !path.is_file() {
            continue;
        }
        let body = read(&path);
        receiver::verify_github(&secret, &body, Some(signature))
            .unwrap_or_else(|_| panic!("the documented signature of {file} verifies"));
        assert!(
            receiver::verify_github(&secret, &one_byte_changed(&body), Some(signature)).is_err()
        );
        verified.push(file.to_owned());
    }
    assert!(
        verified.contains(&"octokit-webhooks/push_payload.json".to_owned())
            && verified.contains(&"go-playground-webhooks/push.json".to_owned()),
        "verified {verified:?}"
    );
}

#[test]
fn every_github_payload_is_parsed_as_its_event() {
    let secret = github_docs_secret();
    for file in payloads("github") {
        let body = read(&webhook_file(&file));
        let name = Path::new(&file).file_name().and_then(|n| n.to_str()).expect("file name");
        let event = github_event(name);

        let signature = receiver::github_signature(&secret, &body);
        let credential = receiver::git_credential(Some(&signature), None);
        assert_eq!(
            receiver::verify_git(&secret, &body, credential),
            Ok(GitProvider::GitHub),
            "{file}"
        );
        let changed = one_byte_changed(&body);
        assert!(receiver::verify_git(&secret, &changed, credential).is_err(), "{file} changed");

        let parsed = receiver::parse_push(GitProvider::GitHub, Some(event), &body)
            .unwrap_or_else(|err| panic!("{file} as {event}: {err}"));
        let expected = match event {
            "push" => {
                let payload: Value = serde_json::from_slice(&body).expect("JSON");
                GitHookEvent::Push(expected_push(&payload, "after"))
            }
            "ping" => GitHookEvent::Ping,
            _ => GitHookEvent::Other,
        };
        assert_eq!(parsed, expected, "{file} as {event}");
    }
}

#[test]
fn github_fixture_pushes_match_only_their_own_ref() {
    let body = read(&webhook_file("github/go-playground-webhooks/push.json"));
    let GitHookEvent::Push(push) =
        receiver::parse_push(GitProvider::GitHub, Some("push"), &body).expect("push")
    else {
        panic!("a push");
    };
    assert_eq!(push.commit.as_deref(), Some("fd489864e7642b48eaad6e3f155c10e46810ec72"));
    assert!(receiver::push_matches(&push, &["master"]));
    assert!(!receiver::push_matches(&push, &["main", "refs/tags/master"]));

    let deletion = read(&webhook_file("github/octokit-webhooks/push_payload.json"));
    let GitHookEvent::Push(push) =
        receiver::parse_push(GitProvider::GitHub, Some("push"), &deletion).expect("push")
    else {
        panic!("a push");
    };
    assert_eq!((push.refname.as_str(), push.commit), ("refs/tags/simple-tag", None));
}

#[test]
fn every_gitlab_payload_is_parsed_and_its_token_checked() {
    let token = b"gitlab-conformance-token";
    for file in payloads("gitlab") {
        let raw: Value = serde_json::from_slice(&read(&webhook_file(&file))).expect("JSON");
        // A recorded delivery carries its headers and body; a docs example is the body alone, and
        // its name says which hook it shows.
        let (event, payload) = match raw.get("request_data") {
            Some(data) => {
                let event = raw["request_headers"]["X-Gitlab-Event"].as_str().expect("header");
                (event.to_owned(), data.clone())
            }
            None if file.contains("tag") => ("Tag Push Hook".to_owned(), raw),
            None => ("Push Hook".to_owned(), raw),
        };
        let body = serde_json::to_vec(&payload).expect("body");
        let presented = std::str::from_utf8(token).expect("utf-8");
        let credential = receiver::git_credential(None, Some(presented));
        assert_eq!(
            receiver::verify_git(token, &body, credential),
            Ok(GitProvider::GitLab),
            "{file}"
        );
        let changed = String::from_utf8(one_byte_changed(token)).expect("utf-8");
        assert!(receiver::verify_gitlab(token, Some(&changed)).is_err(), "{file}");

        let parsed = receiver::parse_push(GitProvider::GitLab, Some(&event), &body)
            .unwrap_or_else(|err| panic!("{file} as {event}: {err}"));
        assert_eq!(parsed, GitHookEvent::Push(expected_push(&payload, "checkout_sha")), "{file}");
    }
}

fn registry_events(file: &str) -> Vec<ImageEvent> {
    let bytes = read(&webhook_file(file));
    let body = if file.ends_with(".jsonc") { strip_line_comments(&bytes) } else { bytes };
    receiver::parse_registry_notification(&body).unwrap_or_else(|err| panic!("{file}: {err}"))
}

/// Harbor's documentation annotates one example with `//` comment lines, which no delivery
/// carries; drop them to get the delivered JSON.
fn strip_line_comments(bytes: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(bytes).expect("UTF-8");
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
        .into_bytes()
}

fn image(
    format: RegistryFormat,
    host: Option<&str>,
    repository: &str,
    tag: Option<&str>,
    digest: Option<&str>,
) -> ImageEvent {
    ImageEvent {
        format,
        host: host.map(Into::into),
        repository: repository.into(),
        tag: tag.map(Into::into),
        digest: digest.map(Into::into),
    }
}

#[test]
fn every_registry_notification_yields_exactly_its_pushes() {
    use RegistryFormat::*;
    const MANIFEST: &str =
        "sha256:fea8895f450959fa676bcc1df0611ea93823a735a01205fd8622846041d0c7cf";
    const LAYER: &str = "sha256:c3b3692957d439ac1928219a83fac91e7bf96c153725526874673ae1f2023f8d5";
    const ALPINE: &str = "sha256:954b378c375d852eb3c63ab88978f640b4348b01c1b3456a024a81536dafbbf4";
    let harbor_push = vec![image(Harbor, Some("localhost"), "harbor/alpine", None, Some(ALPINE))];
    let hub_push = vec![image(DockerHub, None, "svendowideit/testhook", Some("latest"), None)];
    let registry = "registrycluster.local";
    let expected: Vec<(&str, Vec<ImageEvent>)> = vec![
        (
            "distribution/envelope.push.notifications-md.json",
            vec![
                image(Distribution, Some(registry), "library/test", None, Some(MANIFEST)),
                image(Distribution, Some(registry), "library/test", None, Some(LAYER)),
                image(Distribution, Some(registry), "library/test", None, Some(LAYER)),
            ],
        ),
        ("distribution/envelope.pull.notifications-md.json", vec![]),
        ("harbor/artifact-pushed.default.json", harbor_push.clone()),
        ("harbor/artifact-pushed.cloudevents.jsonc", harbor_push),
        ("harbor/artifact-deleted.default.json", vec![]),
        ("harbor/artifact-deleted.cloudevents.json", vec![]),
        ("harbor/scanning-completed.default.json", vec![]),
        ("harbor/scanning-completed.cloudevents.json", vec![]),
        ("harbor/replication-status-changed.default.json", vec![]),
        ("harbor/replication-status-changed.cloudevents.json", vec![]),
        ("dockerhub/push.docs-docker-com.json", hub_push.clone()),
        ("dockerhub/push.go-playground-webhooks.json", hub_push),
    ];
    let claimed: BTreeSet<String> = expected.iter().map(|(file, _)| (*file).to_owned()).collect();
    let present: BTreeSet<String> =
        ["distribution", "harbor", "dockerhub"].iter().flat_map(|s| payloads(s)).collect();
    assert_eq!(present, claimed, "every registry fixture has an expectation, and only those");
    for (file, events) in expected {
        assert_eq!(registry_events(file), events, "{file}");
    }
}

#[test]
fn distribution_documents_the_bearer_header_we_accept() {
    let headers = std::fs::read_to_string(webhook_file(
        "distribution/envelope.push.notifications-md.http-headers.txt",
    ))
    .expect("headers");
    let authorization = headers
        .lines()
        .find_map(|line| line.strip_prefix("Authorization: "))
        .expect("an Authorization header in the documented request");
    assert!(authorization.starts_with("Bearer "), "{authorization}");
    let token = b"registry-token";
    assert!(receiver::verify_bearer(token, Some("Bearer registry-token")).is_ok());
    assert!(receiver::verify_bearer(token, Some("Bearer registry-tokem")).is_err());
}

#[test]
fn every_payload_file_is_claimed_by_a_test() {
    let all = {
        let root = fixture(WEBHOOKS);
        let mut found = BTreeSet::new();
        for sender in std::fs::read_dir(&root).expect("webhooks dir") {
            let sender = sender.expect("entry").file_name().to_string_lossy().into_owned();
            if fixture(WEBHOOKS).join(&sender).is_dir() {
                found.extend(payloads(&sender));
            }
        }
        found
    };
    let senders: BTreeSet<&str> = all.iter().filter_map(|file| file.split('/').next()).collect();
    let known: BTreeSet<&str> =
        ["github", "gitlab", "distribution", "harbor", "dockerhub"].into_iter().collect();
    assert_eq!(senders, known, "a sender without a test");
}
