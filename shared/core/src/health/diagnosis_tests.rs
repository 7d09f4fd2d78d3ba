//! Table tests of the root-cause diagnosis, over object shapes real clusters and the sandbox's
//! workload simulator produce (kubelet container states and Event wording, controller
//! conditions).

use serde_json::{Value, json};

use super::*;

const NS: &str = "payments";
const CANARY: &str = "canary-7c1e4b2d-do-not-leak";

fn r(api_version: &str, kind: &str, name: &str) -> ResourceRef {
    ResourceRef {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: NS.into(),
        name: name.into(),
    }
}

fn deployment_ref(name: &str) -> ResourceRef {
    r("apps/v1", "Deployment", name)
}

fn rs_ref(name: &str) -> ResourceRef {
    r("apps/v1", "ReplicaSet", name)
}

fn pod_ref(name: &str) -> ResourceRef {
    r("v1", "Pod", name)
}

fn secret_ref(name: &str) -> ResourceRef {
    r("v1", "Secret", name)
}

fn meta(name: &str, uid: &str, owner: Option<(&str, &str, &str)>) -> Value {
    let mut meta = json!({"name": name, "namespace": NS, "uid": uid});
    if let Some((kind, owner_name, owner_uid)) = owner {
        meta["ownerReferences"] = json!([{
            "apiVersion": if kind == "ReplicaSet" || kind == "Deployment" || kind == "StatefulSet" || kind == "DaemonSet" { "apps/v1" } else { "batch/v1" },
            "kind": kind, "name": owner_name, "uid": owner_uid,
            "controller": true, "blockOwnerDeletion": true,
        }]);
    }
    meta
}

fn deployment(name: &str, revision: &str) -> Value {
    let mut meta = meta(name, &format!("uid-{name}"), None);
    meta["annotations"] = json!({ DEPLOYMENT_REVISION: revision });
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "api", "image": "nginx:1.27"}]}}},
        "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "unavailableReplicas": 1,
                   "conditions": [
                       {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable", "message": "Deployment does not have minimum availability."},
                       {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated", "message": format!("ReplicaSet \"{name}-7d9f\" is progressing.")}]},
    })
}

fn replica_set(name: &str, deployment: &str, revision: &str, pod_spec: &Value) -> Value {
    let mut meta = meta(
        name,
        &format!("uid-{name}"),
        Some(("Deployment", deployment, &format!("uid-{deployment}"))),
    );
    meta["annotations"] = json!({ DEPLOYMENT_REVISION: revision });
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta,
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": deployment}},
                 "template": {"metadata": {"labels": {"app": deployment}}, "spec": pod_spec}},
        "status": {"replicas": 1, "observedGeneration": 1},
    })
}

fn pod(name: &str, owner: (&str, &str), spec: &Value, status: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": meta(name, &format!("uid-{name}"), Some((owner.0, owner.1, &format!("uid-{}", owner.1)))),
        "spec": spec, "status": status,
    })
}

fn container(name: &str) -> Value {
    json!({"name": name, "image": "registry.example.com/app:1.0"})
}

fn spec_with(containers: Value) -> Value {
    json!({"containers": containers, "restartPolicy": "Always", "serviceAccountName": "default"})
}

fn scheduled_conditions(ready: bool) -> Value {
    let status = if ready { "True" } else { "False" };
    let mut ready_condition = json!({"type": "Ready", "status": status});
    if !ready {
        ready_condition["reason"] = json!("ContainersNotReady");
        ready_condition["message"] = json!("containers with unready status: [api]");
    }
    json!([
        {"type": "PodReadyToStartContainers", "status": "True"},
        {"type": "Initialized", "status": "True"},
        ready_condition,
        {"type": "ContainersReady", "status": status},
        {"type": "PodScheduled", "status": "True"},
    ])
}

fn waiting_status(phase: &str, reason: &str, message: Option<&str>) -> Value {
    let mut waiting = json!({"reason": reason});
    if let Some(message) = message {
        waiting["message"] = json!(message);
    }
    json!({
        "phase": phase, "conditions": scheduled_conditions(false),
        "containerStatuses": [{"name": "api", "ready": false, "restartCount": 0, "started": false,
                               "image": "registry.example.com/app:1.0", "imageID": "",
                               "state": {"waiting": waiting}, "lastState": {}}],
    })
}

fn crash_status(last_reason: &str, exit_code: i64, last_message: Option<&str>) -> Value {
    let mut terminated = json!({"exitCode": exit_code, "reason": last_reason,
                                "startedAt": "2026-12-01T10:00:00Z", "finishedAt": "2026-12-01T10:00:01Z"});
    if let Some(message) = last_message {
        terminated["message"] = json!(message);
    }
    json!({
        "phase": "Running", "conditions": scheduled_conditions(false),
        "containerStatuses": [{"name": "api", "ready": false, "restartCount": 4, "started": false,
                               "image": "registry.example.com/app:1.0",
                               "state": {"waiting": {"reason": "CrashLoopBackOff",
                                   "message": "back-off 1m20s restarting failed container=api pod=api-7d9f-x2k_payments(uid-api-7d9f-x2k)"}},
                               "lastState": {"terminated": terminated}}],
    })
}

fn running_unready_status() -> Value {
    json!({
        "phase": "Running", "conditions": scheduled_conditions(false),
        "containerStatuses": [{"name": "api", "ready": false, "restartCount": 0, "started": true,
                               "state": {"running": {"startedAt": "2026-12-01T10:00:00Z"}}, "lastState": {}}],
    })
}

fn unschedulable_status(message: &str) -> Value {
    json!({
        "phase": "Pending", "qosClass": "Burstable",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}],
    })
}

fn event(regarding: ResourceRef, reason: &str, message: &str, warning: bool) -> EventFacts {
    EventFacts { regarding, reason: reason.into(), message: message.into(), warning, count: 3 }
}

/// A Deployment `name` at revision 2 with its current ReplicaSet `name-7d9f`, an old empty one
/// (`name-5c4b`, revision 1) and one Pod `name-7d9f-x2k` of the current one.
fn deployment_stack(name: &str, pod_spec: &Value, pod_status: Value) -> Vec<Value> {
    let rs = format!("{name}-7d9f");
    let mut old = replica_set(&format!("{name}-5c4b"), name, "1", pod_spec);
    old["spec"]["replicas"] = json!(0);
    vec![
        deployment(name, "2"),
        replica_set(&rs, name, "2", pod_spec),
        old,
        pod(&format!("{rs}-x2k"), ("ReplicaSet", &rs), pod_spec, pod_status),
    ]
}

fn deployment_chain(name: &str) -> Vec<ResourceRef> {
    vec![
        deployment_ref(name),
        rs_ref(&format!("{name}-7d9f")),
        pod_ref(&format!("{name}-7d9f-x2k")),
    ]
}

fn unhealthy(resource: ResourceRef, degraded: bool) -> Unhealthy {
    Unhealthy {
        resource,
        degraded,
        message: "Deployment does not have minimum availability".into(),
        health_check_reason: None,
    }
}

