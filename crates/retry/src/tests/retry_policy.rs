//! A6 with a retry policy: one test per row of "Summary of Retry and Hedging Logic", then backoff,
//! pushback, throttling, maxAttempts, the deadline rule, commit and disabling.

use std::time::Duration;

use grpc_code::Code::{self, *};

use super::*;

fn unavailable_policy() -> Policy {
    retry_policy(4, 100, 1000, 2.0, &[Unavailable])
}

#[test]
fn summary_ok_is_returned() {
    let mut t = Timeline::new(unavailable_policy());
    assert_eq!(t.actions(), ["start 0 prev=0"]);
    t.headers(0);
    assert_eq!(t.actions(), ["commit 0"]);
    t.status(0, Ok);
    assert_eq!(t.actions(), ["finish 0"]);
    assert!(t.call.is_finished());
}

#[test]
fn summary_fatal_code_is_returned() {
    let mut t = Timeline::new(unavailable_policy());
    t.actions();
    t.status(0, InvalidArgument);
    assert_eq!(t.actions(), ["finish 0"]);
}

#[test]
fn summary_retryable_code_backs_off_then_retries() {
    let mut t = Timeline::new(unavailable_policy());
    t.actions();
    t.status(0, Unavailable);
    assert_eq!(
        t.actions(),
        Vec::<String>::new(),
        "nothing until the backoff ends"
    );
    let at = t.advance().expect("retry timer");
    assert!(
        (80..=120).contains(&at),
        "first retry after initialBackoff ± 20%: {at} ms"
    );
    assert_eq!(t.actions(), ["start 1 prev=1"]);
}

#[test]
fn summary_pushback_dont_retry_returns_the_failure() {
    let mut t = Timeline::new(unavailable_policy());
    t.actions();
    t.pushback(0, Unavailable, Pushback::DontRetry);
    assert_eq!(t.actions(), ["finish 0"]);
}

#[test]
fn summary_pushback_ms_retries_after_exactly_that() {
    let mut t = Timeline::new(unavailable_policy());
    t.actions();
    t.pushback(
        0,
        Unavailable,
        Pushback::RetryAfter(Duration::from_millis(3333)),
    );
    assert_eq!(t.advance(), Some(3333));
    assert_eq!(t.actions(), ["start 1 prev=1"]);
}

#[test]
fn backoff_sequence_and_jitter_bounds_with_a_seeded_rng() {
    // initial 100 ms, ×2, max 300 ms, 5 attempts: bases 100, 200, 300, 300.
    let mut seen = Vec::new();
    for seed in 0..200 {
        let mut t = Timeline::starting_at(
            CallConfig {
                policy: retry_policy(5, 100, 300, 2.0, &[Unavailable]),
                ..CallConfig::default()
            },
            SharedLimits::default(),
            std::time::Instant::now(),
            seed,
        );
        let mut delays = Vec::new();
        for attempt in 0..4 {
            t.actions();
            let before = t.ms();
            t.status(attempt, Unavailable);
            let at = t.advance().expect("retry");
            delays.push(at - before);
        }
        t.status(4, Unavailable);
        assert_eq!(
            t.actions().last().map(String::as_str),
            Some("finish 4"),
            "5 attempts in all"
        );
        for (d, base) in delays.iter().zip([100u128, 200, 300, 300]) {
            assert!(
                *d * 10 >= base * 8 && *d * 10 <= base * 12,
                "seed {seed}: {d} vs base {base}"
            );
        }
        seen.push(delays);
    }
    seen.dedup();
    assert!(seen.len() > 100, "jitter varies with the seed");
}

