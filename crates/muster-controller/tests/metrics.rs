//! The metrics a pass reports, in OpenMetrics text.

mod support;

use muster_controller::metrics::Metrics;
use muster_controller::plan::plan;
use support::{at, cluster, job};

#[test]
fn a_pass_reports_admissions_pending_jobs_and_quota_usage() {
    // Quota for one 2-pod gang: a is admitted, b waits on quota.
    let mut index = cluster(16, vec![job("a", 2, 0), job("b", 2, 5)]);
    let pass = plan(&mut index, at(65));
    let metrics = Metrics::new();
    metrics.observe(&pass.summary, 0.25);
    metrics.action("release", true);
    metrics.action("job_status", false);
    let text = metrics.encode();
    for line in [
        "muster_admission_attempts_total{result=\"admitted\"} 1",
        "muster_admission_attempts_total{result=\"pending\"} 1",
        "muster_pending_jobs{cluster_queue=\"research\",reason=\"QuotaShort\"} 1",
        "muster_quota_usage{cluster_queue=\"research\",flavor=\"h100\",resource=\"nvidia.com/gpu\"} 16.0",
        "muster_time_to_admission_seconds_count 1",
        "muster_cycle_duration_seconds_count 1",
        "muster_jobs_settled_total 2",
        "muster_actions_total{kind=\"release\",result=\"ok\"} 1",
        "muster_api_errors_total{action=\"job_status\"} 1",
        "# EOF",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

/// Every request the controller's client sends is counted by method, whether or not the API
/// server answers (here nothing listens).
#[tokio::test]
async fn the_client_counts_every_request_it_sends() {
    use muster_controller::metrics::ApiRequests;
    let requests = ApiRequests::default();
    let Ok(url) = "http://127.0.0.1:9".parse::<http::Uri>() else {
        unreachable!()
    };
    let client = match requests.client(kube::Config::new(url)) {
        Ok(c) => c,
        Err(e) => unreachable!("{e}"),
    };
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, "a");
    let _ = pods.get("p").await;
    let _ = pods.delete("p", &kube::api::DeleteParams::default()).await;
    let _ = pods.get("q").await;
    assert_eq!((requests.get("GET"), requests.get("DELETE")), (2, 1));
    let metrics = Metrics::counting(requests);
    let text = metrics.encode();
    assert!(
        text.contains("muster_api_requests_total{method=\"GET\"} 2"),
        "{text}"
    );
}
