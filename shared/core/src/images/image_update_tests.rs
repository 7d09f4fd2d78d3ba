// Table tests spell their row types out.
#![allow(clippy::type_complexity)]

use super::*;

const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
const OLD: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

fn policy(namespace: &str, name: &str) -> PolicyRef {
    PolicyRef { namespace: namespace.into(), name: name.into() }
}

/// The ImagePolicies the tests know.
fn lookup(policy: &PolicyRef) -> Option<PolicyImage> {
    let image = |image: &str, tag: &str, digest: &str| PolicyImage {
        image: image.into(),
        tag: tag.into(),
        digest: digest.into(),
    };
    match (policy.namespace.as_str(), policy.name.as_str()) {
        ("team", "api") => Some(image("ghcr.io/acme/api", "1.10.0", D1)),
        ("team", "sidecar") => Some(image("ghcr.io/acme/sidecar", "0.2.0", D2)),
        ("other", "web") => Some(image("127.0.0.1:5000/web", "main-42", D2)),
        ("team", "float") => Some(image("ghcr.io/acme/float", "1.10", D1)),
        ("team", "date") => Some(image("ghcr.io/acme/date", "2024-05-01", D1)),
        ("team", "evil") => Some(image("ghcr.io/acme/evil", "1.0\n  injected: true", D1)),
        _ => None,
    }
}

fn api() -> String {
    format!("ghcr.io/acme/api:1.10.0@{D1}")
}

/// Run `update_file`, check it is idempotent, and return the result.
fn update(text: &str) -> FileUpdate {
    let first = update_file(text, lookup);
    let second = update_file(&first.text, lookup);
    assert_eq!(second.text, first.text, "a second run changed the file:\n{}", first.text);
    assert!(second.changes.is_empty(), "a second run changed {:?}", second.changes);
    assert_eq!(second.skipped, first.skipped);
    first
}

fn change(line: usize, policy: PolicyRef, field: MarkerField, old: &str, new: &str) -> Change {
    Change { line, policy, field, old: old.into(), new: new.into() }
}

