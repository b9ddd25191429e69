//! Placing a whole gang: every pod of every pod set, or nothing.

use std::fmt::Write as _;

use muster_api::resources::names;

use crate::fit::{Fit, NoFit, NoFitKind, Placed, PodSetFit, describe, per_node};
use crate::policy::{Policy, Unit};
use crate::request::{Constraint, Mismatch, PodSetRequest};
use crate::shared::{ShareRequest, SharedNode};
use crate::tpu;
use crate::tree::{DomainId, NodeId, Topology};

/// Places every pod set of `gang`, in order, each seeing the ones placed before it. On success
/// the pods' usage is applied to `topo` (journaled: roll back to a mark taken before the call
/// to undo it); on failure `topo` is unchanged.
pub fn place(
    topo: &mut Topology,
    gang: &[PodSetRequest],
    policy: &dyn Policy,
) -> Result<Fit, NoFit> {
    place_reusing(topo, gang, policy, &mut PlaceScratch::default())
}

/// [`place`], working in `scratch`: a caller that places over and over (a scheduler's cycle
/// tries thousands of jobs) keeps one, so that only its capacity carries over from one
/// placement to the next instead of each growing its buffers afresh, a reallocation or more
/// every time.
pub fn place_reusing(
    topo: &mut Topology,
    gang: &[PodSetRequest],
    policy: &dyn Policy,
    scratch: &mut PlaceScratch,
) -> Result<Fit, NoFit> {
    let mark = topo.mark();
    let mut pod_sets = Vec::with_capacity(gang.len());
    for req in gang {
        let eligible = topo.eligibility(req);
        // The pod set's requests by the topology's numbers, resolved once for its capacity
        // index and every pod it books.
        let dense = topo.dense(&req.requests);
        let placed = match &req.constraint {
            Constraint::Tpu { .. } => tpu::place_slices(topo, req, &eligible),
            _ => {
                let index = topo.capacity_index(&dense, &eligible);
                place_in_domain(topo, req, (index, &eligible), policy, scratch)
            }
        };
        let booked = placed.and_then(|(domain, nodes, chosen)| {
            let devices = book_pods(topo, req, &dense, &nodes, &chosen)?;
            Ok(PodSetFit {
                name: req.name.clone(),
                domain,
                nodes: nodes
                    .iter()
                    .map(|n| topo.nodes()[*n].info.name.clone())
                    .collect(),
                devices,
            })
        });
        match booked {
            Ok(fit) => pod_sets.push(fit),
            Err(no_fit) => {
                topo.rollback(mark);
                return Err(no_fit);
            }
        }
    }
    Ok(Fit { pod_sets })
}

/// What a placement works in ([`place_reusing`]): each buffer is empty between placements,
/// so a copy costs nothing.
#[derive(Clone, Debug, Default)]
pub struct PlaceScratch {
    /// The units of one level a constrained pod set chooses its domain among.
    domains: Vec<Unit>,
    /// (node, pods) runs of the pod set being placed, in pod-index order.
    runs: Vec<(NodeId, u32)>,
    /// [`distribute`]'s buffers.
    descent: Scratch,
}

/// Books the pods of `req` on `nodes` (pod by pod), on the GPU devices the fitter `chosen`
/// for them or else the node's own choice; returns the devices each pod took. `dense` is
/// `req`'s requests as [`Topology::dense`] resolved them: a pod that took no devices one by
/// one books those amounts without looking its resources up by name again. On failure some
/// pods may be booked: the caller rolls back.
fn book_pods(
    topo: &mut Topology,
    req: &PodSetRequest,
    dense: &crate::DenseRequest,
    nodes: &[NodeId],
    chosen: &[Vec<u32>],
) -> Result<Vec<Vec<u32>>, NoFit> {
    let mut devices = Vec::with_capacity(nodes.len());
    for (pod, node) in nodes.iter().enumerate() {
        // The node's capacity counted its devices, so they hold every pod placed there; a
        // pod they cannot hold is a fitter bug, not a reason to overbook.
        let taken = match chosen.get(pod) {
            Some(taken) => Some(taken.clone()),
            None => topo.device_choice(*node, &req.requests),
        };
        let Some(taken) = taken else {
            return Err(NoFit {
                pod_set: req.name.clone(),
                kind: NoFitKind::NotEnoughCapacity,
                message: format!(
                    "pod set {}: the GPU devices of node {} cannot hold its pods",
                    req.name,
                    topo.nodes()[*node].info.name
                ),
                needed: req.count,
                best: None,
                total_capacity: 0,
                fragmented: false,
            });
        };
        if taken.is_empty() && dense.is_some() {
            topo.add_pod_dense(*node, dense);
        } else {
            topo.add_pod(*node, &req.requests, &taken);
        }
        devices.push(taken);
    }
    Ok(devices)
}

