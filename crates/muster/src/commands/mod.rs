//! The subcommands.

pub mod blocks;
pub mod controller;
pub mod crds;
pub mod dashboard;
pub mod eta;
pub mod eta_accuracy;
pub mod fill;
pub mod fit;
pub mod jobs;
pub mod live;
pub mod queues;
pub mod sim;
pub mod validate;

/// The runtime of a command that talks to a live cluster.
pub fn live_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context as _;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}
