//! Native SOPS decryption with age keys, for `spec.decryption: {provider: sops}`.
//!
//! The controller reads the Application's decryption Secret (as the Application's service
//! account) and hands its entries to [`AgeKeys::from_secret_entries`]; the renderer then calls
//! [`decrypt_tree`] on its private copy of the source before rendering, and
//! [`decrypt_secret_data`] on each rendered Secret whose `data` values are themselves SOPS
//! documents (what a kustomize `secretGenerator` over an encrypted file yields).
//!
//! Why hand-written: no maintained crate decrypts SOPS documents with keys passed per call (the
//! `rops` crate reads keys only from the process environment, which would mix the keys of every
//! Application in one controller). So the SOPS format is handled here, on top of maintained
//! primitives: `age` opens the data key from a `sops.age[].enc` stanza, `aes-gcm` decrypts each
//! `ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]` leaf (32-byte IV; the additional data is the leaf's
//! path of keys, each followed by `:`, list items adding nothing), and `sha2` recomputes the MAC:
//! `sops.mac`, decrypted with `sops.lastmodified` as additional data, must equal the uppercase hex
//! SHA-512 of every leaf's plaintext (encrypted or left in clear, in document order; booleans as
//! `True`/`False`; comments and nulls left out). A mismatch is refused as tampering.
//!
//! Formats ([`SopsFormat`]), chosen by extension as `sops` does: YAML (several documents allowed,
//! each carrying the same `sops` key), JSON, dotenv (`sops_*` metadata lines) and binary (a JSON
//! wrapper `{"data": "ENC[…]", "sops": {…}}`). `unencrypted_suffix`, `encrypted_suffix`,
//! `unencrypted_regex` and `encrypted_regex` decide which leaves were left in clear. Comments
//! are decrypted when they carry an `ENC[…]` value and kept as they are otherwise, which is how
//! `unencrypted_comment_regex`/`encrypted_comment_regex` are honoured; since they are not in the
//! MAC and the output is only rendered, YAML and JSON output drops them (dotenv keeps them).
//!
//! Errors never hold plaintext or key material: they name files, key paths and recipients.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::LazyLock;

use aes_gcm::AesGcm;
use aes_gcm::aead::consts::U32;
use aes_gcm::aead::generic_array::GenericArray;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::aes::Aes256;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use kuvryn_sync_api::FailureReason;
use kuvryn_sync_core::yaml::Node as Value;
use regex::Regex;
use sha2::{Digest, Sha256, Sha512};

/// The suffix of the decryption Secret's entries that hold age private keys.
pub const AGE_KEY_SUFFIX: &str = ".agekey";

/// The prefix of an age X25519 private key line.
const AGE_SECRET_KEY_PREFIX: &str = "AGE-SECRET-KEY-1";

/// AES-256-GCM with the 32-byte nonce SOPS uses.
type SopsCipher = AesGcm<Aes256, U32>;

/// Why decryption failed. Messages name files, key paths and recipients, never plaintext or keys.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SopsError {
    #[error(
        "the decryption Secret holds no age key: add an entry whose key ends in `{AGE_KEY_SUFFIX}` \
         holding one or more AGE-SECRET-KEY-1… lines"
    )]
    /// The Secret has no `.agekey` entry, or its `.agekey` entries hold only comments.
    NoKeys,
    #[error(
        "decryption Secret entry {entry:?}, line {line}: {problem}; each non-comment line of a \
         `{AGE_KEY_SUFFIX}` entry must be an age X25519 private key (AGE-SECRET-KEY-1…)"
    )]
    /// A line of a `.agekey` entry is not an age X25519 private key.
    InvalidKey { entry: String, line: usize, problem: String },
    #[error(
        "{path}: none of the decryption Secret's age keys opens this file; it was encrypted for \
         {recipients}: add the matching private key to the decryption Secret"
    )]
    /// No identity opens any `sops.age` stanza; `recipients` lists the file's age recipients.
    NoMatchingKey { path: String, recipients: String },
    #[error(
        "{path}: the SOPS message authentication code does not match the content{detail}: the file \
         was modified after encryption; re-encrypt it with sops"
    )]
    /// A value does not authenticate or the MAC differs: the file was tampered with.
    MacMismatch { path: String, detail: String },
    #[error("{path}: YAML budget exceeded: {exceeded}")]
    /// The file is over a YAML budget (nodes with aliases expanded, depth, documents, bytes);
    /// read before the MAC check, so bounded like any untrusted YAML.
    YamlBudget { path: String, exceeded: kuvryn_sync_core::yaml::Exceeded },
    #[error("{path}: not a valid SOPS document: {problem}")]
    /// The document or its metadata is not SOPS' format.
    Malformed { path: String, problem: String },
    #[error(
        "{path}: encrypted only for {kind}, which Kuvryn Sync cannot use: re-encrypt it for an age \
         recipient (sops --age)"
    )]
    /// The file has no age stanza; `kind` names the key types it was encrypted for.
    UnsupportedKeyType { path: String, kind: String },
    #[error("{path}: cannot be read: {problem}")]
    /// A file or directory of the tree cannot be read or written.
    Unreadable { path: String, problem: String },
    #[error("{path}: SOPS files are limited to {limit} bytes")]
    /// A SOPS file exceeds [`TreeLimits::max_file_bytes`].
    FileTooLarge { path: String, limit: u64 },
    #[error("the source holds more than {limit} files to check for SOPS encryption")]
    /// The tree exceeds [`TreeLimits::max_files`].
    TooManyFiles { limit: usize },
}

