//! Fuzz harnesses: one function for each kind of untrusted input the controller and the webhook
//! read, run through the same public functions the processes use. The cargo-fuzz targets in
//! `fuzz/` (nightly, outside the workspace) call them with generated inputs; the test
//! `tests/corpus_replay.rs` calls them with every input kept in `fuzz/corpus/<target>/` and
//! `fuzz/regressions/<target>/` on the stable toolchain, so the corpora and every crash found
//! replay in `scripts/test`.
//!
//! A harness must not panic on any input. Beyond "no panic", each states what must hold for
//! every input (an `assert!` here is a property the fuzzer searches against): the webhook never
//! lets an audit annotation change without writing it itself, a GitHub signature verifies only
//! for the body it was made over, an image marker edit is idempotent, and so on.
//!
//! Inputs with several parts (a header and a body, an expression and an object) are split at NUL
//! bytes: [`parts`].

use std::collections::BTreeMap;
use std::sync::OnceLock;

use kube_core::DynamicObject;
use kube_core::admission::{AdmissionRequest, AdmissionReview};
use kuvryn_sync_api::{HealthCheckSpec, Repository, keys};
use kuvryn_sync_core::admission::{
    APPROVAL_AUDIT, AnnotationEdit, ApplicationRequest, ROLLBACK_AUDIT, RevisionFacts, Verdict,
    canonical_sync_and_strategy, review_application, revisions_to_read,
};
use kuvryn_sync_core::discovery::{parse_config_file, plan_discovery, validate_config_paths};
use kuvryn_sync_core::image_update::{PolicyImage, split_reference, update_file};
use kuvryn_sync_core::receiver::{
    GitProvider, github_signature, image_hook_outcome, parse_push, parse_registry_notification,
    push_action, verify_github, verify_gitlab, verify_image_hook,
};
use kuvryn_sync_core::{health_rules, redact::Redactor};
use kuvryn_sync_render::kustomize::{check_source_path, is_remote_entry};
use kuvryn_sync_render::references::{entry_path, kustomization_references, plugin_references};
use kuvryn_sync_render::sops::{AgeKeys, SopsFormat, decrypt, is_encrypted};
use secrecy::ExposeSecret;
use serde_json::Value;

/// A harness: takes any bytes, panics only when a property it states does not hold.
pub type Harness = fn(&[u8]);

/// Every harness, by the name of its cargo-fuzz target (`fuzz/fuzz_targets/<name>.rs`) and of its
/// corpus folder.
pub const TARGETS: &[(&str, Harness)] = &[
    ("admission_review", admission_review),
    ("receiver_payloads", receiver_payloads),
    ("ksync_config", ksync_config),
    ("sops_document", sops_document),
    ("registry_replies", registry_replies),
    ("image_markers", image_markers),
    ("cel_rule", cel_rule),
    ("kustomize_refs", kustomize_refs),
    ("untrusted_yaml", untrusted_yaml),
];