/// Per-node and per-domain capacity (in pods of this set) for one pod set.
pub(crate) struct Capacity<'a> {
    /// The topology's capacity index these are from ([`Topology::with_room`] reads its room
    /// bits).
    index: usize,
    pub(crate) node: &'a [u32],
    pub(crate) domain: &'a [u32],
    /// The same if every node were empty: only for policies that use it.
    empty: Option<(Vec<u32>, Vec<u32>)>,
}

impl Capacity<'_> {
    /// A node as a unit a policy can choose.
    fn node_unit(&self, id: NodeId) -> Unit {
        let empty_capacity = self.empty.as_ref().map_or(self.node[id], |(n, _)| n[id]);
        Unit {
            id,
            capacity: self.node[id],
            empty_capacity,
        }
    }

    /// A domain as a unit a policy can choose.
    fn domain_unit(&self, id: DomainId) -> Unit {
        let empty_capacity = self.empty.as_ref().map_or(self.domain[id], |(_, d)| d[id]);
        Unit {
            id,
            capacity: self.domain[id],
            empty_capacity,
        }
    }
}

/// How many pods of `req` each node and each domain can take now (from the topology's kept
/// index `index`), and if every node were empty when `with_empty`.
fn capacity<'a>(
    topo: &'a Topology,
    req: &PodSetRequest,
    index: usize,
    eligible: &[bool],
    with_empty: bool,
) -> Capacity<'a> {
    let (node, domain) = topo.capacity(index);
    let empty = with_empty.then(|| {
        let dense = topo.dense(&req.requests);
        let empty_node = per_node(eligible, |id| topo.pods_fitting_empty(id, &dense, u32::MAX));
        let empty_domain = topo.sum_domains(&empty_node);
        (empty_node, empty_domain)
    });
    Capacity {
        index,
        node,
        domain,
        empty,
    }
}

/// Why each ineligible node is ineligible (a full pass, for explanations only).
fn mismatches(topo: &Topology, req: &PodSetRequest) -> Vec<Mismatch> {
    topo.nodes()
        .iter()
        .filter_map(|n| req.node_mismatch(&n.info))
        .collect()
}

