//! What the controller sends to release a gang, against the kube-rs mock API server: the
//! Service, every pod (gated), then every gate lifted — and a retry after an interrupted
//! release finishes it instead of failing on pods that already exist.

use std::collections::BTreeMap;

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use muster_admission::{Admitted, PodSetPlacement};
use muster_api::{GpuJob, ResourceFlavorSpec};
use muster_controller::executor::release;
use muster_controller::release::gang;

fn job() -> GpuJob {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "muster.dev/v1alpha1",
        "kind": "GpuJob",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "u-1"},
        "spec": {"queueName": "research", "podSets": [{
            "name": "workers", "count": 2,
            "template": {"spec": {"containers": [{"name": "main", "image": "trainer:1"}]}}
        }]}
    }))
    .unwrap_or_default()
}

fn the_gang() -> muster_controller::release::Gang {
    let admitted = Admitted {
        job: "team-a/train".into(),
        cluster_queue: "research".into(),
        pod_sets: vec![PodSetPlacement {
            name: "workers".into(),
            flavor: "h100".into(),
            domain: Vec::new(),
            nodes: vec!["n1".into(), "n2".into()],
        }],
        borrowing: false,
    };
    let flavors = BTreeMap::from([("h100".to_owned(), ResourceFlavorSpec::default())]);
    gang(&job(), &admitted, &flavors).unwrap_or_else(|e| unreachable!("{e}"))
}

/// Serves `expected` requests: records method, path and body, and answers each with its
/// body echoed (201/200), or with 409 AlreadyExists for the paths in `exists`.
async fn serve(
    mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
    expected: usize,
    exists: Vec<String>,
) -> Vec<(String, String, serde_json::Value)> {
    let mut seen = Vec::new();
    for _ in 0..expected {
        let Some((request, respond)) = handle.next_request().await else {
            break;
        };
        let method = request.method().to_string();
        let path = request.uri().path().to_owned();
        let bytes = request
            .into_body()
            .collect_bytes()
            .await
            .unwrap_or_default();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let name = body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let conflict = method == "POST" && exists.contains(&name);
        let (status, reply) = if conflict {
            (
                409,
                serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "AlreadyExists", "code": 409, "message": "already exists"}),
            )
        } else if method == "PATCH" {
            let pod = path.rsplit('/').next().unwrap_or_default().to_owned();
            (
                200,
                serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "namespace": "team-a"}}),
            )
        } else {
            (201, body.clone())
        };
        let response = Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(&reply).unwrap_or_default()))
            .unwrap_or_else(|_| Response::new(Body::from(Vec::new())));
        respond.send_response(response);
        seen.push((method, path, body));
    }
    seen
}

#[tokio::test]
async fn a_gang_is_created_whole_before_any_gate_opens() {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(serve(handle, 5, Vec::new()));
    let client = Client::new(service, "default");
    let result = release(&client, &the_gang()).await;
    assert!(result.is_ok(), "{result:?}");
    let seen = server.await.unwrap_or_default();
    let calls: Vec<(&str, &str)> = seen
        .iter()
        .map(|(m, p, _)| (m.as_str(), p.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            ("POST", "/api/v1/namespaces/team-a/services"),
            ("POST", "/api/v1/namespaces/team-a/pods"),
            ("POST", "/api/v1/namespaces/team-a/pods"),
            ("PATCH", "/api/v1/namespaces/team-a/pods/train-workers-0"),
            ("PATCH", "/api/v1/namespaces/team-a/pods/train-workers-1"),
        ]
    );
    // Pods are created gated, and the patches lift exactly Muster's gate.
    assert_eq!(
        seen[1].2["spec"]["schedulingGates"],
        serde_json::json!([{"name": "muster.dev/admission"}])
    );
    assert_eq!(
        seen[3].2,
        serde_json::json!({"spec": {"schedulingGates": []}})
    );
}

#[tokio::test]
async fn a_retry_after_an_interrupted_release_finishes_it() {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    // The Service and the first pod exist from the interrupted attempt.
    let server = tokio::spawn(serve(
        handle,
        5,
        vec!["train".into(), "train-workers-0".into()],
    ));
    let client = Client::new(service, "default");
    let result = release(&client, &the_gang()).await;
    assert!(result.is_ok(), "{result:?}");
    let seen = server.await.unwrap_or_default();
    assert_eq!(seen.iter().filter(|(m, _, _)| m == "PATCH").count(), 2);
}
