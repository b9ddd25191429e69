//! Validation of the admin objects: ClusterQueue, Cohort, LocalQueue, ResourceFlavor.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::{Errors, FieldError, NameRule, Validate, at};
use crate::cluster_queue::{ClusterQueue, ProvisioningPolicy, ResourceGroup, RetryPolicy};
use crate::cohort::Cohort;
use crate::local_queue::LocalQueue;
use crate::quantity::Amount;
use crate::resource_flavor::{HOSTNAME_LABEL, ResourceFlavor};

impl Validate for ClusterQueue {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        e.object_name(&self.metadata, NameRule::Subdomain);
        let spec = &self.spec;
        if let Some(cohort) = &spec.cohort {
            e.name("spec.cohort", cohort, NameRule::Subdomain);
        }
        if let Some(selector) = &spec.namespace_selector {
            label_selector(&mut e, "spec.namespaceSelector", selector);
        }
        resource_groups(
            &mut e,
            &spec.resource_groups,
            Owner::Queue {
                in_cohort: spec.cohort.is_some(),
            },
        );
        if let Some(weight) = spec.fair_sharing.as_ref().and_then(|f| f.weight.as_ref()) {
            quantity(&mut e, "spec.fairSharing.weight", weight);
        }
        if let Some(p) = &spec.provisioning {
            provisioning(&mut e, "spec.provisioning", p);
        }
        if let Some(wait) = spec
            .preemption
            .as_ref()
            .and_then(|p| p.max_wait_when_cheaper_seconds)
            .filter(|w| *w < 0)
        {
            e.push(
                "spec.preemption.maxWaitWhenCheaperSeconds",
                format!("{wait} is negative; use 0 to evict without waiting, or set waitWhenCheaper to false"),
            );
        }
        e.into_vec()
    }
}

impl Validate for Cohort {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        e.object_name(&self.metadata, NameRule::Subdomain);
        let spec = &self.spec;
        if let Some(parent) = &spec.parent {
            e.name("spec.parent", parent, NameRule::Subdomain);
            if self.metadata.name.as_deref() == Some(parent.as_str()) {
                e.push(
                    "spec.parent",
                    "names the cohort itself; name another cohort, or remove spec.parent to make it a root",
                );
            }
        }
        resource_groups(
            &mut e,
            &spec.resource_groups,
            Owner::Cohort {
                has_parent: spec.parent.is_some(),
            },
        );
        if let Some(weight) = spec.fair_sharing.as_ref().and_then(|f| f.weight.as_ref()) {
            quantity(&mut e, "spec.fairSharing.weight", weight);
        }
        e.into_vec()
    }
}

/// Whose resource groups are checked: the limits mean different things.
#[derive(Clone, Copy)]
enum Owner {
    /// A ClusterQueue: it lends at most its nominal quota, and only within a cohort.
    Queue { in_cohort: bool },
    /// A Cohort: it lends what its subtree has (so more than its own quota), and only to a
    /// parent.
    Cohort { has_parent: bool },
}

impl Owner {
    /// The error for a borrowing or lending limit with nobody to borrow from or lend to
    /// (`what`: "borrow" or "lend"; `field`: the limit's name).
    fn unlinked(self, what: &str, field: &str) -> Option<String> {
        match self {
            Owner::Queue { in_cohort: false } => Some(format!(
                "only a queue in a cohort can {what}; set spec.cohort or remove {field}"
            )),
            Owner::Cohort { has_parent: false } => Some(format!(
                "only a cohort with a parent can {what}; set spec.parent or remove {field}"
            )),
            _ => None,
        }
    }
}

