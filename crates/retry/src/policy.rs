//! The retry and hedging policies of gRFC A6, as types that cannot hold an invalid value: the service config
//! parser builds them through these constructors, which apply A6's validation rules, and nothing else can.

use std::fmt;
use std::time::Duration;

use grpc_code::Code;

/// The client-side cap on `maxAttempts` (A6: values above it are clamped, not rejected).
pub const DEFAULT_MAX_ATTEMPTS_CAP: u32 = 5;

/// Why a policy value was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    /// `maxAttempts` must be more than 1.
    #[error("maxAttempts must be greater than 1, got {0}")]
    MaxAttemptsTooLow(u64),
    /// The client cap must allow at least 2 attempts.
    #[error("the client's attempt cap must be at least 2, got {0}")]
    CapTooLow(u32),
    /// A backoff duration must be more than zero.
    #[error("{0} must be greater than zero")]
    NonPositiveDuration(&'static str),
    /// `backoffMultiplier` must be a finite number more than zero.
    #[error("backoffMultiplier must be a finite number greater than zero, got {0}")]
    BadMultiplier(f64),
    /// `retryableStatusCodes` must not be empty.
    #[error("retryableStatusCodes must not be empty")]
    NoRetryableCodes,
    /// `maxTokens` must be in (0, 1000].
    #[error("maxTokens must be in (0, 1000], got {0}")]
    BadMaxTokens(u64),
    /// An application policy's minimum delay is above its maximum.
    #[error("the minimum delay {min:?} is above the maximum {max:?}")]
    MinAboveMax {
        /// The minimum.
        min: Duration,
        /// The maximum.
        max: Duration,
    },
    /// `tokenRatio` must be more than zero (after keeping three decimals).
    #[error(
        "tokenRatio must be greater than zero (three decimals are kept), got {0} milli-tokens"
    )]
    BadTokenRatio(u64),
}

/// `maxAttempts`, including the original attempt: more than 1, and clamped to the client's cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MaxAttempts(u32);

impl MaxAttempts {
    /// Validates `value` (> 1) and clamps it to `cap` (which must be ≥ 2).
    pub fn new(value: u64, cap: u32) -> Result<MaxAttempts, PolicyError> {
        if cap < 2 {
            return Err(PolicyError::CapTooLow(cap));
        }
        if value < 2 {
            return Err(PolicyError::MaxAttemptsTooLow(value));
        }
        Ok(MaxAttempts(
            u32::try_from(value).unwrap_or(u32::MAX).min(cap),
        ))
    }

    /// The number of attempts, original included.
    pub fn get(self) -> u32 {
        self.0
    }
}

/// A set of status codes, as a bit set.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CodeSet(u32);

impl CodeSet {
    /// The empty set.
    pub const fn empty() -> CodeSet {
        CodeSet(0)
    }

    /// Adds a code.
    pub fn insert(&mut self, code: Code) {
        self.0 |= 1 << code.as_i32();
    }

    /// Whether the set holds `code`.
    pub fn contains(self, code: Code) -> bool {
        self.0 & (1 << code.as_i32()) != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl FromIterator<Code> for CodeSet {
    fn from_iter<I: IntoIterator<Item = Code>>(iter: I) -> Self {
        let mut set = CodeSet::empty();
        for c in iter {
            set.insert(c);
        }
        set
    }
}

impl fmt::Debug for CodeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let codes = (0..17)
            .filter_map(Code::from_i32)
            .filter(|c| self.contains(*c));
        f.debug_set().entries(codes).finish()
    }
}

/// A6 `retryPolicy`, with the `perAttemptRecvTimeout` extension (gRFC A44).
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    max_attempts: MaxAttempts,
    initial_backoff: Duration,
    max_backoff: Duration,
    multiplier: f64,
    retryable: CodeSet,
    per_attempt_recv_timeout: Option<Duration>,
}

impl RetryPolicy {
    /// Validates a retry policy (A6 "Validation of retryPolicy").
    pub fn new(
        max_attempts: MaxAttempts,
        initial_backoff: Duration,
        max_backoff: Duration,
        multiplier: f64,
        retryable: CodeSet,
    ) -> Result<RetryPolicy, PolicyError> {
        if initial_backoff.is_zero() {
            return Err(PolicyError::NonPositiveDuration("initialBackoff"));
        }
        if max_backoff.is_zero() {
            return Err(PolicyError::NonPositiveDuration("maxBackoff"));
        }
        if !(multiplier.is_finite() && multiplier > 0.0) {
            return Err(PolicyError::BadMultiplier(multiplier));
        }
        if retryable.is_empty() {
            return Err(PolicyError::NoRetryableCodes);
        }
        Ok(RetryPolicy {
            max_attempts,
            initial_backoff,
            max_backoff,
            multiplier,
            retryable,
            per_attempt_recv_timeout: None,
        })
    }

