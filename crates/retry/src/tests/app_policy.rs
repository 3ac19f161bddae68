//! Application retry policies as timelines: each built-in (delays within bounds with a seeded RNG), a
//! custom policy reading the failed attempt, the precedence rules, the A6 guard rails around them, and the
//! application's per-attempt timeout.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use grpc_code::Code::*;

use super::*;
use crate::{
    AppRetryPolicy, AttemptDetails, Exponential, FailedAttempt, Linear, NoRetry, PolicySource,
    Precedence, RetryDecision, Rng,
};

fn app(policy: impl AppRetryPolicy + 'static) -> Timeline {
    app_over(Policy::None, policy, Precedence::ServiceConfig, 1)
}

fn app_over(
    service_config: Policy,
    policy: impl AppRetryPolicy + 'static,
    precedence: Precedence,
    seed: u64,
) -> Timeline {
    Timeline::starting_at(
        CallConfig {
            policy: service_config,
            app_policy: Some(Arc::new(policy)),
            precedence,
            ..CallConfig::default()
        },
        SharedLimits::default(),
        Instant::now(),
        seed,
    )
}

/// Fails every attempt with `code` until the call finishes; returns the start time (ms) of each retry.
fn retry_times(t: &mut Timeline, code: Code) -> Vec<u128> {
    let mut times = Vec::new();
    let mut attempt = 0;
    loop {
        let actions = t.actions();
        if actions.iter().any(|a| a.starts_with("finish")) {
            return times;
        }
        t.status(attempt, code);
        if t.call.is_finished() {
            return times;
        }
        times.push(t.advance().expect("retry timer"));
        attempt += 1;
    }
}

#[test]
fn no_retry_returns_the_first_failure() {
    let mut t = app(NoRetry);
    assert_eq!(t.call.policy_source(), PolicySource::Application);
    t.actions();
    t.status(0, Unavailable);
    assert_eq!(t.actions(), ["finish 0"]);
}

#[test]
fn linear_retries_after_a_fixed_delay_up_to_max_attempts() {
    let mut t = app(Linear::new(Duration::from_millis(250), 3));
    assert_eq!(retry_times(&mut t, Unavailable), [250, 500]);
    assert_eq!(t.call.stats().attempts, 3);
}

#[test]
fn linear_does_not_retry_a_code_it_does_not_list() {
    let mut t = app(Linear::new(Duration::from_millis(250), 3));
    t.actions();
    t.status(0, InvalidArgument);
    assert_eq!(t.actions(), ["finish 0"]);
}

#[test]
fn exponential_delays_double_with_jitter_within_min_and_max_for_every_seed() {
    // base 100 ms, min 90 ms, max 500 ms: bases 100, 200, 400, 800→500; ±20 %, then kept in [90, 500].
    let mut runs = Vec::new();
    for seed in 0..200 {
        let policy = Exponential::new(
            Duration::from_millis(100),
            Duration::from_millis(90),
            Duration::from_millis(500),
            5,
        )
        .expect("valid");
        let mut t = app_over(Policy::None, policy, Precedence::ServiceConfig, seed);
        let times = retry_times(&mut t, Unavailable);
        assert_eq!(times.len(), 4, "5 attempts in all");
        let mut delays = Vec::new();
        let mut prev = 0;
        for at in &times {
            delays.push(at - prev);
            prev = *at;
        }
        for (d, base) in delays.iter().zip([100u128, 200, 400, 500]) {
            let (lo, hi) = ((base * 8 / 10).max(90), (base * 12 / 10).min(500));
            assert!(*d >= lo && *d <= hi, "seed {seed}: {d} ms vs [{lo}, {hi}]");
        }
        runs.push(delays);
    }
    let first = runs[0].clone();
    let mut again = app_over(
        Policy::None,
        Exponential::new(
            Duration::from_millis(100),
            Duration::from_millis(90),
            Duration::from_millis(500),
            5,
        )
        .expect("valid"),
        Precedence::ServiceConfig,
        0,
    );
    let times = retry_times(&mut again, Unavailable);
    let mut prev = 0;
    let delays: Vec<u128> = times
        .iter()
        .map(|at| {
            let d = at - prev;
            prev = *at;
            d
        })
        .collect();
    assert_eq!(delays, first, "the same seed gives the same timeline");
    runs.dedup();
    assert!(runs.len() > 100, "jitter varies with the seed");
}

/// Retries while the trailers carry `x-retry-in-ms`, after that delay; records what it saw.
#[derive(Debug, Default)]
struct TrailerDriven {
    seen: Mutex<Vec<String>>,
}

impl AppRetryPolicy for TrailerDriven {
    fn max_attempts(&self) -> u32 {
        4
    }

