//! Decrypts every age-encrypted SOPS fixture listed in
//! `$KSYNC_CONFORMANCE_DATA/fixtures/sops/EXPECTED.yaml` (files from Flux's kustomize-controller
//! test data, encrypted by the real `sops`) with `kuvryn_sync_render::sops` and fails unless each
//! decrypts with its identity file (which also proves its MAC verifies, since a mismatch is an
//! error) to exactly the leaf values listed, fails with `NoMatchingKey` under an identity it was
//! not encrypted for, and the Secret whose `data` holds a base64 SOPS document decrypts in place.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use kuvryn_sync_conformance::fixture;
use kuvryn_sync_render::sops::{
    AgeKeys, SopsError, SopsFormat, decrypt_document, decrypt_secret_data,
};
use serde::Deserialize;

const EXPECTED: &str = "sops/EXPECTED.yaml";

/// Age-encrypted files the fixture collector listed (the Secret-inside case aside).
const ENCRYPTED_FILES: usize = 7;

#[derive(Debug, Deserialize)]
struct Entry {
    file: String,
    sops_format: Option<String>,
    #[serde(default)]
    age_recipients: Vec<String>,
    identity_file: Option<String>,
    mac_verified: Option<bool>,
    #[serde(default)]
    leaves: Vec<Leaf>,
    note: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Leaf {
    path: String,
    value: serde_json::Value,
}

fn load() -> Vec<Entry> {
    let path = fixture(EXPECTED);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} must be readable: {e}", path.display()));
    kuvryn_sync_core::yaml::from_str(&text)
        .unwrap_or_else(|e| panic!("{} must parse as the SOPS cases: {e}", path.display()))
}

fn sops_fixture(relative: &str) -> std::path::PathBuf {
    fixture(&format!("sops/{relative}"))
}

fn keys_from(identity_file: &str) -> AgeKeys {
    let bytes = std::fs::read(sops_fixture(identity_file)).expect("identity file readable");
    AgeKeys::from_secret_entries(&BTreeMap::from([("identity.agekey".to_owned(), bytes)]))
        .expect("the identity file holds an age key")
}

fn format_named(name: &str) -> SopsFormat {
    match name {
        "yaml" => SopsFormat::Yaml,
        "json" => SopsFormat::Json,
        "dotenv" => SopsFormat::Dotenv,
        "binary" => SopsFormat::Binary,
        other => panic!("EXPECTED.yaml names an unknown sops_format {other:?}"),
    }
}

/// The decrypted value at a SOPS leaf path (`a:b:`), as text.
fn value_at(plain: &[u8], format: SopsFormat, path: &str) -> Option<String> {
    let parts: Vec<&str> = path.trim_end_matches(':').split(':').collect();
    match format {
        SopsFormat::Binary => (parts == ["data"]).then(|| String::from_utf8_lossy(plain).into()),
        SopsFormat::Dotenv => String::from_utf8_lossy(plain).lines().find_map(|line| {
            let (key, value) = line.split_once('=')?;
            (parts == [key]).then(|| value.to_owned())
        }),
        SopsFormat::Yaml | SopsFormat::Json => {
            let document =
                kuvryn_sync_core::yaml::document(std::str::from_utf8(plain).ok()?).ok()?;
            let leaf = parts.iter().try_fold(&document, |node, part| node.get(*part))?;
            scalar(leaf)
        }
    }
}

fn scalar(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[test]
fn every_age_fixture_decrypts_to_its_listed_leaves() {
    let entries = load();
    let mut checked = 0;
    let mut failures = Vec::new();
    for entry in entries.iter().filter(|e| e.identity_file.is_some()) {
        let identity = entry.identity_file.as_deref().expect("filtered");
        let format = format_named(entry.sops_format.as_deref().expect("sops_format"));
        assert_eq!(
            SopsFormat::for_path(Path::new(&entry.file)),
            format,
            "{}: the format by extension differs from the one sops used",
            entry.file
        );
        assert_eq!(entry.mac_verified, Some(true), "{}: the fixture's MAC must verify", entry.file);
        let bytes = std::fs::read(sops_fixture(&entry.file)).expect("fixture readable");
        let plain = match decrypt_document(&entry.file, &bytes, format, &keys_from(identity)) {
            Ok(plain) => plain,
            Err(err) => {
                failures.push(format!("{}: {err}", entry.file));
                continue;
            }
        };
        for leaf in &entry.leaves {
            let want = scalar(&leaf.value).expect("leaf values are scalars");
            let got = value_at(&plain.bytes, format, &leaf.path);
            if got.as_deref() != Some(want.as_str()) {
                failures.push(format!("{} {}: want {want:?}, got {got:?}", entry.file, leaf.path));
            }
        }
        checked += 1;
    }
    assert!(failures.is_empty(), "SOPS fixtures that differ:\n{}", failures.join("\n"));
    assert_eq!(checked, ENCRYPTED_FILES, "every listed age fixture must be checked");
}

#[test]
fn a_fixture_refuses_an_identity_it_was_not_encrypted_for() {
    let entries = load();
    let identities: Vec<&str> = entries.iter().filter_map(|e| e.identity_file.as_deref()).collect();
    let mut checked = 0;
    for entry in entries.iter().filter(|e| e.identity_file.is_some()) {
        let own = entry.identity_file.as_deref().expect("filtered");
        let Some(other) = identities.iter().find(|i| **i != own) else { continue };
        let format = format_named(entry.sops_format.as_deref().expect("sops_format"));
        let bytes = std::fs::read(sops_fixture(&entry.file)).expect("fixture readable");
        let err = decrypt_document(&entry.file, &bytes, format, &keys_from(other))
            .expect_err("a foreign identity must not decrypt");
        match &err {
            SopsError::NoMatchingKey { recipients, .. } => {
                for recipient in &entry.age_recipients {
                    assert!(recipients.contains(recipient), "{}: {err}", entry.file);
                }
            }
            other => panic!("{}: want NoMatchingKey, got {other:?}", entry.file),
        }
        checked += 1;
    }
    assert_eq!(checked, ENCRYPTED_FILES);
}

#[test]
fn the_secret_holding_a_base64_sops_document_decrypts_in_place() {
    let entries = load();
    let entry = entries
        .iter()
        .find(|e| e.file.ends_with("inside/secret.yaml"))
        .expect("EXPECTED.yaml lists the Secret-inside case");
    let note = entry.note.as_deref().expect("the case has a note");
    // The note names the recipient; its identity is the file announcing that public key.
    let identity = entries
        .iter()
        .filter_map(|e| e.identity_file.as_deref())
        .find(|file| {
            let text = std::fs::read_to_string(sops_fixture(file)).expect("identity readable");
            text.lines()
                .filter_map(|l| l.strip_prefix("# public key: "))
                .any(|recipient| note.contains(recipient))
        })
        .expect("an identity file for the recipient the note names");
    let text = std::fs::read_to_string(sops_fixture(&entry.file)).expect("fixture readable");
    let mut secret: serde_json::Value =
        kuvryn_sync_core::yaml::document(&text).expect("the Secret parses");
    let changed = decrypt_secret_data(&mut secret, &keys_from(identity)).expect("decrypts");
    assert!(changed, "the Secret's data.key must be recognised as SOPS");
    let encoded = secret["data"]["key"].as_str().expect("data.key stays a string");
    assert_eq!(BASE64.decode(encoded).expect("base64"), b"value");
}