fn env_secret_spec(secret: &str) -> Value {
    spec_with(json!([{"name": "api", "image": "registry.example.com/app:1.0",
        "env": [{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": secret, "key": "password"}}}]}]))
}

/// A Deployment whose Pod waits on a Secret `secret` that does not exist.
fn missing_secret_deployment(name: &str, secret: &str) -> (Vec<Value>, Vec<EventFacts>) {
    let message = format!("secret \"{secret}\" not found");
    let objects = deployment_stack(
        name,
        &env_secret_spec(secret),
        waiting_status("Pending", "CreateContainerConfigError", Some(&message)),
    );
    let events = vec![event(
        pod_ref(&format!("{name}-7d9f-x2k")),
        "Failed",
        &format!("Error: {message}"),
        true,
    )];
    (objects, events)
}

/// What one case expects of one entry.
struct Want {
    reason: &'static str,
    resource: ResourceRef,
    chain: Vec<ResourceRef>,
    message_has: Vec<&'static str>,
}

struct Case {
    name: &'static str,
    unhealthy: Vec<Unhealthy>,
    snapshot: Snapshot,
    want: Vec<Want>,
}

fn snapshot(objects: Vec<Value>, events: Vec<EventFacts>, absent: &[ResourceRef]) -> Snapshot {
    Snapshot { objects, events, absent: absent.iter().cloned().collect() }
}

fn case_missing_secret_env() -> Case {
    let (objects, events) = missing_secret_deployment("api", "db");
    let mut chain = deployment_chain("api");
    chain.push(secret_ref("db"));
    Case {
        name: "missing Secret via env: the spec's example",
        unhealthy: vec![unhealthy(deployment_ref("api"), true)],
        snapshot: snapshot(objects, events, &[secret_ref("db")]),
        want: vec![Want {
            reason: "MissingSecret",
            resource: secret_ref("db"),
            chain,
            message_has: vec![
                "Secret payments/db does not exist; Pod api-7d9f-x2k: CreateContainerConfigError: container api is waiting: secret \"db\" not found",
            ],
        }],
    }
}

fn case_missing_secret_volume() -> Case {
    let spec = spec_with(json!([{"name": "api", "image": "registry.example.com/app:1.0",
        "volumeMounts": [{"name": "certs", "mountPath": "/certs"}]}]));
    let mut spec = spec;
    spec["volumes"] = json!([{"name": "certs", "secret": {"secretName": "tls"}}]);
    let mut status = waiting_status("Pending", "ContainerCreating", None);
    status["conditions"][0]["status"] = json!("False");
    let objects = deployment_stack("web", &spec, status);
    let events = vec![event(
        pod_ref("web-7d9f-x2k"),
        "FailedMount",
        "MountVolume.SetUp failed for volume \"certs\" : secret \"tls\" not found",
        true,
    )];
    let mut chain = deployment_chain("web");
    chain.push(secret_ref("tls"));
    Case {
        name: "missing Secret via volume: ContainerCreating and FailedMount",
        unhealthy: vec![unhealthy(deployment_ref("web"), false)],
        // The controller has not looked the Secret up: the Event alone names it.
        snapshot: snapshot(objects, events, &[]),
        want: vec![Want {
            reason: "MissingSecret",
            resource: secret_ref("tls"),
            chain,
            message_has: vec![
                "Secret payments/tls does not exist",
                "FailedMount: MountVolume.SetUp failed for volume \"certs\"",
            ],
        }],
    }
}

fn case_missing_config_map() -> Case {
    let spec = spec_with(json!([{"name": "api", "image": "registry.example.com/app:1.0",
        "envFrom": [{"configMapRef": {"name": "settings"}}]}]));
    let objects = deployment_stack(
        "api",
        &spec,
        waiting_status(
            "Pending",
            "CreateContainerConfigError",
            Some("configmap \"settings\" not found"),
        ),
    );
    let config_map = r("v1", "ConfigMap", "settings");
    let mut chain = deployment_chain("api");
    chain.push(config_map.clone());
    Case {
        name: "missing ConfigMap via envFrom",
        unhealthy: vec![unhealthy(deployment_ref("api"), true)],
        snapshot: snapshot(objects, vec![], std::slice::from_ref(&config_map)),
        want: vec![Want {
            reason: "MissingConfigMap",
            resource: config_map,
            chain,
            message_has: vec!["ConfigMap payments/settings does not exist"],
        }],
    }
}

fn case_missing_key() -> Case {
    let mut objects = deployment_stack(
        "api",
        &env_secret_spec("db"),
        waiting_status(
            "Pending",
            "CreateContainerConfigError",
            Some("couldn't find key password in Secret payments/db"),
        ),
    );
    objects
        .push(json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta("db", "uid-db", None),
                        "type": "Opaque", "data": {"user": "YXBp"}}));
    let mut chain = deployment_chain("api");
    chain.push(secret_ref("db"));
    Case {
        name: "a key missing from an existing Secret",
        unhealthy: vec![unhealthy(deployment_ref("api"), true)],
        snapshot: snapshot(objects, vec![], &[]),
        want: vec![Want {
            reason: "MissingSecretKey",
            resource: secret_ref("db"),
            chain,
            message_has: vec!["Secret payments/db has no such key", "couldn't find key password"],
        }],
    }
}

fn case_image_pull() -> Case {
    let image = "unreachable.invalid/app:1";
    let spec = spec_with(json!([{"name": "api", "image": image}]));
    let objects = deployment_stack(
        "api",
        &spec,
        waiting_status(
            "Pending",
            "ImagePullBackOff",
            Some("Back-off pulling image \"unreachable.invalid/app:1\""),
        ),
    );
    let pod = pod_ref("api-7d9f-x2k");
    let events = vec![
        event(pod.clone(), "Pulling", "Pulling image \"unreachable.invalid/app:1\"", false),
        event(
            pod.clone(),
            "Failed",
            "Failed to pull image \"unreachable.invalid/app:1\": rpc error: code = Unknown desc = failed to pull and unpack image \"unreachable.invalid/app:1\": dial tcp: lookup unreachable.invalid: no such host",
            true,
        ),
        event(pod.clone(), "Failed", "Error: ImagePullBackOff", true),
        event(
            pod.clone(),
            "BackOff",
            "Back-off pulling image \"unreachable.invalid/app:1\"",
            false,
        ),
    ];
    Case {
        name: "image pull failure: ImagePullBackOff with the pull error from the Event",
        unhealthy: vec![unhealthy(deployment_ref("api"), true)],
        snapshot: snapshot(objects, events, &[]),
        want: vec![Want {
            reason: "ImagePullBackOff",
            resource: pod,
            chain: deployment_chain("api"),
            message_has: vec!["cannot pull image \"unreachable.invalid/app:1\"", "no such host"],
        }],
    }
}

fn case_err_image_pull_with_missing_pull_secret() -> Case {
    let mut spec =
        spec_with(json!([{"name": "api", "image": "registry.example.com/private/app:1"}]));
    spec["imagePullSecrets"] = json!([{"name": "registry-creds"}]);
    let objects = deployment_stack(
        "api",
        &spec,
        waiting_status("Pending", "ErrImagePull", Some("failed to authorize: 401 Unauthorized")),
    );
    let mut chain = deployment_chain("api");
    chain.push(secret_ref("registry-creds"));
    Case {
        name: "ErrImagePull with an imagePullSecret that does not exist: the Secret",
        unhealthy: vec![unhealthy(deployment_ref("api"), true)],
        snapshot: snapshot(objects, vec![], &[secret_ref("registry-creds")]),
        want: vec![Want {
            reason: "MissingSecret",
            resource: secret_ref("registry-creds"),
            chain,
            message_has: vec!["ErrImagePull: container api cannot pull image"],
        }],
    }
}

fn case_crash_loop() -> Case {
    let objects = deployment_stack(
        "api",
        &spec_with(json!([container("api")])),
        crash_status("Error", 1, None),
    );
    Case {
        name: "crash loop: restart count and last exit code in the message",
        unhealthy: vec![unhealthy(deployment_ref("api"), true)],
        snapshot: snapshot(objects, vec![], &[]),
        want: vec![Want {
            reason: "CrashLoopBackOff",
            resource: pod_ref("api-7d9f-x2k"),
            chain: deployment_chain("api"),
            message_has: vec!["restarted 4 times", "terminated with exit code 1 (Error)"],
        }],
    }
}

fn case_oom_killed() -> Case {
    let objects = deployment_stack(
        "api",
        &spec_with(json!([container("api")])),
        crash_status("OOMKilled", 137, None),
    );
    Case {
        name: "OOMKilled: the last termination decides over CrashLoopBackOff",
        unhealthy: vec![unhealthy(deployment_ref("api"), true)],
        snapshot: snapshot(objects, vec![], &[]),
        want: vec![Want {
            reason: "OOMKilled",
            resource: pod_ref("api-7d9f-x2k"),
            chain: deployment_chain("api"),
            message_has: vec!["exit code 137 (OOMKilled)"],
        }],
    }
}

fn case_unschedulable() -> Case {
    let message = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.";
    let objects = deployment_stack(
        "api",
        &spec_with(json!([container("api")])),
        unschedulable_status(message),
    );
    let events = vec![event(pod_ref("api-7d9f-x2k"), "FailedScheduling", message, true)];
    Case {
        name: "unschedulable: the scheduler's message",
        unhealthy: vec![unhealthy(deployment_ref("api"), false)],
        snapshot: snapshot(objects, events, &[]),
        want: vec![Want {
            reason: "Unschedulable",
            resource: pod_ref("api-7d9f-x2k"),
            chain: deployment_chain("api"),
            message_has: vec!["0/3 nodes are available: 3 Insufficient cpu"],
        }],
    }
}

fn pending_claim(name: &str, class: Option<&str>) -> Value {
    let mut spec =
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
    if let Some(class) = class {
        spec["storageClassName"] = json!(class);
    }
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta(name, &format!("uid-{name}"), None),
           "spec": spec, "status": {"phase": "Pending"}})
}

fn case_pending_claim_managed() -> Case {
    let claim = r("v1", "PersistentVolumeClaim", "data");
    let events = vec![event(
        claim.clone(),
        "ProvisioningFailed",
        "storageclass.storage.k8s.io \"fast\" not found",
        true,
    )];
    Case {
        name: "pending PVC managed directly: storage class and provisioning Event",
        unhealthy: vec![Unhealthy {
            resource: claim.clone(),
            degraded: false,
            message: "PVC is not Bound".into(),
            health_check_reason: None,
        }],
        snapshot: snapshot(vec![pending_claim("data", Some("fast"))], events, &[]),
        want: vec![Want {
            reason: "PersistentVolumeClaimPending",
            resource: claim.clone(),
            chain: vec![claim],
            message_has: vec![
                "PersistentVolumeClaim payments/data is Pending (storage class \"fast\")",
                "ProvisioningFailed: storageclass.storage.k8s.io \"fast\" not found",
            ],
        }],
    }
}

fn case_statefulset_pod_waits_on_claim() -> Case {
    let claim = r("v1", "PersistentVolumeClaim", "data-db-0");
    let sts = r("apps/v1", "StatefulSet", "db");
    let mut spec = spec_with(json!([container("db")]));
    spec["volumes"] =
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]);
    let objects = vec![
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("db", "uid-db", None),
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "db"}}}, "status": {"replicas": 1}}),
        pod(
            "db-0",
            ("StatefulSet", "db"),
            &spec,
            unschedulable_status(
                "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
            ),
        ),
        pending_claim("data-db-0", None),
    ];
    let events = vec![event(
        claim.clone(),
        "FailedBinding",
        "no persistent volumes available for this claim and no storage class is set",
        true,
    )];
    Case {
        name: "StatefulSet Pod unschedulable on an unbound claim: the claim",
        unhealthy: vec![Unhealthy {
            resource: sts.clone(),
            degraded: false,
            message: "Replicas: 0/1 ready".into(),
            health_check_reason: None,
        }],
        snapshot: snapshot(objects, events, &[]),
        want: vec![Want {
            reason: "PersistentVolumeClaimPending",
            resource: claim.clone(),
            chain: vec![sts, pod_ref("db-0"), claim],
            message_has: vec![
                "no storage class",
                "FailedBinding",
                "pod has unbound immediate PersistentVolumeClaims",
            ],
        }],
    }
}

