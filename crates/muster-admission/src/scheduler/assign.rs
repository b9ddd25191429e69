//! Flavor assignment: quota first, then nodes, for every pod set of a job.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use muster_api::Resources;
use muster_api::cluster_queue::ResourceGroup;
use muster_topology::{NoFit, PodSetRequest};

use super::{Assignment, Blocked, Options, Scheduler};
use crate::cluster::{Cluster, with_flavor};
use crate::decision::PodSetPlacement;
use crate::job::Job;
use crate::quota::{PreparedUsage, QuotaCheck, QuotaFit, Shortfall};
use crate::reservation::Reservation;

impl Scheduler {
    /// Finds flavors (and, with `opts.place`, nodes) for every pod set of `job` in `cq`. On
    /// success with placement, the pods' node usage stays applied to the cluster (journaled);
    /// quota is not booked. On failure nothing changes.
    pub(super) fn try_assign(
        &mut self,
        cq: &str,
        job: &Job,
        opts: Options,
        reservations: &[Reservation],
        now: i64,
    ) -> Result<Assignment, Blocked> {
        let start = self.cluster.mark();
        let ends = job.expected_runtime.map(|r| now.saturating_add(r));
        let binding: Vec<&Reservation> = reservations
            .iter()
            .filter(|r| !r.ends_before(ends))
            .collect();
        // Reserved capacity is filled only once a pod set gets as far as its nodes: quota
        // checks never read them, and most jobs a busy cycle tries fail on quota.
        let mut fill = Fill {
            reserved: if opts.place { &binding } else { &[] },
            keep_off: &job.pod_sets,
            done: false,
        };
        let result = self.assign_pod_sets(cq, job, opts, &mut fill);
        let filled = fill.done;
        let result = result.and_then(|a| {
            let (scratch, quota) = (&mut self.scratch_quota, &self.quota);
            let booking = a.booking.as_deref();
            match binding
                .iter()
                .find(|r| r.would_delay(scratch, quota, (cq, &a.usage), booking))
            {
                Some(r) => Err(Blocked::Reserved {
                    for_job: r.job.clone(),
                    until: r.until,
                }),
                None => Ok(a),
            }
        });
        match result {
            Ok(a) => {
                if filled {
                    // Drop the reserved-capacity filler, keep the pods.
                    self.cluster.rollback(&start);
                    for (set, placement) in job.pod_sets.iter().zip(&a.pod_sets) {
                        for (pod, node) in placement.nodes.iter().enumerate() {
                            self.cluster
                                .add_pod(node, &set.requests, placement.devices_of(pod));
                        }
                    }
                }
                Ok(a)
            }
            Err(Blocked::Topology { no_fit, flavor }) if filled => {
                // Say so when only reserved capacity stands in the way.
                self.cluster.rollback(&start);
                let free = self
                    .assign_pod_sets(cq, job, opts, &mut Fill::none())
                    .is_ok();
                self.cluster.rollback(&start);
                match binding.first() {
                    Some(r) if free => Err(Blocked::Reserved {
                        for_job: r.job.clone(),
                        until: r.until,
                    }),
                    _ => Err(Blocked::Topology { no_fit, flavor }),
                }
            }
            Err(blocked) => {
                self.cluster.rollback(&start);
                Err(blocked)
            }
        }
    }

    /// Flavors (and, with `opts.place`, nodes) for every pod set of `job`, with `fill`'s
    /// reserved capacity taken before the first placement.
    fn assign_pod_sets(
        &mut self,
        cq: &str,
        job: &Job,
        opts: Options,
        fill: &mut Fill,
    ) -> Result<Assignment, Blocked> {
        let Some(spec) = self.queues.get(cq).map(|q| Arc::clone(&q.spec)) else {
            return Err(Blocked::NotCovered {
                pod_set: String::new(),
                resources: Vec::new(),
            });
        };
        let mut usage_by_flavor: BTreeMap<String, Resources> = BTreeMap::new();
        let mut pod_sets = Vec::with_capacity(job.pod_sets.len());
        let mut borrowing = false;
        let (usages, shape) = self.usage_and_shape(job);
        for (i, (set, usage)) in job.pod_sets.iter().zip(&*usages).enumerate() {
            let Some(group) = covering_group(&spec, usage) else {
                let covered: BTreeSet<&String> = spec
                    .resource_groups
                    .iter()
                    .flat_map(|g| &g.covered_resources)
                    .collect();
                let mut resources: Vec<String> = usage.iter().map(|(r, _)| r.to_owned()).collect();
                // Name the uncovered ones when there are any; else the mix is the problem.
                if resources.iter().any(|r| !covered.contains(r)) {
                    resources.retain(|r| !covered.contains(r));
                }
                return Err(Blocked::NotCovered {
                    pod_set: set.name.clone(),
                    resources,
                });
            };
            let set = (set, shape.map(|shape| (shape, i)));
            let chosen = self.assign_one(cq, set, usage, group, &usage_by_flavor, opts, fill);
            let (placement, borrowed) = chosen?;
            borrowing |= borrowed;
            match usage_by_flavor.entry(placement.flavor.clone()) {
                Entry::Vacant(e) => {
                    e.insert(usage.clone());
                }
                Entry::Occupied(e) => e.into_mut().add_all(usage),
            }
            pod_sets.push(placement);
        }
        let flavors = pod_sets.iter().map(|p| p.flavor.as_str());
        let booking = shape.and_then(|shape| self.booking_for(shape, cq, flavors));
        Ok(Assignment {
            pod_sets,
            borrowing,
            usage: usage_by_flavor,
            booking,
        })
    }

