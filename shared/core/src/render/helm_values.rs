//! The pure rules of `render.type: helm`: which values files are acceptable, how values from
//! files, ConfigMaps, Secrets and the inline `values` combine, which release names are valid, and
//! which Secrets may serve as chart-registry credentials.
//!
//! - **Values files** (`spec.source.render.helm.valuesFiles`) are repository-relative: absolute
//!   paths, `..` components and a leading `-` are refused ([`check_values_file_path`]). The I/O
//!   layer reads each file inside the render copy and refuses symlinks leaving the repository.
//! - **Merge order** is Helm's `-f a -f b --set`: values files in the order given, then
//!   `valuesFrom` entries in the order given, then the inline `values`. A later map deep-merges
//!   over an earlier one; any other later value (a list, a scalar, `null`) replaces the earlier
//!   one whole, exactly like Helm's `mergeMaps` for user-supplied values. A `null` is kept in the
//!   merged values: Helm's own coalescing then deletes that key from the chart's defaults, which is
//!   how `key: null` removes a default in Helm.
//! - **valuesFrom** data arrives as plain data (the controller reads the ConfigMap or Secret as
//!   the Application's service account). A missing key is an error naming the object and the key.
//!   Every leaf value of a Secret's document is returned in [`AssembledValues::secret_strings`] so
//!   callers mask them in plans, messages and errors.
//! - **Release names** follow Helm: a lowercase DNS subdomain of at most 53 characters
//!   ([`validate_release_name`]); an invalid stored name fails with `ValidationFailure` and a
//!   suggested name.
//! - **Registry credentials** ([`registry_credentials`]) come only from a Secret labelled
//!   `sync.kuvryn.io/registry-credentials: "true"` holding `username` and `password`.
//!
//! Hand-written because these are Kuvryn Sync's own rules over Helm's documented semantics; YAML
//! parsing is [`crate::yaml`] (budgeted; non-string scalar keys become strings, as in Helm).
//! Errors never quote a document's content (only positions and names).

use std::collections::BTreeMap;

use kuvryn_sync_api::application::ValuesSourceKind;
use kuvryn_sync_api::{FailureReason, keys};
use secrecy::SecretString;
use serde_json::{Map, Value};

use crate::credentials::{PASSWORD, USERNAME};

/// Longest Helm release name.
pub const MAX_RELEASE_NAME: usize = kuvryn_sync_api::application::MAX_RELEASE_NAME;

/// Why a release name is not acceptable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReleaseNameError {
    /// Empty, too long, or not a lowercase DNS subdomain.
    #[error(
        "spec.source.render.helm.releaseName {name:?} is invalid: {rule}; a Helm release name must be a lowercase DNS subdomain (lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit) of at most 53 characters; rename the release, for example to {suggestion:?}"
    )]
    Invalid {
        /// The name as stored (at most 80 characters of it).
        name: String,
        /// The rule it breaks.
        rule: &'static str,
        /// A valid name close to it.
        suggestion: String,
    },
}

impl ReleaseNameError {
    /// Always `ValidationFailure`: the Application must be changed.
    pub fn reason(&self) -> FailureReason {
        FailureReason::ValidationFailure
    }
}

/// Checks Helm's release name rule (`RELEASE_NAME_PATTERN`, at most [`MAX_RELEASE_NAME`]).
pub fn validate_release_name(name: &str) -> Result<(), ReleaseNameError> {
    let rule = release_name_problem(name);
    match rule {
        None => Ok(()),
        Some(rule) => Err(ReleaseNameError::Invalid {
            name: name.chars().take(80).collect(),
            rule,
            suggestion: suggest_release_name(name),
        }),
    }
}

fn release_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("it is empty");
    }
    if name.len() > MAX_RELEASE_NAME {
        return Some("it is longer than 53 characters");
    }
    if name.chars().any(|c| c.is_ascii_uppercase()) {
        return Some("it contains uppercase letters");
    }
    if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.') {
        return Some("it contains characters other than lowercase letters, digits, '-' and '.'");
    }
    let part_ok = |part: &str| {
        let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        part.chars().next().is_some_and(alnum) && part.chars().last().is_some_and(alnum)
    };
    if !name.split('.').all(part_ok) {
        return Some(
            "a dot-separated part is empty or does not start and end with a letter or digit",
        );
    }
    None
}

