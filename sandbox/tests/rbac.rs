//! Priority 5: impersonation checked by RBAC, 403 wording, access reviews and `kubectl auth can-i`.

mod common;

use common::{kubectl, kubectl_ok, stderr, stdout};
use k8s_openapi::api::authorization::v1::{SelfSubjectAccessReview, SubjectAccessReview};
use kube::api::{Api, PostParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonated_service_account_is_checked_by_rbac() {
    let sb = common::sandbox().await;
    kubectl_ok(&sb, &["create", "namespace", "apps"]).await;
    kubectl_ok(&sb, &["-n", "apps", "create", "serviceaccount", "robot"]).await;
    kubectl_ok(
        &sb,
        &[
            "-n",
            "apps",
            "create",
            "role",
            "reader",
            "--verb=get,list,watch",
            "--resource=pods,configmaps",
        ],
    )
    .await;
    kubectl_ok(
        &sb,
        &[
            "-n",
            "apps",
            "create",
            "rolebinding",
            "reader",
            "--role=reader",
            "--serviceaccount=apps:robot",
        ],
    )
    .await;
    let sa = "system:serviceaccount:apps:robot";

    let o = kubectl(&sb, &["auth", "can-i", "list", "pods", "-n", "apps", "--as", sa]).await;
    assert_eq!((o.status.code(), stdout(&o).trim()), (Some(0), "yes"));
    let o = kubectl(&sb, &["auth", "can-i", "delete", "pods", "-n", "apps", "--as", sa]).await;
    assert_eq!((o.status.code(), stdout(&o).trim()), (Some(1), "no"));
    let o = kubectl(&sb, &["auth", "can-i", "list", "pods", "-n", "default", "--as", sa]).await;
    assert_eq!(stdout(&o).trim(), "no");
    let o = kubectl(&sb, &["auth", "can-i", "create", "deployments.apps", "-n", "apps"]).await;
    assert_eq!(stdout(&o).trim(), "yes", "the admin may do anything");

    // Reads allowed, others Forbidden in kube-apiserver's words.
    let out = kubectl_ok(&sb, &["get", "configmaps", "-n", "apps", "--as", sa]).await;
    assert!(out.is_empty() || out.contains("NAME"), "{out}");
    let o = kubectl(&sb, &["get", "secrets", "-n", "apps", "--as", sa]).await;
    assert_eq!(
        stderr(&o).trim(),
        "Error from server (Forbidden): secrets is forbidden: User \"system:serviceaccount:apps:robot\" cannot list resource \"secrets\" in API group \"\" in the namespace \"apps\""
    );
    let o = kubectl(&sb, &["create", "configmap", "x", "-n", "apps", "--as", sa]).await;
    assert!(
        stderr(&o).contains("configmaps is forbidden: User \"system:serviceaccount:apps:robot\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"apps\""),
        "{}",
        stderr(&o)
    );
    let o = kubectl(&sb, &["delete", "configmap", "kube-root-ca", "-n", "apps", "--as", sa]).await;
    assert!(stderr(&o).contains("configmaps \"kube-root-ca\" is forbidden: User \"system:serviceaccount:apps:robot\" cannot delete resource \"configmaps\""), "{}", stderr(&o));
    let o = kubectl(&sb, &["get", "nodes", "--as", sa]).await;
    assert!(
        stderr(&o)
            .contains("cannot list resource \"nodes\" in API group \"\" at the cluster scope"),
        "{}",
        stderr(&o)
    );

    // A user bound to the bootstrap "view" ClusterRole through a group.
    kubectl_ok(
        &sb,
        &["create", "clusterrolebinding", "viewers", "--clusterrole=view", "--group=viewers"],
    )
    .await;
    let o = kubectl(
        &sb,
        &[
            "auth",
            "can-i",
            "list",
            "deployments.apps",
            "-n",
            "default",
            "--as",
            "jane",
            "--as-group",
            "viewers",
        ],
    )
    .await;
    assert_eq!(stdout(&o).trim(), "yes");
    let o = kubectl(
        &sb,
        &[
            "auth",
            "can-i",
            "list",
            "secrets",
            "-n",
            "default",
            "--as",
            "jane",
            "--as-group",
            "viewers",
        ],
    )
    .await;
    assert_eq!(stdout(&o).trim(), "no");

    // `can-i --list` (SelfSubjectRulesReview).
    let out = kubectl_ok(&sb, &["auth", "can-i", "--list", "-n", "apps", "--as", sa]).await;
    let line = out.lines().find(|l| l.starts_with("pods ")).unwrap_or_default().to_string();
    assert!(line.contains("[get list watch]"), "{out}");
    assert!(out.contains("selfsubjectaccessreviews.authorization.k8s.io"), "{out}");

    // whoami sees the impersonated identity.
    let out = kubectl_ok(&sb, &["auth", "whoami", "-o", "json", "--as", sa]).await;
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["status"]["userInfo"]["username"], sa);
    assert_eq!(
        v["status"]["userInfo"]["groups"],
        json!(["system:serviceaccounts", "system:serviceaccounts:apps", "system:authenticated"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_reviews_through_kube_rs() {
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    kubectl_ok(&sb, &["create", "clusterrolebinding", "ed", "--clusterrole=edit", "--user=ed"])
        .await;
    let sar: Api<SubjectAccessReview> = Api::all(client.clone());
    let review = |user: &str, verb: &str, resource: &str| {
        serde_json::from_value::<SubjectAccessReview>(json!({
            "spec": {"user": user, "groups": ["system:authenticated"], "resourceAttributes": {"namespace": "default", "verb": verb, "resource": resource}}
        }))
        .expect("review")
    };
    let r =
        sar.create(&PostParams::default(), &review("ed", "update", "secrets")).await.expect("sar");
    let st = r.status.expect("status");
    assert!(st.allowed);
    assert_eq!(
        st.reason.as_deref(),
        Some("RBAC: allowed by ClusterRoleBinding \"ed\" of ClusterRole \"edit\" to User \"ed\"")
    );
    let r = sar
        .create(&PostParams::default(), &review("ed", "create", "rolebindings"))
        .await
        .expect("sar");
    assert!(!r.status.expect("status").allowed);

    let ssar: Api<SelfSubjectAccessReview> = Api::all(client);
    let r = ssar
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"spec": {"resourceAttributes": {"verb": "delete", "resource": "nodes"}}}),
            )
            .expect("ssar"),
        )
        .await
        .expect("ssar");
    assert!(r.status.expect("status").allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_needs_the_impersonate_verb() {
    let sb = common::sandbox().await;
    let alice = sb.user_kubeconfig("alice", &["devs"]).expect("alice kubeconfig");
    let run = |args: Vec<&'static str>| {
        let alice = alice.clone();
        async move {
            tokio::process::Command::new(common::KUBECTL)
                .arg("--kubeconfig")
                .arg(&alice)
                .args(args)
                .output()
                .await
                .expect("kubectl")
        }
    };
    // Alice has no rights at all.
    let o = run(vec!["get", "configmaps", "-n", "default"]).await;
    assert_eq!(
        stderr(&o).trim(),
        "Error from server (Forbidden): configmaps is forbidden: User \"alice\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    // Nor may she impersonate.
    let o = run(vec!["get", "configmaps", "-n", "default", "--as", "bob"]).await;
    assert_eq!(
        stderr(&o).trim(),
        "Error from server (Forbidden): users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    // Once allowed to impersonate bob (who may view), she reads as bob.
    kubectl_ok(
        &sb,
        &[
            "create",
            "clusterrole",
            "impersonate-bob",
            "--verb=impersonate",
            "--resource=users",
            "--resource-name=bob",
        ],
    )
    .await;
    kubectl_ok(
        &sb,
        &[
            "create",
            "clusterrolebinding",
            "alice-as-bob",
            "--clusterrole=impersonate-bob",
            "--user=alice",
        ],
    )
    .await;
    kubectl_ok(
        &sb,
        &["create", "clusterrolebinding", "bob-view", "--clusterrole=view", "--user=bob"],
    )
    .await;
    let o = run(vec!["get", "configmaps", "-n", "default", "--as", "bob"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(vec!["get", "configmaps", "-n", "default", "--as", "bob", "--as-group", "admins"])
        .await;
    assert!(stderr(&o).contains("groups \"admins\" is forbidden: User \"alice\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope"), "{}", stderr(&o));
}
