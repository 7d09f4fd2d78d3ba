use serde_json::json;

use super::*;

/// Billion laughs: `levels` anchors, each a list referencing the previous one `fan` times, then
/// keys referencing the last anchor until the text is about `size` bytes.
fn bomb(levels: usize, fan: usize, size: usize) -> String {
    let mut text = String::from("l0: &l0 [\"lol\"]\n");
    for level in 1..=levels {
        let refs = vec![format!("*l{}", level - 1); fan].join(", ");
        text.push_str(&format!("l{level}: &l{level} [{refs}]\n"));
    }
    let mut n = 0;
    while text.len() < size {
        text.push_str(&format!("k{n}: *l{levels}\n"));
        n += 1;
    }
    text
}

fn small() -> Limits {
    Limits { max_bytes: 1 << 20, max_nodes: 1_000, max_depth: 8, max_documents: 4 }
}

#[test]
fn over_budget_inputs_name_the_limit() {
    let deep = format!("{}x{}", "[".repeat(200), "]".repeat(200));
    let deep_block = (0..20).map(|i| format!("{}k{i}:\n", "  ".repeat(i))).collect::<String>();
    let many_docs = "a: 1\n---\n".repeat(10);
    let big_scalar = format!("a: {}\n", "x".repeat(2 << 20));
    let wide = (0..2_000).map(|i| format!("k{i}: v\n")).collect::<String>();
    let merge_bomb = format!(
        "b0: &b0 {{x: 1}}\n{}",
        (1..12)
            .map(|i| format!("b{i}: &b{i} {{<<: *b{}, y{i}: [*b{}, *b{}]}}\n", i - 1, i - 1, i - 1))
            .collect::<String>()
    );
    let cases: [(&str, String, Limits, Exceeded); 10] = [
        (
            "15 KB billion laughs",
            bomb(9, 10, 15 << 10),
            Limits::DEFAULT,
            Exceeded::Nodes { limit: Limits::DEFAULT.max_nodes },
        ),
        (
            "140 KB billion laughs",
            bomb(9, 10, 140 << 10),
            Limits::DEFAULT,
            Exceeded::Nodes { limit: Limits::DEFAULT.max_nodes },
        ),
        (
            "small fan, many levels",
            bomb(40, 2, 0),
            Limits::DEFAULT,
            Exceeded::Nodes { limit: Limits::DEFAULT.max_nodes },
        ),
        ("bomb under small limits", bomb(4, 10, 0), small(), Exceeded::Nodes { limit: 1_000 }),
        ("deep flow nesting", deep, small(), Exceeded::Depth { limit: 8 }),
        ("deep block nesting", deep_block, small(), Exceeded::Depth { limit: 8 }),
        ("many documents", many_docs, small(), Exceeded::Documents { limit: 4 }),
        ("big scalar", big_scalar, small(), Exceeded::Bytes { limit: 1 << 20 }),
        ("wide mapping", wide, small(), Exceeded::Nodes { limit: 1_000 }),
        (
            "merge keys of aliases",
            merge_bomb,
            Limits { max_depth: 64, ..small() },
            Exceeded::Nodes { limit: 1_000 },
        ),
    ];
    for (name, text, limits, want) in cases {
        let err = documents_with(&text, &limits).expect_err(name);
        assert_eq!(err, YamlError::Budget(want), "{name}");
        let message = err.to_string();
        assert!(
            message.starts_with("YAML budget exceeded: more than")
                || message.contains("deeper than"),
            "{name}: {message}"
        );
        assert!(message.contains(&limit_of(want).to_string()), "{name}: {message}");
    }
}

fn limit_of(exceeded: Exceeded) -> usize {
    match exceeded {
        Exceeded::Bytes { limit }
        | Exceeded::Nodes { limit }
        | Exceeded::Depth { limit }
        | Exceeded::Documents { limit }
        | Exceeded::Anchors { limit }
        | Exceeded::MergeKeys { limit } => limit,
    }
}