/// `data` split at NUL bytes into exactly `n` parts (missing ones empty, the last takes the rest).
pub fn parts(data: &[u8], n: usize) -> Vec<&[u8]> {
    let mut split: Vec<&[u8]> = data.splitn(n, |b| *b == 0).collect();
    split.resize(n, &[]);
    split
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// An AdmissionReview as the webhook decodes it, then both admission decisions: HealthCheck
/// rules and the Application approval/rollback audit, with every Revision it names present
/// (the deepest path) and absent.
///
/// Property: an allowed request never sets or changes an audit annotation (approval or rollback)
/// to a value the webhook did not write itself (removing one is allowed: it withdraws).
pub fn admission_review(data: &[u8]) {
    let Ok(review) = serde_json::from_slice::<AdmissionReview<DynamicObject>>(data) else {
        return;
    };
    let Ok(request): Result<AdmissionRequest<DynamicObject>, _> = review.try_into() else {
        return;
    };
    let Some(object) = request.object.as_ref() else { return };
    let spec = object.data.get("spec").cloned().unwrap_or(Value::Null);
    if let Ok(checks) = serde_json::from_value::<HealthCheckSpec>(spec.clone()) {
        let _ = health_rules::validate(&checks);
    }
    let new = object.metadata.annotations.clone().unwrap_or_default();
    let old =
        request.old_object.as_ref().map(|o| o.metadata.annotations.clone().unwrap_or_default());
    let (sync, strategy) = canonical_sync_and_strategy(&spec);
    let application = ApplicationRequest {
        application: object.metadata.name.as_deref().unwrap_or(&request.name),
        old: old.as_ref(),
        new: &new,
        username: request.user_info.username.as_deref().unwrap_or_default(),
        now: "2026-12-02T00:00:00Z",
        sync: &sync,
        strategy: &strategy,
    };
    let named = revisions_to_read(&application);
    let present: BTreeMap<String, RevisionFacts> = named
        .iter()
        .map(|name| {
            let facts = RevisionFacts {
                application: application.application.to_owned(),
                commit: "0".repeat(40),
                plan_digest: new.get(keys::APPROVE_DIGEST).cloned(),
                deployed_desired_state_hash: Some(format!("sha256:{}", "0".repeat(64))),
            };
            (name.clone(), facts)
        })
        .collect();
    for revisions in [present, BTreeMap::new()] {
        if let Verdict::Allow(edits) = review_application(&application, &revisions) {
            audit_is_written_by_the_webhook(&application, &edits);
        }
    }
}

fn audit_is_written_by_the_webhook(request: &ApplicationRequest<'_>, edits: &[AnnotationEdit]) {
    for key in APPROVAL_AUDIT.iter().chain(ROLLBACK_AUDIT.iter()) {
        let written = edits.iter().rev().find_map(|edit| match edit {
            AnnotationEdit::Set(k, value) if k == key => Some(Some(value.as_str())),
            AnnotationEdit::Remove(k) if k == key => Some(None),
            _ => None,
        });
        let stored = match written {
            Some(value) => value,
            None => request.new.get(*key).map(String::as_str),
        };
        let before = request.old.and_then(|old| old.get(*key)).map(String::as_str);
        // Removing a record is allowed (it withdraws an approval, and the controller then waits
        // again); setting or changing one is the webhook's alone.
        assert!(
            written.is_some() || stored.is_none() || stored == before,
            "{key} changed from {before:?} to {stored:?} without the webhook writing it"
        );
    }
}

/// A Git push or registry notification body after an event header: GitHub's and GitLab's push
/// parsing, the decision on it, registry notifications, and every signature check.
///
/// Property: a GitHub signature verifies exactly when it is the one made over this body.
pub fn receiver_payloads(data: &[u8]) {
    let [header, body] = parts(data, 2)[..] else { return };
    let header = std::str::from_utf8(header).ok();
    for provider in [GitProvider::GitHub, GitProvider::GitLab] {
        if let Ok(event) = parse_push(provider, header, body) {
            let _ = push_action(&event, &["main", "refs/heads/release", "refs/tags/v1.0.0"]);
        }
    }
    if let Ok(events) = parse_registry_notification(body) {
        let _ = image_hook_outcome(&events);
    }
    let token = b"fuzz-hook-token";
    let good = github_signature(token, body);
    assert!(verify_github(token, body, Some(&good)).is_ok(), "own signature refused");
    if verify_github(token, body, header).is_ok() {
        assert_eq!(header, Some(good.as_str()), "a foreign signature verified");
    }
    let _ = verify_gitlab(token, header);
    let _ = verify_image_hook(token, header, header);
}

/// A `.ksync.yaml` as discovery reads it, planned against a Repository that allows nothing
/// special, and the configured paths rule over its lines.
pub fn ksync_config(data: &[u8]) {
    let text = text(data);
    if let Ok(entries) = parse_config_file(".ksync.yaml", &text) {
        let _ = plan_discovery(repository(), &entries, &[]);
    }
    let paths: Vec<String> = text.lines().take(16).map(str::to_owned).collect();
    let _ = validate_config_paths(&paths);
}

fn repository() -> &'static Repository {
    static REPOSITORY: OnceLock<Repository> = OnceLock::new();
    REPOSITORY.get_or_init(|| {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1",
            "kind": "Repository",
            "metadata": {"name": "fuzz", "namespace": "tenant", "uid": "00000000-0000-0000-0000-000000000001"},
            "spec": {"git": {"url": "https://git.invalid/fuzz.git"}},
        }))
        .expect("a valid Repository")
    })
}

/// A SOPS document in each format: whether it is encrypted, and decryption with a key that did
/// not encrypt it (every MAC, key and value check runs on hostile input).
pub fn sops_document(data: &[u8]) {
    for format in [SopsFormat::Yaml, SopsFormat::Json, SopsFormat::Dotenv] {
        let _ = is_encrypted(data, format);
        assert!(decrypt(data, format, age_keys()).is_err(), "decrypted without the key");
    }
}

