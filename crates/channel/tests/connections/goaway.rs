//! GOAWAY draining: after a graceful GOAWAY (A9: a server's max-connection-age) the connection finishes the
//! streams it has while every new call goes to a new connection at once, on TCP and `unix:` targets alike.
//! The first tests run in real time, bounded: they wait for conditions (a call answered by the new
//! connection), never for a duration; the last ones run on tokio's paused clock against the scriptable h2
//! server.

use grpc_test_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Request};
use interop::raw::{write_frame, Frame};
use support::config::retry;
use support::frames::grpc_message;
use support::guards::{eventually_every, guarded, settle, GUARD, SETTLE_STEP};
use support::h2_server::{defaults, handler, trailers, H2Server, Handler, Stream, SVC};
use support::{channel_with_config, socket_path};
use tokio::io::AsyncReadExt;
use tokio::sync::Notify;

const HOLD: &str = "/drain.Svc/Hold";
const UNARY: &str = "/drain.Svc/Unary";

/// The drain server: a stream on `HOLD` is held open (headers sent) until `finish_hold`, then answers one
/// message and OK; `UNARY` answers `conn<N>` at once. The test shuts connection 1 down gracefully
/// ([`H2Server::goaway_connection`]).
struct Drain {
    server: H2Server,
    /// Finish the held stream with one message and OK.
    finish_hold: Arc<Notify>,
}

fn drain_handler(finish_hold: Arc<Notify>) -> Handler {
    handler(move |mut stream| {
        let finish_hold = finish_hold.clone();
        async move {
            if stream.path == HOLD {
                let Some(mut send) = stream.headers() else {
                    return;
                };
                finish_hold.notified().await;
                let _ = send.send_data(grpc_message(b"late"), false);
                let _ = send.send_trailers(trailers("0", &[]));
            } else {
                stream.ok(format!("conn{}", stream.conn).as_bytes());
            }
        }
    })
}

async fn call(ch: &Channel) -> Result<Bytes, grpc_channel::Status> {
    ch.unary_raw(UNARY, Request::new(Bytes::new()))
        .await
        .map(|r| r.into_message())
}