    /// Chooses the flavor (and nodes) of one pod set (with its shape and index there, when
    /// the job is known as it is): the first of the group's flavors that fits without
    /// borrowing, else the first that fits by borrowing. Placed pods stay booked in the
    /// cluster.
    #[expect(
        clippy::too_many_arguments,
        reason = "one pod set's context, passed down from assign_pod_sets"
    )]
    fn assign_one(
        &mut self,
        cq: &str,
        (set, shaped): (&PodSetRequest, Option<(usize, usize)>),
        usage: &Resources,
        group: &ResourceGroup,
        usage_by_flavor: &BTreeMap<String, Resources>,
        opts: Options,
        fill: &mut Fill,
    ) -> Result<(PodSetPlacement, bool), Blocked> {
        let mut first_short: Option<Shortfall> = None;
        let mut first_no_fit: Option<(NoFit, String)> = None;
        let mut chosen: Option<(PodSetPlacement, bool)> = None;
        'passes: for borrow_pass in [false, true] {
            if borrow_pass && opts.no_borrow {
                break;
            }
            for flavor in &group.flavors {
                // The job's usage in the flavor with this pod set: the set's own unless an
                // earlier set took the flavor too (usages hold no zero amounts, so adding
                // the set's to nothing gives it as it is).
                let combined;
                let total = match usage_by_flavor.get(&flavor.name) {
                    Some(before) => {
                        let mut sum = before.clone();
                        sum.add_all(usage);
                        combined = sum;
                        &combined
                    }
                    None => usage,
                };
                // The verdict alone, which allocates nothing; the shortfall is worked out
                // only for the first flavor short, the one a waiting job is told of.
                let fit = match shaped {
                    // The set alone in the flavor, as most are: its usage is the shape's.
                    Some((shape, i)) if !usage_by_flavor.contains_key(&flavor.name) => {
                        let quota = &self.quota;
                        let (queue, prepared) =
                            self.prepared.get_or_make(shape, i, &flavor.name, || {
                                (cq.to_owned(), quota.prepare(cq, &flavor.name, usage))
                            });
                        if queue == cq {
                            let fit = quota.fit_prepared(prepared);
                            debug_assert_eq!(
                                fit,
                                quota.fit(cq, &flavor.name, total),
                                "a prepared usage of {cq} in {} answers as by names",
                                flavor.name
                            );
                            fit
                        } else {
                            quota.fit(cq, &flavor.name, total)
                        }
                    }
                    _ => self.quota.fit(cq, &flavor.name, total),
                };
                match (fit, borrow_pass) {
                    (QuotaFit::Fits, false) | (QuotaFit::Borrows, true) => {}
                    (QuotaFit::Short, false) => {
                        if first_short.is_none()
                            && let QuotaCheck::Short(s) = self.quota.check(cq, &flavor.name, total)
                        {
                            first_short = Some(s);
                        }
                        continue;
                    }
                    (QuotaFit::Borrows, false) if opts.no_borrow => {
                        first_short.get_or_insert(Shortfall {
                            flavor: flavor.name.clone(),
                            resource: String::new(),
                            needed: muster_api::Amount::ZERO,
                            free: muster_api::Amount::ZERO,
                            borrowable: muster_api::Amount::ZERO,
                            limit: None,
                        });
                        continue;
                    }
                    _ => continue,
                }
                let placement = if opts.place {
                    fill.take(&mut self.cluster);
                    match self.place_in(set, shaped, &flavor.name) {
                        Some(Ok(placement)) => placement,
                        Some(Err(no_fit)) => {
                            first_no_fit.get_or_insert((no_fit, flavor.name.clone()));
                            continue;
                        }
                        None => continue,
                    }
                } else {
                    PodSetPlacement {
                        name: set.name.clone(),
                        flavor: flavor.name.clone(),
                        domain: Vec::new(),
                        nodes: Vec::new(),
                        devices: Vec::new(),
                    }
                };
                chosen = Some((placement, borrow_pass));
                break 'passes;
            }
        }
        match (chosen, first_no_fit, first_short) {
            (Some((placement, borrowed)), _, _) => Ok((placement, borrowed)),
            (None, Some((no_fit, flavor)), _) => Err(Blocked::Topology {
                no_fit: Box::new(no_fit),
                flavor,
            }),
            (None, None, Some(short)) => Err(Blocked::Quota(short)),
            (None, None, None) => Err(Blocked::NotCovered {
                pod_set: set.name.clone(),
                resources: Vec::new(),
            }),
        }
    }
}

