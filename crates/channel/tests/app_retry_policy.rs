//! Application retry policies and `perAttemptRecvTimeout` end to end: real loopback sockets to the
//! fault-injecting server, on tokio's paused clock.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::retry::{FailedAttempt, RetryDecision, Rng};
use grpc_channel::{
    AppRetryPolicy, Channel, ChannelBuilder, Code, Exponential, Linear, NoRetry, Precedence,
    Request, Response, Status,
};
use interop::faulty::{methods, Event, FaultyServer};
use support::config::{hedging, retry, ServiceConfig};
use support::flaky::attempts;
use support::guards::{eventually, guarded};
use tokio::time::Instant;

/// A retry policy for `fault.Faulty` retrying `codes`: 3 attempts, a fixed 0.1 s backoff.
fn fixed_backoff_retry(codes: &[&str]) -> ServiceConfig {
    retry(3, codes).max_backoff("0.1s").backoff_multiplier(1)
}

fn builder(server: &FaultyServer, config: impl Into<String>) -> ChannelBuilder {
    Channel::builder(format!("ipv4:{}", server.addr)).default_service_config(config)
}

fn request(key: &str, headers: &[(&str, &str)], timeout: Duration) -> Request<Bytes> {
    let mut req = Request::new(Bytes::new()).with_timeout(timeout);
    req.metadata_mut().append("x-test-key", key).expect("key");
    for (k, v) in headers {
        req.metadata_mut().append(k, v).expect("header");
    }
    req
}

async fn flaky(ch: &Channel, req: Request<Bytes>) -> Result<Response<Bytes>, Status> {
    guarded("flaky call", ch.unary_raw(methods::FLAKY, req)).await
}

fn was_reset(server: &FaultyServer) -> bool {
    server.events().iter().any(|e| {
        matches!(e, Event::Reset { path, reason } if path == methods::FLAKY && *reason == h2::Reason::CANCEL)
    })
}

#[tokio::test(start_paused = true)]
async fn a_slow_first_attempt_is_cut_by_per_attempt_recv_timeout_and_retried() {
    let server = support::faulty_server().await;
    // Only CANCELLED listed (what a cut attempt counts as): only timeouts are retried.
    let ch = builder(
        &server,
        fixed_backoff_retry(&["CANCELLED"]).per_attempt_recv_timeout("0.5s"),
    )
    .build()
    .expect("channel");
    let start = Instant::now();
    let r = flaky(
        &ch,
        request("k", &[("x-hang-attempts", "1")], Duration::from_secs(30)),
    )
    .await
    .expect("the retry answers");
    let elapsed = start.elapsed();
    assert_eq!(r.trailers().get("x-attempt"), Some("2"));
    assert_eq!(
        attempts(&[&server], "k"),
        vec![(1, None), (2, Some("1".into()))]
    );
    // Cut at 0.5 s, then a 0.1 s ± 20 % backoff.
    assert!(
        elapsed >= Duration::from_millis(580) && elapsed <= Duration::from_millis(650),
        "{elapsed:?}"
    );
    eventually("the cut attempt is reset", || was_reset(&server)).await;
}

