//! An xDS route's `retry_policy` as a gRPC retry policy (gRFC A44, on top of A6).
//!
//! `retry_on` keeps only the five conditions that name gRPC status codes (`cancelled`,
//! `deadline-exceeded`, `internal`, `resource-exhausted`, `unavailable`; exact names, surrounding spaces
//! ignored); a policy naming none of them retries nothing, so it becomes no policy. `num_retries`
//! defaults to 1 and must not be 0; attempts are retries + 1, capped at A6's 5. `retry_back_off` defaults
//! to 25 ms / 250 ms; when given, `base_interval` is required and positive, `max_interval` defaults to 10 ×
//! base and must be positive and at least the base; either under 1 ms counts as 1 ms. The multiplier is
//! always 2. Anything invalid is a NACK of the RouteConfiguration.
//!
//! Ignored on purpose: `per_try_timeout`, host predicates, retry priority, retriable headers and status
//! codes, rate-limited back-off. Not here: which policy a route uses (route or virtual host: `route`), and
//! running retries (`grpc-retry`).

use std::time::Duration;

use envoy_types::pb::envoy::config::route::v3::RetryPolicy as ProtoRetryPolicy;
use grpc_code::Code;

use super::{duration, ResourceError};

/// A6's cap on attempts.
const MAX_ATTEMPTS_CAP: u32 = 5;
/// The back-off's base when `retry_back_off` is absent.
const DEFAULT_BASE: Duration = Duration::from_millis(25);
/// The back-off's maximum when `retry_back_off` is absent.
const DEFAULT_MAX: Duration = Duration::from_millis(250);
/// The smallest back-off interval (A44).
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// A retry policy from xDS, in A6's terms. Always retries at least one code and allows at least two
/// attempts.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    codes: Vec<Code>,
    max_attempts: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
}

impl RetryPolicy {
    /// The status codes that are retried (non-empty, without repeats, in the order `retry_on` named them).
    pub fn retryable_codes(&self) -> &[Code] {
        &self.codes
    }

    /// A6's `maxAttempts`: `num_retries + 1`, in 2..=5.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// A6's `initialBackoff`: at least 1 ms.
    pub fn initial_backoff(&self) -> Duration {
        self.initial_backoff
    }

    /// A6's `maxBackoff`: at least the initial back-off.
    pub fn max_backoff(&self) -> Duration {
        self.max_backoff
    }

    /// A6's `backoffMultiplier`: always 2.
    pub fn backoff_multiplier(&self) -> f64 {
        2.0
    }
}

/// The status code a `retry_on` condition names, if it is one of the five gRPC ones.
fn code_of(condition: &str) -> Option<Code> {
    Some(match condition {
        "cancelled" => Code::Cancelled,
        "deadline-exceeded" => Code::DeadlineExceeded,
        "internal" => Code::Internal,
        "resource-exhausted" => Code::ResourceExhausted,
        "unavailable" => Code::Unavailable,
        _ => return None,
    })
}

/// A positive duration at `field`, raised to 1 ms.
fn interval(
    field: &str,
    d: &envoy_types::pb::google::protobuf::Duration,
) -> Result<Duration, ResourceError> {
    let d = duration::from_proto(d).map_err(|e| ResourceError::new(field, e))?;
    if d.is_zero() {
        return Err(ResourceError::new(field, "must be positive"));
    }
    Ok(d)
}