fn age_keys() -> &'static AgeKeys {
    static KEYS: OnceLock<AgeKeys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let identity = age::x25519::Identity::generate();
        let line = identity.to_string().expose_secret().to_owned();
        let entries = BTreeMap::from([("fuzz.agekey".to_owned(), line.into_bytes())]);
        AgeKeys::from_secret_entries(&entries).expect("a generated age key")
    })
}

/// A registry's replies: `WWW-Authenticate`, a token answer, `Link`, a tag page and a digest.
pub fn registry_replies(data: &[u8]) {
    let [challenge, token, link, tags, digest] = parts(data, 5)[..] else { return };
    let _ = kuvryn_sync_source::registry::read_untrusted_replies(
        &text(challenge),
        token,
        link,
        tags,
        digest,
    );
}

/// A YAML file with image markers, edited with a selection for every policy it names.
///
/// Property: the edit is idempotent (a second pass changes nothing).
pub fn image_markers(data: &[u8]) {
    let text = text(data);
    let selected = |_: &_| {
        Some(PolicyImage {
            image: "ghcr.io/acme/api".into(),
            tag: "1.2.3".into(),
            digest: format!("sha256:{}", "ab".repeat(32)),
        })
    };
    let once = update_file(&text, selected);
    let twice = update_file(&once.text, selected);
    assert_eq!(twice.text, once.text, "a second edit changed the file");
    assert!(twice.changes.is_empty(), "a second edit reported changes");
    for line in text.lines().take(64) {
        let _ = split_reference(line.trim());
    }
}

/// A HealthCheck rule and a live object: compile (admission) and evaluate under the cost
/// budget. A rule that is slow on some object is a finding: the fuzzer's time limit catches it.
pub fn cel_rule(data: &[u8]) {
    let [expression, object] = parts(data, 2)[..] else { return };
    let Ok(compiled) = health_rules::compile(&text(expression)) else { return };
    let object = serde_json::from_slice::<Value>(object).unwrap_or(Value::Null);
    let _ = health_rules::evaluate(&compiled, &object);
}

/// A kustomization (or plugin configuration) as the reference scanner reads it, and each line as
/// an entry and as a source path.
///
/// Property: every entry the scanner finds that names an http(s) URL is classified remote, so the
/// render refuses it.
pub fn kustomize_refs(data: &[u8]) {
    for document in kuvryn_sync_core::yaml::documents(&text(data)).unwrap_or_default() {
        let mut found = kustomization_references(&document);
        let plugins = plugin_references(&document, "generators");
        found.references.extend(plugins.references);
        for reference in &found.references {
            let path = entry_path(reference.kind, &reference.entry);
            let lower = path.trim().to_ascii_lowercase();
            if !reference.inline && (lower.starts_with("http://") || lower.starts_with("https://"))
            {
                assert!(is_remote_entry(path), "{} entry {path:?} not remote", reference.field);
            }
        }
    }
    let text = text(data);
    for line in text.lines().take(256) {
        let _ = is_remote_entry(line);
        let _ = check_source_path(line);
    }
    let _ = Redactor::new().with_secret(&text).redact(&text);
}

/// Budgets small enough for the fuzzer to reach every limit quickly.
const FUZZ_YAML_LIMITS: kuvryn_sync_core::yaml::Limits = kuvryn_sync_core::yaml::Limits {
    max_bytes: 64 * 1024,
    max_nodes: 10_000,
    max_depth: 32,
    max_documents: 100,
};

/// Any YAML stream through the one budgeted parser, as values and in document order.
///
/// Property: what it returns never holds more nodes (scalars, sequences, mappings and keys, after
/// alias expansion) or nesting than the budget allows, whatever the aliases expand to.
pub fn untrusted_yaml(data: &[u8]) {
    let text = text(data);
    if let Ok(documents) = kuvryn_sync_core::yaml::documents_with(&text, &FUZZ_YAML_LIMITS) {
        assert!(documents.len() <= FUZZ_YAML_LIMITS.max_documents, "too many documents");
        let nodes: usize = documents.iter().map(node_count).sum();
        assert!(nodes <= FUZZ_YAML_LIMITS.max_nodes, "{nodes} nodes built");
        let depth = documents.iter().map(depth).max().unwrap_or(0);
        assert!(depth <= FUZZ_YAML_LIMITS.max_depth + 1, "nesting {depth}");
    }
    let _ = kuvryn_sync_core::yaml::ordered_documents(&text);
}

fn node_count(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(node_count).sum::<usize>(),
        Value::Object(map) => 1 + map.values().map(|v| 1 + node_count(v)).sum::<usize>(),
        _ => 1,
    }
}

fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}
