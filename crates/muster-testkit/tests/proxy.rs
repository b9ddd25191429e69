//! The fault proxy against the kube-rs mock API server: without faults every request is
//! forwarded and answered as the server answered it; with every request faulty, clients see
//! the injected answers and the counts say which.

use std::time::Duration;

use http::{Request, Response};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use kube::client::Body;
use muster_testkit::proxy::{FaultPlan, FaultProxy};

/// A mock API server that answers every request with an empty pod list, counting them.
fn mock() -> (Client, tokio::task::JoinHandle<usize>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(async move {
        let mut seen = 0;
        while let Some((_request, respond)) = handle.next_request().await {
            seen += 1;
            let list = serde_json::json!({"apiVersion": "v1", "kind": "PodList",
                "metadata": {"resourceVersion": "1"}, "items": []});
            respond.send_response(
                Response::builder()
                    .status(200)
                    .body(Body::from(serde_json::to_vec(&list).unwrap_or_default()))
                    .unwrap_or_else(|_| Response::new(Body::from(Vec::new()))),
            );
        }
        seen
    });
    (Client::new(service, "default"), server)
}

fn through(proxy: &FaultProxy) -> Client {
    let config = kube::Config::new(
        format!("http://{}", proxy.addr())
            .parse()
            .unwrap_or_else(|e| unreachable!("{e}")),
    );
    match Client::try_from(config) {
        Ok(client) => client,
        Err(e) => unreachable!("a client of the proxy: {e}"),
    }
}

#[tokio::test]
async fn without_faults_every_request_is_forwarded() {
    let (upstream, _server) = mock();
    let proxy = match FaultProxy::start(upstream, FaultPlan::default()).await {
        Ok(p) => p,
        Err(e) => unreachable!("{e}"),
    };
    proxy.set_faults(false);
    let pods: Api<Pod> = Api::namespaced(through(&proxy), "team-a");
    for _ in 0..20 {
        let list = pods.list(&kube::api::ListParams::default()).await;
        assert!(list.is_ok(), "{list:?}");
    }
    assert_eq!(proxy.forwarded(), 20);
    assert!(proxy.faults().is_empty());
}

#[tokio::test]
async fn with_every_request_faulty_clients_see_the_injected_answers() {
    let (upstream, _server) = mock();
    let plan = FaultPlan {
        rate: 1.0,
        hold: Duration::from_millis(10),
        ..FaultPlan::default()
    };
    let proxy = match FaultProxy::start(upstream, plan).await {
        Ok(p) => p,
        Err(e) => unreachable!("{e}"),
    };
    let pods: Api<Pod> = Api::namespaced(through(&proxy), "team-a");
    let mut failed = 0;
    for _ in 0..20 {
        if pods.list(&kube::api::ListParams::default()).await.is_err() {
            failed += 1;
        }
    }
    assert_eq!(failed, 20, "every read fails one way or another");
    let faults = proxy.faults();
    // The client retries some answers (429, 5xx) itself: at least one fault per call.
    assert!(faults.values().sum::<u64>() >= 20, "{faults:?}");
    assert!(
        !faults.contains_key("conflict409"),
        "reads never get a 409: {faults:?}"
    );
    assert!(faults.len() >= 3, "several kinds drawn: {faults:?}");
    // Time-outs and answers lost after forwarding did reach the server.
    let after = faults.get("timeout").copied().unwrap_or(0)
        + faults.get("droppedAfterForwarding").copied().unwrap_or(0);
    assert_eq!(proxy.forwarded(), after, "{faults:?}");
}
