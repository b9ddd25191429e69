//! The subcommands.

pub mod controller;
pub mod crds;
pub mod fill;
pub mod fit;
pub mod sim;
pub mod validate;