impl SopsError {
    /// The failure reason for conditions and status: always `DecryptionFailure`.
    pub fn reason(&self) -> FailureReason {
        FailureReason::DecryptionFailure
    }
}

/// The file formats SOPS encrypts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SopsFormat {
    /// `.yaml`, `.yml`.
    Yaml,
    /// `.json`.
    Json,
    /// `.env`: `KEY=VALUE` lines and `#` comments.
    Dotenv,
    /// Any other file: a JSON wrapper whose `data` leaf holds the whole content.
    Binary,
}

impl SopsFormat {
    /// The format `sops` picks for a file name: `.yaml`/`.yml`, `.json`, `.env`, else binary.
    pub fn for_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("yaml" | "yml") => SopsFormat::Yaml,
            Some("json") => SopsFormat::Json,
            Some("env") => SopsFormat::Dotenv,
            _ => SopsFormat::Binary,
        }
    }
}

/// The age identities of one decryption Secret. `Debug` shows only how many there are.
pub struct AgeKeys {
    identities: Vec<age::x25519::Identity>,
}

impl fmt::Debug for AgeKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgeKeys").field("identities", &self.identities.len()).finish()
    }
}

impl AgeKeys {
    /// The age keys in the entries whose key ends in [`AGE_KEY_SUFFIX`]; other entries are
    /// ignored. Each such entry holds key lines; blank lines and `#` comments are allowed.
    pub fn from_secret_entries(entries: &BTreeMap<String, Vec<u8>>) -> Result<Self, SopsError> {
        let mut identities = Vec::new();
        for (entry, bytes) in entries.iter().filter(|(k, _)| k.ends_with(AGE_KEY_SUFFIX)) {
            let text = std::str::from_utf8(bytes).map_err(|_| SopsError::InvalidKey {
                entry: entry.clone(),
                line: 1,
                problem: "the entry is not UTF-8 text".to_owned(),
            })?;
            for (index, line) in text.lines().enumerate() {
                if let Some(identity) = parse_key_line(entry, index + 1, line)? {
                    identities.push(identity);
                }
            }
        }
        if identities.is_empty() {
            return Err(SopsError::NoKeys);
        }
        Ok(Self { identities })
    }

    /// How many identities were read.
    pub fn len(&self) -> usize {
        self.identities.len()
    }

    /// Whether there are none (never true for keys built by [`AgeKeys::from_secret_entries`]).
    pub fn is_empty(&self) -> bool {
        self.identities.is_empty()
    }

    fn as_dyn(&self) -> impl Iterator<Item = &dyn age::Identity> {
        self.identities.iter().map(|i| i as &dyn age::Identity)
    }
}

/// One line of a `.agekey` entry: a key, or nothing for blank and comment lines.
fn parse_key_line(
    entry: &str,
    line_number: usize,
    line: &str,
) -> Result<Option<age::x25519::Identity>, SopsError> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let invalid = |problem: &str| SopsError::InvalidKey {
        entry: entry.to_owned(),
        line: line_number,
        problem: problem.to_owned(),
    };
    if line.starts_with("AGE-SECRET-KEY-PQ-") {
        return Err(invalid("post-quantum age keys are not supported"));
    }
    if !line.starts_with(AGE_SECRET_KEY_PREFIX) {
        return Err(invalid("the line is not an age private key"));
    }
    age::x25519::Identity::from_str(line)
        .map(Some)
        .map_err(|_| invalid("the age private key is malformed"))
}

/// The outcome of [`decrypt_tree`].
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Decrypted {
    /// Files decrypted in place, relative to the root, in walk order.
    pub files: Vec<PathBuf>,
    /// Every secret value decrypted, for the caller's redactor
    /// (`kuvryn_sync_core::redact::Redactor::add_secret`).
    pub secrets: Vec<String>,
}

impl fmt::Debug for Decrypted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decrypted")
            .field("files", &self.files)
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

/// Bounds of one [`decrypt_tree_with_limits`] walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeLimits {
    /// Files examined at most (directories not counted).
    pub max_files: usize,
    /// Largest SOPS file decrypted; larger files that look like SOPS files are refused, others
    /// skipped.
    pub max_file_bytes: u64,
}

impl Default for TreeLimits {
    fn default() -> Self {
        Self { max_files: 10_000, max_file_bytes: 8 * 1024 * 1024 }
    }
}

/// A decrypted document and the secret values it held.
#[derive(Clone, PartialEq, Eq)]
pub struct Plaintext {
    /// The document without its `sops` metadata, in the input's format.
    pub bytes: Vec<u8>,
    /// The decrypted secret values (strings), for a redactor.
    pub secrets: Vec<String>,
}

impl fmt::Debug for Plaintext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plaintext")
            .field("bytes", &self.bytes.len())
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

/// Decrypt a SOPS document in `format`; see [`decrypt_document`] for the secrets it held.
pub fn decrypt(bytes: &[u8], format: SopsFormat, keys: &AgeKeys) -> Result<Vec<u8>, SopsError> {
    decrypt_document("<input>", bytes, format, keys).map(|p| p.bytes)
}

/// Decrypt a SOPS document in `format`, naming it `path` in errors.
pub fn decrypt_document(
    path: &str,
    bytes: &[u8],
    format: SopsFormat,
    keys: &AgeKeys,
) -> Result<Plaintext, SopsError> {
    match format {
        SopsFormat::Yaml => decrypt_yaml(path, bytes, keys),
        SopsFormat::Json => decrypt_json(path, bytes, keys),
        SopsFormat::Dotenv => decrypt_dotenv(path, bytes, keys),
        SopsFormat::Binary => decrypt_binary(path, bytes, keys),
    }
}

