//! Reading one `.ksync.yaml`: its shape, unknown keys and each spec's decoding. The policy rules
//! come later, in [`plan_discovery`](super::plan_discovery).

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json};

use kuvryn_sync_api::{API_VERSION, ApplicationSpec};

use super::{DiscoveryError, MAX_CONFIG_FILE_BYTES, clip};

/// `kind` of the single-Application form.
const APPLICATION_KIND: &str = "Application";
/// Longest serde/YAML message kept in an error.
const MAX_DETAIL: usize = 200;

/// One Application proposed by a `.ksync.yaml` file, as written (defaults not yet applied).
#[derive(Clone, Debug, PartialEq)]
pub struct DiscoveredEntry {
    /// The configured path of the file it came from.
    pub path: String,
    /// Position in the file's `applications:` list (0 for the single-Application form).
    pub index: usize,
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `spec.source.repositoryRef.name` as written.
    pub repository_ref: Option<String>,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// The spec; `source.repositoryRef.name` is empty when the file omits it.
    pub spec: ApplicationSpec,
}

impl DiscoveredEntry {
    /// How messages name this entry: its name, or its position.
    pub(super) fn label(&self) -> String {
        entry_label(self.name.as_deref(), self.index)
    }
}

fn entry_label(name: Option<&str>, index: usize) -> String {
    match name {
        Some(name) if !name.is_empty() => name.to_owned(),
        _ => format!("applications[{index}]"),
    }
}

const TOP_LEVEL_ALLOWED: &str =
    "applications (a list), or apiVersion, kind, metadata and spec of a single Application";
const ENTRY_ALLOWED: &str = "metadata, spec (and apiVersion, kind)";
const METADATA_ALLOWED: &str = "name, namespace, labels, annotations";

/// Parse one `.ksync.yaml`: an `applications:` list, or a single full Application. An empty
/// file (or `applications: []`) proposes no Application. Checks the file's shape, unknown keys
/// and each spec's decoding; the policy rules are [`plan_discovery`]'s.
///
/// [`plan_discovery`]: super::plan_discovery
pub fn parse_config_file(path: &str, text: &str) -> Result<Vec<DiscoveredEntry>, DiscoveryError> {
    let Some(top) = read_top_level(path, text)? else {
        return Ok(Vec::new());
    };
    let keys = string_keys(&top);
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    if keys.contains(&"applications") {
        reject_unknown(path, "the top level", &keys, &["applications"], TOP_LEVEL_ALLOWED)?;
        return parse_application_list(path, top.get("applications"));
    }
    if keys.contains(&"apiVersion") || keys.contains(&"kind") {
        let entry = parse_entry(path, 0, "the top level", &Json::Object(top), true)?;
        return Ok(vec![entry]);
    }
    reject_unknown(path, "the top level", &keys, &[], TOP_LEVEL_ALLOWED)?;
    Ok(Vec::new())
}

/// The file's one YAML document as a mapping, or `None` when it is empty.
fn read_top_level(path: &str, text: &str) -> Result<Option<Map<String, Json>>, DiscoveryError> {
    if text.len() > MAX_CONFIG_FILE_BYTES {
        return Err(DiscoveryError::FileTooLarge {
            path: path.to_owned(),
            limit: MAX_CONFIG_FILE_BYTES,
        });
    }
    let doc = crate::yaml::document(text).map_err(|e| match e.exceeded() {
        Some(exceeded) => DiscoveryError::YamlBudget { path: path.to_owned(), exceeded },
        None => DiscoveryError::InvalidYaml {
            path: path.to_owned(),
            message: clip(&e.to_string(), MAX_DETAIL),
        },
    })?;
    match doc {
        Json::Null => Ok(None),
        Json::Object(map) => Ok(Some(map)),
        _ => Err(wrong_shape(
            path,
            "the top level".into(),
            "a mapping with applications: or a single Application",
        )),
    }
}

/// The entries of the `applications:` list (none when it is empty or null).
fn parse_application_list(
    path: &str,
    applications: Option<&Json>,
) -> Result<Vec<DiscoveredEntry>, DiscoveryError> {
    let items = match applications {
        None | Some(Json::Null) => return Ok(Vec::new()),
        Some(Json::Array(items)) => items,
        Some(_) => return Err(wrong_shape(path, "applications".into(), "a list")),
    };
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            parse_entry(path, index, &format!("applications[{index}]"), item, false)
        })
        .collect()
}

fn wrong_shape(path: &str, at: String, expected: &'static str) -> DiscoveryError {
    DiscoveryError::WrongShape { path: path.to_owned(), at, expected }
}

