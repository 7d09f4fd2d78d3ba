//! From rendered manifests to desired state: normalising and validating objects, the desired-state hash, Helm values.

pub mod desired;
pub mod helm_values;
