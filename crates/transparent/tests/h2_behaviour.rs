//! The h2 behaviours `grpc-transparent`'s rules rest on, played over real loopback sockets with h2's client
//! (the one the channel uses). Each test fails if h2 changes the behaviour its rule relies on.

// These tests do I/O over real sockets in the channel's place; clippy.toml bans it in the library.
#![allow(clippy::disallowed_methods)]

use std::future::poll_fn;
use std::time::Duration;

use bytes::Bytes;
use grpc_base::FailurePlace;
use grpc_transparent::{classify, is_user_error, Progress};
use h2::client::SendRequest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const GUARD: Duration = Duration::from_secs(10);

async fn client(addr: std::net::SocketAddr) -> SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (send, conn) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

fn request() -> http::Request<()> {
    http::Request::post("http://test.local/pkg.Svc/Method")
        .body(())
        .expect("request")
}

async fn listener() -> (TcpListener, std::net::SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    (l, addr)
}

/// Serves one connection with h2's server, handing each request to `each`.
async fn h2_server<F>(max_concurrent: Option<u32>, each: F) -> std::net::SocketAddr
where
    F: Fn(
            http::Request<h2::RecvStream>,
            h2::server::SendResponse<Bytes>,
            &mut h2::server::Connection<TcpStream, Bytes>,
        ) + Send
        + 'static,
{
    let (l, addr) = listener().await;
    tokio::spawn(async move {
        let (tcp, _) = l.accept().await.expect("accept");
        let mut builder = h2::server::Builder::new();
        if let Some(n) = max_concurrent {
            builder.max_concurrent_streams(n);
        }
        let mut conn = builder.handshake(tcp).await.expect("server handshake");
        let mut held = Vec::new();
        while let Some(Ok((req, respond))) = conn.accept().await {
            each(req, respond, &mut conn);
            held.push(());
        }
    });
    addr
}

/// A server written frame by frame, for what h2's server API cannot send: after the client's first
/// HEADERS frame on stream S, a GOAWAY(NO_ERROR) with last-stream-id `last(S)`, then (if `close`) EOF.
async fn raw_goaway_server(last: fn(u32) -> u32, close: bool) -> std::net::SocketAddr {
    let (l, addr) = listener().await;
    tokio::spawn(async move {
        let (mut tcp, _) = l.accept().await.expect("accept");
        let mut preface = [0u8; 24];
        tcp.read_exact(&mut preface).await.expect("preface");
        // Our SETTINGS (empty), then frames from the client.
        tcp.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0])
            .await
            .expect("settings");
        loop {
            let mut head = [0u8; 9];
            if tcp.read_exact(&mut head).await.is_err() {
                return;
            }
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let mut payload = vec![0u8; len];
            tcp.read_exact(&mut payload).await.expect("payload");
            if kind == 4 && flags & 1 == 0 {
                tcp.write_all(&[0, 0, 0, 4, 1, 0, 0, 0, 0])
                    .await
                    .expect("ack");
            }
            if kind == 1 {
                let mut goaway = vec![0, 0, 8, 7, 0, 0, 0, 0, 0];
                goaway.extend_from_slice(&last(stream).to_be_bytes());
                goaway.extend_from_slice(&0u32.to_be_bytes());
                tcp.write_all(&goaway).await.expect("goaway");
                if close {
                    return;
                }
            }
        }
    });
    addr
}

#[tokio::test]
async fn refused_stream_arrives_as_a_remote_reset_and_is_unprocessed() {
    let addr = h2_server(None, |_, mut respond, _| {
        respond.send_reset(h2::Reason::REFUSED_STREAM)
    })
    .await;
    let mut send = client(addr).await.ready().await.expect("ready");
    let (response, _stream) = send.send_request(request(), true).expect("send");
    let err = tokio::time::timeout(GUARD, response)
        .await
        .expect("guard")
        .expect_err("refused");
    assert!(err.is_reset() && err.is_remote(), "{err:?}");
    assert_eq!(err.reason(), Some(h2::Reason::REFUSED_STREAM));
    assert_eq!(classify(&err, Progress::Opened), FailurePlace::Unprocessed);
    // Any other reset reason from the server is processed.
    let addr = h2_server(None, |_, mut respond, _| {
        respond.send_reset(h2::Reason::INTERNAL_ERROR)
    })
    .await;
    let mut send = client(addr).await.ready().await.expect("ready");
    let (response, _stream) = send.send_request(request(), true).expect("send");
    let err = response.await.expect_err("reset");
    assert_eq!(classify(&err, Progress::Opened), FailurePlace::Processed);
}

#[tokio::test]
async fn a_goaway_below_the_stream_fails_it_as_unprocessed_and_later_requests_never_leave() {
    let addr = raw_goaway_server(|_| 0, false).await;
    let mut send = client(addr).await.ready().await.expect("ready");
    let (response, _stream) = send.send_request(request(), false).expect("send");
    let err = tokio::time::timeout(GUARD, response)
        .await
        .expect("guard")
        .expect_err("goaway");
    assert!(err.is_go_away() && err.is_remote(), "{err:?}");
    assert_eq!(classify(&err, Progress::Opened), FailurePlace::Unprocessed);
    // h2 keeps the GOAWAY as the connection's error: no later request gets a stream.
    let err = match send.clone().ready().await {
        Err(e) => e,
        Ok(mut s) => s
            .send_request(request(), true)
            .expect_err("refused after GOAWAY"),
    };
    assert!(err.is_go_away(), "{err:?}");
    assert_eq!(classify(&err, Progress::Opening), FailurePlace::NotSent);
}

