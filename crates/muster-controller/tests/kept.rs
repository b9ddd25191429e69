//! The scheduler a pass keeps for the next one decides what one built afresh from the index
//! would, whatever happens between passes. Drawn scripts play a fleet with cohorts that lend
//! and borrow, priorities and preemption, two flavors of whole GPUs and GPU shares on HAMi
//! nodes, and a queue that buys its capacity (the script answers its ProvisioningRequests);
//! gangs start, finish, fail and are deleted or suspended, nodes are lost under them, other
//! teams' pods come and go, and every pass's writes land out of order, some passes late, some
//! failed (with nothing written, cut short, or carried out with the answer lost). At every
//! pass, the pass over the kept scheduler and a pass over a fresh copy of the state (which
//! keeps no scheduler and no seats, so it builds one from the index and settles every job)
//! must make the same writes and find the same.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use muster_api::{GpuJob, ProvisioningRequest};
use muster_controller::index::PodPhase;
use muster_controller::plan::{Action, Summary, plan};
use muster_controller::state::State;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde_json::json;
use support::fleet::{self, FleetSpec, JobSpec};
use support::script::{Answer, Event, Script, Tick, script};
use support::{Landing, at, land_as, object, with_phase};

/// What a script made happen, to show the scripts reach every situation.
#[derive(Debug, Default)]
struct Coverage {
    passes: usize,
    kept: usize,
    admitted: usize,
    preempted: usize,
    restarted: usize,
    provisions: usize,
    released_on_bought: usize,
    released_shares: usize,
    late: usize,
    failed: usize,
}

impl Coverage {
    fn add(&mut self, other: &Coverage) {
        self.passes += other.passes;
        self.kept += other.kept;
        self.admitted += other.admitted;
        self.preempted += other.preempted;
        self.restarted += other.restarted;
        self.provisions += other.provisions;
        self.released_on_bought += other.released_on_bought;
        self.released_shares += other.released_shares;
        self.late += other.late;
        self.failed += other.failed;
    }
}

/// The script's cluster, as the test plays it around the controller's state.
struct World {
    state: State,
    t: i64,
    /// Writes sent and not landed, with the passes each has waited.
    in_flight: Vec<(Action, u32)>,
    /// Every job the script made, in order.
    jobs: Vec<String>,
    /// Each job's pods as its latest release wrote them.
    gangs: BTreeMap<String, Vec<Pod>>,
    /// ProvisioningRequests written, and the node pools provisioned for them.
    requests: BTreeMap<String, Option<String>>,
    /// Every node, as it is when Ready.
    nodes: BTreeMap<String, Node>,
    /// Nodes lost (deleted or not Ready).
    lost: BTreeSet<String>,
    /// Pods of other teams, oldest first.
    outside: Vec<Pod>,
    tally: Coverage,
}

/// What a pass found is what the pass over a fresh copy found; only how much each had to
/// look at differs.
fn assert_same_findings(pass: &Summary, built: &Summary, t: i64) {
    let same = |s: &Summary| Summary {
        scheduler_rebuilt: None,
        settled: 0,
        explained: false,
        ..s.clone()
    };
    assert_eq!(same(pass), same(built), "pass at {t}");
}

/// The pass over the kept scheduler wrote what the pass over a fresh copy wrote; when not, the
/// first write that differs, field by field.
fn assert_same_writes(pass: &[Action], built: &[Action], t: &str) {
    let names = |actions: &[Action]| -> Vec<String> {
        actions
            .iter()
            .map(|a| {
                format!(
                    "{} {}",
                    a.kind(),
                    a.job().map_or("-", muster_api::ObjectRef::as_str)
                )
            })
            .collect()
    };
    // The first place the lists differ: two writes, shown field by field, or a write past
    // the other list's end, shown whole.
    let first = (0..pass.len().max(built.len()))
        .find(|i| pass.get(*i) != built.get(*i))
        .map(|i| (pass.get(i), built.get(i)));
    let difference = match first {
        Some((Some(a), Some(b))) => {
            let (a, b) = (format!("{a:#?}"), format!("{b:#?}"));
            let lines: Vec<String> = a
                .lines()
                .zip(b.lines())
                .filter(|(a, b)| a != b)
                .map(|(a, b)| format!("kept: {a}\nbuilt: {b}"))
                .collect();
            lines.join("\n")
        }
        Some((a, b)) => {
            let shown =
                |w: Option<&Action>| w.map_or_else(|| "none".to_owned(), |w| format!("{w:#?}"));
            format!("kept: {}\nbuilt: {}", shown(a), shown(b))
        }
        None => String::new(),
    };
    assert!(
        pass == built,
        "pass at {t}: the writes differ\nkept:  {:?}\nbuilt: {:?}\nfirst difference:\n{}",
        names(pass),
        names(built),
        difference
    );
}

