//! Application retry policies: retry decisions the application makes itself, beside the service owner's
//! A6 `retryPolicy` (the model is the Azure Storage client: no retry, linear, exponential with jitter, or a
//! custom policy, each with an optional per-attempt timeout).
//!
//! An [`AppRetryPolicy`] only decides whether a failed attempt is retried and after how long. The same
//! [`crate::RetryCall`] runs it with every A6 guard rail: the attempt cap ([`DEFAULT_MAX_ATTEMPTS_CAP`]),
//! the target's throttle (a failure the policy retries costs a token, as a retryable code does), server
//! pushback (a "don't retry" pushback stops the call whatever the policy says; a pushback delay replaces
//! the policy's delay), the call's deadline (a retry that would start after it is not made), commit
//! (nothing is retried once response headers arrived or the replay buffer overflowed) and transparent
//! retries (unchanged: they never reach the policy).
//!
//! The built-ins retry [`Code::Unavailable`] by default (change it with `retry_on`) and every attempt cut
//! by their per-attempt timeout. A custom policy implements [`AppRetryPolicy::decide`], which sees a
//! [`FailedAttempt`]: the failed attempt's number, its status code, message and trailers, the server's
//! pushback, whether the per-attempt timeout cut it, and the time since the call started.
//!
//! Which policy a call uses when the service config has one too is [`crate::Precedence`]'s business.

use std::fmt;
use std::time::Duration;

use grpc_base::{FailurePlace, Rng};
use grpc_code::Code;

use crate::policy::{CodeSet, PolicyError, DEFAULT_MAX_ATTEMPTS_CAP};
use crate::pushback::Pushback;

/// A read-only view of a failed attempt's trailers (or Trailers-Only headers), for custom policies.
/// Names are lowercase; values are the bytes as received (binary `-bin` values are still base64).
pub trait TrailerView {
    /// The first value of `name`, if present.
    fn get(&self, name: &str) -> Option<&[u8]>;

    /// Calls `f` with every entry, in order.
    fn for_each(&self, f: &mut dyn FnMut(&str, &[u8]));
}

/// No trailers: a failure that has none (a failed pick, a broken stream, a per-attempt timeout).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTrailers;

impl TrailerView for NoTrailers {
    fn get(&self, _name: &str) -> Option<&[u8]> {
        None
    }

    fn for_each(&self, _f: &mut dyn FnMut(&str, &[u8])) {}
}

impl TrailerView for &[(&str, &[u8])] {
    fn get(&self, name: &str) -> Option<&[u8]> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    fn for_each(&self, f: &mut dyn FnMut(&str, &[u8])) {
        for (n, v) in self.iter() {
            f(n, v);
        }
    }
}

/// What the channel knows about a failed attempt beyond its [`crate::AttemptEnd`]: the status message and
/// the trailers. Passed to [`crate::RetryCall::handle_end_with`] for application policies to read.
#[derive(Clone, Copy)]
pub struct AttemptDetails<'a> {
    /// The status message.
    pub message: &'a str,
    /// The trailers (or Trailers-Only headers).
    pub trailers: &'a dyn TrailerView,
}

impl AttemptDetails<'static> {
    /// No message and no trailers.
    pub const NONE: AttemptDetails<'static> = AttemptDetails {
        message: "",
        trailers: &NoTrailers,
    };
}

impl fmt::Debug for AttemptDetails<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AttemptDetails")
            .field("message", &self.message)
            .finish_non_exhaustive()
    }
}

/// A failed attempt, as an application policy sees it. Built by the state machine; more fields may come.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub struct FailedAttempt<'a> {
    /// The number of the attempt that failed: 1 for the original, 2 for the first retry, ... (transparent
    /// retries are not counted; they carry on the attempt they replace).
    pub attempt: u32,
    /// Its status code (CANCELLED when the per-attempt timeout cut it).
    pub code: Code,
    /// Its status message.
    pub message: &'a str,
    /// Its trailers.
    pub trailers: &'a dyn TrailerView,
    /// What the server's `grpc-retry-pushback-ms` said. The state machine applies it after the policy: a
    /// "don't retry" never reaches the policy, and a delay replaces the policy's.
    pub pushback: Pushback,
    /// Where it failed (a failed pick, or after the request went out).
    pub place: FailurePlace,
    /// Whether the per-attempt receive timeout cut it.
    pub timed_out: bool,
    /// Time since the call started.
    pub elapsed: Duration,
}

