//! Test tooling for Muster, used only as a dev-dependency: a real Kubernetes control plane on
//! loopback ([`TestCluster`]), fake GPU nodes ([`nodes`]) and a fake kubelet that runs the pods
//! bound to them ([`FakeKubelet`]); a fault proxy that stands between a client and the API server
//! and fails, drops or delays a seeded share of its requests ([`proxy::FaultProxy`]); and the
//! invariant checker that watches a cluster and reports every broken promise of gang admission
//! ([`checker::Checker`]); a fake JobSet controller for clusters that queue JobSets
//! ([`jobsets::FakeJobSetController`]); and a headless browser for page tests
//! ([`browser::Browser`]).
//!
//! Tests need the control-plane binaries in the folder named by `MUSTER_KUBE_BIN`; without it
//! they print one line and pass:
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! use muster_testkit::{ClusterOptions, FakeKubelet, FakeNodes, KubeletOptions, NodeSpec};
//!
//! let cluster = muster_testkit::cluster_or_skip!(ClusterOptions::default(), Ok(()));
//! let nodes = FakeNodes::start(cluster.client());
//! nodes.create(&NodeSpec::new("gpu-1").gpus(8)).await?;
//! let kubelet = FakeKubelet::start(cluster.client(), KubeletOptions::default());
//! // ... create jobs, run `muster controller --kubeconfig <cluster.kubeconfig_path()>` ...
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

pub mod browser;
pub mod checker;
pub mod cluster;
pub mod crds;
mod credentials;
pub mod jobsets;
pub mod kubelet;
pub mod nodes;
mod process;
pub mod proxy;
pub mod wait;

pub use cluster::{ClusterOptions, Component, TestCluster, UpstreamCrd};
pub use kubelet::{FakeKubelet, KubeletOptions, KubeletStats};
pub use nodes::{FakeNodes, NodeSpec, create_node, create_nodes, kill_node, repair_node};
pub use wait::eventually;

/// Starts a [`TestCluster`] with the given [`ClusterOptions`], or, when `MUSTER_KUBE_BIN` is not
/// set, prints one line to stderr and `return`s from the enclosing test (with the second
/// argument, if given, e.g. `Ok(())` in a test returning a `Result`). Panics if the cluster
/// fails to start; the message ends with the failing component's log.
#[macro_export]
macro_rules! cluster_or_skip {
    ($options:expr) => {
        $crate::cluster_or_skip!($options, ())
    };
    ($options:expr, $skipped:expr) => {
        match $crate::TestCluster::start($options).await {
            ::std::result::Result::Ok(::std::option::Option::Some(cluster)) => cluster,
            ::std::result::Result::Ok(::std::option::Option::None) => return $skipped,
            ::std::result::Result::Err(error) => {
                ::std::panic!("the test cluster did not start: {error:#}")
            }
        }
    };
}
