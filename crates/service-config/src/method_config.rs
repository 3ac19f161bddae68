//! `methodConfig` entries: names, `timeout`, `waitForReady`, message size limits, and the A6 `retryPolicy` /
//! `hedgingPolicy` with every validation rule of A6, plus gRFC A44's `perAttemptRecvTimeout` in both (a
//! Duration > 0; with it, a retry policy's `retryableStatusCodes` may be empty).

use std::time::Duration;

use grpc_retry::{CodeSet, HedgingPolicy, MaxAttempts, Policy, RetryPolicy};
use serde_json::{Map, Value};

use crate::clamp::{Clamp, ClampKind, Clamps};
use crate::error::{ParseError, Rule};
use crate::json::{each, field, required, At};

/// What the service config says about one method (or a service's methods, or all methods).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MethodConfig {
    /// `timeout`: the call's deadline is at most this far from its start.
    pub timeout: Option<Duration>,
    /// `waitForReady`: the default for calls that did not set it.
    pub wait_for_ready: Option<bool>,
    /// `maxRequestMessageBytes`.
    pub max_request_message_bytes: Option<u32>,
    /// `maxResponseMessageBytes`.
    pub max_response_message_bytes: Option<u32>,
    /// `retryPolicy` or `hedgingPolicy` (never both).
    pub policy: Policy,
}

/// A method name entry: `service/method`, `service/` (all its methods) or `/` (every method).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Name {
    Method(String),
    Service(String),
    Default,
}

pub(crate) fn parse_method_config(
    at: At<'_>,
    attempts_cap: u32,
    clamps: &mut Clamps,
) -> Result<(Vec<Name>, MethodConfig), ParseError> {
    let obj = at.object()?;
    let names = field(&at, obj, "name", |names| each(&names, parse_name))?.unwrap_or_default();
    let timeout = field(&at, obj, "timeout", |t| t.duration())?;
    let wait_for_ready = field(&at, obj, "waitForReady", |w| w.bool())?;
    let max_request_message_bytes = field(&at, obj, "maxRequestMessageBytes", u32_field)?;
    let max_response_message_bytes = field(&at, obj, "maxResponseMessageBytes", u32_field)?;
    let retry = field(&at, obj, "retryPolicy", |p| {
        parse_retry_policy(p, attempts_cap, clamps)
    })?;
    let hedging = field(&at, obj, "hedgingPolicy", |p| {
        parse_hedging_policy(p, attempts_cap, clamps)
    })?;
    let policy = match (retry, hedging) {
        (Some(_), Some(_)) => return Err(at.error(Rule::BothPolicies)),
        (Some(r), None) => Policy::Retry(r),
        (None, Some(h)) => Policy::Hedging(h),
        (None, None) => Policy::None,
    };
    Ok((
        names,
        MethodConfig {
            timeout,
            wait_for_ready,
            max_request_message_bytes,
            max_response_message_bytes,
            policy,
        },
    ))
}

fn u32_field(at: At<'_>) -> Result<u32, ParseError> {
    let n = at.uint()?;
    u32::try_from(n)
        .map_err(|_| at.error(Rule::OutOfRange(format!("{n} is larger than 4294967295"))))
}

fn parse_name(at: At<'_>) -> Result<Name, ParseError> {
    let obj = at.object()?;
    let service = field(&at, obj, "service", |s| s.str().map(str::to_owned))?.unwrap_or_default();
    let method = field(&at, obj, "method", |m| m.str().map(str::to_owned))?.unwrap_or_default();
    match (service.is_empty(), method.is_empty()) {
        (true, true) => Ok(Name::Default),
        (true, false) => Err(at.error(Rule::MethodWithoutService)),
        (false, true) => Ok(Name::Service(service.to_owned())),
        (false, false) => Ok(Name::Method(format!("{service}/{method}"))),
    }
}

fn max_attempts(
    at: &At<'_>,
    obj: &Map<String, Value>,
    cap: u32,
    clamps: &mut Clamps,
) -> Result<MaxAttempts, ParseError> {
    required(at, obj, "maxAttempts", |m| {
        let n = m.uint()?;
        let applied = MaxAttempts::new(n, cap).map_err(|e| m.error(Rule::Policy(e)))?;
        if u64::from(applied.get()) < n {
            clamps.push(Clamp::new(
                m.path(),
                ClampKind::MaxAttempts {
                    requested: n,
                    applied: applied.get(),
                },
            ));
        }
        Ok(applied)
    })
}

fn codes(at: At<'_>) -> Result<CodeSet, ParseError> {
    Ok(each(&at, |c| c.code())?.into_iter().collect())
}

/// A Duration field that must be more than zero.
fn positive(name: &'static str) -> impl Fn(At<'_>) -> Result<Duration, ParseError> {
    move |d: At<'_>| {
        let v = d.duration()?;
        if v.is_zero() {
            Err(d.error(Rule::OutOfRange(format!(
                "{name} must be greater than zero"
            ))))
        } else {
            Ok(v)
        }
    }
}

fn parse_retry_policy(
    at: At<'_>,
    cap: u32,
    clamps: &mut Clamps,
) -> Result<RetryPolicy, ParseError> {
    let obj = at.object()?;
    let max_attempts = max_attempts(&at, obj, cap, clamps)?;
    // The gRFC A44 extension: with it, retryableStatusCodes may be empty.
    let recv_timeout = field(
        &at,
        obj,
        "perAttemptRecvTimeout",
        positive("perAttemptRecvTimeout"),
    )?;
    let initial = required(&at, obj, "initialBackoff", positive("initialBackoff"))?;
    let max = required(&at, obj, "maxBackoff", positive("maxBackoff"))?;
    let multiplier = required(&at, obj, "backoffMultiplier", |m| {
        let x = m.number()?;
        if x > 0.0 {
            Ok(x)
        } else {
            Err(m.error(Rule::OutOfRange(format!(
                "backoffMultiplier must be greater than zero, got {x}"
            ))))
        }
    })?;
    let retryable = required(&at, obj, "retryableStatusCodes", |c| {
        let set = codes(c)?;
        if set.is_empty() && recv_timeout.is_none() {
            Err(c.error(Rule::Policy(grpc_retry::PolicyError::NoRetryableCodes)))
        } else {
            Ok(set)
        }
    })?;
    match recv_timeout {
        None => RetryPolicy::new(max_attempts, initial, max, multiplier, retryable),
        Some(t) => {
            RetryPolicy::with_recv_timeout(max_attempts, initial, max, multiplier, retryable, t)
        }
    }
    .map_err(|e| at.error(Rule::Policy(e)))
}

fn parse_hedging_policy(
    at: At<'_>,
    cap: u32,
    clamps: &mut Clamps,
) -> Result<HedgingPolicy, ParseError> {
    let obj = at.object()?;
    let max_attempts = max_attempts(&at, obj, cap, clamps)?;
    let delay = field(&at, obj, "hedgingDelay", |d| d.duration())?.unwrap_or(Duration::ZERO);
    let non_fatal = field(&at, obj, "nonFatalStatusCodes", codes)?.unwrap_or_default();
    let recv_timeout = field(
        &at,
        obj,
        "perAttemptRecvTimeout",
        positive("perAttemptRecvTimeout"),
    )?;
    let policy = HedgingPolicy::new(max_attempts, delay, non_fatal);
    match recv_timeout {
        None => Ok(policy),
        Some(t) => policy
            .with_per_attempt_recv_timeout(t)
            .map_err(|e| at.error(Rule::Policy(e))),
    }
}
