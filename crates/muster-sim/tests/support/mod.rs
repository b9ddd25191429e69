//! What the simulator's test files share: loading a scenario and running it, failing the test
//! with the reason when either cannot be done.

use std::path::{Path, PathBuf};

use muster_sim::engine;
use muster_sim::scenario::Loaded;

/// The crate's folder, where `tests/fixtures/` and (two up) `simulations/` are found.
pub fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The scenario at `path`.
pub fn load(path: &Path) -> Loaded {
    match Loaded::from_file(path, None) {
        Ok(l) => l,
        Err(e) => unreachable!("{}: {e}", path.display()),
    }
}

/// A run of `loaded` with `policy`.
pub fn run(loaded: &Loaded, policy: &str) -> engine::Run {
    match engine::run(loaded, policy, &mut |_, _| {}) {
        Ok(r) => r,
        Err(e) => unreachable!("{e}"),
    }
}
