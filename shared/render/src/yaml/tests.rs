use std::os::unix::fs::symlink;

use super::*;

const CANARY: &str = "canary-content-5e1f0c";

fn repo() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

fn write(root: &Path, path: &str, text: &str) {
    let full = root.join(path);
    fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
    fs::write(full, text).expect("write");
}

fn origins(objects: &[Rendered]) -> Vec<&str> {
    objects.iter().map(|r| r.origin.as_str()).collect()
}

fn cm(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n")
}

#[test]
fn files_render_recursively_in_a_stable_order_with_every_document() {
    let dir = repo();
    let root = dir.path();
    write(root, "apps/web/b.yaml", &format!("{}---\n{}", cm("b1"), cm("b2")));
    write(root, "apps/web/a.yml", &cm("a"));
    write(
        root,
        "apps/web/sub/c.json",
        r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}"#,
    );
    write(root, "apps/web/empty.yaml", "---\n# only a comment\n---\n");
    write(root, "apps/web/.ksync.yaml", "applications: []\n");
    write(root, "apps/web/.hidden.yaml", &cm("hidden"));
    write(root, "apps/web/.git/config.yaml", &cm("git"));
    write(root, "apps/web/README.md", "# not a manifest\n");
    write(root, "apps/other/x.yaml", &cm("other"));
    let objects = render(root, "apps/web", Limits::default()).expect("render");
    assert_eq!(
        origins(&objects),
        vec!["apps/web/a.yml#0", "apps/web/b.yaml#0", "apps/web/b.yaml#1", "apps/web/sub/c.json#0"]
    );
    assert_eq!(objects[2].object["metadata"]["name"], "b2");
    // The same tree renders the same way every time.
    assert_eq!(render(root, "apps/web", Limits::default()).expect("render"), objects);
}

#[test]
fn a_v1_list_contributes_its_items() {
    let dir = repo();
    let list = format!(
        "apiVersion: v1\nkind: List\nitems:\n- {}\n- {}",
        r#"{apiVersion: v1, kind: ConfigMap, metadata: {name: one}}"#,
        r#"{apiVersion: v1, kind: Secret, metadata: {name: two}}"#
    );
    write(dir.path(), "app/list.yaml", &list);
    let objects = render(dir.path(), "app", Limits::default()).expect("render");
    assert_eq!(origins(&objects), vec!["app/list.yaml#0.items[0]", "app/list.yaml#0.items[1]"]);
    write(dir.path(), "bad/list.yaml", "apiVersion: v1\nkind: List\n");
    let err = render(dir.path(), "bad", Limits::default()).expect_err("no items");
    assert_eq!(err, RenderError::BadList { path: "bad/list.yaml#0".into() });
}

#[test]
fn paths_and_links_stay_inside_the_repository() {
    let outside = repo();
    write(outside.path(), "secret.yaml", &cm(CANARY));
    let dir = repo();
    let root = dir.path();
    write(root, "shared/base.yaml", &cm("base"));
    write(root, "app/own.yaml", &cm("own"));
    symlink("../shared", root.join("app/linked")).expect("symlink");
    let objects = render(root, "app", Limits::default()).expect("a link inside is followed");
    assert_eq!(origins(&objects), vec!["app/linked/base.yaml#0", "app/own.yaml#0"]);

    // (setup, source path, expected error)
    let escape = |name: &str, target: &Path| {
        let case = repo();
        write(case.path(), "app/own.yaml", &cm("own"));
        symlink(target, case.path().join("app").join(name)).expect("symlink");
        case
    };
    let file_link = escape("leak.yaml", &outside.path().join("secret.yaml"));
    let dir_link = escape("etc", outside.path());
    let dangling = escape("gone.yaml", Path::new("/nonexistent/x.yaml"));
    let cycle = repo();
    write(cycle.path(), "app/own.yaml", &cm("own"));
    symlink("..", cycle.path().join("app/up")).expect("symlink");
    let cases: Vec<(&Path, &str, RenderError)> = vec![
        (file_link.path(), "app", RenderError::SymlinkEscapes { path: "app/leak.yaml".into() }),
        (dir_link.path(), "app", RenderError::SymlinkEscapes { path: "app/etc".into() }),
        (dangling.path(), "app", RenderError::SymlinkEscapes { path: "app/gone.yaml".into() }),
        (cycle.path(), "app", RenderError::SymlinkCycle { path: "app/up/app".into() }),
        (root, "../x", RenderError::PathNotRelative { path: "../x".into() }),
        (root, "app/../../x", RenderError::PathNotRelative { path: "app/../../x".into() }),
        (root, "/etc", RenderError::PathNotRelative { path: "/etc".into() }),
        (root, "missing", RenderError::PathMissing { path: "missing".into() }),
    ];
    for (root, path, expected) in cases {
        let err = render(root, path, Limits::default()).expect_err(path);
        assert_eq!(err, expected, "{path}");
        assert_eq!(err.reason(), expected.reason());
        assert!(!err.to_string().contains(CANARY), "{err}");
    }
    assert_eq!(
        RenderError::SymlinkEscapes { path: String::new() }.reason(),
        FailureReason::ValidationFailure
    );
}

