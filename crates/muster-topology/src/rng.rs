//! A deterministic pseudo-random sequence (SplitMix64): the same seed gives the same draws on
//! every machine. The simulator's workloads and the seeded placement policies draw from it.

/// FNV-1a of `text`: a seed named by a string (a job, a batch, a request), the same on every
/// machine, in every run and on every thread count.
pub fn text_seed(text: &str) -> u64 {
    text_seed_joined("", text)
}

/// [`text_seed`] of `prefix` followed by `text`, without joining them: for seeds named by a
/// kind of thing and its name, drawn too often to format each name.
pub fn text_seed_joined(prefix: &str, text: &str) -> u64 {
    prefix
        .bytes()
        .chain(text.bytes())
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// SplitMix64 from a seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A sequence for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// An index below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        let n = u64::try_from(n.max(1)).unwrap_or(u64::MAX);
        usize::try_from(self.next_u64() % n).unwrap_or(0)
    }

    /// Uniform in (0, 1].
    pub fn unit(&mut self) -> f64 {
        #[expect(
            clippy::cast_precision_loss,
            reason = "53 random bits are exact in f64"
        )]
        let x = (self.next_u64() >> 11) as f64;
        (x + 1.0) / 9_007_199_254_740_992.0
    }

    /// Exponentially distributed with `mean`.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * self.unit().ln()
    }
}

#[cfg(test)]
mod tests {
    use super::{text_seed, text_seed_joined};

    #[test]
    fn a_joined_seed_is_the_seed_of_the_joined_text() {
        for (prefix, text) in [("", ""), ("family ", "team-a"), ("", "ns/job"), ("a", "")] {
            assert_eq!(
                text_seed_joined(prefix, text),
                text_seed(&format!("{prefix}{text}"))
            );
        }
        // FNV-1a's offset basis, and a known value: the seeds of earlier runs stay.
        assert_eq!(text_seed(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(text_seed("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
