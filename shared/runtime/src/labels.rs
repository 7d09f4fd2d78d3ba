//! The label values of our enums in metrics, shared by the counters (`metrics`) and the
//! duration histograms (`durations`).

use kuvryn_sync_api::{RenderType, SinkType};

/// The label value of a render type.
pub fn render_type_label(render_type: RenderType) -> &'static str {
    match render_type {
        RenderType::Yaml => "yaml",
        RenderType::Kustomize => "kustomize",
        RenderType::Helm => "helm",
    }
}

/// The label value of a sink type.
pub fn sink_type_label(sink_type: SinkType) -> &'static str {
    match sink_type {
        SinkType::Webhook => "webhook",
        SinkType::Slack => "slack",
    }
}
