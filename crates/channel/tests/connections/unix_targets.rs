//! `unix:` targets under a retry or hedging policy, against the scriptable h2 server and the fault-injecting
//! server on Unix sockets, on tokio's paused clock: hedges share the one connection; a socket that does not
//! exist yet is a failed pick the policy retries (and a wait-for-ready call waits for); a server restarted on
//! the same path is reached by the next call, also by a call made the instant it restarted.

use grpc_test_support as support;

use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Request};
use h2::Reason;
use http::HeaderValue;
use interop::faulty::{methods, FlakyItem};
use support::config::{hedging, retry, retry_config};
use support::flaky::{attempts, channel_with, flaky_request, one_failing_client_stream};
use support::guards::{eventually_every, guarded, settle, SETTLE_STEP};
use support::h2_server::{defaults, handler, H2Server, Stream, SVC};
use support::shapes::{call_shape, SHAPES};
use support::{channel_with_config, socket_path};

/// Hedging on a `unix:` target: every hedge goes on the one connection; a non-fatal failure sends the next at
/// once; the winner's commit cancels the hung original.
#[tokio::test(start_paused = true)]
async fn unix_hedging_uses_the_one_connection() {
    let path = socket_path("hedging");
    let server = H2Server::unix(
        path.clone(),
        defaults,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_err() {
                return;
            }
            match s.prev() {
                0 => s.wait_reset().await,
                1 => s.trailers_only("14", &[]),
                _ => s.ok(b"third"),
            }
        }),
    );
    let ch = channel_with_config(&server.target(), hedging(3, "0.2s").service(SVC));
    let r = guarded(
        "hedged unary over unix",
        ch.unary_raw(
            "/t.S/Hedge",
            Request::new(Bytes::new()).with_timeout(Duration::from_secs(10)),
        ),
    )
    .await
    .expect("the third attempt answers");
    assert_eq!(&r.message()[..], b"third");
    let opens = server.opens();
    assert_eq!(opens.len(), 3);
    assert!(opens.iter().all(|o| o.conn == 1), "one connection");
    eventually_every(SETTLE_STEP, "the original is cancelled", || {
        server.resets().iter().any(|r| r.reason == Reason::CANCEL)
    })
    .await;
    let _ = std::fs::remove_file(&path);
}

/// A fail-fast call on a `unix:` target whose socket does not exist yet: the failed connection is a failed
/// pick, the policy retries it, and the server that appears meanwhile answers. A wait-for-ready call without a
/// policy waits for it.
#[tokio::test(start_paused = true)]
async fn unix_failed_pick_is_retried_by_policy_and_wait_for_ready_waits() {
    let path = socket_path("late");
    let _ = std::fs::remove_file(&path);
    let target = format!("unix:{}", path.display());
    let ch = channel_with_config(
        &target,
        retry(4, &["UNAVAILABLE"])
            .service(SVC)
            .initial_backoff("1s")
            .max_backoff("10s"),
    );
    let call = tokio::spawn({
        let ch = ch.clone();
        async move {
            ch.unary_raw(
                "/t.S/Ok",
                Request::new(Bytes::new()).with_timeout(Duration::from_secs(30)),
            )
            .await
        }
    });
    let plain = Channel::builder(target.clone())
        .service_config_lookup(false)
        .build()
        .expect("channel");
    let waiting = tokio::spawn({
        let plain = plain.clone();
        async move {
            plain
                .unary_raw(
                    "/t.S/Ok",
                    Request::new(Bytes::new())
                        .with_wait_for_ready(true)
                        .with_timeout(Duration::from_secs(30)),
                )
                .await
        }
    });
    settle(Duration::from_millis(300)).await;
    let server = H2Server::unix(
        path.clone(),
        defaults,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_ok() {
                s.ok(b"up");
            }
        }),
    );
    let r = guarded("policy retry", call)
        .await
        .expect("join")
        .expect("retried once the socket exists");
    assert_eq!(&r.message()[..], b"up");
    let r = guarded("wait-for-ready", waiting)
        .await
        .expect("join")
        .expect("waited for the socket");
    assert_eq!(&r.message()[..], b"up");
    let prevs: Vec<Option<HeaderValue>> = server
        .opens()
        .iter()
        .map(|o| o.headers.get("grpc-previous-rpc-attempts").cloned())
        .collect();
    assert!(prevs.iter().any(Option::is_some), "{prevs:?}");
    let _ = std::fs::remove_file(&path);
}

