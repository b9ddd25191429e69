//! TPU generations, their GKE accelerator labels and the slice shapes each one offers.
//!
//! A TPU slice is named by its accelerator (node label `cloud.google.com/gke-tpu-accelerator`)
//! and its topology (`cloud.google.com/gke-tpu-topology`, e.g. `2x2x4`). v4, v5p and tpu7x
//! slices are 3D tori, built from hosts of 4 chips; v5e and v6e slices are 2D, built from hosts of
//! 1, 4 or 8 chips. The tables follow GKE's documented topologies.

use std::fmt;

/// Node label with a TPU node's accelerator type.
pub const ACCELERATOR_LABEL: &str = "cloud.google.com/gke-tpu-accelerator";
/// Node label with the topology of the slice a TPU node belongs to.
pub const TOPOLOGY_LABEL: &str = "cloud.google.com/gke-tpu-topology";
/// Node label naming a node's GKE node pool: a multi-host TPU slice is one whole node pool.
pub const NODE_POOL_LABEL: &str = "cloud.google.com/gke-nodepool";

/// One TPU accelerator type as GKE labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accelerator {
    /// The value of [`ACCELERATOR_LABEL`], e.g. `tpu-v5p-slice`.
    pub label: &'static str,
    /// The generation, for people: `v5p`.
    pub generation: &'static str,
    /// The shape family: 2D meshes or 3D tori.
    pub family: ShapeFamily,
    /// How many chips one host (one node, one pod) of this accelerator can have.
    pub chips_per_host: &'static [u32],
    /// The largest slice, in chips.
    pub max_chips: u32,
}

/// How an accelerator's slice shapes are formed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeFamily {
    /// Exactly these 2D shapes (`AxB`), never rotated.
    Mesh2d(&'static [(u32, u32)]),
    /// 3D tori (`AxBxC`): the small shapes listed (as sorted dimensions), or any shape whose
    /// dimensions are all multiples of 4, up to the accelerator's maximum chip count.
    Torus3d(&'static [(u32, u32, u32)]),
}

const V5E_SHAPES: &[(u32, u32)] = &[
    (1, 1),
    (2, 2),
    (2, 4),
    (4, 4),
    (4, 8),
    (8, 8),
    (8, 16),
    (16, 16),
];
const SMALL_TORI: &[(u32, u32, u32)] = &[(1, 2, 2), (2, 2, 2), (2, 2, 4), (2, 4, 4)];

/// Every accelerator Muster knows, in the order error messages list them.
pub const ACCELERATORS: &[Accelerator] = &[
    Accelerator {
        label: "tpu-v4-podslice",
        generation: "v4",
        family: ShapeFamily::Torus3d(SMALL_TORI),
        chips_per_host: &[4],
        max_chips: 4096,
    },
    Accelerator {
        label: "tpu-v5-lite-podslice",
        generation: "v5e",
        family: ShapeFamily::Mesh2d(V5E_SHAPES),
        chips_per_host: &[1, 4, 8],
        max_chips: 256,
    },
    Accelerator {
        label: "tpu-v5-lite-device",
        generation: "v5e",
        family: ShapeFamily::Mesh2d(&[(1, 1), (2, 2), (2, 4)]),
        chips_per_host: &[1, 4, 8],
        max_chips: 8,
    },
    Accelerator {
        label: "tpu-v5p-slice",
        generation: "v5p",
        family: ShapeFamily::Torus3d(SMALL_TORI),
        chips_per_host: &[4],
        max_chips: 8960,
    },
    Accelerator {
        label: "tpu-v6e-slice",
        generation: "v6e",
        family: ShapeFamily::Mesh2d(V5E_SHAPES),
        chips_per_host: &[1, 4, 8],
        max_chips: 256,
    },
    Accelerator {
        label: "tpu7x",
        generation: "tpu7x",
        family: ShapeFamily::Torus3d(SMALL_TORI),
        chips_per_host: &[4],
        max_chips: 9216,
    },
];

/// Looks up an accelerator by its GKE label value.
pub fn accelerator(label: &str) -> Option<&'static Accelerator> {
    ACCELERATORS.iter().find(|a| a.label == label)
}