/// A valid release name close to `name`: lowercased, other characters turned into `-`, parts
/// trimmed to start and end with a letter or digit, at most 53 characters; the default
/// `kuvryn-sync` when nothing usable is left.
pub fn suggest_release_name(name: &str) -> String {
    let lowered: String = name
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' { c } else { '-' })
        .collect();
    let trim = |p: &str| p.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_owned();
    let mut out =
        lowered.split('.').map(trim).filter(|p| !p.is_empty()).collect::<Vec<_>>().join(".");
    out.truncate(MAX_RELEASE_NAME);
    let out = out.trim_end_matches(['-', '.']).to_owned();
    if release_name_problem(&out).is_none() {
        out
    } else {
        kuvryn_sync_api::application::DEFAULT_RELEASE_NAME.to_owned()
    }
}

/// Why values cannot be assembled. Messages name the file or object and key, never content.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HelmValuesError {
    /// A values file path that could leave the repository or read as a flag.
    #[error(
        "spec.source.render.helm.valuesFiles[{index}] {path:?} is not allowed: {rule}; give a path relative to the repository root"
    )]
    BadValuesFilePath {
        /// Position in `valuesFiles`.
        index: usize,
        /// The path (at most 200 characters).
        path: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// A `valuesFrom` object lacks the key.
    #[error(
        "spec.source.render.helm.valuesFrom[{index}]: {kind} {name} has no key {key:?}; add the key or set valuesFrom[{index}].key to an existing one"
    )]
    MissingKey {
        /// Position in `valuesFrom`.
        index: usize,
        /// `ConfigMap` or `Secret`.
        kind: &'static str,
        /// The object's name.
        name: String,
        /// The key looked for.
        key: String,
    },
    /// A document is not valid YAML or not UTF-8.
    #[error("{source_name}: invalid YAML at line {line}, column {column}: {problem}")]
    Syntax {
        /// The file, or `ConfigMap name key k`.
        source_name: String,
        /// 1-based line (0 when unknown).
        line: usize,
        /// 1-based column (0 when unknown).
        column: usize,
        /// What is wrong, without quoted input.
        problem: String,
    },
    /// A document over a YAML budget (nodes with aliases expanded, depth, bytes).
    #[error("{source_name}: YAML budget exceeded: {exceeded}")]
    Budget {
        /// The file, or `ConfigMap name key k`.
        source_name: String,
        /// Which budget, with its limit.
        exceeded: crate::yaml::Exceeded,
    },
    /// The top level of a values document is not a map.
    #[error(
        "{source_name}: Helm values must be a map of keys to values at the top level, not {found}"
    )]
    NotAMap {
        /// The file, object key, or `spec.source.render.helm.values`.
        source_name: String,
        /// What it is instead.
        found: &'static str,
    },
}

impl HelmValuesError {
    /// `ValidationFailure` for a path that breaks the rules (the spec must change),
    /// `RenderFailure` otherwise.
    pub fn reason(&self) -> FailureReason {
        match self {
            HelmValuesError::BadValuesFilePath { .. } => FailureReason::ValidationFailure,
            _ => FailureReason::RenderFailure,
        }
    }
}

/// Checks one `valuesFiles` entry: relative, no `..`, no leading `-`, no NUL or backslash.
pub fn check_values_file_path(index: usize, path: &str) -> Result<(), HelmValuesError> {
    let rule = if path.is_empty() {
        Some("it is empty")
    } else if path.starts_with('/') {
        Some("absolute paths are refused")
    } else if path.starts_with('-') {
        Some("a path may not start with '-'")
    } else if path.contains('\0') || path.contains('\\') {
        Some("NUL and backslash are refused")
    } else if path.split('/').any(|c| c == "..") {
        Some("'..' components are refused")
    } else if path.split('/').all(|c| c.is_empty() || c == ".") {
        Some("it names no file")
    } else {
        None
    };
    match rule {
        None => Ok(()),
        Some(rule) => Err(HelmValuesError::BadValuesFilePath {
            index,
            path: path.chars().take(200).collect(),
            rule,
        }),
    }
}