/// The keys of a mapping (always strings: the YAML reader spells scalar keys as strings).
fn string_keys(map: &Map<String, Json>) -> Vec<&str> {
    map.keys().map(String::as_str).collect()
}

fn reject_unknown(
    path: &str,
    at: &str,
    keys: &[&str],
    allowed: &[&str],
    allowed_text: &'static str,
) -> Result<(), DiscoveryError> {
    let unknown: Vec<String> =
        keys.iter().filter(|k| !allowed.contains(k)).map(|k| clip(k, 64)).collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(DiscoveryError::UnknownKeys {
            path: path.to_owned(),
            at: at.to_owned(),
            keys: unknown,
            allowed: allowed_text,
        })
    }
}

/// One Application: a list entry at `at`, or the whole file when `single`.
fn parse_entry(
    path: &str,
    index: usize,
    at: &str,
    item: &Json,
    single: bool,
) -> Result<DiscoveredEntry, DiscoveryError> {
    let Json::Object(map) = item else {
        return Err(wrong_shape(path, at.to_owned(), "a mapping with metadata and spec"));
    };
    let keys = string_keys(map);
    let allowed_text = if single { TOP_LEVEL_ALLOWED } else { ENTRY_ALLOWED };
    reject_unknown(path, at, &keys, &["apiVersion", "kind", "metadata", "spec"], allowed_text)?;
    check_kind(path, at, map, single)?;
    let metadata_at = if single { "metadata".to_owned() } else { format!("{at}.metadata") };
    let metadata = parse_metadata(path, &metadata_at, map.get("metadata"))?;
    let app = entry_label(metadata.name.as_deref(), index);
    let spec_at = if single { "spec".to_owned() } else { format!("{at}.spec") };
    let (spec, repository_ref) = parse_spec(path, &app, spec_at, map.get("spec"))?;
    Ok(DiscoveredEntry {
        path: path.to_owned(),
        index,
        name: metadata.name,
        namespace: metadata.namespace,
        repository_ref,
        labels: metadata.labels,
        annotations: metadata.annotations,
        spec,
    })
}

/// `apiVersion` and `kind`, required in the single form and optional in a list entry, must name
/// an Application.
fn check_kind(
    path: &str,
    at: &str,
    map: &Map<String, Json>,
    single: bool,
) -> Result<(), DiscoveryError> {
    let api_version = map.get("apiVersion");
    let kind = map.get("kind");
    let is_application = api_version.and_then(Json::as_str) == Some(API_VERSION)
        && kind.and_then(Json::as_str) == Some(APPLICATION_KIND);
    if (single || api_version.is_some() || kind.is_some()) && !is_application {
        return Err(DiscoveryError::WrongKind { path: path.to_owned(), at: at.to_owned() });
    }
    Ok(())
}

/// The metadata an entry may carry.
#[derive(Default)]
struct Metadata {
    name: Option<String>,
    namespace: Option<String>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

/// An entry's `metadata` (at `at`): only name, namespace, labels and annotations.
fn parse_metadata(path: &str, at: &str, value: Option<&Json>) -> Result<Metadata, DiscoveryError> {
    let meta = match value {
        None | Some(Json::Null) => return Ok(Metadata::default()),
        Some(Json::Object(meta)) => meta,
        Some(_) => return Err(wrong_shape(path, at.to_owned(), "a mapping")),
    };
    let keys = string_keys(meta);
    reject_unknown(
        path,
        at,
        &keys,
        &["name", "namespace", "labels", "annotations"],
        METADATA_ALLOWED,
    )?;
    Ok(Metadata {
        name: metadata_string(path, at, meta, "name")?,
        namespace: metadata_string(path, at, meta, "namespace")?,
        labels: metadata_map(path, at, meta, "labels")?,
        annotations: metadata_map(path, at, meta, "annotations")?,
    })
}

/// A string in the metadata; empty counts as absent.
fn metadata_string(
    path: &str,
    at: &str,
    meta: &Map<String, Json>,
    key: &str,
) -> Result<Option<String>, DiscoveryError> {
    match meta.get(key) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) => Ok((!s.is_empty()).then(|| s.clone())),
        Some(_) => Err(wrong_shape(path, format!("{at}.{key}"), "a string")),
    }
}

