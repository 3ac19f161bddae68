//! Transparent retries (A6 "Transparent Retries", as grpc-java, grpc-go and C-core implement them).

use grpc_code::Code::*;

use super::*;
use crate::CallConfig;
use FailurePlace::*;

#[test]
fn never_sent_is_retried_at_once_many_times_keeping_previous_attempts() {
    let mut t = Timeline::new(retry_policy(2, 100, 100, 1.0, &[Unavailable]));
    t.actions();
    for i in 0..50 {
        t.fail(i, Unavailable, NotSent);
        assert_eq!(t.actions(), [format!("start {} prev=0 transparent", i + 1)]);
    }
    t.status(50, Unavailable);
    t.advance();
    assert_eq!(
        t.actions(),
        ["start 51 prev=1"],
        "transparent retries do not count toward maxAttempts"
    );
    let s = t.call.stats();
    assert_eq!((s.transparent_retries, s.retries, s.attempts), (50, 1, 52));
}

#[test]
fn never_sent_has_a_safety_cap() {
    let mut t = Timeline::with(
        CallConfig {
            max_transparent_retries: 3,
            ..CallConfig::default()
        },
        SharedLimits::default(),
    );
    t.actions();
    for i in 0..3 {
        t.fail(i, Unavailable, NotSent);
    }
    t.actions();
    t.fail(3, Unavailable, NotSent);
    assert_eq!(t.actions(), ["finish TooManyTransparentRetries"]);
    assert_eq!(
        crate::LocalReason::TooManyTransparentRetries.code(),
        Internal
    );
}

#[test]
fn unprocessed_is_retried_once_then_the_policy_applies() {
    let mut t = Timeline::new(Policy::None);
    t.actions();
    t.fail(0, Unavailable, Unprocessed);
    assert_eq!(t.actions(), ["start 1 prev=0 transparent"]);
    t.fail(1, Unavailable, Unprocessed);
    assert_eq!(t.actions(), ["finish 1"], "at most once per call");
}

#[test]
fn unprocessed_after_a_processed_attempt_is_not_retried_transparently() {
    let mut t = Timeline::new(retry_policy(3, 100, 100, 1.0, &[Unavailable]));
    t.actions();
    t.status(0, Unavailable);
    t.advance();
    t.actions();
    t.fail(1, Unavailable, Unprocessed);
    assert_eq!(
        t.actions(),
        Vec::<String>::new(),
        "the policy's backoff, not an immediate retry"
    );
    t.advance();
    assert_eq!(t.actions(), ["start 2 prev=2"]);
}

#[test]
fn transparent_retries_cost_no_tokens() {
    let shared = SharedLimits {
        throttle: Some(throttle(2, 1000)),
        ..SharedLimits::default()
    };
    let mut t = Timeline::with(
        CallConfig {
            policy: retry_policy(2, 10, 10, 1.0, &[Unavailable]),
            ..CallConfig::default()
        },
        shared.clone(),
    );
    t.actions();
    t.fail(0, Unavailable, NotSent);
    t.fail(1, Unavailable, Unprocessed);
    assert_eq!(
        shared.throttle.as_ref().map(|t| t.milli_tokens()),
        Some(2000)
    );
}

#[test]
fn no_transparent_retry_after_commit() {
    let mut t = Timeline::new(Policy::None);
    t.actions();
    t.headers(0);
    t.actions();
    t.fail(0, Unavailable, NotSent);
    assert_eq!(t.actions(), ["finish 0"]);
}

#[test]
fn a_drop_is_never_retried() {
    let mut t = Timeline::new(retry_policy(5, 10, 10, 1.0, &[Unavailable]));
    t.actions();
    t.fail(0, Unavailable, Dropped);
    assert_eq!(t.actions(), ["finish 0"]);
    let mut h = Timeline::new(hedging_policy(3, 100, &[Unavailable]));
    h.advance();
    h.actions();
    h.fail(1, Unavailable, Dropped);
    assert_eq!(h.actions(), ["cancel 0", "finish 1"]);
}

#[test]
fn transparent_retries_stay_on_when_retries_are_disabled() {
    let mut t = Timeline::with(
        CallConfig {
            policy: retry_policy(5, 10, 10, 1.0, &[Unavailable]),
            retries_enabled: false,
            ..CallConfig::default()
        },
        SharedLimits::default(),
    );
    t.actions();
    t.fail(0, Unavailable, NotSent);
    assert_eq!(t.actions(), ["start 1 prev=0 transparent"]);
    t.fail(1, Unavailable, Unprocessed);
    assert_eq!(t.actions(), ["start 2 prev=0 transparent"]);
    t.status(2, Unavailable);
    assert_eq!(t.actions(), ["finish 2"]);
}

#[test]
fn a_pick_failure_goes_to_the_policy() {
    let mut t = Timeline::new(retry_policy(2, 10, 10, 1.0, &[Unavailable]));
    t.actions();
    t.fail(0, Unavailable, PickFailed);
    t.advance();
    assert_eq!(t.actions(), ["start 1 prev=1"]);
}

#[test]
fn a_hedge_that_never_left_is_replaced_in_place() {
    let mut t = Timeline::new(hedging_policy(2, 100, &[Unavailable]));
    t.advance();
    t.actions();
    t.fail(1, Unavailable, NotSent);
    assert_eq!(t.actions(), ["start 2 prev=1 transparent"]);
    assert_eq!(t.call.stats().hedges, 1);
}

#[test]
fn a_local_error_ends_the_call_at_once_and_costs_no_token() {
    // A request the HTTP/2 library refuses to send (malformed metadata) is nobody's failure: even a code the
    // policy retries ends the call with this attempt, and the throttle does not move.
    let shared = SharedLimits {
        throttle: Some(throttle(10, 100)),
        ..SharedLimits::default()
    };
    let mut t = Timeline::with(
        CallConfig {
            policy: retry_policy(5, 10, 10, 1.0, &[Internal]),
            ..CallConfig::default()
        },
        shared.clone(),
    );
    assert_eq!(t.actions(), ["start 0 prev=0"]);
    t.fail(0, Internal, Local);
    assert_eq!(t.actions(), ["finish 0"]);
    assert_eq!(t.call.poll_timeout(), None, "no retry scheduled");
    assert_eq!(t.call.stats().attempts, 1);
    assert_eq!(
        shared.throttle.as_ref().map(|t| t.milli_tokens()),
        Some(10_000)
    );
}
