//! The one I/O layer keeps the behaviour of the paths it replaced, against the scriptable h2 server and plain
//! loopback sockets on tokio's paused clock: a `send` given up while the call is full sends nothing, a
//! message partly written under flow control completes before the next; the hand-over writes queued messages in order
//! with one END_STREAM; a TCP connection attempt that times out names the TCP connection; a dropped channel
//! closes its connections; a channel closed before first use opens none.

use grpc_test_support as support;

use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Request};
use support::channel_with_config;
use support::config::retry;
use support::frames::payloads;
use support::guards::guarded;
use support::h2_server::{
    defaults, handler, reads_then_answers, small_window, H2Server, HeadersAt,
    SMALL_WINDOW as WINDOW, SVC,
};
use support::shapes::start_bidi;

/// A committed bidi call to a server with a 1000-byte stream window that reads nothing for 5 s, then reads
/// the whole request and answers `done`.
async fn committed_slow_reader() -> (
    H2Server,
    Channel,
    grpc_channel::RequestSender<Bytes>,
    grpc_channel::Streaming<Bytes>,
) {
    // Reads nothing until the client has given up on a message.
    let server = H2Server::tcp(
        small_window,
        reads_then_answers(HeadersAt::Start, Duration::from_secs(5)),
    )
    .await;
    let ch = channel_with_config(&server.target(), "{}");
    let (tx, mut rx) = start_bidi(&ch).await;
    guarded("headers", rx.headers())
        .await
        .expect("response headers: the call is committed");
    (server, ch, tx, rx)
}

/// After commit, a send waits while 64 KiB of messages wait for flow control; a send that the application
/// gives up on meanwhile (a timeout around it) sent nothing: the server gets the messages sent before and
/// after it, in order, not the abandoned one.
#[tokio::test(start_paused = true)]
async fn a_send_given_up_while_the_call_is_full_is_not_sent_later() {
    let (server, _ch, mut tx, mut rx) = committed_slow_reader().await;
    let a = vec![b'a'; WINDOW - 5];
    guarded("A", tx.send(Bytes::from(a)))
        .await
        .expect("A fills the stream window");
    // 63 KiB queued behind the closed window: the sender is ahead by almost the limit.
    guarded("F", tx.send(Bytes::from(vec![b'f'; 63 << 10])))
        .await
        .expect("F is queued");
    let gave_up = tokio::time::timeout(
        Duration::from_secs(1),
        tx.send(Bytes::from(vec![b'b'; 2 << 10])),
    )
    .await;
    assert!(gave_up.is_err(), "B waits for room: {gave_up:?}");
    guarded("C", tx.send(Bytes::from_static(b"cccc")))
        .await
        .expect("C");
    guarded("finish", tx.finish()).await.expect("finish");
    let reply = guarded("reply", rx.message()).await.expect("reply");
    assert_eq!(reply.as_deref(), Some(&b"done"[..]));
    assert!(guarded("end", rx.message()).await.expect("OK").is_none());
    let (body, ends) = server.body_of_id(1);
    assert_eq!(ends, 1, "one END_STREAM");
    let got: Vec<String> = payloads(&body)
        .iter()
        .map(|p| format!("{}x{}", p[0] as char, p.len()))
        .collect();
    assert_eq!(
        got,
        ["ax995", "fx64512", "cx4"],
        "the server got the message whose send was given up"
    );
}

/// A TCP connection attempt that times out while the TCP connection itself is still being made says so:
/// "connection attempt timed out (in the TCP connection)", as before the connection path was shared with
/// `unix:` targets. The failure: the phase is now called "the connection".
#[tokio::test(start_paused = true)]
async fn a_tcp_connection_attempt_that_times_out_names_the_tcp_connection() {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    // Backlog 0: one queued connection fills the accept queue, so the kernel drops later SYNs and the
    // channel's connect never completes.
    let listener = socket.listen(0).expect("listen");
    let addr = listener.local_addr().expect("addr");
    let _filler = std::net::TcpStream::connect(addr).expect("filler connection");
    let ch = Channel::builder(format!("ipv4:{addr}"))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .expect("channel");
    let status = guarded(
        "call",
        ch.unary_raw(
            "/t.S/M",
            Request::new(Bytes::new()).with_timeout(Duration::from_secs(10)),
        ),
    )
    .await
    .expect_err("UNAVAILABLE");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let text = format!("{status} / {status:?}");
    assert!(
        text.contains("connection attempt timed out (in the TCP connection)"),
        "{text}"
    );
    drop(listener);
}