#[test]
fn pushback_restarts_the_backoff_at_initial() {
    let mut t = Timeline::new(retry_policy(5, 100, 10_000, 10.0, &[Unavailable]));
    t.actions();
    t.status(0, Unavailable); // backoff n=1: ~100 ms
    t.advance();
    t.actions();
    t.status(1, Unavailable); // n=2: ~1000 ms
    let before = t.ms();
    let at = t.advance().expect("retry");
    assert!((800..=1200).contains(&(at - before)), "{}", at - before);
    t.actions();
    t.pushback(
        2,
        Unavailable,
        Pushback::RetryAfter(Duration::from_millis(50)),
    );
    let before = t.ms();
    assert_eq!(t.advance().map(|at| at - before), Some(50));
    t.actions();
    t.status(3, Unavailable); // backoff restarted: ~100 ms again, not 10 s
    let before = t.ms();
    let at = t.advance().expect("retry");
    assert!((80..=120).contains(&(at - before)), "{}", at - before);
}

#[test]
fn max_attempts_includes_the_original() {
    let mut t = Timeline::new(retry_policy(3, 10, 10, 1.0, &[Unavailable]));
    for attempt in 0..3 {
        assert_eq!(t.actions(), [format!("start {attempt} prev={attempt}")]);
        t.status(attempt, Unavailable);
        t.advance();
    }
    assert_eq!(t.actions(), ["finish 2"]);
    assert_eq!(t.call.stats().retries, 2);
    assert_eq!(t.call.stats().attempts, 3);
}

#[test]
fn retry_that_would_start_after_the_deadline_ends_the_call_at_once() {
    let start = std::time::Instant::now();
    let mut t = Timeline::starting_at(
        CallConfig {
            policy: retry_policy(5, 1000, 1000, 1.0, &[Unavailable]),
            deadline: Some(start + Duration::from_millis(500)),
            ..CallConfig::default()
        },
        SharedLimits::default(),
        start,
        1,
    );
    t.actions();
    t.sleep(100);
    t.status(0, Unavailable);
    assert_eq!(
        t.actions(),
        ["finish 0"],
        "the last status, not a later DEADLINE_EXCEEDED"
    );
    assert_eq!(t.ms(), 100);
}

#[test]
fn the_deadline_spans_all_attempts() {
    let start = std::time::Instant::now();
    let mut t = Timeline::starting_at(
        CallConfig {
            policy: retry_policy(5, 100, 100, 1.0, &[Unavailable]),
            deadline: Some(start + Duration::from_millis(1000)),
            ..CallConfig::default()
        },
        SharedLimits::default(),
        start,
        1,
    );
    t.actions();
    t.status(0, Unavailable);
    t.advance();
    assert_eq!(t.actions(), ["start 1 prev=1"]);
    assert_eq!(t.advance(), Some(1000));
    assert_eq!(t.actions(), ["cancel 1", "finish DeadlineExceeded"]);
}

#[test]
fn throttling_stops_retries_below_the_threshold_and_resumes_above_it() {
    // maxTokens 3, tokenRatio 0.5: retries need more than 1.5 tokens.
    let shared = SharedLimits {
        throttle: Some(throttle(3, 500)),
        ..SharedLimits::default()
    };
    let config = CallConfig {
        policy: retry_policy(5, 10, 10, 1.0, &[Unavailable]),
        ..CallConfig::default()
    };
    let mut t = Timeline::with(config.clone(), shared.clone());
    t.actions();
    t.status(0, Unavailable); // 3 → 2 tokens: still > 1.5, retry
    t.advance();
    assert_eq!(t.actions(), ["start 1 prev=1"]);
    t.status(1, Unavailable); // 2 → 1: throttled
    assert_eq!(t.actions(), ["finish 1"]);
    let tokens = shared.throttle.as_ref().map(|t| t.milli_tokens());
    assert_eq!(tokens, Some(1000));

    // A non-retryable failure costs nothing; the first attempt is never throttled.
    let mut u = Timeline::with(config.clone(), shared.clone());
    assert_eq!(u.actions(), ["start 0 prev=0"]);
    u.status(0, Internal);
    assert_eq!(u.actions(), ["finish 0"]);
    assert_eq!(
        shared.throttle.as_ref().map(|t| t.milli_tokens()),
        Some(1000)
    );

    // Two successes (+0.5 each) bring it to 2 tokens, above the threshold again.
    for _ in 0..2 {
        let mut ok = Timeline::with(config.clone(), shared.clone());
        ok.actions();
        ok.status(0, Ok);
    }
    assert_eq!(
        shared.throttle.as_ref().map(|t| t.milli_tokens()),
        Some(2000)
    );
    let mut v = Timeline::with(config, shared.clone());
    v.actions();
    v.status(0, Unavailable); // 2 → 1 token ≤ 1.5: throttled
    assert_eq!(v.actions(), ["finish 0"]);
}