fn failed_job(name: &str, hook: Option<&str>) -> Vec<Value> {
    let mut meta = meta(name, &format!("uid-{name}"), None);
    if let Some(hook) = hook {
        meta["annotations"] = json!({ keys::HOOK: hook });
    }
    let spec = json!({"containers": [{"name": "migrate", "image": "registry.example.com/migrate:1"}], "restartPolicy": "Never"});
    let failed_pod = |pod_name: &str| {
        pod(
            pod_name,
            ("Job", name),
            &spec,
            json!({
                "phase": "Failed",
                "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}, {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "migrate", "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": "relation \"users\" does not exist"}}}],
            }),
        )
    };
    vec![
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
               "spec": {"backoffLimit": 1, "template": {"spec": spec}},
               "status": {"failed": 2, "conditions": [
                   {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"},
                   {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}}),
        failed_pod(&format!("{name}-abcde")),
        failed_pod(&format!("{name}-fghij")),
    ]
}

fn case_job_failed() -> Case {
    let job = r("batch/v1", "Job", "report");
    Case {
        name: "failed Job (backoffLimit): JobFailed with the container's exit as evidence",
        unhealthy: vec![Unhealthy {
            resource: job.clone(),
            degraded: true,
            message: "Job has reached the specified backoff limit".into(),
            health_check_reason: None,
        }],
        snapshot: snapshot(failed_job("report", None), vec![], &[]),
        want: vec![Want {
            reason: "JobFailed",
            resource: job.clone(),
            chain: vec![job],
            message_has: vec![
                "BackoffLimitExceeded",
                "container migrate terminated with exit code 1 (Error)",
            ],
        }],
    }
}

fn case_hook_failed() -> Case {
    let job = r("batch/v1", "Job", "migrate");
    Case {
        name: "failed hook Job: HookFailed",
        unhealthy: vec![Unhealthy {
            resource: job.clone(),
            degraded: true,
            message: "Job has reached the specified backoff limit".into(),
            health_check_reason: None,
        }],
        snapshot: snapshot(failed_job("migrate", Some(keys::HOOK_PRE_SYNC)), vec![], &[]),
        want: vec![Want {
            reason: "HookFailed",
            resource: job.clone(),
            chain: vec![job],
            message_has: vec!["Job payments/migrate failed: BackoffLimitExceeded"],
        }],
    }
}

