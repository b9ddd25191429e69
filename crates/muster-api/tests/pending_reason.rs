//! A pending reason's kind is named the same in metrics and logs as in the API.

use muster_api::gpujob::PendingReasonKind;

#[test]
fn every_kind_is_named_as_the_api_spells_it() {
    use PendingReasonKind::*;
    for kind in [
        NotYetScheduled,
        InvalidJob,
        UnknownQueue,
        QueueStopped,
        Suspended,
        QuotaShort,
        NoTopologyFit,
        BlockedByQueueHead,
        CapacityReserved,
        Provisioning,
        Backoff,
        NodeUnreachable,
    ] {
        let spelled = serde_json::to_value(kind).unwrap_or_default();
        assert_eq!(spelled.as_str(), Some(kind.as_str()), "{kind:?}");
        assert_eq!(format!("{kind:?}"), kind.as_str());
    }
}
