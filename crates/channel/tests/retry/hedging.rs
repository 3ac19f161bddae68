//! gRFC A6 hedging end to end: a hedge goes to another backend when the original hangs and the loser is
//! cancelled, for unary and server-streaming calls; a non-fatal status sends the next hedge at once; a hedge
//! that wins and then fails mid-stream is not hedged again; a hedge that cannot make progress (queued behind
//! MAX_CONCURRENT_STREAMS, or on a backend that never reads) does not stall the sender; messages around the
//! commit reach the winner once and in order; dropping an uncommitted call cancels every attempt. Against the
//! fault-injecting server and the scriptable h2 server over real sockets, on tokio's paused clock.

use grpc_test_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Code, Request, Status};
use h2::Reason;
use interop::faulty::{methods, AttemptOutcome, Event, FlakyItem, FlakyMessage};
use support::config::{hedging, hedging_config};
use support::flaky::{attempts, channel_with, ended, flaky_request, flaky_unary, target_of};
use support::frames::{grpc_message, payloads};
use support::guards::{eventually, eventually_every, guarded, settle, GUARD, SETTLE_STEP};
use support::h2_server::{defaults, handler, trailers, H2Server, Stream, SVC};
use support::{channel_with_config, ipv4_target};
use tokio::time::Instant;

