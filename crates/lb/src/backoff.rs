//! Connection backoff (`doc/connection-backoff.md`): attempts start at most every `backoff`, which begins at
//! 1 s and grows ×1.6 up to 120 s, with ±20 % jitter after the first; each attempt gets at least 20 s to
//! connect. What is backed off is the start of attempts: a slow failure is followed by the next attempt at
//! once, a fast one waits for the deadline. The backoff resets when a connection is accepted (the server's
//! SETTINGS arrive).

use std::time::{Duration, Instant};

use grpc_base::Rng;

const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The backoff parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackoffConfig {
    /// INITIAL_BACKOFF: 1 s.
    pub initial: Duration,
    /// MULTIPLIER: 1.6.
    pub multiplier: f64,
    /// MAX_BACKOFF: 120 s.
    pub max: Duration,
    /// JITTER: 0.2.
    pub jitter: f64,
    /// MIN_CONNECT_TIMEOUT: 20 s.
    pub min_connect_timeout: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial: Duration::from_secs(1),
            multiplier: 1.6,
            max: Duration::from_secs(120),
            jitter: 0.2,
            min_connect_timeout: Duration::from_secs(20),
        }
    }
}

/// The backoff state of one address.
#[derive(Clone, Debug)]
pub struct ConnectionBackoff {
    config: BackoffConfig,
    /// The backoff for the next attempt; `None` until the first attempt (which uses `initial`, unjittered).
    current: Option<Duration>,
}

impl ConnectionBackoff {
    /// A fresh backoff.
    pub fn new(config: BackoffConfig) -> ConnectionBackoff {
        ConnectionBackoff {
            config,
            current: None,
        }
    }

    /// An attempt starts at `now`: returns (the earliest start of the next attempt, this attempt's deadline).
    pub fn attempt(&mut self, now: Instant, rng: &mut dyn Rng) -> (Instant, Instant) {
        let wait = match self.current {
            None => {
                self.current = Some(self.config.initial);
                self.config.initial
            }
            Some(previous) => {
                let base = previous
                    .mul_f64(self.config.multiplier)
                    .min(self.config.max);
                self.current = Some(base);
                let j = self.config.jitter;
                base.mul_f64(1.0 - j + 2.0 * j * rng.uniform())
            }
        };
        let next_start = now + wait;
        // A MIN_CONNECT_TIMEOUT too large to add to now (e.g. `Duration::MAX`) means a century.
        let min_deadline = now
            .checked_add(self.config.min_connect_timeout.min(CENTURY))
            .unwrap_or(next_start);
        let deadline = next_start.max(min_deadline);
        (next_start, deadline)
    }

    /// The server accepted a connection: the next attempt starts the sequence again.
    pub fn reset(&mut self) {
        self.current = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use grpc_base::SplitMix64;

    #[test]
    fn attempt_starts_follow_1s_then_x1_6_with_jitter_up_to_120s() {
        let t0 = Instant::now();
        let mut b = ConnectionBackoff::new(BackoffConfig::default());
        let mut rng = SplitMix64::new(11);
        let (next, deadline) = b.attempt(t0, &mut rng);
        assert_eq!(
            next - t0,
            Duration::from_secs(1),
            "the first wait is INITIAL, unjittered"
        );
        assert_eq!(
            deadline - t0,
            Duration::from_secs(20),
            "at least MIN_CONNECT_TIMEOUT to connect"
        );
        let mut base = 1.0f64;
        let mut now = next;
        for _ in 0..15 {
            base = (base * 1.6).min(120.0);
            let (next, deadline) = b.attempt(now, &mut rng);
            let wait = (next - now).as_secs_f64();
            assert!(
                wait >= base * 0.8 - 1e-6 && wait <= base * 1.2 + 1e-6,
                "{wait} vs {base}"
            );
            assert!(deadline >= now + Duration::from_secs(20) && deadline >= next);
            now = next;
        }
        assert_eq!(base, 120.0);
    }

    #[test]
    fn reset_restarts_at_initial() {
        let t0 = Instant::now();
        let mut b = ConnectionBackoff::new(BackoffConfig::default());
        let mut rng = SplitMix64::new(1);
        for _ in 0..5 {
            b.attempt(t0, &mut rng);
        }
        b.reset();
        let (next, _) = b.attempt(t0, &mut rng);
        assert_eq!(next - t0, Duration::from_secs(1));
    }
}
