//! Exact resource quantities.
//!
//! Kubernetes writes amounts as quantity strings (`500m`, `8`, `80Gi`, `1e3`). Muster parses them
//! once into [`Amount`], an integer count of *milli-units*, and does every piece of quota and
//! capacity arithmetic on integers: no floating point, no rounding surprises. Arithmetic saturates
//! at [`Amount::MAX`] (about 18 × 10¹⁵ units, e.g. 16 PiB of memory), which in quota means
//! "unlimited" rather than wrapping around.

use std::fmt;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// An exact, non-negative amount of a resource, counted in milli-units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Amount(u64);

/// Why a quantity string could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The string was empty.
    #[error("empty quantity; write a number such as 8, 500m or 80Gi")]
    Empty,
    /// The amount was below zero; resources are never negative.
    #[error("{0:?} is negative; resource amounts must be zero or more")]
    Negative(String),
    /// The string is not a Kubernetes quantity.
    #[error(
        "{0:?} is not a Kubernetes quantity; write a number with an optional suffix \
         (m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)"
    )]
    Malformed(String),
}

impl Amount {
    /// Nothing.
    pub const ZERO: Amount = Amount(0);
    /// The largest representable amount; sums saturate here.
    pub const MAX: Amount = Amount(u64::MAX);

    /// An amount of `milli` thousandths of a unit.
    pub const fn from_milli(milli: u64) -> Amount {
        Amount(milli)
    }

    /// An amount of whole units (GPUs, bytes, cores), saturating.
    pub const fn from_units(units: u64) -> Amount {
        Amount(units.saturating_mul(1000))
    }

    /// The amount in milli-units.
    pub const fn milli(self) -> u64 {
        self.0
    }

    /// The amount in whole units, rounded up (a pod asking for 1500m CPU needs 2 cores' worth of
    /// a whole-unit resource).
    pub const fn units_ceil(self) -> u64 {
        self.0.div_ceil(1000)
    }

    /// Whether the amount is a whole number of units (GPUs must be).
    pub const fn is_whole(self) -> bool {
        self.0.is_multiple_of(1000)
    }

    /// Whether this is zero.
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// `self + other`, saturating at [`Amount::MAX`].
    #[must_use]
    pub const fn saturating_add(self, other: Amount) -> Amount {
        Amount(self.0.saturating_add(other.0))
    }

    /// `self - other`, or zero when `other` is larger.
    #[must_use]
    pub const fn saturating_sub(self, other: Amount) -> Amount {
        Amount(self.0.saturating_sub(other.0))
    }

    /// `self - other`, or `None` when `other` is larger.
    pub const fn checked_sub(self, other: Amount) -> Option<Amount> {
        match self.0.checked_sub(other.0) {
            Some(v) => Some(Amount(v)),
            None => None,
        }
    }

    /// `self × n`, saturating.
    #[must_use]
    pub const fn saturating_mul(self, n: u64) -> Amount {
        Amount(self.0.saturating_mul(n))
    }

    /// Parses a Kubernetes quantity string. Fractions of a milli-unit round up, as Kubernetes
    /// does when it reads a request as milli-units.
    pub fn parse(text: &str) -> Result<Amount, QuantityError> {
        parse_milli(text).map(Amount)
    }

    /// The amount as a Kubernetes [`Quantity`] that parses back to the same amount.
    pub fn to_quantity(self) -> Quantity {
        Quantity(self.to_string())
    }

