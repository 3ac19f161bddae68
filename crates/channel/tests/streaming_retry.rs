//! gRFC A6 for the streaming call shapes: client streaming, server streaming and bidi calls under a retry
//! or hedging policy, against the faulty server's `Flaky*` methods over real sockets, on tokio's paused
//! clock. What is replayed (every buffered message, on every attempt), what commits a call (response
//! headers; a request stream that outgrows the replay buffer), hedging a server stream, the retry throttle
//! shared across methods, deadlines across attempts, and a `unix:` target.

mod support;

use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Code, Request};
use interop::faulty::{methods, AttemptOutcome, FlakyItem, FlakyMessage, FlakyTotals};
use support::config::{hedging_config, retry, retry_config};
use support::flaky::{attempts, channel_with, ended, failed, flaky_request, messages, target_of};
use support::guards::{eventually, guarded};
use support::IterStream;
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn client_streaming_retries_replay_every_message_on_every_attempt() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(4, &["UNAVAILABLE"])),
        |b| b,
    );
    let (msgs, bytes) = messages(&[100, 0, 300, 1000]);
    let resp = guarded(
        "client streaming",
        ch.client_streaming::<FlakyMessage, FlakyTotals, _>(
            methods::FLAKY_CLIENT_STREAM,
            flaky_request(
                Request::new(IterStream(msgs.into_iter())),
                "cs",
                &[("x-fail-times", "2")],
            ),
        ),
    )
    .await
    .expect("the third attempt succeeds");
    assert_eq!(
        *resp.message(),
        FlakyTotals {
            messages: 4,
            bytes,
            attempt: 3
        },
        "the answering attempt got the whole request stream"
    );
    assert_eq!(
        attempts(&[&server], "cs"),
        vec![(1, None), (2, Some("1".into())), (3, Some("2".into()))]
    );
    let seen: Vec<(u32, u64, AttemptOutcome)> = ended(&server, "cs")
        .into_iter()
        .map(|e| (e.messages, e.bytes, e.outcome))
        .collect();
    assert_eq!(
        seen,
        vec![
            (4, bytes, failed("14")),
            (4, bytes, failed("14")),
            (4, bytes, AttemptOutcome::Ok)
        ],
        "every attempt received every message"
    );
}

#[tokio::test(start_paused = true)]
async fn client_streaming_within_the_per_rpc_buffer_limit_is_retried() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b.per_rpc_buffer_limit(1024),
    );
    // 4 × (200 + 3) bytes of messages, 4 × 5 bytes of prefixes: under 1 KiB either way.
    let (msgs, _) = messages(&[200, 200, 200, 200]);
    let resp = guarded(
        "client streaming",
        ch.client_streaming::<FlakyMessage, FlakyTotals, _>(
            methods::FLAKY_CLIENT_STREAM,
            flaky_request(
                Request::new(IterStream(msgs.into_iter())),
                "small",
                &[("x-fail-times", "1")],
            ),
        ),
    )
    .await
    .expect("retried");
    assert_eq!(resp.message().messages, 4);
    assert_eq!(attempts(&[&server], "small").len(), 2);
}

#[tokio::test(start_paused = true)]
async fn client_streaming_past_the_per_rpc_buffer_limit_commits_and_is_not_retried() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b.per_rpc_buffer_limit(1024),
    );
    let (msgs, bytes) = messages(&[600, 600, 600, 600]);
    // Only the first attempt fails: a retry would succeed, so an OK here would mean the call was retried.
    let status = guarded(
        "client streaming",
        ch.client_streaming::<FlakyMessage, FlakyTotals, _>(
            methods::FLAKY_CLIENT_STREAM,
            flaky_request(
                Request::new(IterStream(msgs.into_iter())),
                "big",
                &[("x-fail-times", "1")],
            ),
        ),
    )
    .await
    .expect_err("committed: the failure is final");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(attempts(&[&server], "big"), vec![(1, None)]);
    let first = &ended(&server, "big")[0];
    assert_eq!(
        (first.messages, first.bytes),
        (4, bytes),
        "a call that outgrew the buffer is still sent whole"
    );
}