    fn decide(&self, info: &FailedAttempt<'_>, _rng: &mut dyn Rng) -> RetryDecision {
        let seen = format!(
            "attempt={} code={:?} message={} elapsed={}ms timed_out={}",
            info.attempt,
            info.code,
            info.message,
            info.elapsed.as_millis(),
            info.timed_out
        );
        self.seen.lock().expect("lock").push(seen);
        let ms = info
            .trailers
            .get("x-retry-in-ms")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.parse().ok());
        match ms {
            Some(ms) => RetryDecision::Retry {
                after: Duration::from_millis(ms),
            },
            None => RetryDecision::Stop,
        }
    }
}

#[test]
fn a_custom_policy_sees_the_attempt_status_and_trailers_and_decides() {
    let policy = Arc::new(TrailerDriven::default());
    let mut t = Timeline::with(
        CallConfig {
            app_policy: Some(policy.clone()),
            ..CallConfig::default()
        },
        SharedLimits::default(),
    );
    t.actions();
    t.sleep(10);
    let trailers: &[(&str, &[u8])] = &[("x-retry-in-ms", b"40")];
    t.call.handle_end_with(
        AttemptId(0),
        AttemptEnd::status(Aborted, Pushback::None),
        &AttemptDetails {
            message: "busy",
            trailers: &trailers,
        },
        t.now,
    );
    assert_eq!(t.advance(), Some(50));
    assert_eq!(t.actions(), ["start 1 prev=1"]);
    t.call.handle_end_with(
        AttemptId(1),
        AttemptEnd::status(Internal, Pushback::None),
        &AttemptDetails {
            message: "broken",
            trailers: &crate::NoTrailers,
        },
        t.now,
    );
    assert_eq!(t.actions(), ["finish 1"]);
    assert_eq!(
        *policy.seen.lock().expect("lock"),
        [
            "attempt=1 code=Aborted message=busy elapsed=10ms timed_out=false",
            "attempt=2 code=Internal message=broken elapsed=50ms timed_out=false",
        ]
    );
}

// ---- precedence ---------------------------------------------------------------------------------------

#[test]
fn by_default_the_service_config_policy_wins() {
    let linear = Linear::new(Duration::from_millis(10), 5).retry_on([Aborted]);
    let mut t = app_over(
        retry_policy(3, 100, 100, 1.0, &[Unavailable]),
        linear,
        Precedence::ServiceConfig,
        1,
    );
    assert_eq!(t.call.policy_source(), PolicySource::ServiceConfig);
    t.actions();
    t.status(0, Aborted);
    assert_eq!(
        t.actions(),
        ["finish 0"],
        "the service config does not list ABORTED"
    );
}

#[test]
fn the_application_policy_wins_when_it_opts_in() {
    let linear = Linear::new(Duration::from_millis(10), 5).retry_on([Aborted]);
    let mut t = app_over(
        retry_policy(3, 100, 100, 1.0, &[Unavailable]),
        linear,
        Precedence::Application,
        1,
    );
    assert_eq!(t.call.policy_source(), PolicySource::Application);
    t.actions();
    t.status(0, Aborted);
    assert_eq!(t.advance(), Some(10));
    assert_eq!(t.actions(), ["start 1 prev=1"]);
}

#[test]
fn the_application_policy_applies_to_a_method_without_one() {
    let t = app_over(Policy::None, NoRetry, Precedence::ServiceConfig, 1);
    assert_eq!(t.call.policy_source(), PolicySource::Application);
}

#[test]
fn no_retry_with_precedence_turns_the_service_config_retries_off() {
    let mut t = app_over(
        hedging_policy(3, 0, &[Unavailable]),
        NoRetry,
        Precedence::Application,
        1,
    );
    assert_eq!(t.actions(), ["start 0 prev=0"], "no hedges");
    t.status(0, Unavailable);
    assert_eq!(t.actions(), ["finish 0"]);
}

#[test]
fn disabled_retries_turn_the_application_policy_off_too() {
    let mut t = Timeline::with(
        CallConfig {
            app_policy: Some(Arc::new(Linear::new(Duration::from_millis(10), 5))),
            precedence: Precedence::Application,
            retries_enabled: false,
            ..CallConfig::default()
        },
        SharedLimits::default(),
    );
    assert_eq!(t.call.policy_source(), PolicySource::None);
    t.actions();
    t.status(0, Unavailable);
    assert_eq!(t.actions(), ["finish 0"]);
}

// ---- guard rails --------------------------------------------------------------------------------------

#[test]
fn a_dont_retry_pushback_stops_an_application_policy() {
    let mut t = app(Linear::new(Duration::from_millis(10), 5));
    t.actions();
    t.pushback(0, Unavailable, Pushback::DontRetry);
    assert_eq!(t.actions(), ["finish 0"]);
}

#[test]
fn a_pushback_delay_replaces_the_application_delay() {
    let mut t = app(Linear::new(Duration::from_millis(10), 5));
    t.actions();
    t.pushback(
        0,
        Unavailable,
        Pushback::RetryAfter(Duration::from_millis(700)),
    );
    assert_eq!(t.advance(), Some(700));
    assert_eq!(t.actions(), ["start 1 prev=1"]);
}

