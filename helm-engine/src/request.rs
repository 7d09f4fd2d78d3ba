//! The JSON wire format between [`crate::HelmRenderer`] and the `ksync-helm-render` helper.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::HelmError;

/// One render: a chart directory, its values and the release it is rendered for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderRequest {
    /// The unpacked chart (a directory holding `Chart.yaml`).
    pub chart_dir: PathBuf,
    /// Values merged over the chart's `values.yaml`; must be a JSON object (or null).
    #[serde(default)]
    pub values: serde_json::Value,
    /// `.Release.Name`.
    pub release_name: String,
    /// `.Release.Namespace`.
    pub namespace: String,
    /// `.Release.IsInstall`.
    #[serde(default = "default_true")]
    pub is_install: bool,
    /// `.Release.IsUpgrade`.
    #[serde(default)]
    pub is_upgrade: bool,
    /// `.Release.Revision`.
    #[serde(default = "default_revision")]
    pub revision: u32,
}

fn default_true() -> bool {
    true
}

fn default_revision() -> u32 {
    1
}

impl RenderRequest {
    /// A first-install request with empty values.
    pub fn new(
        chart_dir: impl Into<PathBuf>,
        release_name: impl Into<String>,
        namespace: impl Into<String>,
    ) -> Self {
        Self {
            chart_dir: chart_dir.into(),
            values: serde_json::Value::Object(serde_json::Map::new()),
            release_name: release_name.into(),
            namespace: namespace.into(),
            is_install: true,
            is_upgrade: false,
            revision: 1,
        }
    }

    /// The same request with these values.
    #[must_use]
    pub fn with_values(mut self, values: serde_json::Value) -> Self {
        self.values = values;
        self
    }

    /// Checks the parts Helm would otherwise misread; returns the values as a JSON object text.
    pub fn values_json(&self) -> Result<String, HelmError> {
        match &self.values {
            serde_json::Value::Null => Ok("{}".to_owned()),
            v @ serde_json::Value::Object(_) => Ok(v.to_string()),
            other => Err(HelmError::InvalidRequest(format!(
                "values must be a JSON object, not {}",
                json_kind(other)
            ))),
        }
    }

    /// The render options object the library's `helm_render` takes.
    pub fn options_json(&self) -> Result<String, HelmError> {
        if self.release_name.is_empty() {
            return Err(HelmError::InvalidRequest("releaseName must not be empty".to_owned()));
        }
        if self.namespace.is_empty() {
            return Err(HelmError::InvalidRequest("namespace must not be empty".to_owned()));
        }
        if self.is_install == self.is_upgrade {
            return Err(HelmError::InvalidRequest(
                "exactly one of isInstall and isUpgrade must be true".to_owned(),
            ));
        }
        Ok(serde_json::json!({
            "name": self.release_name,
            "namespace": self.namespace,
            "revision": self.revision,
            "is_install": self.is_install,
            "is_upgrade": self.is_upgrade,
        })
        .to_string())
    }
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// The helper's answer: exactly one of `manifests` or `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderResponse {
    /// Template path (`chart/templates/x.yaml`) to rendered YAML.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests: Option<BTreeMap<String, String>>,
    /// Why rendering failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The Helm engine's error code, when the engine reported the failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
}

impl RenderResponse {
    /// A successful answer.
    pub fn ok(manifests: BTreeMap<String, String>) -> Self {
        Self { manifests: Some(manifests), error: None, code: None }
    }

    /// A failed answer.
    pub fn failed(error: &HelmError) -> Self {
        let code = match error {
            HelmError::Engine { code, .. } => Some(*code),
            _ => None,
        };
        let error = match error {
            // Keep the engine's own text; the code travels separately.
            HelmError::Engine { message, .. } => message.clone(),
            other => other.to_string(),
        };
        Self { manifests: None, error: Some(error), code }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_uses_camel_case_and_defaults() {
        let req: RenderRequest = serde_json::from_str(
            r#"{"chartDir":"/c","releaseName":"r","namespace":"ns","isUpgrade":true,"isInstall":false}"#,
        )
        .expect("parse");
        assert_eq!(req.chart_dir, PathBuf::from("/c"));
        assert_eq!(req.revision, 1);
        assert!(req.is_upgrade && !req.is_install);
        assert_eq!(req.values_json().expect("values"), "{}");
        let back = serde_json::to_value(&req).expect("to json");
        assert_eq!(back["releaseName"], "r");
        assert_eq!(back["isUpgrade"], true);
    }

    #[test]
    fn options_carry_release_fields() {
        let mut req = RenderRequest::new("/c", "rel", "team-a");
        req.revision = 3;
        let opts: serde_json::Value =
            serde_json::from_str(&req.options_json().expect("options")).expect("json");
        assert_eq!(
            opts,
            serde_json::json!({"name":"rel","namespace":"team-a","revision":3,"is_install":true,"is_upgrade":false})
        );
    }

    #[test]
    fn bad_requests_are_refused() {
        let req = RenderRequest::new("/c", "rel", "ns").with_values(serde_json::json!([1]));
        assert!(
            matches!(req.values_json(), Err(HelmError::InvalidRequest(m)) if m.contains("array"))
        );
        let req = RenderRequest::new("/c", "", "ns");
        assert!(req.options_json().is_err());
        let mut req = RenderRequest::new("/c", "r", "ns");
        req.is_upgrade = true;
        assert!(req.options_json().is_err());
    }

    #[test]
    fn failed_response_keeps_engine_code() {
        let resp =
            RenderResponse::failed(&HelmError::Engine { code: -23, message: "boom".to_owned() });
        let json = serde_json::to_value(&resp).expect("json");
        assert_eq!(json, serde_json::json!({"error":"boom","code":-23}));
    }
}