    /// Validates a retry policy with a `perAttemptRecvTimeout` (gRFC A44): the timeout must be more than
    /// zero, and `retryable` may be empty, since a timed-out attempt is retried whatever the codes say (see
    /// [`RetryPolicy::per_attempt_recv_timeout`]).
    pub fn with_recv_timeout(
        max_attempts: MaxAttempts,
        initial_backoff: Duration,
        max_backoff: Duration,
        multiplier: f64,
        retryable: CodeSet,
        per_attempt_recv_timeout: Duration,
    ) -> Result<RetryPolicy, PolicyError> {
        if per_attempt_recv_timeout.is_zero() {
            return Err(PolicyError::NonPositiveDuration("perAttemptRecvTimeout"));
        }
        // The other rules hold as for `new`; an empty code set is allowed here.
        let codes = if retryable.is_empty() {
            CodeSet::from_iter([Code::Cancelled])
        } else {
            retryable
        };
        let mut policy = RetryPolicy::new(
            max_attempts,
            initial_backoff,
            max_backoff,
            multiplier,
            codes,
        )?;
        policy.retryable = retryable;
        policy.per_attempt_recv_timeout = Some(per_attempt_recv_timeout);
        Ok(policy)
    }

    /// `maxAttempts`.
    pub fn max_attempts(&self) -> MaxAttempts {
        self.max_attempts
    }

    /// `initialBackoff`.
    pub fn initial_backoff(&self) -> Duration {
        self.initial_backoff
    }

    /// `maxBackoff`.
    pub fn max_backoff(&self) -> Duration {
        self.max_backoff
    }

    /// `backoffMultiplier`.
    pub fn multiplier(&self) -> f64 {
        self.multiplier
    }

    /// `retryableStatusCodes`.
    pub fn retryable(&self) -> CodeSet {
        self.retryable
    }

    /// `perAttemptRecvTimeout`: how long each attempt may wait, from its start, for its response headers
    /// (the point where the call commits to it). An attempt that runs out is cancelled and counts as
    /// CANCELLED; it is retried when `retryableStatusCodes` lists CANCELLED or DEADLINE_EXCEEDED, within
    /// maxAttempts, the throttle and the call's deadline (see the crate docs).
    pub fn per_attempt_recv_timeout(&self) -> Option<Duration> {
        self.per_attempt_recv_timeout
    }
}

/// A6 `hedgingPolicy`, with the `perAttemptRecvTimeout` extension (gRFC A44).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HedgingPolicy {
    max_attempts: MaxAttempts,
    hedging_delay: Duration,
    non_fatal: CodeSet,
    per_attempt_recv_timeout: Option<Duration>,
}

impl HedgingPolicy {
    /// A hedging policy. A zero delay sends every attempt at once; `non_fatal` may be empty.
    pub fn new(
        max_attempts: MaxAttempts,
        hedging_delay: Duration,
        non_fatal: CodeSet,
    ) -> HedgingPolicy {
        HedgingPolicy {
            max_attempts,
            hedging_delay,
            non_fatal,
            per_attempt_recv_timeout: None,
        }
    }

    /// The same policy with a `perAttemptRecvTimeout`, which must be more than zero.
    pub fn with_per_attempt_recv_timeout(
        mut self,
        timeout: Duration,
    ) -> Result<HedgingPolicy, PolicyError> {
        if timeout.is_zero() {
            return Err(PolicyError::NonPositiveDuration("perAttemptRecvTimeout"));
        }
        self.per_attempt_recv_timeout = Some(timeout);
        Ok(self)
    }

    /// `maxAttempts`.
    pub fn max_attempts(&self) -> MaxAttempts {
        self.max_attempts
    }

    /// `hedgingDelay`.
    pub fn hedging_delay(&self) -> Duration {
        self.hedging_delay
    }

    /// `nonFatalStatusCodes`.
    pub fn non_fatal(&self) -> CodeSet {
        self.non_fatal
    }

    /// `perAttemptRecvTimeout`: how long each hedge may wait, from its start, for its response headers. A
    /// hedge that runs out is cancelled and counts as a non-fatal failure (the next hedge goes out at once);
    /// it never ends the call by itself.
    pub fn per_attempt_recv_timeout(&self) -> Option<Duration> {
        self.per_attempt_recv_timeout
    }
}

