//! Deadlines, cancellation and wait-for-ready, over real sockets with tokio's paused clock: when every task
//! waits, the clock jumps to the next timer, so these tests take no wall-clock time and cannot flake. Against
//! the interop and fault-injecting servers, and the scriptable h2 server for what they cannot do (refuse
//! every stream, allow none).

use grpc_test_support as support;

use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Request};
use h2::Reason;
use interop::faulty::{methods, Event, FaultyServer};
use interop_proto::{paths, Empty};
use support::config::retry;
use support::guards::{guarded, settle, watchdog, GUARD};
use support::h2_server::{defaults, handler, H2Server, Stream, SVC};
use support::shapes::{call_shape, SHAPES};
use support::{channel, channel_with_config, faulty_server, reserved_port};
use tokio::net::TcpListener;
use tokio::time::Instant;

async fn wait_for_reset(server: &FaultyServer, path: &str, reason: h2::Reason) {
    let want = Event::Reset {
        path: path.to_owned(),
        reason,
    };
    for _ in 0..100 {
        if server.events().contains(&want) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("server never saw {want:?}: {:?}", server.events());
}

#[tokio::test(start_paused = true)]
async fn deadline_exceeded_at_the_deadline_and_the_stream_is_cancelled() {
    let server = faulty_server().await;
    let ch = channel(server.addr);
    let start = Instant::now();
    let req = Request::new(Bytes::new()).with_timeout(Duration::from_millis(1500));
    let status = ch
        .unary_raw(methods::SILENT, req)
        .await
        .expect_err("silent server");
    let elapsed = start.elapsed();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        elapsed >= Duration::from_millis(1500) && elapsed < Duration::from_millis(1600),
        "ended after {elapsed:?}"
    );
    wait_for_reset(&server, methods::SILENT, h2::Reason::CANCEL).await;
}

#[tokio::test(start_paused = true)]
async fn dropping_a_call_sends_rst_stream_cancel() {
    let server = faulty_server().await;
    let ch = channel(server.addr);
    let call = ch.unary_raw(methods::SILENT, Request::new(Bytes::new()));
    // Give up on the call after a while, dropping its future.
    assert!(tokio::time::timeout(Duration::from_secs(2), call)
        .await
        .is_err());
    wait_for_reset(&server, methods::SILENT, h2::Reason::CANCEL).await;
}

#[tokio::test(start_paused = true)]
async fn explicit_cancel_ends_cancelled_and_resets_the_stream() {
    let server = faulty_server().await;
    let ch = channel(server.addr);
    let (mut tx, mut rx) = ch
        .streaming_raw(methods::SILENT, Request::new(()))
        .await
        .expect("start");
    tx.send(Bytes::from_static(b"hello")).await.expect("send");
    rx.cancel();
    let status = rx.message().await.expect_err("cancelled");
    assert_eq!(status.code(), Code::Cancelled);
    assert_eq!(
        tx.send(Bytes::new())
            .await
            .expect_err("after cancel")
            .code(),
        Code::Cancelled
    );
    wait_for_reset(&server, methods::SILENT, h2::Reason::CANCEL).await;
}

