//! Client keepalive (gRFC A8) over real sockets, on tokio's paused clock: a server that stops answering with
//! its socket open is found out by an unanswered PING; without calls (and without
//! `keepalive_permit_without_calls`) no PING is sent, unless a health Watch stream (A17) is open: that is a
//! stream too.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, ConnectivityState, Request};
use interop_proto::grpc_health_v1::health_check_response::ServingStatus;
use interop_proto::grpc_health_v1::HealthCheckResponse;
use prost::Message;
use support::frames::grpc_message;
use support::h2_server::{answer, response_head};
use support::health_watch::WATCH;
use tokio::sync::watch;
use tokio::time::Instant;

const FREEZE: &str = "/ka.Svc/Freeze";
const UNARY: &str = "/ka.Svc/Unary";

/// Resolves once the server is told to freeze (never if it cannot be told any more).
async fn frozen(mut freeze: watch::Receiver<bool>) {
    if freeze.wait_for(|frozen| *frozen).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A server whose connection stops being driven (no frame read or written, PINGs unanswered, the socket
/// open) once a call to `FREEZE` arrives, or once told to freeze (`freeze` turns true); a connection
/// accepted after that is never driven at all. A health Watch is answered SERVING and held open.
async fn server(freeze: watch::Receiver<bool>) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let freeze = freeze.clone();
            tokio::spawn(async move {
                if *freeze.borrow() {
                    let _frozen = tcp;
                    return std::future::pending::<()>().await;
                }
                let mut conn: h2::server::Connection<_, Bytes> =
                    h2::server::handshake(tcp).await.expect("handshake");
                let mut watches = Vec::new();
                let frozen = loop {
                    tokio::select! {
                        accepted = conn.accept() => {
                            let Some(Ok((req, mut respond))) = accepted else { return };
                            match req.uri().path() {
                                FREEZE => break Some(respond),
                                WATCH => {
                                    let serving = HealthCheckResponse {
                                        status: ServingStatus::Serving as i32,
                                    };
                                    if let Ok(mut send) = respond.send_response(response_head(), false) {
                                        let _ = send.send_data(grpc_message(&serving.encode_to_vec()), false);
                                        watches.push(send);
                                    }
                                }
                                _ => answer(&mut respond, b"ok"),
                            }
                        }
                        () = frozen(freeze.clone()) => break None,
                    }
                };
                // Keep the socket open and never drive the connection again.
                let _frozen = (conn, frozen, watches);
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
    let (addr, connections) = server(watch::channel(false).1).await;
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
        let (freeze, frozen) = watch::channel(false);
        let (addr, _) = server(frozen).await;
        let ch = Channel::builder(format!("ipv4:{addr}"))
            .keepalive_time(Duration::from_secs(10))
            .keepalive_timeout(Duration::from_secs(5))
            .keepalive_permit_without_calls(permit)
            .build()
            .expect("channel");
        assert_eq!(&unary(&ch, UNARY).await.expect("call")[..], b"ok");
        assert_eq!(ch.state(), ConnectivityState::Ready);
        freeze.send_replace(true);
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
    let (addr, _) = server(watch::channel(false).1).await;
    let ch = Channel::new(format!("ipv4:{addr}")).expect("channel");
    assert_eq!(&unary(&ch, UNARY).await.expect("call")[..], b"ok");
    // Without keepalive, a frozen server keeps the call waiting (an hour here; a deadline would end it).
    let waited = tokio::time::timeout(Duration::from_secs(3600), unary(&ch, FREEZE)).await;
    assert!(
        waited.is_err(),
        "nothing ends the call without keepalive or a deadline"
    );
}

/// A8 × A17: with no call in flight, the health Watch stream is an open stream, so keepalive pings even
/// without `keepalive_permit_without_calls` (as C-core, which pings while any stream is open): a backend
/// that goes silent is found out by the unanswered PING, its connection closed and its subchannel out of
/// READY, instead of keeping its last SERVING until calls time out there.
#[tokio::test(start_paused = true)]
async fn the_health_watch_stream_keeps_keepalive_pinging_without_calls() {
    let (freeze, frozen) = watch::channel(false);
    let (addr, connections) = server(frozen).await;
    let ch = Channel::builder(format!("ipv4:{addr}"))
        .default_service_config(
            r#"{"healthCheckConfig":{"serviceName":""},"loadBalancingConfig":[{"round_robin":{}}]}"#,
        )
        .service_config_lookup(false)
        .keepalive_time(Duration::from_secs(10))
        .keepalive_timeout(Duration::from_secs(5))
        .keepalive_permit_without_calls(false)
        .build()
        .expect("channel");
    ch.connect();
    support::guards::eventually("READY once the Watch answers SERVING", || {
        ch.state() == ConnectivityState::Ready
    })
    .await;
    // No call ever: only the Watch is open. The server goes silent.
    freeze.send_replace(true);
    // A PING at most 10 s after the server's last frame, unanswered for 5 s.
    support::guards::settle(Duration::from_secs(16)).await;
    assert_ne!(
        ch.state(),
        ConnectivityState::Ready,
        "the unanswered PING closed the connection"
    );
    assert!(
        connections.load(Ordering::SeqCst) >= 2,
        "the subchannel reconnects (to a server that no longer answers)"
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_ne!(ch.state(), ConnectivityState::Ready);
}