#[test]
fn node_message_names_the_limit_and_what_to_do() {
    let err = documents(&bomb(9, 10, 15 << 10)).expect_err("bomb");
    assert_eq!(
        err.to_string(),
        "YAML budget exceeded: more than 1000000 nodes (aliases included); split the file or \
         expand fewer aliases"
    );
}

#[test]
fn a_bomb_is_refused_by_document_and_from_str_too() {
    let text = bomb(9, 10, 15 << 10);
    assert!(matches!(document(&text), Err(YamlError::Budget(Exceeded::Nodes { .. }))));
    assert!(matches!(from_str::<Value>(&text), Err(YamlError::Budget(Exceeded::Nodes { .. }))));
}

#[test]
fn aliases_within_budget_expand_and_count() {
    // 1 + 10 + 100 list items below l2, so l2 alone is 111 nodes plus keys.
    let text = bomb(2, 10, 0);
    let doc = document(&text).expect("small bomb parses");
    assert_eq!(doc["l2"].as_array().map(Vec::len), Some(10));
    assert_eq!(doc["l2"][9][9][0], "lol");
    // The root, 3 keys, l0: 2 nodes, l1: 1 + 10 * 2, l2: 1 + 10 * 21: 238 nodes in all.
    let exact = Limits { max_nodes: 238, ..Limits::DEFAULT };
    if let Err(err) = document_with(&text, &exact) {
        panic!("{err:?}");
    }
    let under = Limits { max_nodes: 237, ..Limits::DEFAULT };
    assert_eq!(
        document_with(&text, &under),
        Err(YamlError::Budget(Exceeded::Nodes { limit: 237 }))
    );
}

#[test]
fn within_budget_inputs_parse_as_json() {
    let cases: [(&str, &str, Vec<Value>); 9] = [
        ("empty", "", vec![]),
        ("comments only", "# nothing\n", vec![]),
        (
            "one manifest",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: \"1\"\n",
            vec![
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "1"}}),
            ],
        ),
        (
            "multi-document stream, empty documents skipped",
            "---\na: 1\n---\n---\nb: [x, 2, true, null, 1.5]\n...\n",
            vec![json!({"a": 1}), json!({"b": ["x", 2, true, null, 1.5]})],
        ),
        (
            "merge keys applied",
            "base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\n",
            vec![json!({"base": {"x": 1, "y": 2}, "use": {"x": 1, "y": 3}})],
        ),
        (
            "non-string keys become strings",
            "1: a\ntrue: b\nnull: c\n",
            vec![json!({"1": "a", "true": "b", "null": "c"})],
        ),
        ("repeated key: the last wins", "a: 1\na: 2\n", vec![json!({"a": 2})]),
        (
            "YAML 1.2 scalars",
            "a: yes\nb: 0o17\nc: '010'\nd: ~\ne: 1e3\n",
            vec![json!({"a": "yes", "b": 15, "c": "010", "d": null, "e": 1000.0})],
        ),
        (
            "block scalars",
            "s: |\n  line 1\n  line 2\nf: >\n  a\n  b\n",
            vec![json!({"s": "line 1\nline 2\n", "f": "a b\n"})],
        ),
    ];
    for (name, text, want) in cases {
        assert_eq!(documents(text).unwrap_or_else(|e| panic!("{name}: {e}")), want, "{name}");
    }
}

#[test]
fn a_large_crd_bundle_parses_within_the_default_budget() {
    // 3,000 CRD-like documents, about 3 MB: long descriptions, nested schemas.
    let mut text = String::new();
    for n in 0..3_000 {
        text.push_str(&format!(
            "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  \
             name: things{n}.example.com\nspec:\n  group: example.com\n  names:\n    kind: Thing{n}\n    \
             plural: things{n}\n  scope: Namespaced\n  versions:\n  - name: v1\n    served: true\n    \
             storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n"
        ));
        for p in 0..3 {
            text.push_str(&format!(
                "          field{p}:\n            description: {}\n            type: object\n            \
                 properties:\n              inner:\n                type: string\n                \
                 description: an inner field of the object, long enough to be realistic\n",
                "A description of this field that goes on for a while, as CRD descriptions do."
            ));
        }
    }
    assert!(text.len() > 2_500_000, "{} bytes", text.len());
    let docs = documents(&text).expect("the bundle parses");
    assert_eq!(docs.len(), 3_000);
    println!("bundle: {} bytes, {} nodes", text.len(), count(&Value::Array(docs.clone())));
    assert_eq!(docs[2_999]["metadata"]["name"], "things2999.example.com");
}

