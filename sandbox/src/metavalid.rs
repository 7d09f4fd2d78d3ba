//! ObjectMeta validation as kube-apiserver's `ValidateObjectMeta` does it for every kind:
//! label keys and values, annotation keys and the annotations' total size
//! (<https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set>,
//! <https://kubernetes.io/docs/concepts/overview/working-with-objects/annotations/#syntax-and-character-set>).
//! Hand-written because the rules are a few character classes and the messages must be
//! apimachinery's word for word; a regex crate would only hide them.

use serde_json::Value;

/// One field error: (field path, reason, message).
pub type Cause = (String, String, String);

/// The most bytes all annotations of an object may take together (keys plus values).
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const PREFIX_MSG: &str = "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, the name part of a qualified name and a
/// non-empty label value.
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// A lowercase RFC 1123 subdomain.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// apimachinery's `IsQualifiedName`: `[prefix/]name`; the messages of what is wrong.
pub fn qualified_name_errors(key: &str) -> Vec<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) if !n.contains('/') => (Some(p), n),
        Some(_) => {
            return vec![format!(
                "a qualified name {QUALIFIED_NAME_MSG_SHORT} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
        None => (None, key),
    };
    let mut errs = vec![];
    if let Some(p) = prefix {
        if p.is_empty() {
            errs.push("prefix part must be non-empty".to_string());
        } else if !is_dns_subdomain(p) {
            errs.push(PREFIX_MSG.to_string());
        }
    }
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    } else if !is_name_part(name) {
        errs.push(QUALIFIED_NAME_MSG.to_string());
    }
    errs
}

const QUALIFIED_NAME_MSG_SHORT: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// apimachinery's `IsValidLabelValue`.
pub fn label_value_errors(v: &str) -> Vec<String> {
    let mut errs = vec![];
    if v.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !v.is_empty() && !is_name_part(v) {
        errs.push(LABEL_VALUE_MSG.to_string());
    }
    errs
}

fn invalid(field: &str, value: &str, msg: &str) -> Cause {
    (field.to_string(), "FieldValueInvalid".into(), format!("Invalid value: {value:?}: {msg}"))
}

/// Label and annotation rules of `metadata` (an object's `metadata` member).
pub fn validate_object_meta(meta: &Value) -> Vec<Cause> {
    let mut out = vec![];
    for (k, v) in meta.get("labels").and_then(Value::as_object).into_iter().flatten() {
        for e in qualified_name_errors(k) {
            out.push(invalid("metadata.labels", k, &e));
        }
        let v = v.as_str().unwrap_or_default();
        for e in label_value_errors(v) {
            out.push(invalid("metadata.labels", v, &e));
        }
    }
    let mut total = 0usize;
    for (k, v) in meta.get("annotations").and_then(Value::as_object).into_iter().flatten() {
        // Annotation keys are qualified names too, compared lower-cased.
        for e in qualified_name_errors(&k.to_lowercase()) {
            out.push(invalid("metadata.annotations", k, &e));
        }
        total += k.len() + v.as_str().map(str::len).unwrap_or_default();
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        out.push((
            "metadata.annotations".into(),
            "FieldValueTooLong".into(),
            format!("Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn qualified_names_table() {
        let cases: &[(&str, bool)] = &[
            ("app", true),
            ("example.com/app", true),
            ("kubernetes.io/metadata.name", true),
            ("My_Name.1", true),
            ("", false),
            ("-app", false),
            ("app-", false),
            ("bad key", false),
            ("Example.com/app", false),
            ("/app", false),
            ("a/b/c", false),
            (&"x".repeat(64), false),
        ];
        for (k, ok) in cases {
            assert_eq!(qualified_name_errors(k).is_empty(), *ok, "{k:?}");
        }
    }

    #[test]
    fn label_values_table() {
        let cases: &[(&str, bool)] = &[
            ("", true),
            ("v1", true),
            ("my_value.x-y", true),
            ("bad value!", false),
            ("-x", false),
            ("x.", false),
            (&"v".repeat(64), false),
        ];
        for (v, ok) in cases {
            assert_eq!(label_value_errors(v).is_empty(), *ok, "{v:?}");
        }
    }

    #[test]
    fn object_meta_names_the_field_and_value() {
        let errs = validate_object_meta(&json!({"labels": {"app": "bad value!"}}));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].0, "metadata.labels");
        assert!(errs[0].2.starts_with("Invalid value: \"bad value!\": a valid label"), "{errs:?}");
        let big = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT);
        let errs = validate_object_meta(&json!({"annotations": {"a": big}}));
        assert_eq!(errs[0].1, "FieldValueTooLong");
        assert!(
            validate_object_meta(&json!({"labels": {"a": "b"}, "annotations": {"x/y": "z"}}))
                .is_empty()
        );
    }
}
