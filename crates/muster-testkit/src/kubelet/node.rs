//! What the fake kubelet knows of each fake node: whether its kubelet runs and reports, and
//! its address.

use k8s_openapi::api::core::v1::Node;

/// A fake node as the kubelet sees it.
pub(super) struct NodeState {
    pub(super) reach: Reach,
    pub(super) ip: String,
}

/// What a node's Ready condition says about its kubelet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reach {
    /// Ready: it runs pods and reports.
    Ready,
    /// NotReady: it stopped, and says so (its pods are lost).
    Stopped,
    /// Unknown: it stopped reporting (a partition); its pods run on unseen.
    Partitioned,
}

impl Reach {
    pub(super) fn of(node: &Node) -> Reach {
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        match ready.map(|c| c.status.as_str()) {
            Some("True") => Reach::Ready,
            Some("Unknown") => Reach::Partitioned,
            _ => Reach::Stopped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Node, Reach};

    fn node(ready: Option<&str>) -> Node {
        let conditions: Vec<serde_json::Value> = ready
            .map(|status| serde_json::json!({"type": "Ready", "status": status}))
            .into_iter()
            .collect();
        serde_json::from_value(serde_json::json!({"metadata": {"name": "n"},
            "status": {"conditions": conditions}}))
        .unwrap_or_else(|e| unreachable!("fixture node: {e}"))
    }

    #[test]
    fn an_unknown_ready_condition_is_a_partition_not_a_stop() {
        assert_eq!(Reach::of(&node(Some("True"))), Reach::Ready);
        assert_eq!(Reach::of(&node(Some("False"))), Reach::Stopped);
        assert_eq!(Reach::of(&node(Some("Unknown"))), Reach::Partitioned);
        assert_eq!(Reach::of(&node(None)), Reach::Stopped);
    }
}