fn resource_groups(e: &mut Errors, groups: &[ResourceGroup], owner: Owner) {
    let mut resources_seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut flavors_seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (g, group) in groups.iter().enumerate() {
        let gpath = at("spec", "resourceGroups", g);
        if group.covered_resources.is_empty() {
            e.push(
                format!("{gpath}.coveredResources"),
                "list the resources this group covers",
            );
        }
        for (r, res) in group.covered_resources.iter().enumerate() {
            let rpath = format!("{gpath}.coveredResources[{r}]");
            e.qualified_name(&rpath, res);
            if let Some(other) = resources_seen.insert(res, g) {
                e.push(
                    rpath,
                    format!("{res:?} is already covered by resourceGroups[{other}]; a resource belongs to one group"),
                );
            }
        }
        if group.flavors.is_empty() {
            e.push(
                format!("{gpath}.flavors"),
                "list at least one flavor with quota",
            );
        }
        for (f, flavor) in group.flavors.iter().enumerate() {
            let fpath = at(&gpath, "flavors", f);
            e.name(&format!("{fpath}.name"), &flavor.name, NameRule::Subdomain);
            if let Some(other) = flavors_seen.insert(&flavor.name, g) {
                e.push(
                    format!("{fpath}.name"),
                    format!(
                        "flavor {:?} already appears in resourceGroups[{other}]; a flavor belongs to one group",
                        flavor.name
                    ),
                );
            }
            let listed: Vec<&str> = flavor.resources.iter().map(|r| r.name.as_str()).collect();
            let covered: Vec<&str> = group.covered_resources.iter().map(String::as_str).collect();
            if listed != covered {
                e.push(
                    format!("{fpath}.resources"),
                    format!(
                        "lists [{}]; list quota for exactly the covered resources, in the same order: [{}]",
                        listed.join(", "),
                        covered.join(", ")
                    ),
                );
            }
            for (r, quota) in flavor.resources.iter().enumerate() {
                let qpath = at(&fpath, "resources", r);
                let nominal = quantity(e, &format!("{qpath}.nominalQuota"), &quota.nominal_quota);
                if let Some(limit) = &quota.borrowing_limit {
                    quantity(e, &format!("{qpath}.borrowingLimit"), limit);
                    if let Some(why) = owner.unlinked("borrow", "borrowingLimit") {
                        e.push(format!("{qpath}.borrowingLimit"), why);
                    }
                }
                if let Some(limit) = &quota.lending_limit {
                    let lending = quantity(e, &format!("{qpath}.lendingLimit"), limit);
                    if let Some(why) = owner.unlinked("lend", "lendingLimit") {
                        e.push(format!("{qpath}.lendingLimit"), why);
                    }
                    // A cohort lends what its subtree has, which may be more than its own.
                    if let (Owner::Queue { .. }, Some(n), Some(l)) = (owner, nominal, lending)
                        && l > n
                    {
                        e.push(
                            format!("{qpath}.lendingLimit"),
                            format!(
                                "{} is more than the nominal quota {}; a queue can lend at most what it owns",
                                l.format_for(&quota.name),
                                n.format_for(&quota.name)
                            ),
                        );
                    }
                }
            }
        }
    }
}

fn provisioning(e: &mut Errors, path: &str, p: &ProvisioningPolicy) {
    e.name(
        &format!("{path}.className"),
        &p.class_name,
        NameRule::Subdomain,
    );
    for (key, value) in &p.parameters {
        if key.is_empty()
            || !key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            e.push(
                format!("{path}.parameters[{key:?}]"),
                "parameter names are letters, digits, '-', '_' and '.'",
            );
        }
        if value.len() > 255 {
            e.push(
                format!("{path}.parameters[{key:?}]"),
                format!(
                    "{} characters; the ProvisioningRequest API allows at most 255",
                    value.len()
                ),
            );
        }
    }
    for (i, r) in p.managed_resources.iter().enumerate() {
        e.qualified_name(&format!("{path}.managedResources[{i}]"), r);
    }
    for (label, detail) in &p.node_selector_from_details {
        e.qualified_name(&format!("{path}.nodeSelectorFromDetails[{label:?}]"), label);
        if detail.is_empty() {
            e.push(
                format!("{path}.nodeSelectorFromDetails[{label:?}]"),
                "name the provisioningClassDetails key whose value the label takes",
            );
        }
    }
    if let Some(retry) = &p.retry {
        retry_policy(e, &format!("{path}.retry"), retry);
    }
}

fn retry_policy(e: &mut Errors, path: &str, r: &RetryPolicy) {
    if let Some(limit) = r.limit.filter(|l| *l < 0) {
        e.push(
            format!("{path}.limit"),
            format!("{limit} is negative; use 0 for no retries"),
        );
    }
    let base = r.base_seconds.unwrap_or(RetryPolicy::DEFAULT_BASE_SECONDS);
    let max = r.max_seconds.unwrap_or(RetryPolicy::DEFAULT_MAX_SECONDS);
    if base < 1 {
        e.push(
            format!("{path}.baseSeconds"),
            format!("{base} must be at least 1"),
        );
    }
    if max < base {
        e.push(
            format!("{path}.maxSeconds"),
            format!("{max} is less than baseSeconds {base}; the longest backoff cannot be shorter than the first"),
        );
    }
}

