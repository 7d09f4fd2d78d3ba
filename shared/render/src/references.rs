//! Every place a kustomization (or a builtin generator/transformer configuration it names) can
//! make kustomize read a path or a URL, as one declarative table, and the pure walk that lists a
//! document's entries from it. No I/O: [`crate::kustomize`] reads the files, decides what an
//! entry may be (local, remote, refused) and materialises what it references.
//!
//! The table follows kustomize's `Kustomization` type (v5): every field whose value is loaded
//! through kustomize's loader (which fetches `http(s)://` URLs and remote Git specs) is listed,
//! so "no network" does not depend on a list of "base" fields. The Helm fields are refused
//! outright: Helm through kustomize is disabled (use `render.type: helm`).
//!
//! Hand-written: it is our policy over kustomize's schema; no crate describes which kustomize
//! fields load files.

use serde_json::Value;

/// What a field's entry is, which decides what it may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReferenceKind {
    /// A kustomization directory or a manifest file (`resources`, `bases`, `components`); remote
    /// only with `--allow-remote-bases`.
    Base,
    /// A builtin plugin configuration, a directory of them, or inline (`generators`,
    /// `transformers`, `validators`); never remote. Its own file references are read with
    /// [`PLUGIN_REFERENCES`].
    PluginConfig,
    /// A file path (never remote).
    File,
    /// `file` or `key=file` (generator `files`); never remote.
    KeyedFile,
    /// A file path or an inline patch (`patchesStrategicMerge`); never remote.
    FileOrInline,
}

/// Where a kustomization names paths or URLs: (field path, kind). `name[]` walks every element of
/// the list `name`; `a.b` is field `b` of object `a`.
pub const KUSTOMIZATION_REFERENCES: &[(&str, ReferenceKind)] = &[
    ("resources[]", ReferenceKind::Base),
    ("bases[]", ReferenceKind::Base),
    ("components[]", ReferenceKind::Base),
    ("generators[]", ReferenceKind::PluginConfig),
    ("transformers[]", ReferenceKind::PluginConfig),
    ("validators[]", ReferenceKind::PluginConfig),
    ("configMapGenerator[].files[]", ReferenceKind::KeyedFile),
    ("configMapGenerator[].envs[]", ReferenceKind::File),
    ("configMapGenerator[].env", ReferenceKind::File),
    ("secretGenerator[].files[]", ReferenceKind::KeyedFile),
    ("secretGenerator[].envs[]", ReferenceKind::File),
    ("secretGenerator[].env", ReferenceKind::File),
    ("patches[].path", ReferenceKind::File),
    ("patchesStrategicMerge[]", ReferenceKind::FileOrInline),
    ("patchesJson6902[].path", ReferenceKind::File),
    ("replacements[].path", ReferenceKind::File),
    ("openapi.path", ReferenceKind::File),
    ("configurations[]", ReferenceKind::File),
    ("crds[]", ReferenceKind::File),
];

/// Kustomization fields refused whatever they hold: Helm inflation through kustomize.
pub const REFUSED_FIELDS: &[&str] = &["helmCharts", "helmChartInflationGenerator", "helmGlobals"];

/// Where a builtin plugin configuration (a `generators`/`transformers` entry) names files:
/// (kind, field path, kind of reference).
pub const PLUGIN_REFERENCES: &[(&str, &str, ReferenceKind)] = &[
    ("ConfigMapGenerator", "files[]", ReferenceKind::KeyedFile),
    ("ConfigMapGenerator", "envs[]", ReferenceKind::File),
    ("ConfigMapGenerator", "env", ReferenceKind::File),
    ("SecretGenerator", "files[]", ReferenceKind::KeyedFile),
    ("SecretGenerator", "envs[]", ReferenceKind::File),
    ("SecretGenerator", "env", ReferenceKind::File),
    ("PatchTransformer", "path", ReferenceKind::File),
    ("PatchJson6902Transformer", "path", ReferenceKind::File),
    ("PatchStrategicMergeTransformer", "paths[]", ReferenceKind::File),
    ("ReplacementTransformer", "replacements[].path", ReferenceKind::File),
];

/// Builtin plugin kinds refused whatever they hold.
pub const REFUSED_PLUGIN_KINDS: &[&str] = &["HelmChartInflationGenerator"];

/// One entry found: the field as shown to users (`configMapGenerator[0].files`), its kind, the
/// path or URL it names (for `key=file`, the file), and whether it is inline content rather than a
/// reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    pub field: String,
    pub kind: ReferenceKind,
    pub entry: String,
    pub inline: bool,
}

