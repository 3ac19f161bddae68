//! gRFC A6 "Exposed Retry Metadata", the application's side: the number of attempts that preceded the
//! result reaches the application on every call shape and outcome, as `grpc-previous-rpc-attempts` in the
//! metadata it reads with the result (response headers; the trailers of a Trailers-Only answer and of a
//! failed call's `Status`) and as `previous_rpc_attempts()` on `Response`, `Streaming` and `Status`. Absent
//! (0) when the first attempt produced the result; transparent retries are not counted. Against the
//! fault-injecting server over real sockets, on tokio's paused clock.

use grpc_test_support as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Code, Request, Status};
use interop::faulty::{methods, FlakyItem, FlakyMessage};
use support::config::{hedging_config, retry_config};
use support::flaky::{attempts, channel_with, flaky_request, target_of};
use support::frames::grpc_message;
use support::guards::guarded;
use support::h2_server::{defaults, handler, trailers, H2Server};

const HEADER: &str = "grpc-previous-rpc-attempts";

async fn unary(
    ch: &grpc_channel::Channel,
    key: &str,
    headers: &[(&str, &str)],
) -> Result<grpc_channel::Response<Bytes>, Status> {
    let request = flaky_request(Request::new(Bytes::new()), key, headers);
    guarded("unary", ch.unary_raw(methods::FLAKY, request)).await
}

#[tokio::test(start_paused = true)]
async fn a_unary_success_after_two_failures_tells_the_application_two_attempts_preceded_it() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(4, &["UNAVAILABLE"])),
        |b| b,
    );
    let response = unary(&ch, "k", &[("x-fail-times", "2")])
        .await
        .expect("the third attempt succeeds");
    assert_eq!(response.previous_rpc_attempts(), 2);
    assert_eq!(response.metadata().get(HEADER), Some("2"));
    assert_eq!(response.trailers().get("x-attempt"), Some("3"));
}

#[tokio::test(start_paused = true)]
async fn the_first_attempt_s_result_carries_no_count() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(4, &["UNAVAILABLE"])),
        |b| b,
    );
    let response = unary(&ch, "ok", &[]).await.expect("OK at once");
    assert_eq!(response.previous_rpc_attempts(), 0);
    assert_eq!(response.metadata().get(HEADER), None);
    assert_eq!(response.trailers().get(HEADER), None);
    let status = unary(&ch, "bad", &[("x-fail-times", "1"), ("x-fail-code", "5")])
        .await
        .expect_err("NOT_FOUND is not retryable");
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(status.previous_rpc_attempts(), 0);
    assert_eq!(status.metadata().get(HEADER), None);
}

#[tokio::test(start_paused = true)]
async fn a_failed_call_s_status_counts_the_attempts_before_its_last() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b,
    );
    let status = unary(&ch, "k", &[("x-fail-times", "10")])
        .await
        .expect_err("every attempt fails");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(status.previous_rpc_attempts(), 2);
    assert_eq!(status.metadata().get(HEADER), Some("2"));
    assert_eq!(attempts(&[&server], "k").len(), 3);
}

#[tokio::test(start_paused = true)]
async fn transparent_retries_are_not_counted() {
    let server = support::faulty_server().await;
    // Without a policy: a refused stream is retried transparently, and the result came from the "first"
    // attempt as far as A6 counts.
    let ch = channel_with(&server.target(), None, |b| b);
    let response = unary(
        &ch,
        "t",
        &[("x-fail-times", "1"), ("x-fail-mode", "refuse")],
    )
    .await
    .expect("the transparent retry succeeds");
    assert_eq!(attempts(&[&server], "t").len(), 2);
    assert_eq!(response.previous_rpc_attempts(), 0);
    assert_eq!(response.metadata().get(HEADER), None);
}

#[tokio::test(start_paused = true)]
async fn a_local_end_after_a_retry_counts_the_attempts_before_the_last_one_started() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(5, &["UNAVAILABLE"])),
        |b| b,
    );
    // Attempt 1 fails, the retry hangs, and the call's deadline ends it on the client.
    let request = flaky_request(
        Request::new(Bytes::new()),
        "late",
        &[("x-fail-times", "1"), ("x-hang-attempts", "2")],
    )
    .with_timeout(Duration::from_secs(2));
    let status = guarded("unary", ch.unary_raw(methods::FLAKY, request))
        .await
        .expect_err("the deadline passes during the retry");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert_eq!(attempts(&[&server], "late").len(), 2);
    assert_eq!(status.previous_rpc_attempts(), 1);
    assert_eq!(status.metadata().get(HEADER), Some("1"));
}

#[tokio::test(start_paused = true)]
async fn server_streaming_sees_the_count_on_the_response_and_the_stream() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b,
    );
    let response = guarded(
        "server streaming",
        ch.server_streaming::<FlakyMessage, FlakyItem>(
            methods::FLAKY_SERVER_STREAM,
            flaky_request(
                Request::new(FlakyMessage::default()),
                "ss",
                &[("x-fail-times", "1"), ("x-response-count", "2")],
            ),
        ),
    )
    .await
    .expect("the retry answers");
    assert_eq!(response.previous_rpc_attempts(), 1);
    assert_eq!(response.metadata().get(HEADER), Some("1"));
    let mut stream = response.into_inner();
    assert_eq!(stream.previous_rpc_attempts(), 1);
    while guarded("item", stream.message())
        .await
        .expect("item")
        .is_some()
    {}
    assert_eq!(stream.metadata().and_then(|m| m.get(HEADER)), Some("1"));
}

