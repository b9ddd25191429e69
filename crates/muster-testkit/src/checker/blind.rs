//! How long the checker was blind: the time between a watch's break and the end of the relist
//! that followed, per watch and over all of them.

use std::collections::BTreeMap;

/// The blind spells of the checker's watches.
#[derive(Debug, Default)]
pub(super) struct Blind {
    /// (watch kind, from, to), seconds into the run.
    spells: Vec<(String, f64, f64)>,
}

impl Blind {
    /// The `kind` watch saw nothing from `from` to `to`.
    pub(super) fn add(&mut self, kind: &str, from: f64, to: f64) {
        self.spells.push((kind.to_owned(), from, to.max(from)));
    }

    /// How long the checker was blind to something, seconds: spells of different watches
    /// that overlap count once.
    pub(super) fn seconds(&self) -> f64 {
        super::spells::covered(
            self.spells.iter().map(|(_, from, to)| (*from, *to)),
            f64::NEG_INFINITY,
            f64::INFINITY,
        )
    }

    /// How long each watch was blind, seconds.
    pub(super) fn by_kind(&self) -> BTreeMap<String, f64> {
        let mut by_kind = BTreeMap::new();
        for (kind, from, to) in &self.spells {
            *by_kind.entry(kind.clone()).or_default() += to - from;
        }
        by_kind
    }
}

#[cfg(test)]
mod tests {
    use super::Blind;

    #[test]
    fn overlapping_spells_of_two_watches_count_once_in_the_total() {
        let mut blind = Blind::default();
        assert!(blind.seconds().abs() < 1e-9);
        blind.add("Pod", 10.0, 14.0);
        blind.add("GpuJob", 12.0, 15.0);
        blind.add("Pod", 30.0, 31.5);
        assert!((blind.seconds() - 6.5).abs() < 1e-9, "{}", blind.seconds());
        let by_kind = blind.by_kind();
        assert!((by_kind["Pod"] - 5.5).abs() < 1e-9);
        assert!((by_kind["GpuJob"] - 3.0).abs() < 1e-9);
    }
}