impl World {
    fn new(script: &Script) -> World {
        let jobs: Vec<GpuJob> = script
            .jobs
            .iter()
            .enumerate()
            .map(|(i, spec)| fleet::gang(&format!("j{i}"), spec, i64::try_from(i).unwrap_or(0)))
            .collect();
        let keys = jobs.iter().map(key).collect();
        World {
            state: fleet::fleet(&script.fleet, jobs),
            t: 10,
            in_flight: Vec::new(),
            jobs: keys,
            gangs: BTreeMap::new(),
            requests: BTreeMap::new(),
            nodes: fleet::nodes(&script.fleet)
                .into_iter()
                .map(|n| (n.metadata.name.clone().unwrap_or_default(), n))
                .collect(),
            lost: BTreeSet::new(),
            outside: Vec::new(),
            tally: Coverage::default(),
        }
    }

    /// The same pass twice: over the kept scheduler, and over a copy of the state, which
    /// holds none and so builds one afresh. Its writes are then sent (waiting jobs' statuses
    /// queued for the sender, as the run loop does).
    fn pass(&mut self) {
        let t = self.t;
        let mut fresh = self.state.clone();
        let built = plan(&mut fresh, at(t));
        let pass = plan(&mut self.state, at(t));
        assert_eq!(built.summary.scheduler_rebuilt, Some("first"));
        let in_flight: Vec<String> = self
            .in_flight
            .iter()
            .map(|(a, waited)| {
                format!(
                    "{} {} ({waited} passes)",
                    a.kind(),
                    a.job().map_or("-", muster_api::ObjectRef::as_str)
                )
            })
            .collect();
        assert_same_writes(
            &pass.actions,
            &built.actions,
            &format!("{t}, writes in flight {in_flight:?}"),
        );
        assert_same_findings(&pass.summary, &built.summary, t);
        // A pass writes a job's status at most once: two writes would race, and the second
        // queued would replace the first unsent while both counted as in flight.
        let mut status_writes = std::collections::BTreeSet::new();
        for action in &pass.actions {
            if let (Action::JobStatus { .. }, Some(job)) = (action, action.job()) {
                assert!(
                    status_writes.insert(job.clone()),
                    "{t}: two status writes of {job} in one pass: {:#?}",
                    pass.actions
                );
            }
        }
        let tally = &mut self.tally;
        tally.passes += 1;
        tally.kept += usize::from(pass.summary.scheduler_rebuilt.is_none());
        tally.admitted += pass.summary.admitted;
        tally.preempted += pass.summary.preempted;
        tally.restarted += pass.summary.evicted.get("restart").copied().unwrap_or(0);
        for action in pass.actions {
            match &action {
                Action::Provision { .. } => tally.provisions += 1,
                Action::Release { job, .. } if job.starts_with("team-c/") => {
                    tally.released_on_bought += 1;
                }
                Action::Release { job, .. } if job.starts_with("team-s/") => {
                    tally.released_shares += 1;
                }
                _ => {}
            }
            if let Some(action) = self.state.defer(action) {
                self.in_flight.push((action, 0));
            }
        }
    }