/// The labels of every known accelerator, comma separated, for messages.
pub fn accelerator_labels() -> String {
    ACCELERATORS
        .iter()
        .map(|a| a.label)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A parsed slice topology such as `2x2x4`, dimensions as written.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shape(Vec<u32>);

/// Why a topology string is not a slice of an accelerator.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{shape:?} is not a valid {accelerator} shape; valid shapes are {valid}")]
pub struct ShapeError {
    /// The topology as written.
    pub shape: String,
    /// The accelerator label.
    pub accelerator: &'static str,
    /// A description of the valid shapes.
    pub valid: String,
}

impl Shape {
    /// Parses `AxB` or `AxBxC` with positive dimensions; `None` when it is neither.
    pub fn parse(text: &str) -> Option<Shape> {
        let dims: Option<Vec<u32>> = text
            .split('x')
            .map(|d| {
                d.parse::<u32>()
                    .ok()
                    .filter(|v| *v > 0 && !d.starts_with('+'))
            })
            .collect();
        dims.filter(|d| (2..=3).contains(&d.len())).map(Shape)
    }

    /// The dimensions as written.
    pub fn dims(&self) -> &[u32] {
        &self.0
    }

    /// Chips in the slice: the product of the dimensions (saturating).
    pub fn chips(&self) -> u32 {
        self.0.iter().fold(1u32, |acc, d| acc.saturating_mul(*d))
    }

    /// The dimensions sorted ascending: shapes with the same canonical form are rotations of each
    /// other.
    #[must_use]
    pub fn canonical(&self) -> Shape {
        let mut d = self.0.clone();
        d.sort_unstable();
        Shape(d)
    }

    /// Whether `other` is this shape, or (when `allow_rotation` and both are 3D) a permutation of
    /// it. 2D shapes never rotate.
    pub fn matches(&self, other: &Shape, allow_rotation: bool) -> bool {
        if self == other {
            return true;
        }
        allow_rotation
            && self.0.len() == 3
            && other.0.len() == 3
            && self.canonical() == other.canonical()
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u32::to_string).collect();
        f.write_str(&parts.join("x"))
    }
}

impl Accelerator {
    /// Checks that `text` is a slice shape this accelerator offers.
    pub fn shape(&self, text: &str) -> Result<Shape, ShapeError> {
        let err = || ShapeError {
            shape: text.to_owned(),
            accelerator: self.label,
            valid: self.valid_shapes(),
        };
        let shape = Shape::parse(text).ok_or_else(err)?;
        let ok = match self.family {
            ShapeFamily::Mesh2d(list) => {
                matches!(shape.dims(), [a, b] if list.contains(&(*a, *b)))
            }
            ShapeFamily::Torus3d(small) => match shape.canonical().dims() {
                [a, b, c] => {
                    small.contains(&(*a, *b, *c))
                        || ([a, b, c].iter().all(|d| **d % 4 == 0)
                            && u64::from(*a) * u64::from(*b) * u64::from(*c)
                                <= u64::from(self.max_chips))
                }
                _ => false,
            },
        };
        if ok { Ok(shape) } else { Err(err()) }
    }

    /// Whether this accelerator's shapes are 3D (and so may be rotated).
    pub fn is_3d(&self) -> bool {
        matches!(self.family, ShapeFamily::Torus3d(_))
    }

    /// The valid shapes in words, for error messages.
    pub fn valid_shapes(&self) -> String {
        match self.family {
            ShapeFamily::Mesh2d(list) => list
                .iter()
                .map(|(a, b)| format!("{a}x{b}"))
                .collect::<Vec<_>>()
                .join(", "),
            ShapeFamily::Torus3d(small) => {
                let listed: Vec<String> = small
                    .iter()
                    .map(|(a, b, c)| format!("{c}x{b}x{a}"))
                    .collect();
                format!(
                    "{} (in any order), or AxBxC with every dimension a multiple of 4 and at most {} chips",
                    listed.join(", "),
                    self.max_chips
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(label: &str) -> &'static Accelerator {
        accelerator(label).unwrap_or(&ACCELERATORS[0])
    }

    #[test]
    fn v5e_rejects_3x3_with_the_list() {
        let err = acc("tpu-v5-lite-podslice")
            .shape("3x3")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "\"3x3\" is not a valid tpu-v5-lite-podslice shape; valid shapes are 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16"
            )
        );
    }

    #[test]
    fn v5p_accepts_small_and_multiple_of_four_tori() {
        let v5p = acc("tpu-v5p-slice");
        for ok in ["2x2x1", "2x2x4", "2x4x2", "4x4x4", "8x8x16", "16x20x28"] {
            assert!(v5p.shape(ok).is_ok(), "{ok}");
        }
        for bad in [
            "2x2", "3x3x3", "4x4x6", "32x32x32", "0x2x2", "2x2x2x2", "axbxc", "",
        ] {
            assert!(v5p.shape(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn chips_and_rotation() {
        let a = Shape::parse("2x2x4").unwrap_or(Shape(vec![]));
        let b = Shape::parse("4x2x2").unwrap_or(Shape(vec![]));
        assert_eq!(a.chips(), 16);
        assert!(!a.matches(&b, false));
        assert!(a.matches(&b, true));
        let flat = Shape::parse("2x4").unwrap_or(Shape(vec![]));
        let turned = Shape::parse("4x2").unwrap_or(Shape(vec![]));
        assert!(!flat.matches(&turned, true), "2D shapes never rotate");
        assert_eq!(a.to_string(), "2x2x4");
    }

    #[test]
    fn every_generation_is_known() {
        for label in [
            "tpu-v4-podslice",
            "tpu-v5-lite-podslice",
            "tpu-v5p-slice",
            "tpu-v6e-slice",
            "tpu7x",
        ] {
            assert!(accelerator(label).is_some(), "{label}");
        }
    }
}
