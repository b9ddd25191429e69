//! The cohort tree: which cohort lends to which, after the checks that span objects.
//!
//! Each `Cohort` object names its parent. A parent that does not exist, or a chain of
//! parents that leads back to where it started, is an error on the cohorts concerned; each
//! of them then acts as a root (its subtree keeps lending and borrowing within itself), so
//! a mistake in one part of the tree stops nothing else. An invalid cohort (see
//! [`Validate`]) acts as a root without quota of its own. Cohorts that ClusterQueues name but
//! no object defines are roots without quota, as flat cohorts always were.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use muster_api::{Cohort, CohortSpec, Validate};

/// One cohort of the tree.
#[derive(Clone, Debug, Default)]
pub(crate) struct CohortNode {
    /// Its spec when an object defines it and it is valid: its own quota and limits.
    pub(crate) spec: Option<Arc<CohortSpec>>,
    /// The cohort it lends to and borrows from, once checked.
    pub(crate) parent: Option<String>,
}

/// Every cohort Cohort objects define, checked, with what is wrong with each that is wrong.
#[derive(Clone, Debug, Default)]
pub struct CohortTree {
    pub(crate) nodes: BTreeMap<String, CohortNode>,
    /// Cohort → its first problem: the field, what is wrong and the fix.
    problems: BTreeMap<String, String>,
}

impl CohortTree {
    /// The tree the `cohorts` (name, spec) define.
    pub fn new(cohorts: impl IntoIterator<Item = (String, CohortSpec)>) -> CohortTree {
        let mut tree = CohortTree::default();
        for (name, spec) in cohorts {
            let errors = Cohort::new(&name, spec.clone()).validate();
            let node = match errors.first() {
                Some(e) => {
                    tree.problems.insert(
                        name.clone(),
                        format!("Cohort {name} is invalid: {}: {}", e.path, e.message),
                    );
                    CohortNode::default()
                }
                None => CohortNode {
                    parent: spec.parent.clone(),
                    spec: Some(Arc::new(spec)),
                },
            };
            tree.nodes.insert(name, node);
        }
        tree.cut_missing_parents();
        tree.cut_cycles();
        tree
    }

    /// A parent no Cohort object defines is an error: the cohort acts as a root.
    fn cut_missing_parents(&mut self) {
        let missing: Vec<(String, String)> = self
            .nodes
            .iter()
            .filter_map(|(name, node)| {
                let parent = node.parent.as_ref()?;
                (!self.nodes.contains_key(parent)).then(|| (name.clone(), parent.clone()))
            })
            .collect();
        for (name, parent) in missing {
            self.problems.insert(
                name.clone(),
                format!(
                    "Cohort {name}: spec.parent: cohort {parent} does not exist; create a Cohort named {parent}, or remove spec.parent"
                ),
            );
            if let Some(node) = self.nodes.get_mut(&name) {
                node.parent = None;
            }
        }
    }

    /// Every cohort on a chain of parents that leads back to itself is an error, and acts as
    /// a root; cohorts that lead into such a chain keep their parent.
    fn cut_cycles(&mut self) {
        let mut settled: BTreeSet<String> = BTreeSet::new();
        let mut cycles: Vec<Vec<String>> = Vec::new();
        for start in self.nodes.keys() {
            let mut path: Vec<&str> = Vec::new();
            let mut at = Some(start.as_str());
            while let Some(name) = at {
                if settled.contains(name) {
                    break;
                }
                if let Some(i) = path.iter().position(|p| *p == name) {
                    cycles.push(path[i..].iter().map(|s| (*s).to_owned()).collect());
                    break;
                }
                path.push(name);
                at = self.nodes.get(name).and_then(|n| n.parent.as_deref());
            }
            settled.extend(path.into_iter().map(str::to_owned));
        }
        for cycle in cycles {
            let mut shown: Vec<&str> = cycle.iter().map(String::as_str).collect();
            shown.push(&cycle[0]);
            let chain = shown.join(" → ");
            for name in &cycle {
                self.problems.insert(
                    name.clone(),
                    format!(
                        "Cohort {name}: spec.parent leads back to it ({chain}); remove one of these parents"
                    ),
                );
                if let Some(node) = self.nodes.get_mut(name) {
                    node.parent = None;
                }
            }
        }
    }

