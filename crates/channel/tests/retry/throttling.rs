//! gRFC A6 retry throttling end to end: which attempt ends cost a token (the failures of processed attempts,
//! committed or not, and "don't retry" pushbacks, on any method) and which do not (transparent retries,
//! calls the client abandons, cancels or times out itself), and that a low bucket stops retries. Against
//! the fault-injecting server and the scriptable h2 server over real sockets, on tokio's paused clock.

use grpc_test_support as support;

use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Request};
use h2::Reason;
use interop::faulty::methods;
use support::config::{retry, ServiceConfig};
use support::flaky::{
    attempts, channel_with, flaky_request, flaky_unary, one_failing_client_stream,
};
use support::frames::grpc_message;
use support::guards::{guarded, settle};
use support::h2_server::{defaults, handler, trailers, H2Server, Stream, SVC};
use support::{channel_with_config, with_metadata};

// ---- Against the fault-injecting server ----------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn throttling_stops_retries_when_tokens_run_low() {
    let server = support::faulty_server().await;
    // maxTokens 2: one failure leaves 1 token, not more than 2/2, so no retry.
    let ch = channel_with(
        &server.target(),
        Some(&retry(5, &["UNAVAILABLE"]).throttling(2, "0.1").to_string()),
        |b| b,
    );
    let status = flaky_unary(&ch, "k", &[("x-fail-times", "3")])
        .await
        .expect_err("throttled");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(attempts(&[&server], "k").len(), 1);
}

/// `retryThrottling` with 10 tokens; method `Flaky` (unary) has no policy, `FlakyClientStream` retries
/// UNAVAILABLE.
fn two_methods_config() -> String {
    retry(3, &["UNAVAILABLE"])
        .method("FlakyClientStream")
        .throttling(10, "0.1")
        .to_string()
}

#[tokio::test(start_paused = true)]
async fn dont_retry_pushbacks_on_a_method_without_a_policy_throttle_retries_of_another_method() {
    let server = support::faulty_server().await;
    let ch = channel_with(&server.target(), Some(&two_methods_config()), |b| b);
    // Six failures with a "don't retry" pushback, each a throttling failure on any method: 10 → 4 tokens,
    // not above the threshold of 5.
    for i in 0..6 {
        let key = format!("a-{i}");
        let status = guarded(
            "unary",
            ch.unary_raw(
                methods::FLAKY,
                flaky_request(
                    Request::new(Bytes::new()),
                    &key,
                    &[("x-fail-times", "1"), ("x-pushback-ms", "-1")],
                ),
            ),
        )
        .await
        .expect_err("fails");
        assert_eq!(status.code(), Code::Unavailable);
    }
    let status = one_failing_client_stream(&ch, "b")
        .await
        .expect_err("throttled: not retried");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(attempts(&[&server], "b"), vec![(1, None)]);
}

#[tokio::test(start_paused = true)]
async fn without_throttling_failures_the_other_method_is_retried() {
    let server = support::faulty_server().await;
    let ch = channel_with(&server.target(), Some(&two_methods_config()), |b| b);
    let resp = one_failing_client_stream(&ch, "b")
        .await
        .expect("retried: 10 tokens, one failure leaves 9");
    assert_eq!(resp.message().attempt, 2);
    assert_eq!(
        attempts(&[&server], "b"),
        vec![(1, None), (2, Some("1".into()))]
    );
}

// ---- Over the scriptable h2 server: which ends cost a token ---------------------------------------------
//
// maxTokens 3 (3000 milli-tokens, threshold 1500), tokenRatio 0.5. The probe is a unary call whose first
// attempt fails UNAVAILABLE (retryable) and whose second succeeds: its own failure costs one token, so it is
// retried only if the bucket held more than 2.5 tokens before it, i.e. was full. A probe that is retried
// proves nothing was charged; one that is not proves at least one token was.