impl<'a> FailedAttempt<'a> {
    /// A processed attempt number `attempt` that failed with `code`: no message, no trailers, no pushback,
    /// not timed out, at the call's start. The state machine builds the real ones; this is for testing a
    /// custom policy's [`AppRetryPolicy::decide`] (set the public fields to vary it).
    pub fn new(attempt: u32, code: Code) -> FailedAttempt<'a> {
        FailedAttempt {
            attempt,
            code,
            message: "",
            trailers: &NoTrailers,
            pushback: Pushback::None,
            place: FailurePlace::Processed,
            timed_out: false,
            elapsed: Duration::ZERO,
        }
    }
}

impl fmt::Debug for FailedAttempt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailedAttempt")
            .field("attempt", &self.attempt)
            .field("code", &self.code)
            .field("message", &self.message)
            .field("pushback", &self.pushback)
            .field("place", &self.place)
            .field("timed_out", &self.timed_out)
            .field("elapsed", &self.elapsed)
            .finish_non_exhaustive()
    }
}

/// What an application policy decided about a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryDecision {
    /// Retry after this delay (a server pushback delay replaces it).
    Retry {
        /// The delay before the next attempt starts.
        after: Duration,
    },
    /// Do not retry: the failed attempt's status is the call's.
    Stop,
}

/// A retry policy set by the application (per channel or per call), run by the same state machine as A6's.
///
/// `decide` is called once per failed, uncommitted attempt that did not end OK, was not transparently
/// retried and did not carry a "don't retry" pushback. It may be called for the last allowed attempt too
/// (its answer then only decides whether the failure costs a throttle token).
pub trait AppRetryPolicy: Send + Sync + fmt::Debug {
    /// The most attempts of one call, the original included. Values above [`DEFAULT_MAX_ATTEMPTS_CAP`]
    /// are clamped to it; 0 and 1 mean no retry.
    fn max_attempts(&self) -> u32;

    /// Whether to retry the failed attempt `info`, and after how long. `rng` is the call's injected
    /// randomness (seeded in tests), for jitter.
    fn decide(&self, info: &FailedAttempt<'_>, rng: &mut dyn Rng) -> RetryDecision;

    /// How long each attempt may wait, from its start, for its response headers before it is cancelled
    /// and handed to [`AppRetryPolicy::decide`] as CANCELLED with `timed_out` set. `None` (the default):
    /// no per-attempt timeout.
    fn per_attempt_recv_timeout(&self) -> Option<Duration> {
        None
    }
}

/// A shared policy (e.g. one the application keeps a handle on, to read what it recorded) is a policy.
impl<P: AppRetryPolicy + ?Sized> AppRetryPolicy for std::sync::Arc<P> {
    fn max_attempts(&self) -> u32 {
        (**self).max_attempts()
    }

    fn decide(&self, info: &FailedAttempt<'_>, rng: &mut dyn Rng) -> RetryDecision {
        (**self).decide(info, rng)
    }

    fn per_attempt_recv_timeout(&self) -> Option<Duration> {
        (**self).per_attempt_recv_timeout()
    }
}

/// Never retries (transparent retries still happen). With [`crate::Precedence::Application`], it turns the
/// service config's retries off for the channel or call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoRetry;

impl AppRetryPolicy for NoRetry {
    fn max_attempts(&self) -> u32 {
        1
    }

    fn decide(&self, _info: &FailedAttempt<'_>, _rng: &mut dyn Rng) -> RetryDecision {
        RetryDecision::Stop
    }
}

/// The codes and timeout the built-ins share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Common {
    max_attempts: u32,
    retryable: CodeSet,
    per_attempt_recv_timeout: Option<Duration>,
}

impl Common {
    fn new(max_attempts: u32) -> Common {
        Common {
            max_attempts,
            retryable: CodeSet::from_iter([Code::Unavailable]),
            per_attempt_recv_timeout: None,
        }
    }

    fn retries(&self, info: &FailedAttempt<'_>) -> bool {
        (info.timed_out || self.retryable.contains(info.code))
            && info.attempt < self.max_attempts.min(DEFAULT_MAX_ATTEMPTS_CAP)
    }
}

/// Retries after the same delay each time, up to `max_attempts` attempts (the original included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linear {
    delay: Duration,
    common: Common,
}

impl Linear {
    /// Retries UNAVAILABLE and timed-out attempts after `delay`, up to `max_attempts` attempts.
    pub fn new(delay: Duration, max_attempts: u32) -> Linear {
        Linear {
            delay,
            common: Common::new(max_attempts),
        }
    }