fn case_readiness() -> Case {
    let objects =
        deployment_stack("api", &spec_with(json!([container("api")])), running_unready_status());
    let events = vec![event(
        pod_ref("api-7d9f-x2k"),
        "Unhealthy",
        "Readiness probe failed: HTTP probe failed with statuscode: 503",
        true,
    )];
    Case {
        name: "readiness never comes: ReadinessProbeFailed from the Unhealthy Event",
        unhealthy: vec![unhealthy(deployment_ref("api"), false)],
        snapshot: snapshot(objects, events, &[]),
        want: vec![Want {
            reason: "ReadinessProbeFailed",
            resource: pod_ref("api-7d9f-x2k"),
            chain: deployment_chain("api"),
            message_has: vec!["HTTP probe failed with statuscode: 503"],
        }],
    }
}

/// A Deployment whose current ReplicaSet cannot create Pods, reported as `kind` says.
fn failed_create(by_condition: bool, message: &str) -> Snapshot {
    let spec = spec_with(json!([container("api")]));
    let mut rs = replica_set("api-7d9f", "api", "2", &spec);
    let mut events = vec![];
    if by_condition {
        rs["status"]["conditions"] = json!([{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": message}]);
    } else {
        events.push(event(
            rs_ref("api-7d9f"),
            "FailedCreate",
            &format!("Error creating: {message}"),
            true,
        ));
    }
    snapshot(vec![deployment("api", "2"), rs], events, &[])
}

fn case_failed_create_service_account() -> Case {
    let account = r("v1", "ServiceAccount", "api-sa");
    Case {
        name: "ReplicaSet FailedCreate: missing ServiceAccount",
        unhealthy: vec![unhealthy(deployment_ref("api"), true)],
        snapshot: failed_create(
            true,
            "pods \"api-7d9f-\" is forbidden: error looking up service account payments/api-sa: serviceaccount \"api-sa\" not found",
        ),
        want: vec![Want {
            reason: "MissingServiceAccount",
            resource: account.clone(),
            chain: vec![deployment_ref("api"), rs_ref("api-7d9f"), account],
            message_has: vec![
                "ServiceAccount payments/api-sa does not exist; ReplicaSet payments/api-7d9f: FailedCreate",
            ],
        }],
    }
}

fn case_failed_create_quota() -> Case {
    let quota = r("v1", "ResourceQuota", "compute-quota");
    Case {
        name: "ReplicaSet FailedCreate: ResourceQuota exceeded",
        unhealthy: vec![unhealthy(deployment_ref("api"), true)],
        snapshot: failed_create(
            false,
            "pods \"api-7d9f-abcde\" is forbidden: exceeded quota: compute-quota, requested: limits.cpu=2, used: limits.cpu=8, limited: limits.cpu=8",
        ),
        want: vec![Want {
            reason: "QuotaExceeded",
            resource: quota.clone(),
            chain: vec![deployment_ref("api"), rs_ref("api-7d9f"), quota],
            message_has: vec!["exceeded quota: compute-quota"],
        }],
    }
}

fn case_failed_create_webhook() -> Case {
    Case {
        name: "ReplicaSet FailedCreate: admission webhook denial",
        unhealthy: vec![unhealthy(deployment_ref("api"), true)],
        snapshot: failed_create(
            false,
            "admission webhook \"policy.example.com\" denied the request: containers must not run as root",
        ),
        want: vec![Want {
            reason: "AdmissionRefused",
            resource: rs_ref("api-7d9f"),
            chain: vec![deployment_ref("api"), rs_ref("api-7d9f")],
            message_has: vec!["denied the request: containers must not run as root"],
        }],
    }
}

fn rollout(name: &str, conditions: Value) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": meta(name, &format!("uid-{name}"), None),
           "spec": {}, "status": {"phase": "Degraded", "conditions": conditions}})
}

fn rollout_ref(name: &str) -> ResourceRef {
    r("argoproj.io/v1alpha1", "Rollout", name)
}

fn case_custom_resource_health_check() -> Case {
    Case {
        name: "custom resource with a HealthCheck Degraded message and no reason: Degraded",
        unhealthy: vec![Unhealthy {
            resource: rollout_ref("web"),
            degraded: true,
            message: "Rollout is degraded".into(),
            health_check_reason: None,
        }],
        snapshot: snapshot(vec![rollout("web", json!([]))], vec![], &[]),
        want: vec![Want {
            reason: "Degraded",
            resource: rollout_ref("web"),
            chain: vec![rollout_ref("web")],
            message_has: vec!["Rollout payments/web: Rollout is degraded"],
        }],
    }
}

fn case_custom_resource_rule_reason() -> Case {
    Case {
        name: "a rule that errored: the reason the caller passes",
        unhealthy: vec![Unhealthy {
            resource: rollout_ref("web"),
            degraded: false,
            message: "rule 0 exceeded its cost limit".into(),
            health_check_reason: Some("HealthCheckFailed".into()),
        }],
        snapshot: snapshot(
            vec![rollout("web", json!([{"type": "Ready", "status": "False", "reason": "Paused"}]))],
            vec![],
            &[],
        ),
        want: vec![Want {
            reason: "HealthCheckFailed",
            resource: rollout_ref("web"),
            chain: vec![rollout_ref("web")],
            message_has: vec!["cost limit"],
        }],
    }
}

fn case_custom_resource_ready_reason() -> Case {
    Case {
        name: "custom resource: the Ready condition's CamelCase reason",
        unhealthy: vec![Unhealthy {
            resource: rollout_ref("web"),
            degraded: true,
            message: "reconcile failed".into(),
            health_check_reason: None,
        }],
        snapshot: snapshot(
            vec![rollout(
                "web",
                json!([{"type": "Ready", "status": "False", "reason": "ReconciliationFailed", "message": "reconcile failed"}]),
            )],
            vec![],
            &[],
        ),
        want: vec![Want {
            reason: "ReconciliationFailed",
            resource: rollout_ref("web"),
            chain: vec![rollout_ref("web")],
            message_has: vec!["reconcile failed"],
        }],
    }
}

fn case_daemon_set_pods_collapse() -> Case {
    let ds = r("apps/v1", "DaemonSet", "agent");
    let spec = spec_with(json!([container("api")]));
    let objects = vec![
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta("agent", "uid-agent", None),
               "spec": {"selector": {"matchLabels": {"app": "agent"}}}, "status": {}}),
        pod("agent-a", ("DaemonSet", "agent"), &spec, crash_status("Error", 2, None)),
        pod("agent-b", ("DaemonSet", "agent"), &spec, crash_status("Error", 2, None)),
        pod("agent-c", ("DaemonSet", "agent"), &spec, crash_status("Error", 2, None)),
    ];
    Case {
        name: "DaemonSet Pods crashing alike: one entry counting the others",
        unhealthy: vec![Unhealthy {
            resource: ds.clone(),
            degraded: true,
            message: "0/3 ready".into(),
            health_check_reason: None,
        }],
        snapshot: snapshot(objects, vec![], &[]),
        want: vec![Want {
            reason: "CrashLoopBackOff",
            resource: pod_ref("agent-a"),
            chain: vec![ds, pod_ref("agent-a")],
            message_has: vec!["exit code 2", "2 more Pods fail the same way"],
        }],
    }
}

