//! The replay buffer: per-call and per-channel limits, commit on overflow, and memory returning to the pool.

use grpc_code::Code::*;

use super::*;

fn config(policy: Policy, per_call: usize) -> CallConfig {
    CallConfig {
        policy,
        per_call_buffer_limit: per_call,
        ..CallConfig::default()
    }
}

#[test]
fn buffered_messages_are_replayed_on_a_retry() {
    let mut t = Timeline::new(retry_policy(3, 10, 10, 1.0, &[Unavailable]));
    t.actions();
    t.send(100);
    t.send(100);
    t.call.half_close();
    assert_eq!(t.actions(), ["send 0#0", "send 0#1", "half 0"]);
    assert_eq!(t.call.buffered_bytes(), 200);
    t.status(0, Unavailable);
    t.advance();
    assert_eq!(
        t.actions(),
        ["start 1 prev=1", "send 1#0", "send 1#1", "half 1"]
    );
}

#[test]
fn overflowing_the_per_call_limit_commits_the_call() {
    let shared = SharedLimits::default();
    let mut t = Timeline::with(
        config(retry_policy(3, 10, 10, 1.0, &[Unavailable]), 150),
        shared.clone(),
    );
    t.actions();
    t.send(100);
    assert_eq!(t.actions(), ["send 0#0"]);
    t.send(100);
    assert_eq!(t.actions(), ["commit 0", "send 0#1"]);
    assert!(t.call.stats().committed_by_buffer_overflow);
    // Not retryable any more.
    t.status(0, Unavailable);
    assert_eq!(t.actions(), ["finish 0"]);
    assert_eq!(shared.pool.used(), 0);
}

#[test]
fn a_message_larger_than_the_limit_is_sent_but_not_retryable() {
    let mut t = Timeline::with(
        config(retry_policy(3, 10, 10, 1.0, &[Unavailable]), 50),
        SharedLimits::default(),
    );
    t.actions();
    t.send(51);
    assert_eq!(t.actions(), ["commit 0", "send 0#0"]);
    assert_eq!(t.call.buffered_bytes(), 0);
}

#[test]
fn overflowing_the_channel_limit_commits_the_call() {
    let shared = SharedLimits {
        pool: pool(150),
        ..SharedLimits::default()
    };
    let policy = retry_policy(3, 10, 10, 1.0, &[Unavailable]);
    let mut a = Timeline::with(config(policy.clone(), 1000), shared.clone());
    let mut b = Timeline::with(config(policy, 1000), shared.clone());
    a.actions();
    b.actions();
    a.send(100);
    assert_eq!(shared.pool.used(), 100);
    b.send(100);
    assert_eq!(
        b.actions(),
        ["commit 0", "send 0#0"],
        "the pool has only 50 bytes left"
    );
    assert_eq!(shared.pool.used(), 100);
    a.status(0, Ok);
    assert_eq!(
        shared.pool.used(),
        0,
        "memory returns to the pool when the call ends"
    );
}

#[test]
fn committed_attempt_releases_messages_as_it_sends_them() {
    let shared = SharedLimits::default();
    let mut t = Timeline::with(
        config(retry_policy(3, 10, 10, 1.0, &[Unavailable]), 1000),
        shared.clone(),
    );
    t.actions();
    t.send(100);
    t.send(200);
    t.headers(0);
    t.actions();
    assert_eq!(shared.pool.used(), 300, "nothing sent yet");
    t.sent(0, 0);
    assert_eq!(shared.pool.used(), 200);
    t.sent(0, 1);
    assert_eq!(shared.pool.used(), 0);
    t.send(500);
    assert_eq!(
        t.actions(),
        ["send 0#2"],
        "after commit, messages are not buffered"
    );
    assert_eq!(shared.pool.used(), 0);
}

#[test]
fn overflow_while_backing_off_commits_the_next_attempt() {
    let shared = SharedLimits::default();
    let mut t = Timeline::with(
        config(retry_policy(3, 10, 10, 1.0, &[Unavailable]), 150),
        shared.clone(),
    );
    t.actions();
    t.send(100);
    t.actions();
    t.status(0, Unavailable);
    t.send(100); // overflows while no attempt is in flight
    assert_eq!(t.actions(), Vec::<String>::new());
    assert!(t.call.buffered_bytes() <= 150);
    t.advance();
    assert_eq!(
        t.actions(),
        ["start 1 prev=1", "send 1#0", "send 1#1", "commit 1"]
    );
    t.status(1, Unavailable);
    assert_eq!(t.actions(), ["finish 1"], "committed: no more retries");
}

#[test]
fn hedging_overflow_commits_the_attempt_that_sent_the_most() {
    let mut t = Timeline::with(
        config(hedging_policy(3, 100, &[Unavailable]), 250),
        SharedLimits::default(),
    );
    t.actions();
    t.send(100);
    t.advance();
    t.send(100);
    t.actions();
    t.sent(0, 0);
    t.sent(1, 0);
    t.sent(1, 1);
    t.send(100);
    assert_eq!(t.actions(), ["cancel 0", "commit 1", "send 1#2"]);
}

#[test]
fn buffer_accounting_is_released_on_drop() {
    let shared = SharedLimits::default();
    {
        let mut t = Timeline::with(
            config(retry_policy(3, 10, 10, 1.0, &[Unavailable]), 1000),
            shared.clone(),
        );
        t.send(300);
        assert_eq!(shared.pool.used(), 300);
    }
    assert_eq!(shared.pool.used(), 0);
}

#[test]
fn hedging_overflow_while_waiting_on_a_pushback_commits_the_next_hedge() {
    let mut t = Timeline::with(
        config(hedging_policy(3, 100, &[Unavailable]), 150),
        SharedLimits::default(),
    );
    t.actions();
    t.send(100);
    t.actions();
    t.pushback(
        0,
        Unavailable,
        Pushback::RetryAfter(std::time::Duration::from_millis(500)),
    );
    t.send(100); // overflows with no attempt in flight
    assert_eq!(t.actions(), Vec::<String>::new());
    assert_eq!(t.advance(), Some(500));
    assert_eq!(
        t.actions(),
        ["start 1 prev=1", "send 1#0", "send 1#1", "commit 1"]
    );
    assert_eq!(
        t.call.poll_timeout(),
        None,
        "no more hedges after the commit"
    );
    t.status(1, Unavailable);
    assert_eq!(t.actions(), ["finish 1"]);
}
