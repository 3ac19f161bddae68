//! Injected randomness: the [`Rng`] trait the state machines draw from, and [`SplitMix64`], the generator
//! the channel seeds for them. Nothing here reads OS entropy or a clock: the caller chooses the seed.

/// A source of uniform randomness, injected so the state machines stay deterministic under test.
pub trait Rng: Send {
    /// The next 64 random bits.
    fn next_u64(&mut self) -> u64;

    /// A uniform number in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// SplitMix64: small, fast, and good enough for jitter. Seed it from a clock or OS entropy in production,
/// and from a constant in tests.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator with this seed.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }
}

impl Rng for SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_is_in_range_and_spread() {
        let mut rng = SplitMix64::new(3);
        let xs: Vec<f64> = (0..10_000).map(|_| rng.uniform()).collect();
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }

    #[test]
    fn a_seed_gives_the_same_sequence() {
        let run = |seed| {
            let mut rng = SplitMix64::new(seed);
            (0..4).map(|_| rng.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }
}
