//! The subcommands.

pub mod crds;
pub mod validate;