#[tokio::test(start_paused = true)]
async fn streaming_deadline_fires_while_waiting_for_a_message() {
    let server = faulty_server().await;
    let ch = channel(server.addr);
    let start = Instant::now();
    let (_tx, mut rx) = ch
        .streaming_raw(
            methods::SILENT,
            Request::new(()).with_timeout(Duration::from_secs(30)),
        )
        .await
        .expect("start");
    let status = rx.message().await.expect_err("deadline");
    assert_eq!(status.code(), Code::DeadlineExceeded);
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_secs(30) && elapsed < Duration::from_millis(30_100),
        "{elapsed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn fail_fast_call_fails_at_once_when_nothing_listens() {
    let (_held, addr) = support::reserved_port();
    let ch = channel(addr);
    let start = Instant::now();
    let status = ch
        .unary::<_, Empty>(
            paths::EMPTY_CALL,
            Request::new(Empty {}).with_timeout(Duration::from_secs(10)),
        )
        .await
        .expect_err("no server");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        start.elapsed() < Duration::from_millis(100),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn wait_for_ready_call_waits_for_the_server() {
    let (held, addr) = support::reserved_port();
    let ch = channel(addr);
    let start = Instant::now();
    let server = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        drop(held);
        interop::server::spawn(addr)
            .await
            .expect("server on the same port")
    });
    let req = Request::new(Empty {})
        .with_wait_for_ready(true)
        .with_timeout(Duration::from_secs(60));
    ch.unary::<_, Empty>(paths::EMPTY_CALL, req)
        .await
        .expect("succeeds once the server is up");
    server.await.expect("server task");
    // Connection attempts start at 0 s, 1 s, then 1.6 s ± 20 % and 2.56 s ± 20 % later: the server comes up
    // at 2.5 s, so the third attempt (at 2.28..2.92 s) or the fourth (at most 2.92 + 3.072 s) finds it.
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(2500) && elapsed <= Duration::from_millis(6000),
        "{elapsed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn wait_for_ready_call_ends_at_its_deadline() {
    let (_held, addr) = support::reserved_port();
    let ch = channel(addr);
    let start = Instant::now();
    let req = Request::new(Empty {})
        .with_wait_for_ready(true)
        .with_timeout(Duration::from_secs(5));
    let status = ch
        .unary::<_, Empty>(paths::EMPTY_CALL, req)
        .await
        .expect_err("nothing listens");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    // The message names what the call waited for and the last connection error (grpc-go's "... while
    // waiting for connections to become ready"), bounded in length.
    let message = status.message();
    assert!(
        message.starts_with(
            "deadline exceeded while waiting for connections to become ready (wait-for-ready); last connection error"
        ),
        "{message}"
    );
    assert!(message.contains("refused"), "{message}");
    assert!(message.contains(&format!("(to {addr})")), "{message}");
    assert!(message.len() < 600, "{message}");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_secs(5) && elapsed < Duration::from_millis(5100),
        "{elapsed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_response_that_keeps_flowing_cannot_keep_the_call_alive_past_its_deadline() {
    // The server sends 1,000 messages at once; they sit in the client's buffers, so a message is always
    // ready. The application reads one every 10 ms: the call must still end at its 200 ms deadline.
    let addr = support::interop_server().await;
    let ch = channel(addr);
    let req = interop_proto::StreamingOutputCallRequest {
        response_parameters: (0..1000)
            .map(|_| interop_proto::ResponseParameters {
                size: 100,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let start = Instant::now();
    let resp = ch
        .server_streaming::<_, interop_proto::StreamingOutputCallResponse>(
            paths::STREAMING_OUTPUT_CALL,
            Request::new(req).with_timeout(Duration::from_millis(200)),
        )
        .await
        .expect("headers");
    let mut stream = resp.into_message();
    let mut received = 0;
    let status = loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        match stream.message().await {
            Ok(Some(_)) => received += 1,
            Ok(None) => panic!(
                "ended OK after {received} messages and {:?}",
                start.elapsed()
            ),
            Err(status) => break status,
        }
    };
    let elapsed = start.elapsed();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        elapsed >= Duration::from_millis(200) && elapsed <= Duration::from_millis(210),
        "ended after {elapsed:?} with {received} messages"
    );
    assert!(received < 25, "{received} messages read past the deadline");
}

#[tokio::test(start_paused = true)]
async fn a_call_with_no_time_left_ends_locally_and_is_never_sent() {
    let server = faulty_server().await;
    let ch = channel(server.addr);
    // A first call makes the connection READY, so the next attempt could open a stream at once.
    ch.unary_raw(methods::ECHO_HEADERS, Request::new(Bytes::new()))
        .await
        .expect("warm-up");
    let mut req = Request::new(Bytes::new()).with_timeout(Duration::ZERO);
    req.metadata_mut()
        .append("x-test-key", "zero")
        .expect("key");
    let status = ch
        .unary_raw(methods::FLAKY, req)
        .await
        .expect_err("no time left");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    // Never sent: `grpc-timeout` is a positive integer, and `0n` would be one the server must reject.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let attempts: Vec<Event> = server
        .events()
        .into_iter()
        .filter(|e| matches!(e, Event::Attempt { key, .. } if key == "zero"))
        .collect();
    assert_eq!(attempts, vec![], "the server saw the call");
}

