//! Gangs split across domains: a pod set that requires a topology level
//! (`spec.podSets[].topology.required`, a node label key) must have every pod of one attempt
//! on nodes with one value of that label. Pods of one attempt bound to nodes in two domains of
//! it — or to a node without the label — break the promise
//! ([`super::ViolationKind::SplitAcrossDomains`]).
//!
//! Judged as the facts come in, in whatever order: the job's spec, the pods' bindings and the
//! nodes' labels; a pod whose job or node is not known yet is judged once it is. A pod whose
//! object is gone no longer counts: a release rolled back and made again elsewhere reuses the
//! attempt and the pod names, and its two sets of pods never existed together.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One pod set of one attempt of a job: (job, attempt, pod set).
type Gang = (String, String, String);

/// A pod set found split.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Split {
    /// The job, `namespace/name`.
    pub(super) job: String,
    /// The domains and their pods.
    pub(super) detail: String,
}

/// What a node shows when it lacks the level's label.
const NO_DOMAIN: &str = "(no label)";

/// The facts the judgement needs, and what was reported.
#[derive(Debug, Default)]
pub(super) struct Domains {
    /// Job → pod set → the level (node label key) its pods must share.
    required: HashMap<String, BTreeMap<String, String>>,
    /// Node → its labels.
    labels: HashMap<String, BTreeMap<String, String>>,
    /// Each pod set of each attempt → its pods bound so far, with their nodes.
    bound: HashMap<Gang, BTreeMap<String, String>>,
    reported: BTreeSet<Gang>,
}

impl Domains {
    /// Job `job`'s pod sets and the level each requires (pod sets without one left out).
    pub(super) fn job(&mut self, job: &str, required: BTreeMap<String, String>) -> Vec<Split> {
        if self.required.get(job) == Some(&required) {
            return Vec::new();
        }
        self.required.insert(job.to_owned(), required);
        let gangs: Vec<Gang> = self.bound.keys().filter(|g| g.0 == job).cloned().collect();
        gangs.into_iter().filter_map(|g| self.judge(g)).collect()
    }

    /// Node `name` has `labels`.
    pub(super) fn node(&mut self, name: &str, labels: &BTreeMap<String, String>) -> Vec<Split> {
        if self.labels.get(name) == Some(labels) {
            return Vec::new();
        }
        self.labels.insert(name.to_owned(), labels.clone());
        let gangs: Vec<Gang> = self
            .bound
            .iter()
            .filter(|(_, pods)| pods.values().any(|n| n == name))
            .map(|(g, _)| g.clone())
            .collect();
        gangs.into_iter().filter_map(|g| self.judge(g)).collect()
    }

    /// Pod `pod` of pod set `pod_set`, attempt `attempt` of `job`, is bound to `node`.
    pub(super) fn pod(
        &mut self,
        job: &str,
        attempt: &str,
        pod_set: &str,
        pod: &str,
        node: &str,
    ) -> Option<Split> {
        let gang = (job.to_owned(), attempt.to_owned(), pod_set.to_owned());
        let pods = self.bound.entry(gang.clone()).or_default();
        if pods.get(pod).map(String::as_str) == Some(node) {
            return None;
        }
        pods.insert(pod.to_owned(), node.to_owned());
        self.judge(gang)
    }

    /// Pod `pod` of pod set `pod_set`, attempt `attempt` of `job`, is gone: its binding no
    /// longer counts. An attempt whose release was rolled back (its pods deleted) may be
    /// released again elsewhere under the same attempt and the same pod names; only pods that
    /// exist together can split a gang.
    pub(super) fn gone(&mut self, job: &str, attempt: &str, pod_set: &str, pod: &str) {
        let gang = (job.to_owned(), attempt.to_owned(), pod_set.to_owned());
        if let Some(pods) = self.bound.get_mut(&gang) {
            pods.remove(pod);
            if pods.is_empty() {
                self.bound.remove(&gang);
            }
        }
    }