// ---- Against the fault-injecting server ----------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_hedge_wins_when_the_original_hangs_and_the_loser_is_cancelled() {
    let a = support::faulty_server().await;
    let b = support::faulty_server().await;
    let ch = channel_with(
        &target_of(&[&a, &b]),
        Some(&hedging_config(3, "0.2s")),
        |b| b,
    );
    // Let both backends connect first, so the hedge has somewhere else to go.
    let warm = flaky_unary(&ch, "warm-1", &[]).await.expect("warm");
    drop(warm);
    flaky_unary(&ch, "warm-2", &[]).await.expect("warm");
    let start = Instant::now();
    let hedged = {
        let ch = ch.clone();
        tokio::spawn(async move { flaky_unary(&ch, "k", &[("x-hang-attempts", "1")]).await })
    };
    // Another call in between takes the other backend's turn in the rotation, so rotation alone would send
    // the hedge back to the original's backend: only the avoid hint sends it elsewhere.
    tokio::time::sleep(Duration::from_millis(100)).await;
    flaky_unary(&ch, "other", &[]).await.expect("other call");
    hedged.await.expect("task").expect("the hedge answers");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(200) && elapsed < Duration::from_millis(300),
        "{elapsed:?}"
    );
    // The original and one hedge, on different backends: the hedge avoided the address already used.
    let on_a = attempts(&[&a], "k");
    let on_b = attempts(&[&b], "k");
    assert_eq!(on_a.len() + on_b.len(), 2, "{on_a:?} {on_b:?}");
    assert_eq!(
        (on_a.len(), on_b.len()),
        (1, 1),
        "one attempt on each backend"
    );
    let mut previous: Vec<Option<String>> = on_a.into_iter().chain(on_b).map(|(_, p)| p).collect();
    previous.sort();
    assert_eq!(previous, vec![None, Some("1".into())]);
    // The hanging original was cancelled.
    for _ in 0..100 {
        let reset = [&a, &b].iter().flat_map(|s| s.events()).any(|e| {
            e == Event::Reset {
                path: methods::FLAKY.to_owned(),
                reason: h2::Reason::CANCEL,
            }
        });
        if reset {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the losing hedge was never cancelled");
}

#[tokio::test(start_paused = true)]
async fn a_non_fatal_status_sends_the_next_hedge_at_once() {
    let server = support::faulty_server().await;
    let ch = channel_with(&server.target(), Some(&hedging_config(3, "10s")), |b| b);
    let start = Instant::now();
    let r = flaky_unary(&ch, "k", &[("x-fail-times", "1")])
        .await
        .expect("second attempt");
    assert_eq!(r.trailers().get("x-attempt"), Some("2"));
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "not after the 10 s hedging delay: {:?}",
        start.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn server_streaming_hedge_wins_when_the_original_hangs_and_the_loser_is_cancelled() {
    let a = support::faulty_server().await;
    let b = support::faulty_server().await;
    let ch = channel_with(
        &target_of(&[&a, &b]),
        Some(&hedging_config(3, "0.2s")),
        |b| b,
    );
    // Let both backends connect first, so the hedge has somewhere else to go.
    for key in ["warm-1", "warm-2"] {
        guarded(
            "warm-up",
            ch.unary_raw(
                methods::FLAKY,
                flaky_request(Request::new(Bytes::new()), key, &[]),
            ),
        )
        .await
        .expect("warm-up call");
    }
    let start = Instant::now();
    let resp = guarded(
        "server streaming",
        ch.server_streaming::<FlakyMessage, FlakyItem>(
            methods::FLAKY_SERVER_STREAM,
            flaky_request(
                Request::new(FlakyMessage::default()),
                "k",
                &[("x-hang-attempts", "1"), ("x-response-count", "3")],
            ),
        ),
    )
    .await
    .expect("the hedge answers");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(200) && elapsed < Duration::from_millis(300),
        "the hedge went out after hedgingDelay: {elapsed:?}"
    );
    let mut stream = resp.into_message();
    let mut items = Vec::new();
    while let Some(item) = guarded("item", stream.message()).await.expect("item") {
        items.push(item);
    }
    assert_eq!(items.len(), 3);
    assert!(
        items.iter().all(|i| i.client_attempt == 2),
        "every response came from the hedge: {items:?}"
    );
    let (on_a, on_b) = (attempts(&[&a], "k"), attempts(&[&b], "k"));
    assert_eq!(
        (on_a.len(), on_b.len()),
        (1, 1),
        "one attempt on each backend: {on_a:?} {on_b:?}"
    );
    // The original's backend saw it reset with CANCEL once the hedge won.
    let original = if on_a[0].1.is_none() { &a } else { &b };
    eventually("the losing original is cancelled", || {
        ended(original, "k")
            .iter()
            .any(|e| e.outcome == AttemptOutcome::Reset(h2::Reason::CANCEL))
    })
    .await;
}

// ---- Against the scriptable h2 server ------------------------------------------------------------------

/// A hedge wins (its headers commit the call, the original is cancelled), streams messages, then fails
/// UNAVAILABLE (non-fatal) mid-stream: the messages arrive whole and in order, the failure is the call's
/// status, and no further hedge starts.
#[tokio::test(start_paused = true)]
async fn server_streaming_hedge_wins_then_fails_mid_stream_is_not_retried() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_err() {
                return;
            }
            if s.prev() == 0 {
                s.wait_reset().await;
                return;
            }
            if let Some(mut out) = s.headers() {
                for i in 0..200u32 {
                    let item = FlakyItem {
                        index: i,
                        client_attempt: s.prev() + 1,
                        attempt: 0,
                    };
                    let mut payload = prost::Message::encode_to_vec(&item);
                    payload.extend(std::iter::repeat_n(b'z', (i as usize * 37) % 3000));
                    let _ = out.send_data(grpc_message(&payload), false);
                }
                settle(Duration::from_millis(20)).await;
                let _ = out.send_trailers(trailers("14", &[]));
            }
        }),
    )
    .await;
    let ch = channel_with_config(&server.target(), hedging(3, "0.1s").service(SVC));
    let (status, got) = guarded("hedged server stream", async {
        let (mut tx, mut rx) = ch
            .streaming_raw("/t.S/ServerStream", Request::new(()))
            .await
            .expect("start");
        tx.send(Bytes::from_static(b"req")).await.expect("send");
        tx.finish().await.expect("finish");
        let mut got = Vec::new();
        let status = loop {
            match rx.message().await {
                Ok(Some(m)) => got.push(m),
                Ok(None) => break Status::new(Code::Ok, ""),
                Err(s) => break s,
            }
        };
        (status, got)
    })
    .await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(got.len(), 200);
    for (i, m) in got.iter().enumerate() {
        let item: FlakyItem =
            prost::Message::decode(&m[..m.len() - (i * 37) % 3000]).expect("item");
        assert_eq!(item.index as usize, i);
        assert_eq!(item.client_attempt, 2);
    }
    settle(Duration::from_millis(500)).await;
    assert_eq!(
        server.opens().len(),
        2,
        "no hedge after the commit: {:?}",
        server.opens().iter().map(|o| o.id).collect::<Vec<_>>()
    );
    assert!(
        server.resets().iter().any(|r| r.reason == Reason::CANCEL),
        "the losing original was cancelled: {:?}",
        server.resets()
    );
}