/// Whether `bytes` is a SOPS-encrypted document in `format`: a top-level `sops` map holding
/// `mac` (YAML, JSON, and the binary wrapper with its `data` string), or `sops_mac=` (dotenv).
pub fn is_encrypted(bytes: &[u8], format: SopsFormat) -> bool {
    // Cheap filter before parsing: every form spells both words.
    if !contains(bytes, b"sops") || !contains(bytes, b"mac") {
        return false;
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    match format {
        SopsFormat::Yaml => parse_yaml_documents(text)
            .map(|docs| docs.iter().any(has_sops_metadata))
            .unwrap_or(false),
        SopsFormat::Json => {
            serde_json::from_str::<Value>(text).map(|doc| has_sops_metadata(&doc)).unwrap_or(false)
        }
        SopsFormat::Dotenv => text.lines().any(|l| l.starts_with("sops_mac=")),
        SopsFormat::Binary => serde_json::from_str::<Value>(text)
            .map(|doc| has_sops_metadata(&doc) && matches!(doc.get("data"), Some(Value::String(_))))
            .unwrap_or(false),
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn has_sops_metadata(doc: &Value) -> bool {
    doc.get("sops").and_then(Value::as_mapping).is_some_and(|m| m.contains_key("mac"))
}

/// Decrypt, in a Secret manifest (`kind: Secret`, `apiVersion: v1`), every `data` value that is a
/// base64-encoded SOPS document, re-encoding the plaintext. The format comes from the data key's
/// extension ([`SopsFormat::for_path`]). Returns whether anything was decrypted.
pub fn decrypt_secret_data(
    object: &mut serde_json::Value,
    keys: &AgeKeys,
) -> Result<bool, SopsError> {
    let is_secret = object.get("kind").and_then(|k| k.as_str()) == Some("Secret")
        && object.get("apiVersion").and_then(|k| k.as_str()) == Some("v1");
    if !is_secret || is_encrypted_json_object(object) {
        return Ok(false);
    }
    let name =
        object.pointer("/metadata/name").and_then(|n| n.as_str()).unwrap_or("<unnamed>").to_owned();
    let Some(data) = object.get_mut("data").and_then(|d| d.as_object_mut()) else {
        return Ok(false);
    };
    let mut changed = false;
    for (key, value) in data.iter_mut() {
        let Some(encoded) = value.as_str() else { continue };
        let Ok(bytes) = BASE64.decode(encoded.trim()) else { continue };
        let format = SopsFormat::for_path(Path::new(key));
        if !is_encrypted(&bytes, format) {
            continue;
        }
        let label = format!("Secret {name} data.{key}");
        let plain = decrypt_document(&label, &bytes, format, keys)?;
        *value = serde_json::Value::String(BASE64.encode(&plain.bytes));
        changed = true;
    }
    Ok(changed)
}

fn is_encrypted_json_object(object: &serde_json::Value) -> bool {
    object.get("sops").and_then(|s| s.as_object()).is_some_and(|s| s.contains_key("mac"))
}

/// Decrypt in place every SOPS file under `root` (a private, writable copy of the source), with
/// the default [`TreeLimits`].
pub fn decrypt_tree(root: &Path, keys: &AgeKeys) -> Result<Decrypted, SopsError> {
    decrypt_tree_with_limits(root, keys, TreeLimits::default())
}

/// [`decrypt_tree`] with explicit bounds. Symbolic links are never followed and `.git` is
/// skipped; files are visited in byte order of their names.
pub fn decrypt_tree_with_limits(
    root: &Path,
    keys: &AgeKeys,
    limits: TreeLimits,
) -> Result<Decrypted, SopsError> {
    let mut files = Vec::new();
    collect_files(root, Path::new(""), limits, &mut files)?;
    let mut out = Decrypted::default();
    for relative in files {
        let full = root.join(&relative);
        let display = relative.display().to_string();
        let Some(bytes) = read_candidate(&full, &display, limits)? else { continue };
        let format = SopsFormat::for_path(&relative);
        if !is_encrypted(&bytes, format) {
            continue;
        }
        let plain = decrypt_document(&display, &bytes, format, keys)?;
        fs::write(&full, &plain.bytes).map_err(|e| unreadable(&display, &e))?;
        out.secrets.extend(plain.secrets);
        out.files.push(relative);
    }
    Ok(out)
}

fn unreadable(path: &str, err: &std::io::Error) -> SopsError {
    SopsError::Unreadable { path: path.to_owned(), problem: err.kind().to_string() }
}

/// Regular files under `dir` (relative to the walk's root), not following symlinks.
fn collect_files(
    root: &Path,
    relative: &Path,
    limits: TreeLimits,
    files: &mut Vec<PathBuf>,
) -> Result<(), SopsError> {
    let display = if relative.as_os_str().is_empty() {
        ".".to_owned()
    } else {
        relative.display().to_string()
    };
    let mut entries = fs::read_dir(root.join(relative))
        .map_err(|e| unreadable(&display, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unreadable(&display, &e))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let child = relative.join(entry.file_name());
        let kind = entry.file_type().map_err(|e| unreadable(&child.display().to_string(), &e))?;
        if kind.is_dir() {
            if entry.file_name() != ".git" {
                collect_files(root, &child, limits, files)?;
            }
        } else if kind.is_file() {
            if files.len() >= limits.max_files {
                return Err(SopsError::TooManyFiles { limit: limits.max_files });
            }
            files.push(child);
        }
    }
    Ok(())
}

/// The bytes of a file to check, or `None` for a file over the size cap that does not end like a
/// SOPS file (SOPS writes its metadata last); a large one that does is refused.
fn read_candidate(
    full: &Path,
    display: &str,
    limits: TreeLimits,
) -> Result<Option<Vec<u8>>, SopsError> {
    let size = fs::symlink_metadata(full).map_err(|e| unreadable(display, &e))?.len();
    if size > limits.max_file_bytes {
        return if tail_mentions_sops(full, size).map_err(|e| unreadable(display, &e))? {
            Err(SopsError::FileTooLarge { path: display.to_owned(), limit: limits.max_file_bytes })
        } else {
            Ok(None)
        };
    }
    fs::read(full).map(Some).map_err(|e| unreadable(display, &e))
}

fn tail_mentions_sops(full: &Path, size: u64) -> std::io::Result<bool> {
    use std::io::{Seek, SeekFrom};
    const TAIL: u64 = 16 * 1024;
    let mut file = fs::File::open(full)?;
    file.seek(SeekFrom::Start(size.saturating_sub(TAIL)))?;
    let mut tail = Vec::new();
    file.take(TAIL).read_to_end(&mut tail)?;
    Ok(contains(&tail, b"sops") && contains(&tail, b"mac"))
}

// ---------------------------------------------------------------------------------------------
// Metadata

/// The parts of the `sops` metadata decryption needs.
#[derive(Debug)]
struct Metadata {
    age: Vec<AgeStanza>,
    /// Key types other than age that the file was also (or only) encrypted for.
    other_kinds: Vec<String>,
    lastmodified: String,
    mac: String,
    rules: LeafRules,
    mac_only_encrypted: bool,
}

#[derive(Debug)]
struct AgeStanza {
    recipient: String,
    enc: String,
}

/// The metadata key groups that are not age, with the name used in messages.
const OTHER_KEY_KINDS: [(&str, &str); 6] = [
    ("pgp", "PGP"),
    ("kms", "AWS KMS"),
    ("gcp_kms", "GCP KMS"),
    ("azure_kv", "Azure Key Vault"),
    ("hc_vault", "HashiCorp Vault"),
    ("key_groups", "Shamir key groups"),
];

/// Metadata from a `sops` mapping (YAML, JSON, binary).
fn metadata_from_map(path: &str, sops: &Value) -> Result<Metadata, SopsError> {
    let malformed =
        |problem: &str| SopsError::Malformed { path: path.to_owned(), problem: problem.to_owned() };
    let map = sops.as_mapping().ok_or_else(|| malformed("`sops` must be a mapping"))?;
    let text = |key: &str| map.get(key).and_then(scalar_text);
    let mut age = Vec::new();
    if let Some(Value::Sequence(stanzas)) = map.get("age") {
        for stanza in stanzas {
            let field = |k: &str| stanza.get(k).and_then(Value::as_str).map(str::to_owned);
            let (Some(recipient), Some(enc)) = (field("recipient"), field("enc")) else {
                return Err(malformed("each `sops.age` entry needs `recipient` and `enc`"));
            };
            age.push(AgeStanza { recipient, enc });
        }
    }
    let other_kinds = OTHER_KEY_KINDS
        .iter()
        .filter(|(key, _)| matches!(map.get(key), Some(Value::Sequence(s)) if !s.is_empty()))
        .map(|(_, name)| (*name).to_owned())
        .collect();
    Ok(Metadata {
        age,
        other_kinds,
        lastmodified: text("lastmodified")
            .ok_or_else(|| malformed("`sops.lastmodified` is missing"))?,
        mac: text("mac").ok_or_else(|| malformed("`sops.mac` is missing"))?,
        rules: LeafRules::from_lookup(path, |k| text(k))?,
        mac_only_encrypted: text("mac_only_encrypted").is_some_and(|v| v == "true"),
    })
}

fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Metadata from dotenv `sops_*` lines (flattened: `sops_age__list_0__map_enc`).
fn metadata_from_dotenv(
    path: &str,
    flat: &BTreeMap<String, String>,
) -> Result<Metadata, SopsError> {
    let malformed =
        |problem: &str| SopsError::Malformed { path: path.to_owned(), problem: problem.to_owned() };
    let mut stanzas: BTreeMap<usize, (Option<String>, Option<String>)> = BTreeMap::new();
    for (key, value) in flat {
        let Some(rest) = key.strip_prefix("age__list_") else { continue };
        let Some((index, field)) = rest.split_once("__map_") else { continue };
        let index: usize =
            index.parse().map_err(|_| malformed("a `sops_age__list_N` index is not a number"))?;
        let slot = stanzas.entry(index).or_default();
        match field {
            "recipient" => slot.0 = Some(value.clone()),
            "enc" => slot.1 = Some(value.clone()),
            _ => {}
        }
    }
    let age = stanzas
        .into_values()
        .map(|(recipient, enc)| match (recipient, enc) {
            (Some(recipient), Some(enc)) => Ok(AgeStanza { recipient, enc }),
            _ => Err(malformed("each `sops_age` entry needs `recipient` and `enc`")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let other_kinds = OTHER_KEY_KINDS
        .iter()
        .filter(|(kind, _)| flat.keys().any(|k| k.starts_with(&format!("{kind}__list_"))))
        .map(|(_, name)| (*name).to_owned())
        .collect();
    Ok(Metadata {
        age,
        other_kinds,
        lastmodified: flat
            .get("lastmodified")
            .cloned()
            .ok_or_else(|| malformed("`sops_lastmodified` is missing"))?,
        mac: flat.get("mac").cloned().ok_or_else(|| malformed("`sops_mac` is missing"))?,
        rules: LeafRules::from_lookup(path, |k| flat.get(k).cloned())?,
        mac_only_encrypted: flat.get("mac_only_encrypted").is_some_and(|v| v == "true"),
    })
}

/// Which leaves sops encrypted, from the metadata's suffix and regex settings (sops allows one).
#[derive(Debug, Default)]
struct LeafRules {
    unencrypted_suffix: Option<String>,
    encrypted_suffix: Option<String>,
    unencrypted_regex: Option<Regex>,
    encrypted_regex: Option<Regex>,
}

impl LeafRules {
    fn from_lookup(path: &str, get: impl Fn(&str) -> Option<String>) -> Result<Self, SopsError> {
        let regex = |key: &str| -> Result<Option<Regex>, SopsError> {
            get(key)
                .filter(|r| !r.is_empty())
                .map(|r| {
                    Regex::new(&r).map_err(|_| SopsError::Malformed {
                        path: path.to_owned(),
                        problem: format!("`sops.{key}` is not a valid regular expression"),
                    })
                })
                .transpose()
        };
        Ok(Self {
            unencrypted_suffix: get("unencrypted_suffix").filter(|s| !s.is_empty()),
            encrypted_suffix: get("encrypted_suffix").filter(|s| !s.is_empty()),
            unencrypted_regex: regex("unencrypted_regex")?,
            encrypted_regex: regex("encrypted_regex")?,
        })
    }

    /// Whether sops encrypted the leaf at `path` (its keys, outermost first), applying the
    /// settings in sops' order, each overriding the last.
    fn is_encrypted(&self, path: &[String]) -> bool {
        let mut encrypted = true;
        if let Some(suffix) = &self.unencrypted_suffix
            && path.iter().any(|p| p.ends_with(suffix.as_str()))
        {
            encrypted = false;
        }
        if let Some(suffix) = &self.encrypted_suffix {
            encrypted = path.iter().any(|p| p.ends_with(suffix.as_str()));
        }
        if let Some(regex) = &self.unencrypted_regex
            && path.iter().any(|p| regex.is_match(p))
        {
            encrypted = false;
        }
        if let Some(regex) = &self.encrypted_regex {
            encrypted = path.iter().any(|p| regex.is_match(p));
        }
        encrypted
    }
}

// ---------------------------------------------------------------------------------------------
// Data key and leaf cipher

/// The 32-byte data key, from the first `sops.age` stanza one of the identities opens.
fn data_key(path: &str, metadata: &Metadata, keys: &AgeKeys) -> Result<[u8; 32], SopsError> {
    if metadata.age.is_empty() {
        let kind = if metadata.other_kinds.is_empty() {
            "no key at all".to_owned()
        } else {
            metadata.other_kinds.join(", ")
        };
        return Err(SopsError::UnsupportedKeyType { path: path.to_owned(), kind });
    }
    let malformed =
        |problem: &str| SopsError::Malformed { path: path.to_owned(), problem: problem.to_owned() };
    for stanza in &metadata.age {
        let reader = age::armor::ArmoredReader::new(stanza.enc.as_bytes());
        let decryptor = age::Decryptor::new(reader)
            .map_err(|_| malformed("a `sops.age[].enc` entry is not an armored age file"))?;
        match decryptor.decrypt(keys.as_dyn()) {
            Ok(mut stream) => {
                let mut key = Vec::new();
                stream.read_to_end(&mut key).map_err(|_| {
                    malformed("a `sops.age[].enc` entry does not decrypt to a data key")
                })?;
                return key
                    .try_into()
                    .map_err(|_| malformed("the data key in `sops.age[].enc` is not 32 bytes"));
            }
            Err(age::DecryptError::NoMatchingKeys) => continue,
            Err(_) => return Err(malformed("a `sops.age[].enc` entry cannot be decrypted")),
        }
    }
    let recipients =
        metadata.age.iter().map(|s| s.recipient.as_str()).collect::<Vec<_>>().join(", ");
    Err(SopsError::NoMatchingKey { path: path.to_owned(), recipients })
}

/// The parts of an `ENC[AES256_GCM,…]` value.
#[derive(Debug)]
struct EncryptedValue {
    data: Vec<u8>,
    iv: Vec<u8>,
    tag: Vec<u8>,
    kind: LeafType,
}

/// The `type:` of an encrypted value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LeafType {
    Str,
    Int,
    Float,
    Bool,
    Bytes,
    Comment,
}

impl LeafType {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "str" => LeafType::Str,
            "int" => LeafType::Int,
            "float" => LeafType::Float,
            "bool" => LeafType::Bool,
            "bytes" => LeafType::Bytes,
            "comment" => LeafType::Comment,
            _ => return None,
        })
    }
}

static ENC_VALUE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^ENC\[AES256_GCM,data:([^,]*),iv:([^,]+),tag:([^,]+),type:([a-z]+)\]$")
        .expect("valid regex")
});