fn case_healthy_pods_progressing_deployment() -> Case {
    let spec = spec_with(json!([container("api")]));
    let mut status = running_unready_status();
    status["conditions"] = scheduled_conditions(true);
    status["containerStatuses"][0]["ready"] = json!(true);
    let mut objects = deployment_stack("api", &spec, status);
    objects[0]["status"]["conditions"] = json!([{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"api-7d9f\" has timed out progressing."}]);
    Case {
        name: "nothing wrong below: the Deployment itself with its failing condition's reason",
        unhealthy: vec![Unhealthy {
            resource: deployment_ref("api"),
            degraded: true,
            message: "Progress deadline exceeded".into(),
            health_check_reason: None,
        }],
        snapshot: snapshot(objects, vec![], &[]),
        want: vec![Want {
            reason: "ProgressDeadlineExceeded",
            resource: deployment_ref("api"),
            chain: vec![deployment_ref("api")],
            message_has: vec!["Deployment payments/api: Progress deadline exceeded"],
        }],
    }
}

fn case_evicted() -> Case {
    let status = json!({"phase": "Failed", "reason": "Evicted",
        "message": "The node was low on resource: memory. Threshold quantity: 100Mi, available: 90Mi."});
    let objects = deployment_stack("api", &spec_with(json!([container("api")])), status);
    Case {
        name: "an evicted Pod",
        unhealthy: vec![unhealthy(deployment_ref("api"), false)],
        snapshot: snapshot(objects, vec![], &[]),
        want: vec![Want {
            reason: "Evicted",
            resource: pod_ref("api-7d9f-x2k"),
            chain: deployment_chain("api"),
            message_has: vec!["The node was low on resource: memory"],
        }],
    }
}

fn case_invalid_image_name() -> Case {
    let message = "Failed to apply default image tag \"app:Latest!\": couldn't parse image name";
    let objects = deployment_stack(
        "api",
        &spec_with(json!([{"name": "api", "image": "app:Latest!"}])),
        waiting_status("Pending", "InvalidImageName", Some(message)),
    );
    Case {
        name: "InvalidImageName stays its own reason: a retry cannot help",
        unhealthy: vec![unhealthy(deployment_ref("api"), true)],
        snapshot: snapshot(objects, vec![], &[]),
        want: vec![Want {
            reason: "InvalidImageName",
            resource: pod_ref("api-7d9f-x2k"),
            chain: deployment_chain("api"),
            message_has: vec!["couldn't parse image name"],
        }],
    }
}

fn case_other_waiting_reason() -> Case {
    let message = "failed to create containerd task: exec: \"/app\": permission denied";
    let spec = spec_with(json!([container("api")]));
    let status = waiting_status("Running", "RunContainerError", Some(message));
    let objects = deployment_stack("api", &spec, status);
    Case {
        name: "another container waiting reason is reported as the kubelet words it",
        unhealthy: vec![unhealthy(deployment_ref("api"), true)],
        snapshot: snapshot(objects, vec![], &[]),
        want: vec![Want {
            reason: "RunContainerError",
            resource: pod_ref("api-7d9f-x2k"),
            chain: deployment_chain("api"),
            message_has: vec!["permission denied"],
        }],
    }
}

fn case_init_container_running() -> Case {
    let mut spec = spec_with(json!([container("api")]));
    spec["initContainers"] = json!([{"name": "init", "image": "busybox"}]);
    let mut status = waiting_status("Pending", "PodInitializing", None);
    status["initContainerStatuses"] = json!([{"name": "init", "ready": false, "restartCount": 0,
        "state": {"running": {"startedAt": "2026-12-01T10:00:00Z"}}}]);
    let objects = deployment_stack("api", &spec, status);
    Case {
        name: "a running init container is not ready by design: no Pod cause, the Deployment's own",
        unhealthy: vec![unhealthy(deployment_ref("api"), false)],
        snapshot: snapshot(objects, vec![], &[]),
        want: vec![Want {
            reason: "MinimumReplicasUnavailable",
            resource: deployment_ref("api"),
            chain: vec![deployment_ref("api")],
            message_has: vec!["Deployment payments/api"],
        }],
    }
}

fn case_missing_claim() -> Case {
    let claim = r("v1", "PersistentVolumeClaim", "data");
    let mut spec = spec_with(json!([container("api")]));
    spec["volumes"] = json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]);
    let objects = deployment_stack(
        "api",
        &spec,
        unschedulable_status(
            "0/1 nodes are available: persistentvolumeclaim \"data\" not found. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
        ),
    );
    let mut chain = deployment_chain("api");
    chain.push(claim.clone());
    Case {
        name: "a Pod whose claim does not exist",
        unhealthy: vec![unhealthy(deployment_ref("api"), false)],
        snapshot: snapshot(objects, vec![], &[]),
        want: vec![Want {
            reason: "MissingPersistentVolumeClaim",
            resource: claim,
            chain,
            message_has: vec!["PersistentVolumeClaim payments/data does not exist"],
        }],
    }
}

fn case_failed_job_with_a_specific_pod_cause() -> Case {
    let job = r("batch/v1", "Job", "report");
    let spec = env_secret_spec("db");
    let mut job_object = failed_job("report", None).remove(0);
    job_object["status"]["conditions"][1]["reason"] = json!("DeadlineExceeded");
    job_object["status"]["conditions"][1]["message"] =
        json!("Job was active longer than specified deadline");
    let objects = vec![
        job_object,
        pod(
            "report-abcde",
            ("Job", "report"),
            &spec,
            waiting_status(
                "Pending",
                "CreateContainerConfigError",
                Some("secret \"db\" not found"),
            ),
        ),
    ];
    Case {
        name: "a Job that failed on its deadline because its Pod misses a Secret: the Secret",
        unhealthy: vec![Unhealthy {
            resource: job.clone(),
            degraded: true,
            message: "Job failed".into(),
            health_check_reason: None,
        }],
        snapshot: snapshot(objects, vec![], &[secret_ref("db")]),
        want: vec![Want {
            reason: "MissingSecret",
            resource: secret_ref("db"),
            chain: vec![job, pod_ref("report-abcde"), secret_ref("db")],
            message_has: vec!["Secret payments/db does not exist"],
        }],
    }
}

#[test]
fn diagnose_finds_the_root_cause() {
    let cases = [
        case_missing_secret_env(),
        case_missing_secret_volume(),
        case_missing_config_map(),
        case_missing_key(),
        case_image_pull(),
        case_err_image_pull_with_missing_pull_secret(),
        case_crash_loop(),
        case_oom_killed(),
        case_unschedulable(),
        case_pending_claim_managed(),
        case_statefulset_pod_waits_on_claim(),
        case_job_failed(),
        case_hook_failed(),
        case_readiness(),
        case_failed_create_service_account(),
        case_failed_create_quota(),
        case_failed_create_webhook(),
        case_custom_resource_health_check(),
        case_custom_resource_rule_reason(),
        case_custom_resource_ready_reason(),
        case_daemon_set_pods_collapse(),
        case_healthy_pods_progressing_deployment(),
        case_evicted(),
        case_invalid_image_name(),
        case_other_waiting_reason(),
        case_missing_claim(),
        case_init_container_running(),
        case_failed_job_with_a_specific_pod_cause(),
    ];
    for case in cases {
        let got = diagnose(&case.unhealthy, &case.snapshot, &Redactor::new());
        assert_eq!(got.len(), case.want.len(), "{}: {got:#?}", case.name);
        for (got, want) in got.iter().zip(&case.want) {
            assert_eq!(got.reason, want.reason, "{}: {got:#?}", case.name);
            assert_eq!(got.resource, want.resource, "{}", case.name);
            assert_eq!(got.chain, want.chain, "{}", case.name);
            for part in &want.message_has {
                assert!(
                    got.message.contains(part),
                    "{}: {:?} lacks {part:?}",
                    case.name,
                    got.message
                );
            }
            assert!(got.message.chars().count() <= MAX_MESSAGE_CHARS, "{}", case.name);
        }
    }
}