/// One `valuesFrom` entry with the object's data as read by the controller.
#[derive(Clone, PartialEq, Eq)]
pub struct ValuesFromData {
    /// ConfigMap or Secret.
    pub kind: ValuesSourceKind,
    /// The object's name.
    pub name: String,
    /// The key to read (`values.yaml` by default).
    pub key: String,
    /// The object's data (a ConfigMap's `data` and `binaryData`; a Secret's decoded `data`).
    pub data: BTreeMap<String, Vec<u8>>,
}

impl std::fmt::Debug for ValuesFromData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secret data must never reach a log through Debug.
        f.debug_struct("ValuesFromData")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("key", &self.key)
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Everything values are assembled from, in Helm's precedence order (later wins).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ValuesInput {
    /// `valuesFiles`: (path as written, content), in the order given.
    pub files: Vec<(String, Vec<u8>)>,
    /// `valuesFrom`, in the order given.
    pub from: Vec<ValuesFromData>,
    /// The inline `values`.
    pub inline: Option<Value>,
}

/// The merged user values and what of them is secret.
#[derive(Clone, PartialEq, Default)]
pub struct AssembledValues {
    /// A JSON object to pass to Helm over the chart's own `values.yaml`.
    pub values: Value,
    /// Every leaf value that came from a Secret, as text; callers mask these.
    pub secret_strings: Vec<String>,
}

impl std::fmt::Debug for AssembledValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AssembledValues")
            .field("keys", &self.values.as_object().map(|m| m.keys().collect::<Vec<_>>()))
            .field("secret_strings", &self.secret_strings.len())
            .finish()
    }
}

impl AssembledValues {
    /// A redactor masking every Secret-sourced value.
    pub fn redactor(&self) -> crate::redact::Redactor {
        let mut redactor = crate::redact::Redactor::new();
        for secret in &self.secret_strings {
            redactor.add_secret(secret);
        }
        redactor
    }
}

/// Merges values files, then `valuesFrom`, then inline values, as Helm merges `-f` files and
/// `--set` (see the module documentation).
pub fn assemble_values(input: &ValuesInput) -> Result<AssembledValues, HelmValuesError> {
    let mut merged = Map::new();
    let mut secret_strings = Vec::new();
    for (index, (path, bytes)) in input.files.iter().enumerate() {
        check_values_file_path(index, path)?;
        merged = merge_user_values(merged, parse_values_document(path, bytes)?);
    }
    for (index, from) in input.from.iter().enumerate() {
        let kind = kind_name(from.kind);
        let bytes = from.data.get(&from.key).ok_or_else(|| HelmValuesError::MissingKey {
            index,
            kind,
            name: from.name.clone(),
            key: from.key.clone(),
        })?;
        let source_name = format!("{kind} {} key {}", from.name, from.key);
        let document = parse_values_document(&source_name, bytes)?;
        if from.kind == ValuesSourceKind::Secret {
            collect_leaves(&Value::Object(document.clone()), &mut secret_strings);
        }
        merged = merge_user_values(merged, document);
    }
    match &input.inline {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => merged = merge_user_values(merged, map.clone()),
        Some(other) => {
            return Err(HelmValuesError::NotAMap {
                source_name: "spec.source.render.helm.values".to_owned(),
                found: json_kind(other),
            });
        }
    }
    secret_strings.sort();
    secret_strings.dedup();
    Ok(AssembledValues { values: Value::Object(merged), secret_strings })
}