    /// Retries these codes instead of UNAVAILABLE (attempts cut by the per-attempt timeout are always
    /// retried).
    pub fn retry_on(mut self, codes: impl IntoIterator<Item = Code>) -> Linear {
        self.common.retryable = codes.into_iter().collect();
        self
    }

    /// Cuts each attempt that has no response headers `timeout` after it started (zero: no timeout).
    pub fn with_per_attempt_recv_timeout(mut self, timeout: Duration) -> Linear {
        self.common.per_attempt_recv_timeout = Some(timeout).filter(|t| !t.is_zero());
        self
    }

    /// The delay between attempts.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// The codes retried.
    pub fn retryable(&self) -> CodeSet {
        self.common.retryable
    }
}

impl AppRetryPolicy for Linear {
    fn max_attempts(&self) -> u32 {
        self.common.max_attempts
    }

    fn decide(&self, info: &FailedAttempt<'_>, _rng: &mut dyn Rng) -> RetryDecision {
        if self.common.retries(info) {
            RetryDecision::Retry { after: self.delay }
        } else {
            RetryDecision::Stop
        }
    }

    fn per_attempt_recv_timeout(&self) -> Option<Duration> {
        self.common.per_attempt_recv_timeout
    }
}

/// Retries with exponential backoff: after the n-th failed attempt, `base · 2^(n-1)` with ±20 % jitter,
/// kept within `[min, max]`; up to `max_attempts` attempts (the original included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exponential {
    base: Duration,
    min: Duration,
    max: Duration,
    common: Common,
}

impl Exponential {
    /// Retries UNAVAILABLE and timed-out attempts with exponential backoff from `base`, each delay within
    /// `[min, max]`, up to `max_attempts` attempts. Fails if `min` is above `max`.
    pub fn new(
        base: Duration,
        min: Duration,
        max: Duration,
        max_attempts: u32,
    ) -> Result<Exponential, PolicyError> {
        if min > max {
            return Err(PolicyError::MinAboveMax { min, max });
        }
        Ok(Exponential {
            base,
            min,
            max,
            common: Common::new(max_attempts),
        })
    }

    /// Retries these codes instead of UNAVAILABLE (attempts cut by the per-attempt timeout are always
    /// retried).
    pub fn retry_on(mut self, codes: impl IntoIterator<Item = Code>) -> Exponential {
        self.common.retryable = codes.into_iter().collect();
        self
    }

    /// Cuts each attempt that has no response headers `timeout` after it started (zero: no timeout).
    pub fn with_per_attempt_recv_timeout(mut self, timeout: Duration) -> Exponential {
        self.common.per_attempt_recv_timeout = Some(timeout).filter(|t| !t.is_zero());
        self
    }

    /// The delay before jitter and bounds after the `n`-th failed attempt (n ≥ 1): `base · 2^(n-1)`,
    /// saturating.
    pub fn base_delay(&self, n: u32) -> Duration {
        1u32.checked_shl(n.saturating_sub(1))
            .and_then(|factor| self.base.checked_mul(factor))
            .unwrap_or(Duration::MAX)
    }

    /// The codes retried.
    pub fn retryable(&self) -> CodeSet {
        self.common.retryable
    }
}

impl AppRetryPolicy for Exponential {
    fn max_attempts(&self) -> u32 {
        self.common.max_attempts
    }

    fn decide(&self, info: &FailedAttempt<'_>, rng: &mut dyn Rng) -> RetryDecision {
        if !self.common.retries(info) {
            return RetryDecision::Stop;
        }
        let base = self.base_delay(info.attempt).min(self.max);
        let jitter = 0.8 + 0.4 * rng.uniform();
        let jittered = Duration::try_from_secs_f64(base.as_secs_f64() * jitter).unwrap_or(base);
        RetryDecision::Retry {
            after: jittered.clamp(self.min, self.max),
        }
    }

    fn per_attempt_recv_timeout(&self) -> Option<Duration> {
        self.common.per_attempt_recv_timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use grpc_base::SplitMix64;

    fn info(attempt: u32, code: Code) -> FailedAttempt<'static> {
        FailedAttempt::new(attempt, code)
    }

