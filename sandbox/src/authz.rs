//! Identity and authorization: impersonation headers
//! (<https://kubernetes.io/docs/reference/access-authn-authz/authentication/#user-impersonation>)
//! checked by RBAC (<https://kubernetes.io/docs/reference/access-authn-authz/rbac/>), Forbidden
//! messages worded as kube-apiserver's `forbiddenMessage`, and the access reviews.

use crate::identity::UserInfo;
use crate::status::{ApiError, ApiResult};
use crate::store::Store;
use axum::http::HeaderMap;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// What a request wants to do.
#[derive(Debug, Clone, Default)]
pub struct Attributes {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// Non-resource requests: the path.
    pub path: Option<String>,
}

fn sa_parts(username: &str) -> Option<(&str, &str)> {
    let rest = username.strip_prefix("system:serviceaccount:")?;
    rest.split_once(':')
}

fn subject_matches(s: &Value, user: &UserInfo) -> bool {
    let name = s["name"].as_str().unwrap_or_default();
    match s["kind"].as_str().unwrap_or_default() {
        "User" => name == user.username,
        "Group" => user.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            sa_parts(&user.username) == Some((s["namespace"].as_str().unwrap_or_default(), name))
        }
        _ => false,
    }
}

fn has(list: &Value, want: &str) -> bool {
    list.as_array().is_some_and(|a| a.iter().any(|x| x == "*" || x == want))
}

fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    if let Some(path) = &a.path {
        if !has(&rule["verbs"], &a.verb) {
            return false;
        }
        return rule["nonResourceURLs"].as_array().is_some_and(|urls| {
            urls.iter().filter_map(Value::as_str).any(|u| {
                u == "*" || u == path || u.strip_suffix('*').is_some_and(|p| path.starts_with(p))
            })
        });
    }
    let res = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let res_ok = rule["resources"].as_array().is_some_and(|rs| {
        rs.iter().filter_map(Value::as_str).any(|r| {
            r == "*"
                || r == res
                || (r.starts_with("*/") && !a.subresource.is_empty() && r[2..] == a.subresource)
                || (r.ends_with("/*") && r[..r.len() - 2] == a.resource)
        })
    });
    let names_ok = match rule["resourceNames"].as_array() {
        Some(n) if !n.is_empty() => !a.name.is_empty() && n.iter().any(|x| x == &a.name),
        _ => true,
    };
    has(&rule["verbs"], &a.verb) && has(&rule["apiGroups"], &a.group) && res_ok && names_ok
}

/// RBAC: `Ok(reason)` when allowed.
pub fn authorize(store: &Store, user: &UserInfo, a: &Attributes) -> Result<String, String> {
    if user.groups.iter().any(|g| g == "system:masters") {
        return Ok(String::new());
    }
    let authenticated = user.groups.iter().any(|g| g == "system:authenticated");
    // Bootstrap policy for every authenticated user: discovery (system:discovery,
    // system:public-info-viewer) and the self reviews (system:basic-user).
    if authenticated {
        if a.path.is_some() && a.verb == "get" {
            return Ok("RBAC: allowed by ClusterRoleBinding \"system:discovery\" of ClusterRole \"system:discovery\" to Group \"system:authenticated\"".into());
        }
        if a.verb == "create"
            && ((a.group == "authorization.k8s.io"
                && (a.resource == "selfsubjectaccessreviews"
                    || a.resource == "selfsubjectrulesreviews"))
                || (a.group == "authentication.k8s.io" && a.resource == "selfsubjectreviews"))
        {
            return Ok("RBAC: allowed by ClusterRoleBinding \"system:basic-user\" of ClusterRole \"system:basic-user\" to Group \"system:authenticated\"".into());
        }
    }
    let rbac = |plural: &str| {
        store
            .resource("rbac.authorization.k8s.io", "v1", plural)
            .map(|r| r.store_key())
            .unwrap_or_default()
    };
    let cluster_roles = store.list_all(&rbac("clusterroles"), None);
    let find_cr = |name: &str| {
        cluster_roles
            .iter()
            .find(|r| r.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
            .cloned()
    };
    let describe = |s: &Value| match s["kind"].as_str().unwrap_or_default() {
        "ServiceAccount" => format!(
            "ServiceAccount \"{}/{}\"",
            s["name"].as_str().unwrap_or_default(),
            s["namespace"].as_str().unwrap_or_default()
        ),
        k => format!("{k} \"{}\"", s["name"].as_str().unwrap_or_default()),
    };
    for b in store.list_all(&rbac("clusterrolebindings"), None) {
        let Some(subj) =
            b["subjects"].as_array().and_then(|ss| ss.iter().find(|s| subject_matches(s, user)))
        else {
            continue;
        };
        let role = b.pointer("/roleRef/name").and_then(Value::as_str).unwrap_or_default();
        if let Some(cr) = find_cr(role)
            && cr["rules"].as_array().into_iter().flatten().any(|r| rule_allows(r, a))
        {
            return Ok(format!(
                "RBAC: allowed by ClusterRoleBinding \"{}\" of ClusterRole \"{role}\" to {}",
                b.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default(),
                describe(subj)
            ));
        }
    }
    if !a.namespace.is_empty() {
        let roles = store.list_all(&rbac("roles"), Some(&a.namespace));
        for b in store.list_all(&rbac("rolebindings"), Some(&a.namespace)) {
            let Some(subj) = b["subjects"]
                .as_array()
                .and_then(|ss| ss.iter().find(|s| subject_matches(s, user)))
            else {
                continue;
            };
            let kind = b.pointer("/roleRef/kind").and_then(Value::as_str).unwrap_or_default();
            let role = b.pointer("/roleRef/name").and_then(Value::as_str).unwrap_or_default();
            let r = if kind == "ClusterRole" {
                find_cr(role)
            } else {
                roles
                    .iter()
                    .find(|r| r.pointer("/metadata/name").and_then(Value::as_str) == Some(role))
                    .cloned()
            };
            if let Some(r) = r
                && r["rules"].as_array().into_iter().flatten().any(|rule| rule_allows(rule, a))
            {
                return Ok(format!(
                    "RBAC: allowed by RoleBinding \"{}/{}\" of {kind} \"{role}\" to {}",
                    b.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default(),
                    a.namespace,
                    describe(subj)
                ));
            }
        }
    }
    Err(String::new())
}

/// k8s.io/apiserver `forbiddenMessage`.
pub fn forbidden_message(user: &UserInfo, a: &Attributes) -> String {
    if let Some(p) = &a.path {
        return format!("User {:?} cannot {} path {:?}", user.username, a.verb, p);
    }
    let res = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    if a.namespace.is_empty() {
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} at the cluster scope",
            user.username, a.verb, res, a.group
        )
    } else {
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} in the namespace {:?}",
            user.username, a.verb, res, a.group, a.namespace
        )
    }
}