#[tokio::test]
async fn a_stream_covered_by_the_goaway_fails_as_processed_when_the_connection_ends() {
    // GOAWAY(last-stream-id = the stream), then EOF: the stream was (maybe) processed.
    let addr = raw_goaway_server(|s| s, true).await;
    let mut send = client(addr).await.ready().await.expect("ready");
    let (response, _stream) = send.send_request(request(), false).expect("send");
    let err = tokio::time::timeout(GUARD, response)
        .await
        .expect("guard")
        .expect_err("connection closed");
    assert!(
        !err.is_go_away(),
        "h2 must not report the covered stream with the GOAWAY: {err:?}"
    );
    assert_eq!(classify(&err, Progress::Opened), FailurePlace::Processed);
}

#[tokio::test]
async fn a_stream_queued_locally_behind_max_concurrent_streams_and_cut_off_by_goaway_never_left() {
    let (hold_tx, mut hold_rx) = tokio::sync::mpsc::unbounded_channel();
    let addr = h2_server(Some(1), move |req, respond, conn| {
        if req.uri().path() == "/pkg.Svc/Hold" {
            // Keep the stream open; the next stream must wait in the client's local queue.
            let _ = hold_tx.send(respond);
            conn.abrupt_shutdown(h2::Reason::NO_ERROR);
        } else {
            let mut respond = respond;
            let _ = respond.send_response(http::Response::new(()), true);
        }
    })
    .await;
    let mut send = client(addr).await.ready().await.expect("ready");
    // A first exchange makes sure the server's SETTINGS (MAX_CONCURRENT_STREAMS = 1) arrived.
    let (response, _s) = send.send_request(request(), true).expect("first");
    response.await.expect("first response");
    let mut send = send.ready().await.expect("ready");
    let hold = http::Request::post("http://test.local/pkg.Svc/Hold")
        .body(())
        .expect("request");
    let (_held_response, _held) = send.send_request(hold, false).expect("hold");
    let mut send = send
        .ready()
        .await
        .expect("a slot for the next request's handle");
    let (queued, _queued_stream) = send.send_request(request(), true).expect("queued");
    // The opening handle is not ready while its stream waits locally.
    let pending = poll_fn(|cx| std::task::Poll::Ready(send.poll_ready(cx).is_pending())).await;
    assert!(pending, "h2 must hold the second stream in its local queue");
    let _held_respond = hold_rx.recv().await;
    let err = tokio::time::timeout(GUARD, queued)
        .await
        .expect("guard")
        .expect_err("cut off by GOAWAY");
    assert!(err.is_go_away() && err.is_remote(), "{err:?}");
    assert_eq!(
        classify(&err, Progress::QueuedLocally),
        FailurePlace::NotSent
    );
}

#[tokio::test]
async fn a_request_h2_refuses_to_encode_is_a_local_error() {
    let addr = h2_server(None, |_, mut respond, _| {
        let _ = respond.send_response(http::Response::new(()), true);
    })
    .await;
    let mut send = client(addr).await.ready().await.expect("ready");
    for (name, value) in [
        ("connection", "close"),
        ("transfer-encoding", "chunked"),
        ("te", "gzip"),
    ] {
        let mut req = request();
        req.headers_mut().insert(
            http::HeaderName::from_static(name),
            http::HeaderValue::from_static(value),
        );
        let err = send.send_request(req, true).expect_err("refused by h2");
        assert!(is_user_error(&err), "{name}: {err:?}");
        assert_eq!(
            classify(&err, Progress::Opening),
            FailurePlace::Local,
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_closed_connection_fails_new_requests_before_anything_is_written() {
    let (l, addr) = listener().await;
    tokio::spawn(async move {
        let (tcp, _) = l.accept().await.expect("accept");
        let mut conn: h2::server::Connection<_, Bytes> =
            h2::server::handshake(tcp).await.expect("handshake");
        // Serve nothing; close at once.
        conn.abrupt_shutdown(h2::Reason::NO_ERROR);
        while conn.accept().await.is_some() {}
    });
    let send = client(addr).await;
    let err = tokio::time::timeout(GUARD, async {
        loop {
            match send.clone().ready().await {
                Err(e) => return e,
                Ok(mut s) => {
                    if let Err(e) = s.send_request(request(), true) {
                        return e;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("guard");
    assert!(!is_user_error(&err), "{err:?}");
    assert_eq!(classify(&err, Progress::Opening), FailurePlace::NotSent);
}

#[tokio::test]
async fn a_write_to_a_stream_the_server_reset_is_a_user_error_and_poll_reset_has_the_reason() {
    let addr = h2_server(None, |_, mut respond, _| {
        respond.send_reset(h2::Reason::REFUSED_STREAM)
    })
    .await;
    let mut send = client(addr).await.ready().await.expect("ready");
    let (response, mut stream) = send.send_request(request(), false).expect("send");
    let _ = tokio::time::timeout(GUARD, response).await.expect("guard");
    let err = stream
        .send_data(Bytes::from_static(b"late"), false)
        .expect_err("the stream is gone");
    // h2 reports the write as the caller's mistake ...
    assert!(is_user_error(&err), "{err:?}");
    // ... so the channel asks the stream for the server's reason instead.
    let reason = poll_fn(|cx| stream.poll_reset(cx)).await.expect("reset");
    assert_eq!(reason, h2::Reason::REFUSED_STREAM);
    assert_eq!(
        grpc_transparent::classify_reset(reason, Progress::Opened),
        FailurePlace::Unprocessed
    );
    assert_eq!(
        grpc_transparent::classify_reset(h2::Reason::INTERNAL_ERROR, Progress::Opened),
        FailurePlace::Processed
    );
}
