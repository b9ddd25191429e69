use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

use super::{CLOCK_MARGIN, Fence, HOLDS_FOR, expiry};

fn lease(holder: Option<&str>, renewed: Timestamp, seconds: i32) -> Lease {
    Lease {
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            renew_time: Some(MicroTime(renewed)),
            lease_duration_seconds: Some(seconds),
            ..LeaseSpec::default()
        }),
        ..Lease::default()
    }
}

fn wall(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap_or(Timestamp::UNIX_EPOCH)
}

#[test]
fn a_lease_expires_at_its_renewal_plus_its_duration_only_for_its_holder() {
    let held = lease(Some("me"), wall(0), 20);
    assert_eq!(expiry(Some(&held), "me"), Some(wall(20)));
    assert_eq!(expiry(Some(&held), "other"), None);
    assert_eq!(expiry(Some(&lease(None, wall(0), 20)), "me"), None);
    assert_eq!(expiry(None, "me"), None);
}

#[test]
fn a_replica_leads_only_while_the_manager_says_so_and_the_fence_stands() {
    let start = Instant::now();
    let mut fence = Fence::default();
    assert!(!fence.leads(true, start), "no renewal seen yet");
    fence.renewed(start);
    let lasts = HOLDS_FOR;
    assert!(fence.leads(true, start + lasts - Duration::from_millis(1)));
    assert!(!fence.leads(false, start), "the manager lost it");
    assert!(
        !fence.leads(true, start + lasts),
        "renewals failed since: the Lease may be another's by now"
    );
}

#[test]
fn a_read_of_the_lease_moves_the_fence_to_its_expiry_less_the_clock_margin() {
    let now = Instant::now();
    let mut fence = Fence::default();
    // Renewed 5 s ago for 20 s: 15 s left, less the margin.
    fence.confirm(Some(Some(wall(15))), wall(0), now);
    assert_eq!(
        fence.until,
        Some(now + Duration::from_secs(15).saturating_sub(CLOCK_MARGIN))
    );
}

#[test]
fn a_failed_read_leaves_the_fence_where_it_was() {
    let now = Instant::now();
    let mut fence = Fence::default();
    fence.renewed(now);
    let before = fence;
    fence.confirm(None, wall(0), now + Duration::from_secs(3));
    assert_eq!(fence, before);
}

#[test]
fn a_lease_found_to_be_anothers_or_expired_drops_the_fence_at_once() {
    let now = Instant::now();
    let mut fence = Fence::default();
    fence.renewed(now);
    fence.confirm(Some(None), wall(0), now);
    assert!(!fence.leads(true, now), "another holds the Lease");

    fence.renewed(now);
    let margin = SignedDuration::try_from(CLOCK_MARGIN).unwrap_or(SignedDuration::ZERO);
    let within_margin = wall(0).checked_add(margin).unwrap_or(wall(0));
    fence.confirm(Some(Some(within_margin)), wall(0), now);
    assert!(
        !fence.leads(true, now),
        "expiring within the clock margin counts as expired"
    );
}
