//! Deterministic randomness for simulations: splitmix64 and a Zipf sampler.
//!
//! Contract: the same seed gives the same sequence on every machine, so a simulation run is
//! reproducible from its seed alone.

/// The kernel's own splitmix64 generator, with a different seed mix: the workload's
/// randomness stays independent of the kernel's jitter draws.
#[derive(Clone, Debug)]
pub struct Rng {
    inner: klock_core::Jitter,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng {
            inner: klock_core::Jitter::new(seed ^ 0x5EED_0FC0_FFEE),
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }

    /// Uniform in `0..n` (`n` > 0); the modulo bias is irrelevant at these sizes.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

/// Zipf-distributed ranks in `0..n`: rank `r` has weight `1 / (r + 1)^s`.
#[derive(Clone, Debug)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, s: f64) -> Zipf {
        assert!(n > 0, "a Zipf distribution needs at least one rank");
        let mut cdf = Vec::with_capacity(n);
        let mut total = 0.0;
        for r in 0..n {
            total += 1.0 / ((r + 1) as f64).powf(s);
            cdf.push(total);
        }
        for c in &mut cdf {
            *c /= total;
        }
        Zipf { cdf }
    }

    pub fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}