    /// The writes in flight end as `draws` say, in an order they also give; some stay in
    /// flight (at most three passes). The sender sends a few queued statuses first.
    fn land(&mut self, draws: &[u8]) {
        let draw = |i: usize| draws[i % draws.len()];
        for _ in 0..=draw(0) % 3 {
            if let Some((_, action)) = self.state.next_deferred() {
                self.in_flight.push((action, 0));
            }
        }
        let mut writes: Vec<(usize, (Action, u32))> = std::mem::take(&mut self.in_flight)
            .into_iter()
            .enumerate()
            .collect();
        writes.sort_by_key(|(i, _)| (draw(i * 7 + 3), *i));
        for (i, (action, waited)) in writes {
            let landing = match draw(i) {
                14..=16 if waited < 3 => {
                    self.tally.late += 1;
                    self.in_flight.push((action, waited + 1));
                    continue;
                }
                0..=16 => Landing::Landed,
                17 => Landing::Failed,
                18 => Landing::CutShort,
                19 if i % 2 == 0 => Landing::Partial,
                _ => Landing::AnswerLost,
            };
            self.tally.failed += usize::from(landing != Landing::Landed);
            self.remember(&action, landing);
            land_as(&mut self.state, &action, landing, self.t);
        }
    }

    /// What the script must know of a write that went out: the pods a release made and the
    /// requests for capacity.
    fn remember(&mut self, action: &Action, landing: Landing) {
        match (action, landing) {
            (Action::Release { .. }, Landing::Failed)
            | (Action::Provision { .. }, Landing::Failed | Landing::Partial) => {}
            (Action::Release { job, gang, .. }, _) => {
                self.gangs.insert(job.to_string(), gang.pods.clone());
            }
            (Action::Provision { requests, .. }, _) => {
                for r in requests {
                    let key = format!(
                        "{}/{}",
                        r.metadata.namespace.as_deref().unwrap_or_default(),
                        r.metadata.name.as_deref().unwrap_or_default()
                    );
                    self.requests.entry(key).or_default();
                }
            }
            _ => {}
        }
    }

    /// The job keys that still exist.
    fn live_jobs(&self) -> Vec<String> {
        self.jobs
            .iter()
            .filter(|k| self.state.index().job(k).is_some())
            .cloned()
            .collect()
    }

    fn happen(&mut self, event: &Event) {
        match event {
            Event::Nothing => {}
            Event::Submit(spec) => {
                let name = format!("j{}", self.jobs.len());
                let job = fleet::gang(&name, spec, self.t);
                self.jobs.push(key(&job));
                self.state.apply(job);
            }
            Event::Start { gang, ready } => self.start(*gang, *ready),
            Event::Finish { gang, ok } => self.finish(*gang, *ok),
            Event::Outside { node, gpus } => {
                let nodes: Vec<&String> =
                    self.nodes.keys().filter(|n| !n.starts_with('s')).collect();
                let node = nodes[usize::from(*node) % nodes.len()].clone();
                let pod = outside_pod(&format!("server-{}", self.t), &node, *gpus);
                self.state.apply(pod.clone());
                self.outside.push(pod);
            }
            Event::OutsideEnds => {
                if !self.outside.is_empty() {
                    let pod = self.outside.remove(0);
                    self.state.delete(&pod);
                }
            }
            Event::Delete(i) => {
                let live = self.live_jobs();
                if let Some(k) = pick(&live, *i)
                    && let Some(mut job) = self.state.index().job(k).cloned()
                {
                    if job
                        .metadata
                        .finalizers
                        .as_ref()
                        .is_some_and(|f| !f.is_empty())
                    {
                        job.metadata.deletion_timestamp = Some(Time(at(self.t)));
                        self.state.apply(bump(job));
                    } else {
                        self.state.delete(&job);
                    }
                }
            }
            Event::Suspend(i) => {
                let live = self.live_jobs();
                if let Some(k) = pick(&live, *i)
                    && let Some(mut job) = self.state.index().job(k).cloned()
                {
                    job.spec.suspend = !job.spec.suspend;
                    job.metadata.generation = job.metadata.generation.map(|g| g + 1);
                    self.state.apply(bump(job));
                }
            }
            Event::NodeLost { node, deleted } => {
                let up: Vec<String> = self
                    .nodes
                    .keys()
                    .filter(|n| !self.lost.contains(*n))
                    .cloned()
                    .collect();
                if let Some(name) = pick(&up, *node) {
                    let node = self.nodes[name].clone();
                    if *deleted {
                        self.state.delete(&node);
                    } else {
                        self.state.apply(fleet::not_ready(node));
                    }
                    self.lost.insert(name.clone());
                }
            }
            Event::NodeBack(i) => {
                let lost: Vec<String> = self.lost.iter().cloned().collect();
                if let Some(name) = pick(&lost, *i) {
                    self.state.apply(self.nodes[name].clone());
                    self.lost.remove(name);
                }
            }
            Event::Answer { request, answer } => self.answer(*request, *answer),
        }
    }

