//! Client keepalive (gRFC A8) over real sockets, on tokio's paused clock: a server that stops answering with
//! its socket open is found out by an unanswered PING; without calls (and without
//! `keepalive_permit_without_calls`) no PING is sent, unless a health Watch stream (A17) is open: that is a
//! stream too.

use grpc_test_support as support;

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
    server_with(freeze, true).await
}

/// [`server`], whose health service answers the Watch SERVING (held open) when `health`, else
/// UNIMPLEMENTED (Trailers-Only: the server has no health service).
async fn server_with(
    freeze: watch::Receiver<bool>,
    health: bool,
) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
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
                                WATCH if !health => {
                                    let mut head = response_head();
                                    head.headers_mut().insert("grpc-status", http::HeaderValue::from_static("12"));
                                    let _ = respond.send_response(head, true);
                                }
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

// ---- Review probes: the Watch's count ends with the Watch, per connection --------------------------------

const RR_HEALTH: &str =
    r#"{"healthCheckConfig":{"serviceName":""},"loadBalancingConfig":[{"round_robin":{}}]}"#;

/// Two backends under round_robin with health checks: `serving` keeps its Watch open, `unimplemented`
/// ends it at once (UNIMPLEMENTED: used as healthy, no stream left open). Without calls and without
/// `keepalive_permit_without_calls`, only the connection whose Watch is open is pinged: the other, frozen,
/// is never found out (its one connection is kept), while the first, frozen in turn, is.
#[tokio::test(start_paused = true)]
async fn only_a_connection_whose_watch_is_open_is_pinged_and_an_ended_watch_stops_the_pings() {
    let (freeze_open, frozen_open) = watch::channel(false);
    let (freeze_ended, frozen_ended) = watch::channel(false);
    let (open_addr, open_conns) = server_with(frozen_open, true).await;
    let (ended_addr, ended_conns) = server_with(frozen_ended, false).await;
    let ch = Channel::builder(format!("ipv4:{open_addr},{ended_addr}"))
        .default_service_config(RR_HEALTH)
        .service_config_lookup(false)
        .keepalive_time(Duration::from_secs(10))
        .keepalive_timeout(Duration::from_secs(5))
        .build()
        .expect("channel");
    ch.connect();
    support::guards::eventually("READY", || ch.state() == ConnectivityState::Ready).await;
    support::guards::settle(Duration::from_secs(1)).await;
    freeze_ended.send_replace(true);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        ended_conns.load(Ordering::SeqCst),
        1,
        "no PING on the connection whose Watch ended: it is kept"
    );
    assert_eq!(open_conns.load(Ordering::SeqCst), 1);
    assert_eq!(ch.state(), ConnectivityState::Ready);

    freeze_open.send_replace(true);
    support::guards::settle(Duration::from_secs(16)).await;
    assert!(
        open_conns.load(Ordering::SeqCst) >= 2,
        "the connection with its Watch open is pinged, found out and replaced"
    );
    assert_eq!(ended_conns.load(Ordering::SeqCst), 1);
}

/// `health_checks(false)`: no Watch, so no stream and no PING without calls, whatever the config asks.
#[tokio::test(start_paused = true)]
async fn with_health_checks_off_an_idle_connection_is_not_pinged() {
    let (freeze, frozen) = watch::channel(false);
    let (addr, connections) = server(frozen).await;
    let ch = Channel::builder(format!("ipv4:{addr}"))
        .default_service_config(RR_HEALTH)
        .service_config_lookup(false)
        .health_checks(false)
        .keepalive_time(Duration::from_secs(10))
        .keepalive_timeout(Duration::from_secs(5))
        .build()
        .expect("channel");
    assert_eq!(&unary(&ch, UNARY).await.expect("call")[..], b"ok");
    freeze.send_replace(true);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(ch.state(), ConnectivityState::Ready);
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

/// An open Watch, pinged and answered, still lets the channel go IDLE after its idle timeout (the Watch
/// and the PINGs are not calls).
#[tokio::test(start_paused = true)]
async fn an_open_watch_and_its_pings_do_not_keep_the_channel_out_of_idle() {
    let (_freeze, frozen) = watch::channel(false);
    let (addr, _) = server(frozen).await;
    let ch = Channel::builder(format!("ipv4:{addr}"))
        .default_service_config(RR_HEALTH)
        .service_config_lookup(false)
        .keepalive_time(Duration::from_secs(10))
        .keepalive_timeout(Duration::from_secs(5))
        .idle_timeout(Duration::from_secs(60))
        .build()
        .expect("channel");
    assert_eq!(&unary(&ch, UNARY).await.expect("call")[..], b"ok");
    tokio::time::sleep(Duration::from_secs(45)).await;
    assert_eq!(ch.state(), ConnectivityState::Ready, "pinged and answered");
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(ch.state(), ConnectivityState::Idle);
}
