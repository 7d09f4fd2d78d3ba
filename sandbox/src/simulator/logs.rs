//! `pods/log` for simulated containers: what `kubectl logs [--previous]` prints, and the errors
//! the kubelet gives for containers that have not started. Pure: the pod object in, text out.

use serde_json::Value;

use crate::status::ApiError;

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// The log of `container` (or the pod's only container) of `pod`; `previous` asks for the last
/// terminated instance, as `kubectl logs --previous` does.
pub fn pod_log(pod: &Value, container: Option<&str>, previous: bool) -> Result<String, ApiError> {
    let name = text(pod, "/metadata/name");
    let containers: Vec<&Value> =
        pod.pointer("/spec/containers").and_then(Value::as_array).into_iter().flatten().collect();
    let c = match container {
        Some(want) => containers.iter().find(|c| c["name"] == want).copied().ok_or_else(|| {
            ApiError::bad_request(format!("container {want} is not valid for pod {name}"))
        })?,
        None if containers.len() == 1 => containers[0],
        None => {
            let names: Vec<&str> = containers.iter().filter_map(|c| c["name"].as_str()).collect();
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                names.join(" ")
            )));
        }
    };
    let cname = text(c, "/name");
    let image = text(c, "/image");
    let status = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|x| x["name"] == cname))
        .cloned()
        .unwrap_or(Value::Null);
    let crashed = |exit: &Value| {
        format!("starting {image}\nsimulated crash (KSYNC_SIMULATE=crash): exit code {exit}\n")
    };
    if previous {
        return match status.pointer("/lastState/terminated") {
            Some(terminated) => Ok(crashed(&terminated["exitCode"])),
            None => Err(ApiError::bad_request(format!(
                "previous terminated container \"{cname}\" in pod \"{name}\" not found"
            ))),
        };
    }
    if let Some(reason) = status.pointer("/state/waiting/reason").and_then(Value::as_str) {
        if reason == "CrashLoopBackOff" {
            let exit =
                status.pointer("/lastState/terminated/exitCode").cloned().unwrap_or(Value::Null);
            return Ok(crashed(&exit));
        }
        return Err(ApiError::bad_request(format!(
            "container \"{cname}\" in pod \"{name}\" is waiting to start: {reason}"
        )));
    }
    if let Some(terminated) = status.pointer("/state/terminated") {
        let exit = terminated["exitCode"].as_i64().unwrap_or_default();
        return Ok(if exit == 0 {
            format!("starting {image}\n")
        } else {
            crashed(&terminated["exitCode"])
        });
    }
    if status.pointer("/state/running").is_none() {
        return Err(ApiError::bad_request(format!(
            "container \"{cname}\" in pod \"{name}\" is waiting to start: ContainerCreating"
        )));
    }
    Ok(format!("starting {image}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: &[&str], statuses: Value) -> Value {
        let specs: Vec<Value> =
            containers.iter().map(|n| json!({"name": n, "image": format!("{n}:1")})).collect();
        json!({"metadata": {"name": "p"}, "spec": {"containers": specs},
               "status": {"containerStatuses": statuses}})
    }

    #[test]
    fn logs_follow_the_container_state() {
        let running = pod(&["app"], json!([{"name": "app", "state": {"running": {}}}]));
        let crashing = pod(
            &["app"],
            json!([{"name": "app", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"exitCode": 1}}}]),
        );
        let pulling = pod(
            &["app"],
            json!([{"name": "app", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]),
        );
        let creating = pod(&["app"], json!([]));
        let two = pod(&["a", "b"], json!([]));
        let ok =
            |p: &Value, c: Option<&str>, prev: bool| pod_log(p, c, prev).map_err(|e| e.message);
        assert_eq!(ok(&running, None, false), Ok("starting app:1\n".into()));
        assert!(ok(&crashing, None, false).is_ok_and(|t| t.contains("exit code 1")));
        assert!(ok(&crashing, None, true).is_ok_and(|t| t.contains("simulated crash")));
        assert_eq!(
            ok(&running, None, true),
            Err("previous terminated container \"app\" in pod \"p\" not found".into())
        );
        assert_eq!(
            ok(&pulling, None, false),
            Err("container \"app\" in pod \"p\" is waiting to start: ImagePullBackOff".into())
        );
        assert_eq!(
            ok(&creating, None, false),
            Err("container \"app\" in pod \"p\" is waiting to start: ContainerCreating".into())
        );
        assert_eq!(
            ok(&two, None, false),
            Err("a container name must be specified for pod p, choose one of: [a b]".into())
        );
        assert_eq!(ok(&two, Some("c"), false), Err("container c is not valid for pod p".into()));
    }
}