#[test]
fn a_secret_shared_by_two_deployments_is_listed_once() {
    let (mut objects, mut events) = missing_secret_deployment("api", "db");
    let (more_objects, more_events) = missing_secret_deployment("worker", "db");
    objects.extend(more_objects);
    events.extend(more_events);
    let snapshot = snapshot(objects, events, &[secret_ref("db")]);
    let unhealthy =
        [unhealthy(deployment_ref("worker"), true), unhealthy(deployment_ref("api"), true)];

    let got = diagnose(&unhealthy, &snapshot, &Redactor::new());

    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].reason, "MissingSecret");
    assert_eq!(got[0].resource, secret_ref("db"));
    // The first in resource order keeps its chain; the message counts the other one.
    assert_eq!(got[0].chain[0], deployment_ref("api"));
    assert!(
        got[0].message.ends_with("; also affects Deployment payments/worker"),
        "{}",
        got[0].message
    );
}

#[test]
fn at_most_ten_causes_and_degraded_ones_first() {
    let mut objects = vec![];
    let mut events = vec![];
    let mut absent = vec![];
    let mut unhealthy_list = vec![];
    for i in 0..12 {
        let name = format!("app{i:02}");
        let (o, e) = missing_secret_deployment(&name, &format!("secret{i:02}"));
        objects.extend(o);
        events.extend(e);
        absent.push(secret_ref(&format!("secret{i:02}")));
        // Odd ones are Degraded; the Progressing ones sort first by name.
        unhealthy_list.push(unhealthy(deployment_ref(&name), i % 2 == 1));
    }
    let snapshot = snapshot(objects, events, &absent);

    let got = diagnose(&unhealthy_list, &snapshot, &Redactor::new());

    assert_eq!(got.len(), MAX_ENTRIES);
    let managed: Vec<&str> = got.iter().map(|d| d.chain[0].name.as_str()).collect();
    assert_eq!(
        managed,
        ["app01", "app03", "app05", "app07", "app09", "app11", "app00", "app02", "app04", "app06"]
    );
}