/// A bidi call with a hedging policy on a server allowing one stream at a time (MAX_CONCURRENT_STREAMS = 1):
/// the hedge waits in h2's local queue, where h2 gives a stream that is not open yet no send capacity, so it
/// never catches up. The sender must not wait for it: the original, which is healthy, gets the whole request
/// and answers. A6 hedging forwards messages to every attempt, but a stuck hedge must not stall the call
/// (grpc-java paces by the readiest attempt and buffers for the others). The failure this guards against:
/// the driver took the next message only once every attempt had caught up, so `send` blocked until the
/// call's deadline.
#[tokio::test(start_paused = true)]
async fn a_hedge_queued_locally_does_not_stall_the_sender() {
    fn one_stream(b: &mut h2::server::Builder) {
        b.max_concurrent_streams(1);
    }
    let server = H2Server::tcp(
        one_stream,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_ok() {
                s.ok(b"done");
            }
        }),
    )
    .await;
    let ch = channel_with_config(
        &server.target(),
        hedging(2, "0.1s").service(SVC).round_robin(),
    );
    let sent = AtomicUsize::new(0);
    let outcome = tokio::time::timeout(GUARD, async {
        let (mut tx, mut rx) = ch
            .streaming_raw("/t.S/Bidi", Request::new(()))
            .await
            .expect("start");
        tx.send(Bytes::from_static(b"m0")).await.expect("m0");
        // The hedge starts at 0.1 s and is queued behind the original (one stream allowed).
        settle(Duration::from_millis(300)).await;
        for m in [&b"m1"[..], b"m2", b"m3", b"m4"] {
            tx.send(Bytes::copy_from_slice(m)).await.expect("send");
            sent.fetch_add(1, Ordering::SeqCst);
        }
        tx.finish().await.expect("finish");
        let reply = rx.message().await.expect("reply").expect("one message");
        assert_eq!(&reply[..], b"done");
    })
    .await;
    assert!(
        outcome.is_ok(),
        "the call hung: after m0, {} more sends returned, then the sender stayed blocked behind a hedge that \
         cannot open; server saw streams {:?}, original got {:?}",
        sent.load(Ordering::SeqCst),
        server.opens(),
        payloads(&server.body_of_id(1).0)
    );
}

/// The same with two backends, more realistic: the hedge lands on one that accepts the stream but never reads
/// it (its flow-control window closes). The original backend is healthy and answers once the request is
/// complete, and the sender is not paced by the stuck hedge. Hedging exists to route around a slow backend;
/// a slow backend must not stall the call.
#[tokio::test(start_paused = true)]
async fn a_hedge_on_a_backend_that_never_reads_does_not_stall_the_sender() {
    let good = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_ok() {
                s.ok(b"done");
            }
        }),
    )
    .await;
    let stuck = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            s.wait_reset().await;
        }),
    )
    .await;
    let ch = channel_with_config(
        &ipv4_target(&[good.addr(), stuck.addr()]),
        hedging(2, "0.1s").service(SVC).round_robin(),
    );
    // Warm both subchannels so round_robin has both READY.
    ch.connect();
    settle(Duration::from_millis(200)).await;
    let outcome = tokio::time::timeout(GUARD, async {
        let (mut tx, mut rx) = ch
            .streaming_raw("/t.S/Bidi", Request::new(()))
            .await
            .expect("start");
        tx.send(Bytes::from(vec![1u8; 1000])).await.expect("m0");
        settle(Duration::from_millis(300)).await;
        // 40 × 16 KiB: far more than the stuck backend's 64 KiB window.
        for _ in 0..40 {
            tx.send(Bytes::from(vec![2u8; 16 << 10]))
                .await
                .expect("send");
        }
        tx.finish().await.expect("finish");
        let reply = rx.message().await.expect("reply").expect("one message");
        assert_eq!(&reply[..], b"done");
    })
    .await;
    let on_stuck = stuck.opens().len();
    let on_good = good.opens();
    assert!(
        outcome.is_ok(),
        "the call hung: hedge on the stuck backend paces the sender (stuck: {on_stuck} streams, good: {on_good:?})"
    );
}

