//! The provisioning state machine as a table: every condition the autoscaler can set, in
//! order, out of order and repeated; a deleted request; a controller that restarts
//! mid-provisioning (the same record and request give the same step).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use muster_api::ProvisioningRequest;
use muster_api::cluster_queue::{ProvisioningPolicy, RetryPolicy, RevokedPolicy};
use muster_provisioning::state::{Next, Observed, Record, backoff, combine, observe, step};
use rstest::rstest;

const NOW: i64 = 1_000;

/// A request whose conditions are `list` of (type, status, reason), set in that order one
/// second apart.
fn request(list: &[(&str, &str, &str)]) -> ProvisioningRequest {
    let mut r = ProvisioningRequest::default();
    let mut status = muster_api::ProvisioningRequestStatus::default();
    for (i, (type_, value, reason)) in list.iter().enumerate() {
        let seconds = i64::try_from(i).unwrap_or(0);
        status.conditions.push(Condition {
            type_: (*type_).to_owned(),
            status: (*value).to_owned(),
            reason: (*reason).to_owned(),
            message: format!("{type_} {value}"),
            observed_generation: None,
            last_transition_time: Time(Timestamp::from_second(seconds).unwrap_or_default()),
        });
    }
    status.provisioning_class_details = BTreeMap::from([("nodepool".into(), "dws-1".into())]);
    r.status = Some(status);
    r
}

fn policy() -> ProvisioningPolicy {
    ProvisioningPolicy {
        class_name: "queued-provisioning.gke.io".into(),
        retry: Some(RetryPolicy {
            limit: Some(2),
            base_seconds: Some(60),
            max_seconds: Some(100),
        }),
        ..ProvisioningPolicy::default()
    }
}

fn waiting(attempts: u32) -> Record {
    Record {
        attempts,
        requested: true,
        retry_at: None,
        released: false,
        active: true,
    }
}

fn running() -> Record {
    Record {
        released: true,
        ..waiting(1)
    }
}

fn kind(s: &Next) -> &'static str {
    match s {
        Next::Nothing => "nothing",
        Next::Create { .. } => "create",
        Next::Wait { .. } => "wait",
        Next::Admit { .. } => "admit",
        Next::Retry { .. } => "retry",
        Next::Fail { .. } => "fail",
        Next::Revoked { .. } => "revoked",
        Next::Delete => "delete",
    }
}

#[rstest]
// The autoscaler's path, one condition at a time.
#[case::no_conditions_yet(&[], waiting(1), "wait")]
#[case::accepted(&[("Accepted", "True", "Queued")], waiting(1), "wait")]
#[case::not_yet_provisioned(&[("Accepted", "True", "Queued"), ("Provisioned", "False", "Waiting")], waiting(1), "wait")]
#[case::provisioned(&[("Accepted", "True", "Queued"), ("Provisioned", "True", "Ready")], waiting(1), "admit")]
#[case::provisioned_and_released(&[("Provisioned", "True", "Ready")], running(), "nothing")]
// Out of order and repeated.
#[case::provisioned_before_accepted(&[("Provisioned", "True", "Ready"), ("Accepted", "True", "Queued")], waiting(1), "admit")]
#[case::provisioned_twice(&[("Provisioned", "True", "Ready"), ("Provisioned", "True", "Ready")], waiting(1), "admit")]
#[case::failed_after_provisioned(&[("Provisioned", "True", "Ready"), ("Failed", "True", "Stockout")], waiting(1), "retry")]
#[case::revoked_before_provisioned_arrives(&[("CapacityRevoked", "True", "MaxRunDuration"), ("Provisioned", "True", "Ready")], running(), "revoked")]
// Failures and retries: limit 2 allows attempts 1, 2 and 3.
#[case::failed_first_attempt(&[("Failed", "True", "Stockout")], waiting(1), "retry")]
#[case::failed_third_attempt(&[("Failed", "True", "Stockout")], waiting(3), "fail")]
#[case::booking_expired_before_pods(&[("Provisioned", "True", "Ready"), ("BookingExpired", "True", "Expired")], waiting(1), "retry")]
#[case::booking_expired_after_release(&[("Provisioned", "True", "Ready"), ("BookingExpired", "True", "Expired")], running(), "nothing")]
#[case::revoked_while_running(&[("Provisioned", "True", "Ready"), ("CapacityRevoked", "True", "MaxRunDuration")], running(), "revoked")]
#[case::revoked_before_release(&[("Provisioned", "True", "Ready"), ("CapacityRevoked", "True", "MaxRunDuration")], waiting(1), "retry")]
fn each_condition_sequence_has_one_next_step(
    #[case] conditions: &[(&str, &str, &str)],
    #[case] record: Record,
    #[case] expected: &str,
) {
    let observed = observe(Some(&request(conditions)));
    let next = step(&record, &observed, &policy(), NOW);
    assert_eq!(kind(&next), expected, "{observed:?} → {next:?}");
    // The same inputs again (a repeated update, or a controller that restarted and read the
    // same record and request) give the same step.
    assert_eq!(
        step(
            &record,
            &observe(Some(&request(conditions))),
            &policy(),
            NOW
        ),
        next
    );
}