#[test]
fn pushback_dont_retry_costs_a_token() {
    let shared = SharedLimits {
        throttle: Some(throttle(10, 100)),
        ..SharedLimits::default()
    };
    let mut t = Timeline::with(
        CallConfig {
            policy: unavailable_policy(),
            ..CallConfig::default()
        },
        shared.clone(),
    );
    t.actions();
    t.pushback(0, Internal, Pushback::DontRetry);
    assert_eq!(t.actions(), ["finish 0"]);
    assert_eq!(
        shared.throttle.as_ref().map(|t| t.milli_tokens()),
        Some(9000)
    );
}

#[test]
fn commit_on_headers_after_a_backoff_stops_all_retries() {
    let mut t = Timeline::new(unavailable_policy());
    t.actions();
    t.status(0, Unavailable);
    t.headers(0); // a late event for an ended attempt changes nothing
    assert_eq!(t.actions(), Vec::<String>::new());
    t.advance();
    assert_eq!(t.actions(), ["start 1 prev=1"]);
    t.headers(1);
    assert_eq!(t.actions(), ["commit 1"]);
    t.status(1, Unavailable); // retryable, but committed
    assert_eq!(t.actions(), ["finish 1"]);
    assert_eq!(t.call.poll_timeout(), None);
}

#[test]
fn disabled_retries_finish_on_the_first_failure() {
    let mut t = Timeline::with(
        CallConfig {
            policy: unavailable_policy(),
            retries_enabled: false,
            ..CallConfig::default()
        },
        SharedLimits::default(),
    );
    t.actions();
    t.status(0, Unavailable);
    assert_eq!(t.actions(), ["finish 0"]);
}

#[test]
fn retries_avoid_the_addresses_already_used() {
    let mut t = Timeline::new(unavailable_policy());
    t.actions();
    t.picked(0, 1);
    t.status(0, Unavailable);
    t.advance();
    assert_eq!(t.actions(), ["start 1 prev=1 avoid=[10.0.0.1:443]"]);
    t.picked(1, 2);
    t.status(1, Unavailable);
    t.advance();
    assert_eq!(
        t.actions(),
        ["start 2 prev=2 avoid=[10.0.0.1:443,10.0.0.2:443]"]
    );
}

#[test]
fn retry_delay_counts_time_without_an_attempt() {
    let mut t = Timeline::new(retry_policy(3, 100, 100, 1.0, &[Unavailable]));
    t.actions();
    t.sleep(40);
    t.status(0, Unavailable);
    let at = t.advance().expect("retry");
    t.sleep(10);
    t.status(1, Ok);
    let idle = t.call.stats().retry_delay.as_millis();
    assert_eq!(idle, at - 40);
}

#[test]
fn code_names_match_the_policy_whatever_the_code() {
    // Every code but the retryable one ends the call at once.
    for n in 1..=16 {
        let code = Code::from_i32(n).expect("code");
        let mut t = Timeline::new(retry_policy(2, 10, 10, 1.0, &[ResourceExhausted]));
        t.actions();
        t.status(0, code);
        let retried = t.actions().is_empty();
        assert_eq!(retried, code == ResourceExhausted, "{code}");
    }
}