#[tokio::test(start_paused = true)]
async fn client_streaming_past_the_channel_retry_buffer_commits_and_is_not_retried() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b.retry_buffer_size(1024),
    );
    let (msgs, _) = messages(&[600, 600, 600, 600]);
    let status = guarded(
        "client streaming",
        ch.client_streaming::<FlakyMessage, FlakyTotals, _>(
            methods::FLAKY_CLIENT_STREAM,
            flaky_request(
                Request::new(IterStream(msgs.into_iter())),
                "pool",
                &[("x-fail-times", "1")],
            ),
        ),
    )
    .await
    .expect_err("committed: the failure is final");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(attempts(&[&server], "pool"), vec![(1, None)]);
}

#[tokio::test(start_paused = true)]
async fn bidi_failure_before_the_first_response_is_retried_and_replays_the_buffered_messages() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b,
    );
    let (mut tx, mut rx) = guarded(
        "start",
        ch.streaming_raw(
            methods::FLAKY_BIDI,
            flaky_request(Request::new(()), "bidi", &[("x-fail-times", "1")]),
        ),
    )
    .await
    .expect("the call starts");
    // Attempt 1 reads one message and fails Trailers-Only; the application never notices.
    guarded("send", tx.send(Bytes::from_static(b"one")))
        .await
        .expect("buffered");
    guarded("send", tx.send(Bytes::from_static(b"two")))
        .await
        .expect("buffered");
    let echo = guarded("echo", rx.message()).await.expect("echo");
    assert_eq!(echo.as_deref(), Some(&b"one"[..]));
    let echo = guarded("echo", rx.message()).await.expect("echo");
    assert_eq!(echo.as_deref(), Some(&b"two"[..]));
    // Committed to attempt 2 now: a new message goes straight to it.
    guarded("send", tx.send(Bytes::from_static(b"three")))
        .await
        .expect("sent");
    let echo = guarded("echo", rx.message()).await.expect("echo");
    assert_eq!(echo.as_deref(), Some(&b"three"[..]));
    guarded("finish", tx.finish()).await.expect("half-close");
    let end = guarded("end", rx.message()).await.expect("OK");
    assert_eq!(end, None);
    assert_eq!(
        rx.trailers().and_then(|t| t.get("x-attempt")),
        Some("2"),
        "the answer came from the retry"
    );
    assert_eq!(
        attempts(&[&server], "bidi"),
        vec![(1, None), (2, Some("1".into()))]
    );
    let seen: Vec<(u32, AttemptOutcome)> = ended(&server, "bidi")
        .into_iter()
        .map(|e| (e.messages, e.outcome))
        .collect();
    assert_eq!(
        seen,
        vec![(1, failed("14")), (3, AttemptOutcome::Ok)],
        "the retry got the two buffered messages replayed, then the third"
    );
}

#[tokio::test(start_paused = true)]
async fn bidi_failure_after_a_response_is_not_retried() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b,
    );
    let (mut tx, mut rx) = guarded(
        "start",
        ch.streaming_raw(
            methods::FLAKY_BIDI,
            flaky_request(
                Request::new(()),
                "late",
                &[
                    ("x-fail-times", "1"),
                    ("x-fail-after-first-response", "true"),
                ],
            ),
        ),
    )
    .await
    .expect("the call starts");
    guarded("send", tx.send(Bytes::from_static(b"one")))
        .await
        .expect("sent");
    let echo = guarded("echo", rx.message()).await.expect("echo");
    assert_eq!(echo.as_deref(), Some(&b"one"[..]));
    let status = guarded("end", rx.message())
        .await
        .expect_err("response headers committed the call: the failure is final");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    // Nothing retries in the background either.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(attempts(&[&server], "late"), vec![(1, None)]);
}