    #[test]
    fn retry_info_new_is_a_plain_processed_failure() {
        let mut built = FailedAttempt::new(2, Code::Unavailable);
        let message = String::from("from a test");
        built.message = &message;
        assert_eq!(built.attempt, 2);
        assert_eq!(built.code, Code::Unavailable);
        assert_eq!(built.message, "from a test");
        assert!(built.trailers.get("x").is_none());
        assert_eq!(built.pushback, Pushback::None);
        assert_eq!(built.place, FailurePlace::Processed);
        assert!(!built.timed_out);
        assert_eq!(built.elapsed, Duration::ZERO);
    }

    #[test]
    fn no_retry_stops() {
        let mut rng = SplitMix64::new(1);
        assert_eq!(NoRetry.max_attempts(), 1);
        assert_eq!(
            NoRetry.decide(&info(1, Code::Unavailable), &mut rng),
            RetryDecision::Stop
        );
    }

    #[test]
    fn linear_retries_listed_codes_and_timeouts_with_a_fixed_delay() {
        let mut rng = SplitMix64::new(1);
        let p = Linear::new(Duration::from_millis(250), 3);
        let retry = RetryDecision::Retry {
            after: Duration::from_millis(250),
        };
        assert_eq!(p.decide(&info(1, Code::Unavailable), &mut rng), retry);
        assert_eq!(p.decide(&info(2, Code::Unavailable), &mut rng), retry);
        assert_eq!(
            p.decide(&info(3, Code::Unavailable), &mut rng),
            RetryDecision::Stop,
            "the third attempt is the last"
        );
        assert_eq!(
            p.decide(&info(1, Code::Aborted), &mut rng),
            RetryDecision::Stop
        );
        let timed_out = FailedAttempt {
            timed_out: true,
            ..info(1, Code::Cancelled)
        };
        assert_eq!(p.decide(&timed_out, &mut rng), retry);
        let p = p.retry_on([Code::Aborted]);
        assert_eq!(p.decide(&info(1, Code::Aborted), &mut rng), retry);
        assert_eq!(
            p.decide(&info(1, Code::Unavailable), &mut rng),
            RetryDecision::Stop
        );
    }

    #[test]
    fn exponential_delays_double_with_jitter_within_min_and_max() {
        let p = Exponential::new(
            Duration::from_millis(100),
            Duration::from_millis(90),
            Duration::from_millis(1000),
            5,
        )
        .expect("valid");
        let mut rng = SplitMix64::new(42);
        for _ in 0..1000 {
            for n in 1..5 {
                let RetryDecision::Retry { after } =
                    p.decide(&info(n, Code::Unavailable), &mut rng)
                else {
                    panic!("attempt {n} is retried");
                };
                let base = (100u64 << (n - 1)).min(1000) as f64 / 1000.0;
                let d = after.as_secs_f64();
                assert!(
                    d >= (base * 0.8).max(0.09) - 1e-9 && d <= (base * 1.2).min(1.0) + 1e-9,
                    "n={n}: {d}"
                );
            }
        }
        assert_eq!(
            p.decide(&info(5, Code::Unavailable), &mut rng),
            RetryDecision::Stop
        );
        assert_eq!(p.base_delay(1), Duration::from_millis(100));
        assert_eq!(p.base_delay(4), Duration::from_millis(800));
        assert_eq!(p.base_delay(u32::MAX), Duration::MAX);
        assert_eq!(
            Exponential::new(
                Duration::from_millis(1),
                Duration::from_secs(2),
                Duration::from_secs(1),
                3
            ),
            Err(PolicyError::MinAboveMax {
                min: Duration::from_secs(2),
                max: Duration::from_secs(1)
            })
        );
    }

    #[test]
    fn exponential_is_reproducible_with_a_seed() {
        let p = Exponential::new(
            Duration::from_millis(100),
            Duration::ZERO,
            Duration::from_secs(10),
            5,
        )
        .expect("valid");
        let run = |seed| {
            let mut rng = SplitMix64::new(seed);
            (1..5)
                .map(|n| p.decide(&info(n, Code::Unavailable), &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn trailer_views() {
        let entries: &[(&str, &[u8])] = &[("x-a", b"1"), ("x-b", b"2"), ("x-a", b"3")];
        assert_eq!(TrailerView::get(&entries, "x-a"), Some(&b"1"[..]));
        assert_eq!(TrailerView::get(&entries, "x-c"), None);
        let mut seen = Vec::new();
        entries.for_each(&mut |n, v| seen.push(format!("{n}={}", String::from_utf8_lossy(v))));
        assert_eq!(seen, ["x-a=1", "x-b=2", "x-a=3"]);
        assert_eq!(NoTrailers.get("x-a"), None);
    }
}