const PROBE: &str = "/t.S/Probe";
/// Headers, then (after `x-messages` messages, default 0) trailers with `x-code` and optional `x-pushback`.
const HEADERS_THEN: &str = "/t.S/HeadersThen";
/// Headers (and one message), then waits until the client resets the stream.
const HEADERS_HANG: &str = "/t.S/HeadersHang";
/// Never answers: waits for the client's reset.
const SILENT: &str = "/t.S/Silent";
/// Trailers-Only RESOURCE_EXHAUSTED with `grpc-retry-pushback-ms: -1`.
const PUSHBACK: &str = "/t.S/Pushback";

/// maxTokens 3, tokenRatio 0.5; two attempts retrying `codes` (backoff 0.1 s).
fn throttled_config(codes: &[&str]) -> ServiceConfig {
    retry(2, codes).service(SVC).throttling(3, "0.5")
}

async fn throttle_server() -> H2Server {
    let probes: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    H2Server::tcp(
        defaults,
        handler(move |mut s: Stream| {
            let probes = probes.clone();
            async move {
                match s.path.as_str() {
                    PROBE => {
                        let key = s.header("x-key").unwrap_or_default();
                        let n = {
                            let mut p = probes.lock().expect("probes");
                            let n = p.entry(key).or_default();
                            *n += 1;
                            *n
                        };
                        if s.read_to_end().await.is_err() {
                            return;
                        }
                        if n == 1 {
                            s.trailers_only("14", &[]);
                        } else {
                            s.ok(b"probe");
                        }
                    }
                    HEADERS_THEN => {
                        let code = s.header("x-code").unwrap_or_else(|| "0".into());
                        let pushback = s.header("x-pushback");
                        let messages: usize = s
                            .header("x-messages")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        if s.read_to_end().await.is_err() {
                            return;
                        }
                        if let Some(mut out) = s.headers() {
                            for i in 0..messages {
                                let _ = out.send_data(grpc_message(&[i as u8]), false);
                            }
                            let extra: Vec<(&str, &str)> = pushback
                                .as_deref()
                                .map(|p| vec![("grpc-retry-pushback-ms", p)])
                                .unwrap_or_default();
                            let _ = out.send_trailers(trailers(&code, &extra));
                        }
                    }
                    PUSHBACK => {
                        if s.read_to_end().await.is_ok() {
                            s.trailers_only("8", &[("grpc-retry-pushback-ms", "-1")]);
                        }
                    }
                    HEADERS_HANG => {
                        if let Some(mut out) = s.headers() {
                            let _ = out.send_data(grpc_message(b"first"), false);
                            // After the response headers, only the SendStream can wait for the reset.
                            if let Ok(reason) = poll_fn(|cx| out.poll_reset(cx)).await {
                                s.log_reset(reason);
                            }
                        }
                    }
                    _ => s.wait_reset().await,
                }
            }
        }),
    )
    .await
}

/// Runs the probe: `true` if it was retried (the bucket was full before it).
async fn probe(ch: &Channel, server: &H2Server, key: &str) -> bool {
    let before = server.opens_of(PROBE);
    let mut req = Request::new(Bytes::new()).with_timeout(Duration::from_secs(30));
    req.metadata_mut().append("x-key", key).expect("md");
    let result = guarded("probe", ch.unary_raw(PROBE, req)).await;
    let streams = server.opens_of(PROBE) - before;
    match result {
        Ok(_) => {
            assert_eq!(streams, 2, "a successful probe was retried once");
            true
        }
        Err(status) => {
            assert_eq!(status.code(), Code::Unavailable, "{status:?}");
            assert_eq!(streams, 1, "a failed probe was not retried");
            false
        }
    }
}

/// The probe's premise: on a full bucket it is retried.
#[tokio::test(start_paused = true)]
async fn throttle_probe_is_retried_on_a_full_bucket() {
    let server = throttle_server().await;
    let ch = channel_with_config(&server.target(), throttled_config(&["UNAVAILABLE"]));
    assert!(probe(&ch, &server, "p").await);
}