/// Before commit the attempt is held back by the 1000-byte stream window and the rest of the messages wait
/// in the inbox; the application half-closes; then the server's headers commit the call: every message
/// arrives once, in order, then one END_STREAM.
#[tokio::test(start_paused = true)]
async fn the_hand_over_writes_queued_inbox_messages_in_order_then_one_end_stream() {
    let server = H2Server::tcp(
        small_window,
        reads_then_answers(HeadersAt::After(Duration::from_secs(5)), Duration::ZERO),
    )
    .await;
    let ch = channel_with_config(&server.target(), retry(3, &["UNAVAILABLE"]).service(SVC));
    let (mut tx, mut rx) = start_bidi(&ch).await;
    let msgs: Vec<Vec<u8>> = (0..10u8).map(|i| vec![b'a' + i; 300]).collect();
    for m in &msgs {
        guarded("send", tx.send(Bytes::from(m.clone())))
            .await
            .expect("send");
    }
    guarded("finish", tx.finish()).await.expect("finish");
    let reply = guarded("reply", rx.message()).await.expect("reply");
    assert_eq!(reply.as_deref(), Some(&b"done"[..]));
    assert!(guarded("end", rx.message()).await.expect("OK").is_none());
    let (body, ends) = server.body_of_id(1);
    assert_eq!(ends, 1, "one END_STREAM");
    assert_eq!(payloads(&body), msgs);
}

/// After commit, a message that flow control lets out only in part completes before the next one: the
/// stream never carries half a message.
#[tokio::test(start_paused = true)]
async fn a_message_partly_written_completes_before_the_next() {
    let (server, _ch, mut tx, mut rx) = committed_slow_reader().await;
    guarded("A", tx.send(Bytes::from(vec![b'a'; 1500])))
        .await
        .expect("A");
    guarded("C", tx.send(Bytes::from_static(b"cccc")))
        .await
        .expect("C");
    drop(tx);
    let reply = guarded("reply", rx.message()).await.expect("reply");
    assert_eq!(reply.as_deref(), Some(&b"done"[..]));
    let (body, ends) = server.body_of_id(1);
    assert_eq!(ends, 1);
    let got: Vec<usize> = payloads(&body).iter().map(Vec::len).collect();
    assert_eq!(got, [1500, 4]);
}

/// Dropping the channel (its calls done) closes its connection, on TCP and on a Unix socket: no control
/// plane is kept alive by a clone.
#[tokio::test(start_paused = true)]
async fn the_connection_closes_once_the_channel_is_gone() {
    for unix in [false, true] {
        let up = handler(|mut stream| async move { stream.ok(b"up") });
        let server = if unix {
            H2Server::unix(support::socket_path("dropped-channel"), defaults, up)
        } else {
            H2Server::tcp(defaults, up).await
        };
        let target = server.target();
        let ch = Channel::new(target.clone()).expect("channel");
        let r = guarded(
            "a call",
            ch.unary_raw(
                "/t.S/M",
                Request::new(Bytes::new()).with_timeout(Duration::from_secs(10)),
            ),
        )
        .await
        .expect("answered");
        assert_eq!(&r.message()[..], b"up");
        drop(r);
        drop(ch);
        support::guards::eventually_every(
            support::guards::SETTLE_STEP,
            &format!("{target}: the connection closes once the channel is gone"),
            || server.closed_connections() >= 1,
        )
        .await;
    }
}

/// A channel closed before its first use stays closed: `connect()` afterwards opens no connection (its state
/// already says SHUTDOWN). Pre-existing for TCP targets (the control plane starts on first use, whatever
/// `close()` said); with issue 20 `unix:` targets do the same.
#[tokio::test(start_paused = true)]
async fn a_channel_closed_before_first_use_opens_no_connection() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let a = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            held.push(tcp);
        }
    });
    let ch = Channel::new(format!("ipv4:{addr}")).expect("channel");
    ch.close();
    ch.connect();
    support::guards::settle(Duration::from_secs(1)).await;
    assert_eq!(ch.state(), grpc_channel::ConnectivityState::Shutdown);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "a closed channel connected to its server"
    );
}