/// The server on a `unix:` path goes away and a new one starts on the same path: the next call (no policy)
/// reaches the new server on a new connection, for every shape.
#[tokio::test(start_paused = true)]
async fn unix_server_restarted_on_the_same_path_is_reached_by_the_next_call() {
    let path = socket_path("restart");
    let h = || {
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_ok() {
                let item = prost::Message::encode_to_vec(&FlakyItem::default());
                s.ok(&item);
            }
        })
    };
    let first = H2Server::unix(path.clone(), defaults, h());
    let ch = Channel::builder(first.target())
        .service_config_lookup(false)
        .build()
        .expect("channel");
    for shape in SHAPES {
        let s = guarded(
            "first",
            call_shape(&ch, shape, "/t.S/Ok", Duration::from_secs(10)),
        )
        .await;
        assert_eq!(s.code(), Code::Ok, "{shape:?}: {s:?}");
    }
    first.kill();
    settle(Duration::from_millis(100)).await;
    let second = H2Server::unix(path.clone(), defaults, h());
    for shape in SHAPES {
        let s = guarded(
            "second",
            call_shape(&ch, shape, "/t.S/Ok", Duration::from_secs(10)),
        )
        .await;
        assert_eq!(s.code(), Code::Ok, "{shape:?}: {s:?}");
    }
    assert_eq!(second.opens().len(), 4);
    let _ = std::fs::remove_file(&path);
}

/// A call made the instant the `unix:` server restarted, before the client's connection task has read the
/// old socket's EOF: h2 writes the HEADERS into the dead socket and fails the stream with an I/O error
/// ("broken pipe"), which the channel must treat as processed (h2 cannot say whether they left), so without
/// a policy such a call fails UNAVAILABLE (observed; spec §6 "Streams ≤ last_stream_id ... PROCESSED"). With
/// a retry policy on UNAVAILABLE the policy retry reaches the new server.
#[tokio::test(start_paused = true)]
async fn unix_call_right_after_restart_is_recovered_by_the_policy() {
    let path = socket_path("restart-now");
    let h = || {
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_ok() {
                s.ok(b"ok");
            }
        })
    };
    let first = H2Server::unix(path.clone(), defaults, h());
    let ch = channel_with_config(
        &first.target(),
        retry(3, &["UNAVAILABLE"]).service(SVC).max_backoff("10s"),
    );
    guarded("first", ch.unary_raw("/t.S/Ok", Request::new(Bytes::new())))
        .await
        .expect("first");
    first.kill();
    tokio::task::yield_now().await;
    let second = H2Server::unix(path.clone(), defaults, h());
    let r = guarded(
        "right after",
        ch.unary_raw("/t.S/Ok", Request::new(Bytes::new())),
    )
    .await;
    let _ = std::fs::remove_file(&path);
    r.expect("a call right after the restart, retried by the policy");
    assert_eq!(second.opens().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_unix_target_retries_under_its_retry_policy() {
    let path = support::socket_path("streaming-retry-unix");
    let server = interop::faulty::FaultyServer::start_unix(&path)
        .await
        .expect("bind unix socket");
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b,
    );
    let r = guarded(
        "unary",
        ch.unary_raw(
            methods::FLAKY,
            flaky_request(
                Request::new(Bytes::new()),
                "unary",
                &[("x-fail-times", "1")],
            ),
        ),
    )
    .await
    .expect("retried over the unix socket");
    assert_eq!(r.trailers().get("x-attempt"), Some("2"));
    assert_eq!(
        attempts(&[&server], "unary"),
        vec![(1, None), (2, Some("1".into()))]
    );
    let resp = one_failing_client_stream(&ch, "stream")
        .await
        .expect("retried over the unix socket");
    assert_eq!(resp.message().attempt, 2);
    let _ = std::fs::remove_file(&path);
}

/// A `unix:` target has the same connectivity life as any other (it goes through the same control plane):
/// IDLE until used, READY once its connection answered, IDLE again after the idle timeout, SHUTDOWN after
/// `close()` (and a call then fails UNAVAILABLE); its calls count in `stats()`.
#[tokio::test(start_paused = true)]
async fn a_unix_target_has_state_idle_timeout_close_and_stats() {
    use grpc_channel::ConnectivityState;

    let path = socket_path("lifecycle");
    let server = H2Server::unix(
        path.clone(),
        defaults,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_ok() {
                s.ok(b"up");
            }
        }),
    );
    let ch = Channel::builder(server.target())
        .idle_timeout(Duration::from_secs(60))
        .build()
        .expect("channel");
    assert_eq!(ch.state(), ConnectivityState::Idle);
    let call = || {
        ch.unary_raw(
            "/t.S/Up",
            Request::new(Bytes::new()).with_timeout(Duration::from_secs(10)),
        )
    };
    let r = guarded("a call", call()).await.expect("answered");
    assert_eq!(&r.message()[..], b"up");
    assert_eq!(ch.state(), ConnectivityState::Ready);
    let far = tokio::time::Instant::now() + Duration::from_secs(300);
    let state = guarded(
        "the idle timeout",
        ch.wait_for_state_change(ConnectivityState::Ready, far),
    )
    .await;
    assert_eq!(
        state,
        ConnectivityState::Idle,
        "no call for the idle timeout"
    );
    guarded("a call after IDLE", call())
        .await
        .expect("connects again");
    assert_eq!(server.connections(), 2, "a new connection after IDLE");
    let stats = ch.stats();
    assert_eq!((stats.calls_started, stats.calls_succeeded), (2, 2));
    ch.close();
    assert_eq!(ch.state(), ConnectivityState::Shutdown);
    let status = guarded("a call after close", call())
        .await
        .expect_err("closed");
    assert_eq!(status.code(), Code::Unavailable, "{status}");
    let _ = std::fs::remove_file(&path);
}
