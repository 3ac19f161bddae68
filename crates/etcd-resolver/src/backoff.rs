//! The reconnect backoff of the resolver's etcd watch: exponential from an initial delay by 1.6 up to a
//! maximum, each delay jittered by ±20 % with injected randomness (gRPC's connection backoff shape). Sans-IO:
//! it computes delays; `resolver.rs` sleeps them.

use std::time::Duration;

use grpc_base::Rng;

const MULTIPLIER: f64 = 1.6;
const JITTER: f64 = 0.2;
/// The shortest delay: a zero backoff would retry a failing etcd in a tight loop.
pub(crate) const MIN_DELAY: Duration = Duration::from_millis(10);

/// Delays between attempts to reach etcd.
#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// From `initial` up to `max` (`initial` raised to [`MIN_DELAY`] and `max` to `initial` if lower).
    pub(crate) fn new(initial: Duration, max: Duration) -> Backoff {
        let initial = initial.max(MIN_DELAY);
        Backoff {
            initial,
            max: max.max(initial),
            next: initial,
        }
    }

    /// The delay before the next attempt; the one after is longer, up to the maximum.
    pub(crate) fn next_delay(&mut self, rng: &mut dyn Rng) -> Duration {
        let base = self.next;
        self.next = base.mul_f64(MULTIPLIER).min(self.max);
        base.mul_f64(1.0 + JITTER * (2.0 * rng.uniform() - 1.0))
    }

    /// Back to the initial delay (etcd was reached).
    pub(crate) fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use grpc_base::SplitMix64;

    #[test]
    fn grows_by_1_6_to_the_cap_with_jitter_and_resets() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        let mut rng = SplitMix64::new(1);
        let mut base = 1.0_f64;
        for _ in 0..12 {
            let d = backoff.next_delay(&mut rng).as_secs_f64();
            assert!(
                d >= base * 0.8 - 1e-9 && d <= base * 1.2 + 1e-9,
                "{d} vs {base}"
            );
            base = (base * 1.6).min(30.0);
        }
        assert_eq!(base, 30.0);
        backoff.reset();
        let d = backoff.next_delay(&mut rng).as_secs_f64();
        assert!((0.8..=1.2).contains(&d), "{d}");
    }

    #[test]
    fn a_zero_backoff_is_clamped() {
        let mut backoff = Backoff::new(Duration::ZERO, Duration::ZERO);
        let mut rng = SplitMix64::new(7);
        for _ in 0..5 {
            let d = backoff.next_delay(&mut rng);
            assert!(d >= MIN_DELAY.mul_f64(0.8), "{d:?}");
            assert!(d <= MIN_DELAY.mul_f64(1.2), "{d:?}");
        }
    }
}
