//! Drawn scripts of what happens around the controller between its passes, over the fleet
//! of [`super::fleet`]: jobs arrive, gangs start, finish, fail, are deleted or suspended,
//! nodes are lost and come back, other teams' pods come and go, the autoscaler answers, and
//! every pass's writes land as a draw says.

use proptest::prelude::*;

use super::fleet::{FleetSpec, JobSpec};

/// Something that happens between two passes.
#[derive(Clone, Debug)]
pub enum Event {
    Nothing,
    Submit(JobSpec),
    /// The kubelet starts the ungated pods of a released gang, Ready or never Ready.
    Start {
        gang: u8,
        ready: bool,
    },
    /// Every running pod of a gang succeeds, or one of them fails.
    Finish {
        gang: u8,
        ok: bool,
    },
    /// A pod of another team starts on a node.
    Outside {
        node: u8,
        gpus: u8,
    },
    /// The oldest pod of another team ends.
    OutsideEnds,
    /// A job is deleted (marked for deletion while it carries Muster's finalizer).
    Delete(u8),
    /// A job is suspended, or resumed.
    Suspend(u8),
    /// A node is deleted, or stops being Ready.
    NodeLost {
        node: u8,
        deleted: bool,
    },
    /// A lost node is back.
    NodeBack(u8),
    /// The autoscaler answers a ProvisioningRequest.
    Answer {
        request: u8,
        answer: Answer,
    },
}

#[derive(Clone, Copy, Debug)]
pub enum Answer {
    /// Capacity provisioned: new nodes in a node pool of their own.
    Provisioned,
    Failed,
    /// Capacity provisioned earlier is taken back.
    Revoked,
}

#[derive(Clone, Debug)]
pub struct Tick {
    /// Seconds to the next pass.
    pub dt: i64,
    /// What happens before it.
    pub event: Event,
    /// How the writes in flight end before the next pass: one draw per write, cycled (most
    /// land; some wait a pass or more; a few fail in one of four ways).
    pub landings: Vec<u8>,
}

/// A fleet, the jobs it starts with, and what happens pass after pass.
#[derive(Clone, Debug)]
pub struct Script {
    /// The fleet.
    pub fleet: FleetSpec,
    /// The jobs there at the first pass.
    pub jobs: Vec<JobSpec>,
    /// The passes.
    pub steps: Vec<Tick>,
}

fn job_spec() -> impl Strategy<Value = JobSpec> {
    (
        0u8..4,
        0u8..3,
        0u8..9,
        0u8..3,
        proptest::option::of(0u16..600),
    )
        .prop_map(|(queue, count, size, priority, runtime)| JobSpec {
            queue,
            count,
            size,
            priority,
            runtime,
        })
}

fn fleet_spec() -> impl Strategy<Value = FleetSpec> {
    (
        (2u8..=3, any::<bool>(), any::<bool>()),
        (
            prop::sample::select(vec![16u32, 24, 32]),
            prop::sample::select(vec![8u32, 16]),
            proptest::option::of(prop::sample::select(vec![0u32, 8])),
            proptest::option::of(prop::sample::select(vec![0u32, 8, 16])),
        ),
        (
            any::<bool>(),
            0u8..3,
            proptest::option::of(prop::sample::select(vec![0i64, 300])),
        ),
    )
        .prop_map(
            |(
                (h100_blocks, a100, hami_uuids),
                (research_gpus, prod_gpus, prod_lends, research_borrows),
                (within, reclaim, cheaper_wait),
            )| FleetSpec {
                h100_blocks,
                a100,
                research_gpus,
                prod_gpus,
                prod_lends,
                research_borrows,
                within,
                reclaim,
                hami_uuids,
                cheaper_wait,
            },
        )
}

fn event() -> impl Strategy<Value = Event> {
    let answer = prop_oneof![
        3 => Just(Answer::Provisioned),
        1 => Just(Answer::Failed),
        1 => Just(Answer::Revoked),
    ];
    prop_oneof![
        1 => Just(Event::Nothing),
        5 => job_spec().prop_map(Event::Submit),
        5 => (any::<u8>(), prop::bool::weighted(0.85))
            .prop_map(|(gang, ready)| Event::Start { gang, ready }),
        4 => (any::<u8>(), prop::bool::weighted(0.8))
            .prop_map(|(gang, ok)| Event::Finish { gang, ok }),
        1 => (any::<u8>(), 1u8..=8).prop_map(|(node, gpus)| Event::Outside { node, gpus }),
        1 => Just(Event::OutsideEnds),
        1 => any::<u8>().prop_map(Event::Delete),
        1 => any::<u8>().prop_map(Event::Suspend),
        1 => (any::<u8>(), any::<bool>())
            .prop_map(|(node, deleted)| Event::NodeLost { node, deleted }),
        1 => any::<u8>().prop_map(Event::NodeBack),
        3 => (any::<u8>(), answer).prop_map(|(request, answer)| Event::Answer { request, answer }),
    ]
}

fn step() -> impl Strategy<Value = Tick> {
    (
        prop::sample::select(vec![1i64, 5, 30, 120, 320]),
        event(),
        proptest::collection::vec(0u8..20, 1..4),
    )
        .prop_map(|(dt, event, landings)| Tick {
            dt,
            event,
            landings,
        })
}

/// A drawn script: 30 to 60 passes.
pub fn script() -> impl Strategy<Value = Script> {
    (
        fleet_spec(),
        proptest::collection::vec(job_spec(), 2..8),
        proptest::collection::vec(step(), 30..60),
    )
        .prop_map(|(fleet, jobs, steps)| Script { fleet, jobs, steps })
}
