//! Shared test support.

pub mod upstream;