    /// The kubelet runs the ungated, unstarted pods of one gang that sit on a Ready node.
    fn start(&mut self, gang: u8, ready: bool) {
        let jobs: Vec<String> = self.gangs.keys().cloned().collect();
        let Some(job) = pick(&jobs, gang) else {
            return;
        };
        for pod in &self.gangs[job] {
            let record = self.state.index().pod(&pod_key(pod));
            let runs = record.is_some_and(|p| {
                !p.gated
                    && !p.deleting
                    && p.phase == PodPhase::Pending
                    && p.member
                        .as_ref()
                        .and_then(|m| m.pinned.as_deref())
                        .is_some_and(|n| !self.lost.contains(n) && self.nodes.contains_key(n))
            });
            if runs {
                self.state.apply(with_phase(pod.clone(), "Running", ready));
            }
        }
    }

    /// Every running pod of one gang succeeds, or its first running pod fails.
    fn finish(&mut self, gang: u8, ok: bool) {
        let running = |w: &World, pods: &[Pod]| -> Vec<Pod> {
            pods.iter()
                .filter(|p| {
                    w.state
                        .index()
                        .pod(&pod_key(p))
                        .is_some_and(|r| r.phase == PodPhase::Running && !r.deleting)
                })
                .cloned()
                .collect()
        };
        let jobs: Vec<String> = self
            .gangs
            .iter()
            .filter(|(_, pods)| !running(self, pods).is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        let Some(job) = pick(&jobs, gang) else {
            return;
        };
        let pods = running(self, &self.gangs[job]);
        if ok {
            for pod in pods {
                self.state.apply(with_phase(pod, "Succeeded", false));
            }
        } else if let Some(pod) = pods.into_iter().next() {
            self.state.apply(with_phase(pod, "Failed", false));
        }
    }

    /// The autoscaler answers one request written: capacity (one node per pod, in a node
    /// pool of its own), a failure, or taking provisioned capacity back.
    fn answer(&mut self, request: u8, answer: Answer) {
        let keys: Vec<String> = self
            .requests
            .keys()
            .filter(|k| self.state.index().provisioning_request(k).is_some())
            .cloned()
            .collect();
        let Some(key) = pick(&keys, request).cloned() else {
            return;
        };
        let Some(mut pr) = self.state.index().provisioning_request(&key).cloned() else {
            return;
        };
        let provisioned = self.requests[&key].clone();
        let condition = match (answer, &provisioned) {
            (Answer::Provisioned, None) => {
                let pool = format!("pool-{}", self.requests.values().flatten().count());
                let pods: i32 = pr.spec.pod_sets.iter().map(|p| p.count).sum();
                for i in 0..pods {
                    let node = fleet::bought_node(&pool, &format!("{pool}-{i}"));
                    self.nodes
                        .insert(node.metadata.name.clone().unwrap_or_default(), node.clone());
                    self.state.apply(node);
                }
                let status = pr.status.get_or_insert_with(Default::default);
                status.provisioning_class_details =
                    BTreeMap::from([("NodePoolName".to_owned(), pool.clone())]);
                self.requests.insert(key.clone(), Some(pool));
                "Provisioned"
            }
            (Answer::Failed, None) => "Failed",
            (Answer::Revoked, Some(_)) => "CapacityRevoked",
            _ => return,
        };
        let status = pr.status.get_or_insert_with(Default::default);
        status.conditions.push(Condition {
            type_: condition.to_owned(),
            status: "True".to_owned(),
            reason: format!("{condition}Reason"),
            message: format!("{condition} by the autoscaler"),
            observed_generation: None,
            last_transition_time: Time(at(self.t)),
        });
        self.state.apply::<ProvisioningRequest>(pr);
    }
}

fn key(job: &GpuJob) -> String {
    format!(
        "{}/{}",
        job.metadata.namespace.as_deref().unwrap_or_default(),
        job.metadata.name.as_deref().unwrap_or_default()
    )
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The `i`-th of `items`, cycling; `None` when there is none.
fn pick<T>(items: &[T], i: u8) -> Option<&T> {
    (!items.is_empty()).then(|| &items[usize::from(i) % items.len()])
}

/// `job` one resource version on (a change the API server made).
fn bump(mut job: GpuJob) -> GpuJob {
    let rv: u64 = job
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    job.metadata.resource_version = Some((rv + 1).to_string());
    job
}

/// A pod of another team on `node`, using `gpus` GPUs.
fn outside_pod(name: &str, node: &str, gpus: u8) -> Pod {
    object(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "other", "uid": format!("uid-{name}"),
                     "resourceVersion": "1"},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "server:1",
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Running"}
    }))
}