// ---- Against the scriptable h2 server ------------------------------------------------------------------

/// `streaming()` with wait-for-ready and nothing listening waits, but ends at its deadline with
/// DEADLINE_EXCEEDED.
#[tokio::test(start_paused = true)]
async fn streaming_wait_for_ready_ends_at_the_deadline() {
    let (_held, addr) = reserved_port();
    let ch = Channel::new(format!("ipv4:{addr}")).expect("channel");
    let start = Instant::now();
    let r = tokio::time::timeout(
        GUARD,
        ch.streaming_raw(
            "/t.S/Bidi",
            Request::new(())
                .with_wait_for_ready(true)
                .with_timeout(Duration::from_secs(5)),
        ),
    )
    .await
    .expect("guard");
    let status = r.expect_err("nothing listens");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_secs(5) && elapsed < Duration::from_millis(5100),
        "{elapsed:?}"
    );
}

/// Dropping the future of `streaming()` before it returns (a timeout around it, a `select!`) cancels the
/// call: a wait-for-ready call without a deadline, given up on while nothing listens, opens no stream that is
/// left unreset once the server comes up. The failure this guards against: the spawned driver went on
/// picking after the caller gave up and opened a stream nobody owned (its `ActiveCallGuard` also kept the channel
/// from ever going idle).
#[tokio::test(start_paused = true)]
async fn abandoning_streaming_before_it_returns_cancels_the_call() {
    let (held, addr) = reserved_port();
    let ch = Channel::new(format!("ipv4:{addr}")).expect("channel");
    let gave_up = tokio::time::timeout(
        Duration::from_secs(2),
        ch.streaming_raw("/t.S/Bidi", Request::new(()).with_wait_for_ready(true)),
    )
    .await;
    assert!(gave_up.is_err(), "nothing listens yet: streaming() waits");
    // The caller has given up. Now the server comes up.
    drop(held);
    let listener = TcpListener::bind(addr).await.expect("rebind");
    let server = H2Server::serve_tcp(
        listener,
        defaults,
        handler(|mut s: Stream| async move { s.wait_reset().await }),
    );
    let outcome = tokio::time::timeout(GUARD, async {
        tokio::time::sleep(Duration::from_secs(300)).await;
        settle(Duration::from_millis(200)).await;
    })
    .await;
    assert!(outcome.is_ok());
    let opened = server.opens();
    let reset = server.resets();
    assert!(
        opened.iter().all(|o| reset.iter().any(|r| r.id == o.id)),
        "an abandoned call opened streams {opened:?} on the server that were never reset ({reset:?})"
    );
}

/// Every attempt is refused (RST_STREAM(REFUSED_STREAM)): one transparent retry, then the policy (backoff
/// ~1 s, ~2 s), then the deadline (2.5 s) stops it. Every shape ends UNAVAILABLE before the deadline, with a
/// handful of streams (no busy loop: the paused clock advanced through the backoffs).
#[tokio::test(start_paused = true)]
async fn refused_on_every_attempt_ends_by_the_deadline_for_every_shape() {
    let _dog = watchdog("refused on every attempt", 120);
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            s.respond.send_reset(Reason::REFUSED_STREAM);
        }),
    )
    .await;
    let ch = channel_with_config(
        &server.target(),
        retry(5, &["UNAVAILABLE"])
            .service(SVC)
            .initial_backoff("1s")
            .max_backoff("10s"),
    );
    for shape in SHAPES {
        let before = server.opens().len();
        let start = Instant::now();
        let status = guarded(
            "refused",
            call_shape(&ch, shape, "/t.S/Refused", Duration::from_millis(2500)),
        )
        .await;
        let elapsed = start.elapsed();
        let streams = server.opens().len() - before;
        assert_eq!(status.code(), Code::Unavailable, "{shape:?}: {status:?}");
        assert!(
            elapsed >= Duration::from_millis(800) && elapsed <= Duration::from_millis(2500),
            "{shape:?}: ended after {elapsed:?}"
        );
        assert!(
            (3..=5).contains(&streams),
            "{shape:?}: {streams} streams (transparent + policy retries)"
        );
    }
}