#[test]
fn the_attempt_cap_bounds_an_application_policy() {
    let mut t = app(Linear::new(Duration::from_millis(10), 100));
    assert_eq!(
        retry_times(&mut t, Unavailable).len(),
        4,
        "5 attempts at most"
    );
}

#[test]
fn an_application_retry_costs_a_token_and_the_throttle_stops_it() {
    let bucket = throttle(4, 100);
    let mut t = Timeline::with(
        CallConfig {
            app_policy: Some(Arc::new(
                Linear::new(Duration::from_millis(10), 5).retry_on([Aborted]),
            )),
            ..CallConfig::default()
        },
        SharedLimits {
            throttle: Some(bucket.clone()),
            pool: pool(1 << 20),
        },
    );
    t.actions();
    t.status(0, Aborted); // 4 → 3 tokens: above half, retried
    assert_eq!(bucket.milli_tokens(), 3_000);
    t.advance();
    assert_eq!(t.actions(), ["start 1 prev=1"]);
    t.status(1, Aborted); // 3 → 2: at half, throttled
    assert_eq!(t.actions(), ["finish 1"]);
    assert_eq!(bucket.milli_tokens(), 2_000);
    let mut t = Timeline::with(
        CallConfig {
            app_policy: Some(Arc::new(Linear::new(Duration::from_millis(10), 5))),
            ..CallConfig::default()
        },
        SharedLimits {
            throttle: Some(bucket.clone()),
            pool: pool(1 << 20),
        },
    );
    t.actions();
    t.status(0, InvalidArgument);
    assert_eq!(
        bucket.milli_tokens(),
        2_000,
        "a failure it does not retry costs nothing"
    );
}

#[test]
fn an_application_retry_past_the_deadline_ends_the_call_at_once() {
    let start = Instant::now();
    let mut t = Timeline::starting_at(
        CallConfig {
            app_policy: Some(Arc::new(Linear::new(Duration::from_millis(500), 5))),
            deadline: Some(start + Duration::from_millis(300)),
            ..CallConfig::default()
        },
        SharedLimits::default(),
        start,
        1,
    );
    t.actions();
    t.status(0, Unavailable);
    assert_eq!(t.actions(), ["finish 0"]);
}

#[test]
fn nothing_is_retried_after_commit_and_transparent_retries_skip_the_policy() {
    let policy = Arc::new(TrailerDriven::default());
    let mut t = Timeline::with(
        CallConfig {
            app_policy: Some(policy.clone()),
            ..CallConfig::default()
        },
        SharedLimits::default(),
    );
    t.actions();
    t.fail(0, Unavailable, FailurePlace::NotSent);
    assert_eq!(t.actions(), ["start 1 prev=0 transparent"]);
    t.headers(1);
    assert_eq!(t.actions(), ["commit 1"]);
    t.status(1, Unavailable);
    assert_eq!(t.actions(), ["finish 1"]);
    assert!(policy.seen.lock().expect("lock").is_empty());
}

// ---- the application's per-attempt timeout -----------------------------------------------------------

#[test]
fn a_built_in_retries_an_attempt_cut_by_its_per_attempt_timeout() {
    let linear = Linear::new(Duration::from_millis(50), 3)
        .with_per_attempt_recv_timeout(Duration::from_millis(400));
    let mut t = app(linear);
    t.actions();
    assert_eq!(t.advance(), Some(400));
    assert_eq!(t.actions(), ["cancel 0"]);
    assert_eq!(t.advance(), Some(450));
    assert_eq!(t.actions(), ["start 1 prev=1"]);
    t.sleep(100);
    t.headers(1);
    assert_eq!(t.actions(), ["commit 1"]);
    assert_eq!(t.call.poll_timeout(), None);
}

/// Stops on a timeout, and says so.
#[derive(Debug)]
struct StopOnTimeout(Mutex<Vec<String>>);

impl AppRetryPolicy for StopOnTimeout {
    fn max_attempts(&self) -> u32 {
        3
    }

    fn decide(&self, info: &FailedAttempt<'_>, _rng: &mut dyn Rng) -> RetryDecision {
        self.0
            .lock()
            .expect("lock")
            .push(format!("{:?} timed_out={}", info.code, info.timed_out));
        RetryDecision::Stop
    }

    fn per_attempt_recv_timeout(&self) -> Option<Duration> {
        Some(Duration::from_millis(200))
    }
}

#[test]
fn a_custom_policy_sees_a_timeout_as_cancelled_and_may_stop() {
    let policy = Arc::new(StopOnTimeout(Mutex::new(Vec::new())));
    let mut t = Timeline::with(
        CallConfig {
            app_policy: Some(policy.clone()),
            ..CallConfig::default()
        },
        SharedLimits::default(),
    );
    t.actions();
    assert_eq!(t.advance(), Some(200));
    assert_eq!(t.actions(), ["cancel 0", "finish PerAttemptRecvTimeout"]);
    assert_eq!(
        *policy.0.lock().expect("lock"),
        ["Cancelled timed_out=true"]
    );
}