/// Plays `script`, comparing every pass (see the module docs); then lets every write land
/// and compares a few quiet passes more.
fn run(script: &Script) -> Coverage {
    let mut world = World::new(script);
    for step in &script.steps {
        world.pass();
        world.land(&step.landings);
        world.happen(&step.event);
        world.t += step.dt;
    }
    for _ in 0..4 {
        world.pass();
        world.land(&[0]);
        world.t += 5;
    }
    world.tally
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn a_kept_scheduler_decides_what_one_built_afresh_would(script in script()) {
        run(&script);
    }
}

/// A release still in flight passes later holds from its admission, as its status will say
/// once it lands, in a scheduler built afresh as in the one that admitted it: a job waiting
/// for its quota is told the same time either way (the first difference the drawn scripts
/// found: built afresh, the gang counted from the current pass and ended later).
#[test]
fn a_release_in_flight_holds_from_its_admission_in_a_scheduler_built_afresh() {
    let runs_ten_minutes = |name: &str, created: i64| {
        let mut j = support::job(name, 2, created);
        j.spec.expected_runtime_seconds = Some(600);
        j
    };
    let mut state = support::cluster(16, vec![runs_ten_minutes("a", 0), runs_ten_minutes("b", 1)]);
    let first = plan(&mut state, at(10));
    let (release, rest): (Vec<Action>, Vec<Action>) = first
        .actions
        .into_iter()
        .partition(|a| matches!(a, Action::Release { .. }));
    assert_eq!(release.len(), 1, "a is admitted");
    support::land_all(&mut state, &rest, 10);
    // a's release is still in flight 90 s later; b waits for a's quota, until 10 + 600.
    let eta_of_b = |actions: &[Action]| {
        actions.iter().find_map(|a| match a {
            Action::JobStatus { job, status, .. } if job == "team-a/b" => {
                status.pending_reason.as_ref().and_then(|r| r.eta.clone())
            }
            _ => None,
        })
    };
    let told = state
        .index()
        .job("team-a/b")
        .and_then(|j| j.status.as_ref())
        .and_then(|s| s.pending_reason.as_ref())
        .and_then(|r| r.eta.clone());
    assert_eq!(told, Some(Time(at(610))));
    let mut fresh = state.clone();
    let built = plan(&mut fresh, at(100));
    let pass = plan(&mut state, at(100));
    assert!(built.summary.scheduler_rebuilt.is_some() && pass.summary.scheduler_rebuilt.is_none());
    assert_eq!(
        eta_of_b(&built.actions),
        None,
        "b's time stands: {:#?}",
        built.actions
    );
    assert_eq!(pass.actions, built.actions);
}