pub fn forbidden(user: &UserInfo, a: &Attributes, reason: &str) -> ApiError {
    if let Some(_p) = &a.path {
        return ApiError {
            code: 403,
            reason: "Forbidden",
            message: format!("forbidden: {}", forbidden_message(user, a)),
            details: Some(json!({})),
        };
    }
    let mut msg = forbidden_message(user, a);
    if !reason.is_empty() {
        msg = format!("{msg}: {reason}");
    }
    ApiError::forbidden(&a.group, &a.resource, &a.name, &msg)
}

/// Apply `Impersonate-*` headers after checking the requester may impersonate.
pub fn impersonate(store: &Store, requester: UserInfo, headers: &HeaderMap) -> ApiResult<UserInfo> {
    let user = headers.get("impersonate-user").and_then(|v| v.to_str().ok()).map(str::to_string);
    let groups: Vec<String> = headers
        .get_all("impersonate-group")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    let uid = headers.get("impersonate-uid").and_then(|v| v.to_str().ok()).map(str::to_string);
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in headers {
        if let Some(key) = k.as_str().strip_prefix("impersonate-extra-")
            && let Ok(v) = v.to_str()
        {
            extra.entry(key.to_string()).or_default().push(v.to_string());
        }
    }
    let Some(username) = user else {
        if !groups.is_empty() || uid.is_some() || !extra.is_empty() {
            return Err(ApiError::internal(
                "requested impersonation of groups, uid or extra without impersonating a user",
            ));
        }
        return Ok(requester);
    };
    let check = |a: Attributes| -> ApiResult<()> {
        authorize(store, &requester, &a)
            .map(|_| ())
            .map_err(|reason| forbidden(&requester, &a, &reason))
    };
    match sa_parts(&username) {
        Some((ns, name)) => check(Attributes {
            verb: "impersonate".into(),
            resource: "serviceaccounts".into(),
            namespace: ns.into(),
            name: name.into(),
            ..Default::default()
        })?,
        None => check(Attributes {
            verb: "impersonate".into(),
            resource: "users".into(),
            name: username.clone(),
            ..Default::default()
        })?,
    }
    for g in &groups {
        check(Attributes {
            verb: "impersonate".into(),
            resource: "groups".into(),
            name: g.clone(),
            ..Default::default()
        })?;
    }
    if let Some(u) = &uid {
        check(Attributes {
            verb: "impersonate".into(),
            group: "authentication.k8s.io".into(),
            resource: "uids".into(),
            name: u.clone(),
            ..Default::default()
        })?;
    }
    for (k, vs) in &extra {
        for v in vs {
            check(Attributes {
                verb: "impersonate".into(),
                group: "authentication.k8s.io".into(),
                resource: "userextras".into(),
                subresource: k.clone(),
                name: v.clone(),
                ..Default::default()
            })?;
        }
    }
    let mut gs = groups;
    if let Some((ns, _)) = sa_parts(&username)
        && gs.is_empty()
    {
        gs.push("system:serviceaccounts".into());
        gs.push(format!("system:serviceaccounts:{ns}"));
    }
    if username != "system:anonymous" && !gs.iter().any(|g| g == "system:authenticated") {
        gs.push("system:authenticated".into());
    }
    Ok(UserInfo { username, uid: uid.unwrap_or_default(), groups: gs, extra })
}

