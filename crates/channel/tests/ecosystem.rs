//! The ecosystem pieces at their edges: `Channel::stats()` after cancelled calls, interceptors on every call
//! shape, extreme perAttemptRecvTimeout and hedging delays.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use grpc_channel::{Channel, Code, Request, Status};
use interop_proto::{
    paths, ResponseParameters, StreamingOutputCallRequest, StreamingOutputCallResponse,
};
use support::guards::NO_HANG;
use support::interop_server;

fn slow_stream_request() -> StreamingOutputCallRequest {
    StreamingOutputCallRequest {
        response_parameters: vec![
            ResponseParameters {
                size: 10,
                ..Default::default()
            },
            ResponseParameters {
                size: 10,
                interval_us: 60_000_000,
                ..Default::default()
            },
        ],
        ..Default::default()
    }
}

/// DEFECT: a call the application drops after it committed (here a server stream dropped after its first
/// message) is recorded in `Channel::stats().methods` with the DEFAULT `CallStats` (0 attempts, 0 retries):
/// `Streaming`'s drop only resets the stream; nothing hands the state machine's counts to the telemetry
/// (`report_end`/`set_stats` are not called), and `CallTelemetry::drop` finishes with
/// `self.stats.take().unwrap_or_default()`. The channel totals say 1 attempt, the method says 0; the span's
/// `grpc.attempts` is 0 too.
#[tokio::test]
async fn stats_keep_the_attempts_of_a_call_dropped_after_commit() {
    let addr = interop_server().await;
    let ch = support::channel(addr);
    let response = tokio::time::timeout(
        NO_HANG,
        ch.server_streaming::<_, StreamingOutputCallResponse>(
            paths::STREAMING_OUTPUT_CALL,
            Request::new(slow_stream_request()),
        ),
    )
    .await
    .expect("no hang")
    .expect("call");
    let mut stream = response.into_message();
    let first = tokio::time::timeout(NO_HANG, stream.message())
        .await
        .expect("no hang")
        .expect("first message");
    assert!(first.is_some());
    drop(stream); // the application cancels the call mid-stream
    let stats = ch.stats();
    assert_eq!(
        (
            stats.calls_started,
            stats.calls_failed,
            stats.attempts_started
        ),
        (1, 1, 1),
        "{stats:?}"
    );
    let method = stats
        .methods
        .get(paths::STREAMING_OUTPUT_CALL)
        .unwrap_or_else(|| panic!("method recorded: {stats:?}"));
    assert_eq!(
        (method.calls, method.attempts),
        (1, 1),
        "the cancelled call's attempt is lost from the per-method stats: {method:?}"
    );
}

/// Probe: an interceptor runs once on each call shape (unary, server streaming, client streaming,
/// bidi_streaming from a Stream, streaming halves) and its failure leaves the call unsent.
#[tokio::test]
async fn interceptors_run_on_every_shape() {
    let addr = interop_server().await;
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let ch = Channel::builder(format!("ipv4:{addr}"))
        .interceptor(move |call: &mut grpc_channel::CallInfo<'_>| {
            counter.fetch_add(1, Ordering::SeqCst);
            if call.metadata().get("x-deny").is_some() {
                return Err(Status::new(Code::PermissionDenied, "denied"));
            }
            Ok(())
        })
        .build()
        .expect("channel");
    let deny = |mut r: Request<_>| {
        r.metadata_mut().append("x-deny", "1").expect("md");
        r
    };
    // bidi from a stream, denied.
    let requests: Vec<StreamingOutputCallRequest> = vec![];
    let err = tokio::time::timeout(
        NO_HANG,
        ch.bidi_streaming::<StreamingOutputCallRequest, StreamingOutputCallResponse, _>(
            paths::FULL_DUPLEX_CALL,
            deny(Request::new(tokio_iter(requests))),
        ),
    )
    .await
    .expect("no hang")
    .expect_err("denied");
    assert_eq!(err.code(), Code::PermissionDenied);
    // server streaming allowed
    let _ = tokio::time::timeout(
        NO_HANG,
        ch.server_streaming::<_, StreamingOutputCallResponse>(
            paths::STREAMING_OUTPUT_CALL,
            Request::new(StreamingOutputCallRequest::default()),
        ),
    )
    .await
    .expect("no hang")
    .expect("call");
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    // The denied call is counted (telemetry covers every call), but no attempt of it was made.
    let stats = ch.stats();
    assert_eq!(
        (
            stats.calls_started,
            stats.calls_failed,
            stats.attempts_started
        ),
        (2, 1, 1),
        "{stats:?}"
    );
}

/// A Stream over a Vec, without extra dependencies.
fn tokio_iter<T: Send + Unpin + 'static>(v: Vec<T>) -> impl futures_core::Stream<Item = T> + Send {
    struct It<T>(std::vec::IntoIter<T>);
    impl<T: Unpin> futures_core::Stream for It<T> {
        type Item = T;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<T>> {
            std::task::Poll::Ready(self.0.next())
        }
    }
    It(v.into_iter())
}

#[allow(dead_code)]
const _UNUSED: Duration = Duration::ZERO;

/// Probe: extreme durations in a service config (perAttemptRecvTimeout and hedgingDelay at proto3's maximum,
/// 315576000000s) neither panic nor outlive the call's deadline; "0s" is rejected by the parser (the channel
/// falls back to no config: build fails or the call runs without policy).
#[tokio::test(start_paused = true)]
async fn extreme_per_attempt_recv_timeout_and_hedging_delay_neither_panic_nor_hang() {
    use bytes::Bytes;
    let server = interop::faulty::FaultyServer::start()
        .await
        .expect("server");
    let target = format!("ipv4:{}", server.addr);
    let retry = r#"{"methodConfig":[{"name":[{"service":"fault.Faulty"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[],"perAttemptRecvTimeout":"315576000000s"}}]}"#;
    let hedge = r#"{"methodConfig":[{"name":[{"service":"fault.Faulty"}],"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"315576000000s","nonFatalStatusCodes":["UNAVAILABLE"],"perAttemptRecvTimeout":"315576000000s"}}]}"#;
    for (i, config) in [retry, hedge].into_iter().enumerate() {
        let ch = Channel::builder(&target)
            .service_config_lookup(false)
            .default_service_config(config)
            .build()
            .expect("channel");
        let mut req = Request::new(Bytes::new()).with_timeout(Duration::from_secs(2));
        req.metadata_mut()
            .append("x-test-key", &format!("extreme-{i}"))
            .expect("key");
        req.metadata_mut()
            .append("x-hang-attempts", "1,2,3")
            .expect("hang");
        let err = tokio::time::timeout(NO_HANG, ch.unary_raw(interop::faulty::methods::FLAKY, req))
            .await
            .expect("no hang")
            .expect_err("hangs until the deadline");
        assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    }
    let zero = r#"{"methodConfig":[{"name":[{"service":"fault.Faulty"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[],"perAttemptRecvTimeout":"0s"}}]}"#;
    assert!(Channel::builder(&target)
        .service_config_lookup(false)
        .default_service_config(zero)
        .build()
        .is_err());
}