/// A queue status whose write fails is written again by the next pass, even a quiet one
/// (nothing settled, no cycle run): a pass that ran while the write was in flight passed over
/// that queue without comparing it, and the failure changes nothing the index shows, so no
/// pass since has found the status as the queue shows it.
#[test]
fn a_queue_status_write_that_fails_after_a_pass_passed_it_over_is_written_again() {
    let is_queue_status = |a: &Action| {
        matches!(
            a,
            Action::ClusterQueueStatus { .. } | Action::LocalQueueStatus { .. }
        )
    };
    let mut state = support::cluster(32, vec![support::job("a", 1, 0)]);
    let first = plan(&mut state, at(10));
    let (queues, rest): (Vec<Action>, Vec<Action>) =
        first.actions.into_iter().partition(is_queue_status);
    assert_eq!(queues.len(), 2, "a's admission shows in both queues");
    support::land_all(&mut state, &rest, 10);
    // Passes while the queue statuses are in flight, until one writes nothing.
    let mut t = 11;
    loop {
        let pass = plan(&mut state, at(t));
        assert!(
            !pass.actions.iter().any(is_queue_status),
            "{:#?}",
            pass.actions
        );
        support::land_all(&mut state, &pass.actions, t);
        t += 1;
        if pass.actions.is_empty() {
            break;
        }
        assert!(t < 20, "passes never settle: {:#?}", pass.actions);
    }
    for action in &queues {
        state.landed(action, Err("the API server is unavailable".to_owned()), t);
    }
    let mut fresh = state.clone();
    let built = plan(&mut fresh, at(t));
    let pass = plan(&mut state, at(t));
    assert!(!pass.summary.explained, "a quiet pass");
    let admitted = |actions: &[Action]| -> Vec<(String, i32)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::ClusterQueueStatus { name, status } => {
                    Some((name.clone(), status.admitted_jobs))
                }
                Action::LocalQueueStatus { key, status } => {
                    Some((format!("lq:{key}"), status.admitted_jobs))
                }
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        admitted(&pass.actions),
        [
            ("research".to_owned(), 1),
            ("lq:team-a/research".to_owned(), 1)
        ],
        "both statuses written again: {:#?}",
        pass.actions
    );
    assert_eq!(pass.actions.len(), queues.len());
    assert_eq!(pass.actions, built.actions);
}

/// The first difference the drawn scripts found in queue statuses, as they shrank it: four
/// gangs never become Ready and are evicted; the queue statuses that say so stay in flight
/// over the next pass (which settles a job suspended meanwhile and writes nothing), then
/// fail; the quiet passes after it must write them again.
#[test]
fn queue_statuses_written_late_and_failed_are_written_again_by_quiet_passes() {
    let job = JobSpec {
        queue: 0,
        count: 0,
        size: 0,
        priority: 0,
        runtime: None,
    };
    let step = |dt: i64, event: Event, landing: u8| Tick {
        dt,
        event,
        landings: vec![landing],
    };
    let start = || Event::Start {
        gang: 0,
        ready: false,
    };
    let mut steps = vec![
        step(1, Event::Nothing, 0),
        step(1, Event::Nothing, 0),
        step(1, Event::Nothing, 0),
        step(1, start(), 0),
        step(1, Event::Nothing, 0),
        step(1, start(), 0),
        step(320, start(), 0),
        step(1, start(), 0),
        // Every write in flight waits a pass, then every one fails (no node is lost: the
        // event changes nothing).
        step(1, Event::Suspend(0), 14),
        step(1, Event::NodeBack(0), 17),
    ];
    steps.extend((0..20).map(|_| step(1, Event::Nothing, 0)));
    run(&Script {
        fleet: FleetSpec {
            h100_blocks: 2,
            a100: false,
            research_gpus: 24,
            prod_gpus: 8,
            prod_lends: None,
            research_borrows: None,
            within: false,
            reclaim: 0,
            hami_uuids: false,
            cheaper_wait: None,
        },
        jobs: vec![job.clone(), job.clone(), job.clone(), job],
        steps,
    });
}

