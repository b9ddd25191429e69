//! The provisioning state machine: from a job's provisioning record, what the autoscaler
//! reports, the queue's policy and the time, to the one thing to do next.
//!
//! Everything it needs is durable — the attempt count and request name live in the job's
//! status, the conditions on the request — so a controller that restarts mid-provisioning
//! takes the same step again. Repeated updates give the same step; conditions that arrive out
//! of order are read by precedence (a revoked or failed request stays so whatever else is
//! set).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use muster_api::ProvisioningRequest;
use muster_api::cluster_queue::{ProvisioningPolicy, RetryPolicy, RevokedPolicy};
use muster_api::provisioning_request::conditions;

/// What the autoscaler says about a job's request (or requests), reduced from conditions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// No such request: not created yet, or deleted.
    Missing,
    /// Not decided yet.
    Waiting {
        /// The autoscaler accepted it (it is queued for capacity).
        accepted: bool,
        /// The autoscaler's latest message.
        message: String,
    },
    /// The capacity exists and is booked for the job's pods.
    Provisioned {
        /// `provisioningClassDetails` (e.g. the node pool or reservation to select).
        details: BTreeMap<String, String>,
    },
    /// The autoscaler gave up.
    Failed {
        /// Its reason.
        reason: String,
        /// Its message.
        message: String,
    },
    /// The booking lapsed before the pods were scheduled.
    BookingExpired {
        /// Its message.
        message: String,
    },
    /// The capacity was taken back (e.g. the maximum run duration was reached).
    CapacityRevoked {
        /// Its message.
        message: String,
    },
}

fn condition<'a>(list: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    list.iter().find(|c| c.type_ == type_ && c.status == "True")
}

fn text(c: &Condition) -> String {
    if c.message.is_empty() {
        c.reason.clone()
    } else {
        c.message.clone()
    }
}

/// What one request's conditions say. Precedence, for conditions that arrive together or out
/// of order: CapacityRevoked, Failed, BookingExpired, Provisioned, Accepted.
pub fn observe(request: Option<&ProvisioningRequest>) -> Observed {
    let Some(request) = request else {
        return Observed::Missing;
    };
    let status = request.status.clone().unwrap_or_default();
    let list = &status.conditions;
    if let Some(c) = condition(list, conditions::CAPACITY_REVOKED) {
        return Observed::CapacityRevoked { message: text(c) };
    }
    if let Some(c) = condition(list, conditions::FAILED) {
        return Observed::Failed {
            reason: c.reason.clone(),
            message: text(c),
        };
    }
    if let Some(c) = condition(list, conditions::BOOKING_EXPIRED) {
        return Observed::BookingExpired { message: text(c) };
    }
    if condition(list, conditions::PROVISIONED).is_some() {
        return Observed::Provisioned {
            details: status.provisioning_class_details,
        };
    }
    let accepted = condition(list, conditions::ACCEPTED);
    // The latest word from the autoscaler, True or not (e.g. Provisioned=False with why).
    let message = list
        .iter()
        .max_by_key(|c| c.last_transition_time.0)
        .map(text)
        .unwrap_or_default();
    Observed::Waiting {
        accepted: accepted.is_some(),
        message,
    }
}

/// One observation for a job whose capacity was asked for in several requests (one per pod
/// set, as `queued-provisioning.gke.io` requires): the worst of them wins, and the job is
/// Provisioned only when every request is (with their details merged).
pub fn combine(observed: Vec<Observed>) -> Observed {
    let rank = |o: &Observed| match o {
        Observed::CapacityRevoked { .. } => 0,
        Observed::Failed { .. } => 1,
        Observed::Missing => 2,
        Observed::BookingExpired { .. } => 3,
        Observed::Waiting { .. } => 4,
        Observed::Provisioned { .. } => 5,
    };
    let mut details = BTreeMap::new();
    let mut worst: Option<Observed> = None;
    for o in observed {
        if let Observed::Provisioned { details: d } = &o {
            details.extend(d.clone());
        }
        if worst.as_ref().is_none_or(|w| rank(&o) < rank(w)) {
            worst = Some(o);
        }
    }
    match worst {
        None => Observed::Missing,
        Some(Observed::Provisioned { .. }) => Observed::Provisioned { details },
        Some(other) => other,
    }
}

/// A job's provisioning record (kept in its status).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// Requests created so far (the current one included).
    pub attempts: u32,
    /// Whether a request of the current attempt exists or was created (its name is in the
    /// job's status); false before the first and after a cleanup.
    pub requested: bool,
    /// When the next attempt may be made, seconds (after a failure).
    pub retry_at: Option<i64>,
    /// The gang has been released onto the provisioned capacity.
    pub released: bool,
    /// The job still wants the capacity: it holds quota while provisioning, or runs on it.
    /// False once it finished, was evicted or deleted.
    pub active: bool,
}

/// The one thing to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Nothing: waiting for a retry time, or running on the capacity.
    Nothing,
    /// Create the PodTemplates and request(s) of attempt `attempt`.
    Create {
        /// 1-based.
        attempt: u32,
    },
    /// Keep waiting; show the autoscaler's message in the job's status.
    Wait {
        /// What a person reads.
        message: String,
    },
    /// The capacity is ready: release the gang onto it, its pods also selecting these node
    /// labels (from `nodeSelectorFromDetails`).
    Admit {
        /// Extra node selector.
        node_selector: BTreeMap<String, String>,
    },
    /// Delete the request and templates; the next attempt may start at `at`.
    Retry {
        /// Seconds.
        at: i64,
        /// Why, for the job's status.
        reason: String,
    },
    /// Delete the request and templates; the job fails.
    Fail {
        /// Why, naming the autoscaler's reason.
        reason: String,
    },
    /// The running gang's capacity was taken back: evict it, delete the request, then queue
    /// the job again (`fail: false`) or fail it.
    Revoked {
        /// Fail rather than requeue.
        fail: bool,
        /// The autoscaler's message.
        message: String,
    },
    /// The job no longer needs the capacity: delete the request and templates.
    Delete,
}

