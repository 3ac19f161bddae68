//! A6 "Retry and Hedging Statistics" from real timelines: retry attempts made, retry attempts which failed,
//! and the retry-count buckets where each retry attempt counts once (hedges count as retry attempts).

use std::time::Duration;

use grpc_code::Code::{self, *};

use super::*;
use crate::stats::MethodStats;

/// A retry policy allowing `attempts` attempts (past the default cap of 5).
fn many_attempts(attempts: u32) -> Policy {
    Policy::Retry(
        RetryPolicy::new(
            MaxAttempts::new(u64::from(attempts), attempts).expect("valid"),
            Duration::from_millis(10),
            Duration::from_millis(10),
            1.0,
            codes(&[Unavailable]),
        )
        .expect("valid"),
    )
}

/// Runs a call whose attempts end with `ends` in turn, each retried after its backoff.
fn run(policy: Policy, ends: &[Code]) -> Timeline {
    let mut t = Timeline::new(policy);
    for (attempt, code) in ends.iter().enumerate() {
        assert_eq!(
            t.actions(),
            [format!("start {attempt} prev={attempt}")],
            "attempt {attempt}"
        );
        t.status(attempt as u32, *code);
        t.advance();
    }
    assert!(t.call.is_finished());
    t
}

#[test]
fn seven_and_twelve_retries_fill_one_bucket_per_retry_attempt() {
    // 8 attempts: 7 retries, the last one succeeds.
    let mut ends = vec![Unavailable; 7];
    ends.push(Ok);
    let seven = run(many_attempts(8), &ends);
    let s = seven.call.stats();
    assert_eq!((s.attempts, s.retries, s.failed_retries), (8, 7, 6));

    // 13 attempts: 12 retries, all fail (the last one ends the call at maxAttempts).
    let twelve = run(many_attempts(13), &[Unavailable; 13]);
    let s = twelve.call.stats();
    assert_eq!((s.attempts, s.retries, s.failed_retries), (13, 12, 12));

    let mut m = MethodStats::default();
    m.record(seven.call.stats());
    assert_eq!(m.retry_count_buckets, [1, 1, 1, 1, 3, 0, 0, 0]);
    m.record(twelve.call.stats());
    // 12 retries: one each in >=1..>=4, the 5th to 9th in >=5, the 10th to 12th in >=10.
    assert_eq!(m.retry_count_buckets, [2, 2, 2, 2, 8, 3, 0, 0]);
    assert_eq!((m.retries, m.failed_retries), (19, 18));
}

#[test]
fn hedges_are_retry_attempts_and_cancelled_losers_did_not_fail() {
    let mut t = Timeline::new(hedging_policy(3, 100, &[Unavailable]));
    t.advance();
    t.advance();
    assert_eq!(
        t.actions(),
        ["start 0 prev=0", "start 1 prev=1", "start 2 prev=2"]
    );
    t.status(1, Unavailable); // a hedge failed
    t.status(0, Ok); // the original wins; hedge 2 is cancelled
    assert_eq!(t.actions(), ["cancel 2", "finish 0"]);
    let s = t.call.stats();
    assert_eq!((s.hedges, s.failed_retries), (2, 1));
    let mut m = MethodStats::default();
    m.record(s);
    assert_eq!(m.retry_count_buckets, [1, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(m.failed_retries, 1);
}

#[test]
fn a_failed_original_is_no_failed_retry_and_a_transparent_replacement_counts_once() {
    let mut t = Timeline::new(retry_policy(3, 10, 10, 1.0, &[Unavailable]));
    t.actions();
    t.status(0, Unavailable); // the original: not a retry attempt
    t.advance();
    assert_eq!(t.actions(), ["start 1 prev=1"]);
    t.fail(1, Unavailable, FailurePlace::NotSent); // never left: replaced in place
    assert_eq!(t.actions(), ["start 2 prev=1 transparent"]);
    assert_eq!(t.call.stats().failed_retries, 0);
    t.status(2, Unavailable); // retry attempt 1 failed
    t.advance();
    assert_eq!(t.actions(), ["start 3 prev=2"]);
    t.status(3, Ok);
    let s = t.call.stats();
    assert_eq!(
        (s.retries, s.transparent_retries, s.failed_retries),
        (2, 1, 1)
    );
}
