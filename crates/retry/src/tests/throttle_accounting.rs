//! A6 throttle accounting on every outgoing RPC, "regardless of method": successes and qualifying failures
//! (a retryable / non-fatal code of the configured policy, or a "don't retry" pushback) change the target's
//! tokens whether or not the call may retry, and each attempt is charged at most once.

use std::sync::Arc;

use grpc_code::Code::*;

use super::*;

fn shared(throttle: &Arc<Throttle>) -> SharedLimits {
    SharedLimits {
        throttle: Some(throttle.clone()),
        ..SharedLimits::default()
    }
}

fn config(policy: Policy, retries_enabled: bool) -> CallConfig {
    CallConfig {
        policy,
        retries_enabled,
        ..CallConfig::default()
    }
}

#[test]
fn calls_without_a_policy_pay_for_dont_retry_pushback_and_throttle_other_calls() {
    // maxTokens 10: retries need more than 5 tokens.
    let bucket = throttle(10, 100);
    for n in 1..=5u32 {
        let mut t = Timeline::with(config(Policy::None, true), shared(&bucket));
        assert_eq!(t.actions(), ["start 0 prev=0"]);
        t.pushback(0, Unavailable, Pushback::DontRetry);
        assert_eq!(t.actions(), ["finish 0"]);
        assert_eq!(bucket.milli_tokens(), 10_000 - 1000 * n);
    }
    // A call without a policy and without pushback: no code qualifies, nothing is charged.
    let mut t = Timeline::with(config(Policy::None, true), shared(&bucket));
    t.actions();
    t.status(0, Unavailable);
    assert_eq!(bucket.milli_tokens(), 5000);

    // Another method's call, with a retry policy, shares the bucket: it is not retried.
    let mut r = Timeline::with(
        config(retry_policy(5, 10, 10, 1.0, &[Unavailable]), true),
        shared(&bucket),
    );
    assert_eq!(r.actions(), ["start 0 prev=0"]);
    r.status(0, Unavailable);
    assert_eq!(
        r.actions(),
        ["finish 0"],
        "throttled: 5 tokens left, then 4"
    );
    assert_eq!(r.call.stats().attempts, 1);
    assert_eq!(bucket.milli_tokens(), 4000);
}

#[test]
fn disabled_retries_still_pay_for_the_policys_retryable_codes() {
    let bucket = throttle(10, 100);
    let policy = retry_policy(5, 10, 10, 1.0, &[Unavailable]);
    let mut t = Timeline::with(config(policy.clone(), false), shared(&bucket));
    t.actions();
    t.status(0, Unavailable);
    assert_eq!(t.actions(), ["finish 0"], "not retried");
    assert_eq!(bucket.milli_tokens(), 9000, "still a qualifying failure");

    let mut u = Timeline::with(config(policy.clone(), false), shared(&bucket));
    u.actions();
    u.status(0, InvalidArgument);
    assert_eq!(u.actions(), ["finish 0"]);
    assert_eq!(bucket.milli_tokens(), 9000, "not a qualifying code");

    let mut v = Timeline::with(config(policy, false), shared(&bucket));
    v.actions();
    v.status(0, Ok);
    assert_eq!(bucket.milli_tokens(), 9100, "successes count as before");

    // The same for a disabled hedging policy and its non-fatal codes.
    let mut h = Timeline::with(
        config(hedging_policy(3, 100, &[Internal]), false),
        shared(&bucket),
    );
    assert_eq!(h.actions(), ["start 0 prev=0"], "no hedge");
    h.status(0, Internal);
    assert_eq!(h.actions(), ["finish 0"]);
    assert_eq!(bucket.milli_tokens(), 8100);
}

#[test]
fn hedging_fatal_code_with_dont_retry_pushback_costs_a_token() {
    let bucket = throttle(10, 100);
    let mut t = Timeline::with(
        config(hedging_policy(3, 100, &[Unavailable]), true),
        shared(&bucket),
    );
    t.advance();
    assert_eq!(t.actions(), ["start 0 prev=0", "start 1 prev=1"]);
    t.pushback(1, PermissionDenied, Pushback::DontRetry);
    assert_eq!(t.actions(), ["cancel 0", "finish 1"]);
    assert_eq!(bucket.milli_tokens(), 9000);

    // A fatal code without pushback is not a qualifying failure.
    let mut u = Timeline::with(
        config(hedging_policy(3, 100, &[Unavailable]), true),
        shared(&bucket),
    );
    u.actions();
    u.status(0, PermissionDenied);
    assert_eq!(u.actions(), ["finish 0"]);
    assert_eq!(bucket.milli_tokens(), 9000);
}

#[test]
fn the_committed_attempts_qualifying_failure_costs_a_token() {
    let bucket = throttle(10, 100);
    let policy = retry_policy(5, 10, 10, 1.0, &[Unavailable]);
    let mut t = Timeline::with(config(policy.clone(), true), shared(&bucket));
    t.actions();
    t.headers(0);
    assert_eq!(t.actions(), ["commit 0"]);
    t.status(0, Unavailable);
    assert_eq!(t.actions(), ["finish 0"]);
    assert_eq!(bucket.milli_tokens(), 9000);

    // A non-qualifying code after commit costs nothing; a "don't retry" pushback does.
    let mut u = Timeline::with(config(policy.clone(), true), shared(&bucket));
    u.actions();
    u.headers(0);
    u.status(0, InvalidArgument);
    assert_eq!(bucket.milli_tokens(), 9000);
    let mut v = Timeline::with(config(policy, true), shared(&bucket));
    v.actions();
    v.headers(0);
    v.pushback(0, InvalidArgument, Pushback::DontRetry);
    assert_eq!(bucket.milli_tokens(), 8000);
}

#[test]
fn each_failure_is_charged_once_and_only_where_it_qualifies() {
    let bucket = throttle(10, 100);
    let mut t = Timeline::with(
        config(retry_policy(3, 10, 10, 1.0, &[Unavailable]), true),
        shared(&bucket),
    );
    t.actions();
    t.fail(0, Unavailable, FailurePlace::NotSent); // transparent: free
    t.fail(1, Unavailable, FailurePlace::Unprocessed); // transparent once: free
    assert_eq!(bucket.milli_tokens(), 10_000);
    t.status(2, Unavailable); // the policy retries: one token
    assert_eq!(bucket.milli_tokens(), 9000);
    t.advance();
    assert_eq!(
        t.actions(),
        [
            "start 1 prev=0 transparent",
            "start 2 prev=0 transparent",
            "start 3 prev=1"
        ]
    );
    t.pushback(3, Unavailable, Pushback::DontRetry); // retryable code and pushback: still one token
    assert_eq!(t.actions(), ["finish 3"]);
    assert_eq!(bucket.milli_tokens(), 8000);

    // Drops, local errors and pick failures with a code the policy does not retry cost nothing.
    for (code, place) in [
        (Unavailable, FailurePlace::Dropped),
        (Unavailable, FailurePlace::Local),
        (Internal, FailurePlace::PickFailed),
    ] {
        let mut u = Timeline::with(
            config(retry_policy(3, 10, 10, 1.0, &[Unavailable]), true),
            shared(&bucket),
        );
        u.actions();
        u.fail(0, code, place);
        assert_eq!(u.actions(), ["finish 0"], "{place:?}");
        assert_eq!(bucket.milli_tokens(), 8000, "{place:?}");
    }
}