/// What governs a method's calls: one policy or none (a proto `oneof`, so never both).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Policy {
    /// No retries or hedging (transparent retries still happen).
    #[default]
    None,
    /// Retry after a failure.
    Retry(RetryPolicy),
    /// Send hedged attempts.
    Hedging(HedgingPolicy),
}

impl Policy {
    /// The policy's `perAttemptRecvTimeout`, if any.
    pub fn per_attempt_recv_timeout(&self) -> Option<Duration> {
        match self {
            Policy::None => None,
            Policy::Retry(p) => p.per_attempt_recv_timeout(),
            Policy::Hedging(p) => p.per_attempt_recv_timeout(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_attempts_is_validated_and_clamped() {
        assert_eq!(
            MaxAttempts::new(1, 5),
            Err(PolicyError::MaxAttemptsTooLow(1))
        );
        assert_eq!(
            MaxAttempts::new(0, 5),
            Err(PolicyError::MaxAttemptsTooLow(0))
        );
        assert_eq!(MaxAttempts::new(2, 5).map(MaxAttempts::get), Ok(2));
        assert_eq!(MaxAttempts::new(5, 5).map(MaxAttempts::get), Ok(5));
        assert_eq!(MaxAttempts::new(6, 5).map(MaxAttempts::get), Ok(5));
        assert_eq!(MaxAttempts::new(u64::MAX, 7).map(MaxAttempts::get), Ok(7));
        assert_eq!(MaxAttempts::new(3, 1), Err(PolicyError::CapTooLow(1)));
    }

    #[test]
    fn retry_policy_rules() {
        let n = MaxAttempts::new(3, 5).expect("valid");
        let codes: CodeSet = [Code::Unavailable].into_iter().collect();
        let s = Duration::from_secs(1);
        assert!(RetryPolicy::new(n, s, s, 2.0, codes).is_ok());
        assert_eq!(
            RetryPolicy::new(n, Duration::ZERO, s, 2.0, codes),
            Err(PolicyError::NonPositiveDuration("initialBackoff"))
        );
        assert_eq!(
            RetryPolicy::new(n, s, Duration::ZERO, 2.0, codes),
            Err(PolicyError::NonPositiveDuration("maxBackoff"))
        );
        assert_eq!(
            RetryPolicy::new(n, s, s, 0.0, codes),
            Err(PolicyError::BadMultiplier(0.0))
        );
        assert!(RetryPolicy::new(n, s, s, f64::NAN, codes).is_err());
        assert!(RetryPolicy::new(n, s, s, f64::INFINITY, codes).is_err());
        assert_eq!(
            RetryPolicy::new(n, s, s, 2.0, CodeSet::empty()),
            Err(PolicyError::NoRetryableCodes)
        );
    }

    #[test]
    fn per_attempt_recv_timeout_rules() {
        let n = MaxAttempts::new(3, 5).expect("valid");
        let s = Duration::from_secs(1);
        let p = RetryPolicy::with_recv_timeout(n, s, s, 2.0, CodeSet::empty(), s).expect("valid");
        assert_eq!(p.per_attempt_recv_timeout(), Some(s));
        assert!(
            p.retryable().is_empty(),
            "codes may be empty with a timeout"
        );
        assert_eq!(
            RetryPolicy::with_recv_timeout(n, s, s, 2.0, CodeSet::empty(), Duration::ZERO),
            Err(PolicyError::NonPositiveDuration("perAttemptRecvTimeout"))
        );
        assert_eq!(
            RetryPolicy::with_recv_timeout(n, Duration::ZERO, s, 2.0, CodeSet::empty(), s),
            Err(PolicyError::NonPositiveDuration("initialBackoff"))
        );
        let h = HedgingPolicy::new(n, s, CodeSet::empty());
        assert_eq!(h.per_attempt_recv_timeout(), None);
        assert_eq!(
            h.clone().with_per_attempt_recv_timeout(Duration::ZERO),
            Err(PolicyError::NonPositiveDuration("perAttemptRecvTimeout"))
        );
        let h = h.with_per_attempt_recv_timeout(s).expect("valid");
        assert_eq!(Policy::Hedging(h).per_attempt_recv_timeout(), Some(s));
    }

    #[test]
    fn code_set() {
        let set: CodeSet = [Code::Unavailable, Code::Ok, Code::Unauthenticated]
            .into_iter()
            .collect();
        assert!(
            set.contains(Code::Unavailable)
                && set.contains(Code::Ok)
                && set.contains(Code::Unauthenticated)
        );
        assert!(!set.contains(Code::Internal));
        assert_eq!(format!("{set:?}"), "{Ok, Unavailable, Unauthenticated}");
    }
}