fn looks_encrypted(text: &str) -> bool {
    text.starts_with("ENC[AES256_GCM,")
}

fn parse_encrypted(text: &str) -> Option<EncryptedValue> {
    let caps = ENC_VALUE.captures(text)?;
    Some(EncryptedValue {
        data: BASE64.decode(&caps[1]).ok()?,
        iv: BASE64.decode(&caps[2]).ok()?,
        tag: BASE64.decode(&caps[3]).ok()?,
        kind: LeafType::parse(&caps[4])?,
    })
}

/// Why one value did not decrypt.
#[derive(Debug, PartialEq, Eq)]
enum LeafError {
    /// Not an `ENC[AES256_GCM,…]` value with base64 parts, a 32-byte IV and a 16-byte tag.
    Shape,
    /// AES-GCM refused it: the value, its IV or tag, or its path was changed.
    Authentication,
}

/// Decrypt one `ENC[…]` value; `aad` is the leaf's path (`a:b:`) or `sops.lastmodified`.
fn decrypt_value(text: &str, key: &[u8; 32], aad: &str) -> Result<(Vec<u8>, LeafType), LeafError> {
    let value = parse_encrypted(text).ok_or(LeafError::Shape)?;
    if value.iv.len() != 32 || value.tag.len() != 16 {
        return Err(LeafError::Shape);
    }
    let cipher = SopsCipher::new(GenericArray::from_slice(key));
    let mut sealed = value.data;
    sealed.extend_from_slice(&value.tag);
    let plain = cipher
        .decrypt(GenericArray::from_slice(&value.iv), Payload { msg: &sealed, aad: aad.as_bytes() })
        .map_err(|_| LeafError::Authentication)?;
    Ok((plain, value.kind))
}