#[test]
fn markers_set_the_value_and_nothing_else() {
    let api = api();
    // (case, input, expected output, changes)
    let cases: Vec<(&str, String, String, Vec<Change>)> = vec![
        (
            "a Deployment: comments, key order and the other fields stay as they are",
            concat!(
                "# The API.\n",
                "apiVersion: apps/v1\n",
                "kind: Deployment\n",
                "spec:\n",
                "  template:\n",
                "    spec:\n",
                "      containers:\n",
                "        - name: api   # main container\n",
                "          image: ghcr.io/acme/api:1.2.0 # {\"$imagepolicy\": \"team:api\"}\n",
                "          ports: [{containerPort: 80}]\n",
                "        - name: sidecar\n",
                "          image: \"ghcr.io/acme/sidecar:0.1.0\" # {\"$imagepolicy\":\"team:sidecar\"}\n",
            )
            .into(),
            format!(
                concat!(
                    "# The API.\n",
                    "apiVersion: apps/v1\n",
                    "kind: Deployment\n",
                    "spec:\n",
                    "  template:\n",
                    "    spec:\n",
                    "      containers:\n",
                    "        - name: api   # main container\n",
                    "          image: {} # {{\"$imagepolicy\": \"team:api\"}}\n",
                    "          ports: [{{containerPort: 80}}]\n",
                    "        - name: sidecar\n",
                    "          image: \"{}\" # {{\"$imagepolicy\":\"team:sidecar\"}}\n",
                ),
                api,
                format_args!("ghcr.io/acme/sidecar:0.2.0@{D2}")
            ),
            vec![
                change(9, policy("team", "api"), MarkerField::Image, "ghcr.io/acme/api:1.2.0", &api),
                change(
                    12,
                    policy("team", "sidecar"),
                    MarkerField::Image,
                    "ghcr.io/acme/sidecar:0.1.0",
                    &format!("ghcr.io/acme/sidecar:0.2.0@{D2}"),
                ),
            ],
        ),
        (
            "single quotes are kept",
            "image: 'ghcr.io/acme/api:1.2.0' # {\"$imagepolicy\": \"team:api\"}\n".into(),
            format!("image: '{api}' # {{\"$imagepolicy\": \"team:api\"}}\n"),
            vec![change(1, policy("team", "api"), MarkerField::Image, "ghcr.io/acme/api:1.2.0", &api)],
        ),
        (
            "list items, bare and with a key",
            concat!(
                "images:\n",
                "- ghcr.io/acme/api:1.2.0 # {\"$imagepolicy\": \"team:api\"}\n",
                "- - \"ghcr.io/acme/api\" # {\"$imagepolicy\": \"team:api\"}\n",
                "-   image: x # {\"$imagepolicy\": \"team:api\"}\n",
            )
            .into(),
            format!(
                "images:\n- {api} # {{\"$imagepolicy\": \"team:api\"}}\n- - \"{api}\" # {{\"$imagepolicy\": \"team:api\"}}\n-   image: {api} # {{\"$imagepolicy\": \"team:api\"}}\n"
            ),
            vec![
                change(2, policy("team", "api"), MarkerField::Image, "ghcr.io/acme/api:1.2.0", &api),
                change(3, policy("team", "api"), MarkerField::Image, "ghcr.io/acme/api", &api),
                change(4, policy("team", "api"), MarkerField::Image, "x", &api),
            ],
        ),
        (
            "free whitespace in the marker, a tab before it, spaces after it, a quoted key",
            "\"image\":\tghcr.io/acme/api:1.2.0\t#{ \"$imagepolicy\" :\n".replace('\n', "\"team:api\" }  \n"),
            format!("\"image\":\t{api}\t#{{ \"$imagepolicy\" :\"team:api\" }}  \n"),
            vec![change(1, policy("team", "api"), MarkerField::Image, "ghcr.io/acme/api:1.2.0", &api)],
        ),
        (
            "CRLF line endings stay, and a last line without a newline",
            "a: 1\r\nimage: old # {\"$imagepolicy\": \"team:api\"}\r\nb: 2\r\nc: old # {\"$imagepolicy\": \"team:api\"}".into(),
            format!("a: 1\r\nimage: {api} # {{\"$imagepolicy\": \"team:api\"}}\r\nb: 2\r\nc: {api} # {{\"$imagepolicy\": \"team:api\"}}"),
            vec![
                change(2, policy("team", "api"), MarkerField::Image, "old", &api),
                change(4, policy("team", "api"), MarkerField::Image, "old", &api),
            ],
        ),
        (
            "a byte order mark stays",
            "\u{feff}image: old # {\"$imagepolicy\": \"team:api\"}\n".into(),
            format!("\u{feff}image: {api} # {{\"$imagepolicy\": \"team:api\"}}\n"),
            vec![change(1, policy("team", "api"), MarkerField::Image, "old", &api)],
        ),
        (
            ":tag replaces the tag of a reference",
            "image: ghcr.io/acme/api:1.2.0 # {\"$imagepolicy\": \"team:api:tag\"}\n".into(),
            "image: ghcr.io/acme/api:1.10.0 # {\"$imagepolicy\": \"team:api:tag\"}\n".into(),
            vec![change(1, policy("team", "api"), MarkerField::Tag, "ghcr.io/acme/api:1.2.0", "ghcr.io/acme/api:1.10.0")],
        ),
        (
            ":tag keeps a different name, replaces a pinned digest with the policy's",
            format!("image: mirror.example.com/api:1.2.0@{OLD} # {{\"$imagepolicy\": \"team:api:tag\"}}\n"),
            format!("image: mirror.example.com/api:1.10.0@{D1} # {{\"$imagepolicy\": \"team:api:tag\"}}\n"),
            vec![change(
                1,
                policy("team", "api"),
                MarkerField::Tag,
                &format!("mirror.example.com/api:1.2.0@{OLD}"),
                &format!("mirror.example.com/api:1.10.0@{D1}"),
            )],
        ),
        (
            ":tag with a registry port, with and without a tag",
            concat!(
                "a: 127.0.0.1:5000/web:main-1 # {\"$imagepolicy\": \"other:web:tag\"}\n",
                "b: 127.0.0.1:5000/web # {\"$imagepolicy\": \"other:web:tag\"}\n",
            )
            .into(),
            concat!(
                "a: 127.0.0.1:5000/web:main-42 # {\"$imagepolicy\": \"other:web:tag\"}\n",
                "b: 127.0.0.1:5000/web:main-42 # {\"$imagepolicy\": \"other:web:tag\"}\n",
            )
            .into(),
            vec![
                change(1, policy("other", "web"), MarkerField::Tag, "127.0.0.1:5000/web:main-1", "127.0.0.1:5000/web:main-42"),
                change(2, policy("other", "web"), MarkerField::Tag, "127.0.0.1:5000/web", "127.0.0.1:5000/web:main-42"),
            ],
        ),
        (
            "Helm values: :name and :tag on separate fields, quotes kept",
            concat!(
                "image:\n",
                "  repository: docker.io/old/api # {\"$imagepolicy\": \"team:api:name\"}\n",
                "  tag: \"1.2.0\" # {\"$imagepolicy\": \"team:api:tag\"}\n",
                "  pullPolicy: IfNotPresent\n",
            )
            .into(),
            concat!(
                "image:\n",
                "  repository: ghcr.io/acme/api # {\"$imagepolicy\": \"team:api:name\"}\n",
                "  tag: \"1.10.0\" # {\"$imagepolicy\": \"team:api:tag\"}\n",
                "  pullPolicy: IfNotPresent\n",
            )
            .into(),
            vec![
                change(2, policy("team", "api"), MarkerField::Name, "docker.io/old/api", "ghcr.io/acme/api"),
                change(3, policy("team", "api"), MarkerField::Tag, "1.2.0", "1.10.0"),
            ],
        ),
        (
            ":name keeps the tag and the digest",
            format!("image: docker.io/old/api:1.2.0@{OLD} # {{\"$imagepolicy\": \"team:api:name\"}}\n"),
            format!("image: ghcr.io/acme/api:1.2.0@{OLD} # {{\"$imagepolicy\": \"team:api:name\"}}\n"),
            vec![change(
                1,
                policy("team", "api"),
                MarkerField::Name,
                &format!("docker.io/old/api:1.2.0@{OLD}"),
                &format!("ghcr.io/acme/api:1.2.0@{OLD}"),
            )],
        ),
        (
            "a plain tag that YAML would read as a number or a date is quoted",
            concat!(
                "tag: 1.2.0 # {\"$imagepolicy\": \"team:float:tag\"}\n",
                "date: 2024-04-01 # {\"$imagepolicy\": \"team:date:tag\"}\n",
                "quoted: '1.2' # {\"$imagepolicy\": \"team:float:tag\"}\n",
            )
            .into(),
            concat!(
                "tag: \"1.10\" # {\"$imagepolicy\": \"team:float:tag\"}\n",
                "date: \"2024-05-01\" # {\"$imagepolicy\": \"team:date:tag\"}\n",
                "quoted: '1.10' # {\"$imagepolicy\": \"team:float:tag\"}\n",
            )
            .into(),
            vec![
                change(1, policy("team", "float"), MarkerField::Tag, "1.2.0", "1.10"),
                change(2, policy("team", "date"), MarkerField::Tag, "2024-04-01", "2024-05-01"),
                change(3, policy("team", "float"), MarkerField::Tag, "1.2", "1.10"),
            ],
        ),
        (
            "a value that is already selected is not a change",
            format!("image: {api} # {{\"$imagepolicy\": \"team:api\"}}\ntag: 1.10.0 # {{\"$imagepolicy\": \"team:api:tag\"}}\n"),
            format!("image: {api} # {{\"$imagepolicy\": \"team:api\"}}\ntag: 1.10.0 # {{\"$imagepolicy\": \"team:api:tag\"}}\n"),
            vec![],
        ),
        (
            "text that only looks like a marker is left alone",
            concat!(
                "# image: old # {\"$imagepolicy\": \"team:api\"}\n",
                "title: 'see # {\"$imagepolicy\": \"team:api\"}'\n",
                "'a bare scalar # {\"$imagepolicy\": \"team:api\"}'\n",
                "script: |\n",
                "  image: old # {\"$imagepolicy\": \"team:api\"}\n",
                "\n",
                "    - old # {\"$imagepolicy\": \"team:api\"}\n",
                "items:\n",
                "  - >-\n",
                "    image: old # {\"$imagepolicy\": \"team:api\"}\n",
                "  - image: old # a comment about {\"imagepolicy\": 1}\n",
                "image: ghcr.io/acme/api:1.2.0#{\"$imagepolicy\": \"team:api\"}\n",
            )
            .into(),
            concat!(
                "# image: old # {\"$imagepolicy\": \"team:api\"}\n",
                "title: 'see # {\"$imagepolicy\": \"team:api\"}'\n",
                "'a bare scalar # {\"$imagepolicy\": \"team:api\"}'\n",
                "script: |\n",
                "  image: old # {\"$imagepolicy\": \"team:api\"}\n",
                "\n",
                "    - old # {\"$imagepolicy\": \"team:api\"}\n",
                "items:\n",
                "  - >-\n",
                "    image: old # {\"$imagepolicy\": \"team:api\"}\n",
                "  - image: old # a comment about {\"imagepolicy\": 1}\n",
                "image: ghcr.io/acme/api:1.2.0#{\"$imagepolicy\": \"team:api\"}\n",
            )
            .into(),
            vec![],
        ),
        (
            "a field after a block scalar is read again",
            "script: |\n  echo hi\nimage: old # {\"$imagepolicy\": \"team:api\"}\n".into(),
            format!("script: |\n  echo hi\nimage: {api} # {{\"$imagepolicy\": \"team:api\"}}\n"),
            vec![change(3, policy("team", "api"), MarkerField::Image, "old", &api)],
        ),
    ];
    for (case, input, expected, changes) in cases {
        let result = update(&input);
        assert_eq!(result.text, expected, "{case}");
        assert_eq!(result.changes, changes, "{case}");
        assert!(result.skipped.is_empty(), "{case}: {:?}", result.skipped);
    }
}

