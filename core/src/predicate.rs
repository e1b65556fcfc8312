//! Predicates (what an agent intends to do to a resource) and the 6×6 conflict matrix.
//!
//! Contract: [`Predicate::parse`] accepts the six names in any ASCII case and nothing else;
//! [`Predicate::conflicts_with`] is the symmetric matrix of docs/SPEC.md §4.

use crate::error::{Error, ErrorCode};
use alloc::format;

/// What an agent intends to do to a resource. The variants say which predicates they share a
/// resource with; conflicts count only between different sessions on overlapping resources
/// (docs/SPEC.md §3, §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "SCREAMING_SNAKE_CASE"))]
pub enum Predicate {
    /// `PROVIDES`: one provider at a time; shares with CONSUMES and DEPENDS_ON.
    Provides = 0,
    /// `CONSUMES` (reads): shares with PROVIDES, CONSUMES and DEPENDS_ON.
    Consumes = 1,
    /// `MUTATES` (writes): conflicts with every predicate.
    Mutates = 2,
    /// `DELETES`: conflicts with every predicate.
    Deletes = 3,
    /// `DEPENDS_ON`: shares with PROVIDES, CONSUMES and DEPENDS_ON.
    DependsOn = 4,
    /// `RENAMES`: conflicts with every predicate.
    Renames = 5,
}

/// Row `held`, bit `requested`: set when the two conflict. Rows for MUTATES, DELETES and
/// RENAMES conflict with everything; PROVIDES is exclusive among providers (one provider of a
/// thing at a time) but lets consumers and dependants in.
const CONFLICTS: [u8; 6] = [
    0b10_1101, // PROVIDES: PROVIDES, MUTATES, DELETES, RENAMES
    0b10_1100, // CONSUMES: MUTATES, DELETES, RENAMES
    0b11_1111, // MUTATES
    0b11_1111, // DELETES
    0b10_1100, // DEPENDS_ON: MUTATES, DELETES, RENAMES
    0b11_1111, // RENAMES
];

impl Predicate {
    /// All predicates in matrix order.
    pub const ALL: [Predicate; 6] = [
        Predicate::Provides,
        Predicate::Consumes,
        Predicate::Mutates,
        Predicate::Deletes,
        Predicate::DependsOn,
        Predicate::Renames,
    ];

    /// The canonical upper-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Predicate::Provides => "PROVIDES",
            Predicate::Consumes => "CONSUMES",
            Predicate::Mutates => "MUTATES",
            Predicate::Deletes => "DELETES",
            Predicate::DependsOn => "DEPENDS_ON",
            Predicate::Renames => "RENAMES",
        }
    }

    /// Parses a predicate name, case-insensitively.
    ///
    /// # Errors
    /// `INVALID_PREDICATE` for anything but the six names.
    pub fn parse(text: &str) -> Result<Predicate, Error> {
        // The canonical spelling first: one comparison of lengths and bytes per name.
        if let Some(p) = Predicate::ALL.into_iter().find(|p| p.name() == text) {
            return Ok(p);
        }
        Predicate::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(text))
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::InvalidPredicate,
                    format!(
                        "unknown predicate {text:?}: expected one of PROVIDES, CONSUMES, MUTATES, DELETES, DEPENDS_ON, RENAMES"
                    ),
                )
            })
    }

    /// Whether a lease or queued intent with `self` blocks a request for `other` on an
    /// overlapping resource (symmetric).
    #[inline]
    pub const fn conflicts_with(self, other: Predicate) -> bool {
        CONFLICTS[self as usize] & (1 << other as u8) != 0
    }
}

impl core::fmt::Display for Predicate {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_is_symmetric_and_matches_spec() {
        use Predicate::*;
        let compatible = [
            (Provides, Consumes),
            (Provides, DependsOn),
            (Consumes, Consumes),
            (Consumes, DependsOn),
            (DependsOn, DependsOn),
        ];
        for a in Predicate::ALL {
            for b in Predicate::ALL {
                let ok = compatible.contains(&(a, b)) || compatible.contains(&(b, a));
                assert_eq!(a.conflicts_with(b), !ok, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn parse_is_case_insensitive_and_strict() {
        assert_eq!(
            Predicate::parse("depends_on").unwrap(),
            Predicate::DependsOn
        );
        assert_eq!(Predicate::parse("Mutates").unwrap(), Predicate::Mutates);
        for bad in ["", "WRITES", "MUTATES ", "DEPENDS-ON"] {
            assert_eq!(
                Predicate::parse(bad).unwrap_err().code,
                ErrorCode::InvalidPredicate
            );
        }
    }
}