/// Go's `strconv.ParseBool`, which sops uses for `type:bool` values.
fn parse_go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// A float as sops hashes it (Go `strconv.FormatFloat(f, 'f', -1, 64)`).
fn format_float(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf".to_owned() } else { "-Inf".to_owned() }
    } else {
        format!("{value}")
    }
}

/// A decrypted float as sops writes it back: Go prints an integral float64 without a fraction,
/// so `7.0` comes back as the integer `7`.
fn float_value(value: f64) -> Value {
    let integral = value.is_finite() && value.fract() == 0.0 && value.abs() < 9.0e15;
    if integral {
        // Exact: the value is integral and well inside the range where f64 holds every integer.
        Value::Number((value as i64).into())
    } else {
        serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number)
    }
}

/// The bytes a leaf contributes to the MAC; `None` for nulls and containers (sops skips them).
fn mac_bytes(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Bool(true) => Some(b"True".to_vec()),
        Value::Bool(false) => Some(b"False".to_vec()),
        Value::Number(n) => Some(match n.as_f64() {
            Some(f) if n.is_f64() => format_float(f).into_bytes(),
            _ => n.to_string().into_bytes(),
        }),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// The leaf walk shared by every format

/// Decrypts leaves and accumulates the MAC over one document set.
struct LeafWalk<'a> {
    path: &'a str,
    key: [u8; 32],
    rules: &'a LeafRules,
    mac_only_encrypted: bool,
    hasher: Sha512,
    secrets: Vec<String>,
}