#[tokio::test(start_paused = true)]
async fn per_attempt_recv_timeout_never_outlives_the_call_deadline() {
    let server = support::faulty_server().await;
    let ch = builder(
        &server,
        fixed_backoff_retry(&["CANCELLED"]).per_attempt_recv_timeout("0.5s"),
    )
    .build()
    .expect("channel");
    let start = Instant::now();
    let status = flaky(
        &ch,
        request(
            "k",
            &[("x-hang-attempts", "1,2,3")],
            Duration::from_millis(800),
        ),
    )
    .await
    .expect_err("every attempt hangs");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(800) && elapsed < Duration::from_millis(850),
        "{elapsed:?}"
    );
    assert_eq!(attempts(&[&server], "k").len(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_last_attempt_cut_by_per_attempt_recv_timeout_ends_the_call_cancelled() {
    let server = support::faulty_server().await;
    let ch = builder(
        &server,
        fixed_backoff_retry(&["UNAVAILABLE", "CANCELLED"]).per_attempt_recv_timeout("0.2s"),
    )
    .build()
    .expect("channel");
    let status = flaky(
        &ch,
        request(
            "k",
            &[("x-hang-attempts", "1,2,3")],
            Duration::from_secs(30),
        ),
    )
    .await
    .expect_err("every attempt hangs");
    assert_eq!(status.code(), Code::Cancelled, "{status:?}");
    assert!(
        status.message().contains("perAttemptRecvTimeout"),
        "{status:?}"
    );
    assert_eq!(attempts(&[&server], "k").len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_hedge_cut_by_per_attempt_recv_timeout_ends_that_hedge_only() {
    let server = support::faulty_server().await;
    let config = hedging(3, "10s")
        .non_fatal(&[])
        .per_attempt_recv_timeout("0.3s");
    let ch = builder(&server, config).build().expect("channel");
    let start = Instant::now();
    let r = flaky(
        &ch,
        request("k", &[("x-hang-attempts", "1,2")], Duration::from_secs(30)),
    )
    .await
    .expect("the third hedge answers");
    // Each cut hedge sends the next at once (long before the 10 s hedging delay).
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(600) && elapsed < Duration::from_millis(700),
        "{elapsed:?}"
    );
    assert_eq!(r.trailers().get("x-attempt"), Some("3"));
}

#[tokio::test(start_paused = true)]
async fn an_exponential_app_policy_retries_a_code_the_service_config_does_not_list() {
    let server = support::faulty_server().await;
    let exponential = || {
        Exponential::new(
            Duration::from_millis(100),
            Duration::from_millis(50),
            Duration::from_secs(1),
            4,
        )
        .expect("valid")
        .retry_on([Code::Aborted])
    };
    let failing = [("x-fail-times", "2"), ("x-fail-code", "10")];

    // By default the service config (UNAVAILABLE only) wins: ABORTED comes back at once.
    let ch = builder(&server, fixed_backoff_retry(&["UNAVAILABLE"]))
        .retry_policy(exponential())
        .build()
        .expect("channel");
    let status = flaky(&ch, request("default", &failing, Duration::from_secs(30)))
        .await
        .expect_err("not retried");
    assert_eq!(status.code(), Code::Aborted);
    assert_eq!(attempts(&[&server], "default").len(), 1);

    // Opted in: the application's policy retries ABORTED, 100 ms then 200 ms, each ± 20 %.
    let ch = builder(&server, fixed_backoff_retry(&["UNAVAILABLE"]))
        .retry_policy(exponential())
        .retry_policy_precedence(Precedence::Application)
        .build()
        .expect("channel");
    let start = Instant::now();
    let r = flaky(&ch, request("app", &failing, Duration::from_secs(30)))
        .await
        .expect("third attempt succeeds");
    let elapsed = start.elapsed();
    assert_eq!(r.trailers().get("x-attempt"), Some("3"));
    assert_eq!(
        attempts(&[&server], "app"),
        vec![(1, None), (2, Some("1".into())), (3, Some("2".into()))]
    );
    assert!(
        elapsed >= Duration::from_millis(240) && elapsed <= Duration::from_millis(400),
        "{elapsed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_policy_set_on_the_call_wins_for_that_call() {
    let server = support::faulty_server().await;
    let ch = builder(&server, fixed_backoff_retry(&["UNAVAILABLE"]))
        .build()
        .expect("channel");
    let failing = [("x-fail-times", "1")];
    let status = flaky(
        &ch,
        request("no-retry", &failing, Duration::from_secs(30)).with_retry_policy(NoRetry),
    )
    .await
    .expect_err("NoRetry turns the service config's retries off for this call");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(attempts(&[&server], "no-retry").len(), 1);

    let start = Instant::now();
    flaky(
        &ch,
        request("linear", &failing, Duration::from_secs(30))
            .with_retry_policy(Linear::new(Duration::from_millis(700), 2)),
    )
    .await
    .expect("retried after the linear delay");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(700) && elapsed < Duration::from_millis(750),
        "{elapsed:?}"
    );
}

/// Retries RESOURCE_EXHAUSTED and timed-out attempts after 30 ms, and records what it saw.
#[derive(Debug, Default)]
struct Recording(Mutex<Vec<(u32, Code, bool)>>);

impl AppRetryPolicy for Recording {
    fn max_attempts(&self) -> u32 {
        3
    }

    fn decide(&self, info: &FailedAttempt<'_>, _rng: &mut dyn Rng) -> RetryDecision {
        self.0
            .lock()
            .expect("lock")
            .push((info.attempt, info.code, info.timed_out));
        if info.code == Code::ResourceExhausted || info.timed_out {
            RetryDecision::Retry {
                after: Duration::from_millis(30),
            }
        } else {
            RetryDecision::Stop
        }
    }

    fn per_attempt_recv_timeout(&self) -> Option<Duration> {
        Some(Duration::from_millis(400))
    }
}

#[tokio::test(start_paused = true)]
async fn a_custom_policy_with_a_per_attempt_timeout_decides_from_the_failed_attempts() {
    let server = support::faulty_server().await;
    let policy = Arc::new(Recording::default());
    let ch = Channel::builder(format!("ipv4:{}", server.addr))
        .retry_policy(policy.clone())
        .build()
        .expect("channel");
    // Attempt 1 fails RESOURCE_EXHAUSTED, attempt 2 hangs and is cut, attempt 3 answers.
    let r = flaky(
        &ch,
        request(
            "k",
            &[
                ("x-fail-times", "1"),
                ("x-fail-code", "8"),
                ("x-hang-attempts", "2"),
            ],
            Duration::from_secs(30),
        ),
    )
    .await
    .expect("third attempt answers");
    assert_eq!(r.trailers().get("x-attempt"), Some("3"));
    assert_eq!(
        *policy.0.lock().expect("lock"),
        vec![
            (1, Code::ResourceExhausted, false),
            (2, Code::Cancelled, true)
        ]
    );
}
