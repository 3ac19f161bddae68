//! Retry throttling (gRFC A6 "Throttling Retry Attempts and Hedged RPCs").
//!
//! # Why throttling exists
//!
//! Retries turn one failure into several requests. That is what you want when one backend hiccups, and what
//! you must not do when the whole service is overloaded: if every client answers an outage by sending up to
//! `maxAttempts` times as many requests, the retries themselves keep the service down (a retry storm), and
//! the outage outlives its cause. Per-call limits cannot see this, because each call only knows its own
//! failures. The throttle is a token bucket shared by all calls to one target: each qualifying failure (a
//! retryable or non-fatal code, or a "don't retry" pushback) costs one token, each success gives back
//! `tokenRatio` tokens (every call counts, whatever its method, and even with no policy or retries disabled),
//! and retries and hedges are only sent while the bucket holds more than half its capacity. When most calls
//! succeed, the bucket stays full and retries flow freely; when failures outpace successes by more than the
//! ratio, the bucket drains and the client falls back to sending each call once, which is the load it would
//! have sent without retries at all. The first attempt of a call is never throttled: throttling limits the
//! extra load, never the base load. (Compare tower's `retry::budget`, which makes the same argument for a
//! time-windowed budget.)
//!
//! Tokens are kept as integer milli-tokens, as C-core does: `tokenRatio` counts to three decimals, and no
//! floating-point drift can creep into a counter that millions of calls update.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::policy::PolicyError;

/// A6 `retryThrottling`, validated: `maxTokens` in (0, 1000], `tokenRatio` > 0 with three decimals kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ThrottleConfig {
    max_milli_tokens: u32,
    milli_token_ratio: u32,
}

impl ThrottleConfig {
    /// `max_tokens` in (0, 1000]; `milli_token_ratio` is `tokenRatio` × 1000, truncated (0.5466 → 546), > 0.
    pub fn new(max_tokens: u64, milli_token_ratio: u64) -> Result<ThrottleConfig, PolicyError> {
        if max_tokens == 0 || max_tokens > 1000 {
            return Err(PolicyError::BadMaxTokens(max_tokens));
        }
        if milli_token_ratio == 0 {
            return Err(PolicyError::BadTokenRatio(milli_token_ratio));
        }
        let ratio = u32::try_from(milli_token_ratio).unwrap_or(u32::MAX);
        Ok(ThrottleConfig {
            max_milli_tokens: (max_tokens * 1000) as u32,
            milli_token_ratio: ratio,
        })
    }

    /// `maxTokens` × 1000.
    pub fn max_milli_tokens(self) -> u32 {
        self.max_milli_tokens
    }

    /// `tokenRatio` × 1000.
    pub fn milli_token_ratio(self) -> u32 {
        self.milli_token_ratio
    }
}

/// The token bucket of one target, shared by all its calls (wrap it in an `Arc`).
#[derive(Debug)]
pub struct Throttle {
    config: ThrottleConfig,
    milli_tokens: AtomicU32,
}

impl Throttle {
    /// A full bucket.
    pub fn new(config: ThrottleConfig) -> Throttle {
        Throttle {
            config,
            milli_tokens: AtomicU32::new(config.max_milli_tokens),
        }
    }

    /// The configuration.
    pub fn config(&self) -> ThrottleConfig {
        self.config
    }

    /// The current tokens × 1000.
    pub fn milli_tokens(&self) -> u32 {
        self.milli_tokens.load(Ordering::Acquire)
    }

    /// Whether a retry or hedge may be sent now: tokens > maxTokens / 2.
    pub fn allows_retry(&self) -> bool {
        u64::from(self.milli_tokens()) * 2 > u64::from(self.config.max_milli_tokens)
    }

    /// A qualifying failure: one token less (not below zero).
    pub fn record_failure(&self) {
        let _ = self
            .milli_tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_sub(1000))
            });
    }

    /// A success: `tokenRatio` tokens more (not above `maxTokens`).
    pub fn record_success(&self) {
        let max = self.config.max_milli_tokens;
        let ratio = self.config.milli_token_ratio;
        let _ = self
            .milli_tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_add(ratio).min(max))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_rules() {
        assert_eq!(
            ThrottleConfig::new(0, 100),
            Err(PolicyError::BadMaxTokens(0))
        );
        assert_eq!(
            ThrottleConfig::new(1001, 100),
            Err(PolicyError::BadMaxTokens(1001))
        );
        assert_eq!(
            ThrottleConfig::new(10, 0),
            Err(PolicyError::BadTokenRatio(0))
        );
        let c = ThrottleConfig::new(1000, 546).expect("valid");
        assert_eq!(
            (c.max_milli_tokens(), c.milli_token_ratio()),
            (1_000_000, 546)
        );
    }

    #[test]
    fn crosses_the_threshold_both_ways_with_a_fractional_ratio() {
        // maxTokens 10, tokenRatio 0.1: threshold is 5 tokens (retries need more than 5).
        let t = Throttle::new(ThrottleConfig::new(10, 100).expect("valid"));
        assert_eq!(t.milli_tokens(), 10_000);
        for _ in 0..4 {
            t.record_failure();
        }
        assert_eq!(t.milli_tokens(), 6_000);
        assert!(t.allows_retry());
        t.record_failure();
        assert_eq!(t.milli_tokens(), 5_000);
        assert!(!t.allows_retry(), "5 is not more than 10/2");
        t.record_success();
        assert_eq!(t.milli_tokens(), 5_100);
        assert!(t.allows_retry(), "5.1 > 5");
        t.record_failure();
        assert!(!t.allows_retry());
    }

    #[test]
    fn stays_within_zero_and_max() {
        let t = Throttle::new(ThrottleConfig::new(3, 1500).expect("valid"));
        for _ in 0..10 {
            t.record_failure();
        }
        assert_eq!(t.milli_tokens(), 0);
        for _ in 0..10 {
            t.record_success();
        }
        assert_eq!(t.milli_tokens(), 3_000);
        // An odd maximum: threshold 1.5 tokens.
        for _ in 0..2 {
            t.record_failure();
        }
        assert_eq!(t.milli_tokens(), 1_000);
        assert!(!t.allows_retry());
        t.record_success();
        assert!(t.allows_retry(), "2.5 > 1.5");
    }
}
