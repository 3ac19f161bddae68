//! `perAttemptRecvTimeout` (gRFC A44's extension to A6) as timelines: the timer starts with each attempt,
//! stops when the call commits to it, cuts the attempt (cancelled, counted as CANCELLED: retried when
//! CANCELLED or DEADLINE_EXCEEDED is listed), ends one hedge only, and never outlives the call's deadline.

use std::time::{Duration, Instant};

use grpc_code::Code::*;

use super::*;

fn retry_with_timeout(max: u64, timeout_ms: u64, codes: &[Code]) -> Policy {
    Policy::Retry(
        RetryPolicy::with_recv_timeout(
            MaxAttempts::new(max, 5).expect("valid"),
            Duration::from_millis(100),
            Duration::from_millis(100),
            1.0,
            super::codes(codes),
            Duration::from_millis(timeout_ms),
        )
        .expect("valid"),
    )
}

fn hedging_with_timeout(max: u64, delay_ms: u64, timeout_ms: u64) -> Policy {
    Policy::Hedging(
        HedgingPolicy::new(
            MaxAttempts::new(max, 5).expect("valid"),
            Duration::from_millis(delay_ms),
            super::codes(&[Unavailable]),
        )
        .with_per_attempt_recv_timeout(Duration::from_millis(timeout_ms))
        .expect("valid"),
    )
}

fn with_deadline(policy: Policy, deadline_ms: u64) -> Timeline {
    let start = Instant::now();
    Timeline::starting_at(
        CallConfig {
            policy,
            deadline: Some(start + Duration::from_millis(deadline_ms)),
            ..CallConfig::default()
        },
        SharedLimits::default(),
        start,
        1,
    )
}

#[test]
fn a_slow_attempt_is_cut_at_its_timeout_and_retried_when_cancelled_is_listed() {
    let mut t = Timeline::new(retry_with_timeout(3, 500, &[Cancelled]));
    assert_eq!(t.actions(), ["start 0 prev=0"]);
    assert_eq!(t.advance(), Some(500), "the timer starts with the attempt");
    assert_eq!(t.actions(), ["cancel 0"]);
    let at = t.advance().expect("backoff");
    assert!((580..=620).contains(&at), "backoff 100 ms ± 20 %: {at}");
    assert_eq!(t.actions(), ["start 1 prev=1"]);
    assert_eq!(t.call.stats().per_attempt_recv_timeouts, 1);
}

#[test]
fn each_attempt_gets_the_full_timeout_from_its_own_start() {
    let mut t = Timeline::new(retry_with_timeout(3, 500, &[Unavailable, Cancelled]));
    t.actions();
    t.sleep(200);
    t.status(0, Unavailable);
    let retry_at = t.advance().expect("backoff");
    assert_eq!(t.actions(), ["start 1 prev=1"]);
    assert_eq!(
        t.advance(),
        Some(retry_at + 500),
        "attempt 1's timer counts from attempt 1's start"
    );
    assert_eq!(t.actions(), ["cancel 1"]);
}

#[test]
fn response_headers_stop_the_timer() {
    let mut t = Timeline::new(retry_with_timeout(3, 500, &[Unavailable, Cancelled]));
    t.actions();
    t.sleep(100);
    t.headers(0);
    assert_eq!(t.actions(), ["commit 0"]);
    assert_eq!(t.call.poll_timeout(), None, "committed: no timer left");
    t.sleep(10_000);
    t.status(0, Ok);
    assert_eq!(t.actions(), ["finish 0"]);
}

#[test]
fn the_last_attempt_cut_ends_the_call_cancelled() {
    let mut t = Timeline::new(retry_with_timeout(2, 300, &[Unavailable, Cancelled]));
    t.actions();
    t.advance();
    assert_eq!(t.actions(), ["cancel 0"]);
    t.advance();
    assert_eq!(t.actions(), ["start 1 prev=1"]);
    t.advance();
    assert_eq!(t.actions(), ["cancel 1", "finish PerAttemptRecvTimeout"]);
    assert_eq!(
        crate::LocalReason::PerAttemptRecvTimeout.code(),
        Cancelled,
        "a timed-out attempt counts as CANCELLED"
    );
    assert_eq!(t.call.stats().failed_retries, 1);
}

#[test]
fn the_call_deadline_bounds_the_attempt_timers() {
    // Timeout 500 ms, deadline 1000 ms: attempt 0 is cut at 500; attempt 1 starts at ~600 and would be cut
    // at ~1100, but the deadline comes first.
    let mut t = with_deadline(retry_with_timeout(5, 500, &[Unavailable, Cancelled]), 1000);
    t.actions();
    assert_eq!(t.advance(), Some(500));
    assert_eq!(t.actions(), ["cancel 0"]);
    t.advance();
    assert_eq!(t.actions(), ["start 1 prev=1"]);
    assert_eq!(t.advance(), Some(1000));
    assert_eq!(t.actions(), ["cancel 1", "finish DeadlineExceeded"]);
}

#[test]
fn a_cut_attempt_whose_retry_would_start_after_the_deadline_ends_the_call_at_once() {
    // Timeout 500 ms, deadline 550 ms: the retry (~100 ms later) would start after the deadline.
    let mut t = with_deadline(retry_with_timeout(5, 500, &[Unavailable]), 550);
    t.actions();
    assert_eq!(t.advance(), Some(500));
    assert_eq!(t.actions(), ["cancel 0", "finish PerAttemptRecvTimeout"]);
}

