//! The subcommands.

pub mod crds;
pub mod fit;
pub mod validate;
mod yaml;
