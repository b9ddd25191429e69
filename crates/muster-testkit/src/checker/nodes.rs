//! Nodes: which exist and which are out of service. A pod bound to a node that is gone, or
//! tainted out-of-service, is lost, not live — the machine that would run it is gone — and
//! no longer counts against quota or as a running attempt.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;

use super::Checker;
use super::facts::{NodeFact, node_fact};

impl Checker {
    /// The nodes that exist now (a whole list): pods bound to any other node, or to one
    /// tainted out-of-service, are lost, not live — the machine that would run them is gone.
    pub fn nodes_listed(&mut self, nodes: &[Node]) {
        let facts: BTreeMap<String, NodeFact> = nodes.iter().filter_map(node_fact).collect();
        for (name, fact) in &facts {
            let split = self.domains.node(name, &fact.labels);
            self.report_splits(split);
        }
        self.nodes = Some(facts);
        let lost: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| p.live && !self.node_holds(p.node.as_deref()))
            .map(|(k, _)| k.clone())
            .collect();
        for key in lost {
            self.lose(&key);
        }
    }

    /// A node was created or changed: once tainted out-of-service, the pods bound to it are
    /// lost.
    pub fn node_seen(&mut self, node: &Node) {
        let Some((name, fact)) = node_fact(node) else {
            return;
        };
        let split = self.domains.node(&name, &fact.labels);
        self.report_splits(split);
        let out_of_service = fact.out_of_service;
        if let Some(nodes) = self.nodes.as_mut() {
            nodes.insert(name.clone(), fact);
        }
        if out_of_service {
            self.lose_on(&name);
        }
    }

    /// A node was deleted: the pods bound to it are lost.
    pub fn node_gone(&mut self, name: &str) {
        if let Some(nodes) = self.nodes.as_mut() {
            nodes.remove(name);
        }
        self.lose_on(name);
    }

    /// The live pods bound to node `name` are lost.
    pub(super) fn lose_on(&mut self, name: &str) {
        let lost: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| p.live && p.node.as_deref() == Some(name))
            .map(|(k, _)| k.clone())
            .collect();
        for key in lost {
            self.lose(&key);
        }
    }

    /// Whether a pod bound to `node` may still run there: the node exists and is not out of
    /// service (known only once the first list of nodes is in).
    pub(super) fn node_holds(&self, node: Option<&str>) -> bool {
        match (node, &self.nodes) {
            (Some(name), Some(nodes)) => nodes.get(name).is_some_and(|n| !n.out_of_service),
            _ => true,
        }
    }

    /// Pod `key` no longer counts as live (its node is gone).
    pub(super) fn lose(&mut self, key: &str) {
        let Some(before) = self.pods.get(key).cloned() else {
            return;
        };
        self.unlive(&before, true);
        if let Some(fact) = self.pods.get_mut(key) {
            fact.live = false;
        }
        self.check_release(&before.job, &before.attempt, self.latest);
    }
}
