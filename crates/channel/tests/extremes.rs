//! User-given values at their extremes: every duration saturates (a huge value means "never"), and
//! `connect_timeout` bounds each connection attempt on every kind of target.

mod support;

use std::time::Duration;

use grpc_channel::{Channel, ConnectivityState, Request};
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use support::interop_server;
use tokio::time::Instant;

async fn unary_ok(ch: &Channel, timeout: Option<Duration>) {
    let mut req = Request::new(SimpleRequest {
        response_size: 3,
        ..Default::default()
    });
    if let Some(t) = timeout {
        req = req.with_timeout(t);
    }
    let r = tokio::time::timeout(
        Duration::from_secs(60),
        ch.unary::<_, SimpleResponse>(paths::UNARY_CALL, req),
    )
    .await
    .expect("no hang")
    .expect("call");
    assert_eq!(r.message().payload.as_ref().map(|p| p.body.len()), Some(3));
}

#[tokio::test(start_paused = true)]
async fn duration_max_everywhere_means_never_and_panics_nothing() {
    let addr = interop_server().await;
    let ch = Channel::builder(format!("ipv4:{addr}"))
        .idle_timeout(Duration::MAX)
        .connect_timeout(Duration::MAX)
        .build()
        .expect("channel");
    unary_ok(&ch, Some(Duration::MAX)).await;
    // The control plane survived arming its idle timer: an hour later the channel is still READY and serves.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(ch.state(), ConnectivityState::Ready);
    unary_ok(&ch, Some(Duration::from_secs(u64::MAX))).await;
    unary_ok(&ch, None).await;
}

#[tokio::test]
async fn duration_max_on_a_unix_target() {
    let dir = std::env::temp_dir().join(format!("grpc-channel-extremes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("interop.sock");
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).expect("bind unix socket");
    tokio::spawn(interop::server::serve_unix(listener));
    let ch = Channel::builder(format!("unix:{}", path.display()))
        .idle_timeout(Duration::MAX)
        .connect_timeout(Duration::MAX)
        .build()
        .expect("channel");
    unary_ok(&ch, Some(Duration::MAX)).await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(start_paused = true)]
async fn connect_timeout_bounds_each_attempt_on_a_tcp_target() {
    // A server that accepts TCP and then says nothing: the HTTP/2 handshake never completes.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    for (timeout, want) in [(Duration::from_secs(3), 3), (Duration::from_secs(45), 45)] {
        let ch = Channel::builder(format!("ipv4:{addr}"))
            .connect_timeout(timeout)
            .build()
            .expect("channel");
        let start = Instant::now();
        ch.connect();
        let mut state = ch.state();
        while state != ConnectivityState::TransientFailure {
            state = ch
                .wait_for_state_change(state, start + Duration::from_secs(600))
                .await;
        }
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_secs(want)
                && elapsed < Duration::from_secs(want) + Duration::from_millis(100),
            "connect_timeout {timeout:?}: the attempt failed after {elapsed:?}"
        );
    }
}