/// What a document names: its references, and the refused fields it sets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Found {
    pub references: Vec<Reference>,
    pub refused: Vec<String>,
}

/// The references of a kustomization (or Component) document.
pub fn kustomization_references(document: &Value) -> Found {
    let mut found = Found::default();
    for (pattern, kind) in KUSTOMIZATION_REFERENCES {
        walk(document, pattern, "", *kind, &mut found.references);
    }
    found.refused = REFUSED_FIELDS
        .iter()
        .filter(|field| document.get(**field).is_some_and(|v| !v.is_null()))
        .map(|field| (*field).to_owned())
        .collect();
    found
}

/// The references of a builtin plugin configuration document (by its `kind`); `field` is where
/// it was named (`generators`), shown as `generators: ConfigMapGenerator.files`.
pub fn plugin_references(document: &Value, field: &str) -> Found {
    let mut found = Found::default();
    let Some(kind) = document.get("kind").and_then(Value::as_str) else {
        return found;
    };
    if REFUSED_PLUGIN_KINDS.contains(&kind) {
        found.refused.push(format!("{field}: {kind}"));
        return found;
    }
    let prefix = format!("{field}: {kind}.");
    for (_, pattern, reference) in PLUGIN_REFERENCES.iter().filter(|(k, _, _)| *k == kind) {
        walk(document, pattern, &prefix, *reference, &mut found.references);
    }
    found
}

/// The path an entry names: for `key=file`, the file.
pub fn entry_path(kind: ReferenceKind, entry: &str) -> &str {
    let entry = entry.trim();
    match kind {
        ReferenceKind::KeyedFile => entry.split_once('=').map_or(entry, |(_, path)| path.trim()),
        _ => entry,
    }
}