#[tokio::test(start_paused = true)]
async fn bidi_sees_the_count_in_the_response_headers_and_on_a_final_failure() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b,
    );
    // Attempt 1 fails Trailers-Only; attempt 2 answers: one attempt preceded it.
    let (mut tx, mut rx) = guarded(
        "start",
        ch.streaming_raw(
            methods::FLAKY_BIDI,
            flaky_request(Request::new(()), "bidi", &[("x-fail-times", "1")]),
        ),
    )
    .await
    .expect("the call starts");
    guarded("send", tx.send(Bytes::from_static(b"one")))
        .await
        .expect("buffered");
    let headers = guarded("headers", rx.headers()).await.expect("headers");
    assert_eq!(headers.get(HEADER), Some("1"));
    assert_eq!(rx.previous_rpc_attempts(), 1);
    let echo = guarded("echo", rx.message()).await.expect("echo");
    assert_eq!(echo.as_deref(), Some(&b"one"[..]));
    guarded("finish", tx.finish()).await.expect("half-close");
    assert_eq!(guarded("end", rx.message()).await.expect("OK"), None);

    // Every attempt fails Trailers-Only: the call's status and trailers carry the count.
    let (mut tx, mut rx) = guarded(
        "start",
        ch.streaming_raw(
            methods::FLAKY_BIDI,
            flaky_request(Request::new(()), "never", &[("x-fail-times", "10")]),
        ),
    )
    .await
    .expect("the call starts");
    guarded("send", tx.send(Bytes::from_static(b"one")))
        .await
        .expect("buffered");
    let status = guarded("end", rx.message())
        .await
        .expect_err("every attempt fails");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(status.previous_rpc_attempts(), 2);
    assert_eq!(rx.previous_rpc_attempts(), 2);
    assert_eq!(rx.trailers().and_then(|t| t.get(HEADER)), Some("2"));
}

#[tokio::test(start_paused = true)]
async fn a_winning_hedge_reports_how_many_attempts_preceded_it() {
    let a = support::faulty_server().await;
    let b = support::faulty_server().await;
    let ch = channel_with(
        &target_of(&[&a, &b]),
        Some(&hedging_config(3, "0.5s")),
        |b| b,
    );
    // The original hangs; the hedge sent after 0.5 s answers.
    let response = unary(&ch, "h", &[("x-hang-attempts", "1")])
        .await
        .expect("the hedge answers");
    assert_eq!(response.previous_rpc_attempts(), 1);
    assert_eq!(response.metadata().get(HEADER), Some("1"));
}

// Statuses the channel makes itself from the answer it committed to (a cardinality violation) carry the
// count too.

/// Per path: the first stream fails Trailers-Only UNAVAILABLE; the next answers `/card.Svc/None` with OK and
/// no message, `/card.Svc/Two` with two messages and OK.
async fn cardinality_server() -> H2Server {
    let seen: Arc<Mutex<std::collections::HashMap<String, u32>>> = Arc::default();
    H2Server::tcp(
        defaults,
        handler(move |mut stream| {
            let n = {
                let mut seen = seen.lock().expect("lock");
                let n = seen.entry(stream.path.clone()).or_default();
                *n += 1;
                *n
            };
            async move {
                if n == 1 {
                    stream.trailers_only("14", &[]);
                } else if stream.path == "/card.Svc/None" {
                    stream.trailers_only("0", &[]);
                } else if let Some(mut send) = stream.headers() {
                    let _ = send.send_data(grpc_message(b"one"), false);
                    let _ = send.send_data(grpc_message(b"two"), false);
                    let _ = send.send_trailers(trailers("0", &[]));
                }
            }
        }),
    )
    .await
}

/// A unary call whose retry answers with no message, or two: the channel fails it UNIMPLEMENTED
/// (cardinality violation). One attempt preceded the answer the status is about, so the status must say 1,
/// as every other status after a retry does.
#[tokio::test(start_paused = true)]
async fn a_cardinality_violation_after_a_retry_carries_the_count() {
    let server = cardinality_server().await;
    let config = retry_config(3, &["UNAVAILABLE"]).replace("fault.Faulty", "card.Svc");
    let ch = channel_with(&server.target(), Some(&config), |b| b);
    for path in ["/card.Svc/None", "/card.Svc/Two"] {
        let status = guarded(path, ch.unary_raw(path, Request::new(Bytes::new())))
            .await
            .expect_err("cardinality violation");
        assert_eq!(status.code(), Code::Unimplemented, "{path}: {status:?}");
        assert_eq!(
            status.previous_rpc_attempts(),
            1,
            "{path}: the status made after the retry's answer has no count"
        );
        assert_eq!(status.metadata().get(HEADER), Some("1"), "{path}");
    }
}
