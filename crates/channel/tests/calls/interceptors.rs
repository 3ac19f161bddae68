//! Interceptors end to end, against the fault-injecting and interop servers over real loopback sockets:
//! metadata they add reaches the server, an error fails the call unsent (no connection is even made), they
//! run in order, once per call whatever the retries, on streaming calls too, and may set options.

use grpc_test_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{CallInfo, Channel, Code, ConnectivityState, Request, Status};
use interop::faulty::methods;
use interop_proto::{paths, StreamingOutputCallRequest, StreamingOutputCallResponse};
use support::config::retry;
use support::guards::NO_HANG;
use support::{faulty_server, interop_server, IterStream};

#[tokio::test]
async fn an_interceptor_adds_metadata_the_server_sees() {
    let server = faulty_server().await;
    let methods_seen = Arc::new(Mutex::new(Vec::new()));
    let record = methods_seen.clone();
    let ch = Channel::builder(format!("ipv4:{}", server.addr))
        .interceptor(move |call: &mut CallInfo<'_>| {
            record.lock().expect("lock").push(call.method().to_owned());
            call.metadata_mut()
                .append("authorization", "Bearer t0ken")
                .map_err(|e| Status::new(Code::Internal, e.to_string()))
        })
        .build()
        .expect("channel");
    let resp = tokio::time::timeout(
        NO_HANG,
        ch.unary_raw(methods::ECHO_HEADERS, Request::new(Bytes::new())),
    )
    .await
    .expect("no hang")
    .expect("call");
    assert_eq!(
        resp.trailers().get("x-seen-authorization"),
        Some("Bearer t0ken")
    );
    assert_eq!(
        *methods_seen.lock().expect("lock"),
        vec![methods::ECHO_HEADERS.to_owned()]
    );
}

#[tokio::test]
async fn an_interceptor_error_fails_the_call_without_sending_it() {
    let server = faulty_server().await;
    let ch = Channel::builder(format!("ipv4:{}", server.addr))
        .interceptor(|_: &mut CallInfo<'_>| -> Result<(), Status> {
            Err(Status::new(Code::Unauthenticated, "no token"))
        })
        .build()
        .expect("channel");
    let status = tokio::time::timeout(
        NO_HANG,
        ch.unary_raw(methods::ECHO_HEADERS, Request::new(Bytes::new())),
    )
    .await
    .expect("no hang")
    .expect_err("refused by the interceptor");
    assert_eq!(status.code(), Code::Unauthenticated);
    assert_eq!(status.message(), "no token");
    // Streaming calls too.
    let Err(status) = ch
        .streaming_raw(methods::ECHO_HEADERS, Request::new(()))
        .await
    else {
        panic!("the interceptor refuses streaming calls too");
    };
    assert_eq!(status.code(), Code::Unauthenticated);
    assert_eq!(
        server.connections(),
        0,
        "nothing was sent: not even a connection"
    );
    assert_eq!(ch.state(), ConnectivityState::Idle);
}

#[tokio::test]
async fn interceptors_run_in_order_and_may_set_options() {
    let server = faulty_server().await;
    let ch = Channel::builder(format!("ipv4:{}", server.addr))
        .interceptor(|call: &mut CallInfo<'_>| {
            call.metadata_mut()
                .append("x-first", "1")
                .map_err(|e| Status::new(Code::Internal, e.to_string()))
        })
        .interceptor(|call: &mut CallInfo<'_>| {
            // The first one ran before this one.
            let first = call.metadata().get("x-first").map(str::to_owned);
            call.metadata_mut()
                .append("x-second-saw", first.as_deref().unwrap_or("nothing"))
                .map_err(|e| Status::new(Code::Internal, e.to_string()))?;
            // A default deadline for calls that have none.
            if call.options().timeout().is_none() {
                call.options_mut().set_timeout(Some(Duration::from_secs(7)));
            }
            Ok(())
        })
        .build()
        .expect("channel");
    let resp = tokio::time::timeout(
        NO_HANG,
        ch.unary_raw(methods::ECHO_HEADERS, Request::new(Bytes::new())),
    )
    .await
    .expect("no hang")
    .expect("call");
    let seen = resp.trailers();
    assert_eq!(seen.get("x-seen-x-first"), Some("1"));
    assert_eq!(seen.get("x-seen-x-second-saw"), Some("1"));
    let timeout = seen
        .get("x-seen-grpc-timeout")
        .expect("a grpc-timeout was sent");
    assert!(
        timeout.ends_with('m') || timeout.ends_with('u') || timeout.ends_with('S'),
        "{timeout}"
    );
}

#[tokio::test(start_paused = true)]
async fn interceptors_run_once_per_call_whatever_the_retries() {
    let server = faulty_server().await;
    let runs = Arc::new(AtomicUsize::new(0));
    let count = runs.clone();
    let ch = Channel::builder(format!("ipv4:{}", server.addr))
        .default_service_config(retry(4, &["UNAVAILABLE"]))
        .interceptor(move |call: &mut CallInfo<'_>| {
            count.fetch_add(1, Ordering::SeqCst);
            call.metadata_mut()
                .append("x-test-key", "once")
                .map_err(|e| Status::new(Code::Internal, e.to_string()))
        })
        .build()
        .expect("channel");
    let mut req = Request::new(Bytes::new()).with_timeout(Duration::from_secs(30));
    req.metadata_mut()
        .append("x-fail-times", "2")
        .expect("header");
    let resp = ch
        .unary_raw(methods::FLAKY, req)
        .await
        .expect("the third attempt succeeds");
    assert_eq!(
        resp.trailers().get("x-attempt"),
        Some("3"),
        "the interceptor's metadata went with every attempt"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// An interceptor runs on streaming calls too (a bidi call from a `Stream`, a server-streaming call), and a
/// call it refuses is counted by the telemetry but makes no attempt.
#[tokio::test]
async fn an_interceptor_runs_on_streaming_calls_and_a_refused_call_makes_no_attempt() {
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
            deny(Request::new(IterStream(requests.into_iter()))),
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