#[test]
fn a_job_without_a_request_creates_the_next_attempt_once_its_backoff_is_over() {
    let mut record = Record {
        active: true,
        ..Record::default()
    };
    assert_eq!(
        step(&record, &Observed::Missing, &policy(), NOW),
        Next::Create { attempt: 1 }
    );
    record.attempts = 1;
    record.retry_at = Some(NOW + 60);
    assert_eq!(
        step(&record, &Observed::Missing, &policy(), NOW),
        Next::Nothing
    );
    assert_eq!(
        step(&record, &Observed::Missing, &policy(), NOW + 60),
        Next::Create { attempt: 2 }
    );
}

#[test]
fn a_deleted_request_is_retried_before_release_and_ignored_after() {
    let next = step(&waiting(1), &Observed::Missing, &policy(), NOW);
    assert!(
        matches!(&next, Next::Retry { at, reason } if *at == NOW + 60 && reason.contains("deleted")),
        "{next:?}"
    );
    assert_eq!(
        step(&running(), &Observed::Missing, &policy(), NOW),
        Next::Nothing
    );
}

#[test]
fn retries_back_off_exponentially_up_to_the_cap() {
    let p = policy();
    assert_eq!(backoff(p.retry.as_ref(), 1), 60);
    assert_eq!(backoff(p.retry.as_ref(), 2), 100, "120 capped at 100");
    assert_eq!(backoff(None, 1), RetryPolicy::DEFAULT_BASE_SECONDS);
    assert_eq!(backoff(None, 40), RetryPolicy::DEFAULT_MAX_SECONDS);
}

#[test]
fn a_failure_past_the_limit_names_the_autoscalers_reason() {
    let observed = observe(Some(&request(&[("Failed", "True", "Stockout")])));
    let Next::Fail { reason } = step(&waiting(3), &observed, &policy(), NOW) else {
        unreachable!()
    };
    assert!(
        reason.contains("Stockout") && reason.contains("3 attempts"),
        "{reason}"
    );
}

#[test]
fn revoked_capacity_fails_the_job_when_the_policy_says_so() {
    let observed = Observed::CapacityRevoked {
        message: "max run duration".into(),
    };
    let mut p = policy();
    assert!(matches!(
        step(&running(), &observed, &p, NOW),
        Next::Revoked { fail: false, .. }
    ));
    p.on_capacity_revoked = RevokedPolicy::Fail;
    assert!(matches!(
        step(&running(), &observed, &p, NOW),
        Next::Revoked { fail: true, .. }
    ));
}

#[test]
fn provisioned_capacity_gives_the_pods_node_selectors_from_the_details() {
    let mut p = policy();
    p.node_selector_from_details =
        BTreeMap::from([("cloud.google.com/gke-nodepool".into(), "nodepool".into())]);
    let observed = observe(Some(&request(&[("Provisioned", "True", "Ready")])));
    assert_eq!(
        step(&waiting(1), &observed, &p, NOW),
        Next::Admit {
            node_selector: BTreeMap::from([(
                "cloud.google.com/gke-nodepool".into(),
                "dws-1".into()
            )])
        }
    );
    // A detail the autoscaler did not report: retried, with why.
    p.node_selector_from_details =
        BTreeMap::from([("example.com/reservation".into(), "reservation".into())]);
    let next = step(&waiting(1), &observed, &p, NOW);
    assert!(
        matches!(&next, Next::Retry { reason, .. } if reason.contains("reservation")),
        "{next:?}"
    );
}

#[test]
fn the_autoscalers_message_reaches_the_job() {
    let observed = observe(Some(&request(&[
        ("Accepted", "True", "Queued"),
        ("Provisioned", "False", "CapacityNotAvailable"),
    ])));
    let Next::Wait { message } = step(&waiting(1), &observed, &policy(), NOW) else {
        unreachable!()
    };
    assert!(message.contains("Provisioned False"), "{message}");
}

#[test]
fn a_job_that_no_longer_needs_capacity_deletes_its_request() {
    let done = Record {
        active: false,
        ..running()
    };
    assert_eq!(
        step(
            &done,
            &Observed::Provisioned {
                details: BTreeMap::new()
            },
            &policy(),
            NOW
        ),
        Next::Delete
    );
    let idle = Record::default();
    assert_eq!(
        step(&idle, &Observed::Missing, &policy(), NOW),
        Next::Nothing
    );
}

#[test]
fn a_job_split_over_several_requests_starts_only_when_all_are_provisioned() {
    let ready = |pool: &str| Observed::Provisioned {
        details: BTreeMap::from([(format!("pool-{pool}"), pool.to_owned())]),
    };
    let waiting_one = Observed::Waiting {
        accepted: true,
        message: String::new(),
    };
    assert!(matches!(
        combine(vec![ready("a"), waiting_one.clone()]),
        Observed::Waiting { .. }
    ));
    assert_eq!(
        combine(vec![ready("a"), ready("b")]),
        Observed::Provisioned {
            details: BTreeMap::from([("pool-a".into(), "a".into()), ("pool-b".into(), "b".into())])
        }
    );
    let failed = Observed::Failed {
        reason: "Stockout".into(),
        message: String::new(),
    };
    assert_eq!(
        combine(vec![ready("a"), failed.clone(), waiting_one]),
        failed
    );
    assert_eq!(combine(Vec::new()), Observed::Missing);
}