/// SelfSubjectRulesReview status: the rules of every binding that applies to the user.
fn rules_for(store: &Store, user: &UserInfo, ns: &str) -> Value {
    let mut resource_rules = vec![
        json!({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]}),
        json!({"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]}),
    ];
    let mut non_resource_rules = vec![
        json!({"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"]}),
    ];
    let rbac = |plural: &str| {
        store
            .resource("rbac.authorization.k8s.io", "v1", plural)
            .map(|r| r.store_key())
            .unwrap_or_default()
    };
    let cluster_roles = store.list_all(&rbac("clusterroles"), None);
    let roles = if ns.is_empty() { vec![] } else { store.list_all(&rbac("roles"), Some(ns)) };
    let mut bindings = store.list_all(&rbac("clusterrolebindings"), None);
    if !ns.is_empty() {
        bindings.extend(store.list_all(&rbac("rolebindings"), Some(ns)));
    }
    for b in bindings {
        if !b["subjects"].as_array().is_some_and(|ss| ss.iter().any(|s| subject_matches(s, user))) {
            continue;
        }
        let kind = b.pointer("/roleRef/kind").and_then(Value::as_str).unwrap_or_default();
        let name = b.pointer("/roleRef/name").and_then(Value::as_str).unwrap_or_default();
        let pool = if kind == "ClusterRole" { &cluster_roles } else { &roles };
        let Some(role) =
            pool.iter().find(|r| r.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
        else {
            continue;
        };
        for r in role["rules"].as_array().into_iter().flatten() {
            if r.get("nonResourceURLs").is_some() {
                non_resource_rules
                    .push(json!({"verbs": r["verbs"], "nonResourceURLs": r["nonResourceURLs"]}));
            }
            if r.get("resources").is_some() {
                let mut rr = json!({"verbs": r["verbs"], "apiGroups": r.get("apiGroups").cloned().unwrap_or(json!([])), "resources": r["resources"]});
                if let Some(n) = r.get("resourceNames") {
                    rr["resourceNames"] = n.clone();
                }
                resource_rules.push(rr);
            }
        }
    }
    json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": false})
}

fn user_json(u: &UserInfo) -> Value {
    let mut v = json!({"username": u.username, "groups": u.groups});
    if !u.uid.is_empty() {
        v["uid"] = json!(u.uid);
    }
    if !u.extra.is_empty() {
        v["extra"] = json!(u.extra);
    }
    v
}

fn review_attrs(spec: &Value) -> Attributes {
    if let Some(n) = spec.get("nonResourceAttributes").filter(|v| v.is_object()) {
        return Attributes {
            verb: n["verb"].as_str().unwrap_or_default().into(),
            path: Some(n["path"].as_str().unwrap_or_default().into()),
            ..Default::default()
        };
    }
    let r = &spec["resourceAttributes"];
    let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
    Attributes {
        verb: s("verb"),
        group: s("group"),
        resource: s("resource"),
        subresource: s("subresource"),
        namespace: s("namespace"),
        name: s("name"),
        path: None,
    }
}

/// SelfSubjectAccessReview, SubjectAccessReview and SelfSubjectReview (nothing is stored).
pub fn review(store: &Store, user: &UserInfo, resource: &str, mut body: Value) -> ApiResult<Value> {
    match resource {
        "selfsubjectreviews" => {
            body["status"] = json!({"userInfo": user_json(user)});
        }
        "selfsubjectaccessreviews" | "subjectaccessreviews" => {
            let subject = if resource == "subjectaccessreviews" {
                let sp = &body["spec"];
                UserInfo {
                    username: sp["user"].as_str().unwrap_or_default().into(),
                    uid: sp["uid"].as_str().unwrap_or_default().into(),
                    groups: sp["groups"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|g| g.as_str().map(str::to_string))
                        .collect(),
                    extra: BTreeMap::new(),
                }
            } else {
                user.clone()
            };
            let a = review_attrs(&body["spec"]);
            body["status"] = match authorize(store, &subject, &a) {
                Ok(reason) if reason.is_empty() => json!({"allowed": true}),
                Ok(reason) => json!({"allowed": true, "reason": reason}),
                Err(_) => json!({"allowed": false}),
            };
        }
        "selfsubjectrulesreviews" => {
            let ns = body
                .pointer("/spec/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            body["status"] = rules_for(store, user, &ns);
        }
        _ => return Err(ApiError::method_not_allowed()),
    }
    if !body.get("metadata").is_some_and(Value::is_object) {
        body["metadata"] = json!({});
    }
    body["metadata"]["creationTimestamp"] = Value::Null;
    Ok(body)
}