#[tokio::test(start_paused = true)]
async fn server_streaming_is_retried_after_a_trailers_only_failure() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b,
    );
    let resp = guarded(
        "server streaming",
        ch.server_streaming::<FlakyMessage, FlakyItem>(
            methods::FLAKY_SERVER_STREAM,
            flaky_request(
                Request::new(FlakyMessage::default()),
                "ss",
                &[("x-fail-times", "1"), ("x-response-count", "3")],
            ),
        ),
    )
    .await
    .expect("the retry answers");
    let mut stream = resp.into_message();
    let mut items = Vec::new();
    while let Some(item) = guarded("item", stream.message()).await.expect("item") {
        items.push(item);
    }
    let want: Vec<FlakyItem> = (0..3)
        .map(|index| FlakyItem {
            index,
            client_attempt: 2,
            attempt: 2,
        })
        .collect();
    assert_eq!(items, want);
    assert_eq!(
        attempts(&[&server], "ss"),
        vec![(1, None), (2, Some("1".into()))]
    );
    assert_eq!(
        ended(&server, "ss")[1].messages,
        1,
        "the request was replayed"
    );
}

#[tokio::test(start_paused = true)]
async fn server_streaming_hedge_wins_when_the_original_hangs_and_the_loser_is_cancelled() {
    let a = support::faulty_server().await;
    let b = support::faulty_server().await;
    let ch = channel_with(
        &target_of(&[&a, &b]),
        Some(&hedging_config(3, "0.2s")),
        |b| b,
    );
    // Let both backends connect first, so the hedge has somewhere else to go.
    for key in ["warm-1", "warm-2"] {
        guarded(
            "warm-up",
            ch.unary_raw(
                methods::FLAKY,
                flaky_request(Request::new(Bytes::new()), key, &[]),
            ),
        )
        .await
        .expect("warm-up call");
    }
    let start = Instant::now();
    let resp = guarded(
        "server streaming",
        ch.server_streaming::<FlakyMessage, FlakyItem>(
            methods::FLAKY_SERVER_STREAM,
            flaky_request(
                Request::new(FlakyMessage::default()),
                "k",
                &[("x-hang-attempts", "1"), ("x-response-count", "3")],
            ),
        ),
    )
    .await
    .expect("the hedge answers");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(200) && elapsed < Duration::from_millis(300),
        "the hedge went out after hedgingDelay: {elapsed:?}"
    );
    let mut stream = resp.into_message();
    let mut items = Vec::new();
    while let Some(item) = guarded("item", stream.message()).await.expect("item") {
        items.push(item);
    }
    assert_eq!(items.len(), 3);
    assert!(
        items.iter().all(|i| i.client_attempt == 2),
        "every response came from the hedge: {items:?}"
    );
    let (on_a, on_b) = (attempts(&[&a], "k"), attempts(&[&b], "k"));
    assert_eq!(
        (on_a.len(), on_b.len()),
        (1, 1),
        "one attempt on each backend: {on_a:?} {on_b:?}"
    );
    // The original's backend saw it reset with CANCEL once the hedge won.
    let original = if on_a[0].1.is_none() { &a } else { &b };
    eventually("the losing original is cancelled", || {
        ended(original, "k")
            .iter()
            .any(|e| e.outcome == AttemptOutcome::Reset(h2::Reason::CANCEL))
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn client_streaming_deadline_spans_every_attempt() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(5, &["UNAVAILABLE"])),
        |b| b,
    );
    let (msgs, _) = messages(&[10, 10]);
    let request = flaky_request(
        Request::new(IterStream(msgs.into_iter())),
        "deadline",
        &[("x-fail-times", "1"), ("x-hang-attempts", "2")],
    )
    .with_timeout(Duration::from_secs(1));
    let start = Instant::now();
    let status = guarded(
        "client streaming",
        ch.client_streaming::<FlakyMessage, FlakyTotals, _>(methods::FLAKY_CLIENT_STREAM, request),
    )
    .await
    .expect_err("deadline");
    let elapsed = start.elapsed();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_millis(1050),
        "{elapsed:?}"
    );
    assert_eq!(attempts(&[&server], "deadline").len(), 2);
    eventually("the hanging retry is cancelled at the deadline", || {
        ended(&server, "deadline")
            .iter()
            .any(|e| e.number == 2 && e.outcome == AttemptOutcome::Reset(h2::Reason::CANCEL))
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn bidi_deadline_spans_every_attempt() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(5, &["UNAVAILABLE"])),
        |b| b,
    );
    let request = flaky_request(
        Request::new(()),
        "deadline",
        &[("x-fail-times", "1"), ("x-hang-attempts", "2")],
    )
    .with_timeout(Duration::from_secs(1));
    let start = Instant::now();
    let (mut tx, mut rx) = guarded("start", ch.streaming_raw(methods::FLAKY_BIDI, request))
        .await
        .expect("the call starts");
    guarded("send", tx.send(Bytes::from_static(b"one")))
        .await
        .expect("buffered");
    let status = guarded("message", rx.message())
        .await
        .expect_err("deadline");
    let elapsed = start.elapsed();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_millis(1050),
        "{elapsed:?}"
    );
    assert_eq!(attempts(&[&server], "deadline").len(), 2);
}