#[test]
fn a_chain_deeper_than_ten_keeps_both_ends() {
    // Twelve levels of a custom kind, each controlling the next, the last controlling a Pod that
    // waits on a missing Secret: 14 resources from the managed one to the Secret.
    let layer_ref = |i: usize| r("example.com/v1", "Layer", &format!("layer{i:02}"));
    let mut objects = vec![];
    for i in 0..12 {
        let mut meta = meta(&format!("layer{i:02}"), &format!("uid-layer{i:02}"), None);
        if i > 0 {
            meta["ownerReferences"] = json!([{"apiVersion": "example.com/v1", "kind": "Layer",
                "name": format!("layer{:02}", i - 1), "uid": format!("uid-layer{:02}", i - 1), "controller": true}]);
        }
        objects.push(json!({"apiVersion": "example.com/v1", "kind": "Layer", "metadata": meta,
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Waiting", "message": "waiting for children"}]}}));
    }
    let mut leaf = pod(
        "leaf",
        ("Layer", "layer11"),
        &env_secret_spec("db"),
        waiting_status("Pending", "CreateContainerConfigError", Some("secret \"db\" not found")),
    );
    leaf["metadata"]["ownerReferences"][0]["apiVersion"] = json!("example.com/v1");
    objects.push(leaf);
    let snapshot = snapshot(objects, vec![], &[secret_ref("db")]);
    let unhealthy = [Unhealthy {
        resource: layer_ref(0),
        degraded: false,
        message: "waiting for children".into(),
        health_check_reason: None,
    }];

    let got = diagnose(&unhealthy, &snapshot, &Redactor::new());

    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].reason, "MissingSecret");
    let want: Vec<ResourceRef> = (0..5)
        .map(layer_ref)
        .chain([layer_ref(10), layer_ref(11), pod_ref("leaf"), secret_ref("db")])
        .collect();
    assert_eq!(got[0].chain.len(), MAX_CHAIN);
    assert_eq!(got[0].chain[..5], want[..5]);
    assert_eq!(got[0].chain[MAX_CHAIN - 4..], want[5..]);
}

#[test]
fn bound_chain_keeps_short_chains_and_both_ends_of_long_ones() {
    let refs = |n: usize| -> Vec<ResourceRef> { (0..n).map(|i| pod_ref(&i.to_string())).collect() };
    let cases =
        [(3, vec![0, 1, 2]), (10, (0..10).collect()), (11, vec![0, 1, 2, 3, 4, 6, 7, 8, 9, 10])];
    for (len, want) in cases {
        let want: Vec<ResourceRef> =
            want.into_iter().map(|i: usize| pod_ref(&i.to_string())).collect();
        assert_eq!(bound_chain(refs(len)), want, "chain of {len}");
    }
}

#[test]
fn a_secret_value_in_evidence_is_redacted() {
    let spec = spec_with(json!([container("api")]));
    let status =
        crash_status("Error", 1, Some(&format!("panic: cannot connect with password {CANARY}")));
    let objects = deployment_stack("api", &spec, status);
    let claim = r("v1", "PersistentVolumeClaim", "data");
    let mut all = objects;
    all.push(pending_claim("data", Some("fast")));
    let events =
        vec![event(claim.clone(), "ProvisioningFailed", &format!("token {CANARY} rejected"), true)];
    let snapshot = snapshot(all, events, &[]);
    let unhealthy = [
        unhealthy(deployment_ref("api"), true),
        Unhealthy {
            resource: claim,
            degraded: false,
            message: format!("PVC {CANARY}"),
            health_check_reason: None,
        },
    ];
    let redactor = Redactor::new().with_secret(CANARY);

    let got = diagnose(&unhealthy, &snapshot, &redactor);

    assert_eq!(got.len(), 2, "{got:#?}");
    for diagnosis in &got {
        assert!(!diagnosis.message.contains(CANARY), "{}", diagnosis.message);
        assert!(diagnosis.message.contains(crate::redact::MASK), "{}", diagnosis.message);
    }
}

#[test]
fn long_messages_are_cut_to_512_characters() {
    let long = "x".repeat(2000);
    let unhealthy = [Unhealthy {
        resource: rollout_ref("web"),
        degraded: true,
        message: long,
        health_check_reason: None,
    }];
    let got = diagnose(&unhealthy, &snapshot(vec![], vec![], &[]), &Redactor::new());
    assert_eq!(got[0].message.chars().count(), MAX_MESSAGE_CHARS);
    assert!(got[0].message.ends_with('…'));
}

#[test]
fn an_unchanged_snapshot_gives_an_identical_diagnosis_whatever_the_input_order() {
    let (mut objects, mut events) = missing_secret_deployment("api", "db");
    objects.extend(deployment_stack(
        "web",
        &spec_with(json!([container("api")])),
        crash_status("Error", 1, None),
    ));
    objects.extend(failed_job("report", None));
    events.push(event(
        pod_ref("web-7d9f-x2k"),
        "BackOff",
        "Back-off restarting failed container api",
        true,
    ));
    let unhealthy_list = vec![
        unhealthy(deployment_ref("web"), true),
        unhealthy(deployment_ref("api"), false),
        Unhealthy {
            resource: r("batch/v1", "Job", "report"),
            degraded: true,
            message: "failed".into(),
            health_check_reason: None,
        },
    ];
    let first = snapshot(objects.clone(), events.clone(), &[secret_ref("db")]);
    let mut reversed_objects = objects;
    reversed_objects.reverse();
    let mut reversed_events = events;
    reversed_events.reverse();
    let second = snapshot(reversed_objects, reversed_events, &[secret_ref("db")]);
    let mut reversed_unhealthy = unhealthy_list.clone();
    reversed_unhealthy.reverse();

    let a = diagnose(&unhealthy_list, &first, &Redactor::new());
    let b = diagnose(&unhealthy_list, &first, &Redactor::new());
    let c = diagnose(&reversed_unhealthy, &second, &Redactor::new());

    assert_eq!(a.len(), 3, "{a:#?}");
    assert_eq!(a, b);
    assert_eq!(a, c);
    let reasons: Vec<&str> = a.iter().map(|d| d.reason.as_str()).collect();
    // Degraded first (in resource order: apps/v1 before batch/v1), then Progressing.
    assert_eq!(reasons, ["CrashLoopBackOff", "JobFailed", "MissingSecret"]);
}

#[test]
fn diagnosis_changed_compares_roots_not_wording() {
    let entry = |name: &str, reason: &str, message: &str| Diagnosis {
        resource: pod_ref(name),
        reason: reason.into(),
        message: message.into(),
        chain: vec![pod_ref(name)],
    };
    let before =
        vec![entry("a", "CrashLoopBackOff", "restarted 3 times"), entry("b", "OOMKilled", "x")];
    let cases: [(&str, Vec<Diagnosis>, bool); 5] = [
        ("same", before.clone(), false),
        (
            "new wording",
            vec![entry("a", "CrashLoopBackOff", "restarted 4 times"), entry("b", "OOMKilled", "y")],
            false,
        ),
        ("reordered", vec![before[1].clone(), before[0].clone()], false),
        ("other reason", vec![entry("a", "OOMKilled", "x"), entry("b", "OOMKilled", "x")], true),
        ("one gone", vec![before[0].clone()], true),
    ];
    for (name, after, want) in cases {
        assert_eq!(diagnosis_changed(&before, &after), want, "{name}");
    }
    assert!(!diagnosis_changed(&[], &[]));
}

#[test]
fn references_to_check_lists_what_pods_and_templates_need() {
    let pod_spec = json!({
        "serviceAccountName": "api-sa",
        "imagePullSecrets": [{"name": "registry"}],
        "initContainers": [{"name": "init", "image": "busybox", "envFrom": [{"secretRef": {"name": "init-env"}}]}],
        "containers": [{"name": "api", "image": "app",
            "env": [
                {"name": "A", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "b"}}},
                {"name": "C", "valueFrom": {"secretKeyRef": {"name": "maybe", "key": "c", "optional": true}}},
                {"name": "D", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "envFrom": [{"configMapRef": {"name": "env-cm"}}, {"configMapRef": {"name": "opt-cm", "optional": true}}]}],
        "volumes": [
            {"name": "tls", "secret": {"secretName": "tls"}},
            {"name": "conf", "configMap": {"name": "conf"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "all", "projected": {"sources": [{"secret": {"name": "proj-secret"}}, {"configMap": {"name": "proj-cm"}}, {"serviceAccountToken": {"path": "token"}}]}},
            {"name": "tmp", "emptyDir": {}}],
    });
    let lone_pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta("api-0", "uid-api-0", None), "spec": pod_spec});
    // A Deployment whose Pods exist: only the Pods count, so its template's Secret is not asked.
    let mut with_pods =
        deployment_stack("web", &spec_with(json!([container("api")])), running_unready_status());
    with_pods[0]["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "x", "secret": {"secretName": "template-only"}}]);
    // A Deployment without Pods yet (say, a missing ServiceAccount): its template counts.
    let mut no_pods = deployment("jobs", "1");
    no_pods["spec"]["template"]["spec"] =
        json!({"serviceAccountName": "jobs-sa", "containers": [container("api")]});

    let cases: [(&str, Vec<Value>, Vec<ResourceRef>); 3] = [
        (
            "every kind of reference of a Pod, optional ones skipped",
            vec![lone_pod],
            vec![
                r("v1", "ConfigMap", "conf"),
                r("v1", "ConfigMap", "env-cm"),
                r("v1", "ConfigMap", "proj-cm"),
                r("v1", "ConfigMap", "settings"),
                r("v1", "PersistentVolumeClaim", "data"),
                secret_ref("db"),
                secret_ref("init-env"),
                secret_ref("proj-secret"),
                secret_ref("registry"),
                secret_ref("tls"),
                r("v1", "ServiceAccount", "api-sa"),
            ],
        ),
        (
            "a Deployment with Pods: the Pods' references, default ServiceAccount",
            with_pods,
            vec![r("v1", "ServiceAccount", "default")],
        ),
        (
            "a Deployment without Pods: its template's references",
            vec![no_pods],
            vec![r("v1", "ServiceAccount", "jobs-sa")],
        ),
    ];
    for (name, objects, want) in cases {
        let got = references_to_check(&snapshot(objects, vec![], &[]));
        assert_eq!(got, want.into_iter().collect::<BTreeSet<_>>(), "{name}");
    }
}

#[test]
fn secrets_referenced_lists_every_secret_pods_and_templates_name() {
    let pod_spec = json!({
        "imagePullSecrets": [{"name": "registry"}],
        "containers": [{"name": "api", "image": "app",
            "env": [
                {"name": "A", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                {"name": "C", "valueFrom": {"secretKeyRef": {"name": "maybe", "key": "c", "optional": true}}},
                {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "b"}}}],
            "envFrom": [{"secretRef": {"name": "env-all"}}]}],
        "volumes": [{"name": "tls", "secret": {"secretName": "tls"}}, {"name": "conf", "configMap": {"name": "conf"}}],
    });
    let lone_pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta("api-0", "uid-api-0", None), "spec": pod_spec});
    // Unlike references_to_check, a template counts even when its Pods exist: the values are
    // learnt for masking, not checked for existence.
    let mut with_pods =
        deployment_stack("web", &spec_with(json!([container("api")])), running_unready_status());
    with_pods[0]["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "x", "secret": {"secretName": "template-only"}}]);
    let cases: [(&str, Vec<Value>, Vec<ResourceRef>); 3] = [
        (
            "a Pod: every Secret, optional ones too, no ConfigMaps",
            vec![lone_pod],
            ["db", "env-all", "maybe", "registry", "tls"].map(secret_ref).to_vec(),
        ),
        (
            "a Deployment with Pods: its template's Secret",
            with_pods,
            vec![secret_ref("template-only")],
        ),
        ("nothing that runs Pods", vec![deployment("empty", "1")], vec![]),
    ];
    for (name, objects, want) in cases {
        let got = secrets_referenced(&snapshot(objects, vec![], &[]));
        assert_eq!(got, want.into_iter().collect::<BTreeSet<_>>(), "{name}");
    }
}