fn place_in_domain(
    topo: &Topology,
    req: &PodSetRequest,
    (index, eligible): (usize, &[bool]),
    policy: &dyn Policy,
    scratch: &mut PlaceScratch,
) -> Result<Placed, NoFit> {
    let cap = capacity(topo, req, index, eligible, policy.uses_empty_capacity());
    if policy.scores_gangs()
        && topo.tracks_devices()
        && let Some(request) = device_request(req)
    {
        policy.observe(&request, req.count);
    }
    let total = cap.domain[0];
    let no_fit = |kind, best: Option<(String, u32)>, message: String| NoFit {
        pod_set: req.name.clone(),
        kind,
        message,
        needed: req.count,
        best,
        total_capacity: total,
        fragmented: kind == NoFitKind::NoDomainFits,
    };
    // Whether no node is eligible at all is in `eligible` already; why each is not is a full
    // pass over the nodes' labels, worth it only for that message. A full fleet leaves every
    // waiting job with no capacity, and most of them with eligible nodes.
    if total == 0 && !eligible.contains(&true) {
        let mismatches = mismatches(topo, req);
        if mismatches.len() == topo.nodes().len() {
            let message = topo.word(|| no_nodes_message(topo, req, &mismatches));
            return Err(no_fit(NoFitKind::NoEligibleNodes, None, message));
        }
    }
    let level_depth = |level: &str| topo.levels().iter().position(|l| l == level).map(|i| i + 1);
    let chosen: DomainId = match &req.constraint {
        Constraint::Required(level) | Constraint::Preferred(level) => {
            let Some(depth) = level_depth(level) else {
                return Err(no_fit(
                    NoFitKind::UnknownLevel,
                    None,
                    topo.word(|| {
                        format!(
                            "pod set {} asks for {level:?}, which is not a topology level of the flavor (levels: {})",
                            req.name,
                            topo.levels().join(", ")
                        )
                    }),
                ));
            };
            let units = &mut scratch.domains;
            match find_domain(topo, req, (&cap, eligible), policy, depth, units) {
                Some(id) => id,
                None => {
                    domains_at(topo, &cap, depth, units);
                    let best = units
                        .iter()
                        .max_by_key(|u| (u.capacity, std::cmp::Reverse(u.id)))
                        .copied();
                    units.clear();
                    let best = best.map(|u| (topo.domains()[u.id].value.clone(), u.capacity));
                    let kind = if total >= req.count {
                        NoFitKind::NoDomainFits
                    } else {
                        NoFitKind::NotEnoughCapacity
                    };
                    let message = topo.word(|| domain_message(req, level, best.as_ref(), total));
                    return Err(no_fit(kind, best, message));
                }
            }
        }
        _ => {
            if total < req.count {
                let (kind, message) = short_of_room(topo, req, total);
                return Err(no_fit(kind, None, message));
            }
            0
        }
    };
    let path = topo.path(chosen);
    let domain = topo.levels().iter().cloned().zip(path).collect();
    if policy.places_shares()
        && let Some((nodes, devices)) = place_shares(topo, req, &cap, eligible, policy, chosen)
    {
        return Ok((domain, nodes, devices));
    }
    let PlaceScratch { runs, descent, .. } = scratch;
    distribute(topo, &cap, policy, (chosen, req.count), descent, runs);
    let nodes = runs
        .drain(..)
        .flat_map(|(node, n)| std::iter::repeat_n(node, n as usize))
        .collect();
    Ok((domain, nodes, Vec::new()))
}

/// The domain a pod set constrained to the level at `depth` goes to: for a required level,
/// one of that level; for a preferred one, of that level, else of each wider one, else the
/// whole flavor. `units` is working space, left empty.
fn find_domain(
    topo: &Topology,
    req: &PodSetRequest,
    (cap, eligible): (&Capacity, &[bool]),
    policy: &dyn Policy,
    depth: usize,
    units: &mut Vec<Unit>,
) -> Option<DomainId> {
    let widest = match req.constraint {
        Constraint::Preferred(_) => 0,
        _ => depth,
    };
    let mut found = None;
    for d in (widest..=depth).rev() {
        domains_at(topo, cap, d, units);
        let chosen = cheapest_unit(topo, req, cap, eligible, policy, units)
            .or_else(|| policy.choose_single(units, req.count));
        if let Some(i) = chosen {
            found = Some(units[i].id);
            break;
        }
    }
    units.clear();
    found
}

/// Why the flavor's nodes have room for only `total` pods of an unconstrained pod set: no
/// node takes a share of a GPU at all, or too little room (in words where `topo` words
/// failures).
fn short_of_room(topo: &Topology, req: &PodSetRequest, total: u32) -> (NoFitKind, String) {
    let share = req.requests.get(names::GPU_SHARE);
    if !share.is_zero() && !topo.tracks_devices() {
        return (
            NoFitKind::NoEligibleNodes,
            topo.word(|| {
                format!(
                    "pod set {} asks for {}m of one GPU (gpuShare), and no node of the flavor hands its GPUs out in parts: HAMi nodes carry the labels gpu: \"on\" and nvidia.com/gpu.count",
                    req.name,
                    share.milli()
                )
            }),
        );
    }
    (
        NoFitKind::NotEnoughCapacity,
        topo.word(|| {
            format!(
                "needs {} pods with {}; the flavor's nodes have room for {total}",
                req.count,
                describe(&req.requests)
            )
        }),
    )
}