/// `retryThrottling` with 10 tokens; method `Flaky` (unary) has no policy, `FlakyClientStream` retries
/// UNAVAILABLE.
fn throttled_config() -> String {
    retry(3, &["UNAVAILABLE"])
        .method("FlakyClientStream")
        .throttling(10, "0.1")
        .to_string()
}

async fn one_failing_client_stream(
    ch: &grpc_channel::Channel,
    key: &str,
) -> Result<grpc_channel::Response<FlakyTotals>, grpc_channel::Status> {
    let (msgs, _) = messages(&[10]);
    guarded(
        "client streaming",
        ch.client_streaming::<FlakyMessage, FlakyTotals, _>(
            methods::FLAKY_CLIENT_STREAM,
            flaky_request(
                Request::new(IterStream(msgs.into_iter())),
                key,
                &[("x-fail-times", "1")],
            ),
        ),
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn dont_retry_pushbacks_on_a_method_without_a_policy_throttle_retries_of_another_method() {
    let server = support::faulty_server().await;
    let ch = channel_with(&server.target(), Some(&throttled_config()), |b| b);
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
    let ch = channel_with(&server.target(), Some(&throttled_config()), |b| b);
    let resp = one_failing_client_stream(&ch, "b")
        .await
        .expect("retried: 10 tokens, one failure leaves 9");
    assert_eq!(resp.message().attempt, 2);
    assert_eq!(
        attempts(&[&server], "b"),
        vec![(1, None), (2, Some("1".into()))]
    );
}

#[tokio::test(start_paused = true)]
async fn a_unix_target_retries_under_its_retry_policy() {
    let path = support::socket_path("streaming-retry-unix");
    let server = interop::faulty::FaultyServer::start_unix(&path)
        .await
        .expect("bind unix socket");
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b,
    );
    let r = guarded(
        "unary",
        ch.unary_raw(
            methods::FLAKY,
            flaky_request(
                Request::new(Bytes::new()),
                "unary",
                &[("x-fail-times", "1")],
            ),
        ),
    )
    .await
    .expect("retried over the unix socket");
    assert_eq!(r.trailers().get("x-attempt"), Some("2"));
    assert_eq!(
        attempts(&[&server], "unary"),
        vec![(1, None), (2, Some("1".into()))]
    );
    let resp = one_failing_client_stream(&ch, "stream")
        .await
        .expect("retried over the unix socket");
    assert_eq!(resp.message().attempt, 2);
    let _ = std::fs::remove_file(&path);
}
