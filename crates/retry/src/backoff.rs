//! Retry backoff (current gRFC A6): the n-th retry since the last pushback waits
//! `min(initialBackoff · multiplier^(n-1), maxBackoff) · U(0.8, 1.2)`. Randomness comes from an injected
//! [`Rng`] (`grpc-base`), so tests can seed it.

use std::time::Duration;

use grpc_base::Rng;

use crate::policy::RetryPolicy;

/// The backoff state of one call: how many retries since the last pushback.
#[derive(Clone, Debug, Default)]
pub struct Backoff {
    retries_since_pushback: u32,
}

impl Backoff {
    /// The delay before the next retry; counts it.
    pub fn next_delay(&mut self, policy: &RetryPolicy, rng: &mut dyn Rng) -> Duration {
        let base = base_delay(policy, self.retries_since_pushback);
        self.retries_since_pushback = self.retries_since_pushback.saturating_add(1);
        let jitter = 0.8 + 0.4 * rng.uniform();
        Duration::try_from_secs_f64(base.as_secs_f64() * jitter).unwrap_or(base)
    }

    /// Restarts the sequence at `initialBackoff` (after a pushback).
    pub fn reset(&mut self) {
        self.retries_since_pushback = 0;
    }
}

/// `min(initial · multiplier^n, max)`, the delay before jitter, for the (n+1)-th retry.
pub fn base_delay(policy: &RetryPolicy, n: u32) -> Duration {
    let exp = i32::try_from(n).unwrap_or(i32::MAX);
    let secs = policy.initial_backoff().as_secs_f64() * policy.multiplier().powi(exp);
    let max = policy.max_backoff();
    if !secs.is_finite() || secs >= max.as_secs_f64() {
        return max;
    }
    Duration::try_from_secs_f64(secs).unwrap_or(max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{CodeSet, MaxAttempts};
    use grpc_base::SplitMix64;
    use grpc_code::Code;

    fn policy(initial_ms: u64, max_ms: u64, mult: f64) -> RetryPolicy {
        RetryPolicy::new(
            MaxAttempts::new(5, 5).expect("valid"),
            Duration::from_millis(initial_ms),
            Duration::from_millis(max_ms),
            mult,
            [Code::Unavailable].into_iter().collect::<CodeSet>(),
        )
        .expect("valid")
    }

    #[test]
    fn base_sequence_grows_and_caps() {
        let p = policy(100, 1000, 2.0);
        let seq: Vec<u128> = (0..6).map(|n| base_delay(&p, n).as_millis()).collect();
        assert_eq!(seq, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(base_delay(&p, u32::MAX), Duration::from_millis(1000));
        let shrinking = policy(100, 1000, 0.5);
        assert_eq!(base_delay(&shrinking, 1), Duration::from_millis(50));
    }

    #[test]
    fn jitter_stays_within_plus_minus_twenty_percent_with_a_seeded_rng() {
        let p = policy(100, 1000, 2.0);
        let mut rng = SplitMix64::new(42);
        for _ in 0..1000 {
            let mut b = Backoff::default();
            for n in 0..6 {
                let d = b.next_delay(&p, &mut rng).as_secs_f64();
                let base = base_delay(&p, n).as_secs_f64();
                assert!(
                    d >= base * 0.8 - 1e-9 && d <= base * 1.2 + 1e-9,
                    "n={n}: {d} vs {base}"
                );
            }
        }
    }

    #[test]
    fn seeded_sequence_is_reproducible_and_reset_restarts_it() {
        let p = policy(100, 1000, 2.0);
        let run = |seed| {
            let mut rng = SplitMix64::new(seed);
            let mut b = Backoff::default();
            (0..4)
                .map(|_| b.next_delay(&p, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        let mut rng = SplitMix64::new(1);
        let mut b = Backoff::default();
        b.next_delay(&p, &mut rng);
        b.next_delay(&p, &mut rng);
        b.reset();
        let d = b.next_delay(&p, &mut rng);
        assert!(
            d >= Duration::from_millis(80) && d <= Duration::from_millis(120),
            "{d:?}"
        );
    }
}