/// Follow `pattern` through `value`, pushing every string found; `shown` is the field shown so
/// far (list indices of nested lists included, the last list's index left out).
fn walk(value: &Value, pattern: &str, shown: &str, kind: ReferenceKind, out: &mut Vec<Reference>) {
    let (head, rest) = pattern.split_once('.').map_or((pattern, None), |(h, r)| (h, Some(r)));
    let (name, is_list) = head.strip_suffix("[]").map_or((head, false), |name| (name, true));
    let Some(field) = value.get(name) else {
        return;
    };
    let shown = format!("{shown}{name}");
    let items: Vec<(Option<usize>, &Value)> = if is_list {
        field.as_array().map(|items| items.iter().enumerate().map(|(i, v)| (Some(i), v)).collect())
    } else {
        Some(vec![(None, field)])
    }
    .unwrap_or_default();
    for (index, item) in items {
        match rest {
            Some(rest) => {
                let nested = match index {
                    Some(i) => format!("{shown}[{i}]."),
                    None => format!("{shown}."),
                };
                walk(item, rest, &nested, kind, out);
            }
            None => {
                if let Some(text) = item.as_str() {
                    out.push(Reference {
                        field: shown.clone(),
                        kind,
                        entry: text.to_owned(),
                        inline: text.trim().contains('\n'),
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Value {
        kuvryn_sync_core::yaml::document(text).expect("yaml")
    }

    /// One case per field of the table: the document, the field shown, the entry found.
    #[test]
    fn every_kustomization_field_is_found() {
        use ReferenceKind::*;
        let rows: &[(&str, &str, ReferenceKind, &str)] = &[
            ("resources: [u]", "resources", Base, "u"),
            ("bases: [u]", "bases", Base, "u"),
            ("components: [u]", "components", Base, "u"),
            ("generators: [u]", "generators", PluginConfig, "u"),
            ("transformers: [u]", "transformers", PluginConfig, "u"),
            ("validators: [u]", "validators", PluginConfig, "u"),
            (
                "configMapGenerator: [{name: c, files: [creds=u]}]",
                "configMapGenerator[0].files",
                KeyedFile,
                "creds=u",
            ),
            ("configMapGenerator: [{name: c, envs: [u]}]", "configMapGenerator[0].envs", File, "u"),
            ("configMapGenerator: [{name: c, env: u}]", "configMapGenerator[0].env", File, "u"),
            (
                "secretGenerator: [{name: c}, {name: d, files: [u]}]",
                "secretGenerator[1].files",
                KeyedFile,
                "u",
            ),
            ("secretGenerator: [{name: c, envs: [u]}]", "secretGenerator[0].envs", File, "u"),
            ("secretGenerator: [{name: c, env: u}]", "secretGenerator[0].env", File, "u"),
            ("patches: [{path: u}]", "patches[0].path", File, "u"),
            ("patchesStrategicMerge: [u]", "patchesStrategicMerge", FileOrInline, "u"),
            ("patchesJson6902: [{path: u}]", "patchesJson6902[0].path", File, "u"),
            ("replacements: [{path: u}]", "replacements[0].path", File, "u"),
            ("openapi: {path: u}", "openapi.path", File, "u"),
            ("configurations: [u]", "configurations", File, "u"),
            ("crds: [u]", "crds", File, "u"),
        ];
        for (document, field, kind, entry) in rows {
            let found = kustomization_references(&yaml(document));
            let expected = Reference {
                field: (*field).to_owned(),
                kind: *kind,
                entry: (*entry).to_owned(),
                inline: false,
            };
            assert_eq!(found.references, [expected], "{document}");
            assert!(found.refused.is_empty(), "{document}");
        }
        assert_eq!(
            KUSTOMIZATION_REFERENCES.len(),
            rows.len(),
            "every field of the table has its case"
        );
    }

    #[test]
    fn helm_fields_are_refused_and_other_fields_ignored() {
        let found = kustomization_references(&yaml(
            "helmCharts: [{name: x, repo: 'http://u'}]\nhelmGlobals: {chartHome: c}\n\
             helmChartInflationGenerator: [{}]\nnamePrefix: 'http://not-a-path'\n\
             images: [{name: 'http://x'}]\nreplacements: [{source: {kind: A}}]\n",
        ));
        assert!(found.references.is_empty(), "{found:?}");
        assert_eq!(found.refused, ["helmCharts", "helmChartInflationGenerator", "helmGlobals"]);
    }

    #[test]
    fn inline_entries_are_marked() {
        let found = kustomization_references(&yaml(
            "patchesStrategicMerge:\n- |\n  apiVersion: v1\n  kind: ConfigMap\n- p.yaml\n",
        ));
        let inline: Vec<bool> = found.references.iter().map(|r| r.inline).collect();
        assert_eq!(inline, [true, false]);
    }

    /// One case per builtin plugin configuration field.
    #[test]
    fn every_plugin_field_is_found() {
        let rows: &[(&str, &str)] = &[
            ("kind: ConfigMapGenerator\nfiles: [k=u]", "generators: ConfigMapGenerator.files"),
            ("kind: ConfigMapGenerator\nenvs: [u]", "generators: ConfigMapGenerator.envs"),
            ("kind: ConfigMapGenerator\nenv: u", "generators: ConfigMapGenerator.env"),
            ("kind: SecretGenerator\nfiles: [u]", "generators: SecretGenerator.files"),
            ("kind: SecretGenerator\nenvs: [u]", "generators: SecretGenerator.envs"),
            ("kind: SecretGenerator\nenv: u", "generators: SecretGenerator.env"),
            ("kind: PatchTransformer\npath: u", "generators: PatchTransformer.path"),
            (
                "kind: PatchJson6902Transformer\npath: u",
                "generators: PatchJson6902Transformer.path",
            ),
            (
                "kind: PatchStrategicMergeTransformer\npaths: [u]",
                "generators: PatchStrategicMergeTransformer.paths",
            ),
            (
                "kind: ReplacementTransformer\nreplacements: [{path: u}]",
                "generators: ReplacementTransformer.replacements[0].path",
            ),
        ];
        for (document, field) in rows {
            let found = plugin_references(&yaml(document), "generators");
            let fields: Vec<&str> = found.references.iter().map(|r| r.field.as_str()).collect();
            assert_eq!(fields, [*field], "{document}");
            assert_eq!(entry_path(found.references[0].kind, &found.references[0].entry), "u");
        }
        assert_eq!(PLUGIN_REFERENCES.len(), rows.len(), "every plugin field has its case");
        let helm = plugin_references(&yaml("kind: HelmChartInflationGenerator"), "generators");
        assert_eq!(helm.refused, ["generators: HelmChartInflationGenerator"]);
        assert_eq!(plugin_references(&yaml("kind: Other\nfiles: [u]"), "g"), Found::default());
    }

    #[test]
    fn keyed_files_name_the_file_after_the_key() {
        let rows: &[(ReferenceKind, &str, &str)] = &[
            (ReferenceKind::KeyedFile, "creds=http://127.0.0.1:1/x", "http://127.0.0.1:1/x"),
            (ReferenceKind::KeyedFile, "app.properties", "app.properties"),
            (ReferenceKind::File, "a=b", "a=b"),
        ];
        for (kind, entry, path) in rows {
            assert_eq!(entry_path(*kind, entry), *path, "{entry}");
        }
    }
}