/// A committed attempt (response headers arrived) that then fails with a retryable code costs a token, and
/// is not retried; two committed successes (unary and a bidi stream) give back 2 × tokenRatio.
#[tokio::test(start_paused = true)]
async fn throttle_committed_failure_costs_a_token_and_committed_successes_refill() {
    let server = throttle_server().await;
    let ch = channel_with_config(&server.target(), throttled_config(&["UNAVAILABLE"]));
    let status = guarded(
        "committed failure",
        ch.unary_raw(
            HEADERS_THEN,
            with_metadata(Request::new(Bytes::new()), &[("x-code", "14")]),
        ),
    )
    .await
    .expect_err("UNAVAILABLE after headers");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(server.opens_of(HEADERS_THEN), 1, "committed: not retried");

    // Two successes after commit: 2000 + 500 + 500 = 3000 (full again).
    let ok = guarded(
        "committed unary success",
        ch.unary_raw(
            HEADERS_THEN,
            with_metadata(Request::new(Bytes::new()), &[("x-messages", "1")]),
        ),
    )
    .await
    .expect("ok");
    assert_eq!(&ok.message()[..], &[0]);
    guarded("committed bidi success", async {
        let (mut tx, mut rx) = ch
            .streaming_raw(
                HEADERS_THEN,
                with_metadata(Request::new(()), &[("x-messages", "3")]),
            )
            .await
            .expect("start");
        tx.send(Bytes::from_static(b"x")).await.expect("send");
        tx.finish().await.expect("finish");
        for i in 0..3u8 {
            assert_eq!(&rx.message().await.expect("msg").expect("some")[..], &[i]);
        }
        assert!(rx.message().await.expect("OK").is_none());
    })
    .await;
    assert!(
        probe(&ch, &server, "after-refill").await,
        "the committed successes refilled the bucket"
    );

    // And the failure alone (on a fresh channel) leaves the probe unretried.
    let ch = channel_with_config(&server.target(), throttled_config(&["UNAVAILABLE"]));
    let _ = guarded(
        "committed failure",
        ch.unary_raw(
            HEADERS_THEN,
            with_metadata(Request::new(Bytes::new()), &[("x-code", "14")]),
        ),
    )
    .await;
    assert!(
        !probe(&ch, &server, "after-failure").await,
        "a committed UNAVAILABLE cost a token"
    );
}

/// Calls abandoned mid-way (a committed stream dropped, a unary call dropped while it waits, a stream dropped
/// before commit) and a cancel whose code is not retryable cost nothing.
#[tokio::test(start_paused = true)]
async fn throttle_abandoned_calls_cost_nothing() {
    let server = throttle_server().await;
    let ch = channel_with_config(&server.target(), throttled_config(&["UNAVAILABLE"]));
    guarded("abandon", async {
        // Committed, then dropped.
        let (_tx, mut rx) = ch
            .streaming_raw(HEADERS_HANG, Request::new(()))
            .await
            .expect("start");
        rx.headers().await.expect("headers");
        drop(rx);
        // Committed, then cancelled (CANCELLED is not retryable here).
        let (_tx, mut rx) = ch
            .streaming_raw(HEADERS_HANG, Request::new(()))
            .await
            .expect("start");
        rx.headers().await.expect("headers");
        rx.cancel();
        // Not committed, dropped.
        let (tx, rx) = ch
            .streaming_raw(SILENT, Request::new(()))
            .await
            .expect("start");
        settle(Duration::from_millis(50)).await;
        drop((tx, rx));
        // A unary call dropped while the server is silent.
        let _ = tokio::time::timeout(
            Duration::from_millis(200),
            ch.unary_raw(SILENT, Request::new(Bytes::new())),
        )
        .await;
    })
    .await;
    settle(Duration::from_millis(100)).await;
    assert!(probe(&ch, &server, "p").await, "nothing was charged");
}

/// A deadline that passes before commit is the client's own: no token (the state machine's `Local` end).
#[tokio::test(start_paused = true)]
async fn throttle_client_deadline_before_commit_costs_nothing() {
    let server = throttle_server().await;
    let ch = channel_with_config(
        &server.target(),
        throttled_config(&["UNAVAILABLE", "DEADLINE_EXCEEDED"]),
    );
    let status = guarded(
        "silent",
        ch.unary_raw(
            SILENT,
            Request::new(Bytes::new()).with_timeout(Duration::from_secs(1)),
        ),
    )
    .await
    .expect_err("deadline");
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert!(probe(&ch, &server, "p").await, "nothing was charged");
}

