//! Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`), which kubectl's typed
//! commands send and never retry as JSON
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#protobuf-encoding>): the `k8s\0`
//! magic, then a `runtime.Unknown` whose `raw` holds the object. Decoded with `k8s-pb` and converted
//! into k8s-openapi types for the kinds kubectl's `create` subcommands and `auth` send. proto2
//! fields that Go always encodes arrive as `""`/`0` where JSON omits them: those count as unset.

use crate::status::ApiError;
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1 as batch;
use k8s_openapi::api::{
    apps::v1 as apps, authorization::v1 as authz, core::v1 as core, rbac::v1 as rbac,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_pb::api::apps::v1 as papps;
use k8s_pb::api::authorization::v1 as pauthz;
use k8s_pb::api::batch::v1 as pbatch;
use k8s_pb::api::core::v1 as pcore;
use k8s_pb::api::rbac::v1 as prbac;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pmeta;
use prost::Message;
use serde_json::Value;
use std::collections::BTreeMap;

const MAGIC: &[u8] = b"k8s\0";

fn s(o: Option<String>) -> Option<String> {
    o.filter(|x| !x.is_empty())
}

fn v<T>(x: Vec<T>) -> Option<Vec<T>> {
    if x.is_empty() { None } else { Some(x) }
}

fn m(x: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    if x.is_empty() { None } else { Some(x) }
}

fn i64z(o: Option<i64>) -> Option<i64> {
    o.filter(|x| *x != 0)
}

fn meta(o: Option<pmeta::ObjectMeta>) -> meta::ObjectMeta {
    let Some(o) = o else {
        return meta::ObjectMeta::default();
    };
    meta::ObjectMeta {
        name: s(o.name),
        generate_name: s(o.generate_name),
        namespace: s(o.namespace),
        uid: s(o.uid),
        resource_version: s(o.resource_version),
        generation: i64z(o.generation),
        labels: m(o.labels),
        annotations: m(o.annotations),
        finalizers: v(o.finalizers),
        owner_references: v(o
            .owner_references
            .into_iter()
            .map(|r| meta::OwnerReference {
                api_version: r.api_version.unwrap_or_default(),
                kind: r.kind.unwrap_or_default(),
                name: r.name.unwrap_or_default(),
                uid: r.uid.unwrap_or_default(),
                controller: r.controller,
                block_owner_deletion: r.block_owner_deletion,
            })
            .collect()),
        ..Default::default()
    }
}

fn label_selector(o: Option<pmeta::LabelSelector>) -> meta::LabelSelector {
    let Some(o) = o else {
        return meta::LabelSelector::default();
    };
    meta::LabelSelector {
        match_labels: m(o.match_labels),
        match_expressions: v(o
            .match_expressions
            .into_iter()
            .map(|e| meta::LabelSelectorRequirement {
                key: e.key.unwrap_or_default(),
                operator: e.operator.unwrap_or_default(),
                values: v(e.values),
            })
            .collect()),
    }
}

fn quantities(
    x: BTreeMap<String, k8s_pb::apimachinery::pkg::api::resource::Quantity>,
) -> Option<BTreeMap<String, Quantity>> {
    if x.is_empty() {
        return None;
    }
    Some(x.into_iter().map(|(k, q)| (k, Quantity(q.string.unwrap_or_default()))).collect())
}

fn container(c: pcore::Container) -> core::Container {
    core::Container {
        name: c.name.unwrap_or_default(),
        image: s(c.image),
        command: v(c.command),
        args: v(c.args),
        working_dir: s(c.working_dir),
        ports: v(c
            .ports
            .into_iter()
            .map(|p| core::ContainerPort {
                name: s(p.name),
                host_port: p.host_port.filter(|x| *x != 0),
                container_port: p.container_port.unwrap_or_default(),
                protocol: s(p.protocol),
                host_ip: s(p.host_ip),
            })
            .collect()),
        env: v(c
            .env
            .into_iter()
            .map(|e| core::EnvVar {
                name: e.name.unwrap_or_default(),
                value: s(e.value),
                value_from: None,
            })
            .collect()),
        resources: c.resources.map(|r| core::ResourceRequirements {
            limits: quantities(r.limits),
            requests: quantities(r.requests),
            claims: None,
        }),
        image_pull_policy: s(c.image_pull_policy),
        termination_message_path: s(c.termination_message_path),
        termination_message_policy: s(c.termination_message_policy),
        stdin: c.stdin.filter(|b| *b),
        tty: c.tty.filter(|b| *b),
        ..Default::default()
    }
}

fn pod_spec(p: pcore::PodSpec) -> core::PodSpec {
    core::PodSpec {
        containers: p.containers.into_iter().map(container).collect(),
        init_containers: v(p.init_containers.into_iter().map(container).collect()),
        restart_policy: s(p.restart_policy),
        termination_grace_period_seconds: p.termination_grace_period_seconds,
        dns_policy: s(p.dns_policy),
        node_selector: m(p.node_selector),
        service_account_name: s(p.service_account_name),
        node_name: s(p.node_name),
        scheduler_name: s(p.scheduler_name),
        hostname: s(p.hostname),
        priority_class_name: s(p.priority_class_name),
        ..Default::default()
    }
}

fn job_spec(sp: pbatch::JobSpec) -> batch::JobSpec {
    let tpl = sp.template.unwrap_or_default();
    batch::JobSpec {
        parallelism: sp.parallelism,
        completions: sp.completions,
        active_deadline_seconds: sp.active_deadline_seconds,
        backoff_limit: sp.backoff_limit,
        manual_selector: sp.manual_selector,
        selector: sp.selector.map(|s| label_selector(Some(s))),
        template: core::PodTemplateSpec {
            metadata: Some(meta(tpl.metadata)),
            spec: tpl.spec.map(pod_spec),
        },
        ttl_seconds_after_finished: sp.ttl_seconds_after_finished,
        completion_mode: s(sp.completion_mode),
        suspend: sp.suspend,
        ..Default::default()
    }
}

fn rules(r: Vec<prbac::PolicyRule>) -> Option<Vec<rbac::PolicyRule>> {
    Some(
        r.into_iter()
            .map(|r| rbac::PolicyRule {
                verbs: r.verbs,
                api_groups: v(r.api_groups),
                resources: v(r.resources),
                resource_names: v(r.resource_names),
                non_resource_urls: v(r.non_resource_ur_ls),
            })
            .collect(),
    )
}

fn subjects(x: Vec<prbac::Subject>) -> Option<Vec<rbac::Subject>> {
    v(x.into_iter()
        .map(|x| rbac::Subject {
            kind: x.kind.unwrap_or_default(),
            api_group: s(x.api_group),
            name: x.name.unwrap_or_default(),
            namespace: s(x.namespace),
        })
        .collect())
}

fn role_ref(r: Option<prbac::RoleRef>) -> rbac::RoleRef {
    let r = r.unwrap_or_default();
    rbac::RoleRef {
        api_group: r.api_group.unwrap_or_default(),
        kind: r.kind.unwrap_or_default(),
        name: r.name.unwrap_or_default(),
    }
}

fn to_value<T: serde::Serialize>(t: &T) -> Result<Value, ApiError> {
    serde_json::to_value(t).map_err(|e| ApiError::internal(e.to_string()))
}

fn bad(e: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("unable to decode protobuf body: {e}"))
}