/// A mapping of strings to strings in the metadata (labels, annotations).
fn metadata_map(
    path: &str,
    at: &str,
    meta: &Map<String, Json>,
    key: &str,
) -> Result<BTreeMap<String, String>, DiscoveryError> {
    match meta.get(key) {
        None | Some(Json::Null) => Ok(BTreeMap::new()),
        Some(value) => serde_json::from_value(value.clone()).map_err(|_| {
            wrong_shape(path, format!("{at}.{key}"), "a mapping of strings to strings")
        }),
    }
}

/// An entry's `spec` (at `spec_at`) decoded, and `spec.source.repositoryRef.name` as written.
/// `spec.source.render.type` is required.
fn parse_spec(
    path: &str,
    app: &str,
    spec_at: String,
    value: Option<&Json>,
) -> Result<(ApplicationSpec, Option<String>), DiscoveryError> {
    let invalid = |e: serde_json::Error| DiscoveryError::InvalidSpec {
        path: path.to_owned(),
        app: app.to_owned(),
        message: clip(&e.to_string(), MAX_DETAIL),
    };
    let spec_value = match value {
        None | Some(Json::Null) => Json::Object(Default::default()),
        Some(value) => value.clone(),
    };
    let Json::Object(mut spec_map) = spec_value else {
        return Err(wrong_shape(path, spec_at, "a mapping"));
    };
    let render_type =
        spec_map.get("source").and_then(|s| s.get("render")).and_then(|r| r.get("type"));
    if matches!(render_type, None | Some(Json::Null)) {
        return Err(DiscoveryError::MissingRenderType {
            path: path.to_owned(),
            app: app.to_owned(),
        });
    }
    let repository_ref = default_repository_ref(&mut spec_map);
    let spec = serde_json::from_value(Json::Object(spec_map)).map_err(invalid)?;
    Ok((spec, repository_ref))
}

/// `repositoryRef` defaults to the discovering Repository: give the spec an empty name to decode
/// with when it has none, and return the name that was written.
fn default_repository_ref(spec: &mut serde_json::Map<String, Json>) -> Option<String> {
    let Some(Json::Object(source)) = spec.get_mut("source") else {
        return None;
    };
    match source.get_mut("repositoryRef") {
        Some(Json::Object(reference)) => match reference.get("name") {
            Some(Json::String(n)) => (!n.is_empty()).then(|| n.clone()),
            None | Some(Json::Null) => {
                reference.insert("name".into(), Json::String(String::new()));
                None
            }
            Some(_) => None,
        },
        None | Some(Json::Null) => {
            source.insert("repositoryRef".into(), serde_json::json!({ "name": "" }));
            None
        }
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = ".ksync.yaml";

    #[test]
    fn parse_edge_cases() {
        let cases: &[(&str, usize)] = &[
            ("", 0),
            ("# nothing yet\n", 0),
            ("applications: []\n", 0),
            ("applications:\n", 0),
            ("{}\n", 0),
        ];
        for (text, count) in cases {
            let entries = parse_config_file(ROOT, text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(entries.len(), *count, "{text:?}");
        }
        let refused: &[(&str, &str)] = &[
            (
                "- a\n- b\n",
                ".ksync.yaml: the top level must be a mapping with applications: or a single Application",
            ),
            ("applications: {}\n", ".ksync.yaml: applications must be a list"),
            (
                "applications: [1]\n",
                ".ksync.yaml: applications[0] must be a mapping with metadata and spec",
            ),
            (
                "metadata: {}\nspec: {}\n",
                ".ksync.yaml: unknown keys metadata, spec at the top level",
            ),
            ("a: 1\n---\nb: 2\n", ".ksync.yaml: not a single valid YAML document"),
            (
                "applications:\n  - metadata: {name: [x]}\n",
                ".ksync.yaml: applications[0].metadata.name must be a string",
            ),
        ];
        for (text, expected) in refused {
            let err =
                parse_config_file(ROOT, text).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.starts_with(expected), "{text:?}: {err}");
        }
        let big = "#".repeat(MAX_CONFIG_FILE_BYTES + 1);
        assert!(matches!(parse_config_file(ROOT, &big), Err(DiscoveryError::FileTooLarge { .. })));
        // Billion laughs: nine levels of ten aliases each.
        let mut bomb = String::from("x0: &x0 [lol]\n");
        for level in 1..10 {
            let refs = vec![format!("*x{}", level - 1); 10].join(", ");
            bomb.push_str(&format!("x{level}: &x{level} [{refs}]\n"));
        }
        let err = parse_config_file(ROOT, &bomb).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            err,
            ".ksync.yaml: YAML budget exceeded: more than 1000000 nodes (aliases included); split \
             the file or expand fewer aliases"
        );
    }
}