/// Helm's merge of user-supplied values: maps merge key by key, recursively; anything else from
/// `overlay` (including `null`) replaces what `base` had.
pub fn merge_user_values(
    mut base: Map<String, Value>,
    overlay: Map<String, Value>,
) -> Map<String, Value> {
    for (key, value) in overlay {
        match (base.get_mut(&key), value) {
            (Some(Value::Object(existing)), Value::Object(incoming)) => {
                let existing = std::mem::take(existing);
                base.insert(key, Value::Object(merge_user_values(existing, incoming)));
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
    base
}

fn kind_name(kind: ValuesSourceKind) -> &'static str {
    match kind {
        ValuesSourceKind::ConfigMap => "ConfigMap",
        ValuesSourceKind::Secret => "Secret",
    }
}

/// Parses one YAML values document into a map; empty documents are an empty map.
fn parse_values_document(
    source_name: &str,
    bytes: &[u8],
) -> Result<Map<String, Value>, HelmValuesError> {
    let text = std::str::from_utf8(bytes).map_err(|_| HelmValuesError::Syntax {
        source_name: source_name.to_owned(),
        line: 0,
        column: 0,
        problem: "not UTF-8 text".to_owned(),
    })?;
    let value: Value = if text.trim().is_empty() {
        Value::Null
    } else {
        crate::yaml::document(text).map_err(|err| match err.exceeded() {
            Some(exceeded) => {
                HelmValuesError::Budget { source_name: source_name.to_owned(), exceeded }
            }
            None => {
                let (line, column) = err.position();
                HelmValuesError::Syntax {
                    source_name: source_name.to_owned(),
                    line,
                    column,
                    problem: err.problem(),
                }
            }
        })?
    };
    match value {
        Value::Null => Ok(Map::new()),
        Value::Object(map) => Ok(map),
        other => Err(HelmValuesError::NotAMap {
            source_name: source_name.to_owned(),
            found: json_kind(&other),
        }),
    }
}

fn collect_leaves(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => map.values().for_each(|v| collect_leaves(v, out)),
        Value::Array(items) => items.iter().for_each(|v| collect_leaves(v, out)),
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Bool(_) | Value::Null => {}
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// Username and password for a chart repository or registry.
#[derive(Clone, Debug)]
pub struct RegistryCredentials {
    /// Basic-auth user name.
    pub username: String,
    /// Basic-auth password (or token).
    pub password: SecretString,
}

/// Why a Secret cannot serve as registry credentials; never quotes a value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryCredentialsError {
    /// The Secret lacks the label, or it has another value.
    #[error(
        "Secret {secret} is not labelled sync.kuvryn.io/registry-credentials: \"true\"; add the label to allow it as chart registry credentials"
    )]
    NotLabelled {
        /// `namespace/name`.
        secret: String,
    },
    /// A key is missing, empty or not UTF-8.
    #[error(
        "Secret {secret}: key {key} is missing, empty or not UTF-8 text; chart registry credentials need username and password"
    )]
    MissingKey {
        /// `namespace/name`.
        secret: String,
        /// The key.
        key: &'static str,
    },
}

impl RegistryCredentialsError {
    /// Always `AuthenticationFailure`.
    pub fn reason(&self) -> FailureReason {
        FailureReason::AuthenticationFailure
    }
}

