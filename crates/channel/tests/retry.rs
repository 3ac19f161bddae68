//! gRFC A6 end to end: unary calls whose service config has a retry or hedging policy, against the
//! fault-injecting server over real sockets, on tokio's paused clock.

mod support;

use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Request, Response, Status};
use interop::faulty::{methods, Event, FaultyServer};
use support::config::{hedging_config, retry, retry_config};
use support::flaky::attempts;
use tokio::time::Instant;

fn channel(servers: &[&FaultyServer], config: &str) -> Channel {
    let list: Vec<String> = servers.iter().map(|s| s.addr.to_string()).collect();
    Channel::builder(format!("ipv4:{}", list.join(",")))
        .default_service_config(config)
        .build()
        .expect("channel")
}

async fn flaky(
    ch: &Channel,
    key: &str,
    headers: &[(&str, &str)],
) -> Result<Response<Bytes>, Status> {
    let mut req = Request::new(Bytes::new()).with_timeout(Duration::from_secs(30));
    req.metadata_mut().append("x-test-key", key).expect("key");
    for (k, v) in headers {
        req.metadata_mut().append(k, v).expect("header");
    }
    ch.unary_raw(methods::FLAKY, req).await
}

#[tokio::test(start_paused = true)]
async fn a_retryable_failure_is_retried_with_backoff_until_success() {
    let server = support::faulty_server().await;
    let ch = channel(&[&server], &retry_config(4, &["UNAVAILABLE"]));
    let start = Instant::now();
    let r = flaky(&ch, "k", &[("x-fail-times", "2")])
        .await
        .expect("third attempt succeeds");
    let elapsed = start.elapsed();
    assert_eq!(r.trailers().get("x-attempt"), Some("3"));
    assert_eq!(
        attempts(&[&server], "k"),
        vec![(1, None), (2, Some("1".into())), (3, Some("2".into()))],
        "grpc-previous-rpc-attempts counts the earlier attempts"
    );
    // Backoffs of 0.1 s and 0.2 s, each ± 20 %.
    assert!(
        elapsed >= Duration::from_millis(240) && elapsed <= Duration::from_millis(400),
        "{elapsed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_max_attempts_with_the_last_status() {
    let server = support::faulty_server().await;
    let ch = channel(&[&server], &retry_config(3, &["UNAVAILABLE"]));
    let status = flaky(&ch, "k", &[("x-fail-times", "10")])
        .await
        .expect_err("always fails");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        attempts(&[&server], "k").len(),
        3,
        "maxAttempts includes the original"
    );
}