/// The server allows no stream at all (SETTINGS_MAX_CONCURRENT_STREAMS = 0): every attempt waits in h2's
/// local queue. Every shape ends DEADLINE_EXCEEDED at its deadline, and the clock advanced (no busy loop).
#[tokio::test(start_paused = true)]
async fn no_stream_slot_ends_at_the_deadline_for_every_shape() {
    let _dog = watchdog("no stream slot", 120);
    fn zero(b: &mut h2::server::Builder) {
        b.max_concurrent_streams(0);
    }
    let server = H2Server::tcp(zero, handler(|_s: Stream| async move {})).await;
    let ch = channel_with_config(
        &server.target(),
        retry(5, &["UNAVAILABLE"]).service(SVC).max_backoff("10s"),
    );
    for shape in SHAPES {
        let start = Instant::now();
        let status = guarded(
            "queued",
            call_shape(&ch, shape, "/t.S/Queued", Duration::from_secs(2)),
        )
        .await;
        let elapsed = start.elapsed();
        assert_eq!(
            status.code(),
            Code::DeadlineExceeded,
            "{shape:?}: {status:?}"
        );
        assert!(
            elapsed >= Duration::from_secs(2) && elapsed < Duration::from_millis(2100),
            "{shape:?}: {elapsed:?}"
        );
    }
    assert!(server.opens().is_empty());
}

/// A wait-for-ready call whose deadline passes while it waits quotes "the last connection error" as the
/// reason it waited (issue 35; grpc-go quotes the error of the picker the call saw while it waited, which
/// is gone once a connection is READY). An error from before the channel connected and served calls is
/// history: quoting it sends the reader after the wrong cause. Here the port refused once, then a server
/// came up and served a call, then the server went away and a listener that accepts and never speaks
/// HTTP/2 took its port: the call waited on a handshake that never finishes, yet its status says the
/// address refused the connection. Wrong: `call/connection_wait.rs` quotes `ControlPlane::last_failure`,
/// which the event loop (`control/event_loop.rs`, `Event::Failed`) sets and never clears (not when a
/// connection to that address is READY, nor when the channel goes IDLE).
#[tokio::test(start_paused = true)]
async fn wait_for_ready_deadline_does_not_quote_a_connection_error_from_before_the_channel_was_ready(
) {
    let (held, addr) = support::reserved_port();
    let ch = channel(addr);
    let refused = ch
        .unary::<_, Empty>(
            paths::EMPTY_CALL,
            Request::new(Empty {}).with_timeout(Duration::from_secs(10)),
        )
        .await
        .expect_err("nothing listens yet");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    drop(held);
    let server = interop::server::start(addr)
        .await
        .expect("server on the same port");
    ch.unary::<_, Empty>(
        paths::EMPTY_CALL,
        Request::new(Empty {})
            .with_wait_for_ready(true)
            .with_timeout(Duration::from_secs(60)),
    )
    .await
    .expect("the server is up: READY and served");
    server.shutdown();
    // The port now accepts connections and never answers them (no SETTINGS, no PING ACK).
    let mut silent = None;
    for _ in 0..100 {
        match TcpListener::bind(addr).await {
            Ok(l) => {
                silent = Some(l);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    let silent = silent.expect("the port is free again");
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let status = ch
        .unary::<_, Empty>(
            paths::EMPTY_CALL,
            Request::new(Empty {})
                .with_wait_for_ready(true)
                .with_timeout(Duration::from_secs(3)),
        )
        .await
        .expect_err("the handshake never finishes");
    holder.abort();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        status
            .message()
            .starts_with("deadline exceeded while waiting for connections"),
        "{status}"
    );
    assert!(
        !status.message().contains("refused"),
        "the refusal was before the channel was READY, not why this call waited: {status}"
    );
}