/// Decode a protobuf request body into the JSON object the rest of the server works with.
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let rest = body.strip_prefix(MAGIC).ok_or_else(|| bad("missing k8s magic prefix"))?;
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(rest).map_err(bad)?;
    let tm = unknown.type_meta.unwrap_or_default();
    let api_version = tm.api_version.unwrap_or_default();
    let kind = tm.kind.unwrap_or_default();
    let raw = unknown.raw.unwrap_or_default();
    let raw = raw.as_slice();
    let mut out = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => {
            let x = pcore::Namespace::decode(raw).map_err(bad)?;
            to_value(&core::Namespace { metadata: meta(x.metadata), ..Default::default() })?
        }
        ("v1", "ConfigMap") => {
            let x = pcore::ConfigMap::decode(raw).map_err(bad)?;
            to_value(&core::ConfigMap {
                metadata: meta(x.metadata),
                data: m(x.data),
                binary_data: if x.binary_data.is_empty() {
                    None
                } else {
                    Some(x.binary_data.into_iter().map(|(k, b)| (k, ByteString(b))).collect())
                },
                immutable: x.immutable.filter(|b| *b),
            })?
        }
        ("v1", "Secret") => {
            let x = pcore::Secret::decode(raw).map_err(bad)?;
            to_value(&core::Secret {
                metadata: meta(x.metadata),
                data: if x.data.is_empty() {
                    None
                } else {
                    Some(x.data.into_iter().map(|(k, b)| (k, ByteString(b))).collect())
                },
                string_data: m(x.string_data),
                type_: s(x.r#type),
                immutable: x.immutable.filter(|b| *b),
            })?
        }
        ("v1", "ServiceAccount") => {
            let x = pcore::ServiceAccount::decode(raw).map_err(bad)?;
            to_value(&core::ServiceAccount { metadata: meta(x.metadata), ..Default::default() })?
        }
        ("v1", "Service") => {
            let x = pcore::Service::decode(raw).map_err(bad)?;
            let sp = x.spec.unwrap_or_default();
            to_value(&core::Service {
                metadata: meta(x.metadata),
                spec: Some(core::ServiceSpec {
                    ports: v(sp
                        .ports
                        .into_iter()
                        .map(|p| core::ServicePort {
                            name: s(p.name),
                            protocol: s(p.protocol),
                            port: p.port.unwrap_or_default(),
                            target_port: p.target_port.and_then(|t| match t.r#type {
                                Some(1) => s(t.str_val).map(IntOrString::String),
                                _ => t.int_val.filter(|x| *x != 0).map(IntOrString::Int),
                            }),
                            node_port: p.node_port.filter(|x| *x != 0),
                            ..Default::default()
                        })
                        .collect()),
                    selector: m(sp.selector),
                    cluster_ip: s(sp.cluster_ip),
                    type_: s(sp.r#type),
                    external_name: s(sp.external_name),
                    ..Default::default()
                }),
                status: None,
            })?
        }
        ("apps/v1", "Deployment") => {
            let x = papps::Deployment::decode(raw).map_err(bad)?;
            let sp = x.spec.unwrap_or_default();
            let tpl = sp.template.unwrap_or_default();
            to_value(&apps::Deployment {
                metadata: meta(x.metadata),
                spec: Some(apps::DeploymentSpec {
                    replicas: sp.replicas,
                    selector: label_selector(sp.selector),
                    template: core::PodTemplateSpec {
                        metadata: Some(meta(tpl.metadata)),
                        spec: tpl.spec.map(pod_spec),
                    },
                    strategy: sp.strategy.map(|st| apps::DeploymentStrategy {
                        type_: s(st.r#type),
                        rolling_update: None,
                    }),
                    min_ready_seconds: sp.min_ready_seconds.filter(|x| *x != 0),
                    revision_history_limit: sp.revision_history_limit,
                    paused: sp.paused.filter(|b| *b),
                    progress_deadline_seconds: sp.progress_deadline_seconds,
                }),
                status: None,
            })?
        }
        ("batch/v1", "Job") => {
            let x = pbatch::Job::decode(raw).map_err(bad)?;
            to_value(&batch::Job {
                metadata: meta(x.metadata),
                spec: x.spec.map(job_spec),
                status: None,
            })?
        }
        ("batch/v1", "CronJob") => {
            let x = pbatch::CronJob::decode(raw).map_err(bad)?;
            let sp = x.spec.unwrap_or_default();
            let jt = sp.job_template.unwrap_or_default();
            to_value(&batch::CronJob {
                metadata: meta(x.metadata),
                spec: Some(batch::CronJobSpec {
                    schedule: sp.schedule.unwrap_or_default(),
                    time_zone: s(sp.time_zone),
                    starting_deadline_seconds: sp.starting_deadline_seconds,
                    concurrency_policy: s(sp.concurrency_policy),
                    suspend: sp.suspend,
                    job_template: batch::JobTemplateSpec {
                        metadata: Some(meta(jt.metadata)),
                        spec: jt.spec.map(job_spec),
                    },
                    successful_jobs_history_limit: sp.successful_jobs_history_limit,
                    failed_jobs_history_limit: sp.failed_jobs_history_limit,
                }),
                status: None,
            })?
        }
        ("v1", "ResourceQuota") => {
            let x = pcore::ResourceQuota::decode(raw).map_err(bad)?;
            let sp = x.spec.unwrap_or_default();
            to_value(&core::ResourceQuota {
                metadata: meta(x.metadata),
                spec: Some(core::ResourceQuotaSpec {
                    hard: quantities(sp.hard),
                    scopes: v(sp.scopes),
                    scope_selector: None,
                }),
                status: None,
            })?
        }
        ("rbac.authorization.k8s.io/v1", "Role") => {
            let x = prbac::Role::decode(raw).map_err(bad)?;
            to_value(&rbac::Role { metadata: meta(x.metadata), rules: rules(x.rules) })?
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
            let x = prbac::ClusterRole::decode(raw).map_err(bad)?;
            to_value(&rbac::ClusterRole {
                metadata: meta(x.metadata),
                rules: rules(x.rules),
                aggregation_rule: None,
            })?
        }
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
            let x = prbac::RoleBinding::decode(raw).map_err(bad)?;
            to_value(&rbac::RoleBinding {
                metadata: meta(x.metadata),
                subjects: subjects(x.subjects),
                role_ref: role_ref(x.role_ref),
            })?
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            let x = prbac::ClusterRoleBinding::decode(raw).map_err(bad)?;
            to_value(&rbac::ClusterRoleBinding {
                metadata: meta(x.metadata),
                subjects: subjects(x.subjects),
                role_ref: role_ref(x.role_ref),
            })?
        }
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => {
            let x = pauthz::SelfSubjectAccessReview::decode(raw).map_err(bad)?;
            let sp = x.spec.unwrap_or_default();
            to_value(&authz::SelfSubjectAccessReview {
                metadata: meta(x.metadata),
                spec: authz::SelfSubjectAccessReviewSpec {
                    resource_attributes: sp.resource_attributes.map(|r| {
                        authz::ResourceAttributes {
                            namespace: s(r.namespace),
                            verb: s(r.verb),
                            group: r.group,
                            version: s(r.version),
                            resource: s(r.resource),
                            subresource: s(r.subresource),
                            name: s(r.name),
                            ..Default::default()
                        }
                    }),
                    non_resource_attributes: sp
                        .non_resource_attributes
                        .map(|n| authz::NonResourceAttributes { path: s(n.path), verb: s(n.verb) }),
                },
                status: None,
            })?
        }
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => {
            let x = pauthz::SelfSubjectRulesReview::decode(raw).map_err(bad)?;
            to_value(&authz::SelfSubjectRulesReview {
                metadata: meta(x.metadata),
                spec: authz::SelfSubjectRulesReviewSpec {
                    namespace: x.spec.and_then(|s| s.namespace).filter(|n| !n.is_empty()),
                },
                status: None,
            })?
        }
        ("authentication.k8s.io/v1", "SelfSubjectReview") => serde_json::json!({"metadata": {}}),
        _ => {
            return Err(ApiError::unsupported_media_type(&format!(
                "application/vnd.kubernetes.protobuf for {api_version}, Kind={kind}"
            )));
        }
    };
    out["apiVersion"] = Value::String(api_version);
    out["kind"] = Value::String(kind);
    Ok(out)
}