#[tokio::test(start_paused = true)]
async fn a_non_retryable_code_is_returned_at_once() {
    let server = support::faulty_server().await;
    let ch = channel(&[&server], &retry_config(5, &["UNAVAILABLE"]));
    let status = flaky(&ch, "k", &[("x-fail-times", "1"), ("x-fail-code", "3")])
        .await
        .expect_err("INVALID_ARGUMENT");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(attempts(&[&server], "k").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn server_pushback_sets_the_delay_or_stops_retries() {
    let server = support::faulty_server().await;
    let ch = channel(&[&server], &retry_config(5, &["UNAVAILABLE"]));
    let start = Instant::now();
    flaky(
        &ch,
        "later",
        &[("x-fail-times", "1"), ("x-pushback-ms", "700")],
    )
    .await
    .expect("retried after the pushback");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(700) && elapsed < Duration::from_millis(750),
        "{elapsed:?}"
    );

    let status = flaky(
        &ch,
        "never",
        &[("x-fail-times", "1"), ("x-pushback-ms", "-1")],
    )
    .await
    .expect_err("pushback said stop");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(attempts(&[&server], "never").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn throttling_stops_retries_when_tokens_run_low() {
    let server = support::faulty_server().await;
    // maxTokens 2: one failure leaves 1 token, not more than 2/2, so no retry.
    let ch = channel(
        &[&server],
        &retry(5, &["UNAVAILABLE"]).throttling(2, "0.1").to_string(),
    );
    let status = flaky(&ch, "k", &[("x-fail-times", "3")])
        .await
        .expect_err("throttled");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(attempts(&[&server], "k").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_refused_stream_is_retried_transparently() {
    let server = support::faulty_server().await;
    let ch = channel(&[&server], &retry_config(2, &["UNAVAILABLE"]));
    let r = flaky(
        &ch,
        "k",
        &[("x-fail-times", "1"), ("x-fail-mode", "refuse")],
    )
    .await
    .expect("transparent retry");
    assert_eq!(r.trailers().get("x-attempt"), Some("2"));
    assert_eq!(
        attempts(&[&server], "k"),
        vec![(1, None), (2, None)],
        "a transparent retry does not count as a previous attempt"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hedge_wins_when_the_original_hangs_and_the_loser_is_cancelled() {
    let a = support::faulty_server().await;
    let b = support::faulty_server().await;
    let ch = channel(&[&a, &b], &hedging_config(3, "0.2s"));
    // Let both backends connect first, so the hedge has somewhere else to go.
    let warm = flaky(&ch, "warm-1", &[]).await.expect("warm");
    drop(warm);
    flaky(&ch, "warm-2", &[]).await.expect("warm");
    let start = Instant::now();
    let hedged = {
        let ch = ch.clone();
        tokio::spawn(async move { flaky(&ch, "k", &[("x-hang-attempts", "1")]).await })
    };
    // Another call in between takes the other backend's turn in the rotation, so rotation alone would send
    // the hedge back to the original's backend: only the avoid hint sends it elsewhere.
    tokio::time::sleep(Duration::from_millis(100)).await;
    flaky(&ch, "other", &[]).await.expect("other call");
    hedged.await.expect("task").expect("the hedge answers");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(200) && elapsed < Duration::from_millis(300),
        "{elapsed:?}"
    );
    // The original and one hedge, on different backends: the hedge avoided the address already used.
    let on_a = attempts(&[&a], "k");
    let on_b = attempts(&[&b], "k");
    assert_eq!(on_a.len() + on_b.len(), 2, "{on_a:?} {on_b:?}");
    assert_eq!(
        (on_a.len(), on_b.len()),
        (1, 1),
        "one attempt on each backend"
    );
    let mut previous: Vec<Option<String>> = on_a.into_iter().chain(on_b).map(|(_, p)| p).collect();
    previous.sort();
    assert_eq!(previous, vec![None, Some("1".into())]);
    // The hanging original was cancelled.
    for _ in 0..100 {
        let reset = [&a, &b].iter().flat_map(|s| s.events()).any(|e| {
            e == Event::Reset {
                path: methods::FLAKY.to_owned(),
                reason: h2::Reason::CANCEL,
            }
        });
        if reset {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the losing hedge was never cancelled");
}

#[tokio::test(start_paused = true)]
async fn a_non_fatal_status_sends_the_next_hedge_at_once() {
    let server = support::faulty_server().await;
    let ch = channel(&[&server], &hedging_config(3, "10s"));
    let start = Instant::now();
    let r = flaky(&ch, "k", &[("x-fail-times", "1")])
        .await
        .expect("second attempt");
    assert_eq!(r.trailers().get("x-attempt"), Some("2"));
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "not after the 10 s hedging delay: {:?}",
        start.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn the_deadline_spans_every_attempt() {
    let server = support::faulty_server().await;
    let ch = channel(&[&server], &retry_config(5, &["UNAVAILABLE"]));
    let mut req = Request::new(Bytes::new()).with_timeout(Duration::from_millis(250));
    req.metadata_mut().append("x-test-key", "k").expect("key");
    req.metadata_mut().append("x-fail-times", "1").expect("h");
    req.metadata_mut()
        .append("x-hang-attempts", "2")
        .expect("h");
    let start = Instant::now();
    let status = ch
        .unary_raw(methods::FLAKY, req)
        .await
        .expect_err("deadline");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(250) && elapsed < Duration::from_millis(300),
        "{elapsed:?}"
    );
    assert_eq!(attempts(&[&server], "k").len(), 2);
}
