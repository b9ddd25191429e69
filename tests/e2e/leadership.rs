//! Leader election on a faulty API server: a replica sets its Lease up even when the first
//! requests fail, and stops writing as soon as it can no longer renew — before a standby could
//! take the Lease over.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use muster_controller::leadership::{self, LeaseParams};
use muster_controller::metrics::ApiRequests;
use muster_testkit::proxy::{FaultPlan, FaultProxy};

use crate::support::{Env, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_survives_failing_set_up_and_falls_when_renewals_fail() {
    let Some(env) = Env::start(false).await else {
        return;
    };
    // Every request through the proxy fails until it is told otherwise.
    let plan = FaultPlan {
        rate: 1.0,
        hold: Duration::from_secs(1),
        ..FaultPlan::default()
    };
    let proxy = match FaultProxy::start(env.client.clone(), plan).await {
        Ok(proxy) => proxy,
        Err(e) => unreachable!("starting the fault proxy: {e:#}"),
    };
    let url = format!("http://{}", proxy.addr());
    let config = kube::Config::new(url.parse().unwrap_or_else(|e| unreachable!("{e}")));
    let client = match ApiRequests::default().client(config) {
        Ok(client) => client,
        Err(e) => unreachable!("a client through the proxy: {e}"),
    };
    let params = LeaseParams {
        namespace: "default".to_owned(),
        name: "faulty".to_owned(),
        identity: "replica-under-test".to_owned(),
    };
    let (leader, task) = leadership::start(client, params);

    // Setting the Lease up fails for a while; the replica keeps trying instead of giving up.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!*leader.borrow(), "nothing could be written yet");
    assert!(!task.is_finished(), "gave up on the first failed requests");
    proxy.set_faults(false);
    eventually("the replica leads once requests go through", 90, || async {
        (*leader.borrow()).then_some(())
    })
    .await;
    let leases: kube::Api<Lease> = env.api("default");
    assert_eq!(holder(&leases).await.as_deref(), Some("replica-under-test"));

    // Renewals fail from now on. The lease manager alone keeps saying it leads while it cannot
    // reach the API server; the fence says otherwise once the Lease could have expired.
    proxy.set_faults(true);
    eventually(
        "the replica stops leading when it cannot renew",
        90,
        || async { (!*leader.borrow()).then_some(()) },
    )
    .await;

    // Requests go through again: it takes its Lease back (no one else wanted it).
    proxy.set_faults(false);
    eventually("the replica leads again", 90, || async {
        (*leader.borrow()).then_some(())
    })
    .await;
    drop(leader);
    let released = tokio::time::timeout(Duration::from_secs(30), task).await;
    assert!(
        released.is_ok(),
        "the Lease was not given up once unwatched"
    );
    assert_eq!(
        holder(&leases).await,
        None,
        "given up for a standby to take at once"
    );
}

/// Who holds the test's Lease, as the API server has it.
async fn holder(leases: &kube::Api<Lease>) -> Option<String> {
    leases
        .get_opt("faulty")
        .await
        .ok()
        .flatten()
        .and_then(|lease| lease.spec?.holder_identity)
}
