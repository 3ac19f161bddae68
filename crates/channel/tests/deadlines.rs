//! Deadlines, cancellation and wait-for-ready, over real sockets with tokio's paused clock: when every task
//! waits, the clock jumps to the next timer, so these tests take no wall-clock time and cannot flake.

mod support;

use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Code, Request};
use interop::faulty::{methods, Event, FaultyServer};
use interop_proto::{paths, Empty};
use support::{channel, faulty_server};
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