/// Pods asking for part of a GPU, placed one by one by the policy's device level
/// ([`Policy::place_share`]) on the nodes of `domain` that can take one (see
/// [`on_devices_of`]). `None` when the pod set asks for no share, or the policy leaves a pod
/// to the fitter.
fn place_shares(
    topo: &Topology,
    req: &PodSetRequest,
    cap: &Capacity,
    eligible: &[bool],
    policy: &dyn Policy,
    domain: DomainId,
) -> Option<(Vec<NodeId>, Vec<Vec<u32>>)> {
    let request = device_request(req).filter(ShareRequest::is_share)?;
    let placed = on_devices_of(
        topo,
        req,
        cap,
        eligible,
        domain,
        &request,
        |views, order| policy.place_share(views, order, &request),
    )?;
    Some((placed.nodes, placed.devices))
}

/// What one pod of `req` asks of a node whose GPUs are tracked one by one: a share of one
/// GPU, or whole GPUs; `None` for a pod without GPUs (or a GPU count that is not whole).
fn device_request(req: &PodSetRequest) -> Option<ShareRequest> {
    let mib = |bytes_milli: u64| bytes_milli / 1000 / (1 << 20);
    let share = u32::try_from(req.requests.get(names::GPU_SHARE).milli()).ok()?;
    let (gpus, milli) = if share > 0 {
        (1, share)
    } else {
        let gpus = req.requests.get(names::NVIDIA_GPU).milli();
        if gpus == 0 || !gpus.is_multiple_of(1000) {
            return None;
        }
        (u32::try_from(gpus / 1000).ok()?, 1000)
    };
    ShareRequest::new(
        req.requests.get(names::CPU).milli(),
        mib(req.requests.get(names::MEMORY).milli()),
        gpus,
        milli,
        Vec::new(),
    )
    .ok()
}

/// A pod set placed pod by pod on the nodes of one domain, device by device.
struct OnDevices {
    /// Each pod's node.
    nodes: Vec<NodeId>,
    /// Each pod's devices.
    devices: Vec<Vec<u32>>,
    /// The domain's candidate nodes before the pods were placed...
    before: Vec<SharedNode>,
    /// ...and after, in the same order.
    after: Vec<SharedNode>,
}

/// Places every pod of `req` (each asking `request`) on the nodes of `domain` that can take
/// one, seen as [`SharedNode`]s (free CPU, memory and each device's free share), choosing
/// each pod's node and devices with `pick` (given the nodes as they are so far and the ones
/// still open, in order). A node never takes more pods than its capacity counts (its other
/// resources: pod slots, vGPUs). `None` when `pick` finds no place for a pod.
fn on_devices_of(
    topo: &Topology,
    req: &PodSetRequest,
    cap: &Capacity,
    eligible: &[bool],
    domain: DomainId,
    request: &ShareRequest,
    mut pick: impl FnMut(&[SharedNode], &[usize]) -> Option<crate::shared::DevicePick>,
) -> Option<OnDevices> {
    let mib = |bytes_milli: u64| bytes_milli / 1000 / (1 << 20);
    let candidates: Vec<NodeId> = topo
        .nodes_under(domain)
        .into_iter()
        .filter(|&id| eligible.get(id).copied().unwrap_or(false) && cap.node[id] > 0)
        .collect();
    let before: Vec<SharedNode> = candidates
        .iter()
        .map(|&id| {
            let free = topo.free(id);
            let devices: Vec<u32> = topo
                .device_free(id)
                .into_iter()
                .map(|f| u32::try_from(f).unwrap_or(u32::MAX))
                .collect();
            SharedNode::with_free(
                topo.nodes()[id].info.name.clone(),
                "",
                free.get(names::CPU).milli(),
                mib(free.get(names::MEMORY).milli()),
                &devices,
            )
        })
        .collect();
    let mut views = before.clone();
    let mut room: Vec<u32> = candidates.iter().map(|&id| cap.node[id]).collect();
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    let mut nodes = Vec::with_capacity(req.count as usize);
    let mut devices = Vec::with_capacity(req.count as usize);
    for _ in 0..req.count {
        let chosen = pick(&views, &order)?;
        let view = views.get_mut(chosen.node)?;
        view.take(request, &chosen.devices).ok()?;
        room[chosen.node] -= 1;
        if room[chosen.node] == 0 {
            order.retain(|&i| i != chosen.node);
        }
        nodes.push(candidates[chosen.node]);
        devices.push(chosen.devices.iter().map(|&d| u32::from(d)).collect());
    }
    Some(OnDevices {
        nodes,
        devices,
        before,
        after: views,
    })
}

