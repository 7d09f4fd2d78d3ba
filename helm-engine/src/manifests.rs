//! Splitting Helm's output (template path → multi-document YAML) into objects.

use std::collections::BTreeMap;

use crate::HelmError;

/// One rendered Kubernetes object and the template it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedDocument {
    /// The template path as Helm names it, e.g. `kuvryn-sync/templates/rbac.yaml`.
    pub template: String,
    /// The object.
    pub object: serde_json::Value,
}

impl RenderedDocument {
    /// `kind`, or `""`.
    pub fn kind(&self) -> &str {
        self.object.get("kind").and_then(|k| k.as_str()).unwrap_or_default()
    }

    /// `metadata.name`, or `""`.
    pub fn name(&self) -> &str {
        self.object.pointer("/metadata/name").and_then(|k| k.as_str()).unwrap_or_default()
    }
}

/// Whether Helm's output entry is something a renderer would apply: not `NOTES.txt`, not a
/// partial (`_helpers.tpl`), and a YAML or JSON file.
pub fn is_manifest_template(template: &str) -> bool {
    let file = template.rsplit('/').next().unwrap_or(template);
    if file == "NOTES.txt" || file.starts_with('_') {
        return false;
    }
    [".yaml", ".yml", ".json"].iter().any(|ext| file.ends_with(ext))
}

/// Parses one template's output into its YAML documents, skipping empty ones (whitespace,
/// comments, or a bare `---`). Every non-empty document must be a mapping.
pub fn split_yaml_documents(
    template: &str,
    text: &str,
) -> Result<Vec<serde_json::Value>, HelmError> {
    let values = kuvryn_sync_core::yaml::documents(text).map_err(|e| HelmError::Manifest {
        template: template.to_owned(),
        message: e.to_string(),
    })?;
    let mut documents = Vec::new();
    for value in values {
        match value {
            serde_json::Value::Null => {}
            serde_json::Value::Object(_) => documents.push(value),
            _ => {
                return Err(HelmError::Manifest {
                    template: template.to_owned(),
                    message: "a document is not a mapping".to_owned(),
                });
            }
        }
    }
    Ok(documents)
}

/// All objects of a render, in template-path order then document order. `NOTES.txt`, partials,
/// non-YAML files and empty documents are skipped.
pub fn split_manifests(
    manifests: &BTreeMap<String, String>,
) -> Result<Vec<RenderedDocument>, HelmError> {
    let mut out = Vec::new();
    for (template, text) in manifests {
        if !is_manifest_template(template) {
            continue;
        }
        for object in split_yaml_documents(template, text)? {
            out.push(RenderedDocument { template: template.clone(), object });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_notes_partials_and_other_files() {
        assert!(is_manifest_template("c/templates/deploy.yaml"));
        assert!(is_manifest_template("c/charts/sub/templates/x.yml"));
        assert!(is_manifest_template("c/templates/x.json"));
        assert!(!is_manifest_template("c/templates/NOTES.txt"));
        assert!(!is_manifest_template("c/templates/_helpers.tpl"));
        assert!(!is_manifest_template("c/templates/_part.yaml"));
        assert!(!is_manifest_template("c/templates/readme.txt"));
    }

    #[test]
    fn splits_documents_and_skips_empty_ones() {
        let text = "---\n# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n\n---\nkind: Secret\nmetadata: {name: b}\n";
        let docs = split_yaml_documents("c/templates/x.yaml", text).expect("split");
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["kind"], "ConfigMap");
        assert_eq!(docs[1]["metadata"]["name"], "b");
    }

    #[test]
    fn empty_output_gives_no_documents() {
        assert!(split_yaml_documents("t", "").expect("split").is_empty());
        assert!(split_yaml_documents("t", "\n\n# nothing\n").expect("split").is_empty());
    }

    #[test]
    fn scalar_document_is_an_error_naming_the_template() {
        let err = split_yaml_documents("c/templates/bad.yaml", "just text\n").expect_err("scalar");
        assert!(
            matches!(&err, HelmError::Manifest { template, .. } if template == "c/templates/bad.yaml")
        );
        let err = split_yaml_documents("t", "a: [\n").expect_err("broken");
        assert!(matches!(err, HelmError::Manifest { .. }));
    }

    #[test]
    fn split_manifests_orders_by_template_and_drops_notes() {
        let mut m = BTreeMap::new();
        m.insert("c/templates/b.yaml".to_owned(), "kind: B\nmetadata: {name: b}\n".to_owned());
        m.insert("c/templates/a.yaml".to_owned(), "kind: A1\n---\nkind: A2\n".to_owned());
        m.insert("c/templates/NOTES.txt".to_owned(), "kind: Notes\n".to_owned());
        let docs = split_manifests(&m).expect("split");
        let kinds: Vec<_> = docs.iter().map(RenderedDocument::kind).collect();
        assert_eq!(kinds, ["A1", "A2", "B"]);
        assert_eq!(docs[2].name(), "b");
        assert_eq!(docs[0].template, "c/templates/a.yaml");
    }
}