impl Scheduler {
    /// Places one pod set in `flavor` (with the flavor's labels and tolerations) and books its
    /// pods on their nodes; `None` when the flavor has no nodes. `shaped` (the set's job
    /// shape and index there) lets the set under the flavor be built once for all tries.
    pub(super) fn place_in(
        &mut self,
        set: &PodSetRequest,
        shaped: Option<(usize, usize)>,
        flavor: &str,
    ) -> Option<Result<PodSetPlacement, NoFit>> {
        let spec = self.cluster.flavor(flavor)?;
        let req = match shaped {
            Some((shape, i)) => Arc::clone(
                self.flavored
                    .get_or_make(shape, i, flavor, || Arc::new(with_flavor(set, spec))),
            ),
            None => Arc::new(with_flavor(set, spec)),
        };
        let fit = self.cluster.place(flavor, &req, self.policy.as_ref())?;
        Some(fit.map(|mut fit| {
            let (name, domain, nodes, mut devices) = fit.pod_sets.pop().map_or_else(
                || (set.name.clone(), Vec::new(), Vec::new(), Vec::new()),
                |p| (p.name, p.domain, p.nodes, p.devices),
            );
            // Empty unless some pod takes devices one by one, as a holding read back from
            // pods says it: the two must compare equal for a kept scheduler.
            if devices.iter().all(Vec::is_empty) {
                devices = Vec::new();
            }
            PodSetPlacement {
                name,
                flavor: flavor.to_owned(),
                domain,
                devices,
                nodes,
            }
        }))
    }
}

/// Something worked out per job shape, pod set and flavor, once for every try of every job of
/// the shape: each try worked out its own and dropped it.
#[derive(Clone, Debug)]
pub(super) struct PerPodSet<T>(Vec<Vec<Vec<(String, T)>>>);

impl<T> Default for PerPodSet<T> {
    fn default() -> Self {
        PerPodSet(Vec::new())
    }
}

impl<T> PerPodSet<T> {
    /// What is kept for pod set `set` of `shape` under `flavor`, made by `make` the first
    /// time.
    fn get_or_make(
        &mut self,
        shape: usize,
        set: usize,
        flavor: &str,
        make: impl FnOnce() -> T,
    ) -> &T {
        if self.0.len() <= shape {
            self.0.resize_with(shape + 1, Vec::new);
        }
        let sets = &mut self.0[shape];
        if sets.len() <= set {
            sets.resize_with(set + 1, Vec::new);
        }
        let flavors = &mut sets[set];
        let at = match flavors.iter().position(|(name, _)| name == flavor) {
            Some(at) => at,
            None => {
                flavors.push((flavor.to_owned(), make()));
                flavors.len() - 1
            }
        };
        &flavors[at].1
    }
}

/// Pod sets as placement reads them under a flavor (its node labels joined to the selector,
/// its tolerations to the pod's). A shape's pod sets and a scheduler's flavors never change,
/// so nothing here goes stale.
pub(super) type Flavored = PerPodSet<Arc<PodSetRequest>>;

/// A pod set's quota usage in a flavor, with the ClusterQueue it was prepared for and its
/// names looked up ([`crate::quota::QuotaBook::prepare`]): a quota check of a try is then
/// arithmetic alone. A shape's jobs are all of one LocalQueue, so of one ClusterQueue; one
/// tried in another is checked by names. Good while the quota book's numbering is:
/// [`Scheduler::with_cohorts`] makes a new book and drops these.
pub(super) type PreparedUsages = PerPodSet<(String, PreparedUsage)>;

/// Capacity reserved for other jobs, taken from the cluster (see [`Cluster::fill`]) before
/// the first placement of a job's pod sets, so that they keep off it.
struct Fill<'a> {
    /// The binding reservations.
    reserved: &'a [&'a Reservation],
    /// The job's pod sets: a reserved node too full for any of them is left as it is.
    keep_off: &'a [PodSetRequest],
    /// Whether the capacity has been taken (the caller rolls the cluster back).
    done: bool,
}

impl Fill<'_> {
    /// Nothing to take.
    fn none() -> Fill<'static> {
        Fill {
            reserved: &[],
            keep_off: &[],
            done: false,
        }
    }

    /// Takes the reserved capacity, the first time only.
    fn take(&mut self, cluster: &mut Cluster) {
        if self.done || self.reserved.is_empty() {
            return;
        }
        self.done = true;
        let reserved = self
            .reserved
            .iter()
            .flat_map(|r| &r.nodes)
            .map(|(flavor, nodes)| (flavor.as_str(), nodes.as_slice()));
        cluster.fill(reserved, self.keep_off);
    }
}

/// The first resource group of `spec` that covers every resource `usage` asks for: the one a
/// pod set takes its flavor from.
pub(super) fn covering_group<'a>(
    spec: &'a muster_api::ClusterQueueSpec,
    usage: &Resources,
) -> Option<&'a ResourceGroup> {
    spec.resource_groups.iter().find(|g| {
        usage
            .iter()
            .all(|(r, _)| g.covered_resources.iter().any(|c| c == r))
    })
}
