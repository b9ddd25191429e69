//! Which namespaces may submit to a ClusterQueue: its `namespaceSelector` against the labels of
//! the LocalQueue's namespace.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `selector` admits a namespace with `labels`. Absent: no namespace (as in Kueue);
/// empty: every namespace. Requirements are ANDed; unknown operators match nothing.
pub fn selects(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(selector) = selector else {
        return false;
    };
    let labels_match = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions_match = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_match && expressions_match
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn absent_admits_none_and_empty_admits_all() {
        assert!(!selects(None, &labels(&[])));
        assert!(selects(Some(&LabelSelector::default()), &labels(&[])));
    }

    #[test]
    fn labels_and_expressions_must_all_hold() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("team", "a")])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: Some(vec!["batch".into()]),
            }]),
        };
        assert!(selects(Some(&selector), &labels(&[("team", "a")])));
        assert!(!selects(
            Some(&selector),
            &labels(&[("team", "a"), ("tier", "batch")])
        ));
        assert!(!selects(Some(&selector), &labels(&[("team", "b")])));
    }
}