/// For a policy that scores gangs ([`Policy::scores_gangs`]) on GPUs tracked one by one:
/// among `units` that hold all the pod set's pods, the one where a tentative placement of the
/// whole pod set costs least ([`Policy::gang_cost`]), the tightest first among equal costs,
/// then the first. `None` when the policy does not score gangs, the pod set asks for no GPU,
/// or fewer than two units hold it (then there is nothing to weigh).
fn cheapest_unit(
    topo: &Topology,
    req: &PodSetRequest,
    cap: &Capacity,
    eligible: &[bool],
    policy: &dyn Policy,
    units: &[Unit],
) -> Option<usize> {
    if !policy.scores_gangs() || !topo.tracks_devices() {
        return None;
    }
    let request = device_request(req)?;
    if units.iter().filter(|u| u.capacity >= req.count).count() < 2 {
        // Nothing to weigh (a preferred level's fallback to the whole flavor, one block).
        return None;
    }
    let mut best: Option<(f64, u32, usize)> = None;
    for (i, unit) in units.iter().enumerate() {
        if unit.capacity < req.count {
            continue;
        }
        let Some(placed) = on_devices_of(topo, req, cap, eligible, unit.id, &request, |v, o| {
            policy.try_share(v, o, &request)
        }) else {
            continue;
        };
        let Some(cost) = policy.gang_cost(&placed.before, &placed.after) else {
            continue;
        };
        let better = best.is_none_or(|(c, capacity, _)| {
            cost.total_cmp(&c)
                .then(unit.capacity.cmp(&capacity))
                .is_lt()
        });
        if better {
            best = Some((cost, unit.capacity, i));
        }
    }
    best.map(|(_, _, i)| i)
}

/// The labelled domains at `depth` with room for at least one pod.
fn domains_at(topo: &Topology, cap: &Capacity, depth: usize, units: &mut Vec<Unit>) {
    units.clear();
    units.extend(
        topo.domains_at_depth(depth)
            .iter()
            .filter(|&&id| {
                (depth == 0 || !topo.domains()[id].value.is_empty()) && cap.domain[id] > 0
            })
            .map(|&id| cap.domain_unit(id)),
    );
}

/// What [`distribute`] works in at every level of a domain, one buffer for all: a level's
/// units are taken off before it descends, and its picks, pushed past its parent's, before it
/// returns, so a placement allocates them once, not once per domain it descends into (and,
/// kept in a [`PlaceScratch`], not once per placement either).
#[derive(Clone, Debug, Default)]
struct Scratch {
    units: Vec<Unit>,
    picked: Vec<(usize, u32)>,
}

