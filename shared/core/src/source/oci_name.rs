//! The OCI distribution spec's repository name grammar, for chart names pulled from `oci://`
//! registries: the chart name is appended to the registry path, so a name such as `../x` or
//! `/x` would move the request to another repository of the registry.
//!
//! `name := component ("/" component)*`, `component := [a-z0-9]+ (separator [a-z0-9]+)*`,
//! `separator := "." | "_" | "__" | "-"+`, at most [`MAX_NAME_LEN`] characters in all. This
//! refuses `..`, empty components (leading, trailing or doubled `/`), upper case and anything
//! percent-encoded. Pure: no I/O.

/// Longest repository name accepted (the registry path plus the chart name).
pub const MAX_NAME_LEN: usize = 255;

/// Why `name` is not an OCI repository name, or `None` when it is one.
pub fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("it is empty");
    }
    if name.len() > MAX_NAME_LEN {
        return Some("it is longer than 255 characters");
    }
    if name.split('/').all(component_ok) {
        None
    } else if name.starts_with('/') || name.ends_with('/') || name.contains("//") {
        Some("it has an empty path component (a leading, trailing or doubled '/')")
    } else if name.split('/').any(|c| c == ".." || c == ".") {
        Some("it has a '.' or '..' path component")
    } else {
        Some(
            "each path component must be lower-case letters and digits, separated by '.', '_', \
             '__' or dashes (the OCI distribution name grammar)",
        )
    }
}

/// Whether `component` is one path component of a repository name:
/// `[a-z0-9]+ (separator [a-z0-9]+)*`. Image references are checked with it too.
pub fn component_ok(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        // A separator run: ".", "_", "__" or one or more "-", then an alphanumeric.
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let separator = &component[start..i];
        let valid = matches!(separator, "." | "_" | "__") || separator.bytes().all(|b| b == b'-');
        if !valid {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oci_name_grammar() {
        for good in ["web", "charts/web", "a.b_c__d--e-f", "team-1/charts/nginx-ingress", "x9"] {
            assert_eq!(name_problem(good), None, "{good}");
        }
        let bad: &[(&str, &str)] = &[
            ("", "empty"),
            ("../web", "'.' or '..'"),
            ("charts/../web", "'.' or '..'"),
            ("/web", "empty path component"),
            ("web/", "empty path component"),
            ("charts//web", "empty path component"),
            ("Web", "lower-case"),
            ("web..x", "lower-case"),
            ("web___x", "lower-case"),
            ("-web", "lower-case"),
            ("web%2f..", "lower-case"),
            ("web:1.0", "lower-case"),
            ("web@sha256", "lower-case"),
        ];
        for (name, why) in bad {
            let problem = name_problem(name).unwrap_or_else(|| panic!("{name} accepted"));
            assert!(problem.contains(why), "{name}: {problem}");
        }
        assert!(name_problem(&"a".repeat(256)).is_some());
    }
}