#[test]
fn a_timeout_is_a_qualifying_failure_for_the_throttle() {
    let bucket = throttle(10, 100);
    let mut t = Timeline::with(
        CallConfig {
            policy: retry_with_timeout(3, 500, &[Unavailable]),
            ..CallConfig::default()
        },
        SharedLimits {
            throttle: Some(bucket.clone()),
            pool: pool(1 << 20),
        },
    );
    t.actions();
    t.advance();
    assert_eq!(
        bucket.milli_tokens(),
        9_000,
        "one token for the cut attempt"
    );
}

#[test]
fn hedging_a_cut_hedge_ends_that_hedge_only_and_the_next_goes_out_at_once() {
    // Hedges every 300 ms, each cut after 500 ms: attempt 0 is cut at 500 (attempt 1, started at 300, runs
    // on), hedge 2 goes out at once; attempt 1 answers first and wins.
    let mut t = Timeline::new(hedging_with_timeout(3, 300, 500));
    assert_eq!(t.actions(), ["start 0 prev=0"]);
    assert_eq!(t.advance(), Some(300));
    assert_eq!(t.actions(), ["start 1 prev=1"]);
    assert_eq!(t.advance(), Some(500));
    assert_eq!(t.actions(), ["cancel 0", "start 2 prev=2"]);
    t.sleep(100);
    t.headers(1);
    assert_eq!(t.actions(), ["cancel 2", "commit 1"]);
    assert_eq!(t.call.poll_timeout(), None);
    t.status(1, Ok);
    assert_eq!(t.actions(), ["finish 1"]);
}

#[test]
fn hedging_when_every_hedge_is_cut_the_call_ends_cancelled() {
    let mut t = Timeline::new(hedging_with_timeout(2, 1000, 300));
    t.actions();
    assert_eq!(t.advance(), Some(300));
    assert_eq!(t.actions(), ["cancel 0", "start 1 prev=1"]);
    assert_eq!(t.advance(), Some(600));
    assert_eq!(t.actions(), ["cancel 1", "finish PerAttemptRecvTimeout"]);
}

#[test]
fn hedging_the_call_deadline_still_bounds_the_call() {
    let mut t = with_deadline(hedging_with_timeout(3, 1000, 300), 400);
    t.actions();
    assert_eq!(t.advance(), Some(300));
    assert_eq!(t.actions(), ["cancel 0", "start 1 prev=1"]);
    assert_eq!(t.advance(), Some(400));
    assert_eq!(t.actions(), ["cancel 1", "finish DeadlineExceeded"]);
}

#[test]
fn a_fatal_status_still_ends_a_hedged_call_before_any_timeout() {
    let mut t = Timeline::new(hedging_with_timeout(3, 1000, 300));
    t.actions();
    t.sleep(100);
    t.status(0, InvalidArgument);
    assert_eq!(t.actions(), ["finish 0"]);
}

#[test]
fn a_cut_attempt_is_retried_only_when_cancelled_or_deadline_exceeded_is_listed() {
    for (codes, retried) in [
        (&[][..], false),
        (&[Unavailable][..], false),
        (&[DeadlineExceeded][..], true),
        (&[Unavailable, Cancelled][..], true),
    ] {
        let mut t = Timeline::new(retry_with_timeout(3, 500, codes));
        assert_eq!(t.actions(), ["start 0 prev=0"]);
        assert_eq!(t.advance(), Some(500));
        let actions = t.actions();
        assert_eq!(actions[0], "cancel 0", "{codes:?}");
        if retried {
            assert!(t.advance().is_some(), "{codes:?}: a backoff, then a retry");
            assert_eq!(t.actions(), ["start 1 prev=1"], "{codes:?}");
        } else {
            assert!(
                actions.iter().any(|a| a.starts_with("finish")),
                "{codes:?}: the call ends: {actions:?}"
            );
        }
    }
}

#[test]
fn timed_out_tells_a_cut_hedge_from_one_cancelled_because_another_won_or_by_the_deadline() {
    // As in the hedging timeline above: attempt 0 cut at 500, attempt 2 cancelled when attempt 1 wins.
    let mut t = Timeline::new(hedging_with_timeout(3, 300, 500));
    t.actions();
    t.advance();
    t.actions();
    assert_eq!(t.advance(), Some(500));
    assert_eq!(t.actions(), ["cancel 0", "start 2 prev=2"]);
    assert!(t.call.timed_out(AttemptId(0)), "cut by its receive timeout");
    t.sleep(100);
    t.headers(1);
    assert_eq!(t.actions(), ["cancel 2", "commit 1"]);
    assert!(!t.call.timed_out(AttemptId(2)), "a hedge that lost");
    assert!(!t.call.timed_out(AttemptId(1)), "the winner");
    assert!(!t.call.timed_out(AttemptId(7)), "no such attempt");

    // Cut by the call's deadline, not by its own timeout.
    let mut t = with_deadline(hedging_with_timeout(3, 1000, 300), 400);
    t.actions();
    t.advance();
    t.actions();
    assert_eq!(t.advance(), Some(400));
    assert_eq!(t.actions(), ["cancel 1", "finish DeadlineExceeded"]);
    assert!(t.call.timed_out(AttemptId(0)));
    assert!(!t.call.timed_out(AttemptId(1)));
}
