//! User-given values at their extremes: every duration saturates (a huge value means "never"), in the API and
//! in a service config, and `connect_timeout` bounds each connection attempt on every kind of target.

use grpc_test_support as support;

use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, ConnectivityState, Request};
use interop::faulty::methods;
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use support::config::{hedging, retry};
use support::guards::{GUARD, NO_HANG};
use support::h2_server::{defaults, handler, H2Server, Stream, SVC};
use support::{channel_with_config, faulty_server, interop_server};
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
    let _ = std::fs::remove_dir(&dir);
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

/// A timeout too large to add to now (`Duration::MAX`) or merely enormous does not panic, for unary
/// and streaming calls.
#[tokio::test(start_paused = true)]
async fn huge_timeouts_do_not_panic() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_ok() {
                s.ok(b"ok");
            }
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), retry(2, &["UNAVAILABLE"]).service(SVC));
    let outcome = tokio::time::timeout(GUARD, async {
        for t in [
            Duration::MAX,
            Duration::from_secs(u64::MAX / 2),
            Duration::from_secs(1 << 40),
        ] {
            let r = ch
                .unary_raw("/t.S/Unary", Request::new(Bytes::new()).with_timeout(t))
                .await
                .expect("unary");
            assert_eq!(&r.into_message()[..], b"ok");
            let (tx, mut rx) = ch
                .streaming_raw("/t.S/Bidi", Request::new(()).with_timeout(t))
                .await
                .expect("streaming");
            drop(tx);
            assert!(rx.message().await.expect("reply").is_some());
        }
    })
    .await;
    assert!(outcome.is_ok());
}

/// Extreme durations in a service config (perAttemptRecvTimeout and hedgingDelay at proto3's maximum,
/// 315576000000s) neither panic nor outlive the call's deadline; "0s" is rejected by the parser (the channel
/// falls back to no config: build fails or the call runs without policy).
#[tokio::test(start_paused = true)]
async fn extreme_per_attempt_recv_timeout_and_hedging_delay_neither_panic_nor_hang() {
    let server = faulty_server().await;
    let target = format!("ipv4:{}", server.addr);
    // proto3's largest Duration.
    const MAX: &str = "315576000000s";
    let retrying = retry(3, &[]).per_attempt_recv_timeout(MAX);
    let hedged = hedging(3, MAX).per_attempt_recv_timeout(MAX);
    for (i, config) in [retrying, hedged].into_iter().enumerate() {
        let ch = Channel::builder(&target)
            .service_config_lookup(false)
            .default_service_config(config)
            .build()
            .expect("channel");
        let mut req = Request::new(Bytes::new()).with_timeout(Duration::from_secs(2));
        req.metadata_mut()
            .append("x-test-key", &format!("extreme-{i}"))
            .expect("key");
        req.metadata_mut()
            .append("x-hang-attempts", "1,2,3")
            .expect("hang");
        let err = tokio::time::timeout(NO_HANG, ch.unary_raw(methods::FLAKY, req))
            .await
            .expect("no hang")
            .expect_err("hangs until the deadline");
        assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    }
    let zero = retry(3, &[]).per_attempt_recv_timeout("0s");
    assert!(Channel::builder(&target)
        .service_config_lookup(false)
        .default_service_config(zero)
        .build()
        .is_err());
}
