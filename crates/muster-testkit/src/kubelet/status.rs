//! The pod statuses a kubelet writes, as strategic merge patches of the status subresource
//! (conditions merge by type, so conditions other writers set survive).

use serde_json::{Value, json};

/// A container of a pod: its name and image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Container {
    pub(super) name: String,
    pub(super) image: String,
}

/// What a status patch needs to know about the pod.
pub(super) struct PodFacts<'a> {
    pub(super) uid: &'a str,
    pub(super) containers: &'a [Container],
    pub(super) init_containers: &'a [Container],
    /// When the pod started running (RFC 3339), as written in `startTime`.
    pub(super) started: &'a Value,
}

fn condition(type_: &str, status: bool, reason: Option<&str>, now: &Value) -> Value {
    let mut condition = json!({
        "type": type_,
        "status": if status { "True" } else { "False" },
        "lastProbeTime": null,
        "lastTransitionTime": now,
    });
    if let Some(reason) = reason {
        condition["reason"] = json!(reason);
    }
    condition
}

fn container_id(pod: &PodFacts<'_>, container: &Container) -> String {
    format!("fake://{}/{}", pod.uid, container.name)
}

/// One container's status: `state` is its `running` or `terminated` object.
fn container_status(
    pod: &PodFacts<'_>,
    container: &Container,
    ready: bool,
    started: bool,
    state: &Value,
) -> Value {
    json!({
        "name": container.name, "image": container.image,
        "imageID": format!("fake://{}", container.image),
        "containerID": container_id(pod, container), "ready": ready, "started": started,
        "restartCount": 0, "state": state,
    })
}

/// Init containers that ran and exited 0 as the pod started.
fn init_statuses(pod: &PodFacts<'_>) -> Vec<Value> {
    pod.init_containers
        .iter()
        .map(|c| {
            let state = json!({"terminated": {"exitCode": 0, "reason": "Completed",
                "startedAt": pod.started, "finishedAt": pod.started,
                "containerID": container_id(pod, c)}});
            container_status(pod, c, true, false, &state)
        })
        .collect()
}

/// Running: containers running (ready unless `never_ready`), a pod IP, the host IP, startTime.
pub(super) fn running(
    pod: &PodFacts<'_>,
    host_ip: &str,
    pod_ip: &str,
    ready: bool,
    now: &Value,
) -> Value {
    let containers: Vec<Value> = pod
        .containers
        .iter()
        .map(|c| {
            let state = json!({"running": {"startedAt": pod.started}});
            container_status(pod, c, ready, true, &state)
        })
        .collect();
    let not_ready = (!ready).then_some("ContainersNotReady");
    json!({"status": {
        "phase": "Running",
        "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
        "startTime": pod.started,
        "conditions": [
            condition("PodReadyToStartContainers", true, None, now),
            condition("Initialized", true, None, now),
            condition("ContainersReady", ready, not_ready, now),
            condition("Ready", ready, not_ready, now),
            condition("PodScheduled", true, None, now),
        ],
        "initContainerStatuses": init_statuses(pod),
        "containerStatuses": containers,
    }})
}

/// Finished: Succeeded when `exit_code` is 0, else Failed; every container terminated with it.
/// With `pod_reason` (e.g. `NodeLost`) the pod carries that reason and `message`.
pub(super) fn finished(
    pod: &PodFacts<'_>,
    exit_code: i32,
    pod_reason: Option<(&str, &str)>,
    now: &Value,
) -> Value {
    let succeeded = exit_code == 0 && pod_reason.is_none();
    let container_reason = match (pod_reason, succeeded) {
        (Some((reason, _)), _) => reason,
        (None, true) => "Completed",
        (None, false) => "Error",
    };
    let containers: Vec<Value> = pod
        .containers
        .iter()
        .map(|c| {
            let state = json!({"terminated": {"exitCode": exit_code,
                "reason": container_reason, "startedAt": pod.started, "finishedAt": now,
                "containerID": container_id(pod, c)}});
            container_status(pod, c, false, false, &state)
        })
        .collect();
    let ready_reason = if succeeded {
        "PodCompleted"
    } else {
        "PodFailed"
    };
    let mut status = json!({
        "phase": if succeeded { "Succeeded" } else { "Failed" },
        "conditions": [
            condition("PodReadyToStartContainers", false, None, now),
            condition("ContainersReady", false, Some(ready_reason), now),
            condition("Ready", false, Some(ready_reason), now),
        ],
        "containerStatuses": containers,
    });
    if let Some((reason, message)) = pod_reason {
        status["reason"] = json!(reason);
        status["message"] = json!(message);
    }
    json!({ "status": status })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(containers: &'a [Container], started: &'a Value) -> PodFacts<'a> {
        PodFacts {
            uid: "u1",
            containers,
            init_containers: &[],
            started,
        }
    }

    #[test]
    fn running_is_ready_unless_asked_not_to_be() {
        let containers = [Container {
            name: "main".into(),
            image: "pause".into(),
        }];
        let now = json!("2026-01-01T00:00:00Z");
        let patch = running(
            &facts(&containers, &now),
            "10.1.1.1",
            "100.64.0.1",
            true,
            &now,
        );
        assert_eq!(patch["status"]["phase"], "Running");
        assert_eq!(patch["status"]["conditions"][3]["type"], "Ready");
        assert_eq!(patch["status"]["conditions"][3]["status"], "True");
        assert_eq!(patch["status"]["containerStatuses"][0]["ready"], true);
        let patch = running(
            &facts(&containers, &now),
            "10.1.1.1",
            "100.64.0.1",
            false,
            &now,
        );
        assert_eq!(patch["status"]["conditions"][3]["status"], "False");
    }

    #[test]
    fn a_non_zero_exit_code_or_a_lost_node_fails_the_pod() {
        let containers = [Container {
            name: "main".into(),
            image: "pause".into(),
        }];
        let now = json!("2026-01-01T00:00:00Z");
        let pod = facts(&containers, &now);
        assert_eq!(
            finished(&pod, 0, None, &now)["status"]["phase"],
            "Succeeded"
        );
        let failed = finished(&pod, 3, None, &now);
        assert_eq!(failed["status"]["phase"], "Failed");
        assert_eq!(
            failed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            3
        );
        let lost = finished(&pod, 137, Some(("NodeLost", "gone")), &now);
        assert_eq!(lost["status"]["phase"], "Failed");
        assert_eq!(lost["status"]["reason"], "NodeLost");
    }
}