/// The delay before attempt `attempts + 1`, after `attempts` failed: `base × 2^(attempts-1)`,
/// capped.
pub fn backoff(retry: Option<&RetryPolicy>, attempts: u32) -> i64 {
    let base = retry
        .and_then(|r| r.base_seconds)
        .unwrap_or(RetryPolicy::DEFAULT_BASE_SECONDS)
        .max(1);
    let max = retry
        .and_then(|r| r.max_seconds)
        .unwrap_or(RetryPolicy::DEFAULT_MAX_SECONDS)
        .max(base);
    let exponent = attempts.saturating_sub(1).min(30);
    base.saturating_mul(1i64 << exponent).min(max)
}

/// `retry.limit`, or its default.
pub fn retry_limit(retry: Option<&RetryPolicy>) -> i32 {
    retry
        .and_then(|r| r.limit)
        .unwrap_or(RetryPolicy::DEFAULT_LIMIT)
}

/// Whether a job that has made `attempts` requests may make no more: `retry.limit` bounds the
/// requests after the first, whatever became of them (failed, lapsed, or revoked after they
/// got capacity), so that a gang longer than the capacity's maximum run does not buy for ever.
pub fn out_of_requests(retry: Option<&RetryPolicy>, attempts: u32) -> bool {
    i64::from(attempts) > i64::from(retry_limit(retry))
}

/// What a job waiting on a request the autoscaler has not decided says.
pub fn waiting_message(accepted: bool, message: &str) -> String {
    match (accepted, message.is_empty()) {
        (true, true) => "queued by the autoscaler for capacity".to_owned(),
        (true, false) => format!("queued by the autoscaler: {message}"),
        (false, true) => "waiting for the autoscaler to accept the request".to_owned(),
        (false, false) => format!("waiting for the autoscaler: {message}"),
    }
}

/// Retry with backoff while attempts remain, else fail.
fn retry_or_fail(record: &Record, policy: &ProvisioningPolicy, now: i64, why: String) -> Next {
    let limit = retry_limit(policy.retry.as_ref());
    if out_of_requests(policy.retry.as_ref(), record.attempts) {
        Next::Fail {
            reason: format!(
                "{why}; gave up after {} attempts (retry.limit is {limit})",
                record.attempts
            ),
        }
    } else {
        Next::Retry {
            at: now.saturating_add(backoff(policy.retry.as_ref(), record.attempts)),
            reason: why,
        }
    }
}

/// The next step for a job with `record`, its request(s) `observed`, under `policy`, at
/// `now` (seconds).
pub fn step(record: &Record, observed: &Observed, policy: &ProvisioningPolicy, now: i64) -> Next {
    if !record.active {
        return if record.requested || *observed != Observed::Missing {
            Next::Delete
        } else {
            Next::Nothing
        };
    }
    if !record.requested {
        return match record.retry_at {
            Some(at) if at > now => Next::Nothing,
            _ => Next::Create {
                attempt: record.attempts + 1,
            },
        };
    }
    match observed {
        // Once the pods were released onto the capacity, the request has done its work: a
        // deletion, a spent booking or a late failure changes nothing (only a revocation does).
        Observed::Missing
        | Observed::Provisioned { .. }
        | Observed::Failed { .. }
        | Observed::BookingExpired { .. }
            if record.released =>
        {
            Next::Nothing
        }
        Observed::Missing => retry_or_fail(
            record,
            policy,
            now,
            "the ProvisioningRequest was deleted before its capacity was used".to_owned(),
        ),
        Observed::Waiting { accepted, message } => Next::Wait {
            message: waiting_message(*accepted, message),
        },
        Observed::Provisioned { details } => {
            let mut node_selector = BTreeMap::new();
            for (label, key) in &policy.node_selector_from_details {
                match details.get(key) {
                    Some(value) => {
                        node_selector.insert(label.clone(), value.clone());
                    }
                    None => {
                        return retry_or_fail(
                            record,
                            policy,
                            now,
                            format!(
                                "the autoscaler provisioned capacity but its provisioningClassDetails have no {key:?}, which nodeSelectorFromDetails needs for {label}"
                            ),
                        );
                    }
                }
            }
            Next::Admit { node_selector }
        }
        Observed::Failed { reason, message } => retry_or_fail(
            record,
            policy,
            now,
            format!("the autoscaler could not provide the capacity ({reason}): {message}"),
        ),
        Observed::BookingExpired { message } => retry_or_fail(
            record,
            policy,
            now,
            format!("the capacity's booking expired before every pod was scheduled: {message}"),
        ),
        Observed::CapacityRevoked { message } if record.released => Next::Revoked {
            fail: policy.on_capacity_revoked == RevokedPolicy::Fail,
            message: message.clone(),
        },
        Observed::CapacityRevoked { message } => retry_or_fail(
            record,
            policy,
            now,
            format!("the capacity was revoked before the gang started: {message}"),
        ),
    }
}