async fn drains(ch: Channel, drain: Drain) {
    assert_eq!(&call(&ch).await.expect("first call")[..], b"conn1");
    let (_tx, mut held) = ch
        .streaming_raw(HOLD, Request::new(()))
        .await
        .expect("held call");
    held.headers().await.expect("held call is up");
    drain.server.goaway_connection(1);
    // A call that races the GOAWAY may rightly go to the old connection (the server still processes it);
    // once the client has read it, calls go to connection 2 without waiting for the held stream, which has
    // no end in sight. Each call is bounded: a call that waits for the draining connection fails the test.
    let mut attempts = 0;
    loop {
        attempts += 1;
        let answered = tokio::time::timeout(Duration::from_secs(5), call(&ch))
            .await
            .expect("a call after a graceful GOAWAY must not wait for the draining connection")
            .expect("ok");
        if &answered[..] == b"conn2" {
            break;
        }
        assert!(attempts < 200, "calls never moved to a new connection");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(drain.server.connections(), 2);
    // The held stream still finishes on connection 1.
    drain.finish_hold.notify_one();
    let message = held
        .message()
        .await
        .expect("held stream")
        .expect("a message");
    assert_eq!(&message[..], b"late");
    assert_eq!(held.message().await.expect("ends OK"), None);
}

/// The drain server on a loopback TCP port.
async fn tcp_server() -> Drain {
    let finish_hold = Arc::new(Notify::new());
    let server = H2Server::tcp(defaults, drain_handler(finish_hold.clone())).await;
    Drain {
        server,
        finish_hold,
    }
}

#[tokio::test]
async fn a_graceful_goaway_drains_the_connection_and_new_calls_use_a_new_one() {
    let drain = tcp_server().await;
    let ch = Channel::new(drain.server.target()).expect("channel");
    tokio::time::timeout(Duration::from_secs(60), drains(ch, drain))
        .await
        .expect("no hang");
}

#[tokio::test]
async fn a_graceful_goaway_on_a_unix_target_drains_too() {
    let dir = std::env::temp_dir().join(format!("grpc-channel-goaway-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("drain.sock");
    let finish_hold = Arc::new(Notify::new());
    let server = H2Server::unix(path.clone(), defaults, drain_handler(finish_hold.clone()));
    let ch = Channel::new(server.target()).expect("channel");
    let drain = Drain {
        server,
        finish_hold,
    };
    tokio::time::timeout(Duration::from_secs(60), drains(ch, drain))
        .await
        .expect("no hang");
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir(&dir);
}

fn far() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(30)
}

/// A GOAWAY right after the connection became READY (no call on it): the connection was closed gracefully,
/// so the channel goes to IDLE (gRPC's connectivity semantics), not TRANSIENT_FAILURE, and the next call
/// connects anew.
#[tokio::test]
async fn a_goaway_right_after_ready_makes_the_channel_idle_not_transient_failure() {
    use grpc_channel::ConnectivityState;

    let drain = tcp_server().await;
    let ch = Channel::new(drain.server.target()).expect("channel");
    let run = async {
        ch.connect();
        let mut state = ch.state();
        while state != ConnectivityState::Ready {
            state = ch.wait_for_state_change(state, far()).await;
            assert_ne!(state, ConnectivityState::TransientFailure);
        }
        drain.server.goaway_connection(1);
        let mut seen = Vec::new();
        while state != ConnectivityState::Idle {
            state = ch.wait_for_state_change(state, far()).await;
            seen.push(state);
            assert!(seen.len() < 10, "{seen:?}");
        }
        assert_eq!(seen, vec![ConnectivityState::Idle], "READY then IDLE");
        // The next call connects anew.
        assert_eq!(&call(&ch).await.expect("call")[..], b"conn2");
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("no hang");
}

// A server that answers every connection with SETTINGS and GOAWAY(NO_ERROR) at once (overloaded, draining,
// at its connection limit) gives no usable connection: each is a failed connection attempt, so the next
// one waits for the connection backoff (connection-backoff.md: INITIAL_BACKOFF 1 s, x1.6, jitter 0.2; within
// 3 s, 4 connections at most) and the channel reports TRANSIENT_FAILURE. Counting such a connection as READY
// then IDLE (as after a GOAWAY on a READY connection) would reset the backoff and reconnect in a tight loop.
// Real time, bounded: each test waits for a condition (a number of connections) for at most 3 s.

/// The most connections the backoff allows in the window (1 at once, then after about 1 s and 2.6 s).
const ALLOWED: usize = 4;
const WINDOW: Duration = Duration::from_secs(3);
/// Far more than the backoff allows: reaching it ends the wait early.
const STORM: usize = 50;

struct Connections {
    connections: AtomicUsize,
    changed: Notify,
}

/// A server that sends SETTINGS and GOAWAY(0, NO_ERROR) on every connection, then closes it.
async fn goaway_at_once_server() -> (std::net::SocketAddr, Arc<Connections>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let counter = Arc::new(Connections {
        connections: AtomicUsize::new(0),
        changed: Notify::new(),
    });
    let c = counter.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            c.connections.fetch_add(1, Ordering::SeqCst);
            c.changed.notify_waiters();
            tokio::spawn(async move {
                let _ = write_frame(&mut tcp, &Frame::settings(&[])).await;
                let _ = write_frame(&mut tcp, &Frame::goaway(0, 0, b"overloaded")).await;
                // Read what the client sends for a moment (its preface, SETTINGS, PING) so that the close
                // is a FIN, not a reset; then close.
                let mut buf = [0u8; 1024];
                let _ = tokio::time::timeout(Duration::from_millis(20), async {
                    loop {
                        match tcp.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(_) => {}
                        }
                    }
                })
                .await;
            });
        }
    });
    (addr, counter)
}

/// Waits until the server has seen `STORM` connections or `WINDOW` has passed; returns the count and how
/// long the wait took (for the report only).
async fn connections_within_window(counter: &Connections) -> (usize, Duration) {
    let start = std::time::Instant::now();
    let _ = tokio::time::timeout(WINDOW, async {
        loop {
            let changed = counter.changed.notified();
            if counter.connections.load(Ordering::SeqCst) >= STORM {
                return;
            }
            changed.await;
        }
    })
    .await;
    (counter.connections.load(Ordering::SeqCst), start.elapsed())
}