/// Validates a route's or virtual host's `retry_policy`: `Ok(None)` when it is valid but retries no
/// gRPC code.
pub(crate) fn parse_retry_policy(
    p: &ProtoRetryPolicy,
) -> Result<Option<RetryPolicy>, ResourceError> {
    let mut codes = Vec::new();
    for code in p.retry_on.split(',').filter_map(|c| code_of(c.trim())) {
        if !codes.contains(&code) {
            codes.push(code);
        }
    }
    let num_retries = p.num_retries.map_or(1, |n| n.value);
    if num_retries == 0 {
        return Err(ResourceError::new("num_retries", "must not be 0"));
    }
    let max_attempts = num_retries.saturating_add(1).min(MAX_ATTEMPTS_CAP);
    let (initial_backoff, max_backoff) = match &p.retry_back_off {
        None => (DEFAULT_BASE, DEFAULT_MAX),
        Some(b) => {
            let base = b
                .base_interval
                .as_ref()
                .ok_or_else(|| ResourceError::new("base_interval", "required"))
                .and_then(|d| interval("base_interval", d))
                .map_err(|e| e.within("retry_back_off"))?;
            let max = match &b.max_interval {
                None => base.saturating_mul(10),
                Some(d) => {
                    let max =
                        interval("max_interval", d).map_err(|e| e.within("retry_back_off"))?;
                    if max < base {
                        return Err(ResourceError::new(
                            "retry_back_off.max_interval",
                            "must not be less than base_interval",
                        ));
                    }
                    max
                }
            };
            (base.max(MIN_INTERVAL), max.max(MIN_INTERVAL))
        }
    };
    if codes.is_empty() {
        return Ok(None);
    }
    Ok(Some(RetryPolicy {
        codes,
        max_attempts,
        initial_backoff,
        max_backoff,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::duration::to_proto;
    use envoy_types::pb::envoy::config::route::v3::retry_policy::RetryBackOff;
    use envoy_types::pb::google::protobuf::UInt32Value;

    fn policy(
        retry_on: &str,
        num_retries: Option<u32>,
        back_off: Option<RetryBackOff>,
    ) -> ProtoRetryPolicy {
        ProtoRetryPolicy {
            retry_on: retry_on.to_owned(),
            num_retries: num_retries.map(|value| UInt32Value { value }),
            retry_back_off: back_off,
            ..Default::default()
        }
    }

    fn back_off(base: Option<Duration>, max: Option<Duration>) -> Option<RetryBackOff> {
        Some(RetryBackOff {
            base_interval: base.map(to_proto),
            max_interval: max.map(to_proto),
        })
    }

    fn parse(p: &ProtoRetryPolicy) -> RetryPolicy {
        parse_retry_policy(p).expect("valid").expect("a policy")
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a44_defaults() {
        let p = parse(&policy("unavailable", None, None));
        assert_eq!(p.retryable_codes(), &[Code::Unavailable]);
        assert_eq!(p.max_attempts(), 2, "num_retries defaults to 1");
        assert_eq!(p.initial_backoff(), MS(25));
        assert_eq!(p.max_backoff(), MS(250));
        assert_eq!(p.backoff_multiplier(), 2.0);
    }

    #[test]
    fn only_the_five_grpc_conditions_become_codes() {
        let p = parse(&policy(
            "5xx,cancelled, deadline-exceeded,internal,resource-exhausted,unavailable,reset,unavailable,Internal",
            None,
            None,
        ));
        assert_eq!(
            p.retryable_codes(),
            &[
                Code::Cancelled,
                Code::DeadlineExceeded,
                Code::Internal,
                Code::ResourceExhausted,
                Code::Unavailable
            ]
        );
        for none in ["", "5xx,reset", "retriable-status-codes", "UNAVAILABLE"] {
            assert_eq!(
                parse_retry_policy(&policy(none, Some(3), None)),
                Ok(None),
                "{none:?}: no supported code, no policy"
            );
        }
    }

    #[test]
    fn attempts_are_retries_plus_one_capped_at_five() {
        assert_eq!(parse(&policy("internal", Some(1), None)).max_attempts(), 2);
        assert_eq!(parse(&policy("internal", Some(4), None)).max_attempts(), 5);
        assert_eq!(parse(&policy("internal", Some(5), None)).max_attempts(), 5);
        assert_eq!(
            parse(&policy("internal", Some(u32::MAX), None)).max_attempts(),
            5
        );
        let err = parse_retry_policy(&policy("internal", Some(0), None)).expect_err("0 retries");
        assert_eq!(err.field, "num_retries");
        assert!(
            parse_retry_policy(&policy("5xx", Some(0), None)).is_err(),
            "validated even without a supported code"
        );
    }

    #[test]
    fn back_off_rules() {
        let p = parse(&policy("internal", None, back_off(Some(MS(100)), None)));
        assert_eq!(
            (p.initial_backoff(), p.max_backoff()),
            (MS(100), MS(1000)),
            "max defaults to 10 x base"
        );
        let p = parse(&policy(
            "internal",
            None,
            back_off(Some(MS(100)), Some(MS(100))),
        ));
        assert_eq!((p.initial_backoff(), p.max_backoff()), (MS(100), MS(100)));
        let tiny = Duration::from_micros(100);
        let p = parse(&policy("internal", None, back_off(Some(tiny), Some(tiny))));
        assert_eq!(
            (p.initial_backoff(), p.max_backoff()),
            (MS(1), MS(1)),
            "under 1 ms counts as 1 ms"
        );
        let p = parse(&policy("internal", None, back_off(Some(tiny), None)));
        assert_eq!((p.initial_backoff(), p.max_backoff()), (MS(1), MS(1)));

        let nack = |b, field: &str| {
            let err =
                parse_retry_policy(&policy("internal", None, b)).expect_err("invalid back-off");
            assert_eq!(err.field, field);
        };
        nack(
            back_off(None, Some(MS(100))),
            "retry_back_off.base_interval",
        );
        nack(
            back_off(Some(Duration::ZERO), None),
            "retry_back_off.base_interval",
        );
        nack(
            back_off(Some(MS(100)), Some(Duration::ZERO)),
            "retry_back_off.max_interval",
        );
        nack(
            back_off(Some(MS(100)), Some(MS(99))),
            "retry_back_off.max_interval",
        );
        let negative = Some(RetryBackOff {
            base_interval: Some(envoy_types::pb::google::protobuf::Duration {
                seconds: -1,
                nanos: 0,
            }),
            max_interval: None,
        });
        nack(negative, "retry_back_off.base_interval");
    }
}