#[test]
fn markers_that_cannot_be_applied_are_left_alone_and_reported() {
    let team_api = || policy("team", "api");
    // (case, line, problem)
    let cases: Vec<(&str, &str, SkipProblem)> = vec![
        (
            "unknown policy",
            "image: old # {\"$imagepolicy\": \"team:missing\"}",
            SkipProblem::UnknownPolicy(policy("team", "missing")),
        ),
        (
            "no namespace",
            "image: old # {\"$imagepolicy\": \"api\"}",
            SkipProblem::MalformedMarker { marker: "{\"$imagepolicy\": \"api\"}".into() },
        ),
        (
            "unknown suffix",
            "image: old # {\"$imagepolicy\": \"team:api:digest\"}",
            SkipProblem::MalformedMarker {
                marker: "{\"$imagepolicy\": \"team:api:digest\"}".into(),
            },
        ),
        (
            "not a Kubernetes name",
            "image: old # {\"$imagepolicy\": \"Team:api\"}",
            SkipProblem::MalformedMarker { marker: "{\"$imagepolicy\": \"Team:api\"}".into() },
        ),
        (
            "not a string",
            "image: old # {\"$imagepolicy\": 5}",
            SkipProblem::MalformedMarker { marker: "{\"$imagepolicy\": 5}".into() },
        ),
        (
            "not JSON",
            "image: old # {\"$imagepolicy\": \"team:api\"",
            SkipProblem::MalformedMarker { marker: "{\"$imagepolicy\": \"team:api\"".into() },
        ),
        (
            "a flow collection",
            "images: [old] # {\"$imagepolicy\": \"team:api\"}",
            SkipProblem::UnsupportedValue { policy: team_api(), detail: "a flow collection" },
        ),
        (
            "an anchor",
            "image: &img old # {\"$imagepolicy\": \"team:api\"}",
            SkipProblem::UnsupportedValue { policy: team_api(), detail: "an anchored value" },
        ),
        (
            "an empty value",
            "image: # {\"$imagepolicy\": \"team:api\"}",
            SkipProblem::UnsupportedValue { policy: team_api(), detail: "empty" },
        ),
        (
            "a block scalar",
            "image: | # {\"$imagepolicy\": \"team:api\"}",
            SkipProblem::UnsupportedValue { policy: team_api(), detail: "a block scalar" },
        ),
        (
            "escapes",
            "image: \"old\\tx\" # {\"$imagepolicy\": \"team:api\"}",
            SkipProblem::UnsupportedValue {
                policy: team_api(),
                detail: "a double-quoted value with escapes",
            },
        ),
        (
            "more text after the value",
            "image: \"old\" x # {\"$imagepolicy\": \"team:api\"}",
            SkipProblem::UnsupportedValue {
                policy: team_api(),
                detail: "a value followed by more text on its line",
            },
        ),
        (
            "no field",
            "old # {\"$imagepolicy\": \"team:api\"}",
            SkipProblem::UnsupportedValue { policy: team_api(), detail: NO_FIELD },
        ),
        (
            "a selection that is no image reference is never written",
            "tag: 1.0 # {\"$imagepolicy\": \"team:evil:tag\"}",
            SkipProblem::UnsafeValue { policy: policy("team", "evil") },
        ),
    ];
    for (case, line, problem) in cases {
        let text = format!("before: 1\n{line}\nafter: 2\n");
        let result = update(&text);
        assert_eq!(result.text, text, "{case}");
        assert!(result.changes.is_empty(), "{case}");
        assert_eq!(result.skipped, vec![Skipped { line: 2, problem }], "{case}");
        let message = result.skipped[0].to_string();
        assert!(message.starts_with("line 2: "), "{case}: {message}");
    }
}