#[tokio::test]
async fn round_robin_does_not_reconnect_in_a_tight_loop_to_a_server_that_goaways_at_once() {
    let (addr, counter) = goaway_at_once_server().await;
    let ch = Channel::builder(format!("ipv4:{addr}"))
        .service_config_lookup(false)
        .default_service_config(r#"{"loadBalancingConfig":[{"round_robin":{}}]}"#)
        .build()
        .expect("channel");
    ch.connect();
    let (made, took) = connections_within_window(&counter).await;
    let state = ch.state();
    assert!(
        made <= ALLOWED,
        "{made} connections in {took:?} (state now {state:?}): no backoff between connection attempts"
    );
}

/// pick_first with a call waiting: the channel goes IDLE after each connection, the waiting call makes it
/// leave IDLE at once, and the call (fail-fast) never fails UNAVAILABLE: it waits until its deadline while
/// the channel reconnects.
#[tokio::test]
async fn pick_first_with_a_waiting_call_does_not_reconnect_in_a_tight_loop() {
    let (addr, counter) = goaway_at_once_server().await;
    let ch = Channel::builder(format!("ipv4:{addr}"))
        .service_config_lookup(false)
        .build()
        .expect("channel");
    let call = tokio::spawn({
        let ch = ch.clone();
        async move {
            ch.unary_raw(
                "/storm.Svc/Call",
                Request::new(Bytes::new()).with_timeout(WINDOW + Duration::from_secs(1)),
            )
            .await
        }
    });
    let (made, took) = connections_within_window(&counter).await;
    let state = ch.state();
    call.abort();
    assert!(
        made <= ALLOWED,
        "{made} connections in {took:?} (state now {state:?}) while one call waits"
    );
}

/// The fail-fast call itself: against a server that refuses every connection this way, it should fail
/// UNAVAILABLE (the channel cannot get a usable connection), not wait out its whole deadline.
#[tokio::test]
async fn a_fail_fast_call_to_a_server_that_goaways_every_connection_fails_unavailable_naming_the_goaway(
) {
    let (addr, counter) = goaway_at_once_server().await;
    let ch = Channel::builder(format!("ipv4:{addr}"))
        .service_config_lookup(false)
        .build()
        .expect("channel");
    let result = tokio::time::timeout(
        Duration::from_secs(20),
        ch.unary_raw(
            "/storm.Svc/Call",
            Request::new(Bytes::new()).with_timeout(Duration::from_secs(5)),
        ),
    )
    .await
    .expect("no hang");
    let status = result.expect_err("no connection is usable");
    assert!(status.message().contains("GOAWAY"), "{status}");
    assert_eq!(
        status.code(),
        Code::Unavailable,
        "{status:?} (channel state {:?}, {} connections made)",
        ch.state(),
        counter.connections.load(Ordering::SeqCst)
    );
}

// ---- On the paused clock, against the scriptable h2 server -----------------------------------------------

/// After a graceful GOAWAY (A9: 2^31-1, PING, then the real id) the old connection keeps serving its
/// open stream while h2 refuses new ones: a new call does not wait for the old stream to end, it goes out on
/// a new connection (PROTOCOL-HTTP2 §GOAWAY).
#[tokio::test(start_paused = true)]
async fn a_graceful_goaway_does_not_strand_new_calls_while_an_old_stream_lives() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            if s.path == "/t.S/Hold" {
                let _ = s.headers();
                s.wait_reset().await;
            } else if s.read_to_end().await.is_ok() {
                s.ok(b"fresh");
            }
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), "{}");
    let outcome = tokio::time::timeout(GUARD, async {
        let (_tx, mut rx) = ch
            .streaming_raw("/t.S/Hold", Request::new(()))
            .await
            .expect("start");
        rx.headers().await.expect("held call is up");
        server.goaway();
        settle(Duration::from_millis(200)).await;
        let r = tokio::time::timeout(
            Duration::from_secs(30),
            ch.unary_raw("/t.S/Unary", Request::new(Bytes::from_static(b"x"))),
        )
        .await;
        drop(rx);
        r
    })
    .await
    .expect("guard");
    let r = outcome
        .expect("a new call after a graceful GOAWAY must not wait for the old stream to end");
    assert_eq!(&r.expect("ok").into_message()[..], b"fresh");
    assert!(server.connections() >= 2, "a new connection");
}

/// GOAWAY on a `unix:` connection while a stream is still open: new calls go on a new connection at once;
/// the old stream completes.
#[tokio::test(start_paused = true)]
async fn unix_goaway_sends_new_calls_to_a_new_connection() {
    let path = socket_path("goaway");
    let release = Arc::new(Notify::new());
    let rel = release.clone();
    let server = H2Server::unix(
        path.clone(),
        defaults,
        handler(move |mut s: Stream| {
            let rel = rel.clone();
            async move {
                if s.read_to_end().await.is_err() {
                    return;
                }
                if s.path == "/t.S/Hold" {
                    rel.notified().await;
                }
                s.ok(b"ok");
            }
        }),
    );
    let ch = channel_with_config(
        &server.target(),
        retry(3, &["UNAVAILABLE"]).service(SVC).max_backoff("10s"),
    );
    let held = tokio::spawn({
        let ch = ch.clone();
        async move { ch.unary_raw("/t.S/Hold", Request::new(Bytes::new())).await }
    });
    eventually_every(SETTLE_STEP, "held stream open", || {
        server.opens().len() == 1
    })
    .await;
    server.goaway();
    settle(Duration::from_millis(100)).await;
    for _ in 0..3 {
        guarded(
            "after goaway",
            ch.unary_raw("/t.S/Ok", Request::new(Bytes::new())),
        )
        .await
        .expect("a new connection");
    }
    let conns: Vec<usize> = server.opens().iter().map(|o| o.conn).collect();
    assert_eq!(conns, vec![1, 2, 2, 2]);
    release.notify_waiters();
    release.notify_one();
    guarded("held", held)
        .await
        .expect("join")
        .expect("the old stream ran to completion");
    let _ = std::fs::remove_file(&path);
}