    /// The amount as a quantity string in the usual style of `resource`: binary suffixes
    /// (`80Gi`) for memory and storage, plain numbers otherwise. Always exact.
    pub fn format_for(self, resource: &str) -> String {
        const BINARY: [(&str, u64); 6] = [
            ("Ei", 1 << 60),
            ("Pi", 1 << 50),
            ("Ti", 1 << 40),
            ("Gi", 1 << 30),
            ("Mi", 1 << 20),
            ("Ki", 1 << 10),
        ];
        let bytes_like = resource.contains("memory") || resource.contains("storage");
        if bytes_like && self.is_whole() && !self.is_zero() {
            let units = self.0 / 1000;
            for (suffix, size) in BINARY {
                if units.is_multiple_of(size) {
                    return format!("{}{suffix}", units / size);
                }
            }
        }
        self.to_string()
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_whole() {
            write!(f, "{}", self.0 / 1000)
        } else {
            write!(f, "{}m", self.0)
        }
    }
}

impl FromStr for Amount {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Amount::parse(s)
    }
}

impl TryFrom<&Quantity> for Amount {
    type Error = QuantityError;

    fn try_from(q: &Quantity) -> Result<Self, Self::Error> {
        Amount::parse(&q.0)
    }
}

impl std::iter::Sum for Amount {
    fn sum<I: Iterator<Item = Amount>>(iter: I) -> Amount {
        iter.fold(Amount::ZERO, Amount::saturating_add)
    }
}

/// Parses `text` into milli-units: `<sign><digits>[.<digits>]<suffix>`.
fn parse_milli(text: &str) -> Result<u64, QuantityError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    let malformed = || QuantityError::Malformed(text.to_owned());
    let (negative, s) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_len = s
        .bytes()
        .position(|b| !(b.is_ascii_digit() || b == b'.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_len);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(malformed());
    }
    let (exp10, exp2) = suffix_exponents(suffix).ok_or_else(malformed)?;

    // The digits as one integer, with the decimal point moved into the exponent. Leading zeros
    // carry no value, and more than 38 significant digits cannot be exact in u128 anyway.
    let digits = format!("{whole}{fraction}");
    let significant = digits.trim_start_matches('0');
    let zero = significant.trim_end_matches('0').is_empty();
    if zero {
        return Ok(0);
    }
    if negative {
        return Err(QuantityError::Negative(text.to_owned()));
    }
    let fraction_len = i32::try_from(fraction.len()).map_err(|_| malformed())?;
    // milli-units: one more factor of 10^3.
    let mut exp10 = exp10 - fraction_len + 3;
    let mut trimmed = significant;
    while exp10 < 0 && trimmed.ends_with('0') {
        trimmed = &trimmed[..trimmed.len() - 1];
        exp10 += 1;
    }
    if trimmed.len() > 38 {
        return Ok(u64::MAX);
    }
    let mut value: u128 = trimmed.parse().map_err(|_| malformed())?;
    // Multiply by 2^exp2 and 10^exp10 (exp10 ≥ 0) saturating; divide rounding up when exp10 < 0.
    for _ in 0..exp2 {
        value = value.saturating_mul(2);
    }
    if exp10 >= 0 {
        for _ in 0..exp10 {
            value = value.saturating_mul(10);
            if value > u128::from(u64::MAX) {
                return Ok(u64::MAX);
            }
        }
    } else {
        let mut divisor: u128 = 1;
        for _ in 0..(-exp10) {
            divisor = divisor.saturating_mul(10);
        }
        value = value.div_ceil(divisor);
    }
    Ok(u64::try_from(value).unwrap_or(u64::MAX))
}

