//! Kubernetes JSONPath (the dialect of client-go's `util/jsonpath`, which kube-apiserver uses
//! for a CRD's `additionalPrinterColumns`) evaluated with the maintained `jsonpath-rust` crate,
//! an RFC 9535 implementation already in the dependency tree through kube-client.
//!
//! The two dialects agree on filters (`[?(@.type=="Ready")]`), indexes, slices, unions, `*` and
//! `..`, but not on everything around them, so a Kubernetes path is translated before the query:
//! - it may be wrapped in `{...}` and need not start with `$`; RFC 9535 queries start with `$`;
//! - a `.name` may hold characters RFC 9535's shorthand refuses (`-`, `/`, a leading digit) and
//!   `\.` escapes a dot inside a name (`.metadata.labels.app\.kubernetes\.io/name`): every name,
//!   in the path and in a filter's `@.name`, becomes the bracketed `['name']`.
//!
//! Only a path's first result is used, as kube-apiserver's table convertor does. Paths with the
//! template parts of the dialect (`range`, literals between expressions) are not printer-column
//! paths and evaluate to nothing.

use jsonpath_rust::JsonPath;
use serde_json::Value;

/// The first value `path` (Kubernetes dialect) selects in `obj`; `None` when it selects nothing
/// or does not parse.
pub fn first(obj: &Value, path: &str) -> Option<Value> {
    let query = to_rfc9535(path)?;
    obj.query(&query).ok()?.into_iter().next().cloned()
}

/// The RFC 9535 query for a Kubernetes JSONPath; `None` for what cannot be translated (an
/// unterminated bracket or quote).
pub fn to_rfc9535(path: &str) -> Option<String> {
    let p = path.trim();
    let p = p.strip_prefix('{').and_then(|p| p.strip_suffix('}')).unwrap_or(p).trim();
    let p = p.strip_prefix('$').unwrap_or(p);
    let mut out = String::from("$");
    translate_segments(p, &mut out)?;
    Some(out)
}

/// `.a.b[0]..c[?(...)]` after the root, appended to `out` with names bracketed.
fn translate_segments(p: &str, out: &mut String) -> Option<()> {
    let chars: Vec<char> = p.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' if chars.get(i + 1) == Some(&'.') => {
                out.push_str("..");
                i = push_name(&chars, i + 2, out);
            }
            '.' => i = push_name(&chars, i + 1, out),
            '[' => {
                let end = closing_bracket(&chars, i)?;
                let inner: String = chars[i + 1..end].iter().collect();
                out.push('[');
                match inner.trim_start().strip_prefix('?') {
                    Some(filter) => {
                        out.push('?');
                        translate_filter(filter, out)?;
                    }
                    None => out.push_str(&inner),
                }
                out.push(']');
                i = end + 1;
            }
            c if c.is_whitespace() => i += 1,
            // A name right after the root (`metadata.name`), as client-go accepts it.
            _ => i = push_name(&chars, i, out),
        }
    }
    Some(())
}

/// The name starting at `start` (up to `.`, `[` or the end; `\.` is a dot of the name) as
/// `['name']` (or `[*]`), appended to `out`; returns where the name ends.
fn push_name(chars: &[char], start: usize, out: &mut String) -> usize {
    let mut name = String::new();
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '\\' if chars.get(i + 1) == Some(&'.') => {
                name.push('.');
                i += 2;
            }
            '.' | '[' => break,
            c if c.is_whitespace() || matches!(c, ')' | '=' | '!' | '<' | '>' | '&' | '|') => {
                break;
            }
            c => {
                name.push(c);
                i += 1;
            }
        }
    }
    match name.as_str() {
        "" => {}
        "*" => out.push_str("[*]"),
        _ => {
            out.push_str("['");
            out.push_str(&name.replace('\\', "\\\\").replace('\'', "\\'"));
            out.push_str("']");
        }
    }
    i
}

