//! Cancellation in every state, and the deadline.

use std::time::{Duration, Instant};

use grpc_code::Code::*;

use super::*;

fn retry() -> Policy {
    retry_policy(3, 100, 100, 1.0, &[Unavailable])
}

#[test]
fn cancel_while_attempting() {
    let mut t = Timeline::new(retry());
    t.actions();
    t.call.cancel(t.now);
    assert_eq!(t.actions(), ["cancel 0", "finish Cancelled"]);
    assert_eq!(t.call.poll_timeout(), None);
}

#[test]
fn cancel_while_backing_off() {
    let mut t = Timeline::new(retry());
    t.actions();
    t.status(0, Unavailable);
    t.call.cancel(t.now);
    assert_eq!(t.actions(), ["finish Cancelled"]);
    assert_eq!(t.call.poll_timeout(), None, "the retry timer is gone");
}

#[test]
fn cancel_while_committed() {
    let mut t = Timeline::new(retry());
    t.actions();
    t.headers(0);
    t.actions();
    t.call.cancel(t.now);
    assert_eq!(t.actions(), ["cancel 0", "finish Cancelled"]);
}

#[test]
fn cancel_while_hedging_cancels_every_attempt() {
    let mut t = Timeline::new(hedging_policy(3, 10, &[Unavailable]));
    t.advance();
    t.advance();
    t.actions();
    t.call.cancel(t.now);
    assert_eq!(
        t.actions(),
        ["cancel 0", "cancel 1", "cancel 2", "finish Cancelled"]
    );
}

#[test]
fn cancel_after_finish_does_nothing() {
    let mut t = Timeline::new(retry());
    t.actions();
    t.status(0, Ok);
    t.actions();
    t.call.cancel(t.now);
    t.status(0, Unavailable);
    t.send(10);
    assert_eq!(t.actions(), Vec::<String>::new());
}

#[test]
fn a_deadline_already_passed_finishes_before_any_attempt() {
    let start = Instant::now();
    let mut t = Timeline::starting_at(
        CallConfig {
            deadline: Some(start),
            ..CallConfig::default()
        },
        SharedLimits::default(),
        start,
        1,
    );
    assert_eq!(t.actions(), ["finish DeadlineExceeded"]);
}

#[test]
fn deadline_during_hedging_cancels_all() {
    let start = Instant::now();
    let mut t = Timeline::starting_at(
        CallConfig {
            policy: hedging_policy(5, 100, &[Unavailable]),
            deadline: Some(start + Duration::from_millis(250)),
            ..CallConfig::default()
        },
        SharedLimits::default(),
        start,
        1,
    );
    t.advance();
    t.advance();
    t.actions();
    assert_eq!(t.advance(), Some(250));
    assert_eq!(
        t.actions(),
        [
            "cancel 0",
            "cancel 1",
            "cancel 2",
            "finish DeadlineExceeded"
        ]
    );
}