impl<'a> LeafWalk<'a> {
    fn new(path: &'a str, key: [u8; 32], metadata: &'a Metadata) -> Self {
        let mut hasher = Sha512::new();
        if metadata.mac_only_encrypted {
            // sops seeds a MAC over encrypted values only with SHA-256("sops"), so the two kinds of
            // MAC never coincide.
            hasher.update(Sha256::digest(b"sops"));
        }
        Self {
            path,
            key,
            rules: &metadata.rules,
            mac_only_encrypted: metadata.mac_only_encrypted,
            hasher,
            secrets: Vec::new(),
        }
    }

    /// The additional data of a leaf: its path joined by `:`, plus a trailing `:` (so `:` for a
    /// top-level comment).
    fn aad(path: &[String]) -> String {
        format!("{}:", path.join(":"))
    }

    fn tampered(&self, path: &[String]) -> SopsError {
        SopsError::MacMismatch {
            path: self.path.to_owned(),
            detail: format!(" (the value at {:?} does not authenticate)", Self::aad(path)),
        }
    }

    /// Decrypt a comment (`text` is what follows `#`) if it holds an `ENC[…]` value. A comment
    /// that does not decrypt is kept as written, as sops does; comments are not in the MAC.
    fn comment(&self, text: &str, path: &[String]) -> String {
        let trimmed = text.trim();
        if !looks_encrypted(trimmed) {
            return text.to_owned();
        }
        match decrypt_value(trimmed, &self.key, &Self::aad(path)) {
            Ok((bytes, _)) => String::from_utf8(bytes).unwrap_or_else(|_| text.to_owned()),
            Err(_) => text.to_owned(),
        }
    }

    /// Decrypt (when sops encrypted it) and hash one scalar leaf, returning its plaintext value,
    /// or `None` when it is an encrypted comment.
    fn leaf(&mut self, value: &Value, path: &[String]) -> Result<Option<Value>, SopsError> {
        let encrypted = self.rules.is_encrypted(path);
        let text = match value {
            Value::String(s) if encrypted && !s.is_empty() => s,
            _ => {
                if !self.mac_only_encrypted
                    && let Some(bytes) = mac_bytes(value)
                {
                    self.hasher.update(&bytes);
                }
                return Ok(Some(value.clone()));
            }
        };
        let (bytes, kind) =
            decrypt_value(text, &self.key, &Self::aad(path)).map_err(|e| match e {
                LeafError::Authentication => self.tampered(path),
                LeafError::Shape => SopsError::Malformed {
                    path: self.path.to_owned(),
                    problem: format!(
                        "the value at {:?} is not a SOPS-encrypted value",
                        Self::aad(path)
                    ),
                },
            })?;
        if kind == LeafType::Comment {
            // sops writes a comment between list items as an item of `type:comment`; like any
            // comment it is not in the MAC, and it is no value.
            return Ok(None);
        }
        let plain = self.typed(bytes, kind, path)?;
        if let Some(bytes) = mac_bytes(&plain) {
            self.hasher.update(&bytes);
        }
        if let (Value::String(s), LeafType::Str | LeafType::Bytes) = (&plain, kind) {
            self.secrets.push(s.clone());
        }
        Ok(Some(plain))
    }

