//! Discovery documents: `/version`, `/api`, `/apis`, `/apis/GROUP` and the resource lists.

use crate::resources::ResourceInfo;
use crate::status::{ApiError, ApiResult};
use crate::store::Store;
use serde_json::{Value, json};

pub(super) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": "v1.33.0",
        "gitCommit": "ksync-sandbox",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

pub(super) fn api_group_list(store: &Store) -> Value {
    let mut groups: Vec<(String, Vec<String>, String)> = vec![];
    for r in store.resources() {
        if r.group.is_empty() {
            continue;
        }
        match groups.iter_mut().find(|g| g.0 == r.group) {
            Some(g) => {
                if !g.1.contains(&r.version) {
                    g.1.push(r.version.clone());
                }
                if r.storage {
                    g.2 = r.version.clone();
                }
            }
            None => groups.push((r.group.clone(), vec![r.version.clone()], r.version.clone())),
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(name, versions, preferred)| {
            json!({
                "name": name,
                "versions": versions.iter().map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v})).collect::<Vec<_>>(),
                "preferredVersion": {"groupVersion": format!("{name}/{preferred}"), "version": preferred},
            })
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(super) fn resource_list(store: &Store, g: &str, v: &str) -> ApiResult<Value> {
    let rs: Vec<ResourceInfo> =
        store.resources().into_iter().filter(|r| r.group == g && r.version == v).collect();
    if rs.is_empty() {
        return Err(ApiError::path_not_found());
    }
    let gv = if g.is_empty() { v.to_string() } else { format!("{g}/{v}") };
    let resources: Vec<Value> = rs.iter().flat_map(|r| r.discovery_entries()).collect();
    Ok(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// One group of [`api_group_list`] as an `APIGroup`.
pub(super) fn api_group(store: &Store, g: &str) -> ApiResult<Value> {
    let list = api_group_list(store);
    let grp = list["groups"].as_array().into_iter().flatten().find(|x| x["name"] == *g).cloned();
    match grp {
        Some(mut grp) => {
            grp["kind"] = json!("APIGroup");
            grp["apiVersion"] = json!("v1");
            Ok(grp)
        }
        None => Err(ApiError::path_not_found()),
    }
}
