//! The standard normal distribution's tail and quantiles, as the batch model
//! ([`super::batches`]) needs them: the log of the chance to lie past a point (without
//! underflow far in the tail) and the point a chance lies past.

/// ln √(2π).
const LN_SQRT_2PI: f64 = 0.918_938_533_204_672_8;

/// The log density of the standard normal at `z`.
pub(super) fn ln_density(z: f64) -> f64 {
    -0.5 * z * z - LN_SQRT_2PI
}

/// ln P(Z > `z`) for a standard normal Z, accurate to about 1e-7 relative in the chance, and
/// finite however far in the upper tail (where the chance itself underflows).
pub(super) fn ln_survival(z: f64) -> f64 {
    // P(Z > z) = erfc(z / √2) / 2; the complementary error function by the Chebyshev fit
    // of Numerical Recipes (`erfcc`, fractional error below 1.2e-7), kept in logs.
    let x = z / std::f64::consts::SQRT_2;
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.5 * a);
    let poly = -1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let ln_erfc_abs = t.ln() - a * a + poly;
    let ln_erfc = if x >= 0.0 {
        ln_erfc_abs
    } else {
        (2.0 - ln_erfc_abs.exp()).ln()
    };
    ln_erfc - std::f64::consts::LN_2
}

/// The point a standard normal lies below with chance `p` (clamped inside (0, 1)): Acklam's
/// rational approximation, relative error below 1.2e-9.
pub(super) fn quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.024_25;
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p <= 1.0 - LOW {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::{ln_density, ln_survival, quantile};

    #[test]
    fn the_tail_and_the_quantiles_are_the_normal_distributions() {
        // Reference values of P(Z > z).
        for (z, p) in [
            (0.0, 0.5),
            (1.0, 0.158_655_253_931_457_05),
            (-1.0, 0.841_344_746_068_542_9),
            (2.0, 0.022_750_131_948_179_2),
            (5.0, 2.866_515_718_791_939e-7),
        ] {
            let got = ln_survival(z).exp();
            assert!((got - p).abs() <= 2e-7 * p, "P(Z > {z}) = {got}, not {p}");
        }
        // Far in the tail the chance underflows but its log does not: ln P(Z > 40) ≈ −805.
        let far = ln_survival(40.0);
        assert!(far.is_finite() && (far + 804.608).abs() < 0.01, "{far}");
        for p in [1e-12, 0.001, 0.024, 0.1, 0.5, 0.9, 0.976, 0.999_999] {
            let z = quantile(p);
            let back = 1.0 - ln_survival(z).exp();
            assert!(
                (back - p).abs() <= 1e-6 * p.min(1.0 - p) + 1e-15,
                "{p} → {z} → {back}"
            );
        }
        assert!((ln_density(0.0) + 0.918_938_533).abs() < 1e-9);
        // Chances of 0 and 1 are held inside, so the answer is always a number.
        assert!(quantile(0.0).is_finite() && quantile(1.0).is_finite());
    }
}