    /// The decrypted bytes as the value `type:` names.
    fn typed(&self, bytes: Vec<u8>, kind: LeafType, path: &[String]) -> Result<Value, SopsError> {
        let bad = || SopsError::Malformed {
            path: self.path.to_owned(),
            problem: format!("the value at {:?} does not match its declared type", Self::aad(path)),
        };
        let text = String::from_utf8(bytes).map_err(|_| bad())?;
        Ok(match kind {
            LeafType::Str | LeafType::Bytes | LeafType::Comment => Value::String(text),
            LeafType::Int => Value::Number(text.parse::<i64>().map_err(|_| bad())?.into()),
            LeafType::Float => float_value(text.parse::<f64>().map_err(|_| bad())?),
            LeafType::Bool => Value::Bool(parse_go_bool(&text).ok_or_else(bad)?),
        })
    }

    /// Walk a value tree in document order (the YAML and JSON parsers keep key order),
    /// decrypting leaves in place.
    /// Returns `false` when `value` is an encrypted comment, which the caller drops.
    fn walk(&mut self, value: &mut Value, path: &mut Vec<String>) -> Result<bool, SopsError> {
        match value {
            Value::Mapping(map) => {
                for (key, child) in map.iter_mut() {
                    path.push(key.clone());
                    if !self.walk(child, path)? {
                        *child = Value::Null;
                    }
                    path.pop();
                }
            }
            Value::Sequence(items) => {
                let mut kept = Vec::with_capacity(items.len());
                for mut item in std::mem::take(items) {
                    if self.walk(&mut item, path)? {
                        kept.push(item);
                    }
                }
                *items = kept;
            }
            Value::Null => {}
            scalar => match self.leaf(scalar, path)? {
                Some(plain) => *scalar = plain,
                None => return Ok(false),
            },
        }
        Ok(true)
    }

    /// Check the MAC over everything walked.
    fn verify(self, metadata: &Metadata) -> Result<Vec<String>, SopsError> {
        let computed: String = self.hasher.finalize().iter().map(|b| format!("{b:02X}")).collect();
        let mismatch =
            || SopsError::MacMismatch { path: self.path.to_owned(), detail: String::new() };
        let (stored, _) = decrypt_value(&metadata.mac, &self.key, &metadata.lastmodified)
            .map_err(|_| mismatch())?;
        if stored != computed.as_bytes() {
            return Err(mismatch());
        }
        Ok(self.secrets)
    }
}

// ---------------------------------------------------------------------------------------------
// Formats

fn not_text(path: &str) -> SopsError {
    SopsError::Malformed { path: path.to_owned(), problem: "the file is not UTF-8 text".to_owned() }
}

fn parse_yaml_documents(text: &str) -> Result<Vec<Value>, kuvryn_sync_core::yaml::YamlError> {
    kuvryn_sync_core::yaml::ordered_documents(text)
}

/// A YAML error before the MAC check: over budget names the limit, otherwise the position.
fn yaml_error(path: &str, err: &kuvryn_sync_core::yaml::YamlError) -> SopsError {
    match err.exceeded() {
        Some(exceeded) => SopsError::YamlBudget { path: path.to_owned(), exceeded },
        None => {
            let (line, column) = err.position();
            SopsError::Malformed {
                path: path.to_owned(),
                problem: format!("invalid YAML at line {line} column {column}"),
            }
        }
    }
}

fn syntax(path: &str, format: &str, err: &impl fmt::Display) -> SopsError {
    // serde's messages can quote input; keep only the position, which carries no content.
    let position = err
        .to_string()
        .rsplit_once(" at ")
        .map(|(_, pos)| format!(" at {pos}"))
        .unwrap_or_default();
    SopsError::Malformed { path: path.to_owned(), problem: format!("invalid {format}{position}") }
}

fn decrypt_yaml(path: &str, bytes: &[u8], keys: &AgeKeys) -> Result<Plaintext, SopsError> {
    let text = std::str::from_utf8(bytes).map_err(|_| not_text(path))?;
    let mut documents = parse_yaml_documents(text).map_err(|e| yaml_error(path, &e))?;
    let first = documents.iter().find_map(|d| d.get("sops")).ok_or_else(|| {
        SopsError::Malformed { path: path.to_owned(), problem: "no `sops` metadata".to_owned() }
    })?;
    let metadata = metadata_from_map(path, first)?;
    let key = data_key(path, &metadata, keys)?;
    let mut walk = LeafWalk::new(path, key, &metadata);
    for document in &mut documents {
        if let Value::Mapping(map) = document {
            map.remove("sops");
        }
        walk.walk(document, &mut Vec::new())?;
    }
    let secrets = walk.verify(&metadata)?;
    let mut out = String::new();
    for (index, document) in documents.iter().enumerate() {
        if index > 0 {
            out.push_str("---\n");
        }
        out.push_str(&kuvryn_sync_core::yaml::to_string(document).map_err(|_| {
            SopsError::Malformed {
                path: path.to_owned(),
                problem: "the plaintext cannot be written as YAML".to_owned(),
            }
        })?);
    }
    Ok(Plaintext { bytes: out.into_bytes(), secrets })
}