#[test]
fn related_selectors_name_what_to_list() {
    let mut job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("report", "uid-report", None), "spec": {}});
    let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("db", "uid-db", None),
        "spec": {"selector": {"matchLabels": {"app": "db"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]}, {"key": "canary", "operator": "DoesNotExist"}]}}});
    let query = |api_version: &str, kind: &str, selector: &str, owner: Option<&str>| RelatedQuery {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: NS.into(),
        label_selector: selector.into(),
        owner_uid: owner.map(Into::into),
    };
    let cases = [
        (
            "Deployment: ReplicaSets it owns, Pods by selector",
            deployment("api", "1"),
            vec![
                query("apps/v1", "ReplicaSet", "app=api", Some("uid-api")),
                query("v1", "Pod", "app=api", None),
            ],
        ),
        (
            "StatefulSet: selector with expressions",
            sts,
            vec![query("v1", "Pod", "!canary,app=db,tier in (a,b)", Some("uid-db"))],
        ),
        (
            "Job without a selector: job-name",
            job.clone(),
            vec![query("v1", "Pod", "job-name=report", Some("uid-report"))],
        ),
        (
            "ConfigMap: nothing",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("c", "uid-c", None)}),
            vec![],
        ),
    ];
    for (name, object, want) in cases {
        assert_eq!(related_selectors(&object), want, "{name}");
    }
    job["spec"]["selector"] =
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "uid-report"}});
    assert_eq!(
        related_selectors(&job),
        vec![query(
            "v1",
            "Pod",
            "batch.kubernetes.io/controller-uid=uid-report",
            Some("uid-report")
        )]
    );
}

#[test]
fn current_replica_set_follows_the_revision_annotation() {
    let spec = spec_with(json!([container("api")]));
    let old = replica_set("api-1", "api", "1", &spec);
    let new = replica_set("api-2", "api", "2", &spec);
    let newest = replica_set("api-3", "api", "3", &spec);
    let mut foreign = replica_set("other-9", "other", "9", &spec);
    foreign["metadata"]["name"] = json!("other-9");
    let mut unannotated = deployment("api", "1");
    unannotated["metadata"]["annotations"] = json!({});
    let name = |rs: Option<&Value>| rs.map(|v| name_of(v).to_owned());
    let cases = [
        (
            "the revision the Deployment names",
            deployment("api", "2"),
            vec![&old, &new, &newest, &foreign],
            Some("api-2"),
        ),
        (
            "no annotation: the highest revision it owns",
            unannotated.clone(),
            vec![&old, &new, &foreign],
            Some("api-2"),
        ),
        (
            "a revision no ReplicaSet has: the highest",
            deployment("api", "7"),
            vec![&new, &old],
            Some("api-2"),
        ),
        ("none owned", unannotated, vec![&foreign], None),
    ];
    for (case, deployment, replica_sets, want) in cases {
        assert_eq!(
            name(current_replica_set(&deployment, replica_sets)),
            want.map(str::to_owned),
            "{case}"
        );
    }
}

#[test]
fn parse_missing_reads_kubelet_and_controller_wording() {
    let cases = [
        ("secret \"db\" not found", Some((secret_ref("db"), Reason::MissingSecret))),
        (
            "Error: configmap \"c\" not found",
            Some((r("v1", "ConfigMap", "c"), Reason::MissingConfigMap)),
        ),
        (
            "couldn't find key k in ConfigMap payments/c",
            Some((r("v1", "ConfigMap", "c"), Reason::MissingConfigMapKey)),
        ),
        (
            "couldn't find key password in Secret payments/db",
            Some((secret_ref("db"), Reason::MissingSecretKey)),
        ),
        (
            "persistentvolumeclaim \"data\" not found",
            Some((r("v1", "PersistentVolumeClaim", "data"), Reason::MissingPersistentVolumeClaim)),
        ),
        (
            "error looking up service account payments/sa: serviceaccount \"sa\" not found",
            Some((r("v1", "ServiceAccount", "sa"), Reason::MissingServiceAccount)),
        ),
        ("container has runAsNonRoot and image will run as root", None),
    ];
    for (message, want) in cases {
        assert_eq!(parse_missing(message, NS), want, "{message}");
    }
}

#[test]
fn reasons_are_camel_case_words() {
    let all = [
        Reason::MissingSecret,
        Reason::MissingConfigMap,
        Reason::MissingSecretKey,
        Reason::MissingConfigMapKey,
        Reason::MissingServiceAccount,
        Reason::MissingPersistentVolumeClaim,
        Reason::PersistentVolumeClaimPending,
        Reason::QuotaExceeded,
        Reason::AdmissionRefused,
        Reason::FailedCreate,
        Reason::ImagePullBackOff,
        Reason::InvalidImageName,
        Reason::CrashLoopBackOff,
        Reason::OomKilled,
        Reason::ContainerFailed,
        Reason::CreateContainerConfigError,
        Reason::Unschedulable,
        Reason::ReadinessProbeFailed,
        Reason::ContainersNotReady,
        Reason::Evicted,
        Reason::JobFailed,
        Reason::HookFailed,
        Reason::Degraded,
        Reason::Progressing,
    ];
    for reason in all {
        assert!(is_camel_case(reason.as_str()), "{reason}");
    }
    assert_eq!(Reason::OomKilled.as_str(), "OOMKilled");
    assert!(!is_camel_case("not camel"));
    assert!(!is_camel_case(""));
}

/// Objects whose controller has not acted on their current spec have nothing below them to
/// explain yet.
#[test]
fn objects_awaiting_their_controller_are_not_looked_into() {
    let rows = [
        (
            "generation ahead of the observed one",
            json!({"kind": "Deployment",
            "metadata": {"generation": 3}, "status": {"observedGeneration": 2}}),
            true,
        ),
        (
            "generation observed",
            json!({"kind": "Deployment",
            "metadata": {"generation": 3}, "status": {"observedGeneration": 3}}),
            false,
        ),
        (
            "a workload without status",
            json!({"kind": "StatefulSet",
            "metadata": {"generation": 1}}),
            true,
        ),
        (
            "a workload whose status has no observedGeneration",
            json!({"kind": "Job",
            "metadata": {"generation": 1}, "status": {"active": 1}}),
            false,
        ),
        (
            "a kind without a controller's status",
            json!({"kind": "Service",
            "metadata": {"name": "s"}}),
            false,
        ),
        (
            "a custom resource ahead",
            json!({"kind": "Widget",
            "metadata": {"generation": 2}, "status": {"observedGeneration": 1}}),
            true,
        ),
        (
            "a Pod",
            json!({"kind": "Pod", "metadata": {"name": "p"},
            "status": {"phase": "Pending"}}),
            false,
        ),
    ];
    for (row, object, expected) in rows {
        assert_eq!(awaits_its_controller(&object), expected, "{row}");
    }
}