#[test]
fn syntax_errors_name_file_and_position_but_never_the_content() {
    let dir = repo();
    write(dir.path(), "yaml/bad.yaml", &format!("{}---\nkey: [unclosed {CANARY}\n", cm("ok")));
    write(dir.path(), "json/bad.json", &format!("{{\"a\": {CANARY}}}"));
    for (path, file, format) in
        [("yaml", "yaml/bad.yaml", "YAML"), ("json", "json/bad.json", "JSON")]
    {
        let err = render(dir.path(), path, Limits::default()).expect_err(path);
        let RenderError::Syntax { path: at, format: found, line, .. } = &err else {
            panic!("a syntax error: {err:?}");
        };
        assert_eq!((at.as_str(), *found), (file, format));
        assert!(*line >= 1, "{err}");
        assert_eq!(err.reason(), FailureReason::RenderFailure);
        assert!(!err.to_string().contains(CANARY), "{err}");
    }
}

#[test]
fn limits_bound_the_number_of_files_and_bytes() {
    let dir = repo();
    for n in 0..5 {
        write(dir.path(), &format!("app/{n}.yaml"), &cm(&format!("c{n}")));
    }
    let few = Limits { max_files: 4, ..Limits::default() };
    assert_eq!(render(dir.path(), "app", few), Err(RenderError::TooManyFiles { limit: 4 }));
    let small = Limits { max_total_bytes: 100, ..Limits::default() };
    assert_eq!(render(dir.path(), "app", small), Err(RenderError::TooLarge { limit: 100 }));
    assert_eq!(render(dir.path(), "app", Limits::default()).expect("render").len(), 5);
}

#[test]
fn a_single_file_path_renders_that_file() {
    let dir = repo();
    write(dir.path(), "app/one.yaml", &cm("one"));
    let objects = render(dir.path(), "app/one.yaml", Limits::default()).expect("render");
    assert_eq!(origins(&objects), vec!["app/one.yaml#0"]);
}

/// Billion laughs as a ConfigMap: nine levels of ten aliases each under `data`.
fn alias_bomb() -> String {
    let mut text =
        String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\ndata:\n");
    text.push_str("  l0: &l0 [lol]\n");
    for level in 1..10 {
        let refs = vec![format!("*l{}", level - 1); 10].join(", ");
        text.push_str(&format!("  l{level}: &l{level} [{refs}]\n"));
    }
    text
}

#[test]
fn yaml_over_budget_is_a_render_failure_naming_the_file_and_the_limit() {
    let dir = repo();
    write(dir.path(), "app/a.yaml", &cm("fine"));
    write(dir.path(), "app/bomb.yaml", &alias_bomb());
    let err = render(dir.path(), "app", Limits::default()).expect_err("bomb");
    assert_eq!(
        err.to_string(),
        "app/bomb.yaml: YAML budget exceeded: more than 1000000 nodes (aliases included); split \
         the file or expand fewer aliases"
    );
    assert_eq!(err.reason(), FailureReason::RenderFailure);
}

#[test]
fn an_alias_expanded_object_too_large_for_the_api_server_is_not_rendered() {
    // Few nodes (a 4 KiB string repeated 1,000 times), but 4 MB as JSON.
    let dir = repo();
    let big = "x".repeat(4096);
    let refs = vec!["*big"; 1_000].join(", ");
    write(
        dir.path(),
        "app/big.yaml",
        &format!("{}data:\n  seed: &big {big}\nrepeated: [{refs}]\n", cm("big")),
    );
    let err = render(dir.path(), "app", Limits::default()).expect_err("too large");
    assert_eq!(
        err,
        RenderError::ObjectTooLarge { origin: "app/big.yaml#0".into(), limit: MAX_OBJECT_BYTES }
    );
    assert_eq!(err.reason(), FailureReason::RenderFailure);
    assert!(err.to_string().contains("more than 3145728 bytes as JSON"), "{err}");
}

#[test]
fn the_rendered_set_is_bounded_as_a_whole() {
    // 40 objects of 2 MiB each: every one fits, the set (80 MiB) does not.
    let one = |n: usize| Rendered {
        origin: format!("x#{n}"),
        object: serde_json::json!({"data": {"k": "y".repeat(2 << 20)}}),
    };
    let objects: Vec<Rendered> = (0..40).map(one).collect();
    let mut total = 0;
    assert_eq!(
        check_rendered_size(&objects, &mut total),
        Err(RenderError::RenderedTooLarge { limit: MAX_RENDERED_BYTES })
    );
    let mut total = 0;
    assert_eq!(check_rendered_size(&objects[..3], &mut total), Ok(()));
    assert!(total > 6 << 20, "{total}");
}