fn decrypt_json(path: &str, bytes: &[u8], keys: &AgeKeys) -> Result<Plaintext, SopsError> {
    // Deserialising JSON into a YAML value keeps the key order.
    let mut document: Value =
        serde_json::from_slice(bytes).map_err(|e| syntax(path, "JSON", &e))?;
    let metadata = match &mut document {
        Value::Mapping(map) => map.remove("sops"),
        _ => None,
    }
    .ok_or_else(|| SopsError::Malformed {
        path: path.to_owned(),
        problem: "no `sops` metadata".to_owned(),
    })?;
    let metadata = metadata_from_map(path, &metadata)?;
    let key = data_key(path, &metadata, keys)?;
    let mut walk = LeafWalk::new(path, key, &metadata);
    walk.walk(&mut document, &mut Vec::new())?;
    let secrets = walk.verify(&metadata)?;
    let mut out = serde_json::to_vec_pretty(&document).map_err(|e| syntax(path, "JSON", &e))?;
    out.push(b'\n');
    Ok(Plaintext { bytes: out, secrets })
}

fn decrypt_binary(path: &str, bytes: &[u8], keys: &AgeKeys) -> Result<Plaintext, SopsError> {
    let mut document: Value =
        serde_json::from_slice(bytes).map_err(|e| syntax(path, "JSON", &e))?;
    let metadata = match &mut document {
        Value::Mapping(map) => map.remove("sops"),
        _ => None,
    }
    .ok_or_else(|| SopsError::Malformed {
        path: path.to_owned(),
        problem: "no `sops` metadata".to_owned(),
    })?;
    let metadata = metadata_from_map(path, &metadata)?;
    let Some(Value::String(data)) = document.get("data") else {
        return Err(SopsError::Malformed {
            path: path.to_owned(),
            problem: "a SOPS binary file needs a `data` string".to_owned(),
        });
    };
    let key = data_key(path, &metadata, keys)?;
    let mut walk = LeafWalk::new(path, key, &metadata);
    let leaf_path = vec!["data".to_owned()];
    // The content may be any bytes, so decrypt it here rather than as a typed leaf.
    let plain = if metadata.rules.is_encrypted(&leaf_path) && !data.is_empty() {
        decrypt_value(data, &key, "data:")
            .map_err(|e| match e {
                LeafError::Authentication => walk.tampered(&leaf_path),
                LeafError::Shape => SopsError::Malformed {
                    path: path.to_owned(),
                    problem: "`data` is not a SOPS-encrypted value".to_owned(),
                },
            })?
            .0
    } else {
        data.as_bytes().to_vec()
    };
    walk.hasher.update(&plain);
    if let Ok(text) = std::str::from_utf8(&plain) {
        walk.secrets.push(text.to_owned());
    }
    let secrets = walk.verify(&metadata)?;
    Ok(Plaintext { bytes: plain, secrets })
}

/// One line of a dotenv file.
#[derive(Debug)]
enum DotenvLine {
    Comment(String),
    Pair(String, String),
}

fn parse_dotenv(path: &str, text: &str) -> Result<Vec<DotenvLine>, SopsError> {
    text.split('\n')
        .enumerate()
        .filter(|(_, line)| !line.is_empty())
        .map(|(index, line)| {
            if let Some(comment) = line.strip_prefix('#') {
                return Ok(DotenvLine::Comment(comment.to_owned()));
            }
            let (key, value) = line.split_once('=').ok_or_else(|| SopsError::Malformed {
                path: path.to_owned(),
                problem: format!("line {} is neither KEY=VALUE nor a # comment", index + 1),
            })?;
            Ok(DotenvLine::Pair(key.to_owned(), value.replace("\\n", "\n")))
        })
        .collect()
}

fn decrypt_dotenv(path: &str, bytes: &[u8], keys: &AgeKeys) -> Result<Plaintext, SopsError> {
    let text = std::str::from_utf8(bytes).map_err(|_| not_text(path))?;
    let lines = parse_dotenv(path, text)?;
    let flat: BTreeMap<String, String> = lines
        .iter()
        .filter_map(|l| match l {
            DotenvLine::Pair(k, v) => k.strip_prefix("sops_").map(|k| (k.to_owned(), v.clone())),
            DotenvLine::Comment(_) => None,
        })
        .collect();
    let metadata = metadata_from_dotenv(path, &flat)?;
    let key = data_key(path, &metadata, keys)?;
    let mut walk = LeafWalk::new(path, key, &metadata);
    let mut out = String::new();
    for line in &lines {
        match line {
            DotenvLine::Comment(text) => {
                let plain = walk.comment(text, &[]);
                out.push('#');
                out.push_str(&plain);
            }
            DotenvLine::Pair(k, _) if k.starts_with("sops_") => continue,
            DotenvLine::Pair(k, v) => {
                let plain = walk.leaf(&Value::String(v.clone()), std::slice::from_ref(k))?;
                let value = plain.as_ref().and_then(scalar_text).unwrap_or_default();
                out.push_str(k);
                out.push('=');
                out.push_str(&value.replace('\n', "\\n"));
            }
        }
        out.push('\n');
    }
    let secrets = walk.verify(&metadata)?;
    Ok(Plaintext { bytes: out.into_bytes(), secrets })
}

#[cfg(test)]
mod tests;
