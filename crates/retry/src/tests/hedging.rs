//! A6 with a hedging policy: one test per row of the summary, then the delay schedule, throttling, commit,
//! and the avoid hint.

use std::time::Duration;

use grpc_code::Code::*;

use super::*;

fn policy() -> Policy {
    hedging_policy(3, 100, &[Unavailable])
}

#[test]
fn original_at_once_then_one_hedge_every_delay() {
    let mut t = Timeline::new(policy());
    assert_eq!(t.actions(), ["start 0 prev=0"]);
    assert_eq!(t.advance(), Some(100));
    assert_eq!(t.actions(), ["start 1 prev=1"]);
    assert_eq!(t.advance(), Some(200));
    assert_eq!(t.actions(), ["start 2 prev=2"]);
    assert_eq!(t.advance(), None, "maxAttempts reached");
    assert_eq!(t.call.stats().hedges, 2);
}

#[test]
fn zero_delay_sends_every_attempt_at_once() {
    let mut t = Timeline::new(hedging_policy(3, 0, &[]));
    assert_eq!(
        t.actions(),
        ["start 0 prev=0", "start 1 prev=1", "start 2 prev=2"]
    );
}

#[test]
fn summary_ok_cancels_the_rest() {
    let mut t = Timeline::new(policy());
    t.advance();
    t.actions();
    t.headers(1);
    assert_eq!(t.actions(), ["cancel 0", "commit 1"]);
    assert_eq!(t.call.poll_timeout(), None, "no more hedges after commit");
    t.status(1, Ok);
    assert_eq!(t.actions(), ["finish 1"]);
}

#[test]
fn summary_trailers_only_ok_cancels_the_rest() {
    let mut t = Timeline::new(policy());
    t.advance();
    t.actions();
    t.status(0, Ok);
    assert_eq!(t.actions(), ["cancel 1", "finish 0"]);
}

#[test]
fn summary_fatal_code_cancels_the_rest() {
    let mut t = Timeline::new(policy());
    t.advance();
    t.actions();
    t.status(1, PermissionDenied);
    assert_eq!(t.actions(), ["cancel 0", "finish 1"]);
}

#[test]
fn summary_non_fatal_sends_the_next_hedge_now_and_later_ones_resume_at_the_delay() {
    let mut t = Timeline::new(hedging_policy(4, 100, &[Unavailable]));
    t.actions();
    t.sleep(30);
    t.status(0, Unavailable);
    assert_eq!(t.actions(), ["start 1 prev=1"], "at 30 ms, not 100");
    assert_eq!(t.advance(), Some(130));
    assert_eq!(t.actions(), ["start 2 prev=2"]);
}

#[test]
fn summary_pushback_dont_retry_stops_hedging() {
    let mut t = Timeline::new(policy());
    t.advance();
    t.actions();
    t.pushback(0, Unavailable, Pushback::DontRetry);
    assert_eq!(t.actions(), Vec::<String>::new(), "attempt 1 still runs");
    assert_eq!(t.call.poll_timeout(), None, "no more hedges");
    t.status(1, Unavailable);
    assert_eq!(t.actions(), ["finish 1"]);
}

#[test]
fn summary_pushback_ms_sends_the_next_hedge_after_that() {
    let mut t = Timeline::new(hedging_policy(4, 100, &[Unavailable]));
    t.actions();
    t.sleep(10);
    t.pushback(
        0,
        Unavailable,
        Pushback::RetryAfter(Duration::from_millis(500)),
    );
    assert_eq!(t.actions(), Vec::<String>::new());
    assert_eq!(t.advance(), Some(510));
    assert_eq!(t.actions(), ["start 1 prev=1"]);
    assert_eq!(
        t.advance(),
        Some(610),
        "later hedges at pushback + hedgingDelay"
    );
    assert_eq!(t.actions(), ["start 2 prev=2"]);
}

#[test]
fn all_attempts_failed_ends_with_the_last_status() {
    let mut t = Timeline::new(policy());
    t.advance();
    t.advance();
    t.actions();
    t.status(2, Unavailable);
    t.status(0, Unavailable);
    assert_eq!(t.actions(), Vec::<String>::new());
    t.status(1, Unavailable);
    assert_eq!(t.actions(), ["finish 1"]);
}

#[test]
fn throttled_hedges_are_not_sent_but_the_original_always_is() {
    // maxTokens 2: more than 1 token needed. Two failures of other calls leave 0.
    let shared = SharedLimits {
        throttle: Some(throttle(2, 1000)),
        ..SharedLimits::default()
    };
    let t0 = shared.throttle.clone().expect("throttle");
    t0.record_failure();
    t0.record_failure();
    let mut t = Timeline::with(
        CallConfig {
            policy: policy(),
            ..CallConfig::default()
        },
        shared.clone(),
    );
    assert_eq!(t.actions(), ["start 0 prev=0"]);
    t.advance();
    assert_eq!(
        t.actions(),
        Vec::<String>::new(),
        "hedge skipped while throttled"
    );
    // Tokens come back (another call succeeded twice): the schedule goes on.
    t0.record_success();
    t0.record_success();
    t.advance();
    assert_eq!(t.actions(), ["start 1 prev=1"]);
}

#[test]
fn non_fatal_with_no_hedge_possible_ends_the_call() {
    let shared = SharedLimits {
        throttle: Some(throttle(2, 1000)),
        ..SharedLimits::default()
    };
    let mut t = Timeline::with(
        CallConfig {
            policy: policy(),
            ..CallConfig::default()
        },
        shared,
    );
    t.actions();
    t.status(0, Unavailable); // 2 → 1 token: throttled, and nothing else in flight
    assert_eq!(t.actions(), ["finish 0"]);
}

#[test]
fn commit_on_headers_during_hedging_cancels_the_others_and_the_timer() {
    let mut t = Timeline::new(hedging_policy(5, 100, &[Unavailable]));
    t.advance();
    t.advance();
    t.actions();
    assert!(t.call.poll_timeout().is_some());
    t.headers(1);
    assert_eq!(t.actions(), ["cancel 0", "cancel 2", "commit 1"]);
    assert_eq!(t.call.poll_timeout(), None);
    t.headers(2); // late headers on a cancelled hedge
    t.status(0, Ok);
    assert_eq!(t.actions(), Vec::<String>::new());
}

#[test]
fn hedges_avoid_the_addresses_already_used() {
    let mut t = Timeline::new(policy());
    t.actions();
    t.picked(0, 1);
    t.advance();
    assert_eq!(t.actions(), ["start 1 prev=1 avoid=[10.0.0.1:443]"]);
    t.picked(1, 2);
    t.picked(1, 2);
    t.advance();
    assert_eq!(
        t.actions(),
        ["start 2 prev=2 avoid=[10.0.0.1:443,10.0.0.2:443]"]
    );
}

#[test]
fn messages_go_to_every_live_attempt_and_new_hedges_replay_them() {
    let mut t = Timeline::new(policy());
    t.actions();
    t.send(10);
    assert_eq!(t.actions(), ["send 0#0"]);
    t.advance();
    assert_eq!(t.actions(), ["start 1 prev=1", "send 1#0"]);
    t.send(10);
    t.half_close_all();
    assert_eq!(t.actions(), ["send 0#1", "send 1#1", "half 0", "half 1"]);
    t.advance();
    assert_eq!(
        t.actions(),
        ["start 2 prev=2", "send 2#0", "send 2#1", "half 2"]
    );
}

impl Timeline {
    fn half_close_all(&mut self) {
        self.call.half_close();
    }
}