/// A hedged bidi call commits to the hedge (it sends response headers after the first message), while
/// the application streams 200 messages as fast as `send` allows. The committed stream gets every message
/// exactly once, in order, then exactly one END_STREAM; the losing original is reset with CANCEL.
#[tokio::test(start_paused = true)]
async fn messages_around_a_hedge_commit_arrive_once_in_order() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            if s.previous_attempts().is_none() {
                // The original never answers; it reads (so it is never the slow one) until reset.
                let _ = s.read_to_end().await;
                return;
            }
            // The hedge: headers after its first message, then read everything, then answer.
            if s.read_bytes(1).await.is_err() {
                return;
            }
            let Some(mut send) = s.headers() else { return };
            if s.read_to_end().await.is_ok() {
                let _ = send.send_data(grpc_message(b"done"), false);
                let _ = send.send_trailers(trailers("0", &[]));
            }
        }),
    )
    .await;
    let ch = channel_with_config(
        &server.target(),
        hedging(2, "0.05s").service(SVC).round_robin(),
    );
    let outcome = tokio::time::timeout(GUARD, async {
        let (mut tx, mut rx) = ch
            .streaming_raw("/t.S/Bidi", Request::new(()))
            .await
            .expect("start");
        for i in 0..200u32 {
            tx.send(Bytes::from(format!("m{i:03}")))
                .await
                .expect("send");
            if i % 20 == 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        tx.finish().await.expect("finish");
        let reply = rx.message().await.expect("reply").expect("message");
        assert_eq!(&reply[..], b"done");
        assert!(rx.message().await.expect("OK").is_none());
    })
    .await;
    assert!(outcome.is_ok(), "hung: {:?}", server.opens());
    let opens = server.opens();
    let hedge = opens
        .iter()
        .find(|o| o.previous_attempts().as_deref() == Some("1"))
        .map(|o| o.id)
        .expect("a hedge was sent");
    let (body, ends) = server.body_of_id(hedge);
    let got: Vec<String> = payloads(&body)
        .into_iter()
        .map(|m| String::from_utf8(m).expect("utf8"))
        .collect();
    let want: Vec<String> = (0..200u32).map(|i| format!("m{i:03}")).collect();
    assert_eq!(
        got, want,
        "every message once, in order, on the committed hedge"
    );
    assert_eq!(ends, 1, "exactly one END_STREAM");
    eventually_every(SETTLE_STEP, "the losing original is cancelled", || {
        server
            .resets()
            .iter()
            .any(|r| r.id == 1 && r.reason == Reason::CANCEL)
    })
    .await;
}

/// Dropping the receiving half of an uncommitted hedged call resets every live attempt with CANCEL,
/// and a later `send` fails CANCELLED.
#[tokio::test(start_paused = true)]
async fn dropping_the_receiver_before_commit_cancels_every_attempt() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            let _ = s.read_to_end().await;
        }),
    )
    .await;
    let ch = channel_with_config(
        &server.target(),
        hedging(3, "0.1s").service(SVC).round_robin(),
    );
    let outcome = tokio::time::timeout(GUARD, async {
        let (mut tx, rx) = ch
            .streaming_raw("/t.S/Bidi", Request::new(()))
            .await
            .expect("start");
        tx.send(Bytes::from_static(b"a")).await.expect("send");
        settle(Duration::from_millis(350)).await;
        assert_eq!(server.opens().len(), 3, "original and two hedges");
        drop(rx);
        eventually_every(SETTLE_STEP, "every attempt reset", || {
            server.resets().len() == 3
        })
        .await;
        let err = tx
            .send(Bytes::from_static(b"b"))
            .await
            .expect_err("cancelled");
        assert_eq!(err.code(), Code::Cancelled);
    })
    .await;
    assert!(outcome.is_ok(), "{:?}", server.events());
    assert!(server.resets().iter().all(|r| r.reason == Reason::CANCEL));
}