/// The powers of ten and two a quantity suffix stands for.
fn suffix_exponents(suffix: &str) -> Option<(i32, u32)> {
    let decimal = match suffix {
        "" => Some(0),
        "n" => Some(-9),
        "u" => Some(-6),
        "m" => Some(-3),
        "k" => Some(3),
        "M" => Some(6),
        "G" => Some(9),
        "T" => Some(12),
        "P" => Some(15),
        "E" => Some(18),
        _ => None,
    };
    if let Some(e) = decimal {
        return Some((e, 0));
    }
    let binary = match suffix {
        "Ki" => Some(10),
        "Mi" => Some(20),
        "Gi" => Some(30),
        "Ti" => Some(40),
        "Pi" => Some(50),
        "Ei" => Some(60),
        _ => None,
    };
    if let Some(e) = binary {
        return Some((0, e));
    }
    // Decimal exponent: e3, E-2, e+6. Exponents beyond ±64 are out of any resource's range.
    let rest = suffix.strip_prefix(['e', 'E'])?;
    let exp: i32 = rest.parse().ok()?;
    (-64..=64).contains(&exp).then_some((exp, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milli(s: &str) -> u64 {
        match Amount::parse(s) {
            Ok(a) => a.milli(),
            Err(e) => unreachable!("{s}: {e}"),
        }
    }

    #[test]
    fn parses_every_suffix_family() {
        assert_eq!(milli("8"), 8_000);
        assert_eq!(milli("500m"), 500);
        assert_eq!(milli("1.5"), 1_500);
        assert_eq!(milli("0.5"), 500);
        assert_eq!(milli(".5"), 500);
        assert_eq!(milli("2k"), 2_000_000);
        assert_eq!(milli("1Ki"), 1_024_000);
        assert_eq!(milli("80Gi"), 80 * (1 << 30) * 1000);
        assert_eq!(milli("1e3"), 1_000_000);
        assert_eq!(milli("1E-3"), 1);
        assert_eq!(milli("+4"), 4_000);
        assert_eq!(milli("0"), 0);
        assert_eq!(milli("-0"), 0);
        assert_eq!(milli("007"), 7_000);
    }

    #[test]
    fn sub_milli_fractions_round_up() {
        assert_eq!(milli("1u"), 1);
        assert_eq!(milli("1500u"), 2);
        assert_eq!(milli("0.0001"), 1);
        assert_eq!(milli("1000000n"), 1);
    }

    #[test]
    fn huge_values_saturate() {
        assert_eq!(Amount::parse("100Ei"), Ok(Amount::MAX));
        assert_eq!(Amount::parse("1e60"), Ok(Amount::MAX));
        assert_eq!(
            Amount::parse("123456789012345678901234567890123456789012345"),
            Ok(Amount::MAX)
        );
    }

    #[test]
    fn rejects_what_kubernetes_rejects() {
        for bad in [
            "", "abc", "1.2.3", "8gb", "1KiB", ".", "1e", "1e999", "m", "--1",
        ] {
            assert!(Amount::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(matches!(
            Amount::parse("-1"),
            Err(QuantityError::Negative(_))
        ));
    }

    #[test]
    fn display_round_trips() {
        for s in ["8", "500m", "1500m", "0", "123456789"] {
            let a = Amount::parse(s).unwrap_or_default();
            assert_eq!(a.to_string(), s);
            assert_eq!(Amount::parse(&a.to_string()), Ok(a));
        }
    }

    #[test]
    fn format_for_memory_uses_binary_suffixes() {
        let a = Amount::parse("80Gi").unwrap_or_default();
        assert_eq!(a.format_for("memory"), "80Gi");
        assert_eq!(a.format_for("nvidia.com/gpu"), a.to_string());
        let odd = Amount::parse("1000").unwrap_or_default();
        assert_eq!(odd.format_for("memory"), "1000");
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(
            Amount::MAX.saturating_add(Amount::from_units(1)),
            Amount::MAX
        );
        assert_eq!(
            Amount::ZERO.saturating_sub(Amount::from_units(1)),
            Amount::ZERO
        );
        assert_eq!(Amount::ZERO.checked_sub(Amount::from_milli(1)), None);
        assert_eq!(Amount::from_milli(1500).units_ceil(), 2);
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,40}") {
            let _ = Amount::parse(&s);
        }

        #[test]
        fn display_parses_back(m in proptest::num::u64::ANY) {
            let a = Amount::from_milli(m);
            proptest::prop_assert_eq!(Amount::parse(&a.to_string()), Ok(a));
            proptest::prop_assert_eq!(Amount::parse(&a.format_for("memory")), Ok(a));
        }
    }
}