#[test]
fn a_file_with_good_and_bad_markers_changes_only_the_good_ones() {
    let text = concat!(
        "a: old # {\"$imagepolicy\": \"team:missing\"}\n",
        "b: old # {\"$imagepolicy\": \"team:api:tag\"}\n",
    );
    let result = update(text);
    assert_eq!(
        result.text,
        concat!(
            "a: old # {\"$imagepolicy\": \"team:missing\"}\n",
            "b: 1.10.0 # {\"$imagepolicy\": \"team:api:tag\"}\n",
        )
    );
    assert_eq!(result.changes.len(), 1);
    assert_eq!(
        result.skipped,
        vec![Skipped { line: 1, problem: SkipProblem::UnknownPolicy(policy("team", "missing")) }]
    );
}

#[test]
fn references_split_into_name_tag_and_digest() {
    // (reference, name, tag, digest)
    let cases: Vec<(&str, &str, Option<&str>, Option<&str>)> = vec![
        ("nginx", "nginx", None, None),
        ("nginx:1.25", "nginx", Some("1.25"), None),
        ("ghcr.io/acme/api:1.2.0", "ghcr.io/acme/api", Some("1.2.0"), None),
        ("127.0.0.1:5000/app:1.2", "127.0.0.1:5000/app", Some("1.2"), None),
        ("127.0.0.1:5000/app", "127.0.0.1:5000/app", None, None),
        ("127.0.0.1:5000/app@sha256:ab", "127.0.0.1:5000/app", None, Some("sha256:ab")),
        ("r.io/a/b:v1@sha256:ab", "r.io/a/b", Some("v1"), Some("sha256:ab")),
    ];
    for (reference, name, tag, digest) in cases {
        assert_eq!(split_reference(reference), ReferenceParts { name, tag, digest }, "{reference}");
    }
}