/// Checks a quantity; returns its amount when it can be read.
fn quantity(e: &mut Errors, path: &str, q: &Quantity) -> Option<Amount> {
    match Amount::try_from(q) {
        Ok(a) => Some(a),
        Err(err) => {
            e.push(path, err.to_string());
            None
        }
    }
}

fn label_selector(e: &mut Errors, path: &str, s: &LabelSelector) {
    for (key, value) in s.match_labels.iter().flatten() {
        e.qualified_name(&format!("{path}.matchLabels[{key:?}]"), key);
        e.label_value(&format!("{path}.matchLabels[{key:?}]"), value);
    }
    for (i, req) in s.match_expressions.iter().flatten().enumerate() {
        let rpath = at(path, "matchExpressions", i);
        e.qualified_name(&format!("{rpath}.key"), &req.key);
        let values = req.values.as_deref().unwrap_or_default();
        match req.operator.as_str() {
            "In" | "NotIn" => {
                if values.is_empty() {
                    e.push(
                        format!("{rpath}.values"),
                        format!("{} needs at least one value", req.operator),
                    );
                }
                for (v, value) in values.iter().enumerate() {
                    e.label_value(&format!("{rpath}.values[{v}]"), value);
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    e.push(
                        format!("{rpath}.values"),
                        format!("{} takes no values; remove them", req.operator),
                    );
                }
            }
            other => e.push(
                format!("{rpath}.operator"),
                format!("{other:?} is not an operator; use In, NotIn, Exists or DoesNotExist"),
            ),
        }
    }
}

impl Validate for LocalQueue {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        e.object_name(&self.metadata, NameRule::Subdomain);
        e.name(
            "spec.clusterQueue",
            &self.spec.cluster_queue,
            NameRule::Subdomain,
        );
        e.into_vec()
    }
}

impl Validate for ResourceFlavor {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        e.object_name(&self.metadata, NameRule::Subdomain);
        let spec = &self.spec;
        for (key, value) in &spec.node_labels {
            let p = format!("spec.nodeLabels[{key:?}]");
            e.qualified_name(&p, key);
            e.label_value(&p, value);
        }
        for (i, taint) in spec.node_taints.iter().enumerate() {
            let p = at("spec", "nodeTaints", i);
            e.qualified_name(&format!("{p}.key"), &taint.key);
            if let Some(v) = &taint.value {
                e.label_value(&format!("{p}.value"), v);
            }
            effect(
                &mut e,
                &format!("{p}.effect"),
                Some(taint.effect.as_str()),
                false,
            );
        }
        for (i, t) in spec.tolerations.iter().enumerate() {
            let p = at("spec", "tolerations", i);
            if let Some(key) = t.key.as_deref().filter(|k| !k.is_empty()) {
                e.qualified_name(&format!("{p}.key"), key);
            }
            match t.operator.as_deref().unwrap_or("Equal") {
                "Equal" => {
                    if t.key.as_deref().unwrap_or_default().is_empty() {
                        e.push(format!("{p}.key"), "an Equal toleration needs a key; use operator Exists to match every taint");
                    }
                }
                "Exists" => {
                    if t.value.as_deref().is_some_and(|v| !v.is_empty()) {
                        e.push(
                            format!("{p}.value"),
                            "operator Exists takes no value; remove it",
                        );
                    }
                }
                other => e.push(
                    format!("{p}.operator"),
                    format!("{other:?} is not a toleration operator; use Equal or Exists"),
                ),
            }
            effect(&mut e, &format!("{p}.effect"), t.effect.as_deref(), true);
        }
        let mut levels = BTreeSet::new();
        for (i, level) in spec.topology_levels.iter().enumerate() {
            let p = format!("spec.topologyLevels[{i}]");
            e.qualified_name(&p, level);
            if !levels.insert(level.as_str()) {
                e.push(
                    &p,
                    format!("{level:?} is listed twice; each level once, widest first"),
                );
            }
            if level == HOSTNAME_LABEL && i + 1 != spec.topology_levels.len() {
                e.push(p, format!("{HOSTNAME_LABEL} names single nodes, so it must be the last (narrowest) level"));
            }
        }
        e.into_vec()
    }
}

fn effect(e: &mut Errors, path: &str, effect: Option<&str>, empty_ok: bool) {
    match effect.unwrap_or_default() {
        "NoSchedule" | "PreferNoSchedule" | "NoExecute" => {}
        "" if empty_ok => {}
        other => e.push(
            path,
            format!(
                "{other:?} is not a taint effect; use NoSchedule, PreferNoSchedule or NoExecute"
            ),
        ),
    }
}
