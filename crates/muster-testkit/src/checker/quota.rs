//! Quota: the GPUs of a ClusterQueue's live pods, and of its jobs whose status says admitted,
//! against its nominal quota plus borrowing limit, and every cohort's up its tree against what
//! its subtree may hold; one report per excursion, naming who holds the GPUs.

use std::collections::BTreeMap;

use super::{Checker, ViolationKind};

impl Checker {
    fn usage(&self, kind: ViolationKind) -> &BTreeMap<String, i64> {
        if kind == ViolationKind::PodsOverQuota {
            &self.pod_usage
        } else {
            &self.admitted_usage
        }
    }

    /// The ClusterQueues under `cohort`, at any depth.
    fn cohort_members<'a>(&'a self, cohort: &'a str) -> impl Iterator<Item = &'a str> {
        self.limits
            .queues
            .iter()
            .filter(move |(_, (c, _))| {
                c.as_deref()
                    .is_some_and(|c| self.limits.cohort_path(c).iter().any(|a| a == cohort))
            })
            .map(|(q, _)| q.as_str())
    }

    /// What the queues under `cohort`, at any depth, use, counted as `kind` counts.
    fn cohort_usage(&self, kind: ViolationKind, cohort: &str) -> i64 {
        let usage = self.usage(kind);
        self.cohort_members(cohort)
            .map(|q| usage.get(q).copied().unwrap_or(0))
            .sum()
    }

    /// Who holds the GPUs of the queues under `cohort`, queue by queue (see
    /// [`Checker::holders`]): a cohort's excursion is explained only by all of them.
    fn cohort_holders(&self, kind: ViolationKind, cohort: &str) -> String {
        let usage = self.usage(kind);
        let queues: Vec<String> = self
            .cohort_members(cohort)
            .map(|q| {
                let used = usage.get(q).copied().unwrap_or(0);
                format!("{q} uses {used}, {}", self.holders(kind, q))
            })
            .collect();
        queues.join("; ")
    }

    pub(super) fn check_quota(&mut self, kind: ViolationKind, queue: &str, at: f64) {
        if let Some(pending) = &mut self.relisting {
            pending.quotas.insert((kind, queue.to_owned()));
            return;
        }
        let usage = self.usage(kind);
        let used = usage.get(queue).copied().unwrap_or(0);
        let Some((cohort, max)) = self.limits.queues.get(queue).cloned() else {
            return;
        };
        let mut found = Vec::new();
        if used > max {
            found.push((
                format!("ClusterQueue/{queue}"),
                format!(
                    "{used} GPUs in use, {max} allowed; {}",
                    self.holders(kind, queue)
                ),
            ));
        }
        for cohort in cohort
            .map(|c| self.limits.cohort_path(&c))
            .unwrap_or_default()
        {
            let members = self.cohort_usage(kind, &cohort);
            let cap = self
                .limits
                .cohorts
                .get(&cohort)
                .copied()
                .unwrap_or(i64::MAX);
            if members > cap {
                found.push((
                    format!("Cohort/{cohort}"),
                    format!(
                        "{members} GPUs in use, {cap} allowed; {}",
                        self.cohort_holders(kind, &cohort)
                    ),
                ));
            }
        }
        for (object, detail) in found {
            if self.over.insert((kind, object.clone())) {
                self.report(kind, object, at, detail);
            }
        }
        self.settle_over(kind, queue);
    }

    /// Who holds `queue`'s GPUs, counted as `kind` counts: `job@attempt=GPUs` for pods that
    /// use quota ([`super::facts::PodFact::uses_quota`]; marked `unadmitted` when the job's
    /// status holds no admission), `job=GPUs` for admitted jobs; so that a report says which
    /// jobs took the queue over.
    fn holders(&self, kind: ViolationKind, queue: &str) -> String {
        let mut held: BTreeMap<String, i64> = BTreeMap::new();
        if kind == ViolationKind::PodsOverQuota {
            for pod in self.pods.values() {
                if pod.uses_quota() && pod.queue.as_deref() == Some(queue) {
                    let admitted = self
                        .jobs
                        .get(&pod.job)
                        .and_then(|j| j.admitted.as_ref())
                        .is_some_and(|(q, _)| q == queue);
                    // Whether the job's status names the queue: what tells an excursion of a
                    // job's own pods from pods running on an admission already given back.
                    let mark = if admitted { "" } else { " unadmitted" };
                    *held
                        .entry(format!("{}@{}{mark}", pod.job, pod.attempt))
                        .or_default() += pod.gpus;
                }
            }
        } else {
            let mut list = Vec::new();
            for (job, fact) in &self.jobs {
                if let Some((q, gpus)) = &fact.admitted
                    && q == queue
                {
                    list.push(format!(
                        "{job}={gpus} ({} since {:.1} s)",
                        fact.shown, fact.admitted_since
                    ));
                }
            }
            return format!("held by {}", list.join(", "));
        }
        let list: Vec<String> = held.iter().map(|(k, g)| format!("{k}={g}")).collect();
        format!("held by {}", list.join(", "))
    }

    /// Forgets excursions that ended, so that the next one is reported again.
    pub(super) fn settle_over(&mut self, kind: ViolationKind, queue: &str) {
        if let Some(pending) = &mut self.relisting {
            // Judged, and settled, once the relist is whole.
            pending.quotas.insert((kind, queue.to_owned()));
            return;
        }
        let usage = self.usage(kind);
        let Some((cohort, max)) = self.limits.queues.get(queue).cloned() else {
            return;
        };
        let mut ended = Vec::new();
        if usage.get(queue).copied().unwrap_or(0) <= max {
            ended.push(format!("ClusterQueue/{queue}"));
        }
        for cohort in cohort
            .map(|c| self.limits.cohort_path(&c))
            .unwrap_or_default()
        {
            let members = self.cohort_usage(kind, &cohort);
            if members
                <= self
                    .limits
                    .cohorts
                    .get(&cohort)
                    .copied()
                    .unwrap_or(i64::MAX)
            {
                ended.push(format!("Cohort/{cohort}"));
            }
        }
        for object in ended {
            self.over.remove(&(kind, object));
        }
    }
}