/// Splits `need` pods over the children (or nodes) of `domain`, appending (node, pods) runs to
/// `out` in pod-index order.
fn distribute(
    topo: &Topology,
    cap: &Capacity,
    policy: &dyn Policy,
    (domain, need): (DomainId, u32),
    scratch: &mut Scratch,
    out: &mut Vec<(NodeId, u32)>,
) {
    let d = &topo.domains()[domain];
    let leaf = d.children.is_empty();
    // Only units with room: in a busy fleet most nodes are full, and a block has hundreds,
    // found by the index's room bits; a domain of few units has no bits, and its units'
    // counts are read as fast.
    let unit = |id| {
        if leaf {
            cap.node_unit(id)
        } else {
            cap.domain_unit(id)
        }
    };
    let first_unit = scratch.units.len();
    match topo.with_room(cap.index, domain) {
        Some(with_room) => {
            scratch.units.reserve(with_room.how_many());
            scratch.units.extend(with_room.map(unit));
        }
        None => {
            let (ids, room) = if leaf {
                (&d.nodes, cap.node)
            } else {
                (&d.children, cap.domain)
            };
            scratch
                .units
                .extend(ids.iter().filter(|&&id| room[id] > 0).map(|&id| unit(id)));
        }
    }
    let first_pick = scratch.picked.len();
    let mut left = need;
    while left > 0 {
        let units = &scratch.units[first_unit..];
        let (i, take) = match policy.choose_single(units, left) {
            Some(i) => (i, left),
            None => match policy.fill_next(units, left) {
                Some(i) => (i, units[i].capacity.min(left)),
                None => break, // unreachable when the domain's capacity covers `need`
            },
        };
        scratch.picked.push((units[i].id, take));
        left -= take;
        scratch.units.remove(first_unit + i);
    }
    scratch.units.truncate(first_unit);
    // Keep runs in label/name order so consecutive pod indices are neighbours.
    scratch.picked[first_pick..].sort_unstable();
    for k in first_pick..scratch.picked.len() {
        let (id, take) = scratch.picked[k];
        if leaf {
            out.push((id, take));
        } else {
            distribute(topo, cap, policy, (id, take), scratch, out);
        }
    }
    scratch.picked.truncate(first_pick);
}

fn domain_message(
    req: &PodSetRequest,
    level: &str,
    best: Option<&(String, u32)>,
    total: u32,
) -> String {
    let mut m = format!(
        "needs {} pods with {} in one {level}",
        req.count,
        describe(&req.requests)
    );
    match best {
        Some((value, n)) => {
            let _ = write!(m, "; the best, {value}, has room for {n}");
        }
        None => m.push_str("; no domain of that level has room for even one"),
    }
    if total >= req.count {
        let _ = write!(
            m,
            "; the flavor as a whole has room for {total}: free capacity is fragmented across domains"
        );
    } else {
        let _ = write!(m, "; the flavor as a whole has room for only {total}");
    }
    m
}

fn no_nodes_message(topo: &Topology, req: &PodSetRequest, mismatches: &[Mismatch]) -> String {
    if topo.nodes().is_empty() {
        return format!("pod set {}: the flavor has no nodes", req.name);
    }
    let count = |f: &dyn Fn(&Mismatch) -> bool| mismatches.iter().filter(|m| f(m)).count();
    let mut parts = Vec::new();
    for (n, what) in [
        (
            count(&|m| *m == Mismatch::NotSchedulable),
            "not ready or cordoned",
        ),
        (
            count(&|m| *m == Mismatch::Selector),
            "missing a required label",
        ),
        (
            count(&|m| *m == Mismatch::Affinity),
            "outside the required node affinity",
        ),
        (
            count(&|m| matches!(m, Mismatch::Taint(_))),
            "tainted with a taint the pods do not tolerate",
        ),
        (
            count(&|m| *m == Mismatch::SharedGpus),
            "sharing their GPUs (time-slicing): the job needs whole GPUs; set spec.acceptSharedGpus to use shared ones",
        ),
    ] {
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    }
    format!(
        "no node can take pods of {}: of {} nodes, {}",
        req.name,
        topo.nodes().len(),
        parts.join(", ")
    )
}
