//! gRFC A6 retries end to end, for unary calls whose service config has a retry policy: backoff, maxAttempts,
//! retryable and fatal codes, server pushback, the deadline across attempts, a failed pick that goes to the
//! policy, a call dropped during a backoff, and every attempt carrying the same request. Against the
//! fault-injecting server and the scriptable h2 server over real sockets, on tokio's paused clock.
//! (Hedging: hedging.rs; throttling: throttling.rs; transparent retries: transparent_retry.rs; streaming
//! calls: streaming_retry.rs.)

mod support;

use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Encoding, MessageOptions, Request};
use interop::faulty::methods;
use support::config::{retry, retry_config};
use support::flaky::{attempts, channel_with, flaky_unary};
use support::frames::deframe;
use support::guards::{guarded, settle};
use support::h2_server::{defaults, handler, H2Server, Stream, SVC};
use support::{channel_with_config, reserved_port};
use tokio::net::TcpListener;
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn a_retryable_failure_is_retried_with_backoff_until_success() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(4, &["UNAVAILABLE"])),
        |b| b,
    );
    let start = Instant::now();
    let r = flaky_unary(&ch, "k", &[("x-fail-times", "2")])
        .await
        .expect("third attempt succeeds");
    let elapsed = start.elapsed();
    assert_eq!(r.trailers().get("x-attempt"), Some("3"));
    assert_eq!(
        attempts(&[&server], "k"),
        vec![(1, None), (2, Some("1".into())), (3, Some("2".into()))],
        "grpc-previous-rpc-attempts counts the earlier attempts"
    );
    // Backoffs of 0.1 s and 0.2 s, each ± 20 %.
    assert!(
        elapsed >= Duration::from_millis(240) && elapsed <= Duration::from_millis(400),
        "{elapsed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_max_attempts_with_the_last_status() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(3, &["UNAVAILABLE"])),
        |b| b,
    );
    let status = flaky_unary(&ch, "k", &[("x-fail-times", "10")])
        .await
        .expect_err("always fails");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        attempts(&[&server], "k").len(),
        3,
        "maxAttempts includes the original"
    );
}

#[tokio::test(start_paused = true)]
async fn a_non_retryable_code_is_returned_at_once() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(5, &["UNAVAILABLE"])),
        |b| b,
    );
    let status = flaky_unary(&ch, "k", &[("x-fail-times", "1"), ("x-fail-code", "3")])
        .await
        .expect_err("INVALID_ARGUMENT");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(attempts(&[&server], "k").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn server_pushback_sets_the_delay_or_stops_retries() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(5, &["UNAVAILABLE"])),
        |b| b,
    );
    let start = Instant::now();
    flaky_unary(
        &ch,
        "later",
        &[("x-fail-times", "1"), ("x-pushback-ms", "700")],
    )
    .await
    .expect("retried after the pushback");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(700) && elapsed < Duration::from_millis(750),
        "{elapsed:?}"
    );

    let status = flaky_unary(
        &ch,
        "never",
        &[("x-fail-times", "1"), ("x-pushback-ms", "-1")],
    )
    .await
    .expect_err("pushback said stop");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(attempts(&[&server], "never").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_spans_every_attempt() {
    let server = support::faulty_server().await;
    let ch = channel_with(
        &server.target(),
        Some(&retry_config(5, &["UNAVAILABLE"])),
        |b| b,
    );
    let mut req = Request::new(Bytes::new()).with_timeout(Duration::from_millis(250));
    req.metadata_mut().append("x-test-key", "k").expect("key");
    req.metadata_mut().append("x-fail-times", "1").expect("h");
    req.metadata_mut()
        .append("x-hang-attempts", "2")
        .expect("h");
    let start = Instant::now();
    let status = ch
        .unary_raw(methods::FLAKY, req)
        .await
        .expect_err("deadline");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(250) && elapsed < Duration::from_millis(300),
        "{elapsed:?}"
    );
    assert_eq!(attempts(&[&server], "k").len(), 2);
}

// ---- Against the scriptable h2 server ------------------------------------------------------------------

/// Dropping a unary call's future during a retry backoff ends it: no further attempt is made.
#[tokio::test(start_paused = true)]
async fn dropping_a_unary_call_during_backoff_stops_retrying() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            let _ = s.read_to_end().await;
            s.trailers_only("14", &[("grpc-retry-pushback-ms", "5000")]);
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), retry(5, &["UNAVAILABLE"]).service(SVC));
    let gave_up = tokio::time::timeout(
        Duration::from_secs(1),
        ch.unary_raw("/t.S/Unary", Request::new(Bytes::from_static(b"x"))),
    )
    .await;
    assert!(gave_up.is_err(), "still backing off");
    tokio::time::sleep(Duration::from_secs(30)).await;
    settle(Duration::from_millis(100)).await;
    assert_eq!(
        server.opens().len(),
        1,
        "no attempt after the call was dropped"
    );
}