#[test]
fn syntax_errors_give_the_position_without_the_content() {
    let err = documents("a: 1\nb: [unclosed, \"s3cr3t\"\n").expect_err("syntax");
    let YamlError::Syntax { line, problem, .. } = &err else { panic!("{err:?}") };
    assert!(*line >= 2, "{err:?}");
    assert!(!err.to_string().contains("s3cr3t"), "{err}");
    assert!(!problem.is_empty());
    let err = document("a: 1\n---\nb: 2\n").expect_err("two documents");
    assert!(matches!(err, YamlError::Syntax { .. }), "{err:?}");
    let err = documents("? [a, b]\n: c\n").expect_err("complex key");
    assert!(err.to_string().contains("key"), "{err}");
}

#[test]
fn typed_decoding_goes_through_the_budget() {
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Index {
        entries: std::collections::BTreeMap<String, Vec<String>>,
    }
    let index: Index = from_str("entries:\n  a: [\"1.0.0\", \"1.1.0\"]\n").expect("index");
    assert_eq!(index.entries["a"], ["1.0.0", "1.1.0"]);
    let err = from_str::<Index>("entries: 3\n").expect_err("shape");
    assert!(matches!(err, YamlError::Syntax { .. }));
}

/// Peak memory of parsing the 140 KB bomb stays bounded. The peak is the process's: nextest runs
/// every test in a process of its own, and no other test of this crate comes near the bound.
#[test]
fn the_bomb_parse_peak_memory() {
    // Few anchored nodes, many replays: the built value itself reaches the node limit.
    let wide = format!(
        "l0: &l0 [{}]\n{}",
        vec!["lol"; 2_000].join(", "),
        (0..2_000).map(|n| format!("k{n}: *l0\n")).collect::<String>()
    );
    let before = vm_hwm_kib();
    let err = documents(&wide).expect_err("wide bomb");
    println!("wide ({} bytes): {err}; peak {before} -> {} KiB", wide.len(), vm_hwm_kib());
    let text = bomb(9, 10, 140 << 10);
    let before = vm_hwm_kib();
    let start = std::time::Instant::now();
    let err = documents(&text).expect_err("bomb");
    let elapsed = start.elapsed();
    let after = vm_hwm_kib();
    println!("ours: {err}; peak {before} -> {after} KiB in {elapsed:?}");
    assert!(after < 400 * 1024, "peak {after} KiB");
}

fn count(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(count).sum(),
        Value::Object(map) => map.values().map(|v| 1 + count(v)).sum(),
        _ => 0,
    }
}

fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn ordered_documents_keep_the_key_order_and_the_budget() {
    let docs = ordered_documents("z: 1\na: [x, {m: 2, b: 3}]\n---\nk: v\n").expect("ordered");
    let keys: Vec<&String> =
        docs[0].as_mapping().expect("mapping").iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["z", "a"]);
    let json = serde_json::to_string(&docs[0]).expect("json");
    assert_eq!(json, r#"{"z":1,"a":["x",{"m":2,"b":3}]}"#);
    let back: Node = serde_json::from_str(&json).expect("unbudgeted JSON read");
    assert_eq!(back, docs[0]);
    assert_eq!(docs[1].get("k").and_then(Node::as_str), Some("v"));
    assert!(matches!(
        ordered_documents(&bomb(9, 10, 15 << 10)),
        Err(YamlError::Budget(Exceeded::Nodes { .. }))
    ));
}