/// The client's own deadline, once the call has committed (the server sent response headers), costs no token
/// even with DEADLINE_EXCEEDED in retryableStatusCodes: the server never failed the call, the client gave up
/// (grpc-java and grpc-go never charge a client deadline or cancel; before commit the same deadline is a
/// local end, test above). The failure this guards against: every local end after commit was reported to the
/// state machine as a processed failure, which the throttle charges.
#[tokio::test(start_paused = true)]
async fn throttle_client_deadline_after_commit_costs_nothing() {
    let server = throttle_server().await;
    let ch = channel_with_config(
        &server.target(),
        throttled_config(&["UNAVAILABLE", "DEADLINE_EXCEEDED"]),
    );
    let status = guarded(
        "headers then silence",
        ch.unary_raw(
            HEADERS_HANG,
            Request::new(Bytes::new()).with_timeout(Duration::from_secs(1)),
        ),
    )
    .await
    .expect_err("deadline");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        probe(&ch, &server, "p").await,
        "the client's own deadline after commit cost a throttle token (the probe was not retried)"
    );
}

/// The application's `cancel()` after commit costs no token, even with CANCELLED in retryableStatusCodes, just
/// as dropping the call costs none. (The same failure as above: a local end reported as processed.)
#[tokio::test(start_paused = true)]
async fn throttle_client_cancel_after_commit_costs_nothing() {
    let server = throttle_server().await;
    let ch = channel_with_config(
        &server.target(),
        throttled_config(&["UNAVAILABLE", "CANCELLED"]),
    );
    guarded("cancel", async {
        let (_tx, mut rx) = ch
            .streaming_raw(HEADERS_HANG, Request::new(()))
            .await
            .expect("start");
        rx.headers().await.expect("headers");
        rx.cancel();
        let status = rx.message().await.expect_err("cancelled");
        assert_eq!(status.code(), Code::Cancelled);
    })
    .await;
    settle(Duration::from_millis(50)).await;
    assert_eq!(
        server.resets().iter().map(|r| r.reason).collect::<Vec<_>>(),
        vec![Reason::CANCEL],
        "the client cancelled (the server did not fail the call)"
    );
    assert!(
        probe(&ch, &server, "p").await,
        "the application's cancel after commit cost a throttle token (the probe was not retried)"
    );
}

/// A "don't retry" pushback in Trailers-Only (before commit) with a non-retryable code costs a token (A6).
#[tokio::test(start_paused = true)]
async fn throttle_dont_retry_pushback_before_commit_counts() {
    let server = throttle_server().await;
    let ch = channel_with_config(&server.target(), throttled_config(&["UNAVAILABLE"]));
    let status = guarded(
        "pushback",
        ch.unary_raw(PUSHBACK, Request::new(Bytes::new())),
    )
    .await
    .expect_err("RESOURCE_EXHAUSTED");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        !probe(&ch, &server, "p").await,
        "the don't-retry pushback cost a token"
    );
}

/// A "don't retry" pushback (`grpc-retry-pushback-ms: -1`) in the trailers of a *committed* attempt costs a
/// token, as it does before commit (a don't-retry pushback qualifies, "fatal code or not; the committed
/// attempt's end counts too"). The failure this guards against: the pushback was read from the status
/// metadata, from which every `grpc-*` key is stripped, so it was never seen.
#[tokio::test(start_paused = true)]
async fn throttle_dont_retry_pushback_after_commit_counts() {
    let server = throttle_server().await;
    let ch = channel_with_config(&server.target(), throttled_config(&["UNAVAILABLE"]));
    let status = guarded(
        "pushback after headers",
        ch.unary_raw(
            HEADERS_THEN,
            with_metadata(
                Request::new(Bytes::new()),
                &[("x-code", "8"), ("x-pushback", "-1"), ("x-messages", "1")],
            ),
        ),
    )
    .await
    .expect_err("RESOURCE_EXHAUSTED");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        !probe(&ch, &server, "p").await,
        "a don't-retry pushback after commit cost no token (the probe was retried)"
    );
}
