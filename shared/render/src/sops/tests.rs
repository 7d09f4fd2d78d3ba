use super::*;

#[test]
fn format_follows_the_extension_like_sops() {
    let cases = [
        ("a/secret.yaml", SopsFormat::Yaml),
        ("secret.yml", SopsFormat::Yaml),
        ("config.json", SopsFormat::Json),
        ("app.env", SopsFormat::Dotenv),
        ("file.txt", SopsFormat::Binary),
        ("key", SopsFormat::Binary),
        (".env", SopsFormat::Binary),
    ];
    for (path, want) in cases {
        assert_eq!(SopsFormat::for_path(Path::new(path)), want, "{path}");
    }
}

fn path(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| (*p).to_owned()).collect()
}

#[test]
fn leaf_rules_decide_like_sops() {
    let suffix = LeafRules { unencrypted_suffix: Some("_plain".into()), ..Default::default() };
    let enc_suffix = LeafRules { encrypted_suffix: Some("_secret".into()), ..Default::default() };
    let regex = LeafRules {
        encrypted_regex: Some(Regex::new("^(data|stringData)$").expect("regex")),
        ..Default::default()
    };
    let unregex = LeafRules {
        unencrypted_regex: Some(Regex::new("^meta").expect("regex")),
        ..Default::default()
    };
    let none = LeafRules::default();
    let cases: [(&LeafRules, &[&str], bool); 10] = [
        (&none, &["a", "b"], true),
        (&suffix, &["a", "b"], true),
        (&suffix, &["a_plain", "b"], false),
        (&suffix, &["a", "b_plain"], false),
        (&enc_suffix, &["a"], false),
        (&enc_suffix, &["a_secret", "b"], true),
        (&regex, &["metadata", "name"], false),
        (&regex, &["stringData", "key"], true),
        (&unregex, &["metadata", "name"], false),
        (&unregex, &["spec", "x"], true),
    ];
    for (rules, parts, want) in cases {
        assert_eq!(rules.is_encrypted(&path(parts)), want, "{parts:?} under {rules:?}");
    }
}

#[test]
fn bools_parse_like_go() {
    let cases = [
        ("true", Some(true)),
        ("True", Some(true)),
        ("1", Some(true)),
        ("F", Some(false)),
        ("no", None),
        ("", None),
    ];
    for (text, want) in cases {
        assert_eq!(parse_go_bool(text), want, "{text}");
    }
}

#[test]
fn leaves_hash_like_sops() {
    let cases: [(Value, Option<&str>); 7] = [
        (Value::String("v1".into()), Some("v1")),
        (Value::Bool(true), Some("True")),
        (Value::Bool(false), Some("False")),
        (Value::Number(42.into()), Some("42")),
        (Value::from(2.5), Some("2.5")),
        (Value::from(1000.0), Some("1000")),
        (Value::Null, None),
    ];
    for (value, want) in cases {
        assert_eq!(mac_bytes(&value), want.map(|w| w.as_bytes().to_vec()), "{value:?}");
    }
    assert_eq!(format_float(f64::INFINITY), "+Inf");
}

#[test]
fn integral_floats_come_back_as_integers_like_go_prints_them() {
    let cases = [
        (7.0, Value::from(7)),
        (2.5, Value::from(2.5)),
        (-3.0, Value::from(-3)),
        (1e300, Value::from(1e300)),
    ];
    for (input, want) in cases {
        assert_eq!(float_value(input), want, "{input}");
    }
}

#[test]
fn key_entries_name_the_problem_without_the_key() {
    let entries =
        |text: &str| BTreeMap::from([("keys.agekey".to_owned(), text.as_bytes().to_vec())]);
    let err = AgeKeys::from_secret_entries(&entries("# only a comment\n")).expect_err("no key");
    assert_eq!(err, SopsError::NoKeys);
    let err =
        AgeKeys::from_secret_entries(&entries("AGE-SECRET-KEY-1NOTAKEY")).expect_err("bad key");
    assert!(matches!(err, SopsError::InvalidKey { line: 1, .. }), "{err:?}");
    assert!(!err.to_string().contains("NOTAKEY"), "{err}");
    let other = BTreeMap::from([("key.txt".to_owned(), b"AGE-SECRET-KEY-1X".to_vec())]);
    assert_eq!(AgeKeys::from_secret_entries(&other).expect_err("ignored"), SopsError::NoKeys);
    assert!(SopsError::NoKeys.to_string().contains(".agekey"));
    assert_eq!(SopsError::NoKeys.reason(), FailureReason::DecryptionFailure);
}

#[test]
fn detection_needs_the_sops_metadata() {
    let cases: [(&str, SopsFormat, bool); 6] = [
        ("a: 1\nsops:\n  mac: x\n", SopsFormat::Yaml, true),
        ("a: 1\nsops: mac\n", SopsFormat::Yaml, false),
        ("{\"a\": 1, \"sops\": {\"mac\": \"x\"}}", SopsFormat::Json, true),
        ("a=1\nsops_mac=x\n", SopsFormat::Dotenv, true),
        ("a=sops_mac\n", SopsFormat::Dotenv, false),
        ("{\"data\": \"x\", \"sops\": {\"mac\": \"x\"}}", SopsFormat::Binary, true),
    ];
    for (text, format, want) in cases {
        assert_eq!(is_encrypted(text.as_bytes(), format), want, "{text}");
    }
}