/// The scripts are worth drawing: across a fixed set of them, the scheduler is kept in a good
/// part of the passes (node changes, evictions and failed releases have it built afresh) and
/// every situation the property is about happens.
#[test]
fn drawn_scripts_reach_every_situation_the_kept_scheduler_must_follow() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut total = Coverage::default();
    for _ in 0..12 {
        let Ok(tree) = script().new_tree(&mut runner) else {
            unreachable!("scripts are always drawn")
        };
        total.add(&run(&tree.current()));
    }
    assert!(total.kept * 4 > total.passes * 3, "{total:?}");
    for (what, n) in [
        ("admissions", total.admitted),
        ("preemptions", total.preempted),
        ("gang restarts", total.restarted),
        ("requests for capacity", total.provisions),
        ("releases onto bought capacity", total.released_on_bought),
        ("releases of shares", total.released_shares),
        ("late writes", total.late),
        ("failed writes", total.failed),
    ] {
        assert!(n > 0, "no {what}: {total:?}");
    }
}

/// A gang whose release landed (its pods made and pinned, its status written) is taken in by
/// the kept scheduler: the holding read back from the status and the pods is the one the
/// scheduler gave it, down to the devices (none, on nodes whose GPUs are counted whole).
#[test]
fn a_landed_release_is_taken_in_by_the_kept_scheduler() {
    let mut state = support::cluster(16, vec![support::job("a", 2, 0), support::job("b", 64, 1)]);
    let first = plan(&mut state, at(10));
    assert_eq!(first.summary.admitted, 1, "{:#?}", first.actions);
    support::land_all(&mut state, &first.actions, 10);
    for t in 11..14 {
        let pass = plan(&mut state, at(t));
        assert_eq!(pass.summary.scheduler_rebuilt, None, "pass at {t}");
        support::land_all(&mut state, &pass.actions, t);
    }
}

/// A waiting job's status write that the sender took from its queue after the pass, and that
/// failed, is written again by the next pass though nothing else moved: that pass did not
/// name the job (its write was still queued when it ended), and the failure changes nothing
/// the index shows (a drawn script's difference: a scheduler built afresh wrote the status,
/// the kept one waited for something to move).
#[test]
fn a_waiting_job_s_status_write_that_failed_after_its_pass_is_written_again_at_the_next() {
    let mut state = support::cluster(8, vec![support::job("a", 1, 0)]);
    let first = plan(&mut state, at(10));
    support::land_all(&mut state, &first.actions, 10);
    // b arrives and waits for a's quota; its status write is queued for the sender.
    state.apply(support::job("b", 1, 20));
    let second = plan(&mut state, at(20));
    let mut queued = 0;
    for action in second.actions {
        match state.defer(action) {
            Some(action) => support::land(&mut state, &action, 20),
            None => queued += 1,
        }
    }
    assert_eq!(queued, 1, "b's status is queued");
    // Passes until one finds nothing to do: what landed has been taken in.
    let quiet = (21..30)
        .find(|t| {
            let pass = plan(&mut state, at(*t));
            support::land_all(&mut state, &pass.actions, *t);
            pass.actions.is_empty()
        })
        .unwrap_or_else(|| unreachable!("no quiet pass"));
    // The sender takes b's status after that pass, and the write fails.
    let (_, write) = state
        .next_deferred()
        .unwrap_or_else(|| unreachable!("b's status is queued"));
    assert_eq!(
        write.job().map(muster_api::ObjectRef::as_str),
        Some("team-a/b")
    );
    support::land_as(&mut state, &write, support::Landing::Failed, quiet);
    let third = plan(&mut state, at(quiet + 1));
    assert!(
        third
            .actions
            .iter()
            .any(|a| matches!(a, Action::JobStatus { job, .. } if job == "team-a/b")),
        "{:#?}",
        third.actions
    );
}