/// Registry credentials from a Secret's labels and decoded data (`data` merged with
/// `stringData`): the label `sync.kuvryn.io/registry-credentials` must be exactly `"true"`, and
/// `username` and `password` must be non-empty UTF-8 (trailing line ends dropped). `secret` is the
/// `namespace/name` used in messages.
pub fn registry_credentials(
    secret: &str,
    secret_labels: &BTreeMap<String, String>,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<RegistryCredentials, RegistryCredentialsError> {
    if secret_labels.get(keys::REGISTRY_CREDENTIALS).map(String::as_str) != Some(keys::TRUE) {
        return Err(RegistryCredentialsError::NotLabelled { secret: secret.to_owned() });
    }
    let text = |key: &'static str| {
        data.get(key)
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
            .map(|t| t.trim_end_matches(['\n', '\r']).to_owned())
            .filter(|t| !t.is_empty())
            .ok_or(RegistryCredentialsError::MissingKey { secret: secret.to_owned(), key })
    };
    Ok(RegistryCredentials {
        username: text(USERNAME)?,
        password: SecretString::from(text(PASSWORD)?),
    })
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;
    use serde_json::json;

    use super::*;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn merge_follows_helms_user_value_rules() {
        let cases = [
            (
                "maps deep-merge",
                json!({"a": {"x": 1, "y": 2}}),
                json!({"a": {"y": 3}}),
                json!({"a": {"x": 1, "y": 3}}),
            ),
            ("lists replace whole", json!({"l": [1, 2]}), json!({"l": [3]}), json!({"l": [3]})),
            ("scalar replaces map", json!({"a": {"x": 1}}), json!({"a": "s"}), json!({"a": "s"})),
            (
                "map replaces scalar",
                json!({"a": "s"}),
                json!({"a": {"x": 1}}),
                json!({"a": {"x": 1}}),
            ),
            (
                "null is kept for Helm to delete",
                json!({"a": {"x": 1}}),
                json!({"a": null}),
                json!({"a": null}),
            ),
            (
                "nested null",
                json!({"a": {"x": 1, "y": 2}}),
                json!({"a": {"x": null}}),
                json!({"a": {"x": null, "y": 2}}),
            ),
            ("new keys added", json!({}), json!({"b": true}), json!({"b": true})),
        ];
        for (name, base, overlay, want) in cases {
            assert_eq!(Value::Object(merge_user_values(map(base), map(overlay))), want, "{name}");
        }
    }

    fn from(
        kind: ValuesSourceKind,
        name: &str,
        key: &str,
        data: &[(&str, &str)],
    ) -> ValuesFromData {
        ValuesFromData {
            kind,
            name: name.to_owned(),
            key: key.to_owned(),
            data: data.iter().map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec())).collect(),
        }
    }

    #[test]
    fn files_then_values_from_then_inline() {
        let input = ValuesInput {
            files: vec![
                ("values/a.yaml".into(), b"level: file-a\nfromA: 1\nnested: {a: 1}\n".to_vec()),
                ("values/b.yaml".into(), b"level: file-b\nnested: {b: 2}\n".to_vec()),
            ],
            from: vec![
                from(
                    ValuesSourceKind::ConfigMap,
                    "cm",
                    "values.yaml",
                    &[("values.yaml", "level: configmap\ncm: yes-cm\n")],
                ),
                from(
                    ValuesSourceKind::Secret,
                    "sec",
                    "v",
                    &[("v", "password: hunter2-secret\nlevel: secret\nlist: [tok-1234, 5678]\n")],
                ),
            ],
            inline: Some(json!({"level": "inline", "nested": {"c": 3}})),
        };
        let out = assemble_values(&input).expect("assemble");
        assert_eq!(
            out.values,
            json!({"level": "inline", "fromA": 1, "nested": {"a": 1, "b": 2, "c": 3}, "cm": "yes-cm",
                   "password": "hunter2-secret", "list": ["tok-1234", 5678]})
        );
        assert_eq!(out.secret_strings, ["5678", "hunter2-secret", "secret", "tok-1234"]);
        let debug = format!("{out:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(!out.redactor().redact("x hunter2-secret y").contains("hunter2"));
    }

    #[test]
    fn assembly_errors_name_the_source_and_never_the_content() {
        let cases: Vec<(ValuesInput, &str, FailureReason)> = vec![
            (
                ValuesInput {
                    from: vec![from(
                        ValuesSourceKind::Secret,
                        "creds",
                        "values.yaml",
                        &[("other", "x: 1")],
                    )],
                    ..Default::default()
                },
                "Secret creds has no key \"values.yaml\"",
                FailureReason::RenderFailure,
            ),
            (
                ValuesInput {
                    files: vec![("v.yaml".into(), b"a: [unclosed-secret-text\n".to_vec())],
                    ..Default::default()
                },
                "v.yaml: invalid YAML at line",
                FailureReason::RenderFailure,
            ),
            (
                ValuesInput {
                    files: vec![("v.yaml".into(), b"- a\n- b\n".to_vec())],
                    ..Default::default()
                },
                "v.yaml: Helm values must be a map",
                FailureReason::RenderFailure,
            ),
            (
                ValuesInput { inline: Some(json!([1])), ..Default::default() },
                "spec.source.render.helm.values: Helm values must be a map",
                FailureReason::RenderFailure,
            ),
            (
                ValuesInput { files: vec![("../x.yaml".into(), Vec::new())], ..Default::default() },
                "valuesFiles[0] \"../x.yaml\" is not allowed",
                FailureReason::ValidationFailure,
            ),
        ];
        for (input, want, reason) in cases {
            let err = assemble_values(&input).expect_err(want);
            let text = err.to_string();
            assert!(text.contains(want), "{text}");
            assert!(!text.contains("unclosed-secret-text"), "{text}");
            assert_eq!(err.reason(), reason, "{text}");
        }
    }

    #[test]
    fn empty_documents_are_empty_maps() {
        let input = ValuesInput {
            files: vec![("empty.yaml".into(), b"\n# nothing\n".to_vec())],
            from: vec![from(ValuesSourceKind::ConfigMap, "cm", "k", &[("k", "")])],
            inline: None,
        };
        assert_eq!(assemble_values(&input).expect("ok").values, json!({}));
    }

    #[test]
    fn values_file_path_rules() {
        let cases = [
            ("values.yaml", true),
            ("env/prod/values.yaml", true),
            ("./values.yaml", true),
            ("a..b/values.yaml", true),
            ("/etc/passwd", false),
            ("../../etc/passwd", false),
            ("env/../../x.yaml", false),
            ("-f.yaml", false),
            ("", false),
            (".", false),
            ("a\\b.yaml", false),
        ];
        for (path, ok) in cases {
            assert_eq!(check_values_file_path(0, path).is_ok(), ok, "{path}");
        }
    }

    #[test]
    fn release_name_rule() {
        let cases = [
            ("kuvryn-sync", true),
            ("a", true),
            ("web.prod-1", true),
            (&"a".repeat(53)[..], true),
            (&"a".repeat(54)[..], false),
            ("", false),
            ("Web", false),
            ("web_app", false),
            ("-web", false),
            ("web-", false),
            ("web..app", false),
            (".web", false),
        ];
        for (name, ok) in cases {
            assert_eq!(validate_release_name(name).is_ok(), ok, "{name:?}");
        }
    }

    #[test]
    fn invalid_release_name_suggests_a_valid_one() {
        let cases = [
            ("My_App", "my-app"),
            ("-web-", "web"),
            ("a..b", "a.b"),
            ("___", "kuvryn-sync"),
            (&"Ab".repeat(40)[..], &"ab".repeat(40)[..53]),
        ];
        for (name, want) in cases {
            let err = validate_release_name(name).expect_err(name);
            assert_eq!(err.reason(), FailureReason::ValidationFailure);
            assert!(err.to_string().contains(&format!("{want:?}")), "{err}");
            assert!(validate_release_name(want).is_ok(), "{want}");
        }
    }

    #[test]
    fn registry_credentials_need_the_label_and_both_keys() {
        let labels = |v: Option<&str>| -> BTreeMap<String, String> {
            v.map(|v| (keys::REGISTRY_CREDENTIALS.to_owned(), v.to_owned())).into_iter().collect()
        };
        let data = |pairs: &[(&str, &[u8])]| -> BTreeMap<String, Vec<u8>> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), v.to_vec())).collect()
        };
        let good = data(&[("username", b"bot\n"), ("password", b"s3cret-pass\n")]);
        let creds = registry_credentials("ns/s", &labels(Some("true")), &good).expect("ok");
        assert_eq!(creds.username, "bot");
        assert_eq!(creds.password.expose_secret(), "s3cret-pass");

        type Case<'a> = (BTreeMap<String, String>, BTreeMap<String, Vec<u8>>, &'a str);
        let cases: Vec<Case<'_>> = vec![
            (labels(None), good.clone(), "is not labelled"),
            (labels(Some("yes")), good.clone(), "is not labelled"),
            (labels(Some("true")), data(&[("password", b"s3cret-pass")]), "key username"),
            (
                labels(Some("true")),
                data(&[("username", b"bot"), ("password", b"\n")]),
                "key password",
            ),
            (
                labels(Some("true")),
                data(&[("username", b"bot"), ("password", &[0xff, 0xfe])]),
                "key password",
            ),
        ];
        for (labels, data, want) in cases {
            let err = registry_credentials("ns/s", &labels, &data).expect_err(want);
            let text = err.to_string();
            assert!(text.contains(want) && text.contains("ns/s"), "{text}");
            assert!(!text.contains("s3cret"), "{text}");
            assert_eq!(err.reason(), FailureReason::AuthenticationFailure);
        }
    }
}
