//! Priority 6: CRD structural schema validation (pruning, types, enum, pattern, maxLength,
//! required, defaults) and `x-kubernetes-validations` CEL rules with `self` and `oldSelf`.

mod common;

use common::{kubectl_in, kubectl_ok, kubectl_stdin_ok, stderr};
use serde_json::Value;

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  names: {kind: Gadget, plural: gadgets, singular: gadget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            x-kubernetes-validations:
            - rule: "self.size <= 10"
              message: "size must be at most 10"
            - rule: "self.size >= oldSelf.size"
              message: "size may not shrink"
            properties:
              size: {type: integer}
              mode: {type: string, enum: [fast, slow], default: fast}
              name: {type: string, pattern: "^[a-z]+$", maxLength: 5}
              labels:
                type: object
                additionalProperties: {type: string}
"#;

async fn apply(sb: &ksync_sandbox::Sandbox, spec: &str) -> std::process::Output {
    let doc =
        format!("apiVersion: example.com/v1\nkind: Gadget\nmetadata: {{name: g1}}\nspec: {spec}\n");
    kubectl_in(sb, &["apply", "--server-side", "-f", "-"], Some(&doc)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structural_schema_and_cel_rules() {
    let sb = common::sandbox().await;
    kubectl_stdin_ok(&sb, &["apply", "-f", "-"], CRD).await;
    kubectl_ok(
        &sb,
        &["wait", "--for=condition=Established", "crd/gadgets.example.com", "--timeout=20s"],
    )
    .await;

    // fieldValidation=Strict (kubectl's default) rejects unknown fields...
    let o = apply(&sb, "{size: 2, extra: gone, labels: {a: b}}").await;
    assert!(
        stderr(&o).contains("Gadget in version \"v1\" cannot be handled as a Gadget: strict decoding error: unknown field \"spec.extra\""),
        "{}",
        stderr(&o)
    );
    // ...otherwise they are pruned, and defaults applied.
    let doc = "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g1}\nspec: {size: 2, extra: gone, labels: {a: b}}\n";
    let o = kubectl_in(&sb, &["apply", "--server-side", "--validate=false", "-f", "-"], Some(doc))
        .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value =
        serde_json::from_str(&kubectl_ok(&sb, &["get", "gadget", "g1", "-o", "json"]).await)
            .expect("json");
    assert!(v["spec"].get("extra").is_none(), "{v}");
    assert_eq!(v["spec"]["mode"], "fast");
    assert_eq!(v["spec"]["labels"]["a"], "b");

    let err = |o: &std::process::Output| stderr(o).trim().to_string();
    let o = apply(&sb, "{size: \"big\"}").await;
    assert!(
        err(&o).contains("The Gadget \"g1\" is invalid: spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\""),
        "{}",
        err(&o)
    );
    let o = apply(&sb, "{size: 3, mode: medium}").await;
    assert!(
        err(&o).contains(
            "spec.mode: Unsupported value: \"medium\": supported values: \"fast\", \"slow\""
        ),
        "{}",
        err(&o)
    );
    let o = apply(&sb, "{size: 3, name: ABC}").await;
    assert!(
        err(&o).contains(
            "spec.name: Invalid value: \"ABC\": spec.name in body should match '^[a-z]+$'"
        ),
        "{}",
        err(&o)
    );
    let o = apply(&sb, "{size: 3, name: abcdefg}").await;
    assert!(err(&o).contains("spec.name: Too long: may not be more than 5 bytes"), "{}", err(&o));
    let o = kubectl_in(
        &sb,
        &["apply", "--server-side", "-f", "-"],
        Some(
            "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g2}\nspec: {mode: slow}\n",
        ),
    )
    .await;
    assert!(err(&o).contains("spec.size: Required value"), "{}", err(&o));

    // CEL over self, and transition rules over oldSelf.
    let o = apply(&sb, "{size: 11}").await;
    assert!(err(&o).contains("size must be at most 10"), "{}", err(&o));
    let o = apply(&sb, "{size: 5}").await;
    assert!(o.status.success(), "{}", err(&o));
    let o = apply(&sb, "{size: 4}").await;
    assert!(err(&o).contains("size may not shrink"), "{}", err(&o));
    assert!(err(&o).starts_with("The Gadget \"g1\" is invalid:"), "{}", err(&o));
}

/// A CRD for ratcheting: `name` has no limit until the schema tightens it.
fn ratchet_crd(max_name: Option<u32>) -> String {
    let limit = max_name.map(|m| format!(", maxLength: {m}")).unwrap_or_default();
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: sprockets.example.com
spec:
  group: example.com
  names: {{kind: Sprocket, plural: sprockets, singular: sprocket}}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {{type: integer}}
              name: {{type: string{limit}}}
          status:
            type: object
            properties:
              phase: {{type: string}}
"#
    )
}

/// kube-apiserver >= 1.30 ratchets: after the schema tightens, writes that leave an invalid
/// value as it was (a spec update beside it, a status write) pass; changing it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tightened_schema_ratchets_unchanged_values() {
    let sb = common::sandbox().await;
    kubectl_stdin_ok(&sb, &["apply", "-f", "-"], &ratchet_crd(None)).await;
    kubectl_ok(
        &sb,
        &["wait", "--for=condition=Established", "crd/sprockets.example.com", "--timeout=20s"],
    )
    .await;
    let doc = "apiVersion: example.com/v1\nkind: Sprocket\nmetadata: {name: s1}\nspec: {size: 1, name: toolongname}\n";
    kubectl_stdin_ok(&sb, &["apply", "-f", "-"], doc).await;
    kubectl_stdin_ok(&sb, &["apply", "-f", "-"], &ratchet_crd(Some(5))).await;

    let patch = |body: &'static str, status: bool| {
        let sb = &sb;
        async move {
            let mut args = vec!["patch", "sprocket", "s1", "--type=merge", "-p", body];
            if status {
                args.push("--subresource=status");
            }
            kubectl_in(sb, &args, None).await
        }
    };
    let o = patch(r#"{"spec":{"size":2}}"#, false).await;
    assert!(o.status.success(), "an update beside the unchanged name: {}", stderr(&o));
    let o = patch(r#"{"status":{"phase":"Ready"}}"#, true).await;
    assert!(o.status.success(), "a status write: {}", stderr(&o));
    let o = patch(r#"{"spec":{"name":"stilltoolong"}}"#, false).await;
    assert!(
        stderr(&o).contains("spec.name: Too long: may not be more than 5 bytes"),
        "a changed invalid name is refused: {}",
        stderr(&o)
    );
    let v: Value =
        serde_json::from_str(&kubectl_ok(&sb, &["get", "sprocket", "s1", "-o", "json"]).await)
            .expect("json");
    assert_eq!(
        (&v["spec"]["size"], &v["spec"]["name"], &v["status"]["phase"]),
        (&Value::from(2), &Value::from("toolongname"), &Value::from("Ready"))
    );
}
