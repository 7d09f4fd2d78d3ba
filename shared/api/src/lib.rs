//! The `sync.kuvryn.io/v1alpha1` API: the six kinds, their names, and the CRDs generated from
//! them.

// kube-derive's `printcolumn(name = …, type_ = …)` repeats key names across columns, which
// clippy mistakes for duplicated attributes.
#![allow(clippy::duplicated_attributes)]

pub mod application;
pub mod common;
pub mod healthcheck;
pub mod imagepolicy;
pub mod names;
pub mod notification;
mod reference;
pub mod repository;
pub mod revision;

pub use application::*;
pub use common::*;
pub use healthcheck::*;
pub use imagepolicy::*;
pub use names::*;
pub use notification::*;
pub use reference::reference_markdown;
pub use repository::*;
pub use revision::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube_core::CustomResourceExt;

/// API group of every kind.
pub const GROUP: &str = "sync.kuvryn.io";
/// API version of every kind.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every kind.
pub const API_VERSION: &str = "sync.kuvryn.io/v1alpha1";

/// The controller's name: its field manager for everything it writes outside an Application's
/// own manager, its Event reporter, its leader-election Lease and its binary.
pub const CONTROLLER_NAME: &str = "kuvryn-sync-controller";

/// The one duration grammar of every API field that holds a duration (`spec.pollInterval`,
/// `spec.interval`, `spec.health.timeout`, `spec.strategy.failurePolicy.timeout`), as an anchored
/// regular expression: one or more `<number><unit>` pairs written together, the number decimal
/// digits with an optional fraction, the unit `ms`, `s`, `m` or `h` (`500ms`, `90s`, `1h30m`).
/// The CRDs carry it, so the API server refuses a malformed duration; the parser in
/// `kuvryn_sync_core::duration` accepts exactly the same strings.
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";

/// Every CRD, in a fixed order: the one list of our kinds.
///
/// Each CRD is generated from the Rust types, then given descriptions for the properties the
/// derive leaves bare (`apiVersion`, `kind`, `metadata`), so every property of every schema
/// explains itself in `kubectl explain`, and every description is reflowed: the line breaks of a
/// wrapped doc comment become spaces, blank lines stay paragraph breaks.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![
        Repository::crd(),
        Application::crd(),
        Revision::crd(),
        HealthCheck::crd(),
        NotificationSink::crd(),
        ImagePolicy::crd(),
    ];
    for crd in &mut crds {
        describe_object_envelope(crd);
        for version in &mut crd.spec.versions {
            if let Some(schema) =
                version.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut())
            {
                reflow_descriptions(schema);
            }
        }
    }
    crds
}

/// Join the lines of each paragraph of every description in `schema` with spaces.
fn reflow_descriptions(schema: &mut JSONSchemaProps) {
    if let Some(description) = schema.description.as_mut() {
        *description = description
            .split("\n\n")
            .map(|paragraph| paragraph.lines().map(str::trim).collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join("\n\n");
    }
    for property in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        reflow_descriptions(property);
    }
    match schema.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(item)) => reflow_descriptions(item),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => {
            items.iter_mut().for_each(reflow_descriptions)
        }
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(extra)) = schema.additional_properties.as_mut() {
        reflow_descriptions(extra);
    }
}

/// Declare and describe `apiVersion`, `kind` and `metadata`, which every object has and which the
/// derive leaves out of the schema (the API server adds them without a description).
fn describe_object_envelope(crd: &mut CustomResourceDefinition) {
    let kind = crd.spec.names.kind.clone();
    let group = crd.spec.group.clone();
    for version in &mut crd.spec.versions {
        let api_version = format!("{group}/{}", version.name);
        let Some(properties) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|s| s.properties.as_mut())
        else {
            continue;
        };
        let texts = [
            (
                "apiVersion",
                "string",
                format!(
                    "API group and version this object is written in, `{api_version}` for \
                     {kind} objects. The API server uses it to pick the schema that decodes the \
                     object."
                ),
            ),
            (
                "kind",
                "string",
                format!(
                    "Type of this object, always `{kind}` here. Together with apiVersion it tells \
                     the API server which schema and REST resource the object belongs to."
                ),
            ),
            (
                "metadata",
                "object",
                "Standard Kubernetes object metadata: name, namespace, labels and annotations \
                 that you set, and the fields the API server maintains, such as uid, \
                 resourceVersion, generation and creationTimestamp."
                    .to_owned(),
            ),
        ];
        for (name, type_, text) in texts {
            let property = properties.entry(name.to_owned()).or_insert_with(|| JSONSchemaProps {
                type_: Some(type_.to_owned()),
                ..JSONSchemaProps::default()
            });
            if property.description.as_deref().is_none_or(str::is_empty) {
                property.description = Some(text);
            }
        }
    }
}

/// Every CRD as one multi-document YAML stream: what `ksync crds` prints and what the chart's
/// `crds/` directory holds.
pub fn crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::from(
        "# Generated by `ksync crds` from the Rust types in shared/api. Do not edit.\n",
    );
    for crd in crds() {
        out.push_str("---\n");
        // Long descriptions stay on one line (no folding), as kuvryn_sync_core::yaml::to_string.
        let mut options = serde_saphyr::SerializerOptions::default();
        options.folded_wrap_chars = usize::MAX;
        out.push_str(&serde_saphyr::to_string_with_options(&crd, options)?);
    }
    Ok(out)
}