    /// What is wrong with cohort `name` (the field and the fix), if anything.
    pub fn problem(&self, name: &str) -> Option<&str> {
        self.problems.get(name).map(String::as_str)
    }

    /// Every cohort with a problem, by name.
    pub fn problems(&self) -> impl Iterator<Item = (&str, &str)> {
        self.problems.iter().map(|(n, p)| (n.as_str(), p.as_str()))
    }

    /// Whether a Cohort object defines `name`.
    pub fn defines(&self, name: &str) -> bool {
        self.nodes.contains_key(name)
    }

    /// The parent of cohort `name` once checked (`None`: a root, or not defined).
    pub fn parent(&self, name: &str) -> Option<&str> {
        self.nodes.get(name)?.parent.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::CohortTree;
    use muster_api::CohortSpec;

    fn child_of(parent: &str) -> CohortSpec {
        CohortSpec {
            parent: Some(parent.to_owned()),
            ..CohortSpec::default()
        }
    }

    #[test]
    fn parents_are_kept_when_they_exist_and_lead_to_a_root() {
        let tree = CohortTree::new([
            ("org".to_owned(), CohortSpec::default()),
            ("ml".to_owned(), child_of("org")),
            ("vision".to_owned(), child_of("ml")),
        ]);
        assert_eq!(tree.parent("vision"), Some("ml"));
        assert_eq!(tree.parent("ml"), Some("org"));
        assert_eq!(tree.parent("org"), None);
        assert_eq!(tree.problems().count(), 0);
    }

    #[test]
    fn a_missing_parent_is_named_with_the_fix_and_the_cohort_becomes_a_root() {
        let tree = CohortTree::new([
            ("ml".to_owned(), child_of("org")),
            ("vision".to_owned(), child_of("ml")),
        ]);
        assert_eq!(tree.parent("ml"), None);
        assert_eq!(tree.parent("vision"), Some("ml"));
        let why = tree.problem("ml").unwrap_or_default();
        assert!(
            why.contains("spec.parent") && why.contains("create a Cohort named org"),
            "{why}"
        );
        assert_eq!(tree.problem("vision"), None);
    }

    #[test]
    fn every_cohort_of_a_cycle_is_cut_and_told_the_chain_while_those_hanging_off_it_keep_their_parent()
     {
        let tree = CohortTree::new([
            ("a".to_owned(), child_of("b")),
            ("b".to_owned(), child_of("c")),
            ("c".to_owned(), child_of("a")),
            ("d".to_owned(), child_of("a")),
        ]);
        for name in ["a", "b", "c"] {
            assert_eq!(tree.parent(name), None, "{name}");
            let why = tree.problem(name).unwrap_or_default();
            assert!(why.contains("a → b → c → a"), "{why}");
        }
        assert_eq!(tree.parent("d"), Some("a"));
        assert_eq!(tree.problem("d"), None);
    }

    #[test]
    fn an_invalid_cohort_is_a_root_without_quota_and_says_which_field() {
        let tree = CohortTree::new([
            ("org".to_owned(), CohortSpec::default()),
            ("Bad_Name".to_owned(), child_of("org")),
            ("self".to_owned(), child_of("self")),
        ]);
        assert_eq!(tree.parent("Bad_Name"), None);
        assert!(
            tree.problem("Bad_Name")
                .is_some_and(|p| p.contains("metadata.name"))
        );
        assert!(
            tree.problem("self")
                .is_some_and(|p| p.contains("spec.parent") && p.contains("itself"))
        );
        assert!(tree.nodes.get("self").is_some_and(|n| n.spec.is_none()));
    }
}