/// A fail-fast call to a backend that refuses connections: the failed pick is UNAVAILABLE and goes to the
/// policy (A6); the backend comes up during the backoff and a retry succeeds (its `grpc-previous-rpc-attempts`
/// counts the failed pick). Without a policy the call fails at once.
#[tokio::test(start_paused = true)]
async fn fail_fast_pick_failure_goes_to_the_retry_policy() {
    let (socket, addr) = reserved_port();
    let ch = channel_with_config(
        &format!("ipv4:{addr}"),
        retry(5, &["UNAVAILABLE"])
            .service(SVC)
            .initial_backoff("1s")
            .max_backoff("10s"),
    );
    let plain = Channel::builder(format!("ipv4:{addr}"))
        .service_config_lookup(false)
        .build()
        .expect("channel");
    let status = guarded(
        "no policy",
        plain.unary_raw("/t.S/Ok", Request::new(Bytes::new())),
    )
    .await
    .expect_err("nothing listens");
    assert_eq!(status.code(), Code::Unavailable);

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
    settle(Duration::from_millis(300)).await;
    drop(socket);
    let listener = TcpListener::bind(addr).await.expect("rebind");
    let server = H2Server::serve_tcp(
        listener,
        defaults,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_ok() {
                s.ok(b"up");
            }
        }),
    );
    let r = guarded("retried after the failed pick", call)
        .await
        .expect("join")
        .expect("a retry after the backend came up");
    assert_eq!(&r.message()[..], b"up");
    let opens = server.opens();
    assert_eq!(opens.len(), 1);
    let prev = opens[0].headers.get("grpc-previous-rpc-attempts").cloned();
    assert!(
        prev.is_some(),
        "the failed pick was a policy attempt: {prev:?}"
    );
}

/// A gzip bidi call with per-message compression off for one message, metadata (repeated ASCII and -bin), a
/// custom `:authority`; the first attempt fails after reading everything, the retry replays it: every
/// attempt carries the same headers and byte-identical messages with the same compressed flags.
#[tokio::test(start_paused = true)]
async fn every_attempt_carries_the_same_compression_metadata_and_authority() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_err() {
                return;
            }
            if s.prev() == 0 {
                s.trailers_only("14", &[]);
            } else {
                s.ok(b"done");
            }
        }),
    )
    .await;
    let ch = Channel::builder(server.target())
        .default_service_config(retry(3, &["UNAVAILABLE"]).service(SVC).max_backoff("10s"))
        .service_config_lookup(false)
        .authority("svc.example:8443")
        .build()
        .expect("channel");
    let mut req = Request::new(()).with_compression(Encoding::Gzip);
    req.metadata_mut().append("x-md", "one").expect("md");
    req.metadata_mut().append("x-md", "two").expect("md");
    req.metadata_mut()
        .append_bin("x-blob-bin", &[0, 255, 1, 254])
        .expect("bin");
    guarded("compressed bidi", async {
        let (mut tx, mut rx) = ch.streaming_raw("/t.S/Bidi", req).await.expect("start");
        tx.send(Bytes::from(vec![b'a'; 2000])).await.expect("m0");
        tx.send_with(
            Bytes::from(vec![b'b'; 2000]),
            MessageOptions::uncompressed(),
        )
        .await
        .expect("m1");
        tx.send(Bytes::from(vec![b'c'; 2000])).await.expect("m2");
        tx.finish().await.expect("finish");
        assert_eq!(&rx.message().await.expect("ok").expect("msg")[..], b"done");
    })
    .await;
    let opens = server.opens();
    assert_eq!(opens.len(), 2);
    let bodies: Vec<Vec<(u8, Vec<u8>)>> = opens
        .iter()
        .map(|o| deframe(&server.body(o.conn, o.id)))
        .collect();
    assert_eq!(bodies[0], bodies[1], "the replay is byte-identical");
    let flags: Vec<u8> = bodies[1].iter().map(|m| m.0).collect();
    assert_eq!(flags, vec![1, 0, 1]);
    for o in &opens {
        let h = &o.headers;
        assert_eq!(o.authority.as_deref(), Some("svc.example:8443"));
        assert_eq!(
            h.get("grpc-encoding").map(|v| v.as_bytes()),
            Some(&b"gzip"[..])
        );
        let md: Vec<&[u8]> = h.get_all("x-md").iter().map(|v| v.as_bytes()).collect();
        assert_eq!(md, vec![&b"one"[..], &b"two"[..]]);
        assert!(h.get("x-blob-bin").is_some());
        assert_eq!(h.get("x-blob-bin"), opens[0].headers.get("x-blob-bin"));
        assert_eq!(h.get("te").map(|v| v.as_bytes()), Some(&b"trailers"[..]));
    }
}