/// The index of the `]` closing the `[` at `open`, skipping quoted strings and nested brackets.
fn closing_bracket(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    let mut i = open;
    while i < chars.len() {
        let c = chars[i];
        match quote {
            Some(_) if c == '\\' => i += 1,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' => quote = Some(c),
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i);
                    }
                }
                _ => {}
            },
        }
        i += 1;
    }
    None
}

/// A filter expression: string literals kept, `@`'s names bracketed.
fn translate_filter(filter: &str, out: &mut String) -> Option<()> {
    let chars: Vec<char> = filter.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' | '"' => {
                let end = (i + 1..chars.len()).find(|&j| chars[j] == c && chars[j - 1] != '\\')?;
                out.extend(&chars[i..=end]);
                i = end + 1;
            }
            '@' | '$' => {
                out.push(c);
                i += 1;
                while chars.get(i) == Some(&'.') || chars.get(i) == Some(&'[') {
                    if chars[i] == '.' {
                        i = push_name(&chars, i + 1, out);
                    } else {
                        let end = closing_bracket(&chars, i)?;
                        out.extend(&chars[i..=end]);
                        i = end + 1;
                    }
                }
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kubernetes_paths_translate_to_rfc9535() {
        let cases = [
            (".status.state", "$['status']['state']"),
            ("{.status.state}", "$['status']['state']"),
            ("$.spec.replicas", "$['spec']['replicas']"),
            (
                r#".status.conditions[?(@.type=="Ready")].status"#,
                r#"$['status']['conditions'][?(@['type']=="Ready")]['status']"#,
            ),
            (
                ".status.conditions[?(@.type=='Ready')].status",
                "$['status']['conditions'][?(@['type']=='Ready')]['status']",
            ),
            (
                r".metadata.labels.app\.kubernetes\.io/name",
                "$['metadata']['labels']['app.kubernetes.io/name']",
            ),
            (
                ".metadata.labels['app.kubernetes.io/name']",
                "$['metadata']['labels']['app.kubernetes.io/name']",
            ),
            (".spec.containers[0].image", "$['spec']['containers'][0]['image']"),
            (".spec.containers[*].name", "$['spec']['containers'][*]['name']"),
            (".items[-1:]", "$['items'][-1:]"),
            ("..image", "$..['image']"),
            (".spec.my-field", "$['spec']['my-field']"),
        ];
        for (k8s, want) in cases {
            assert_eq!(to_rfc9535(k8s).as_deref(), Some(want), "{k8s}");
        }
        assert_eq!(to_rfc9535(".a[0"), None);
    }

    #[test]
    fn first_result_as_kube_apiserver_prints_a_column() {
        let o = json!({
            "metadata": {"labels": {"app.kubernetes.io/name": "web"}},
            "spec": {"containers": [{"name": "a", "image": "x:1"}, {"name": "b", "image": "y:2"}],
                "my-field": 3},
            "status": {"conditions": [
                {"type": "Reconciling", "status": "False"},
                {"type": "Ready", "status": "True", "reason": "Synced"}]}});
        let cases = [
            (r#".status.conditions[?(@.type=="Ready")].status"#, Some(json!("True"))),
            (".status.conditions[?(@.type=='Ready')].reason", Some(json!("Synced"))),
            (r#".status.conditions[?(@.type=="Stalled")].status"#, None),
            (".spec.containers[1].image", Some(json!("y:2"))),
            (".spec.containers[*].name", Some(json!("a"))),
            (r".metadata.labels.app\.kubernetes\.io/name", Some(json!("web"))),
            (".spec.my-field", Some(json!(3))),
            (".status.missing", None),
            (".nothing.at.all", None),
        ];
        for (path, want) in cases {
            assert_eq!(first(&o, path), want, "{path}");
        }
        let absent = json!({"metadata": {"name": "fresh"}});
        assert_eq!(first(&absent, r#".status.conditions[?(@.type=="Ready")].status"#), None);
    }
}