    fn judge(&mut self, gang: Gang) -> Option<Split> {
        if self.reported.contains(&gang) {
            return None;
        }
        let required = self.required.get(&gang.0)?;
        // A pod without a pod set label belongs to the job's only pod set, if it has one.
        let level = match required.get(&gang.2) {
            Some(level) => level,
            None if gang.2.is_empty() && required.len() == 1 => required.values().next()?,
            None => return None,
        };
        let mut domains: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (pod, node) in self.bound.get(&gang)? {
            let Some(labels) = self.labels.get(node) else {
                continue;
            };
            let domain = labels.get(level).map_or(NO_DOMAIN, String::as_str);
            let name = pod.rsplit('/').next().unwrap_or(pod);
            domains.entry(domain).or_default().push(name);
        }
        if domains.len() < 2 && !domains.contains_key(NO_DOMAIN) {
            return None;
        }
        let list: Vec<String> = domains
            .iter()
            .map(|(domain, pods)| format!("{domain} ({})", pods.join(", ")))
            .collect();
        let detail = format!(
            "attempt {}, pod set {:?} requires one {level}: its pods are bound in {}",
            gang.1,
            gang.2,
            list.join(", ")
        );
        self.reported.insert(gang.clone());
        Some(Split {
            job: gang.0,
            detail,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::Domains;

    fn labels(block: Option<&str>) -> BTreeMap<String, String> {
        block
            .map(|b| ("block".to_owned(), b.to_owned()))
            .into_iter()
            .collect()
    }

    fn required() -> BTreeMap<String, String> {
        BTreeMap::from([("w".to_owned(), "block".to_owned())])
    }

    #[test]
    fn pods_of_one_attempt_in_two_domains_of_a_required_level_are_reported_once() {
        let mut domains = Domains::default();
        assert_eq!(domains.job("ns/j", required()), []);
        assert_eq!(domains.node("n1", &labels(Some("b1"))), []);
        assert_eq!(domains.node("n2", &labels(Some("b1"))), []);
        assert_eq!(domains.node("n3", &labels(Some("b2"))), []);
        assert_eq!(domains.pod("ns/j", "0", "w", "ns/p0", "n1"), None);
        assert_eq!(domains.pod("ns/j", "0", "w", "ns/p1", "n2"), None);
        let split = domains.pod("ns/j", "0", "w", "ns/p2", "n3");
        assert!(
            split
                .as_ref()
                .is_some_and(|s| s.job == "ns/j" && s.detail.contains("b1 (p0, p1), b2 (p2)")),
            "{split:?}"
        );
        assert_eq!(domains.pod("ns/j", "0", "w", "ns/p3", "n3"), None);
        // Another attempt may land in another domain.
        assert_eq!(domains.pod("ns/j", "1", "w", "ns/q0", "n3"), None);
        assert_eq!(domains.pod("ns/j", "1", "w", "ns/q1", "n3"), None);
    }

    #[test]
    fn facts_in_any_order_are_judged_once_all_are_in() {
        let mut domains = Domains::default();
        assert_eq!(domains.pod("ns/j", "0", "w", "ns/p0", "n1"), None);
        assert_eq!(domains.pod("ns/j", "0", "w", "ns/p1", "n2"), None);
        assert_eq!(domains.node("n1", &labels(Some("b1"))), []);
        assert_eq!(domains.job("ns/j", required()), []);
        // The last node seen has no value for the level: outside any domain of it.
        let split = domains.node("n2", &labels(None));
        assert_eq!(split.len(), 1, "{split:?}");
        assert!(split[0].detail.contains("(no label) (p1)"), "{split:?}");
    }

    #[test]
    fn a_pod_set_without_a_required_level_is_not_judged() {
        let mut domains = Domains::default();
        assert_eq!(domains.job("ns/j", BTreeMap::new()), []);
        assert_eq!(domains.node("n1", &labels(Some("b1"))), []);
        assert_eq!(domains.node("n3", &labels(Some("b2"))), []);
        assert_eq!(domains.pod("ns/j", "0", "w", "ns/p0", "n1"), None);
        assert_eq!(domains.pod("ns/j", "0", "w", "ns/p1", "n3"), None);
    }
}
