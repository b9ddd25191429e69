//! The controller's client sends each request once: retries are the executor's, made only
//! while this replica holds the Lease, never a layer below it.

use muster_controller::metrics::ApiRequests;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[tokio::test]
async fn a_503_is_answered_to_the_caller_not_retried_below_the_lease_check() {
    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
        Ok(l) => l,
        Err(e) => unreachable!("binding: {e}"),
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    // Answers every request 503 and counts them.
    let server = tokio::spawn(async move {
        let mut seen = 0u32;
        loop {
            let accepted =
                tokio::time::timeout(std::time::Duration::from_secs(3), listener.accept()).await;
            let Ok(Ok((mut stream, _))) = accepted else {
                return seen;
            };
            let mut buffer = vec![0u8; 8192];
            let _ = stream.read(&mut buffer).await;
            seen += 1;
            let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"ServiceUnavailable","code":503}"#;
            let answer = format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
    let config = kube::Config::new(
        format!("http://127.0.0.1:{port}")
            .parse()
            .unwrap_or_else(|e| unreachable!("{e}")),
    );
    let client = match ApiRequests::default().client(config) {
        Ok(c) => c,
        Err(e) => unreachable!("a client: {e}"),
    };
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, "a");
    let answer = pods.get_opt("p").await;
    assert!(answer.is_err(), "{answer:?}");
    assert_eq!(
        server.await.unwrap_or_default(),
        1,
        "sent once, not retried"
    );
}