#[test]
fn policy_image_comes_from_a_consistent_status() {
    let status = |tag: Option<&str>, digest: Option<&str>, image: Option<&str>| ImagePolicyStatus {
        latest_tag: tag.map(str::to_owned),
        latest_digest: digest.map(str::to_owned),
        latest_image: image.map(str::to_owned),
        ..Default::default()
    };
    let image = format!("127.0.0.1:5000/web:main-42@{D2}");
    assert_eq!(
        PolicyImage::from_status(&status(Some("main-42"), Some(D2), Some(&image))),
        Some(PolicyImage {
            image: "127.0.0.1:5000/web".into(),
            tag: "main-42".into(),
            digest: D2.into()
        })
    );
    for bad in [
        status(None, None, None),
        status(Some("main-42"), Some(D2), None),
        status(Some("main-41"), Some(D2), Some(&image)),
        status(Some("main-42"), Some(D1), Some(&image)),
        status(Some("main-42"), Some(D2), Some(&format!(":main-42@{D2}"))),
    ] {
        assert_eq!(PolicyImage::from_status(&bad), None, "{bad:?}");
    }
}

#[test]
fn the_commit_message_lists_every_change() {
    let api = api();
    let changes = BTreeMap::from([
        (
            "deploy/values.yaml".to_owned(),
            vec![change(3, policy("team", "api"), MarkerField::Tag, "1.2.0", "1.10.0")],
        ),
        (
            "apps/api.yaml".to_owned(),
            vec![
                change(
                    9,
                    policy("team", "api"),
                    MarkerField::Image,
                    "ghcr.io/acme/api:1.2.0",
                    &api,
                ),
                change(12, policy("team", "api"), MarkerField::Name, "old/api", "ghcr.io/acme/api"),
            ],
        ),
    ]);
    assert_eq!(
        commit_message(&changes),
        format!(
            "Update 3 image references from ImagePolicies\n\n\
             apps/api.yaml:9: ghcr.io/acme/api:1.2.0 -> {api} (policy team/api)\n\
             apps/api.yaml:12: old/api -> ghcr.io/acme/api (policy team/api, name only)\n\
             deploy/values.yaml:3: 1.2.0 -> 1.10.0 (policy team/api, tag only)\n"
        )
    );
    let one = BTreeMap::from([(
        "a.yaml".to_owned(),
        vec![change(1, policy("team", "api"), MarkerField::Tag, "1", "2")],
    )]);
    assert!(commit_message(&one).starts_with("Update 1 image reference from ImagePolicies\n\n"));
}
