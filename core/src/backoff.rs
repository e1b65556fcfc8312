//! Deterministic jitter and exponential backoff (docs/SPEC.md §2, §8).
//!
//! Contract: [`Jitter`] is splitmix64 seeded by the config's `seed`, one draw per DIE
//! verdict, DIED event or WOUNDED event; [`retry_after_ms`] is
//! `min(cap, base · 2^attempts) + draw mod base`, with saturating arithmetic so no input can
//! overflow.

/// The kernel's single source of randomness.
#[derive(Clone, Debug)]
pub struct Jitter {
    state: u64,
}

impl Jitter {
    /// A generator whose state starts at `seed`.
    pub const fn new(seed: u64) -> Jitter {
        Jitter { state: seed }
    }

    /// The generator's state, from which [`Jitter::new`] continues the same sequence.
    pub const fn state(&self) -> u64 {
        self.state
    }

    /// The next splitmix64 output.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// `min(cap, base · 2^attempts) + draw mod base` (0 jitter when `base` is 0).
pub fn retry_after_ms(base: u64, cap: u64, attempts: u32, draw: u64) -> u64 {
    let exponential = 1u64
        .checked_shl(attempts)
        .and_then(|factor| base.checked_mul(factor))
        .unwrap_or(u64::MAX);
    let jitter = draw.checked_rem(base).unwrap_or(0);
    exponential.min(cap).saturating_add(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_reference_values() {
        // Reference outputs of splitmix64 seeded with 0 (Vigna's C implementation).
        let mut j = Jitter::new(0);
        assert_eq!(j.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(j.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn backoff_grows_caps_and_never_overflows() {
        assert_eq!(retry_after_ms(100, 10_000, 0, 0), 100);
        assert_eq!(retry_after_ms(100, 10_000, 3, 250), 850);
        assert_eq!(retry_after_ms(100, 10_000, 7, 0), 10_000);
        assert_eq!(retry_after_ms(100, 10_000, 200, 99), 10_099);
        assert_eq!(retry_after_ms(0, 10_000, 5, 12345), 0);
        assert_eq!(
            retry_after_ms(u64::MAX, u64::MAX, 63, u64::MAX - 1),
            u64::MAX
        );
    }
}
