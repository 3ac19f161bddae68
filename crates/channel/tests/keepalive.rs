//! Client keepalive (gRFC A8) over real sockets, on tokio's paused clock: a server that stops answering with
//! its socket open is found out by an unanswered PING; without calls (and without
//! `keepalive_permit_without_calls`) no PING is sent.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, ConnectivityState, Request};
use support::h2_server::answer;
use tokio::time::Instant;

const FREEZE: &str = "/ka.Svc/Freeze";
const UNARY: &str = "/ka.Svc/Unary";

/// A server whose connection stops being driven (no frame read or written, PINGs unanswered, the socket
/// open) once a call to `FREEZE` arrives, or once told to freeze.
async fn server(freeze_now: Arc<tokio::sync::Notify>) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let freeze_now = freeze_now.clone();
            tokio::spawn(async move {
                let mut conn: h2::server::Connection<_, Bytes> =
                    h2::server::handshake(tcp).await.expect("handshake");
                let frozen = loop {
                    tokio::select! {
                        accepted = conn.accept() => {
                            let Some(Ok((req, mut respond))) = accepted else { return };
                            if req.uri().path() == FREEZE {
                                break Some(respond);
                            }
                            answer(&mut respond, b"ok");
                        }
                        () = freeze_now.notified() => break None,
                    }
                };
                // Keep the socket open and never drive the connection again.
                let _frozen = (conn, frozen);
                std::future::pending::<()>().await;
            });
        }
    });
    (addr, connections)
}

async fn unary(ch: &Channel, path: &str) -> Result<Bytes, grpc_channel::Status> {
    ch.unary_raw(path, Request::new(Bytes::new()))
        .await
        .map(|r| r.into_message())
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_ping_closes_the_connection_fails_its_calls_and_the_channel_reconnects() {
    let (addr, connections) = server(Arc::new(tokio::sync::Notify::new())).await;
    let ch = Channel::builder(format!("ipv4:{addr}"))
        .keepalive_time(Duration::from_secs(10))
        .keepalive_timeout(Duration::from_secs(5))
        .build()
        .expect("channel");
    assert_eq!(&unary(&ch, UNARY).await.expect("first call")[..], b"ok");
    let start = Instant::now();
    // No deadline: only keepalive can end this call.
    let status = tokio::time::timeout(Duration::from_secs(600), unary(&ch, FREEZE))
        .await
        .expect("keepalive must end a call to a server that stopped answering")
        .expect_err("the connection was closed");
    let elapsed = start.elapsed();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        elapsed >= Duration::from_secs(14) && elapsed <= Duration::from_millis(15_100),
        "a PING 10 s after the last frame, unanswered for 5 s: failed after {elapsed:?}"
    );
    // The channel reconnects and serves again.
    assert_eq!(
        &unary(&ch, UNARY).await.expect("after reconnecting")[..],
        b"ok"
    );
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn without_calls_no_ping_goes_out_unless_permitted() {
    for permit in [false, true] {
        let freeze = Arc::new(tokio::sync::Notify::new());
        let (addr, _) = server(freeze.clone()).await;
        let ch = Channel::builder(format!("ipv4:{addr}"))
            .keepalive_time(Duration::from_secs(10))
            .keepalive_timeout(Duration::from_secs(5))
            .keepalive_permit_without_calls(permit)
            .build()
            .expect("channel");
        assert_eq!(&unary(&ch, UNARY).await.expect("call")[..], b"ok");
        assert_eq!(ch.state(), ConnectivityState::Ready);
        freeze.notify_one();
        // A minute without calls: an idle connection is only pinged when permitted.
        tokio::time::sleep(Duration::from_secs(60)).await;
        let state = ch.state();
        if permit {
            assert_ne!(
                state,
                ConnectivityState::Ready,
                "the unanswered PING closed the connection"
            );
        } else {
            assert_eq!(state, ConnectivityState::Ready, "no PING without calls");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn keepalive_is_off_by_default() {
    let (addr, _) = server(Arc::new(tokio::sync::Notify::new())).await;
    let ch = Channel::new(format!("ipv4:{addr}")).expect("channel");
    assert_eq!(&unary(&ch, UNARY).await.expect("call")[..], b"ok");
    // Without keepalive, a frozen server keeps the call waiting (an hour here; a deadline would end it).
    let waited = tokio::time::timeout(Duration::from_secs(3600), unary(&ch, FREEZE)).await;
    assert!(
        waited.is_err(),
        "nothing ends the call without keepalive or a deadline"
    );
}
